"""The sync step: keep the target's shape in step with the source, as MM2 does.

Remote topics and partitions (created before any record of them is copied; never shrunk,
never deleted), topic configs and ACLs, each step when it is due (`ferry.core.sync.schedule`).
Shared by `ferry sync` (forced, or a dry run), `ferry plan`/`ferry mirror` and the DAG's
`cycle` task. The pure diffs live in `ferry.core.sync.*`; this module reads both
clusters, applies the diffs and records what it did in the `syncs` table.

Capabilities: a cluster without an authorizer (ACL API disabled) skips ACL sync, with one
warning per run when it is the target; a target without IncrementalAlterConfigs follows
`use.incremental.alter.configs` (requested falls back to AlterConfigs, required fails).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ferry.config import Flow
from ferry.core.sync.acls import AclActions, diff_acls
from ferry.core.sync.configs import (
    AlterTopicConfig,
    ReplaceTopicConfig,
    diff_incremental,
    diff_legacy,
    fallback_api,
    first_api,
)
from ferry.core.sync.schedule import DUE, STEPS, due_steps
from ferry.core.sync.topics import (
    TopicActions,
    diff_topics,
    mirrored_topics,
    over_partition_limit,
)
from ferry.errors import TerminalError

if TYPE_CHECKING:
    from ferry.steps.ports import StateStore, SyncSource, SyncTarget

log = logging.getLogger(__name__)

ConfigChange = AlterTopicConfig | ReplaceTopicConfig


@dataclass(frozen=True)
class SyncReport:
    """What one sync found and did (or, in a dry run, would do)."""

    flow: str
    applied: bool
    steps: Mapping[str, str]
    """Each step -> `done`, or why it did not run (off, not due, skipped: ...)."""
    mirrored: Mapping[str, int]
    """Mirrored source topics -> their partition counts on the source."""
    remote: Mapping[str, int]
    """Remote topic -> partition count on the target after this sync (dry run: as it
    would be)."""
    topics: TopicActions = field(default_factory=TopicActions)
    config_api: str = "incremental"
    configs: tuple[ConfigChange, ...] = ()
    acls: AclActions = field(default_factory=AclActions)
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def ready(self, flow: Flow) -> dict[str, int]:
        """Source topic -> how many of its partitions have a remote partition to copy to."""
        counts = {t: min(n, self.remote.get(flow.remote_topic(t), 0))
                  for t, n in self.mirrored.items()}
        return {t: n for t, n in counts.items() if n > 0}

    @property
    def changes(self) -> int:
        return (len(self.topics.create) + len(self.topics.grow) + len(self.configs)
                + len(self.acls.create))

    def to_json(self) -> dict[str, Any]:
        return {
            "flow": self.flow, "applied": self.applied, "steps": dict(self.steps),
            "topics": {
                "create": [{"topic": c.name, "source_topic": c.source_topic,
                            "partitions": c.partitions,
                            "replication_factor": c.replication_factor,
                            "configs": dict(c.configs)} for c in self.topics.create],
                "grow": [{"topic": g.name, "from": g.from_partitions, "to": g.to_partitions}
                         for g in self.topics.grow]},
            "configs": {"api": self.config_api, "changes": [_config_json(c)
                                                            for c in self.configs]},
            "acls": {"create": [a.describe() for a in self.acls.create],
                     "skipped": [{"acl": a.describe(), "reason": why}
                                 for a, why in self.acls.skipped]},
            "warnings": list(self.warnings),
        }

    def lines(self) -> list[str]:
        """One line per change, for people."""
        out = [f"create topic {c.name} ({c.partitions} partitions, replication factor "
               f"{c.replication_factor}"
               + "".join(f", {k}={v}" for k, v in c.configs.items()) + ")"
               for c in self.topics.create]
        out += [f"add partitions to {g.name}: {g.from_partitions} -> {g.to_partitions}"
                for g in self.topics.grow]
        for change in self.configs:
            if isinstance(change, AlterTopicConfig):
                out += [f"set config {change.topic} {k}={v}" for k, v in change.set]
                out += [f"delete config {change.topic} {k} (back to the target's default)"
                        for k in change.delete]
            else:
                out.append(f"replace configs of {change.topic} (changes "
                           f"{', '.join(change.changed)})")
        out += [f"create ACL {a.describe()}" for a in self.acls.create]
        return out


def _config_json(change: ConfigChange) -> dict[str, Any]:
    if isinstance(change, AlterTopicConfig):
        return {"topic": change.topic, "source_topic": change.source_topic,
                "set": dict(change.set), "delete": list(change.delete)}
    return {"topic": change.topic, "source_topic": change.source_topic,
            "replace": dict(change.configs), "changed": list(change.changed)}


def _remembered(flow: Flow) -> dict[str, bool]:
    """Steps whose runs must be remembered (the `syncs` table) to honour the config: an
    interval you set, or a topic refresh that is off (topics are then created once)."""
    return {"topics": flow.refresh_topics.explicit or not flow.refresh_topics.active,
            "configs": flow.sync_topic_configs.explicit, "acls": flow.sync_topic_acls.explicit}


def sync_flow(flow: Flow, *, apply: bool, force: bool = False, run_id: str = "",
              source: SyncSource | None = None, target: SyncTarget | None = None,
              steps: Collection[str] | None = None, state: StateStore | None = None
              ) -> SyncReport:
    """Bring the target in step with the source (or, without `apply`, report what would
    change). `force` runs every enabled step whatever its interval; `steps` limits which
    steps may run (none: only read both clusters' topics). `source` and `target` default
    to the flow's clusters, `state` to its Delta tables."""
    from ferry.state.store import DeltaStore
    from ferry.steps.clusters import Cluster

    source = source or Cluster(flow.source_admin)
    target = target or Cluster(flow.target_admin)
    now = datetime.now(UTC)
    wanted = STEPS if steps is None else tuple(steps)
    state = state or DeltaStore.of(flow)
    last = state.last_steps(flow.name) if wanted and any(_remembered(flow).values()) else {}
    due = {step: why if step in wanted else "not run here"
           for step, why in due_steps(flow, last, now, force).items()}
    source_topics = {t.name: t.partitions for t in source.topics().values()}
    target_topics = {t.name: t.partitions for t in target.topics().values()}
    mirrored = mirrored_topics(flow, source_topics)
    refused = over_partition_limit(flow, mirrored)
    if refused:
        raise TerminalError(refused)
    warnings: list[str] = []
    done = "done" if apply else "dry run"
    topics, api = TopicActions(), first_api(flow.use_incremental_alter_configs)
    configs: tuple[ConfigChange, ...] = ()
    acls = AclActions()
    if due["topics"] == DUE:
        topics = _sync_topics(flow, source, target, mirrored, source_topics, target_topics,
                              apply)
        due["topics"] = done
    if due["configs"] == DUE:  # topics on both sides before this run (MM2's rule)
        both = {t: flow.remote_topic(t) for t in mirrored
                if flow.remote_topic(t) in target_topics}
        api, configs = _sync_configs(flow, source, target, both, apply, warnings)
        due["configs"] = done
    if due["acls"] == DUE:
        found, skipped = _sync_acls(flow, source, target, apply, warnings)
        acls, due["acls"] = found or AclActions(), skipped or done
    remote = dict(target_topics)
    remote.update({c.name: c.partitions for c in topics.create})
    remote.update({g.name: g.to_partitions for g in topics.grow})
    report = SyncReport(flow.name, apply, due, mirrored, remote, topics, api, configs, acls,
                        tuple(warnings))
    if apply and wanted:
        _record(flow, report, run_id, now, state)
    for line in report.lines():
        log.info("%s%s", "" if apply else "would ", line, extra={"flow": flow.name})
    return report


def _sync_topics(flow: Flow, source: SyncSource, target: SyncTarget,
                 mirrored: Mapping[str, int], source_topics: dict[str, int],
                 target_topics: dict[str, int], apply: bool) -> TopicActions:
    missing = [t for t in mirrored if flow.remote_topic(t) not in target_topics]
    actions = diff_topics(flow, source_topics, target_topics, source.topic_configs(missing))
    if apply:
        target.apply_topology(flow, actions)
        target.ensure_offset_map_topic(flow, target_topics)
    return actions


def _sync_configs(flow: Flow, source: SyncSource, target: SyncTarget,
                  remotes: dict[str, str], apply: bool, warnings: list[str]
                  ) -> tuple[str, tuple[ConfigChange, ...]]:
    """(the API used, the changes) for topics present on both sides (MM2's rule)."""
    from ferry.kafka.configs import IncrementalUnsupported

    if not remotes:
        return first_api(flow.use_incremental_alter_configs), ()
    source_configs = source.topic_configs(remotes)
    target_configs = target.topic_configs(remotes.values())
    mode = flow.use_incremental_alter_configs
    api = first_api(mode)
    if api == "incremental":
        changes = diff_incremental(flow, source_configs, target_configs)
        if not apply:
            return api, tuple(changes)
        try:
            target.alter_configs(changes)
            return api, tuple(changes)
        except IncrementalUnsupported:
            api = fallback_api(mode) or ""
            if not api:
                raise TerminalError(
                    f"cluster {flow.target} does not support IncrementalAlterConfigs and "
                    f"{flow.name}.use.incremental.alter.configs=required: set it to requested "
                    "to fall back to AlterConfigs (replaces whole topic configs), or set "
                    "sync.topic.configs.enabled=false") from None
            warnings.append(f"cluster {flow.target} does not support "
                            "IncrementalAlterConfigs: topic configs were replaced whole with "
                            "AlterConfigs (use.incremental.alter.configs=requested)")
            log.warning(warnings[-1], extra={"flow": flow.name})
    replacements = diff_legacy(flow, source_configs, target_configs)
    if apply:
        target.replace_configs(replacements)
    return api, tuple(replacements)


def _sync_acls(flow: Flow, source: SyncSource, target: SyncTarget, apply: bool,
               warnings: list[str]) -> tuple[AclActions | None, str]:
    """(the ACL actions, "") or (None, why the step was skipped)."""
    from ferry.kafka.acls import NoAuthorizer

    try:
        source_acls = source.acls()
    except NoAuthorizer:
        log.info("ACL sync skipped: %s has no authorizer, so no ACLs to copy", flow.source,
                 extra={"flow": flow.name})
        return None, f"skipped: {flow.source} has no authorizer (no ACLs to copy)"
    except TerminalError as exc:
        raise TerminalError(f"{exc}; or set {flow.name}.sync.topic.acls.enabled=false") \
            from None
    no_authorizer = (f"ACL sync skipped: cluster {flow.target} has no authorizer (its ACL "
                     "API is disabled); set sync.topic.acls.enabled=false if that is intended")
    try:
        target_acls = target.acls()
    except NoAuthorizer:
        warnings.append(no_authorizer)
        log.warning(no_authorizer, extra={"flow": flow.name})
        return None, f"skipped: {flow.target} has no authorizer"
    actions = diff_acls(flow, source_acls, target_acls,
                        prefixed=flow.ferry.sync_acls_prefixed,
                        groups=flow.ferry.sync_acls_groups)
    for acl, why in actions.skipped:
        log.info("ACL not copied: %s: %s", acl.describe(), why, extra={"flow": flow.name})
    if apply:
        try:
            target.create_acls(actions.create)
        except NoAuthorizer:
            # Kafka answers DescribeAcls without an authorizer with an error librdkafka
            # drops (an empty list), so the missing authorizer shows only here.
            warnings.append(no_authorizer)
            log.warning(no_authorizer, extra={"flow": flow.name})
            return None, f"skipped: {flow.target} has no authorizer"
        except TerminalError as exc:
            raise TerminalError(f"{exc}; or set {flow.name}.sync.topic.acls.enabled=false") \
                from None
    return actions, ""


def _record(flow: Flow, report: SyncReport, run_id: str, now: datetime,
            state: StateStore) -> None:
    """A `syncs` row for each step that ran and changed something, or whose interval must
    be honoured (steady runs with default intervals write nothing)."""
    from ferry.core.tables import sync_row

    parts = {
        "topics": ([f"create {c.name}" for c in report.topics.create]
                   + [f"grow {g.name} to {g.to_partitions}" for g in report.topics.grow]),
        "configs": [json.dumps(_config_json(c), sort_keys=True) for c in report.configs],
        "acls": [a.describe() for a in report.acls.create],
    }
    keep = _remembered(flow)
    rows = [sync_row(flow.name, run_id, step, parts[step], now)
            for step in STEPS if report.steps[step] == "done" and (parts[step] or keep[step])]
    state.append("syncs", rows)
