"""Java .properties parsing, as java.util.Properties.load reads it."""

from __future__ import annotations

import pytest

from ferry.config.properties import parse_properties


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a=1", {"a": "1"}),
        ("a = 1", {"a": "1"}),
        ("a:1", {"a": "1"}),
        ("a 1", {"a": "1"}),
        ("a\t=\t1  ", {"a": "1  "}),
        ("# comment\n! also\n  a=1", {"a": "1"}),
        ("a=", {"a": ""}),
        ("a", {"a": ""}),
        ("a=1\na=2", {"a": "2"}),
        ("A->B.enabled = true", {"A->B.enabled": "true"}),
        ("k=x=y", {"k": "x=y"}),
        ("k\\=x=y", {"k=x": "y"}),
        ("k=line1 \\\n    line2", {"k": "line1 line2"}),
        ("k=ends\\\\", {"k": "ends\\"}),
        ("k=\\u00e9t\\u00e9", {"k": "été"}),
        ("k=tab\\there", {"k": "tab\there"}),
        ('j=org.x.PlainLoginModule required \\\n  username="u" \\\n  password="p";',
         {"j": 'org.x.PlainLoginModule required username="u" password="p";'}),
        ("", {}),
    ],
    ids=["equals", "spaces", "colon", "whitespace-separator", "tabs-trailing-kept", "comments",
         "empty-value", "key-only", "last-wins", "flow-key", "equals-in-value",
         "escaped-separator", "continuation", "escaped-backslash-at-end", "unicode-escape",
         "tab-escape", "jaas-continued", "empty"],
)
def test_parses_like_java_properties(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


def test_only_cr_and_lf_end_lines_as_in_java() -> None:
    assert parse_properties("a=b\fc\r\nd=e\rf=g") == {"a": "b\fc", "d": "e", "f": "g"}
