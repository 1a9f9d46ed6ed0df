"""Turn resolved configs into text and JSON for `ferry validate` (secrets masked)."""

from __future__ import annotations

from typing import Any

from ferry.config import Config, Flow
from ferry.errors import Problem

_FEATURES = ("refresh_topics", "refresh_groups", "sync_topic_configs", "sync_topic_acls",
             "emit_heartbeats", "emit_checkpoints", "sync_group_offsets")


def flow_json(flow: Flow) -> dict[str, Any]:
    return {
        "name": flow.name,
        "source": flow.source,
        "target": flow.target,
        "enabled": flow.enabled,
        "dag_id": flow.dag_id,
        "topics": {"include": flow.topics.include, "exclude": flow.topics.exclude},
        "groups": {"include": flow.groups.include, "exclude": flow.groups.exclude},
        "config_properties_exclude": flow.config_properties.exclude,
        "replication_policy": {
            "class": flow.policy.class_name,
            "separator": flow.policy.separator,
            "internal_separator_enabled": flow.policy.internal_separator_enabled,
        },
        "replication_factor": flow.replication_factor,
        "features": {
            name.replace("_", "."): {
                "enabled": getattr(flow, name).active,
                "interval_seconds": getattr(flow, name).seconds,
                "describe": getattr(flow, name).describe(),
            }
            for name in _FEATURES
        },
        "heartbeats_replication": flow.heartbeats_replication,
        "offset_lag_max": flow.offset_lag_max,
        "use_defaults_from": flow.use_defaults_from,
        "use_incremental_alter_configs": flow.use_incremental_alter_configs,
        "tasks_max": flow.tasks_max,
        "ferry": {
            "state.dir": flow.ferry.state_dir,
            "spark.master": flow.ferry.spark_master,
            "delivery": flow.ferry.delivery,
            "range.max.records": flow.ferry.range_max_records,
            "on.gap": flow.ferry.on_gap,
            "transaction.max.records": flow.ferry.transaction_max_records,
            "transaction.max.seconds": flow.ferry.transaction_max_seconds,
            "schedule": flow.ferry.schedule,
            "sync.acls.prefixed": flow.ferry.sync_acls_prefixed,
            "sync.acls.groups": flow.ferry.sync_acls_groups,
            "identity.loops.accepted": flow.ferry.identity_loops_accepted,
            "kafka.retry.seconds": flow.ferry.kafka_retry_seconds,
            "copy.timeout.seconds": flow.ferry.copy_timeout_seconds,
            "continuous.run.seconds": flow.ferry.continuous_run_seconds,
            "task.retries": flow.ferry.task_retries,
            "copy.retries": flow.ferry.copy_retries,
            "task.retry.delay.seconds": flow.ferry.task_retry_delay_seconds,
            "task.pool": flow.ferry.task_pool or "(default_pool)",
            "task.queue": flow.ferry.task_queue or "(default queue)",
        },
        "clients": {
            "source_consumer": flow.consumer.shown(),
            "target_producer": flow.producer.shown(),
            "source_admin": flow.source_admin.shown(),
            "target_admin": flow.target_admin.shown(),
        },
    }


def config_json(config: Config) -> dict[str, Any]:
    return {
        "ok": True,
        "path": config.path,
        "clusters": [
            {"alias": c.alias, "bootstrap_servers": c.bootstrap_servers,
             "client": c.admin.shown(), "airflow_connection": c.connection or None}
            for c in config.clusters.values()
        ],
        "flows": [flow_json(f) for f in config.enabled_flows],
        "heartbeat_only_pairs": [f.name for f in config.flows if not f.enabled],
        "translated_from": config.translated_from or None,
        "translated": [{"setting": s, "became": b} for s, b in config.translated],
        "profiles": list(config.profiles),
        "warnings": list(config.warnings),
    }


def problems_json(problems: list[Problem], path: str) -> dict[str, Any]:
    return {
        "ok": False,
        "path": path,
        "problems": [
            {"key": p.key, "value": p.value, "message": p.message, "fix": p.fix}
            for p in problems
        ],
    }


def _client_line(settings: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def flow_text(flow: Flow) -> list[str]:
    """One flow as `ferry validate` prints it (secrets masked)."""
    data = flow_json(flow)
    policy = data["replication_policy"]
    lines = [
        f"flow {flow.name}  (Airflow DAG {flow.dag_id})",
        f"  topics:   include '{flow.topics.include}'  exclude '{flow.topics.exclude}'",
        f"  groups:   include '{flow.groups.include}'  exclude '{flow.groups.exclude}'",
        f"  policy:   {policy['class'].rsplit('.', 1)[-1]} "
        f"(separator {policy['separator']!r}); e.g. 'orders' -> "
        f"{flow.remote_topic('orders')!r}",
        f"  replication.factor: {flow.replication_factor}   tasks.max: "
        f"{flow.tasks_max if flow.tasks_max is not None else 'default'}",
        "  features: " + "; ".join(f"{k} {v['describe']}" for k, v in data["features"].items()),
        "  ferry:    " + ", ".join(f"{k}={v}" for k, v in data["ferry"].items()),
        "  clients:",
    ]
    for role, settings in data["clients"].items():
        lines.append(f"    {role.replace('_', ' ')}: {_client_line(settings)}")
    return lines


def config_text(config: Config) -> str:
    lines = [f"config: {config.path}  ({len(config.clusters)} clusters, "
             f"{len(config.enabled_flows)} enabled flows)", "clusters:"]
    for cluster in config.clusters.values():
        lines.append(f"  {cluster.alias}: {cluster.bootstrap_servers}" + (
            f"  (client settings from Airflow connection {cluster.connection!r})"
            if cluster.connection else ""))
    for flow in config.enabled_flows:
        lines += flow_text(flow)
    others = [f.name for f in config.flows if not f.enabled]
    if others:
        lines.append(f"heartbeat-only pairs (no records mirrored): {', '.join(others)}")
    if config.profiles:
        lines.append("profiles:")
        lines += [f"  {line}" for line in config.profiles]
    if config.translated:
        lines.append(f"translated from a {config.translated_from}:")
        lines += [f"  {setting}  ->  {became}" for setting, became in config.translated]
    if config.warnings:
        lines.append("warnings:")
        lines += [f"  - {w}" for w in config.warnings]
    return "\n".join(lines)
