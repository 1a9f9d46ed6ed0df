"""Ferry's own settings: `ferry.*` keys, each documented once here with its default.

They may be set at the top level (`ferry.schedule=...`) and overridden per flow
(`A->B.ferry.schedule=...`). `ferry validate` prints them resolved for every flow, and the
keys table in docs/configure.md is this module's `KEYS`. Unknown `ferry.` keys are errors
(typos would otherwise be ignored silently).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferry.config.findings import Findings


@dataclass(frozen=True)
class FerryKey:
    name: str
    default: str
    doc: str
    parse: Callable[[str], Any]
    example: str = ""


def _positive_int(text: str) -> int:
    value = int(text.strip().replace("_", ""))
    if value <= 0:
        raise ValueError("must be a whole number above 0")
    return value


def _positive_seconds(text: str) -> float:
    value = float(text.strip())
    if value <= 0:
        raise ValueError("must be a number of seconds above 0 (Ferry's own durations "
                         "cannot be negative)")
    return value


def _seconds_or_zero(text: str) -> float:
    value = float(text.strip())
    if value < 0:
        raise ValueError("must be a number of seconds, 0 or above")
    return value


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return value

    return parse


_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,\-?LW#]+$")
_PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@yearly",
            "none")


def _schedule(text: str) -> str:
    value = text.strip()
    if value.lower() in _PRESETS:
        return value.lower()
    fields = value.split()
    if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
        raise ValueError("must be a 5-field cron expression (e.g. '*/5 * * * *'), "
                         f"or one of {', '.join(_PRESETS)}")
    # Airflow parses schedules with croniter and drops a DAG whose schedule it refuses: refuse
    # here what croniter would, naming the field. (Importing croniter itself would start a
    # process at every config load.)
    for field, (name, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        if not _cron_field_ok(field, low, high, names):
            raise ValueError(f"its {name} field {field!r} is out of range ({low}-{high}"
                             f"{' or names' if names else ''}), which Airflow would refuse")
    return value


_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_CRON_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day-of-month", 1, 31, {}),
    ("month", 1, 12, {m: i + 1 for i, m in enumerate(_MONTHS)}),
    ("day-of-week", 0, 7, {d: i for i, d in enumerate(_DAYS)}))


def _cron_field_ok(field: str, low: int, high: int, names: dict[str, int]) -> bool:
    """Every value of a cron field within [low, high]: lists, ranges, steps, names, and
    the `?`, `L`, `W`, `#` forms (their numbers checked too)."""
    for item in field.split(","):
        base, _, step = item.partition("/")
        if step and (not step.isdigit() or int(step) == 0):
            return False
        if base in ("*", "?", "L"):
            continue
        special = re.fullmatch(r"(\d*)[LW]|(\d+)#([1-5])", base)
        if special:
            number = special.group(1) or special.group(2)
            if number and not low <= int(number) <= high:
                return False
            continue
        for end in base.split("-", 1):
            value = names.get(end.upper()) if not end.isdigit() else int(end)
            if value is None or not low <= value <= high:
                return False
    return True


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError("must be true or false")
    return value == "true"


def _text(text: str) -> str:
    value = text.strip()
    if not value:
        raise ValueError("must not be empty")
    return value


def _retries(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if not 0 <= value <= 100:
        raise ValueError("must be a whole number from 0 to 100")
    return value


def _optional_name(text: str) -> str:
    """An Airflow pool or queue name, or empty for Airflow's default."""
    value = text.strip()
    if value and not re.fullmatch(r"[A-Za-z0-9_.\-]+", value):
        raise ValueError("must be a name of letters, digits, '_', '.' or '-' (or empty for "
                         "Airflow's default)")
    return value


def _tags(text: str) -> tuple[str, ...]:
    """A comma-separated list of Airflow tags (empty: none)."""
    tags = tuple(t.strip() for t in text.split(",") if t.strip())
    if any(len(t) > 100 for t in tags):
        raise ValueError("a tag may have at most 100 characters")
    return tags


def _callable_path(text: str) -> str:
    """`package.module:function`, importable where Airflow parses and runs the DAGs (empty:
    none)."""
    value = text.strip()
    if value and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", value):
        raise ValueError("must be module:function, e.g. my_team.alerts:notify_slack")
    return value


