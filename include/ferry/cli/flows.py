"""A flow's verbs: `validate` (what a config resolves to), `plan` (what the next run would
copy), `sync` (bring the target in step) and `mirror` (run one cycle, or cycles back to
back with `--continuous`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
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
from ferry.errors import FerryError, UsageError

if TYPE_CHECKING:
    from ferry.config import Config, Flow
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
                       "run one mirror cycle of a flow (the DAG's code path), or of every "
                       "flow of the config with the heartbeats of its heartbeat-only pairs, "
                       "as MM2's connect-mirror-maker.sh runs them", cmd_mirror,
                       ("mm2.properties --flow 'A->B' --json",
                        "mm2.properties --flow A_to_B --master sc://127.0.0.1:15002 "
                        "--continuous --for 10m",
                        "mm2.properties --continuous --pause 5"),
                       without_flow="without it: every enabled flow, one cycle each in the "
                                    "config's order, after the heartbeats of the pairs whose "
                                    "data flow is off (emit.heartbeats.enabled)")
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
    from ferry.steps.plan import prepare

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
    if args.flow is None:
        return _mirror_all(args, for_s)
    config, flow = config_and_flow(args)
    if args.continuous:
        return _mirror_continuously(args, config, flow, for_s)
    result = cycle.run(args.file, config, flow, master=args.master)
    data, text = _cycle_report(flow, result)
    emit(args, data, text)
    return EXIT_OK if result.ok else EXIT_FAILED


def _mirror_continuously(args: argparse.Namespace, config: Config, flow: Flow,
                         for_s: float | None) -> int:
    import sys

    from ferry.steps import cycle

    stopping: list[int] = []

    def report(result: cycle.CycleResult, seconds: float) -> None:
        data, text = _cycle_report(flow, result)
        if args.json:
            print(json.dumps({**data, "seconds": round(seconds, 3)}), flush=True)
        else:
            print(f"{text.splitlines()[0]} in {seconds:.1f}s", flush=True)

    outcome: list[cycle.CycleResult | None] = []

    def loop(stop: Callable[[], bool]) -> bool:
        outcome.append(cycle.run_continuously(args.file, config, flow, report,
                                              master=args.master, for_s=for_s,
                                              pause_s=args.pause, stop=stop))
        return outcome[0] is None or outcome[0].ok

    ok = _until_signalled(stopping, loop)
    if stopping:
        print(f"flow {flow.name}: stopped by signal {stopping[0]} after the running cycle",
              file=sys.stderr)
    return EXIT_OK if ok else EXIT_FAILED


def _mirror_all(args: argparse.Namespace, for_s: float | None) -> int:
    """Every enabled flow and heartbeat-only pair of the config (`cycle.run_all`): once,
    one line (or JSON object) per flow; continuously, one per cycle and per round's
    heartbeats, as `--continuous` for one flow."""
    import sys

    from ferry.config import load_config
    from ferry.steps import cycle
    from ferry.steps.heartbeats import heartbeat_only_pairs

    config = load_config(args.file)
    if not config.enabled_flows and not heartbeat_only_pairs(config):
        raise UsageError(f"{args.file} enables no flow and emits no heartbeat: set "
                         "A->B.enabled=true for a flow")
    flows: list[dict[str, Any]] = []
    beats: list[str] = []
    stopping: list[int] = []

    def on_cycle(result: CycleResult, seconds: float) -> None:
        flow = config.flow(result.flow)
        data, text = _cycle_report(flow, result)
        data = {**data, "ok": result.ok, "seconds": round(seconds, 3)}
        if args.continuous or not args.json:
            print(json.dumps(data) if args.json else
                  f"{text.splitlines()[0]} in {seconds:.1f}s", flush=True)
        flows.append(data)

    def on_heartbeats(sent: list[str]) -> None:
        beats.extend(sent)
        if sent and (args.continuous or not args.json):
            print(json.dumps({"heartbeats": sent}) if args.json else
                  f"heartbeats {', '.join(sent)} (pairs whose data flow is off)", flush=True)

    def on_error(flow: Flow, exc: FerryError) -> None:
        flows.append({"flow": flow.name, "ok": False, "error": str(exc)})
        print(f"ferry: flow {flow.name}: {exc}", file=sys.stderr, flush=True)

    ok = _until_signalled(stopping, lambda stop: cycle.run_all(
        args.file, config, on_cycle, on_heartbeats, on_error, master=args.master,
        continuous=args.continuous, for_s=for_s, pause_s=args.pause, stop=stop))
    if args.json and not args.continuous:
        print(json.dumps({"flows": flows, "heartbeats": beats, "ok": ok}, indent=2))
    if stopping:
        print(f"stopped by signal {stopping[0]} after the running cycle", file=sys.stderr)
    return EXIT_OK if ok else EXIT_FAILED


def _until_signalled(stopping: list[int], work: Callable[[Callable[[], bool]], bool]) -> bool:
    """`work(stop)` with SIGTERM and SIGINT noted in `stopping` (`stop()` then says so)
    instead of interrupting it; the handlers before are restored after."""
    import signal

    def note(signum: int, _frame: object) -> None:
        stopping.append(signum)

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return work(lambda: bool(stopping))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _cycle_report(flow: Flow, result: CycleResult) -> tuple[dict[str, Any], str]:
    """One cycle's `--json` object and its text."""
    if result.abandoned:
        return ({"flow": flow.name, "run_id": result.run_id, "abandoned": True},
                f"flow {flow.name} run {result.run_id}: abandoned as hung (ferry.cycle."
                "timeout.seconds); the next cycle fences its writers")
    assert result.planned is not None
    planned = result.planned.summary()
    plan = result.planned.prepared.plan
    data = {"flow": flow.name, "run_id": result.run_id, "idle": planned["idle"],
            "ranges": planned["ranges"], "offsets": planned["offsets"],
            "gaps": planned["gaps"], "job_exit_code": result.copy_exit_code or 0,
            "plan": planned["plan"],
            "steps": result.steps(), "timings": result.timings}
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
