"""Map a MirrorMaker 1 setup onto MM2 properties: a Strimzi `KafkaMirrorMaker` resource
(`kafka.strimzi.io/v1beta1` or `v1beta2`), or MM1's command line (a file that holds it: a
start script, a unit's ExecStart; `--consumer.config`, `--producer.config`, `--whitelist`
or `--include`, `--num.streams`).

MM1 kept topic names, so both become one flow, `<name>->target`, with
IdentityReplicationPolicy, where `<name>` is the setup's own name (the resource's
`metadata.name`; the command line's file name without its extension): what Ferry keeps on
the target (writer ids, the positions group, the offset-map topic) is named by the flow,
so two MM1 setups mirroring into one target never share it. Heartbeats and checkpoints stay
off (MM1 had neither); group translation and config/ACL sync keep MM2's defaults, which
`ferry validate` shows. `Translation` says what each MM1 setting became, and what has no
meaning in Ferry; it is shown by `ferry validate` beside the flow. Secret references of
the resource resolve from the mounted secrets directory, as for `KafkaMirrorMaker2`
(`ferry.config.strimzi`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferry.config.findings import Findings
from ferry.config.properties import parse_properties

TARGET = "target"
IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"

# Client settings that describe the connection, not one client: they go to the cluster, so
# Ferry's admin clients (sync, plan, checkpoints) reach it as the copy's clients do.
_CONNECTION = ("bootstrap.servers", "security.protocol", "sasl.", "ssl.", "client.dns.lookup",
               "socket.", "connections.max.idle.ms", "reconnect.backoff", "request.timeout.ms",
               "metadata.max.age.ms")

# Settings Ferry decides itself: shown as having no meaning, never passed on.
_MEANINGLESS = {
    "consumer": {
        "group.id": "MM1's consumer group: its committed offsets are MM1's progress; Ferry "
                    "keeps its own positions, committed with each range",
        "enable.auto.commit": "Ferry commits positions in each range's transaction",
        "auto.commit.interval.ms": "Ferry commits positions in each range's transaction",
        "auto.offset.reset": "Ferry copies from the oldest record of a new partition and "
                             "records any gap",
        "isolation.level": "Ferry reads read_committed",
        "client.id": "Ferry names its clients",
        "partition.assignment.strategy": "Ferry assigns partitions to lanes itself",
    },
    "producer": {
        "acks": "Ferry writes with acks=all",
        "enable.idempotence": "Ferry's producers are idempotent and transactional",
        "retries": "Ferry's producers are idempotent and transactional",
        "max.in.flight.requests.per.connection": "Ferry keeps order per partition",
        "transactional.id": "Ferry sets one per flow and lane",
        "client.id": "Ferry names its clients",
    },
}


@dataclass
class Translation:
    """What an MM1 setup became: (setting, what it became) in the order read, and warnings."""

    kind: str
    became: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def note(self, setting: str, became: str) -> None:
        self.became.append((setting, became))


@dataclass(frozen=True)
class Names:
    """The aliases and flow of one MM1 setup: its source cluster is named after the setup."""

    source: str

    @property
    def target(self) -> str:
        return TARGET

    @property
    def flow(self) -> str:
        return f"{self.source}->{TARGET}"

    @classmethod
    def of(cls, setup: str) -> Names:
        """The names of the setup called `setup`: letters, digits, '_' and '-' kept (what an
        alias may hold), anything else made '-'; `source` when nothing is left, or when it
        would be the target's alias."""
        alias = re.sub(r"[^A-Za-z0-9_-]+", "-", setup).strip("-")
        return cls(alias if alias and alias != TARGET else "source")


MM1_BEHAVIOUR = ("{flow} behaves as MM1 did: no topic config or ACL sync, no heartbeats, "
                 "no checkpoints (for MM2's, write the flow as an mm2.properties)")


def flow_properties(names: Names, include: str, streams: Any,
                    done: Translation) -> dict[str, str]:
    """The flow's own keys: enabled, identity names, MM1's topics and only those; no
    heartbeats or checkpoints (MM1 emitted neither, and mirrored no `heartbeats` topic its
    whitelist did not name: MM2 mirrors those whatever its topics filter says), and no
    topic config or ACL sync (MM1 never changed the target's topics after the broker
    auto-created them). Topics are created with the target's default replication factor
    (-1), as MM1's were: MM2's default, 2, would fail on a one-broker target that MM1
    served. `done` notes the behaviour kept."""
    flow = names.flow
    props = {"clusters": f"{names.source}, {TARGET}", f"{flow}.enabled": "true",
             f"{flow}.topics": java_list(include), "replication.policy.class": IDENTITY,
             "emit.heartbeats.enabled": "false", "emit.checkpoints.enabled": "false",
             "heartbeats.replication.enabled": "false", "replication.factor": "-1",
             "sync.topic.configs.enabled": "false", "sync.topic.acls.enabled": "false"}
    if streams not in (None, ""):
        props[f"{flow}.tasks.max"] = str(streams)
    done.note(f"(the {done.kind})", MM1_BEHAVIOUR.format(flow=flow))
    return props


