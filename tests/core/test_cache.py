"""``ppy.cache``, the per-user executable cache, on real files: where it lives,
what it keeps, and what it does with a damaged file.

These are its unit tests; a cache another user or a careless ``chmod`` got at,
under a real ``ppy run``, is tests/hardening/test_cache_trust.py's, and the
runtime's use of it (keys, eager ops, unstaged computations) is tested in
tests/runtime_pjrt.
"""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

import pytest
from ppy.cache import ExecutableCache, cache_dir, executable_key, render_cache_summary
from structlog.testing import capture_logs

KEY = hashlib.sha256(b"one").hexdigest()
OTHER = hashlib.sha256(b"two").hexdigest()


def test_directory_follows_ppy_cache_dir_then_xdg_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PPY_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("PPY_CACHE_DIR")
    assert cache_dir() == tmp_path / "xdg" / "ppy"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "ppy"


def test_round_trip_in_a_private_directory(cache_dir: Path) -> None:
    cache = ExecutableCache()
    assert cache.get(KEY) is None
    cache.put(KEY, b"native code")
    assert cache.get(KEY) == b"native code"
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    assert cache.stats() == (1, (cache_dir / f"{KEY}.exe").stat().st_size)


def test_a_rewrite_replaces_the_whole_file(cache_dir: Path) -> None:
    cache = ExecutableCache()
    cache.put(KEY, b"a much longer first version")
    cache.put(KEY, b"short")
    assert cache.get(KEY) == b"short"
    assert [p.name for p in cache_dir.iterdir()] == [f"{KEY}.exe"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[:-1] + bytes([raw[-1] ^ 1]),  # one flipped bit in the body
        lambda raw: raw[: len(raw) // 2],  # torn write
        lambda raw: b"",  # empty file
        lambda raw: b"something else entirely\n" + raw,  # not our header
    ],
    ids=["flipped-bit", "truncated", "empty", "foreign"],
)
def test_a_damaged_file_is_dropped_and_logged(cache_dir: Path, damage) -> None:
    cache = ExecutableCache()
    path = cache.put(KEY, b"native code" * 100)
    path.write_bytes(damage(path.read_bytes()))
    with capture_logs() as events:
        assert cache.get(KEY) is None
    assert [e["event"] for e in events] == ["cache.corrupt"]
    assert not path.exists()
    cache.put(KEY, b"rebuilt")
    assert cache.get(KEY) == b"rebuilt"


def test_hit_miss_and_write_are_events(cache_dir: Path) -> None:
    cache = ExecutableCache()
    with capture_logs() as events:
        cache.get(KEY)
        cache.put(KEY, b"x")
        cache.get(KEY)
    assert [e["event"] for e in events] == ["cache.miss", "cache.write", "cache.hit"]


def test_stats_clear_and_summary(cache_dir: Path) -> None:
    cache = ExecutableCache()
    assert cache.stats() == (0, 0)
    assert "0 staged executables" in render_cache_summary()
    cache.put(KEY, b"x" * 2048)
    cache.put(OTHER, b"y")
    cache.unstaged().put(KEY, b"z")
    (cache_dir / ".tmp-abandoned.exe").write_bytes(b"ppy-exec")  # a write cut short
    assert cache.stats()[0] == 2
    summary = render_cache_summary()
    assert str(cache_dir) in summary and "2 staged executables" in summary and "KiB" in summary
    assert "1 unstaged computation " in summary
    assert cache.clear() == 3
    assert list(cache_dir.rglob("*.exe")) == []
    assert cache.stats() == (0, 0)


def test_a_key_depends_on_everything_the_executable_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    base = {
        "signature": [((3, 4), "float32")],
        "platform": "cpu",
        "device_kind": "cpu",
        "versions": [("jax", "0.10.2"), ("jaxlib", "0.10.2")],
    }
    key = executable_key("digest", **base)
    assert key == executable_key("digest", **base)
    changes = [
        {"signature": [((5, 4), "float32")]},
        {"signature": [((3, 4), "float16")]},
        {"platform": "cuda"},
        {"device_kind": "NVIDIA H200"},
        {"versions": [("jax", "0.10.3"), ("jaxlib", "0.10.2")]},
    ]
    keys = {executable_key("digest", **{**base, **c}) for c in changes}
    keys.add(executable_key("other digest", **base))
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    keys.add(executable_key("digest", **base))
    assert key not in keys and len(keys) == len(changes) + 2


def test_a_key_that_is_not_a_digest_is_refused(cache_dir: Path) -> None:
    with pytest.raises(ValueError, match="64 hex digits"):
        ExecutableCache().get("../../etc/passwd")


def test_an_entry_that_cannot_be_written_is_a_warning_not_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = ExecutableCache(blocker / "cache")  # cannot be created under a file
    with capture_logs() as events:
        assert cache.keep(KEY, b"native code", function="f") is False
        assert cache.keep(KEY, b"native code", function="g") is False
    # One warning for the directory, however many entries fail after it.
    (event,) = [
        e for e in events if e["event"] == "cache.unwritable" and e["log_level"] == "warning"
    ]
    assert event["function"] == "f" and "PPY_CACHE_DIR" in event["remedy"]
    assert ExecutableCache(tmp_path / "ok").keep(KEY, b"native code") is True


def test_an_entry_that_does_not_load_is_discarded(cache_dir: Path) -> None:
    cache = ExecutableCache()
    cache.put(KEY, b"from another jaxlib")
    with capture_logs() as events:
        cache.discard(KEY, ValueError("bad executable"), function="f")
    (event,) = [e for e in events if e["event"] == "cache.unloadable"]
    assert event["error"] == "ValueError: bad executable" and event["function"] == "f"
    assert cache.get(KEY) is None and not (cache_dir / f"{KEY}.exe").exists()