OWNED_TASK_ARGS = {
    "retries": "ferry.task.retries (ferry.copy.retries for the copy task)",
    "retry_delay": "ferry.task.retry.delay.seconds", "pool": "ferry.task.pool",
    "queue": "ferry.task.queue", "owner": "ferry.dag.owner",
    "on_failure_callback": "ferry.dag.on.failure.callback",
    "execution_timeout": "ferry.copy.timeout.seconds or ferry.cycle.timeout.seconds",
}
"""Airflow task arguments Ferry sets from keys of its own: `ferry.dag.default.args` may
not set them."""


def _default_args(text: str) -> str:
    """A JSON object of Airflow task arguments, returned as canonical JSON ("" for none).
    Arguments named `*_callback` take `module:function`."""
    value = text.strip()
    if not value:
        return ""
    try:
        args = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"must be a JSON object ({exc.msg} at character {exc.pos})") from None
    if not isinstance(args, dict):
        raise ValueError('must be a JSON object, e.g. {"retry_exponential_backoff": true}')
    for name, arg in args.items():
        if name in OWNED_TASK_ARGS:
            raise ValueError(f"{name} is set by {OWNED_TASK_ARGS[name]}: use that key")
        if name.endswith("_callback"):
            _callable_path(arg if isinstance(arg, str) else "?")
    return json.dumps(args, sort_keys=True)


