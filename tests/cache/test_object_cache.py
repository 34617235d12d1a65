"""The disk object cache (ObjectCache): entries, corruption, budget and eviction, unusable or hostile
directories, and object_cache() from the environment."""

from __future__ import annotations

import logging
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from conftest import needs_cc
from support.cache_races import isolated_cache  # noqa: F401 - fixture
from support.hardening import PLAN_SRC, unusable_dirs
from support.paths import REPO_DIR

from svod_min.cache import kernel_cache as kc
from svod_min.cache.kernel_cache import object_cache
from svod_min.devices.cpu.device import CpuDevice
from svod_min.error import CacheError

# --- ObjectCache: basics ---------------------------------------------------


def test_object_cache_round_trip(tmp_path):
    c = kc.ObjectCache(str(tmp_path / "oc"))
    assert c.enabled and c.directory == str(tmp_path / "oc")
    assert c.get("k") is None
    assert c.put("k", b"payload") and c.get("k") == b"payload"
    assert c.put("k", b"replaced") and c.get("k") == b"replaced"
    assert c.put("empty", b"") and c.get("empty") == b""
    assert len(c.entries()) == 2 and c.verify() == []
    assert c.size_bytes() == 2 * kc.HEADER.size + len(b"replaced")
    with open(c.path_for("k"), "rb") as fh:
        raw = fh.read()
    assert raw[:12] == b"SVODOBJCACHE" and kc.HEADER.size == 88
    assert raw == kc.encode_entry("k", b"replaced")
    assert c.clear() == 2 and c.entries() == [] and c.get("k") is None
    with pytest.raises(CacheError):
        c.put("k", "not bytes")  # type: ignore[arg-type]


def test_hit_touches_mtime(tmp_path):
    c = kc.ObjectCache(str(tmp_path))
    c.put("k", b"x")
    path = c.path_for("k")
    os.utime(path, (1000, 1000))
    assert c.get("k") == b"x"
    assert os.stat(path).st_mtime > 1000


def _flip_payload_byte(raw):
    raw = bytearray(raw)
    raw[kc.HEADER.size + 3] ^= 0xFF
    return bytes(raw)


