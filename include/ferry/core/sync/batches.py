"""Topic creations and partition growth cut to what one KRaft request may do.

A KRaft controller applies a CreateTopics or CreatePartitions request as one atomic batch
of metadata records, and refuses one that would take more than 10,000 ("Unable to perform
excessively large batch operation", POLICY_VIOLATION; "Excessively large number of
partitions per request"): a topic takes a record, each of its partitions one, each config
one. Mirroring 50 topics of 200 partitions in one request was refused that way. So
creations go in requests that each stay within the limit, and a topic too big for one
request is created with what fits and grown to its count in steps, as its source topic
itself must have been.
"""

from __future__ import annotations

from collections.abc import Sequence

RECORDS_PER_REQUEST = 10_000
"""KRaft's most metadata records per user operation (`MAX_RECORDS_PER_USER_OP`)."""


def records_of(partitions: int, configs: int) -> int:
    """Metadata records the creation of a topic takes."""
    return 1 + partitions + configs


def create_batches(topics: Sequence[tuple[str, int, int]],
                   limit: int = RECORDS_PER_REQUEST) -> list[list[str]]:
    """(name, partitions, configs) of topics to create, cut into requests in the given
    order, each within `limit` records; a topic over the limit alone goes in a request of
    its own (created with `first_step`'s count, then grown)."""
    batches: list[list[str]] = []
    size = 0
    for name, partitions, configs in topics:
        weight = min(records_of(partitions, configs), limit)
        if not batches or size + weight > limit:
            batches.append([])
            size = 0
        batches[-1].append(name)
        size += weight
    return batches


def first_step(partitions: int, configs: int, limit: int = RECORDS_PER_REQUEST) -> int:
    """How many of a topic's `partitions` its creation takes: all when they fit in one
    request, else what fits beside its topic and config records."""
    return min(partitions, limit - 1 - configs)


def growth_steps(current: int, wanted: int, limit: int = RECORDS_PER_REQUEST) -> list[int]:
    """The partition counts to grow a topic through, `limit` new partitions at a time,
    ending at `wanted`; none when it has them."""
    steps: list[int] = []
    while current < wanted:
        current = min(wanted, current + limit)
        steps.append(current)
    return steps
