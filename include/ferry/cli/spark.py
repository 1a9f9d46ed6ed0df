"""`ferry spark up|status|down`: the embedded warm Spark (a local Spark Connect server);
`ferry spark serve`: one in the foreground."""

from __future__ import annotations

import argparse
from pathlib import Path

from ferry.cli.verbs import EXIT_FAILED, EXIT_OK, Parser, at_least_one, emit, verb

_DIR_HELP = "where the server's state and log live (default: $FERRY_HOME/local/spark)"
_HEAP_HELP = ("its JVM heap, fixed at start (-Xms = -Xmx, pre-touched): a size such as 512m or "
              "4g, at least 512m (default 1g)")


def _heap(value: str) -> str:
    """--heap's value, lower-cased, when it is a JVM size a Spark driver starts with
    (argparse reports the rest)."""
    from ferry.spark.connect import HEAP_SIZE, check_heap

    heap = value.strip().lower()
    if not HEAP_SIZE.fullmatch(heap):
        raise argparse.ArgumentTypeError(f"{value!r} is not a heap size: give one such as "
                                         "512m, 1g or 4g")
    try:
        check_heap(heap)
    except ValueError as refused:
        raise argparse.ArgumentTypeError(str(refused)) from None
    return heap


_cores = at_least_one(lambda value: f"{value!r}: give a whole number of cores, at least 1")
"""`--max-cores`: a whole number of at least 1."""


def add_parsers(subparsers: argparse._SubParsersAction[Parser]) -> None:
    spark = subparsers.add_parser(
        "spark", help="a local warm Spark (Spark Connect server) the copy jobs run on")
    ssub = spark.add_subparsers(dest="spark_command", required=True, parser_class=Parser)
    up = verb(ssub, "up", "start the local Spark Connect server (kept when running)",
              cmd_spark_up)
    up.add_argument("--dir", help=_DIR_HELP)
    up.add_argument("--port", type=int, help="its port on 127.0.0.1 (default 15002, or a "
                                             "free one when taken)")
    up.add_argument("--master", default="local[*]",
                    help="the server's own Spark master (default local[*])")
    up.add_argument("--heap", type=_heap, default="1g", help=_HEAP_HELP)
    status = verb(ssub, "status", "show the local Spark Connect server", cmd_spark_status)
    status.add_argument("--dir", help=_DIR_HELP)
    down = verb(ssub, "down", "stop the local Spark Connect server", cmd_spark_down)
    down.add_argument("--dir", help=_DIR_HELP)
    serve = verb(ssub, "serve", "run a Spark Connect server in the foreground (containers, "
                 "service managers); it replaces this process", cmd_spark_serve)
    serve.add_argument("--port", type=int, default=15002, help="its port (default 15002)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="the address it listens on (default 127.0.0.1)")
    serve.add_argument("--master", default="local[*]",
                       help="its Spark master (default local[*]), e.g. spark://host:7077")
    serve.add_argument("--heap", type=_heap, default="1g", help=_HEAP_HELP)
    serve.add_argument("--max-cores", type=_cores, default=None,
                       help="the most cores it takes of its master's (spark.cores.max; on a "
                            "standalone master it takes all of them otherwise, and "
                            "spark-submit copies there wait)")


def _dir(args: argparse.Namespace) -> Path | None:
    return Path(args.dir) if args.dir else None


def cmd_spark_up(args: argparse.Namespace) -> int:
    from ferry.local import spark_server

    state = spark_server.up(_dir(args), port=args.port, master=args.master, heap=args.heap)
    emit(args, {"url": state.url, "pid": state.pid, "dir": state.dir, "log": state.log},
         f"{state.url} (pid {state.pid}); use it with ferry.spark.master={state.url}")
    return EXIT_OK


def cmd_spark_status(args: argparse.Namespace) -> int:
    from ferry.local import spark_server

    state, running = spark_server.status(_dir(args))
    if state is None:
        emit(args, {"running": False}, "no local Spark Connect server (run: ferry spark up)")
        return EXIT_FAILED
    emit(args, {"url": state.url, "pid": state.pid if running else None, "running": running,
                "dir": state.dir, "log": state.log},
         f"{state.url} " + (f"running pid {state.pid}" if running else "stopped"))
    return EXIT_OK if running else EXIT_FAILED


def cmd_spark_down(args: argparse.Namespace) -> int:
    from ferry.local import spark_server

    state, running = spark_server.status(_dir(args))
    if running:
        spark_server.down(_dir(args))
    emit(args, {"stopped": running, "pid": state.pid if state and running else None},
         f"stopped pid {state.pid}" if state and running else "nothing was running")
    return EXIT_OK


def cmd_spark_serve(args: argparse.Namespace) -> int:
    import os

    from ferry.spark.connect import server_command
    from ferry.spark.submit import submit_env

    command = server_command(args.port, master=args.master, host=args.host, heap=args.heap,
                             max_cores=args.max_cores)
    os.execve(command[0], command, submit_env())  # never returns
