"""A flow's verbs: `validate` (what a config resolves to), `plan` (what the next run would
copy), `sync` (bring the target in step) and `mirror` (run one cycle, or cycles back to
back with `--continuous`)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from ferry.cli.verbs import (
    DRY_RUN_NOTE,
    EXIT_FAILED,
    EXIT_OK,
    Parser,
    config_and_flow,
    config_argument,
    emit,
    enabled_flow,
    execute_options,
    flow_verb,
    verb,
)
from ferry.errors import UsageError

if TYPE_CHECKING:
    from ferry.config import Flow, MirrorConfig
    from ferry.steps.cycle import CycleResult


def add_parsers(subparsers: argparse._SubParsersAction[Parser]) -> None:
    validate = verb(subparsers, "validate",
                    "show the flows a config resolves to, or its problems", cmd_validate,
                    ("mm2.properties", "mm2.properties --flow 'A->B' --json",
                     "kafka-mirror-maker.yaml   # a Strimzi KafkaMirrorMaker2 or KafkaMirrorMaker"))
    config_argument(validate, "an mm2.properties, a Strimzi KafkaMirrorMaker2 or "
                    "KafkaMirrorMaker YAML, or a file holding MM1's command line")
    validate.add_argument("--flow", help="show only this flow, e.g. A->B")

    flow_verb(subparsers, "plan",
              "show what the next run of a flow would copy (changes nothing)", cmd_plan)
    sync = flow_verb(subparsers, "sync", "bring the target's topics, partitions, configs and "
                     "ACLs in step with the source (every enabled step, whatever its interval)",
                     cmd_sync)
    execute_options(sync, "create, set and delete on the target")

    mirror = flow_verb(subparsers, "mirror",
                       "run one mirror cycle of a flow (the DAG's code path)", cmd_mirror,
                       ("mm2.properties --flow 'A->B' --json",
                        "mm2.properties --flow A_to_B --master sc://127.0.0.1:15002 "
                        "--continuous --for 10m"))
    mirror.add_argument("--master", help="Spark master (default: ferry.spark.master)")
    mirror.add_argument("--continuous", action="store_true",
                        help="run cycles back to back (each exactly once) until --for is up "
                             "or SIGTERM/SIGINT (the running cycle is finished); one line, or "
                             "with --json one JSON object, per cycle; exit 1 at the first "
                             "failed cycle. With a warm Spark (sc:// master) a cycle costs "
                             "seconds")
    mirror.add_argument("--for", dest="for_", metavar="DURATION",
                        help="with --continuous: stop after this long (90s, 10m, 2h)")
    mirror.add_argument("--pause", type=float, default=0.0, metavar="SECONDS",
                        help="with --continuous: wait this long between cycles (default 0)")


def cmd_validate(args: argparse.Namespace) -> int:
    from ferry.cli.render import config_json, config_text, flow_json, flow_text
    from ferry.config import load_config

    config = load_config(args.file)
    if args.flow:
        try:
            flow = config.flow(args.flow)
        except KeyError as exc:
            raise UsageError(str(exc.args[0])) from None
        emit(args, {"ok": True, "flow": flow_json(flow), "warnings": list(config.warnings)},
             "\n".join(flow_text(flow) + (["warnings:"] if config.warnings else [])
                       + [f"  - {w}" for w in config.warnings]))
        return EXIT_OK
    emit(args, config_json(config), config_text(config))
    return EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    from ferry.steps.mirror import prepare

    flow = enabled_flow(args)
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
    emit(args, data, "\n".join(lines))
    return EXIT_OK


def cmd_sync(args: argparse.Namespace) -> int:
    from ferry.steps.sync import sync_flow

    flow = enabled_flow(args)
    report = sync_flow(flow, apply=args.execute, force=True)
    tense = "did" if args.execute else "would"
    lines = [f"flow {flow.name}: {len(report.mirrored)} mirrored topics; "
             + ("applied" if args.execute else DRY_RUN_NOTE)]
    lines += [f"  {step}: {state}" for step, state in report.steps.items()]
    changes = report.lines()
    lines += [f"  {tense} {line}" for line in changes] or ["  in step: nothing to change"]
    lines += [f"  ACL not copied: {acl.describe()}: {why}" for acl, why in report.acls.skipped]
    lines += [f"  WARNING {w}" for w in report.warnings]
    emit(args, report.to_json(), "\n".join(lines))
    return EXIT_OK


def cmd_mirror(args: argparse.Namespace) -> int:
    from ferry.core.durations import parse_duration
    from ferry.steps import cycle

    if (args.for_ or args.pause) and not args.continuous:
        raise UsageError("--for and --pause go with --continuous")
    try:
        for_s = parse_duration(args.for_) if args.for_ else None
    except ValueError as exc:
        raise UsageError(f"--for: {exc}") from None
    config, flow = config_and_flow(args)
    if args.continuous:
        return _mirror_continuously(args, config, flow, for_s)
    result = cycle.run(args.file, config, flow, master=args.master)
    data, text = _cycle_report(flow, result)
    emit(args, data, text)
    return EXIT_OK if result.ok else EXIT_FAILED


def _mirror_continuously(args: argparse.Namespace, config: MirrorConfig, flow: Flow,
                         for_s: float | None) -> int:
    import signal
    import sys

    from ferry.steps import cycle

    stopping: list[int] = []

    def stop_after_this_cycle(signum: int, _frame: object) -> None:
        stopping.append(signum)

    previous = {sig: signal.signal(sig, stop_after_this_cycle)
                for sig in (signal.SIGTERM, signal.SIGINT)}

    def report(result: cycle.CycleResult, seconds: float) -> None:
        if result.abandoned:
            data = {"flow": flow.name, "run_id": result.run_id, "abandoned": True}
            text = (f"flow {flow.name} run {result.run_id}: abandoned as hung (ferry.cycle."
                    "timeout.seconds); the next cycle fences its writers")
        else:
            data, text = _cycle_report(flow, result)
        if args.json:
            print(json.dumps({**data, "seconds": round(seconds, 3)}), flush=True)
        else:
            print(f"{text.splitlines()[0]} in {seconds:.1f}s", flush=True)

    try:
        last = cycle.run_continuously(args.file, config, flow, report, master=args.master,
                                      for_s=for_s, pause_s=args.pause,
                                      stop=lambda: bool(stopping))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopping:
        print(f"flow {flow.name}: stopped by signal {stopping[0]} after the running cycle",
              file=sys.stderr)
    return EXIT_OK if last is None or last.ok else EXIT_FAILED


def _cycle_report(flow: Flow, result: CycleResult) -> tuple[dict[str, Any], str]:
    """One cycle's `--json` object and its text."""
    assert result.planned is not None
    planned = result.planned.summary()
    plan = result.planned.prepared.plan
    data = {"flow": flow.name, "run_id": result.run_id, "idle": planned["idle"],
            "ranges": planned["ranges"], "offsets": planned["offsets"],
            "gaps": planned["gaps"], "job_exit_code": result.copy_exit_code or 0,
            "plan": planned["plan"],
            "steps": result.steps()}
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
    return data, "\n".join(lines)
