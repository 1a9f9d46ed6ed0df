"""The verbs that go through the offset map: `translate` (where a group resumes),
`verify` (does the target hold the source's records), `checkpoints` (translate every
group now), `offsets` (where a record went), `failover`, `adopt` (take over from another
mirror) and `positions reset` (where copying goes on)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ferry.cli.verbs import (
    DRY_RUN_NOTE,
    EXIT_FAILED,
    EXIT_MISMATCH,
    EXIT_OK,
    Parser,
    config_and_flow,
    emit,
    enabled_flow,
    execute_options,
    flow_verb,
)

if TYPE_CHECKING:
    from ferry.steps.checkpoints import Translation


def add_parsers(subparsers: argparse._SubParsersAction[Parser]) -> None:
    translate = flow_verb(subparsers, "translate", "where a source consumer group resumes on "
                          "the target (exact, through the offset map)", cmd_translate,
                          ("mm2.properties --flow 'A->B' --group payments-app --json",))
    translate.add_argument("--group", required=True, help="the consumer group id")
    verify = flow_verb(subparsers, "verify", "compare source and target record by record "
                       "through the offset map (exit 3 on a mismatch)", cmd_verify,
                       extra_codes=f", {EXIT_MISMATCH} records differ (the report names them)")
    verify.add_argument("--topic", help="only this source topic")
    checkpoints = flow_verb(subparsers, "checkpoints", "translate every group now: "
                            "checkpoints, and group offsets when "
                            "sync.group.offsets.enabled=true", cmd_checkpoints)
    execute_options(checkpoints, "emit the checkpoints and commit the group offsets")

    offsets = flow_verb(subparsers, "offsets",
                        "where a mirrored source record went (the offset map)", cmd_offsets,
                        ("mm2.properties --flow 'A->B' --topic orders --partition 1 "
                         "--source-offset 42",))
    offsets.add_argument("--topic", required=True, help="the source topic")
    offsets.add_argument("--partition", required=True, type=int)
    offsets.add_argument("--source-offset", required=True, type=int)

    failover = flow_verb(
        subparsers, "failover", "move consumer groups to the target in one operation: "
        "planned (catch up, then translate and commit every group) or unplanned (the source "
        "is gone: commit the last translations, report the data at risk)", cmd_failover,
        ("mm2.properties --flow 'A->B' --mode planned --groups 'billing|audit'   # show",
         "mm2.properties --flow 'A->B' --mode planned --execute --deadline 300",
         "mm2.properties --flow 'A->B' --mode unplanned --execute"))
    failover.add_argument("--mode", required=True, choices=("planned", "unplanned"),
                          help="planned: the source is up and its producers stopped; "
                               "unplanned: the source is gone (it is never contacted)")
    failover.add_argument("--groups", metavar="REGEX",
                          help="only groups whose whole id matches (within the flow's "
                               "groups filter)")
    failover.add_argument("--deadline", type=float, default=600.0, metavar="SECONDS",
                          help="planned: how long cycles may take to catch up (default 600)")
    failover.add_argument("--master", help="planned: the copy's Spark master (default: the "
                                           "flow's ferry.spark.master)")
    execute_options(failover, "catch up and commit the groups on the target")

    adopt = flow_verb(
        subparsers, "adopt", "take over from a stopped MirrorMaker 2 or 1 in place: its "
        "progress becomes the flow's positions and the history it copied gets exact "
        "offset-map entries (no re-copy, no seam)", cmd_adopt,
        ("mm2.properties --flow 'A->B' --from mm2   # show",
         "mm2.properties --flow 'A->B' --from mm2 --execute",
         "mm1.properties --flow 'source->target' --from mm1 --group mirror-group --execute"))
    adopt.add_argument("--from", dest="old", required=True, choices=("mm2", "mm1"),
                       help="the mirror to take over from")
    adopt.add_argument("--offsets-topic", metavar="TOPIC",
                       help="mm2: Connect's offsets topic on the target (default: where "
                            "the config puts it; mm2-offsets.<source>.internal in "
                            "dedicated mode, mirrormaker2-cluster-offsets for Strimzi)")
    adopt.add_argument("--connector", help="mm2: only this connector's progress (on a "
                                           "Connect cluster the name you gave "
                                           "MirrorSourceConnector)")
    adopt.add_argument("--group", help="mm1: its consumer group (consumer.config's group.id)")
    adopt.add_argument("--settle", type=float, default=65.0, metavar="SECONDS",
                       help="how long the old mirror's progress must stand still (default "
                            "65: past MM2's and MM1's 60 s flush interval)")
    adopt.add_argument("--window", type=int, default=100_000, metavar="RECORDS",
                       help="the longest replay or hole the alignment recognises (default "
                            "100000; memory about 600 bytes per record of window)")
    execute_options(adopt, "write the positions and offset-map entries")

    positions = subparsers.add_parser("positions",
                                      help="a flow's positions (where copying goes on)")
    psub = positions.add_subparsers(dest="positions_command", required=True, parser_class=Parser)
    reset = flow_verb(psub, "reset", "set where a flow continues copying a topic",
                      cmd_positions_reset,
                      ("mm2.properties --flow 'A->B' --topic orders --to earliest   # show",
                       "mm2.properties --flow 'A->B' --topic orders --to earliest --execute"))
    reset.add_argument("--topic", required=True, help="the source topic")
    reset.add_argument("--to", required=True, help="earliest, latest, or a source offset")
    execute_options(reset, "set the positions")


def cmd_failover(args: argparse.Namespace) -> int:
    import re
    from pathlib import Path

    from ferry.errors import UsageError
    from ferry.steps import failover

    if args.groups is not None:
        try:
            re.compile(args.groups)
        except re.error as exc:
            raise UsageError(f"--groups {args.groups!r} is not a regular expression: {exc}") \
                from None
    config, flow = config_and_flow(args)
    if args.mode == failover.PLANNED:
        report = failover.planned(str(Path(args.file).resolve()), config, flow,
                                  groups=args.groups, deadline_s=args.deadline,
                                  master=args.master, execute=args.execute)
    else:
        report = failover.unplanned(config, flow, groups=args.groups, execute=args.execute)
    emit(args, report.to_json(), report.text())
    return EXIT_OK


def cmd_adopt(args: argparse.Namespace) -> int:
    from ferry.errors import UsageError
    from ferry.steps.adopt import adopt

    if args.settle < 0:
        raise UsageError(f"--settle {args.settle}: give 0 or more seconds")
    if args.window < 1:
        raise UsageError(f"--window {args.window}: give 1 or more records")
    if args.old == "mm1" and (args.offsets_topic or args.connector):
        raise UsageError("--offsets-topic and --connector are for --from mm2; MM1's progress "
                         "is its --group")
    if args.old == "mm2" and args.group:
        raise UsageError("--group is for --from mm1; MM2's progress is in Connect's offsets "
                         "topic (--offsets-topic)")
    _, flow = config_and_flow(args)
    report = adopt(flow, args.old, offsets_topic=args.offsets_topic, connector=args.connector,
                   group=args.group, settle_s=args.settle, execute=args.execute,
                   window=args.window)
    emit(args, report.to_json(),
         report.text() + ("" if args.execute else f"\n{DRY_RUN_NOTE}"))
    return EXIT_FAILED if report.refused else EXIT_OK


def _translation(t: Translation) -> str:
    """`topic-partition@offset -> remote-partition@offset` (or nothing mirrored yet)."""
    where = (f"{t.target_topic}-{t.partition}@{t.target_offset}"
             if t.target_offset is not None else "(nothing mirrored yet)")
    return f"{t.topic}-{t.partition}@{t.source_offset} -> {where}"


def cmd_translate(args: argparse.Namespace) -> int:
    from ferry.steps.checkpoints import reverse_of, translate_groups

    config, flow = config_and_flow(args)
    found = translate_groups(flow, args.group, reverse_of(config, flow))
    lines = [f"group {args.group} on {flow.source} -> {flow.target}"
             + ("" if found else ": no committed offsets on mirrored topics")]
    lines += [f"  {_translation(t)} {t.status}" for t in found]
    emit(args, {"flow": flow.name, "group": args.group,
                "partitions": [t.__dict__ for t in found]}, "\n".join(lines))
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from ferry.steps.verify import verify

    flow = enabled_flow(args)
    checks = verify(flow, args.topic)
    bad = [c for c in checks if not c.ok]
    lines = [c.text(flow) for c in checks] or [f"flow {flow.name}: nothing mirrored yet"]
    lines.append(f"flow {flow.name}: {sum(c.checked for c in checks):,} records checked in "
                 f"{len(checks)} partitions, " + (f"{len(bad)} with mismatches" if bad
                                                  else "all equal"))
    emit(args, {"flow": flow.name, "ok": not bad, "partitions": [c.to_json() for c in checks]},
         "\n".join(lines))
    return EXIT_MISMATCH if bad else EXIT_OK


def cmd_checkpoints(args: argparse.Namespace) -> int:
    from ferry.steps.checkpoints import reverse_of, run, translate_groups

    config, flow = config_and_flow(args)
    if not args.execute:
        found = translate_groups(flow, reverse=reverse_of(config, flow))
        lines = [f"flow {flow.name}: {len(found)} group partitions would be translated"]
        lines += [f"  {t.group} {_translation(t)}" for t in found]
        emit(args, {"flow": flow.name, "dry_run": True,
                    "translations": [t.__dict__ for t in found]},
             "\n".join([*lines, DRY_RUN_NOTE]))
        return EXIT_OK
    report = run(flow, reverse=reverse_of(config, flow))
    text = (f"flow {flow.name}: {len(report.translations)} group partitions translated, "
            f"{len(report.emitted)} checkpoints emitted"
            + (f", offsets committed for {', '.join(report.synced)}" if report.synced else "")
            + (f"; active on {flow.target}, left untouched: {', '.join(report.active)}"
               if report.active else ""))
    emit(args, report.to_json(), text)
    return EXIT_OK


def cmd_offsets(args: argparse.Namespace) -> int:
    from ferry.steps.lookup import Found, find

    flow = enabled_flow(args)
    answer = find(flow, args.topic, args.partition, args.source_offset)
    emit(args, answer.to_json(), answer.text())
    return EXIT_OK if answer.status == Found.MIRRORED else EXIT_FAILED


def cmd_positions_reset(args: argparse.Namespace) -> int:
    from ferry.steps.positions import reset

    flow = enabled_flow(args)
    dry_run = not args.execute
    resets = reset(flow, args.topic, args.to, dry_run=dry_run)
    verb = "would reset" if dry_run else "reset"
    lines = [f"{verb} {r.topic}-{r.partition}: {r.before} -> {r.after}" for r in resets]
    emit(args, {"flow": flow.name, "dry_run": dry_run,
                "positions": [r.__dict__ for r in resets]},
         "\n".join(lines + ([DRY_RUN_NOTE] if dry_run else [])))
    return EXIT_OK
