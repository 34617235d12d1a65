"""Tests for svod_min.cache.kernel_cache: specs, in-memory dedup cache, disk object cache."""

from __future__ import annotations

import ctypes
import gc
import hashlib
import logging
import os
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
from conftest import needs_cc
from support.hardening import child_env, plan_object, PLAN_SRC, unusable_dirs  # noqa: F401 - fixtures
from support.maps import executable_at

import weakref
from svod_min.compiler import clang
from svod_min.cache import kernel_cache as kc
from svod_min.devices.cpu.device import CpuDevice, CpuProgram
from svod_min.error import CacheError, CompilationError, NotSupportedError, PlanError
from svod_min.jit_loader import load_object
from svod_min.cache.kernel_cache import KernelCache, object_cache, ObjectCache
from support.paths import REPO_DIR


REPO_ROOT = REPO_DIR


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Never touch the real ~/.cache, and start each test with an empty memory level."""
    monkeypatch.setenv("SVOD_OBJECT_CACHE_DIR", str(tmp_path / "default-cache"))
    monkeypatch.delenv("SVOD_OBJECT_CACHE", raising=False)
    monkeypatch.delenv("SVOD_OBJECT_CACHE_BUDGET", raising=False)
    kc.OBJECT_MEMORY_CACHE.clear()
    yield
    kc.OBJECT_MEMORY_CACHE.clear()


def _run_in_threads(n, fn):
    """Run fn(i) on n threads released together; returns (results, errors) by index."""
    barrier = threading.Barrier(n)
    results = [None] * n
    errors = [None] * n

    def worker(i):
        barrier.wait()
        try:
            results[i] = fn(i)
        except BaseException as exc:  # noqa: B902 - recorded for the assertion
            errors[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
        assert not t.is_alive(), "worker thread hung"
    return results, errors


# --- content_key -----------------------------------------------------------


def test_content_key_separates_part_boundaries():
    assert kc.content_key("ab", "c") != kc.content_key("a", "bc")
    assert kc.content_key("abc") != kc.content_key("ab", "c")
    assert kc.content_key("a", "") != kc.content_key("a")
    assert kc.content_key("", "a") != kc.content_key("a", "")


def test_content_key_is_stable_sha256_hex():
    key = kc.content_key("x", b"y")
    assert key == kc.content_key("x", b"y")
    assert len(key) == 64 and int(key, 16) >= 0
    assert kc.content_key("x", b"y") != kc.content_key("x", b"z")
    with pytest.raises(CacheError):
        kc.content_key("x", 3)  # type: ignore[arg-type]


# --- CompiledSpec / CachedKernel -------------------------------------------


def test_compiled_spec_from_source():
    spec = kc.CompiledSpec.from_source("k", "void k(){}", 3, var_names=("N",))
    assert spec.src == "void k(){}" and spec.bytes == b"" and spec.buf_count == 3
    assert spec.var_names == ["N"] and spec.global_size is None and spec.is_source


def test_compiled_spec_from_bytes():
    spec = kc.CompiledSpec.from_bytes("k", bytearray(b"\x7fELF"), buf_count=2)
    assert spec.src is None and spec.bytes == b"\x7fELF" and isinstance(spec.bytes, bytes)
    assert spec.buf_count == 2 and not spec.is_source
    # the field name must not break the builtin inside the dataclass machinery
    assert kc.CompiledSpec("n").bytes == b""


def test_compiled_spec_with_sizes_and_validation():
    spec = kc.CompiledSpec.from_source_with_sizes("k", "s", [8, 1, 1], None, 2, var_names=["core_id"])
    assert spec.global_size == (8, 1, 1) and spec.local_size is None
    with pytest.raises(PlanError):
        kc.CompiledSpec.from_source_with_sizes("k", "s", (8, 1), None, 2)
    with pytest.raises(PlanError):
        kc.CompiledSpec.from_source("k", "s", 1, local_size=(0, 1, 1))


def test_cached_kernel_fields():
    k = kc.CachedKernel(object(), "CPU", "src", "k", ["N"], [0, 1], [0], [1], True, [4, "N/4", 1])
    assert k.global_size == (4, "N/4", 1) and k.local_size is None and k.host_parallel_safe
    assert hash(k) == hash(k)  # identity semantics: usable as a dict key
    with pytest.raises(PlanError):
        kc.CachedKernel(None, "CPU", "", "k", global_size=(1, 1))


# --- KernelCache -----------------------------------------------------------


class _Obj:
    """Weak-referenceable stand-in for a loaded kernel."""


def test_racing_threads_compile_once():
    cache = kc.KernelCache()
    calls = []

    def compile_fn():
        calls.append(1)
        time.sleep(0.05)
        return _Obj()

    results, errors = _run_in_threads(8, lambda i: cache.get_or_compile("k", compile_fn))
    assert errors == [None] * 8
    assert len(calls) == 1
    assert all(r is results[0] for r in results) and results[0] is not None
    st = cache.stats
    assert st.compiles == 1 and st.misses == 1 and st.waits + st.hits == 7
    assert cache.get_or_compile("k", compile_fn) is results[0] and len(calls) == 1


def test_failure_reaches_every_waiter_and_is_not_cached():
    cache = kc.KernelCache()
    calls = []

    def failing():
        calls.append(1)
        time.sleep(0.05)
        raise ValueError("boom")

    results, errors = _run_in_threads(6, lambda i: cache.get_or_compile("k", failing))
    assert len(calls) == 1
    assert all(isinstance(e, ValueError) for e in errors)
    assert all(e is errors[0] for e in errors)  # the very same exception object
    assert "k" not in cache and len(cache) == 0 and cache.stats.failures == 1
    assert cache.get_or_compile("k", lambda: "ok") == "ok"  # a later call retries
    assert cache.get_or_compile("k", failing) == "ok" and len(calls) == 1


def test_interrupted_leader_lets_waiter_compile():
    cache = kc.KernelCache()
    started = threading.Event()

    def interrupted():
        started.set()
        time.sleep(0.05)
        raise KeyboardInterrupt

    out = []
    waiter = threading.Thread(
        target=lambda: (started.wait(), out.append(cache.get_or_compile("k", lambda: "w")))
    )
    waiter.start()
    with pytest.raises(KeyboardInterrupt):
        cache.get_or_compile("k", interrupted)
    waiter.join(5)
    assert out == ["w"]  # the waiter got no KeyboardInterrupt; it compiled itself


def test_lru_eviction_frees_the_oldest():
    cache = kc.KernelCache(max_entries=2)
    a = cache.get_or_compile("a", _Obj)
    ref_a = weakref.ref(a)
    cache.get_or_compile("b", _Obj)
    b_ref = weakref.ref(cache.get("b"))
    del a
    cache.get_or_compile("c", _Obj)
    assert "a" not in cache and "b" in cache and "c" in cache
    gc.collect()
    assert ref_a() is None, "evicted kernel is still referenced somewhere"
    assert b_ref() is not None and cache.stats.evictions == 1


def test_lru_hit_refreshes_order():
    cache = kc.KernelCache(max_entries=2)
    cache.get_or_compile("a", _Obj)
    cache.get_or_compile("b", _Obj)
    cache.get_or_compile("a", lambda: pytest.fail("hit must not compile"))
    cache.get_or_compile("c", _Obj)
    assert "a" in cache and "b" not in cache


def test_clear_len_discard_and_stats():
    cache = kc.KernelCache(max_entries=None)
    for i in range(10):
        cache.get_or_compile(i, lambda: i)
    assert len(cache) == 10 and cache.discard(3) and not cache.discard(3)
    cache.get_or_compile(0, lambda: -1)
    st = cache.stats
    assert (st.hits, st.misses, st.compiles, st.entries) == (1, 10, 10, 9)
    cache.clear()
    assert len(cache) == 0 and cache.get(0) is None


def test_zero_entries_only_dedups():
    cache = kc.KernelCache(max_entries=0)
    assert cache.get_or_compile("k", lambda: 1) == 1
    assert cache.get_or_compile("k", lambda: 2) == 2 and len(cache) == 0


def test_recursive_compile_is_an_error_not_a_deadlock():
    cache = kc.KernelCache()
    with pytest.raises(CacheError, match="recursive"):
        cache.get_or_compile("k", lambda: cache.get_or_compile("k", lambda: 1))
    assert cache.get_or_compile("k", lambda: 2) == 2
    with pytest.raises(CacheError):
        kc.KernelCache(max_entries=-1)


def test_global_kernel_cache_helper():
    key = ("test_kernel_cache", object())
    try:
        v = kc.get_or_compile_kernel(key, _Obj)
        assert kc.get_or_compile_kernel(key, _Obj) is v
        assert key in kc.GLOBAL_KERNEL_CACHE
    finally:
        kc.GLOBAL_KERNEL_CACHE.discard(key)


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
    [(None, kc.DEFAULT_BUDGET), ("4096", 4096), ("1k", 1024), ("3M", 3 << 20),
     ("1GiB", 1 << 30), ("lots", kc.DEFAULT_BUDGET)],
)
def test_budget_parsing(raw, expected):
    assert kc.parse_budget(raw) == expected


# --- compile_cached --------------------------------------------------------


@pytest.fixture()
def fake_clang(monkeypatch):
    """svod_min.compiler.clang with a fake compiler: records calls, returns a fake object."""
    clang = pytest.importorskip("svod_min.compiler.clang")
    state = {"calls": [], "identity": "1.0", "fail": False}

    def find_compiler(*, need_clang=False, compiler=None):
        state.setdefault("need_clang", []).append(need_clang)
        return clang.CompilerInfo("/fake/clang", "clang", state["identity"], "x86_64-fake")

    def fake_compile(kind):
        def compile_fn(source, *, extra_flags=(), **_):
            if state["fail"]:
                raise CompilationError("must not compile (expected a cache hit)")
            state["calls"].append((kind, source, tuple(extra_flags)))
            time.sleep(0.02)
            return b"\x7fELF" + hashlib.sha256((kind + source).encode()).digest()
        return compile_fn

    monkeypatch.setattr(clang, "find_compiler", find_compiler)
    monkeypatch.setattr(clang, "compile_c", fake_compile("c"))
    monkeypatch.setattr(clang, "compile_ir", fake_compile("ir"))
    return state


def test_compile_cached_hits_disk_then_misses_on_new_flags(tmp_path, fake_clang):
    disk = kc.ObjectCache(str(tmp_path))
    obj = kc.compile_cached("int f;", cache=disk)
    assert obj.startswith(b"\x7fELF") and len(fake_clang["calls"]) == 1
    assert len(disk.entries()) == 1
    kc.OBJECT_MEMORY_CACHE.clear()  # force the disk level
    fake_clang["fail"] = True
    assert kc.compile_cached("int f;", cache=disk) == obj
    with pytest.raises(CompilationError):
        kc.compile_cached("int f;", extra_flags=["-O3"], cache=disk)
    fake_clang["identity"] = "2.0"  # a compiler upgrade must miss too
    kc.OBJECT_MEMORY_CACHE.clear()
    with pytest.raises(CompilationError):
        kc.compile_cached("int f;", cache=disk)


def test_compile_cached_ir_uses_clang(tmp_path, fake_clang):
    disk = kc.ObjectCache(str(tmp_path))
    c_obj = kc.compile_cached("same text", cache=disk)
    ir_obj = kc.compile_cached("same text", kind="ir", cache=disk)
    assert c_obj != ir_obj and [c[0] for c in fake_clang["calls"]] == ["c", "ir"]
    assert fake_clang["need_clang"][-1] is True
    with pytest.raises(NotSupportedError):
        kc.compile_cached("x", kind="ptx", cache=disk)


def test_compile_cached_dedups_concurrent_compiles(tmp_path, fake_clang):
    disk = kc.ObjectCache(str(tmp_path))
    results, errors = _run_in_threads(8, lambda i: kc.compile_cached("int g;", cache=disk))
    assert errors == [None] * 8 and len(set(results)) == 1
    assert len(fake_clang["calls"]) == 1


def test_compile_cached_works_with_disk_disabled(tmp_path, fake_clang, monkeypatch):
    monkeypatch.setenv("SVOD_OBJECT_CACHE", "off")
    obj = kc.compile_cached("int h;")
    assert obj.startswith(b"\x7fELF") and not kc.object_cache().enabled


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_object_key_changes_with_the_drivers_own_flags(monkeypatch):
    """The driver's built-in flags (shared and per compiler family) shape the object: a change must miss."""
    from svod_min.compiler import run

    family = pytest.importorskip("svod_min.compiler.clang").find_compiler().family
    before = kc.object_key("int k;")
    monkeypatch.setitem(run.FAMILY_FLAGS, family, (*run.FAMILY_FLAGS.get(family, ()), "-fno-common"))
    assert kc.object_key("int k;") != before
    monkeypatch.undo()
    assert kc.object_key("int k;") == before
    monkeypatch.setattr(run, "DEFAULT_FLAGS", (*run.DEFAULT_FLAGS, "-fno-common"))
    monkeypatch.setattr(pytest.importorskip("svod_min.compiler.clang"), "DEFAULT_FLAGS", run.DEFAULT_FLAGS)
    assert kc.object_key("int k;") != before


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_compile_cached_real_compiler(tmp_path, monkeypatch):
    clang = pytest.importorskip("svod_min.compiler.clang")
    disk = kc.ObjectCache(str(tmp_path))
    src = "int add1(int x) { return x + 1; }\n"
    obj = kc.compile_cached(src, cache=disk)
    assert obj[:4] == b"\x7fELF" and len(disk.entries()) == 1

    def refuse(*args, **kwargs):
        raise CompilationError("should have been a disk hit")

    monkeypatch.setattr(clang, "compile_c", refuse)
    kc.OBJECT_MEMORY_CACHE.clear()
    assert kc.compile_cached(src, cache=disk) == obj
    with pytest.raises(CompilationError, match="disk hit"):
        kc.compile_cached(src, extra_flags=["-O1"], cache=disk)


