"""ACL sync: MM2's literal-topic rules, and Ferry's prefixed and group extensions."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.config import Flow, load_config
from ferry.core.sync.acls import Acl, diff_acls, remote_prefix


def flow(tmp_path: Path, extra: str = "") -> Flow:
    path = tmp_path / "mm2.properties"
    path.write_text("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\n"
                    "A->B.enabled = true\ngroups = app-.*\n" + extra)
    return load_config(path).flow("A->B")


def acl(kind: str, name: str, op: str, perm: str = "ALLOW", pattern: str = "LITERAL",
        who: str = "User:alice") -> Acl:
    return Acl(kind, name, pattern, who, "*", op, perm)


@pytest.mark.parametrize(
    ("source", "created"),
    [
        (acl("TOPIC", "orders", "READ"), acl("TOPIC", "A.orders", "READ")),
        (acl("TOPIC", "orders", "DESCRIBE"), acl("TOPIC", "A.orders", "DESCRIBE")),
        (acl("TOPIC", "orders", "ALL"), acl("TOPIC", "A.orders", "READ")),
        (acl("TOPIC", "orders", "WRITE", "DENY"), acl("TOPIC", "A.orders", "WRITE", "DENY")),
        (acl("TOPIC", "orders", "ALL", "DENY"), acl("TOPIC", "A.orders", "ALL", "DENY")),
        (acl("TOPIC", "ord", "READ", pattern="PREFIXED"),
         acl("TOPIC", "A.ord", "READ", pattern="PREFIXED")),
        (acl("TOPIC", "*", "READ"), acl("TOPIC", "A.", "READ", pattern="PREFIXED")),
        (acl("GROUP", "app-1", "READ"), acl("GROUP", "app-1", "READ")),
        (acl("GROUP", "app-1", "ALL"), acl("GROUP", "app-1", "READ")),
        (acl("GROUP", "app-1", "DESCRIBE", "DENY"), acl("GROUP", "app-1", "DESCRIBE", "DENY")),
    ],
    ids=["read", "describe", "all-becomes-read", "deny-write-kept", "deny-all-kept",
         "prefixed", "wildcard-to-remote-prefix", "group-read", "group-all-becomes-read",
         "group-deny"],
)
def test_copied_acls(tmp_path: Path, source: Acl, created: Acl) -> None:
    actions = diff_acls(flow(tmp_path), [source], [])
    assert actions.create == (created,)
    assert actions.skipped == ()


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (acl("TOPIC", "orders", "WRITE"), "WRITE is never granted"),
        (acl("TOPIC", "o", "WRITE", pattern="PREFIXED"), "WRITE is never granted"),
        (acl("GROUP", "app-", "READ", pattern="PREFIXED"), "not copied"),
        (acl("GROUP", "app-1", "DELETE"), "only READ and DESCRIBE"),
    ],
    ids=["allow-write", "prefixed-write", "prefixed-group", "group-delete"],
)
def test_skipped_acls_say_why(tmp_path: Path, source: Acl, reason: str) -> None:
    actions = diff_acls(flow(tmp_path), [source], [])
    assert actions.create == ()
    ((skipped, why),) = actions.skipped
    assert skipped == source and reason in why


@pytest.mark.parametrize(
    "source",
    [acl("TOPIC", "__consumer_offsets", "READ"), acl("TOPIC", "B.orders", "READ"),
     acl("GROUP", "other-group", "READ"), acl("CLUSTER", "kafka-cluster", "ALTER"),
     acl("TOPIC", "B.", "READ", pattern="PREFIXED"),
     acl("TOPIC", "x.internal", "READ")],
    ids=["internal", "cycle", "group-not-in-filter", "cluster", "prefix-of-cycle",
         "mm2-internal"],
)
def test_acls_outside_the_flow_are_left_out(tmp_path: Path, source: Acl) -> None:
    assert diff_acls(flow(tmp_path), [source], []) == diff_acls(flow(tmp_path), [], [])


def test_filtered_topics_are_left_out(tmp_path: Path) -> None:
    f = flow(tmp_path, "A->B.topics = orders.*\n")
    assert diff_acls(f, [acl("TOPIC", "payments", "READ")], []).create == ()


def test_switches_turn_the_extensions_off(tmp_path: Path) -> None:
    source = [acl("TOPIC", "ord", "READ", pattern="PREFIXED"), acl("GROUP", "app-1", "READ"),
              acl("TOPIC", "orders", "READ")]
    actions = diff_acls(flow(tmp_path), source, [], prefixed=False, groups=False)
    assert actions.create == (acl("TOPIC", "A.orders", "READ"),)
    assert [why for _, why in actions.skipped] == [
        "prefixed and wildcard topic ACLs need ferry.sync.acls.prefixed=true"]


def test_acls_already_on_the_target_are_not_created_again(tmp_path: Path) -> None:
    remote = acl("TOPIC", "A.orders", "READ")
    assert diff_acls(flow(tmp_path), [acl("TOPIC", "orders", "ALL"),
                                      acl("TOPIC", "orders", "READ")], [remote]).create == ()


def test_principal_and_host_are_kept(tmp_path: Path) -> None:
    source = Acl("TOPIC", "orders", "LITERAL", "User:bob", "10.0.0.1", "READ", "ALLOW")
    (created,) = diff_acls(flow(tmp_path), [source], []).create
    assert (created.principal, created.host) == ("User:bob", "10.0.0.1")


@pytest.mark.parametrize(
    ("extra", "prefix", "expected"),
    [
        ("", "ord", "A.ord"),
        ("replication.policy.separator = _\n", "ord", "A_ord"),
        ("replication.policy.class = org.apache.kafka.connect.mirror."
         "IdentityReplicationPolicy\n", "ord", "ord"),
        ("replication.policy.class = org.apache.kafka.connect.mirror."
         "IdentityReplicationPolicy\n", "", None),
        # the identity policy renames names ending in heartbeats: not a prefix mapping
        ("replication.policy.class = org.apache.kafka.connect.mirror."
         "IdentityReplicationPolicy\n", "my-heartbeats", None),
    ],
    ids=["default", "separator", "identity", "identity-wildcard", "identity-heartbeats"],
)
def test_remote_prefix_only_where_the_policy_maps_prefixes(
    tmp_path: Path, extra: str, prefix: str, expected: str | None
) -> None:
    assert remote_prefix(flow(tmp_path, extra), prefix) == expected
