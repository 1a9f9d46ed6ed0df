"""Ferry's runbook (`runbook.md` in this package) as the HTML page the Ferry page serves at
`/ferry/runbook`: one section per alert, anchored by the alert's name in lower case
(`ferry.observe.rules.anchor`), where each alert rule's `runbook_url` points."""

from __future__ import annotations

import html
import re
from importlib import resources

from markdown_it import MarkdownIt

from ferry.observe.rules import anchor

_STYLE = """
:root { color-scheme: light dark; --line: #8884; --muted: #888; }
body { font: 14px/1.5 system-ui, sans-serif; margin: 16px 24px; max-width: 60em; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 28px; }
h2:target { outline: 2px solid #017cee; outline-offset: 4px; }
code { font-size: 13px; } nav { color: var(--muted); }
"""


def runbook_text() -> str:
    return (resources.files("ferry.observe") / "runbook.md").read_text()


def sections() -> list[str]:
    """The alert names the runbook has a section for (`## A / B` is one for A and B)."""
    return [name for heading in re.findall(r"^## (.+)$", runbook_text(), re.MULTILINE)
            for name in _alerts(heading)]


def _alerts(heading: str) -> list[str]:
    return [name.strip() for name in heading.split("/")]


def render_runbook(base: str = "") -> str:
    """The runbook as a whole HTML page; `base` is the Ferry page's path (its link)."""
    body = MarkdownIt("commonmark").enable("table").render(runbook_text())

    def anchored(match: re.Match[str]) -> str:
        names = _alerts(html.unescape(match.group(1)))
        extra = "".join(f'<a id="{anchor(n)}"></a>' for n in names[1:])
        return f'<h2 id="{anchor(names[0])}">{match.group(1)}{extra}</h2>'

    body = re.sub(r"<h2>(.+?)</h2>", anchored, body)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Ferry runbook</title>"
            f"<style>{_STYLE}</style></head><body><nav><a href='{html.escape(base)}'>"
            f"Ferry</a> / runbook</nav>{body}</body></html>")