KEYS: tuple[FerryKey, ...] = (
    FerryKey("ferry.state.dir", "ferry-state",
             "Where the Delta state tables (offset map, runs, gaps, ...) live: a local path "
             "(relative paths are relative to the config file) or any Spark/Hadoop URI.",
             _text, "/var/lib/ferry/state"),
    FerryKey("ferry.spark.master", "local[*]",
             "The Spark master the copy job is submitted to, or `sc://host:port`: a Spark "
             "Connect server that runs it warm, from the cycle's process (the Airflow "
             "`spark_default` connection takes precedence in DAG runs).", _text,
             "spark://spark:7077"),
    FerryKey("ferry.delivery", "exactly_once",
             "exactly_once: records, positions and offset-map entries commit in one target "
             "transaction. at_least_once: for targets without transactions (Event Hubs "
             "Standard): each writer slot claimed in Kafka (a static group member), so a "
             "replaced writer commits no further position; duplicates only of a batch a "
             "writer sent and never committed.",
             _choice("exactly_once", "at_least_once")),
    FerryKey("ferry.range.max.records", "1000000",
             "The most records one planned range may hold; a larger backlog is split into "
             "several ranges (and runs).", _positive_int),
    FerryKey("ferry.on.gap", "fail",
             "When retention deleted source records before they were mirrored: the gap is "
             "always recorded (the gaps table); fail stops the run, continue copies on from "
             "the oldest record still there.", _choice("fail", "continue")),
    FerryKey("ferry.transaction.max.records", "200000",
             "The most records one target transaction carries before it commits.",
             _positive_int),
    FerryKey("ferry.remote.records.unmapped", "refuse",
             "A remote partition that already holds committed records the flow has no "
             "offset map for (an MM2 or MM1 mirror filled it) when the flow first copies "
             "into it: refuse stops the run naming the partitions (adopt the old mirror's "
             "progress with `ferry adopt --execute` instead); append copies the source's "
             "history after those records on purpose (they stay, so it is doubled).",
             _choice("refuse", "append"), "append"),
    FerryKey("ferry.writers", "8",
             "The writer slots of the flow: each remote partition is written under the "
             "transactional id of its slot, so a second run writing it at the same time is "
             "fenced by Kafka. Also the most lanes (tasks.max) a run uses. Fixed for the "
             "flow's life: change it only with the flow paused (the next run fences the old "
             "slots' ids, recorded with the positions).", _positive_int, "16"),
    FerryKey("ferry.transaction.max.seconds", "10",
             "The longest a target transaction stays open before it commits (well under "
             "the producer's transaction.timeout.ms).", _positive_seconds, "10"),
    FerryKey("ferry.schedule", "* * * * *",
             "How often the flow's DAG runs: a cron expression or an Airflow preset "
             "(@hourly, @daily, ..., none for manual runs only).", _schedule, "*/5 * * * *"),
    FerryKey("ferry.sync.acls.prefixed", "true",
             "ACL sync also copies PREFIXED topic ACLs to the remote prefix (A. + prefix "
             "under the default policy) and a literal * topic ACL to PREFIXED A. (MM2 copies "
             "literal ACLs only). WRITE is never granted either way.", _bool, "false"),
    FerryKey("ferry.identity.loops.accepted", "false",
             "Allow flows both ways between two clusters with IdentityReplicationPolicy "
             "(which cannot stop records looping back): only when the two directions' topic "
             "filters do not overlap.", _bool, "true"),
    FerryKey("ferry.sync.acls.groups", "true",
             "ACL sync also copies READ/DESCRIBE (and DENY) ACLs of consumer groups that "
             "pass the group filter, so consumers fail over with their own principals.",
             _bool, "false"),
    FerryKey("ferry.kafka.retry.seconds", "120",
             "How long each Kafka call waits out a transient broker state (a coordinator "
             "loading or moving, a leader election, a broker restarting or unreachable), "
             "retrying with backoff, before the run fails naming the cluster, the call and the "
             "last error. A topic Ferry creates is used only once each of its partitions has "
             "a leader, and a call that failed on a partition's leader asks for the topic's "
             "metadata again before the next try. Denied access and other lasting errors fail "
             "at once.",
             _positive_seconds, "300"),
    FerryKey("ferry.copy.timeout.seconds", "21600",
             "The longest a flow's copy (the DAG's copy task, or its cycle task on a Spark "
             "Connect server) may run before Airflow stops it as hung (its execution_timeout): the "
             "flow's next run can start and resumes from what was committed. Size it above your "
             "largest backlog's copy time.",
             _positive_seconds, "3600"),
    FerryKey("ferry.task.retries", "2",
             "How often Airflow retries a failed task of the flow's DAG (cycle, finish, "
             "mirror_continuously); a retry resumes from what was committed.", _retries, "3"),
    FerryKey("ferry.copy.retries", "1",
             "How often Airflow retries a failed copy task (the spark-submit copy); it "
             "copies the same ranges again, which the transactions make safe.", _retries, "2"),
    FerryKey("ferry.task.retry.delay.seconds", "30",
             "How long Airflow waits before retrying a task of the flow's DAG.",
             _positive_seconds, "60"),
    FerryKey("ferry.task.pool", "",
             "The Airflow pool every task of the flow's DAG runs in (create it under Admin > "
             "Pools first; Airflow leaves tasks of a missing pool unscheduled). Empty: "
             "Airflow's default_pool.", _optional_name, "kafka_mirrors"),
    FerryKey("ferry.task.queue", "",
             "The executor queue every task of the flow's DAG goes to (CeleryExecutor: the "
             "workers that can reach both clusters). Empty: the executor's default queue.",
             _optional_name, "dr_workers"),
    FerryKey("ferry.dag.owner", "airflow",
             "The owner of the flow's DAG tasks (Airflow's `owner`, shown and filtered on "
             "in the UI); the other Ferry DAGs take it when every flow has the same.",
             _text, "kafka-platform"),
    FerryKey("ferry.dag.tags", "",
             "Tags added to the flow's DAG (comma-separated) beside Ferry's own (ferry, "
             "source:A, target:B); the other Ferry DAGs take those every flow has.", _tags,
             "dr, team-kafka"),
    FerryKey("ferry.dag.on.failure.callback", "",
             "module:function Airflow calls when a task of the flow's DAG fails (Slack, "
             "PagerDuty, ...): importable wherever the DAGs are parsed and run; a name that "
             "does not import is the DAG file's import error, naming this key. The other "
             "Ferry DAGs take it when every flow has the same.", _callable_path,
             "my_team.alerts:page_on_call"),
    FerryKey("ferry.dag.default.args", "",
             "More default_args for every task of the flow's DAG, as a JSON object of Airflow "
             "task arguments (retry_exponential_backoff, max_retry_delay in seconds, "
             "priority_weight, depends_on_past, ...); an argument named *_callback (a Slack "
             "or SMTP notifier's on_retry_callback, ...) takes module:function. Arguments "
             "Ferry sets from its own keys (retries, retry_delay, pool, queue, owner, "
             "on_failure_callback, execution_timeout) are "
             "refused, naming the key; a name Airflow's operators do not take is the DAG "
             "file's import error. The other Ferry DAGs take it when every flow has the same.",
             _default_args,
             '{"retry_exponential_backoff": true, "max_retry_delay": 600}'),
    FerryKey("ferry.cycle.timeout.seconds", "900",
             "The longest one cycle may take. In a continuous loop (ferry mirror --continuous, the "
             "@continuous DAG) a longer cycle is abandoned as hung: the next cycle starts at once; "
             "its writers hold the same writer ids, so they fence the hung cycle's. In a flow's "
             "DAG it is the execution_timeout of finish, and of cycle unless "
             "ferry.copy.timeout.seconds is longer. Size it well above a cycle's copy of "
             "ferry.range.max.records.",
             _positive_seconds, "1800"),
    FerryKey("ferry.continuous.run.seconds", "600",
             "With ferry.schedule=@continuous: how often Airflow starts the flow's next DAG "
             "run, each mirroring cycle after cycle in one task (each run is a bounded, "
             "retried piece of history). A run goes on copying until the next one's writers "
             "take over, then ends (ferry.continuous.handover.seconds). Each flow's span is "
             "up to 10% shorter or longer, fixed by the flow's name, so that many flows do "
             "not all turn at once.",
             _positive_seconds, "900"),
    FerryKey("ferry.continuous.handover.seconds", "120",
             "With ferry.schedule=@continuous: how long a DAG run goes on copying past its "
             "span while Airflow starts the next run and that run starts its task and "
             "plans; it ends as soon as the next run names itself the flow's newest, and "
             "after this at the latest. The flow so copies through the turn. 0: a run ends "
             "at its span, and nothing is copied from then until the next run's first cycle. "
             "Airflow needs a free task slot for the next run meanwhile. An at_least_once "
             "flow's runs never overlap (Airflow's @continuous schedule, one run at a time): "
             "its writers have no transactions for Kafka to fence.",
             _seconds_or_zero, "60"),
    FerryKey("ferry.state.record.interval.seconds", "60",
             "In a continuous loop on the local copy runner (ferry.copy.runner; ferry mirror "
             "--continuous, the @continuous DAG): how often the runs and the offset map are "
             "appended to Delta, in one batch, behind the copy instead of in every cycle. The "
             "records, their offset-map entries and positions are committed to Kafka in every "
             "cycle as always; Delta is rebuilt from the target's offset-map topic, so nothing is "
             "lost when the process dies before a batch. Delta is at most about this far behind "
             "(ferry status: state behind); a cycle waits when the batch before is still being "
             "written after twice as long. An @continuous DAG run that ends on time starts no "
             "batch that would outlast it and leaves its last stretch to the next run, whose first"
             " batch records it from the offset-map topic with the times its lanes reported: the "
             "next run starts without waiting for a Delta batch, and Delta holds the last stretch "
             "once it has (a stopped loop, ferry mirror --continuous, writes its last batch "
             "itself). The batches are delta-rs appends from the loop's own process (milliseconds "
             "for a batch's rows). 0 records in every cycle.",
             _seconds_or_zero, "10"),
    FerryKey("ferry.continuous.interval.seconds", "1",
             "In a continuous loop (ferry mirror --continuous, the @continuous DAG): the least "
             "time from one cycle's start to the next's. A cycle that took longer is followed "
             "at once; a quicker one (an idle cycle: a few hundredths of a second) waits out "
             "the rest, so an idle or trickling flow does not spin, and many flows share a "
             "machine (twenty flows at 0.5 s needed more than two cores here). Records wait "
             "at most about this long before a cycle looks for them. 0 runs cycles back to "
             "back.",
             _seconds_or_zero, "0.5"),
    FerryKey("ferry.copy.runner", "auto",
             "What runs a cycle's copy. spark: the copy job on ferry.spark.master, its lanes "
             "Spark tasks (spark-submit, or a Spark Connect server for sc://), its runs and "
             "offset map appended with Spark: the engine for flows bigger than one machine. "
             "local: the lanes as threads of the cycle's own process, handed the plan as it "
             "was made (no plan file, no connections snapshot), Delta appended with delta-rs; "
             "in a continuous loop each writer's producer (its transactions initialised) and "
             "each lane's consumer and position reader are kept from cycle to cycle "
             "(exactly_once), so a cycle is read, send, commit, and Delta is appended behind "
             "the copies (ferry.state.record.interval.seconds). The threads share one Python "
             "interpreter: a lane copies at what one core does. The same writer ids, fencing "
             "and positions either way. auto: local in a continuous loop (ferry mirror "
             "--continuous, the @continuous DAG); for a run of its own, local when its plan "
             "is at most ferry.copy.local.max.records offsets and its Spark would be "
             "spark-submit (a JVM and a Spark session started for a trickle), else spark.",
             _choice("auto", "local", "spark"), "local"),
    FerryKey("ferry.copy.local.max.records", "500000",
             "With ferry.copy.runner = auto: the largest plan (offsets to copy) of a run of "
             "its own that the local runner copies instead of a spark-submit job. Measured "
             "on 2 cores: spark-submit's start alone (a JVM and a Spark session) takes about "
             "30 s under a scheduler, where the local runner copies 1,000,000 records of "
             "1 KiB in about 29 s; so a run copying a minute of a trickle starts no JVM, and "
             "backlogs and backfills stay on Spark. A flow on a Spark Connect server (a warm "
             "Spark) copies there whatever its plan's size.",
             _positive_int, "100000"),
)
BY_NAME = {k.name: k for k in KEYS}


