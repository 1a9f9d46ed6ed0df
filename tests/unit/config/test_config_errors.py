"""Bad configs: each mistake is one line naming the key, the value (masked if secret) and
the fix; every problem of a file is reported at once."""

from __future__ import annotations

import pytest

from ferry.errors import ConfigError
from tests.unit.conftest import BASE, Loader


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ("A.bootstrap.servers=a:1\n", "clusters", "missing: the config names no clusters"),
        (BASE + "A->C.enabled = true\n", "A->C.enabled", "unknown target cluster 'C'"),
        (BASE + "X->B.topics = t\n", "X->B.topics", "unknown source cluster 'X'"),
        (BASE + "A->A.enabled = true\n", "A->A.enabled", "a flow from cluster 'A' to itself"),
        (BASE + "A->B.topics = orders(\n", "A->B.topics", "invalid regular expression"),
        (BASE + "groups.exclude = [x\n", "groups.exclude", "invalid regular expression"),
        ("clusters = A, B\nA.bootstrap.servers = a:1\n", "B.bootstrap.servers", "missing"),
        (BASE + "B.bootstrap.servers = nohost\n", "B.bootstrap.servers", "is not host:port"),
        (BASE + "replication.policy.class = com.acme.MyPolicy\n", "replication.policy.class",
         "unknown replication policy class"),
        (BASE + "ferry.transaction.max.seconds = -5\n", "ferry.transaction.max.seconds",
         "cannot be negative"),
        (BASE + "ferry.range.max.records = -1\n", "ferry.range.max.records", "above 0"),
        (BASE + "A->B.sync.topic.acls.interval.seconds = soon\n",
         "A->B.sync.topic.acls.interval.seconds", "must be a whole number"),
        (BASE + "A->B.enabled = yes\n", "A->B.enabled", "must be true or false"),
        (BASE + "ferry.delivery = maybe\n", "ferry.delivery", "must be one of"),
        (BASE + "ferry.schedule = every minute\n", "ferry.schedule", "cron expression"),
        (BASE + "ferry.schedule = 99 * * * *\n", "ferry.schedule",
         "minute field '99' is out of range (0-59)"),
        (BASE + "A->B.ferry.schedule = 0 0 * 13 *\n", "A->B.ferry.schedule",
         "month field '13' is out of range"),
        (BASE + "ferry.shedule = @daily\n", "ferry.shedule", "did you mean ferry.schedule"),
        (BASE + "A->B.ferry.continuous.lanes = kept\n", "A->B.ferry.continuous.lanes",
         "replaced by ferry.copy.runner: kept is local"),
        (BASE + "A.ferry.delivery = at_least_once\n", "A.ferry.delivery",
         "unknown cluster-level Ferry setting"),
        (BASE + "replication.factor = 0\n", "replication.factor", "at least 1"),
        (BASE + "use.incremental.alter.configs = always\n", "use.incremental.alter.configs",
         "requested, required, never"),
        (BASE + "A->B.topic.filter.class = com.acme.Filter\n", "A->B.topic.filter.class",
         "custom filter classes are Java-only"),
        ("clusters = A, A.b\nA.bootstrap.servers=a:1\n", "clusters", "may use only letters"),
        (BASE + "ferry.task.retries = -1\n", "ferry.task.retries", "from 0 to 100"),
        (BASE + "A->B.ferry.copy.retries = twice\n", "A->B.ferry.copy.retries",
         "from 0 to 100"),
        (BASE + "ferry.task.pool = kafka mirrors\n", "ferry.task.pool",
         "must be a name of letters"),
    ],
    ids=["no-clusters", "unknown-target", "unknown-source", "self-flow", "bad-topic-regex",
         "bad-group-regex", "no-bootstrap", "bad-bootstrap", "unknown-policy",
         "negative-ferry-duration", "negative-range-cap", "non-numeric-interval",
         "non-boolean", "bad-delivery", "bad-schedule", "schedule-minute-out-of-range",
         "flow-schedule-month-out-of-range", "ferry-typo", "replaced-key", "cluster-ferry-key",
         "zero-replication-factor", "bad-incremental-mode", "custom-filter", "bad-alias",
         "negative-retries", "words-for-retries", "pool-with-a-space"],
)
def test_each_mistake_names_its_key(load: Loader, text: str, key: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(text)
    lines = str(err.value).splitlines()
    assert any(f": {key}" in line and message in line for line in lines), lines
    for problem in err.value.problems:
        assert problem.fix, f"no fix given for {problem}"


def test_all_problems_are_reported_at_once(load: Loader) -> None:
    text = BASE + ("A->C.enabled = true\nA->B.topics = (\nferry.delivery = twice\n"
                   "B.bootstrap.servers = \n")
    with pytest.raises(ConfigError) as err:
        load(text)
    keys = {p.key for p in err.value.problems}
    assert {"A->C.enabled", "A->B.topics", "ferry.delivery", "B.bootstrap.servers"} <= keys


def test_secret_values_are_masked_in_problems(load: Loader) -> None:
    text = BASE + ("A.security.protocol = SASL_SSL\nA.sasl.mechanism = PLAIN\n"
                   "A.sasl.jaas.config = not a jaas string with hunter2-password\n")
    with pytest.raises(ConfigError) as err:
        load(text)
    assert "hunter2" not in str(err.value)
    assert "sasl.jaas.config" in str(err.value)


def test_unreadable_config_file_is_a_config_error(tmp_path: object) -> None:
    from ferry.config import load_config

    with pytest.raises(ConfigError, match="cannot read the config"):
        load_config("/nonexistent/mm2.properties")


@pytest.mark.parametrize("key", ["transforms", "A->B.transforms", "A->B.predicates"])
def test_connect_transforms_are_refused(load: Loader, key: str) -> None:
    with pytest.raises(ConfigError, match="transforms and predicates change records"):
        load(BASE + f"{key} = mask\n")


@pytest.mark.parametrize("schedule", [
    "*/5 * * * *", "0 9 * * MON-FRI", "0 0 1 JAN,jul *", "0 0 L * *", "0 0 15W * *",
    "0 0 * * 5L", "0 0 * * 1#2", "0 0 * * 7", "0-59/15 0-23 1-31 1-12 0-6", "@hourly", "none"])
def test_a_schedule_airflow_accepts_is_accepted(load: Loader, schedule: str) -> None:
    assert load(BASE + f"ferry.schedule = {schedule}\n").flows[0].ferry.schedule == schedule