def java_list(pattern: str) -> str:
    """MM1's whitelist as one Java regex: it took `|` alternatives and comma lists alike."""
    parts = [p.strip() for p in str(pattern).replace(",", "|").split("|")]
    return "|".join(p for p in parts if p)


def client_settings(role: str, alias: str, settings: Mapping[str, Any],
                    props: dict[str, str], done: Translation, where: str,
                    sep: str = ".") -> None:
    """One MM1 client's settings (`role`: consumer or producer) as `alias`'s keys: the
    connection ones for the whole cluster, the rest for that client; Ferry's own are left
    out, each said why. Each is noted as `<where><sep><key>`."""
    for key, value in settings.items():
        text, setting = text_of(value), f"{where}{sep}{key}"
        if key in _MEANINGLESS[role]:
            done.note(setting, f"no meaning in Ferry: {_MEANINGLESS[role][key]}")
        elif key.startswith(_CONNECTION):
            props[f"{alias}.{key}"] = text
            done.note(setting, f"{alias}.{key}")
        else:
            props[f"{alias}.{role}.{key}"] = text
            done.note(setting, f"{alias}.{role}.{key}")


def command_line(text: str, path: str, base_dir: Path,
                 findings: Findings) -> tuple[dict[str, str], Translation]:
    """MM1's command line (the first line that names `--consumer.config`; `\\` line
    continuations joined). Its properties files are read relative to the file's folder.
    The setup is named after the file (`Names`)."""
    done = Translation("MirrorMaker 1 command line")
    names = Names.of(Path(path).name.split(".")[0])
    joined = text.replace("\\\n", " ")
    line = next((x for x in joined.splitlines() if "--consumer.config" in x), "")
    try:
        words = shlex.split(line, comments=True)
    except ValueError as exc:
        findings.problem(path, f"cannot read the command line: {exc}", "fix its quoting")
        return {}, done
    options = _options(words)
    props: dict[str, str] = {}
    for role, alias in (("consumer", names.source), ("producer", TARGET)):
        name = options.get(f"--{role}.config")
        if not name:
            findings.problem(f"--{role}.config", "missing",
                             f"give MM1's --{role}.config file")
            continue
        settings = _read(base_dir / name, f"--{role}.config", findings)
        if settings is None:
            continue
        if not settings.get("bootstrap.servers"):
            findings.problem(f"--{role}.config {name}: bootstrap.servers", "missing",
                             f"set bootstrap.servers in {name}")
        client_settings(role, alias, settings, props, done, f"--{role}.config {name}", ": ")
    flag = "--include" if options.get("--include") else "--whitelist"
    include = options.get(flag)
    if not include:
        findings.problem("--whitelist", "missing: nothing to mirror",
                         "give --include (or --whitelist) with MM1's topic pattern")
    else:
        done.note(f"{flag} {include}", f"{names.flow}.topics = {java_list(include)}")
    streams = options.get("--num.streams")
    if streams:
        done.note(f"--num.streams {streams}", f"{names.flow}.tasks.max = {streams} (lanes)")
    for option in ("--offset.commit.interval.ms", "--abort.on.send.failure",
                   "--message.handler", "--rebalance.listener"):
        if option in options:
            done.note(f"{option} {options[option]}", _WHY_NOT[option])
    if options.get("--abort.on.send.failure", "true").lower() == "false":
        done.warnings.append(NEVER_DROPS.format(setting="--abort.on.send.failure false"))
    props.update(flow_properties(names, include or "", streams, done))
    return props, done


COMMIT_INTERVAL = ("no meaning in Ferry: positions are committed with each range, in its "
                   "transaction")
ABORT_ON_SEND = "no meaning in Ferry: a record the target refuses always fails the run, naming it"

_WHY_NOT = {
    "--offset.commit.interval.ms": COMMIT_INTERVAL,
    "--abort.on.send.failure": ABORT_ON_SEND,
    "--message.handler": "no meaning in Ferry: records are copied as they are",
    "--rebalance.listener": "no meaning in Ferry: lanes are assigned, not subscribed",
}

NEVER_DROPS = ("{setting}: Ferry never drops a record; a record the target refuses fails the "
               "run with its topic, partition and offset named")


def _options(words: list[str]) -> dict[str, str]:
    """`--name value` and `--name=value` pairs after the program's name."""
    found: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            if "=" in word:
                name, value = word.split("=", 1)
                found[name] = value
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                found[word] = words[i + 1]
                i += 1
            else:
                found[word] = "true"
        i += 1
    return found


def _read(file: Path, option: str, findings: Findings) -> dict[str, str] | None:
    try:
        return parse_properties(file.read_text())
    except OSError as exc:
        findings.problem(option, f"cannot read {file}: {exc.strerror or exc}",
                         "give the path relative to the command line's file")
        return None


def text_of(value: Any) -> str:
    """A YAML scalar as a properties value (booleans as Java writes them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