def field_of(key: str) -> str:
    """The `FerrySettings` field of a `ferry.` key: `ferry.kafka.retry.seconds` ->
    `kafka_retry_seconds`."""
    return key.removeprefix("ferry.").replace(".", "_")


@dataclass(frozen=True)
class FerrySettings:
    """Resolved `ferry.` settings of one flow. Each field is the key `field_of` names, and
    that key's default, parser and documentation are declared once, in `KEYS`; only its
    type is here (a test holds the two to each other)."""

    state_dir: str
    """An absolute path or a URI (a relative `ferry.state.dir` is resolved against the
    config file's folder)."""
    spark_master: str
    delivery: str
    range_max_records: int
    on_gap: str
    transaction_max_records: int
    remote_records_unmapped: str
    writers: int
    transaction_max_seconds: float
    schedule: str
    sync_acls_prefixed: bool
    sync_acls_groups: bool
    identity_loops_accepted: bool
    kafka_retry_seconds: float
    copy_timeout_seconds: float
    continuous_run_seconds: float
    continuous_handover_seconds: float
    task_retries: int
    copy_retries: int
    task_retry_delay_seconds: float
    task_pool: str
    task_queue: str
    cycle_timeout_seconds: float
    dag_owner: str
    dag_tags: tuple[str, ...]
    dag_on_failure_callback: str
    dag_default_args: str
    state_record_interval_seconds: float
    continuous_interval_seconds: float
    copy_runner: str
    copy_local_max_records: int


