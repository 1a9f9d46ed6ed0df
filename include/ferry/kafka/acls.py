"""Read and create ACLs (adapter for `ferry.core.sync.acls`)."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from ferry.core.sync.acls import Acl
from ferry.kafka.admin import Admin


class NoAuthorizer(Exception):
    """The cluster has no authorizer: its ACL API is disabled."""


def _name(value: object) -> str:
    return str(getattr(value, "name", value))


def _acl(binding: AclBinding) -> Acl:
    return Acl(_name(binding.restype), binding.name, _name(binding.resource_pattern_type),
               binding.principal, binding.host, _name(binding.operation),
               _name(binding.permission_type))


def binding(acl: Acl) -> AclBinding:
    return AclBinding(ResourceType[acl.resource_type], acl.name,
                      ResourcePatternType[acl.pattern], acl.principal, acl.host,
                      AclOperation[acl.operation], AclPermissionType[acl.permission])


def _disabled(exc: KafkaException) -> bool:
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and err.code() == KafkaError.SECURITY_DISABLED


def describe_acls(admin: Admin, types: Iterable[str] = ("TOPIC", "GROUP")) -> list[Acl]:
    """Every ACL on resources of `types`. Raises NoAuthorizer when ACLs are disabled."""
    found: list[Acl] = []
    for kind in types:
        # None matches any name, principal and host (the stubs say str).
        query = AclBindingFilter(ResourceType[kind], None,  # type: ignore[arg-type]
                                 ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
                                 AclOperation.ANY, AclPermissionType.ANY)

        def describe(timeout: float, query: AclBindingFilter = query) -> list[AclBinding]:
            try:
                return list(admin.raw.describe_acls(query, request_timeout=timeout)
                            .result(timeout=timeout + 1))
            except KafkaException as exc:
                if _disabled(exc):
                    raise NoAuthorizer(admin.cluster) from None
                raise

        found.extend(_acl(b) for b in admin.retry(describe, f"describing {kind.lower()} ACLs",
                                                  "DESCRIBE on CLUSTER kafka-cluster"))
    return found


def create_acls(admin: Admin, acls: Iterable[Acl]) -> None:
    """Create the ACLs (existing ones are no error: Kafka's CreateAcls is idempotent)."""
    bindings = [binding(a) for a in acls]
    if not bindings:
        return
    admin.settle({b: b for b in bindings},
                 lambda todo, timeout: admin.raw.create_acls(todo, request_timeout=timeout),
                 lambda made: (f"creating the ACL {_acl(made).describe()}",
                               "ALTER on CLUSTER kafka-cluster"),
                 lambda exc: NoAuthorizer(admin.cluster) if _disabled(exc) else None)
