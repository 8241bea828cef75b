"""A run that goes cold says what would make the next one warm."""

from __future__ import annotations

import json
from pathlib import Path

from tests.warm.support import servers


def test_a_run_sent_cold_names_the_fix_warm_start_gives(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "model.ppy").write_text("print('ran')\n")
    (root / "pyproject.toml").write_text('[project]\nname = "demo"\n')
    folder = tmp_path / "cache" / "warm"
    folder.mkdir(parents=True)
    folder.chmod(0o755)  # open to other users: never used
    with servers(root, tmp_path / "cache") as warm:
        done = warm.run("--log-format", "json", "run", "--warm", "model.ppy")
    assert done.returncode == 0 and done.stdout == "ran\n"
    (event,) = [json.loads(line) for line in done.stderr.splitlines()]
    assert event["event"] == "run.cold" and "open to other users" in event["reason"]
    remedy = event["remedy"]
    assert "chmod 700" in remedy and "jax.config.update" in remedy, remedy
    assert "ppy server stop" in remedy and "--no-warm" in remedy, remedy
