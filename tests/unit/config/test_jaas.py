"""Parsing sasl.jaas.config strings."""

from __future__ import annotations

import pytest

from ferry.config.jaas import JaasError, masked, parse_jaas


@pytest.mark.parametrize(
    ("text", "module", "options"),
    [
        ('org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
         'password="p";', "org.apache.kafka.common.security.plain.PlainLoginModule",
         {"username": "u", "password": "p"}),
        ("org.apache.kafka.common.security.scram.ScramLoginModule required username=u "
         "password=p ;", "org.apache.kafka.common.security.scram.ScramLoginModule",
         {"username": "u", "password": "p"}),
        ('x.PlainLoginModule required username="$ConnectionString" password="Endpoint=sb://'
         'ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=abc=";',
         "x.PlainLoginModule",
         {"username": "$ConnectionString",
          "password": "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;"
                      "SharedAccessKey=abc="}),
        ('m.PlainLoginModule required username="a\\"b" password="p";', "m.PlainLoginModule",
         {"username": 'a"b', "password": "p"}),
    ],
    ids=["plain", "scram-bare", "event-hubs", "escaped-quote"],
)
def test_parses_module_and_options(text: str, module: str, options: dict[str, str]) -> None:
    entry = parse_jaas(text)
    assert entry.module == module
    assert entry.flag in ("required",)
    assert entry.options == options


@pytest.mark.parametrize(
    "text",
    ['username="u" password="p";', 'a.B required username="u"',
     'a.B required x="1"; c.D required y="2";', 'a.B required username="unterminated;'],
    ids=["no-module", "no-semicolon", "two-modules", "unterminated-quote"],
)
def test_rejects_malformed(text: str) -> None:
    with pytest.raises(JaasError):
        parse_jaas(text)


def test_masked_hides_passwords_keeps_usernames() -> None:
    entry = parse_jaas('a.PlainLoginModule required username="alice" password="pw1234";')
    assert masked(entry) == 'a.PlainLoginModule required username="alice" password=******;'


def test_single_quotes_and_stream_tokenizer_escapes_like_kafka() -> None:
    entry = parse_jaas("a.ScramLoginModule required username='alice' password=\"p\\nq\";")
    assert entry.options == {"username": "alice", "password": "p\nq"}
