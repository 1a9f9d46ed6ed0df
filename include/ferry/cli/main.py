"""`ferry` — the command line.

Exit codes: 0 success; 1 the work failed (a broker down, a job failed); 2 a usage or
config error (one line per problem, no traceback). Every verb takes `--json`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from ferry import __version__, crash, logs
from ferry.errors import ConfigError, FerryError, TerminalError, UsageError

log = logging.getLogger("ferry.cli")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the fix (exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=False))
    else:
        print(text)


def cmd_validate(args: argparse.Namespace) -> int:
    from ferry.cli.render import config_json, config_text, flow_json
    from ferry.config import load_config

    config = load_config(args.file)
    if args.flow:
        try:
            flow = config.flow(args.flow)
        except KeyError as exc:
            raise UsageError(str(exc.args[0])) from None
        _emit(args, {"ok": True, "flow": flow_json(flow), "warnings": list(config.warnings)},
              json.dumps(flow_json(flow), indent=2))
        return EXIT_OK
    _emit(args, config_json(config), config_text(config))
    return EXIT_OK


def _config_and_flow(args: argparse.Namespace) -> tuple[Any, Any]:
    """(the config, its enabled flow `--flow`); a usage error names the flows there are."""
    from ferry.config import load_config

    config = load_config(args.file)
    try:
        flow = config.flow(args.flow)
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None
    if not flow.enabled:
        raise UsageError(f"flow {args.flow} is not enabled: set {args.flow}.enabled=true")
    return config, flow


def _flow(args: argparse.Namespace) -> Any:
    return _config_and_flow(args)[1]


def cmd_plan(args: argparse.Namespace) -> int:
    from ferry.steps.mirror import prepare

    flow = _flow(args)
    prepared = prepare(flow, apply=False, restore=False)
    data = prepared.to_json()
    lines = [f"flow {flow.name}: {len(prepared.plan.copies)} ranges, "
             f"{prepared.plan.span:,} offsets to copy over {prepared.lanes} lanes"
             + (" (idle: nothing to copy)" if prepared.plan.is_idle else "")]
    for action in data["topology"]["create"]:
        lines.append(f"  create {action['topic']} ({action['partitions']} partitions, "
                     f"replication factor {action['replication_factor']})")
    for action in data["topology"]["grow"]:
        lines.append(f"  grow {action['topic']} from {action['from']} to {action['to']} "
                     "partitions")
    for r in prepared.plan.ranges:
        what = f"[{r.start}, {r.end}) {r.span:,} offsets" if r.span else \
            f"start at {r.start} (new partition)"
        lines.append(f"  copy {r.topic}-{r.partition} {what} -> "
                     f"{flow.remote_topic(r.topic)}-{r.partition}")
    for g in prepared.plan.gaps:
        lines.append(f"  GAP {g.topic}-{g.partition} offsets [{g.start}, {g.end}) "
                     f"({g.count:,} records) deleted before they were mirrored "
                     f"(ferry.on.gap={flow.ferry.on_gap})")
    _emit(args, data, "\n".join(lines))
    return EXIT_OK


def cmd_sync(args: argparse.Namespace) -> int:
    from ferry.steps.sync import sync_flow

    flow = _flow(args)
    report = sync_flow(flow, apply=not args.dry_run, force=True)
    verb = "would" if args.dry_run else "did"
    lines = [f"flow {flow.name}: {len(report.mirrored)} mirrored topics; "
             + ("dry run, nothing changed" if args.dry_run else "applied")]
    lines += [f"  {step}: {state}" for step, state in report.steps.items()]
    changes = report.lines()
    lines += [f"  {verb} {line}" for line in changes] or ["  in step: nothing to change"]
    lines += [f"  ACL not copied: {acl.describe()}: {why}" for acl, why in report.acls.skipped]
    lines += [f"  WARNING {w}" for w in report.warnings]
    _emit(args, report.to_json(), "\n".join(lines))
    return EXIT_OK


def cmd_translate(args: argparse.Namespace) -> int:
    from ferry.steps.checkpoints import reverse_of, translate_groups

    config, flow = _config_and_flow(args)
    found = translate_groups(flow, args.group, reverse_of(config, flow))
    lines = [f"group {args.group} on {flow.source} -> {flow.target}"
             + ("" if found else ": no committed offsets on mirrored topics")]
    for t in found:
        where = (f"{t.target_topic}-{t.partition}@{t.target_offset}"
                 if t.target_offset is not None else "(nothing mirrored yet)")
        lines.append(f"  {t.topic}-{t.partition}@{t.source_offset} -> {where} {t.status}")
    _emit(args, {"flow": flow.name, "group": args.group,
                 "partitions": [t.__dict__ for t in found]}, "\n".join(lines))
    return EXIT_OK


def cmd_checkpoints(args: argparse.Namespace) -> int:
    from ferry.steps.checkpoints import reverse_of, run

    config, flow = _config_and_flow(args)
    report = run(flow, reverse=reverse_of(config, flow))
    text = (f"flow {flow.name}: {len(report.translations)} group partitions translated, "
            f"{len(report.emitted)} checkpoints emitted"
            + (f", offsets committed for {', '.join(report.synced)}" if report.synced else "")
            + (f"; active on {flow.target}, left untouched: {', '.join(report.active)}"
               if report.active else ""))
    _emit(args, report.to_json(), text)
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from ferry.steps.verify import verify

    flow = _flow(args)
    checks = verify(flow, args.topic)
    bad = [c for c in checks if not c.ok]
    lines = [c.text(flow) for c in checks] or [f"flow {flow.name}: nothing mirrored yet"]
    lines.append(f"flow {flow.name}: {sum(c.checked for c in checks):,} records checked in "
                 f"{len(checks)} partitions, " + (f"{len(bad)} with mismatches" if bad
                                                  else "all equal"))
    _emit(args, {"flow": flow.name, "ok": not bad, "partitions": [
        {"topic": c.topic, "partition": c.partition, "source_start": c.source_start,
         "source_end": c.source_end, "checked": c.checked, "ok": c.ok,
         "mismatches": [m.__dict__ for m in c.mismatches], "skipped": c.skipped,
         "extra": c.extra} for c in checks]}, "\n".join(lines))
    return EXIT_FAILED if bad else EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from ferry.config import load_config
    from ferry.observe.status import status

    flows = status(load_config(args.file))
    _emit(args, {"flows": [f.to_json() for f in flows]},
          "\n".join(f.text() for f in flows) or "no enabled flows")
    return EXIT_OK


def cmd_metrics(args: argparse.Namespace) -> int:
    from ferry.config import load_config
    from ferry.observe.collect import metric_families
    from ferry.observe.metrics import TOKEN_ENV, render, to_json

    if args.serve:
        from ferry.observe.serve import parse_listen, serve

        host, port = parse_listen(args.serve)
        load_config(args.file)  # a bad config is a usage error now, not at every scrape
        token = os.environ.get(TOKEN_ENV, "").strip() or None
        if token is None:
            log.warning("no %s set: anyone who reaches %s can read the metrics", TOKEN_ENV,
                        args.serve)

        def ready(url: str) -> None:  # one line, even as JSON: a supervisor reads it
            print(json.dumps({"serving": url, "token_required": token is not None})
                  if args.json else
                  f"serving {url}" + (" (scrape token required)" if token else ""), flush=True)

        serve(args.file, host, port, token, ready)
        return EXIT_OK
    found = metric_families(load_config(args.file))
    if args.json:
        print(json.dumps({"metrics": to_json(found)}, indent=2))
    else:
        sys.stdout.write(render(found))
    return EXIT_OK


def cmd_maintain(args: argparse.Namespace) -> int:
    from ferry.config import load_config
    from ferry.state.maintain import maintain

    report = maintain(load_config(args.file), args.retention_hours, args.dry_run)
    _emit(args, report.to_json(), report.text())
    return EXIT_OK


def cmd_topology(args: argparse.Namespace) -> int:
    from ferry.config import load_config
    from ferry.steps.heartbeats import topology

    found = topology(load_config(args.file), args.cluster)
    _emit(args, found.to_json(), found.text())
    return EXIT_OK


def cmd_mirror(args: argparse.Namespace) -> int:
    from ferry.steps import cycle

    config, flow = _config_and_flow(args)
    result = cycle.run(args.file, config, flow, master=args.master)
    assert result.planned is not None
    planned = result.planned.summary()
    plan = result.planned.prepared.plan
    data = {"flow": flow.name, "run_id": result.run_id, "idle": planned["idle"],
            "ranges": planned["ranges"], "offsets": planned["offsets"],
            "gaps": planned["gaps"], "job_exit_code": result.copy_exit_code or 0,
            "plan": planned["plan"],
            "steps": {"heartbeat": result.heartbeats, "sync": result.sync, "plan": planned,
                      "copy": {"exit_code": result.copy_exit_code},
                      "record": result.recorded, "checkpoints": result.checkpoints}}
    copied = (f"flow {flow.name}: idle, nothing to copy" if planned["idle"] else
              f"flow {flow.name} run {result.run_id}: copy job "
              f"{'succeeded' if result.ok else 'FAILED'} "
              f"({len(plan.copies)} ranges, {plan.span:,} offsets, {len(plan.gaps)} gaps)")
    lines = [copied]
    if result.ok:
        lines.append(f"  heartbeats {', '.join(result.heartbeats) or 'off'}; checkpoints "
                     + (f"{result.checkpoints.get('emitted', 0)} emitted"
                        if result.checkpoints.get("ran") else
                        f"not due ({result.checkpoints.get('why', '')})"))
    _emit(args, data, "\n".join(lines))
    return EXIT_OK if result.ok else EXIT_FAILED


def cmd_backfill(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ferry.steps.backfill import BackfillRequest, copy_chunks, prepare_backfill
    from ferry.steps.mirror import new_run_id

    flow = _flow(args)
    master = args.master or flow.ferry.spark_master
    request = BackfillRequest(topics=args.topics, start=args.start, end=args.end,
                              target_topic=args.target_topic, chunk_records=args.chunk_records,
                              on_gap=args.on_gap)
    run = prepare_backfill(flow, request, f"backfill.{new_run_id()}", master,
                           apply=not args.dry_run)
    code = EXIT_OK
    if not args.dry_run and run.chunk_files:
        code = copy_chunks(str(Path(args.file).resolve()), flow, run, master)
    data = run.summary() | {"dry_run": args.dry_run, "job_exit_code": code}
    verdict = "dry run, nothing written" if args.dry_run else \
        ("copied" if code == EXIT_OK else f"FAILED (exit {code})")
    _emit(args, data, f"{run.text()}\n{verdict}")
    return EXIT_OK if code == EXIT_OK else EXIT_FAILED


def cmd_offsets(args: argparse.Namespace) -> int:
    from ferry.steps.lookup import find

    flow = _flow(args)
    answer = find(flow, args.topic, args.partition, args.source_offset)
    _emit(args, answer.to_json(), answer.text())
    return EXIT_OK if answer.status == "mirrored" else EXIT_FAILED


def cmd_positions_reset(args: argparse.Namespace) -> int:
    from ferry.steps.positions import reset

    flow = _flow(args)
    resets = reset(flow, args.topic, args.to, dry_run=args.dry_run)
    verb = "would reset" if args.dry_run else "reset"
    _emit(args, {"flow": flow.name, "dry_run": args.dry_run,
                 "positions": [r.__dict__ for r in resets]},
          "\n".join(f"{verb} {r.topic}-{r.partition}: {r.before} -> {r.after}" for r in resets))
    return EXIT_OK


def _aliases(config_file: str | None) -> tuple[str, ...]:
    """The cluster aliases of a config (`load_config`: the one config reader), or the
    default pair."""
    from ferry.local.cluster import DEFAULT_ALIASES

    if config_file is None:
        return DEFAULT_ALIASES
    from ferry.config import load_config

    return tuple(load_config(config_file).clusters)


def cmd_local_up(args: argparse.Namespace) -> int:
    from ferry.local import cluster

    states = cluster.up(_aliases(args.config), Path(args.dir) if args.dir else None,
                        secure=args.secure)
    _emit(args, [{"alias": s.alias, "bootstrap": s.bootstrap, "pid": s.pid, "dir": s.dir,
                  "secure": s.secure, "sasl_plaintext": s.plaintext_bootstrap}
                 for s in states],
          "\n".join(f"{s.alias} {s.bootstrap}" + (" (SASL_SSL)" if s.secure else "")
                    for s in states))
    return EXIT_OK


def cmd_local_status(args: argparse.Namespace) -> int:
    from ferry.local import cluster

    rows = cluster.status(Path(args.dir) if args.dir else None)
    text = "\n".join(
        f"{r['alias']} {r['bootstrap']} "
        + ("running pid " + str(r["pid"]) + (" answering" if r["answering"] else
                                             " NOT answering") if r["running"] else "stopped")
        for r in rows) or "no local clusters (run: ferry local up)"
    _emit(args, rows, text)
    return EXIT_OK if all(r["running"] and r["answering"] for r in rows) and rows \
        else EXIT_FAILED


def cmd_local_down(args: argparse.Namespace) -> int:
    from ferry.local import cluster

    stopped = cluster.down(Path(args.dir) if args.dir else None, wipe=args.wipe)
    _emit(args, {"stopped": stopped},
          f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    return EXIT_OK


def cmd_local_jars(args: argparse.Namespace) -> int:
    from ferry.spark.jars import delta_jars, kafka_jars

    kafka, delta = kafka_jars(), delta_jars()
    _emit(args, {"kafka": str(kafka), "delta": str(delta)},
          f"kafka jars: {kafka}\ndelta jars: {delta}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser = _Parser(prog="ferry", description="Exact-offset Kafka mirroring, MM2-compatible.")
    parser.add_argument("--version", action="version", version=f"ferry {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    validate = sub.add_parser("validate", parents=[common],
                              help="show the flows a config resolves to, or its problems")
    validate.add_argument("file", help="an mm2.properties or a Strimzi KafkaMirrorMaker2 YAML")
    validate.add_argument("--flow", help="show only this flow, e.g. A->B")
    validate.set_defaults(func=cmd_validate)

    def flow_verb(name: str, help_text: str, func: Callable[[argparse.Namespace], int]
                  ) -> argparse.ArgumentParser:
        verb = sub.add_parser(name, parents=[common], help=help_text)
        verb.add_argument("file", help="the config (mm2.properties or Strimzi YAML)")
        verb.add_argument("--flow", required=True, help="the flow, e.g. A->B")
        verb.set_defaults(func=func)
        return verb

    flow_verb("plan", "show what the next run of a flow would copy (changes nothing)",
              cmd_plan)
    sync = flow_verb("sync", "bring the target's topics, partitions, configs and ACLs in "
                     "step with the source (every enabled step, whatever its interval)",
                     cmd_sync)
    sync.add_argument("--dry-run", action="store_true",
                      help="list what would be created, set, deleted; change nothing")
    translate = flow_verb("translate", "where a source consumer group resumes on the target "
                          "(exact, through the offset map)", cmd_translate)
    translate.add_argument("--group", required=True, help="the consumer group id")
    verify = flow_verb("verify", "compare source and target record by record through the "
                       "offset map (exit 1 on a mismatch)", cmd_verify)
    verify.add_argument("--topic", help="only this source topic")
    flow_verb("checkpoints", "translate every group now: checkpoints, and group offsets when "
              "sync.group.offsets.enabled=true", cmd_checkpoints)
    mirror = flow_verb("mirror", "run one mirror cycle of a flow (the DAG's code path)",
                       cmd_mirror)
    mirror.add_argument("--master", help="Spark master (default: ferry.spark.master)")
    backfill = flow_verb("backfill", "copy a window of a flow's source topics in chunks "
                         "(the ferry_backfill DAG without Airflow)", cmd_backfill)
    backfill.add_argument("--topics", default=".*",
                          help="regex over the flow's source topics (default: all)")
    backfill.add_argument("--from", dest="start", default="earliest",
                          help="earliest, a source offset, or an ISO time (UTC if no zone)")
    backfill.add_argument("--to", dest="end", default="latest",
                          help="latest, a source offset, or an ISO time (exclusive)")
    backfill.add_argument("--target-topic", default="",
                          help="a topic of its own, e.g. 'investigation.{topic}' (default: the "
                               "flow's remote topic)")
    backfill.add_argument("--chunk-records", type=int, default=100_000,
                          help="offsets per partition in one chunk")
    backfill.add_argument("--on-gap", choices=["fail", "continue"], default="fail")
    backfill.add_argument("--master", help="Spark master (default: ferry.spark.master)")
    backfill.add_argument("--dry-run", action="store_true",
                          help="plan and check the window; write nothing")
    offsets = flow_verb("offsets", "where a mirrored source record went (the offset map)",
                        cmd_offsets)
    offsets.add_argument("--topic", required=True, help="the source topic")
    offsets.add_argument("--partition", required=True, type=int)
    offsets.add_argument("--source-offset", required=True, type=int)

    stat = sub.add_parser("status", parents=[common],
                          help="per flow and partition: lag, last run, heartbeats, checkpoints")
    stat.add_argument("file", help="the config (mm2.properties or Strimzi YAML)")
    stat.set_defaults(func=cmd_status)

    metrics = sub.add_parser("metrics", parents=[common],
                             help="Prometheus metrics (MM2 names + lag per partition): print "
                                  "them once, or --serve them")
    metrics.add_argument("file", help="the config (mm2.properties or Strimzi YAML)")
    metrics.add_argument("--serve", metavar="HOST:PORT",
                         help="serve /metrics until interrupted (scrape token: "
                              "$FERRY_METRICS_TOKEN)")
    metrics.set_defaults(func=cmd_metrics)

    maint = sub.add_parser("maintain", parents=[common],
                           help="compact and vacuum the Delta state tables (the "
                                "ferry_maintenance DAG without Airflow)")
    maint.add_argument("file", help="the config (mm2.properties or Strimzi YAML)")
    maint.add_argument("--retention-hours", type=int, default=168,
                       help="keep replaced files this long (at least 24; default 168)")
    maint.add_argument("--dry-run", action="store_true", help="report, change nothing")
    maint.set_defaults(func=cmd_maintain)

    topo = sub.add_parser("topology", parents=[common],
                          help="the clusters upstream of one, seen through heartbeats")
    topo.add_argument("file", help="the config (mm2.properties or Strimzi YAML)")
    topo.add_argument("--cluster", required=True, help="the cluster alias to look from")
    topo.set_defaults(func=cmd_topology)

    positions = sub.add_parser("positions", help="a flow's positions (where copying goes on)")
    psub = positions.add_subparsers(dest="positions_command", required=True, parser_class=_Parser)
    reset = psub.add_parser("reset", parents=[common],
                            help="set where a flow continues copying a topic")
    reset.add_argument("file", help="the config (mm2.properties or Strimzi YAML)")
    reset.add_argument("--flow", required=True, help="the flow, e.g. A->B")
    reset.add_argument("--topic", required=True, help="the source topic")
    reset.add_argument("--to", required=True, help="earliest, latest, or a source offset")
    reset.add_argument("--dry-run", action="store_true", help="show, change nothing")
    reset.set_defaults(func=cmd_positions_reset)

    local = sub.add_parser("local", help="local single-node Kafka clusters for development")
    lsub = local.add_subparsers(dest="local_command", required=True, parser_class=_Parser)
    dir_help = "where the clusters live (default: $FERRY_HOME/local, ~/.ferry/local)"
    up = lsub.add_parser("up", parents=[common], help="start one cluster per alias")
    up.add_argument("--config", help="take the aliases from this config's clusters=")
    up.add_argument("--dir", help=dir_help)
    up.add_argument("--secure", action="store_true",
                    help="SASL_SSL (PLAIN, SCRAM-SHA-512) with a private CA and ACLs enforced; "
                         "passwords in <dir>/credentials.properties")
    up.set_defaults(func=cmd_local_up)
    st = lsub.add_parser("status", parents=[common], help="show the local clusters")
    st.add_argument("--dir", help=dir_help)
    st.set_defaults(func=cmd_local_status)
    down = lsub.add_parser("down", parents=[common], help="stop the local clusters")
    down.add_argument("--dir", help=dir_help)
    down.add_argument("--wipe", action="store_true", help="also delete their data")
    down.set_defaults(func=cmd_local_down)
    jars = lsub.add_parser("jars", parents=[common], help="fetch the Kafka and Delta jars")
    jars.set_defaults(func=cmd_local_jars)
    return parser


def _fail(args: argparse.Namespace | None, code: int, lines: list[str],
          data: dict[str, Any]) -> int:
    if args is not None and getattr(args, "json", False):
        print(json.dumps(data, indent=2))
    else:
        for line in lines:
            print(f"ferry: {line}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    from ferry.cli.render import problems_json

    crash.enable()
    args: argparse.Namespace | None = None
    wants_json = "--json" in (sys.argv[1:] if argv is None else list(argv))
    try:
        args = build_parser().parse_args(argv)
        logs.setup(getattr(args, "verbose", False))
        func: Callable[[argparse.Namespace], int] = args.func
        return func(args)
    except ConfigError as exc:
        args = args or argparse.Namespace(json=wants_json)
        where = f"{exc.source}: " if exc.source else ""
        return _fail(args, EXIT_USAGE, [where + p.line() for p in exc.problems],
                     problems_json(exc.problems, exc.source))
    except UsageError as exc:
        args = args or argparse.Namespace(json=wants_json)
        return _fail(args, EXIT_USAGE, [str(exc)], {"ok": False, "error": str(exc)})
    except TerminalError as exc:
        return _fail(args, EXIT_FAILED, [str(exc)], {"ok": False, "error": str(exc)})
    except FerryError as exc:
        return _fail(args, EXIT_FAILED, [str(exc)], {"ok": False, "error": str(exc)})
    except KeyboardInterrupt:
        return _fail(args, 130, ["interrupted"], {"ok": False, "error": "interrupted"})


def run() -> NoReturn:
    """The console script: `main`, then exit at once with its code. Native libraries'
    threads (librdkafka, Arrow) can abort an interpreter that is finalizing after the work
    is done and printed (seen as exit code -6 on an idle `ferry mirror`); nothing is left
    to clean up by then."""
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