_CORRUPTIONS = {
    "torn": lambda raw: raw[: len(raw) // 2],
    "torn_header": lambda raw: raw[:40],
    "empty": lambda raw: b"",
    "flipped_payload": _flip_payload_byte,
    "wrong_key_hash": lambda raw: kc.encode_entry("another key", raw[kc.HEADER.size :]),
    "wrong_magic": lambda raw: b"NOTSVODCACHE" + raw[12:],
    "wrong_schema": lambda raw: raw[:12] + struct.pack("<I", 99) + raw[16:],
    "trailing_garbage": lambda raw: raw + b"junk",
}


@pytest.mark.parametrize("corruption", sorted(_CORRUPTIONS))
def test_bad_entry_is_a_miss_and_deleted(tmp_path, corruption):
    c = kc.ObjectCache(str(tmp_path))
    data = bytes(range(256)) * 8
    assert c.put("k", data)
    path = c.path_for("k")
    with open(path, "rb") as fh:
        raw = fh.read()
    with open(path, "wb") as fh:
        fh.write(_CORRUPTIONS[corruption](raw))
    assert c.verify() == [path]
    assert c.get("k") is None
    assert not os.path.exists(path)
    assert c.put("k", data) and c.get("k") == data  # rebuild works


def test_oversized_entry_is_refused(tmp_path):
    c = kc.ObjectCache(str(tmp_path), budget_bytes=1000)
    assert not c.put("big", b"x" * 1000)
    assert c.get("big") is None and c.entries() == []


def test_budget_evicts_oldest_mtime_first(tmp_path):
    payload = b"p" * 1000
    entry = kc.HEADER.size + len(payload)
    c = kc.ObjectCache(str(tmp_path), budget_bytes=10 * entry + entry // 2)
    keys = ["k%d" % i for i in range(10)]
    for k in keys:
        assert c.put(k, payload)
    assert len(c.entries()) == 10
    # reverse insertion order so mtime, not name or creation order, decides
    for i, k in enumerate(keys):
        os.utime(c.path_for(k), (5000 - i, 5000 - i))  # k0 newest ... k9 oldest
    assert c.put("fresh", payload)
    survivors = [k for k in keys if os.path.exists(c.path_for(k))]
    evicted = [k for k in keys if k not in survivors]
    assert evicted, "nothing was evicted"
    assert evicted == keys[len(survivors) :], "eviction did not take the oldest mtimes"
    assert os.path.exists(c.path_for("fresh"))
    assert c.size_bytes() <= c.budget_bytes


def test_running_total_avoids_rescans(tmp_path, monkeypatch):
    c = kc.ObjectCache(str(tmp_path), budget_bytes=1 << 20)
    scans = []
    real_scan = c._scan
    monkeypatch.setattr(c, "_scan", lambda: scans.append(1) or real_scan())
    for i in range(20):
        c.put("k%d" % i, b"x" * 100)
    assert len(scans) == 1  # only the first put initialises the total
    c.put("big", b"x" * ((1 << 20) - 1000))
    assert len(scans) == 2  # over budget -> one rescan + eviction
    assert c.size_bytes() <= c.budget_bytes


def test_stale_temp_files_are_cleaned(tmp_path):
    c = kc.ObjectCache(str(tmp_path))
    stale = tmp_path / (kc.TMP_PREFIX + "dead.part")
    fresh = tmp_path / (kc.TMP_PREFIX + "busy.part")
    foreign = tmp_path / "not-ours.txt"
    for p in (stale, fresh, foreign):
        p.write_bytes(b"x")
    old = time.time() - kc.STALE_TMP_S - 10
    os.utime(str(stale), (old, old))
    assert c.entries() == []
    assert not stale.exists() and fresh.exists() and foreign.exists()
    c.clear()
    assert not fresh.exists() and foreign.exists()  # clear never touches foreign files


# --- ObjectCache: unusable directories ------------------------------------


def _unwritable_dir(tmp_path, how):
    if how == "under_file":
        (tmp_path / "afile").write_bytes(b"")
        return str(tmp_path / "afile" / "cache")
    if how == "is_file":
        (tmp_path / "afile").write_bytes(b"")
        return str(tmp_path / "afile")
    if os.geteuid() == 0:
        pytest.skip("root ignores directory permissions")
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    return str(d)


@pytest.mark.parametrize("how", ["under_file", "is_file", "chmod"])
def test_unusable_directory_disables_quietly(tmp_path, how):
    try:
        c = kc.ObjectCache(_unwritable_dir(tmp_path, how))
        assert not c.enabled
        assert c.get("k") is None and c.put("k", b"x") is False
        assert c.entries() == [] and c.size_bytes() == 0 and c.clear() == 0
    finally:
        if (tmp_path / "ro").exists():
            (tmp_path / "ro").chmod(0o755)


def test_directory_replaced_by_file_mid_run(tmp_path):
    d = tmp_path / "oc"
    c = kc.ObjectCache(str(d))
    assert c.put("a", b"1")
    shutil.rmtree(str(d))
    d.write_bytes(b"")  # now a file: cannot be recreated
    assert c.put("b", b"2") is False and not c.enabled
    assert c.get("a") is None


def test_directory_removed_mid_run_is_recreated(tmp_path):
    d = tmp_path / "oc"
    c = kc.ObjectCache(str(d))
    assert c.put("a", b"1")
    shutil.rmtree(str(d))
    assert c.put("b", b"2") and c.get("b") == b"2" and c.enabled


# --- object_cache() from the environment ----------------------------------


def test_object_cache_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SVOD_OBJECT_CACHE_DIR", str(tmp_path / "a"))
    a = kc.object_cache()
    assert a.directory == str(tmp_path / "a" / "objects") and a.enabled and kc.object_cache() is a
    monkeypatch.setenv("SVOD_OBJECT_CACHE_DIR", str(tmp_path / "b"))
    b = kc.object_cache()
    assert b is not a and b.directory == str(tmp_path / "b" / "objects")
    monkeypatch.setenv("SVOD_OBJECT_CACHE_BUDGET", "2MiB")
    assert kc.object_cache().budget_bytes == 2 << 20


def test_object_cache_env_disable(tmp_path, monkeypatch):
    monkeypatch.setenv("SVOD_OBJECT_CACHE_DIR", str(tmp_path / "never"))
    monkeypatch.setenv("SVOD_OBJECT_CACHE", "0")
    c = kc.object_cache()
    assert not c.enabled and c.put("k", b"x") is False and c.get("k") is None
    assert not (tmp_path / "never").exists()


def test_default_dir_xdg_and_home(tmp_path, monkeypatch):
    monkeypatch.delenv("SVOD_OBJECT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kc.default_cache_dir() == str(tmp_path / "xdg" / "svod_min" / "objects")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert kc.default_cache_dir() == str(tmp_path / "home" / ".cache" / "svod_min" / "objects")


@pytest.mark.parametrize(
    "raw,expected",
    [
        (None, kc.DEFAULT_BUDGET),
        ("4096", 4096),
        ("1k", 1024),
        ("3M", 3 << 20),
        ("1GiB", 1 << 30),
        ("lots", kc.DEFAULT_BUDGET),
    ],
)
def test_budget_parsing(raw, expected):
    assert kc.parse_budget(raw) == expected


def _planted_entry(tmp_path, plant):
    c = kc.ObjectCache(str(tmp_path / "cache"))
    path = c.path_for("k")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    plant(path)
    return c, path


def _get_in_a_child(cache_dir: str) -> subprocess.CompletedProcess:
    code = "from svod_min.cache import kernel_cache as kc; print(kc.ObjectCache(%r).get('k'))" % cache_dir
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([REPO_DIR] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)


def test_a_fifo_at_an_entry_path_is_a_miss_not_a_hang(tmp_path):
    c, path = _planted_entry(tmp_path, os.mkfifo)
    result = _get_in_a_child(str(tmp_path / "cache"))  # a blocking open() of a FIFO would never return
    assert result.returncode == 0 and result.stdout.strip() == "None", result.stderr
    assert c.put("k", b"\x7fELF object") and c.get("k") == b"\x7fELF object"  # the entry is usable again


def test_a_symlink_to_dev_zero_is_a_miss_not_an_endless_read(tmp_path):
    c, path = _planted_entry(tmp_path, lambda p: os.symlink("/dev/zero", p))
    result = _get_in_a_child(str(tmp_path / "cache"))
    assert result.returncode == 0 and result.stdout.strip() == "None", result.stderr
    assert c.get("k") is None


def _verify_in_a_child(plant: str) -> "subprocess.CompletedProcess[str]":
    code = textwrap.dedent("""
        import os, sys, tempfile
        from svod_min.cache.kernel_cache import ObjectCache
        cache = ObjectCache(tempfile.mkdtemp(prefix="svod-verify-"))
        path = cache.path_for("k")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mkfifo(path) if sys.argv[1] == "fifo" else os.symlink("/dev/zero", path)
        print(cache.verify() == [path])
    """)
    return subprocess.run([sys.executable, "-c", code, plant], capture_output=True, text=True, timeout=30, cwd=REPO_DIR)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and symlinks")
@pytest.mark.parametrize("plant", ["fifo", "devzero"])
def test_cache_verify_reports_a_planted_fifo_or_device_link_instead_of_hanging(plant: str) -> None:
    """verify() reads entries as get() does: a planted FIFO or device link is reported, never hangs."""
    result = _verify_in_a_child(plant)  # a blocking open() of a FIFO, an endless read of /dev/zero
    assert result.returncode == 0 and result.stdout.strip() == "True", result.stderr[-2000:]


@needs_cc
@pytest.mark.parametrize("which", ["under a regular file", "read-only pseudo-filesystem"])
def test_unusable_cache_dir_runs_uncached_with_a_debug_message(which: str, tmp_path, monkeypatch, caplog) -> None:
    path = unusable_dirs(tmp_path)[which]
    monkeypatch.setenv("SVOD_OBJECT_CACHE_DIR", path)
    caplog.set_level(logging.DEBUG, logger="svod_min.cache")
    src = PLAN_SRC + "/* %s */\n" % uuid.uuid4()  # a fresh key: really compiled, really not stored
    dev = CpuDevice(threads=1)
    prog = dev.compile(src, "scale_add", buf_count=2, var_names=["n", "k"])
    x, y = dev.allocate([4], "float32"), dev.allocate([4], "float32")
    x.copyin([1.0, 2.0, 3.0, 4.0])
    prog.execute([y, x], [4, 10])
    assert y.tolist() == [11.0, 21.0, 31.0, 41.0]
    assert not object_cache().enabled
    assert "object cache disabled" in caplog.text and path in caplog.text, caplog.text
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name == "svod_min.cache")
    assert not os.path.exists(path)
