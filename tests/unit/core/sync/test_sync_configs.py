"""Topic-config sync follows MM2 3.9's `targetConfig`/`syncTopicConfigs` rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.config import Flow, load_config
from ferry.core.sync.configs import (
    AlterTopicConfig,
    ConfigValue,
    creation_configs,
    diff_incremental,
    diff_legacy,
    fallback_api,
    first_api,
    time_retention_seconds,
)

D, T = "DEFAULT_CONFIG", "DYNAMIC_TOPIC_CONFIG"


def flow(tmp_path: Path, extra: str = "") -> Flow:
    path = tmp_path / "mm2.properties"
    path.write_text("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\n"
                    "A->B.enabled = true\n" + extra)
    return load_config(path).flow("A->B")


SOURCE = {
    "retention.ms": ConfigValue("1000", T),
    "cleanup.policy": ConfigValue("delete", D),
    "min.insync.replicas": ConfigValue("2", T),  # excluded by default
    "segment.bytes": ConfigValue("1073741824", "STATIC_BROKER_CONFIG"),
    "max.message.bytes": ConfigValue("2000000", "DYNAMIC_BROKER_CONFIG"),
    "message.format.version": ConfigValue("3.0", D, read_only=True),
    "sasl.secret": ConfigValue(None, T, sensitive=True),
}


def test_creation_copies_non_default_entries_minus_excluded_static_and_read_only(
    tmp_path: Path,
) -> None:
    assert creation_configs(flow(tmp_path), SOURCE) == {
        "max.message.bytes": "2000000", "retention.ms": "1000"}


def test_creation_with_defaults_from_source_copies_source_defaults_too(tmp_path: Path) -> None:
    f = flow(tmp_path, "A->B.use.defaults.from = source\n")
    assert creation_configs(f, SOURCE) == {"cleanup.policy": "delete",
                                           "max.message.bytes": "2000000",
                                           "retention.ms": "1000"}


@pytest.mark.parametrize(
    ("extra", "target", "sets", "deletes"),
    [
        # a source change is set; a value already overridden the same is left alone
        ("", {"retention.ms": ConfigValue("5", T), "max.message.bytes": ConfigValue(
            "2000000", T)}, (("retention.ms", "1000"),), ()),
        # a source default reverts a target override (use.defaults.from=target)
        ("", {"retention.ms": ConfigValue("1000", T), "max.message.bytes": ConfigValue(
            "2000000", T), "cleanup.policy": ConfigValue("compact", T)}, (),
         ("cleanup.policy",)),
        # with use.defaults.from=source the source default is written
        ("A->B.use.defaults.from = source\n", {"retention.ms": ConfigValue("1000", T),
                                          "max.message.bytes": ConfigValue("2000000", T),
                                          "cleanup.policy": ConfigValue("compact", T)},
         (("cleanup.policy", "delete"),), ()),
        # a target override of an excluded key is never touched
        ("", {"retention.ms": ConfigValue("1000", T), "max.message.bytes": ConfigValue(
            "2000000", T), "min.insync.replicas": ConfigValue("1", T)}, (), ()),
        # a target default equal in value is still made an override, as MM2 does
        ("", {"retention.ms": ConfigValue("1000", D), "max.message.bytes": ConfigValue(
            "2000000", T)}, (("retention.ms", "1000"),), ()),
    ],
    ids=["changed", "default-reverts", "defaults-from-source", "excluded-kept", "as-override"],
)
def test_incremental_sync(tmp_path: Path, extra: str, target: dict[str, ConfigValue],
                          sets: tuple[tuple[str, str], ...], deletes: tuple[str, ...]) -> None:
    changes = diff_incremental(flow(tmp_path, extra), {"orders": SOURCE}, {"A.orders": target})
    expected = (AlterTopicConfig("A.orders", "orders", sets, deletes),) if sets or deletes \
        else ()
    assert changes == expected


def test_incremental_sync_covers_only_topics_present_on_both_sides(tmp_path: Path) -> None:
    assert diff_incremental(flow(tmp_path), {"orders": SOURCE}, {"A.other": {}}) == ()


def test_legacy_replace_keeps_target_overrides_of_excluded_keys(tmp_path: Path) -> None:
    target = {"retention.ms": ConfigValue("5", T), "min.insync.replicas": ConfigValue("1", T),
              "cleanup.policy": ConfigValue("compact", T)}
    (change,) = diff_legacy(flow(tmp_path), {"orders": SOURCE}, {"A.orders": target})
    assert dict(change.configs) == {"max.message.bytes": "2000000", "retention.ms": "1000",
                                    "min.insync.replicas": "1"}
    assert change.changed == ("cleanup.policy", "max.message.bytes", "retention.ms")


def test_legacy_replace_is_left_out_when_in_step(tmp_path: Path) -> None:
    target = {"retention.ms": ConfigValue("1000", T),
              "max.message.bytes": ConfigValue("2000000", T)}
    assert diff_legacy(flow(tmp_path), {"orders": SOURCE}, {"A.orders": target}) == ()


@pytest.mark.parametrize(
    ("mode", "first", "fallback"),
    [("requested", "incremental", "legacy"), ("required", "incremental", None),
     ("never", "legacy", None)],
)
def test_use_incremental_alter_configs_modes(mode: str, first: str,
                                             fallback: str | None) -> None:
    assert first_api(mode) == first
    assert fallback_api(mode) == fallback


@pytest.mark.parametrize(
    ("configs", "expected"),
    [
        ({"retention.ms": "604800000", "cleanup.policy": "delete"}, 604800.0),
        ({"retention.ms": "3600000", "cleanup.policy": "compact,delete"}, 3600.0),
        ({"retention.ms": "3600000", "cleanup.policy": "compact"}, None),
        ({"retention.ms": "-1", "cleanup.policy": "delete"}, None),
        ({"retention.ms": "60000"}, 60.0),
        ({"cleanup.policy": "delete"}, None),
        ({"retention.ms": "soon"}, None),
    ],
    ids=["a-week", "compacted-and-deleted", "compacted-only", "kept-for-ever",
         "policy-not-described", "retention-not-described", "not-a-number"],
)
def test_a_topics_retention_by_time_is_its_retention_ms_when_records_are_deleted(
    configs: dict[str, str], expected: float | None
) -> None:
    assert time_retention_seconds({k: ConfigValue(v) for k, v in configs.items()}) == expected
