"""No two files of the library import each other, directly or around a loop: not at the top,
not under `TYPE_CHECKING`, not inside a function. (The layer contracts in `pyproject.toml`
check packages; this checks files, which `lint-imports` does not.)"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "include"


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The library's modules that `module` imports anywhere in its file."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            # a module's own packages (their __init__) run before it: not a loop of files
            if name and name != module and not module.startswith(name + "."):
                yield name


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                found.append(sorted([v, *group]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": set()}, []),
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
])
def test_loops_are_found_however_long(graph: dict[str, set[str]],
                                      expected: list[list[str]]) -> None:
    assert loops(graph) == expected


def test_no_file_of_the_library_imports_itself_around_a_loop() -> None:
    known = modules()
    graph = {m: set(imported(m, p, known)) for m, p in known.items()}
    # the walk sees imports at the top and inside functions
    assert "ferry.kafka.delivery" in graph["ferry.kafka.lane"]
    assert "ferry.spark.connect" in graph["ferry.spark.submit"]
    assert loops(graph) == []
