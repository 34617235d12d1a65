"""svod_min.cache.kernel_cache's in-memory level: content keys, specs, KernelCache (one compile per key
across threads, failures, LRU eviction that unmaps the dropped program)."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest
from support.cache_races import isolated_cache, run_in_threads  # noqa: F401 - isolated_cache is a fixture
from support.hardening import plan_object  # noqa: F401 - fixture
from support.maps import executable_at

from svod_min.cache import kernel_cache as kc
from svod_min.cache.kernel_cache import KernelCache
from svod_min.devices.cpu.device import CpuDevice, CpuProgram
from svod_min.error import CacheError, PlanError

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

    results, errors = run_in_threads(8, lambda i: cache.get_or_compile("k", compile_fn))
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

    results, errors = run_in_threads(6, lambda i: cache.get_or_compile("k", failing))
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
    waiter = threading.Thread(target=lambda: (started.wait(), out.append(cache.get_or_compile("k", lambda: "w"))))
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
