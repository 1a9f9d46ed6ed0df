"""Waiting for the leaders of many new topics: a few listings of the cluster's topics, not a
request per topic. A broker lists a topic only once the metadata of its creation reached it,
so right after the creation a listing may leave every new topic out (seen in CI: 30 topics,
the first listing held none, and each was then asked about by name). Pure: the admin's
client is a stand-in answering metadata requests, no broker."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError

from ferry.config.clients import ClientConfig
from ferry.kafka import admin as admin_module
from ferry.kafka.admin import Admin

NAMES = [f"orders-{i}" for i in range(30)]


def led() -> Any:
    return SimpleNamespace(error=None, partitions={0: SimpleNamespace(leader=1)})


class Metadata:
    """Answers `list_topics`: the whole listing leaves the new topics out for the first
    `unlisted_for` listings (and for good with `never`); a topic asked about by name answers
    led, or not authorised with `never`."""

    def __init__(self, unlisted_for: int, never: bool = False) -> None:
        self.unlisted_for, self.never = unlisted_for, never
        self.listings, self.by_name = 0, 0

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> Any:
        if topic is not None:
            self.by_name += 1
            found = SimpleNamespace(error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED),
                                    partitions={}) if self.never else led()
            return SimpleNamespace(topics={topic: found})
        self.listings += 1
        known = self.listings > self.unlisted_for and not self.never
        return SimpleNamespace(topics={n: led() for n in NAMES} if known else {})

    def poll(self, _timeout: float) -> int:
        return 0


@pytest.mark.parametrize("unlisted_for", [0, 1, 3])
def test_new_topics_the_brokers_list_a_moment_later_are_never_asked_about_one_by_one(
    unlisted_for: int
) -> None:
    admin = Admin(ClientConfig("target", "admin", {"bootstrap.servers": "127.0.0.1:1"}))
    metadata = Metadata(unlisted_for)
    admin._admin = metadata  # type: ignore[assignment]

    admin._await_leaders(NAMES)

    assert (metadata.by_name, metadata.listings) == (0, unlisted_for + 1)


def test_new_topics_never_listed_are_asked_about_by_name_once_they_stayed_unlisted(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: topics the principal may create but not describe (never in a listing)
    monkeypatch.setattr(admin_module, "_UNLISTED_S", 0.3)
    admin = Admin(ClientConfig("target", "admin", {"bootstrap.servers": "127.0.0.1:1"}))
    metadata = Metadata(0, never=True)
    admin._admin = metadata  # type: ignore[assignment]

    # when / then: not waited for past the answer by name (access denied: not waited for)
    admin._await_leaders(NAMES)
    assert metadata.by_name == len(NAMES) and metadata.listings >= 2
