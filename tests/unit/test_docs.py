"""The docs stay true: the README stays short and links every page of docs/, the pages
document every Ferry setting with its real default and every state-table column, name
commands that exist, link only files that exist, and the deployment file parses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ferry.cli.main import build_parser
from ferry.config.ferry_keys import KEYS

ROOT = Path(__file__).resolve().parents[2]
DOCS_DIR = ROOT / "docs"
README_PATH = ROOT / "README.md"
README = README_PATH.read_text()
PAGES = sorted(DOCS_DIR.glob("*.md"))
ALL_DOCS = "\n".join([README, *(page.read_text() for page in PAGES)])
README_MAX_BYTES = 12_000

# [text](target) outside fenced code; the target up to whitespace or ")" (no titles used).
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:


def page(name: str) -> str:
    return (DOCS_DIR / name).read_text()


def relative_links(path: Path) -> list[str]:
    """The relative link targets of a markdown file, without their #anchors."""
    text = FENCE.sub("", path.read_text())
    targets = (match.group(1) for match in LINK.finditer(text))
    return [target.split("#", 1)[0] for target in targets
            if not EXTERNAL.match(target) and not target.startswith("#")]


def linked_files(path: Path) -> set[Path]:
    return {(path.parent / target).resolve() for target in relative_links(path) if target}


def test_configure_page_documents_every_ferry_key_with_its_default() -> None:
    configure = page("configure.md")
    for key in KEYS:
        assert f"| `{key.name}` | `{key.default}` | {key.doc} |" in configure, key.name


def test_readme_names_the_two_commands_and_ci_runs_the_test_command() -> None:
    assert "./scripts/demo.sh" in README and "./scripts/test.sh" in README
    assert "exec bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_configure_page_examples_exist() -> None:
    configure = page("configure.md")
    for name in ("sasl-ssl-plain.properties", "event-hubs.properties",
                 "identity-migration.properties", "multi-flow.properties", "strimzi-mm2.yaml",
                 "demo.properties"):
        assert (ROOT / "examples" / name).is_file(), name
        assert name in configure, name


def test_docs_cli_verbs_exist() -> None:
    help_text = build_parser().format_help()
    for verb in ("validate", "local"):
        assert verb in help_text
    for usage in ("ferry local up", "ferry local status", "ferry local down", "ferry validate",
                  "ferry plan", "ferry mirror", "ferry offsets", "ferry positions reset",
                  "ferry sync", "ferry local up --secure", "ferry translate",
                  "ferry checkpoints", "ferry topology", "ferry verify",
                  "ferry status", "ferry failover", "ferry dag-file", "ferry completion"):
        assert usage in ALL_DOCS, usage
    for verb in ("plan", "mirror", "offsets", "sync", "translate", "checkpoints", "topology"):
        assert verb in help_text


def test_state_page_documents_every_state_table_column() -> None:
    from ferry.core.tables import (
        CHECKPOINTS_DDL,
        GAPS_DDL,
        OFFSET_MAP_DDL,
        RUNS_DDL,
        SYNCS_DDL,
        VERIFY_DDL,
    )

    state = page("state.md")
    for ddl in (OFFSET_MAP_DDL, RUNS_DDL, GAPS_DDL, SYNCS_DDL, CHECKPOINTS_DDL, VERIFY_DDL):
        for column in ddl.split(", "):
            name = column.split(" ")[0]
            if name in ("schema_version",) or "<" in name or ":" in name:
                continue
            assert f"`{name}`" in state, name


@pytest.mark.parametrize("path", [README_PATH, *PAGES],
                         ids=lambda path: str(path.relative_to(ROOT)))
def test_relative_links_point_at_files_that_exist(path: Path) -> None:
    missing = [target for target in relative_links(path)
               if target and not (path.parent / target).exists()]
    assert not missing, f"{path.relative_to(ROOT)} links to missing {missing}"


def test_readme_stays_short_and_links_every_docs_page() -> None:
    assert PAGES, "docs/ has no pages"
    assert len(README.encode()) < README_MAX_BYTES, len(README.encode())
    linked = linked_files(README_PATH)
    unlinked = [str(p.relative_to(ROOT)) for p in PAGES if p.resolve() not in linked]
    assert not unlinked, f"README.md does not link {unlinked}"


def test_docs_index_links_every_other_page() -> None:
    index = DOCS_DIR / "README.md"
    linked = linked_files(index)
    unlinked = [p.name for p in PAGES if p != index and p.resolve() not in linked]
    assert not unlinked, f"docs/README.md does not link {unlinked}"


def test_docker_compose_parses_with_two_kafka_clusters() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    assert {"kafka-source", "kafka-target"} <= set(compose["services"])
