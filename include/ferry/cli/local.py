"""`ferry local up|status|down|jars`: local Kafka clusters for development, and
the jars the copy job needs."""

from __future__ import annotations

import argparse
from pathlib import Path

from ferry.cli.verbs import EXIT_FAILED, EXIT_OK, Parser, at_least_one, emit, verb

_DIR_HELP = "where the clusters live (default: $FERRY_HOME/local, ~/.ferry/local)"


def add_parsers(subparsers: argparse._SubParsersAction[Parser]) -> None:
    local = subparsers.add_parser("local",
                                  help="local Kafka clusters for development")
    lsub = local.add_subparsers(dest="local_command", required=True, parser_class=Parser)
    up = verb(lsub, "up", "start one cluster per alias", cmd_local_up)
    up.add_argument("--config", help="take the aliases from this config's clusters=")
    up.add_argument("--dir", help=_DIR_HELP)
    up.add_argument("--brokers", type=_node_count, default=1,
                    help="KRaft nodes per cluster (default 1); with 3 or more, internal and "
                         "default topics get replication factor 3 and min ISR 2")
    up.add_argument("--secure", action="store_true",
                    help="SASL_SSL (PLAIN, SCRAM-SHA-512) with a private CA and ACLs enforced; "
                         "passwords in <dir>/credentials.properties")
    up.add_argument("--behind-proxy", action="store_true",
                    help="give each (one-node, PLAINTEXT) cluster a second client listener "
                         "that advertises a port reserved for a proxy in front of it (e.g. "
                         "Toxiproxy: listen on 'proxy', forward to 'upstream'), to try "
                         "network faults between Ferry and the clusters")
    status = verb(lsub, "status", "show the local clusters", cmd_local_status)
    status.add_argument("--dir", help=_DIR_HELP)
    down = verb(lsub, "down", "stop the local clusters", cmd_local_down)
    down.add_argument("--dir", help=_DIR_HELP)
    down.add_argument("--wipe", action="store_true", help="also delete their data")
    verb(lsub, "jars", "fetch the Kafka and Delta jars", cmd_local_jars)


_node_count = at_least_one(lambda value: f"{value!r} is not a node count: give 1 or more "
                                         "(3 for production-like clusters)")
"""`--brokers`: a whole number of nodes, at least 1."""


def _aliases(config_file: str | None) -> tuple[str, ...]:
    """The cluster aliases a config names (read by the config package), or the default
    pair."""
    from ferry.local.cluster import DEFAULT_ALIASES

    if config_file is None:
        return DEFAULT_ALIASES
    from ferry.config import cluster_aliases

    return cluster_aliases(config_file)


def cmd_local_up(args: argparse.Namespace) -> int:
    from ferry.local import cluster

    states = cluster.up(_aliases(args.config), Path(args.dir) if args.dir else None,
                        secure=args.secure, brokers=args.brokers,
                        behind_proxy=args.behind_proxy)
    emit(args, [{"alias": s.alias, "bootstrap": s.bootstrap, "pid": s.pid, "dir": s.dir,
                 "secure": s.secure, "sasl_plaintext": s.plaintext_bootstrap,
                 "brokers": s.brokers, "proxy": cluster.proxy_of(s)}
                for s in states],
         "\n".join(f"{s.alias} {s.bootstrap}" + (" (SASL_SSL)" if s.secure else "")
                   + (f" (proxy {s.proxy_bootstrap} -> {s.proxy_upstream})"
                      if s.proxy_bootstrap else "")
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
    emit(args, rows, text)
    return EXIT_OK if all(r["running"] and r["answering"] for r in rows) and rows \
        else EXIT_FAILED


def cmd_local_down(args: argparse.Namespace) -> int:
    from ferry.local import cluster

    stopped = cluster.down(Path(args.dir) if args.dir else None, wipe=args.wipe)
    emit(args, {"stopped": stopped},
         f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    return EXIT_OK


def cmd_local_jars(args: argparse.Namespace) -> int:
    from ferry.jars import delta_jars, kafka_jars

    kafka, delta = kafka_jars(), delta_jars()
    emit(args, {"kafka": str(kafka), "delta": str(delta)},
         f"kafka jars: {kafka}\ndelta jars: {delta}")
    return EXIT_OK