# --- multiple processes ----------------------------------------------------


def _spawn(script, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


_RW_WORKER = """
    import hashlib, sys
    from svod_min.cache.kernel_cache import ObjectCache
    directory, wid, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    cache = ObjectCache(directory, budget_bytes=budget)
    def payload(i):
        return hashlib.sha256(b"k%d" % i).digest() * (64 * (i + 1))
    bad = 0
    for rnd in range(25):
        for i in range(16):
            if (rnd + i + wid) % 2:
                cache.put("key-%d" % i, payload(i))
            else:
                got = cache.get("key-%d" % i)
                bad += got is not None and got != payload(i)
    print("bad=%d enabled=%s" % (bad, cache.enabled))
    sys.exit(1 if bad or not cache.enabled else 0)
"""


def _payload(i):
    return hashlib.sha256(b"k%d" % i).digest() * (64 * (i + 1))


@pytest.mark.parametrize("budget", [1 << 30, 150_000], ids=["roomy", "evicting"])
def test_concurrent_processes_share_the_cache(tmp_path, budget):
    d = str(tmp_path / "shared")
    procs = [_spawn(_RW_WORKER, d, wid, budget) for wid in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, (out + err).decode()
    cache = kc.ObjectCache(d, budget_bytes=budget)
    assert cache.verify() == []
    present = 0
    for i in range(16):
        got = cache.get("key-%d" % i)
        assert got is None or got == _payload(i)
        present += got is not None
    assert present == 16 if budget == 1 << 30 else present >= 1
    assert not [n for n in os.listdir(d) if n.startswith(kc.TMP_PREFIX)]


_KILLED_WRITER = """
    import struct, sys
    from svod_min.cache.kernel_cache import ObjectCache
    cache = ObjectCache(sys.argv[1])
    gen = 0
    print("ready", flush=True)
    while True:
        gen += 1
        for i in range(3):
            cache.put("big-%d" % i, struct.pack("<Q", gen) + bytes([gen % 251]) * (6 << 20))
"""

# Writes generation 1 normally, then tears generation 2 of big-0 half-way
# through the payload write and waits to be killed: a deterministic mid-write kill.
_TORN_WRITER = """
    import os, struct, sys, time
    from svod_min.cache.kernel_cache import ObjectCache
    cache = ObjectCache(sys.argv[1])
    def payload(gen):
        return struct.pack("<Q", gen) + bytes([gen % 251]) * (6 << 20)
    for i in range(3):
        cache.put("big-%d" % i, payload(1))
    real_fdopen = os.fdopen
    class Torn:
        def __init__(self, fh): self.fh = fh
        def __enter__(self): return self
        def __exit__(self, *exc): return False
        def write(self, data):
            if len(data) > 1000:
                self.fh.write(data[: len(data) // 2])
                self.fh.flush()
                print("torn", flush=True)
                time.sleep(60)
            return self.fh.write(data)
    os.fdopen = lambda *a, **k: Torn(real_fdopen(*a, **k))
    cache.put("big-0", payload(2))
"""


def _valid_big(data):
    gen = struct.unpack_from("<Q", data)[0]
    return len(data) == 8 + (6 << 20) and data[8:] == bytes([gen % 251]) * (6 << 20)


def _kill(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    proc.stdout.close()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


def test_sigkill_mid_write_leaves_previous_entry_intact(tmp_path):
    d = str(tmp_path / "torn")
    proc = _spawn(_TORN_WRITER, d)
    try:
        line = proc.stdout.readline().strip()
        assert line == b"torn", proc.stderr.read().decode()
    finally:
        _kill(proc)
    temps = [n for n in os.listdir(d) if n.startswith(kc.TMP_PREFIX)]
    assert len(temps) == 1  # the half-written file exists, under a temp name
    assert 0 < os.path.getsize(os.path.join(d, temps[0])) < kc.HEADER.size + 8 + (6 << 20)
    reader = kc.ObjectCache(d)
    for i in range(3):
        got = reader.get("big-%d" % i)
        assert got is not None and _valid_big(got)
        assert struct.unpack_from("<Q", got)[0] == 1  # generation 1 survived
    assert reader.verify() == []


def test_sigkill_at_random_points_never_yields_corrupt_entry(tmp_path):
    d = str(tmp_path / "killed")
    reader = kc.ObjectCache(d)
    for delay in (0.15, 0.33, 0.52):
        proc = _spawn(_KILLED_WRITER, d)
        try:
            assert proc.stdout.readline().strip() == b"ready"
            deadline = time.time() + delay
            while time.time() < deadline:  # read while it writes
                for i in range(3):
                    got = reader.get("big-%d" % i)
                    assert got is None or _valid_big(got)
        finally:
            _kill(proc)
        for i in range(3):
            got = reader.get("big-%d" % i)
            assert got is None or _valid_big(got)
        assert reader.verify() == []
    assert any(reader.get("big-%d" % i) is not None for i in range(3))


# --- regressions from the 2026-11-24 review -------------------------------------------------------


def _planted_entry(tmp_path, plant):
    c = kc.ObjectCache(str(tmp_path / "cache"))
    path = c.path_for("k")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    plant(path)
    return c, path


def _get_in_a_child(cache_dir: str) -> subprocess.CompletedProcess:
    code = "from svod_min.cache import kernel_cache as kc; print(kc.ObjectCache(%r).get('k'))" % cache_dir
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO_DIR]
                                                      + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)


def test_a_fifo_at_an_entry_path_is_a_miss_not_a_hang(tmp_path):
    c, path = _planted_entry(tmp_path, os.mkfifo)
    result = _get_in_a_child(str(tmp_path / "cache"))  # a blocking open() of a FIFO never returned
    assert result.returncode == 0 and result.stdout.strip() == "None", result.stderr
    assert c.put("k", b"\x7fELF object") and c.get("k") == b"\x7fELF object"  # the entry is usable again


def test_a_symlink_to_dev_zero_is_a_miss_not_an_endless_read(tmp_path):
    c, path = _planted_entry(tmp_path, lambda p: os.symlink("/dev/zero", p))
    result = _get_in_a_child(str(tmp_path / "cache"))
    assert result.returncode == 0 and result.stdout.strip() == "None", result.stderr
    assert c.get("k") is None


# --- processes, eviction and unusable directories (from test_hardening.py) -------------------


def test_kernel_cache_eviction_unmaps_the_dropped_program(plan_object) -> None:
    dev = CpuDevice(threads=1)
    cache = KernelCache(max_entries=2)

    def compile_fn():
        return CpuProgram.from_object(plan_object, "scale_add", buf_count=2, var_names=["n", "k"], device=dev)

    progs = [cache.get_or_compile(("k", i), compile_fn) for i in range(2)]
    bases = [p._loaded.base for p in progs]
    mapped = executable_at  # the image's first segment is its r-x text

    assert all(mapped(b) for b in bases)
    del progs
    gc.collect()
    assert all(mapped(b) for b in bases)  # still cached: still mapped
    third = cache.get_or_compile(("k", 2), compile_fn)  # evicts ("k", 0)
    gc.collect()
    assert not mapped(bases[0]), "the evicted program's image is still mapped"
    assert mapped(bases[1]) and mapped(third._loaded.base)
    cache.clear()
    del third
    gc.collect()
    assert not mapped(bases[1])


ANSWER_SRC = "int scale = %d;\nint answer(int x) { return x * scale + 1; }\n"


_CACHE_READER = r"""
import ctypes, os, sys, time
from svod_min.cache.kernel_cache import ObjectCache
from svod_min.jit_loader import load_object

directory, stop_file, objdir = sys.argv[1], sys.argv[2], sys.argv[3]
objs = {}
for name in sorted(os.listdir(objdir)):
    with open(os.path.join(objdir, name), "rb") as fh:
        objs["obj-" + name.split(".")[0]] = (fh.read(), int(name.split(".")[0]))
cache = ObjectCache(directory)
rounds = bad = loads = fills = 0
deadline = time.time() + 60
while (not os.path.exists(stop_file) or rounds < 30) and time.time() < deadline:
    rounds += 1
    for key, (obj, scale) in objs.items():
        data = cache.get(key)
        if data is None or rounds % 7 == 0:
            cache.put(key, obj)  # fill, and keep overwriting: writers race with readers
            fills += 1
            continue
        if data != obj:
            bad += 1
            continue
        with load_object(data) as lo:  # an entry in use is loaded and run
            loads += 1
            bad += lo.function("answer", ctypes.c_int, ctypes.c_int)(3) != 3 * scale + 1
print("rounds=%d loads=%d fills=%d bad=%d enabled=%s" % (rounds, loads, fills, bad, cache.enabled))
sys.exit(1 if bad or not cache.enabled else 0)
"""


# Fills the cache like the readers, then tears a write of one of their keys half-way
# and waits for SIGKILL: a kill that is guaranteed to land mid-write.
_CACHE_VICTIM = r"""
import os, sys, time
from svod_min.cache.kernel_cache import ObjectCache

directory, objdir = sys.argv[1], sys.argv[2]
cache = ObjectCache(directory)
names = sorted(os.listdir(objdir))
for name in names:
    with open(os.path.join(objdir, name), "rb") as fh:
        cache.put("obj-" + name.split(".")[0], fh.read())
real_fdopen = os.fdopen
class Torn:
    def __init__(self, fh): self.fh = fh
    def __enter__(self): return self
    def __exit__(self, *exc): return False
    def write(self, data):
        if len(data) > 100:
            self.fh.write(data[: len(data) // 2])
            self.fh.flush()
            print("torn", flush=True)
            time.sleep(120)
        return self.fh.write(data)
os.fdopen = lambda *a, **k: Torn(real_fdopen(*a, **k))
with open(os.path.join(objdir, names[0]), "rb") as fh:
    cache.put("obj-" + names[0].split(".")[0], fh.read() + b"\0" * 4096)
"""


@needs_cc
def test_four_processes_share_one_object_cache_while_one_is_killed_mid_write(tmp_path) -> None:
    """test_kernel_cache.py covers 4 concurrent writers and a lone SIGKILLed writer; this runs
    both at once, with real objects that the readers load and execute from the cache."""
    directory, objdir, stop = tmp_path / "cache", tmp_path / "objs", tmp_path / "stop"
    objdir.mkdir()
    for scale in (2, 3, 5, 7, 11, 13):
        (objdir / ("%d.o" % scale)).write_bytes(clang.compile_c(ANSWER_SRC % scale))
    env = child_env()
    readers = [subprocess.Popen([sys.executable, "-c", _CACHE_READER, str(directory), str(stop), str(objdir)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(3)]
    victim = subprocess.Popen([sys.executable, "-c", _CACHE_VICTIM, str(directory), str(objdir)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        line = victim.stdout.readline().strip()
        assert line == b"torn", victim.stderr.read().decode()
        temps = [n for n in os.listdir(directory) if n.startswith(".svodtmp-")]
        assert temps, "the victim's half-written temp file should exist"
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        assert victim.returncode == -signal.SIGKILL
        time.sleep(0.3)  # readers keep going after the kill
        stop.write_text("stop")
        for p in readers:
            out, err = p.communicate(timeout=90)
            assert p.returncode == 0, (out + err).decode()
            assert b"bad=0" in out and b"loads=0" not in out, out
            print("cache reader:", out.decode().strip())
    finally:
        for p in readers + [victim]:
            if p.poll() is None:
                p.kill()
                p.wait()
            for stream in (p.stdout, p.stderr):
                if stream:
                    stream.close()
    cache = ObjectCache(str(directory))
    assert cache.verify() == []
    for scale in (2, 3, 5, 7, 11, 13):
        data = cache.get("obj-%d" % scale)
        assert data == (objdir / ("%d.o" % scale)).read_bytes()
        with load_object(data) as lo:
            assert lo.function("answer", ctypes.c_int, ctypes.c_int)(3) == 3 * scale + 1


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