def resolve_ferry_settings(
    values: dict[str, tuple[str, str]], base_dir: Path, findings: Findings
) -> FerrySettings:
    """`values` maps a ferry key to (text, origin key); missing keys take their defaults."""
    parsed: dict[str, Any] = {}
    for key in KEYS:
        text, origin = values.get(key.name, (key.default, key.name))
        try:
            parsed[field_of(key.name)] = key.parse(text)
        except ValueError as exc:
            fix = f"e.g. {origin}={key.example or key.default}"
            findings.problem(origin, str(exc), fix, text)
            parsed[field_of(key.name)] = key.parse(key.default)
    state = str(parsed["state_dir"])
    if "://" not in state and not Path(state).is_absolute():
        parsed["state_dir"] = str((base_dir / state).resolve())
    return FerrySettings(**parsed)


REPLACED = {
    "ferry.continuous.lanes": "it was replaced by ferry.copy.runner: kept is local (the "
                              "default in a continuous loop), spark is spark",
}
"""Keys an earlier Ferry read, and what replaced each: the fix an upgrade's config needs."""


def suggest_ferry_key(name: str) -> str:
    """The fix for an unknown `ferry.` key: what replaced a key an earlier Ferry read, the
    closest known key, or all of them."""
    if name in REPLACED:
        return REPLACED[name]
    close = difflib.get_close_matches(name, list(BY_NAME), n=1)
    return f"did you mean {close[0]}?" if close else f"known keys: {', '.join(BY_NAME)}"
