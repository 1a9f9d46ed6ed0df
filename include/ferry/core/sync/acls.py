"""ACL sync: which ACLs to create on the target so access follows the source.

MM2's rules (`MirrorSourceConnector.syncTopicAcls`): only LITERAL TOPIC ACLs of mirrored
topics are copied, renamed to the remote topic; ALLOW WRITE is dropped, ALLOW ALL becomes
ALLOW READ, everything else (DENY included) is copied as is; additive only.

Beyond MM2, each behind a `ferry.` switch that defaults on:

- `ferry.sync.acls.prefixed`: a PREFIXED topic ACL becomes a PREFIXED ACL on the remote
  prefix when the replication policy maps prefixes to prefixes (`A.` + prefix under the
  default policy, the prefix itself under the identity policy). A literal `*` becomes
  PREFIXED `A.` (every remote topic of the source) instead of MM2's meaningless literal
  `A.*`; under the identity policy it is skipped (it would cover the target's own topics).
- `ferry.sync.acls.groups`: LITERAL GROUP ACLs of groups that pass the flow's group filter
  are copied with READ and DESCRIBE (ALL becomes READ; DENY kept), so consumers can fail
  over with their own principals.

Nothing ever grants WRITE on a remote topic. ACLs not copied for a reason the operator may
care about come back as `skipped`, with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from ferry.config import Flow
from ferry.mm2.replication import is_cycle, should_replicate_topic

TOPIC, GROUP = "TOPIC", "GROUP"
LITERAL, PREFIXED = "LITERAL", "PREFIXED"
ALLOW, DENY = "ALLOW", "DENY"
WILDCARD = "*"
_PROBE = "\x00"  # a character no topic name holds: tells whether a policy keeps prefixes


@dataclass(frozen=True, order=True)
class Acl:
    """One ACL binding, with Kafka's enum names as text."""

    resource_type: str
    name: str
    pattern: str
    principal: str
    host: str
    operation: str
    permission: str

    def describe(self) -> str:
        pattern = "" if self.pattern == LITERAL else f" ({self.pattern.lower()})"
        return (f"{self.permission} {self.principal} {self.operation} on "
                f"{self.resource_type} {self.name}{pattern} from host {self.host}")


@dataclass(frozen=True)
class AclActions:
    create: tuple[Acl, ...] = ()
    skipped: tuple[tuple[Acl, str], ...] = ()


def remote_prefix(flow: Flow, prefix: str) -> str | None:
    """The remote prefix that covers exactly the remote topics of topics starting with
    `prefix`, or None when the policy cannot express it."""
    remote = flow.remote_topic(prefix)
    if not remote or flow.remote_topic(prefix + _PROBE) != remote + _PROBE:
        return None
    return remote


def _topic_acl(flow: Flow, acl: Acl, prefixed: bool) -> Acl | str | None:
    """The remote ACL, a reason to skip it, or None to leave it out silently."""
    if acl.permission == ALLOW and acl.operation == "WRITE":
        return "WRITE is never granted on remote topics"
    if acl.permission == ALLOW and acl.operation == "ALL":
        acl = replace(acl, operation="READ")
    if acl.pattern == LITERAL and acl.name != WILDCARD:
        if not should_replicate_topic(flow.policy, flow.topics, acl.name, flow.target,
                                      flow.heartbeats_replication):
            return None
        return replace(acl, name=flow.remote_topic(acl.name))
    if not prefixed:
        return "prefixed and wildcard topic ACLs need ferry.sync.acls.prefixed=true"
    start = "" if acl.name == WILDCARD else acl.name
    if start.startswith("__") or is_cycle(flow.policy, start + "x", flow.target):
        return None
    mapped = remote_prefix(flow, start)
    if mapped is None:
        return (f"{flow.policy.class_name.rsplit('.', 1)[-1]} cannot express the prefix "
                f"{start!r} as a remote prefix")
    return replace(acl, name=mapped, pattern=PREFIXED)


def _group_acl(flow: Flow, acl: Acl, groups: bool) -> Acl | str | None:
    if not groups:
        return None
    if acl.pattern != LITERAL or acl.name == WILDCARD:
        return "prefixed and wildcard group ACLs are not copied (the group filter cannot " \
               "be checked against them)"
    if not flow.groups.accepts(acl.name):
        return None
    if acl.permission == DENY:
        return acl
    if acl.operation == "ALL":
        return replace(acl, operation="READ")
    if acl.operation in ("READ", "DESCRIBE"):
        return acl
    return f"only READ and DESCRIBE are copied for groups, not {acl.operation}"


def diff_acls(flow: Flow, source: Iterable[Acl], target: Iterable[Acl], *,
              prefixed: bool = True, groups: bool = True) -> AclActions:
    """The ACLs to create on the target (not there yet), and the ones skipped, why."""
    have = set(target)
    create: dict[Acl, None] = {}
    skipped: list[tuple[Acl, str]] = []
    for acl in sorted(set(source)):
        if acl.resource_type == TOPIC:
            result = _topic_acl(flow, acl, prefixed)
        elif acl.resource_type == GROUP:
            result = _group_acl(flow, acl, groups)
        else:
            result = None
        if isinstance(result, str):
            skipped.append((acl, result))
        elif result is not None and result not in have:
            create[result] = None
    return AclActions(tuple(create), tuple(skipped))
