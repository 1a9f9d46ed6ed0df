"""`ferry mirror --continuous` usage: mistakes are one line and exit 2, before any cluster
is contacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.parametrize(("argv", "says"), [
    (["--for", "10m"], "--for and --pause go with --continuous"),
    (["--pause", "5"], "--for and --pause go with --continuous"),
    (["--continuous", "--for", "10x"], "--for: '10x' is not a duration"),
    (["--continuous", "--for", "0s"], "--for: '0s' is not a duration"),
])
def test_continuous_options_are_checked_before_any_cycle(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FERRY_SOURCE_BOOTSTRAP", "127.0.0.1:9")
    monkeypatch.setenv("FERRY_TARGET_BOOTSTRAP", "127.0.0.1:9")
    config = str(EXAMPLES / "multi-flow.properties")
    flow = "edge1->central"

    code = main(["mirror", config, "--flow", flow, *argv])

    err = capsys.readouterr().err
    assert code == 2
    assert says in err
    assert "Traceback" not in err
