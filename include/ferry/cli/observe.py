"""What an operator watches: `status` (lag, runs, heartbeats, checkpoints), `metrics`
(Prometheus, printed once or served) and `topology` (the clusters upstream of one)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from ferry.cli.verbs import EXIT_OK, Parser, config_verb, emit
from ferry.observe.collector import REFRESH_SECONDS

log = logging.getLogger("ferry.cli")


def add_parsers(subparsers: argparse._SubParsersAction[Parser]) -> None:
    config_verb(subparsers, "status",
                "per flow and partition: lag, last run, heartbeats, checkpoints", cmd_status,
                ("mm2.properties", "--json   # the config from $FERRY_CONFIG"))
    metrics = config_verb(subparsers, "metrics", "Prometheus metrics (MM2 names + lag per "
                          "partition): print them once, or --serve them", cmd_metrics)
    metrics.add_argument("--serve", metavar="HOST:PORT",
                         help="serve /metrics until interrupted (scrape token: "
                              "$FERRY_METRICS_TOKEN)")
    metrics.add_argument("--refresh", metavar="SECONDS", type=_refresh_seconds,
                         default=REFRESH_SECONDS,
                         help="with --serve: collect in the background every SECONDS "
                              f"(default {REFRESH_SECONDS:g}); a scrape serves the latest "
                              "collection at once, with its age")
    topology = config_verb(subparsers, "topology",
                           "the clusters upstream of one, seen through heartbeats", cmd_topology)
    topology.add_argument("--cluster", required=True, help="the cluster alias to look from")


def _refresh_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: give seconds from 0.1 to 3600, e.g. 15")
    return value


def cmd_status(args: argparse.Namespace) -> int:
    from ferry.config import load_config
    from ferry.observe.status import status

    flows = status(load_config(args.file))
    emit(args, {"flows": [f.to_json() for f in flows]},
         "\n".join(f.text() for f in flows) or "no enabled flows")
    return EXIT_OK


def cmd_metrics(args: argparse.Namespace) -> int:
    from ferry.config import load_config
    from ferry.observe.collect import metric_families
    from ferry.observe.metrics import TOKEN_ENV, to_json

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

        serve(args.file, host, port, token, ready, args.refresh)
        return EXIT_OK
    found = metric_families(load_config(args.file))
    if args.json:
        print(json.dumps({"metrics": to_json(found)}, indent=2))
    else:
        from ferry.observe.exposition import expose

        sys.stdout.write(expose(found, process=False)[0].decode())
    return EXIT_OK


def cmd_topology(args: argparse.Namespace) -> int:
    from ferry.config import load_config
    from ferry.steps.heartbeats import topology

    found = topology(load_config(args.file), args.cluster)
    emit(args, found.to_json(), found.text())
    return EXIT_OK
