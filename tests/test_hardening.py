"""Hardening: strict W^X hosts, no leaks, concurrency, hostile filesystems, missing tools,
the vendored drop-in and bad input across the Python API and the CLI.

What is already covered elsewhere is not repeated here (see docs/reliability.md for the
map): loader fuzzing is tests/test_fuzz_loader.py; the anonymous-mode W^X sampler with
clang objects is tests/test_jit_loader.py; cache races and SIGKILL of a lone writer are
tests/test_kernel_cache.py; plan-file level bad input is tests/test_plan_file.py.
"""

from __future__ import annotations

import ctypes
import gc
import json
import logging
import math
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from typing import Dict, List, Optional

import pytest
from conftest import COMPILERS, needs_cc
from maps_support import executable_at

import svod_min
from svod_min import clang
from svod_min.__main__ import EXIT_BAD_INPUT, EXIT_DEVICE, main
from svod_min.devices.cpu import CpuDevice, CpuProgram
from svod_min.error import (
    BufferAllocationError,
    ElfFormatError,
    InvalidDeviceError,
    LoaderError,
    PlanError,
    SvodError,
    VariableBoundsError,
)
from svod_min.execution_plan import ExecutionPlanBuilder, PreparedCopy, PreparedKernel, RuntimeVar
from svod_min.jit_loader import load_object, memory, relocate
from svod_min.kernel_cache import CachedKernel, KernelCache, ObjectCache, object_cache

# Where the svod_min under test lives (site-packages under tox, the checkout otherwise):
# child processes get it on PYTHONPATH so they test the same code.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(svod_min.__file__)))

# A kernel with every kind of state the loader must get right: a libm call (GOT or stub),
# .bss (zero-initialised counter), .data (initialised global reached through the GOT).
STATE_SRC = r"""
#include <math.h>
static int counter;
int base_value = 100;
float energy(float x) { return expf(x) + logf(x + 1.0f); }
int bump(void) { counter += 1; return base_value + counter; }
"""
ENERGY_1 = math.exp(1.0) + math.log(2.0)

# A plan-sized kernel: buffers first, int32 variables after (svod's calling convention),
# and a call counter in .bss so tests can prove that nothing was dispatched.
PLAN_SRC = r"""
static int calls;
void scale_add(float* restrict out, const float* restrict x, const int n, const int k) {
    calls += 1;
    for (int i = 0; i < n; ++i) out[i] = x[i] * (float)k + 1.0f;
}
int scale_add_calls(void) { return calls; }
"""


def _child_env(**overrides: Optional[str]) -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = PACKAGE_ROOT
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _python(code: str, *args: str, env: Optional[Dict[str, str]] = None, timeout: float = 120, cwd=None):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, timeout=timeout,
        env=env or _child_env(), cwd=cwd,
    )


def _maps() -> List[str]:
    with open("/proc/self/maps") as fh:
        return fh.readlines()


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def _one_line_error(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.fixture(scope="module")
def state_objects() -> Dict[str, bytes]:
    if not COMPILERS:
        pytest.skip("no C compiler")
    return {cc: clang.compile_c(STATE_SRC, compiler=cc) for cc in COMPILERS}


@pytest.fixture(scope="module")
def plan_object() -> bytes:
    if not COMPILERS:
        pytest.skip("no C compiler")
    return clang.compile_c(PLAN_SRC)


@pytest.fixture
def wx(monkeypatch: pytest.MonkeyPatch):
    """Set the process's W^X route for one test (restored afterwards)."""

    def set_mode(mode: str) -> None:
        monkeypatch.setattr(memory, "_mode", mode)

    return set_mode


# === 2. strict W^X ==========================================================================

_MDWE_CHILD = r"""
import contextlib, ctypes, io, json, logging, os, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 1
if libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
    err = ctypes.get_errno()
    print(json.dumps({"skip": "prctl(PR_SET_MDWE) failed: %s (Linux < 6.3?)" % os.strerror(err)}))
    sys.exit(0)

# Prove the policy is live: an anonymous read+write page cannot gain execute permission.
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
page = libc.mmap(None, 4096, 3, 0x22, -1, 0)
anon_refused = libc.mprotect(page, 4096, 5) != 0

messages = []
class Keep(logging.Handler):
    def emit(self, record):
        messages.append(record.getMessage())
log = logging.getLogger("svod_min.loader")
log.addHandler(Keep())
log.setLevel(logging.INFO)

from svod_min.jit_loader import load_object, wx_mode

out = {"anon_refused": anon_refused, "results": []}
for path in sys.argv[1:]:
    with open(path, "rb") as fh:
        obj = fh.read()
    for _ in range(3):  # several objects: the fallback is sticky, no retry storm
        with load_object(obj) as lo:
            energy = lo.function("energy", ctypes.c_float, ctypes.c_float)
            bump = lo.function("bump", ctypes.c_int)
            out["results"].append({"mode": lo.mode, "energy": energy(1.0), "bumps": [bump(), bump(), bump()]})
out["wx_mode"] = wx_mode()
out["log"] = messages

# End to end under the same policy: the default plan through the CLI entry point.
from svod_min.__main__ import main
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    out["cli_rc"] = main(["run"])
out["cli_stdout"] = buf.getvalue()
print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_MDWE is Linux-only")
def test_mdwe_refuse_exec_gain_host_runs_kernels_through_memfd(state_objects, tmp_path) -> None:
    paths = []
    for cc, obj in state_objects.items():
        path = tmp_path / ("state-%s.o" % cc)
        path.write_bytes(obj)
        paths.append(str(path))
    result = _python(_MDWE_CHILD, *paths)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    if "skip" in out:
        pytest.skip(out["skip"])
    assert out["anon_refused"], "PR_SET_MDWE did not take effect"
    assert out["wx_mode"] == "memfd"
    assert any("anonymous W->X refused" in m and "mprotect(r-x)" in m for m in out["log"]), out["log"]
    assert sum("refused" in m for m in out["log"]) == 1  # decided once, then sticky
    assert len(out["results"]) == 3 * len(paths)
    for r in out["results"]:
        assert r["mode"] == "memfd"
        assert r["energy"] == pytest.approx(ENERGY_1, rel=1e-6)
        assert r["bumps"] == [101, 102, 103]  # .data initialised, .bss zeroed, both writable (private COW)
    assert out["cli_rc"] == 0 and "verify y: ok" in out["cli_stdout"], out["cli_stdout"]


def _wx_lines(lines: List[str]) -> List[str]:
    return [ln for ln in lines if "w" in ln.split()[1] and "x" in ln.split()[1]]


@pytest.mark.parametrize("mode, compiler", [("memfd", "clang"), ("memfd", "gcc"), ("anon", "gcc")])
def test_no_mapping_is_ever_writable_and_executable(mode: str, compiler: str, wx, state_objects) -> None:
    """test_jit_loader covers anon + clang; this adds the memfd route and gcc objects."""
    if compiler not in state_objects:
        pytest.skip("%s is not installed" % compiler)
    wx(mode)
    objs = [clang.compile_c(STATE_SRC.replace("bump", "bump%d" % i), compiler=compiler) for i in range(3)]
    baseline = _wx_lines(_maps())
    seen_wx: List[str] = []
    samples = [0]
    seen_exec_images: set = set()
    stop = threading.Event()
    loaded_bases: set = set()

    def sampler() -> None:
        while not stop.is_set():
            lines = _maps()
            samples[0] += 1
            seen_wx.extend(_wx_lines(lines))
            for ln in lines:
                if "x" in ln.split()[1]:
                    seen_exec_images.add(int(ln.split("-", 1)[0], 16))

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # let the sampler interleave with every step of a load
    t = threading.Thread(target=sampler)
    t.start()
    loads, give_up = 0, time.monotonic() + 20
    try:
        # Loading is fast (~50 us): keep going until the sampler has really watched.
        while loads < 120 or samples[0] < 50 or not loaded_bases & seen_exec_images:
            batch = [load_object(o) for o in objs]
            loaded_bases.update(lo.base for lo in batch)
            assert {lo.mode for lo in batch} == {mode}
            for lo in batch:
                lo.close()
            loads += len(batch)
            if time.monotonic() > give_up:
                break
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old_interval)
    assert samples[0] >= 50, "the sampler took only %d samples" % samples[0]
    assert loaded_bases & seen_exec_images, "the sampler never saw one of our executable images"
    assert [m for m in seen_wx if m not in baseline] == []
    assert [m for m in _wx_lines(_maps()) if m not in baseline] == []


def test_memfd_images_are_not_files_on_disk(wx, state_objects) -> None:
    wx("memfd")
    obj = next(iter(state_objects.values()))
    with load_object(obj) as lo:
        mine = [ln for ln in _maps() if lo.base <= int(ln.split("-", 1)[0], 16) < lo.base + lo.size]
        assert mine
        for ln in mine:
            parts = ln.split(None, 5)
            path = parts[5].strip() if len(parts) > 5 else ""
            assert path.startswith("/memfd:svod_min-kernel"), ln
            assert "w" not in parts[1] or "x" not in parts[1], ln


# === 3. leaks ===============================================================================

CYCLES = 10_000
WARMUP = 500
RSS_LIMIT = 1 << 20
# Mappings and fds must return to the baseline exactly; one line of slack is allowed for
# glibc malloc, which may split or merge one of its own heap mappings between samples.
MAPS_SLACK = 1


def _measure(cycle, cycles: int = CYCLES) -> Dict[str, int]:
    for _ in range(WARMUP):  # thread pools, allocator arenas, ctypes caches, memo tables
        cycle()
    gc.collect()
    rss0, maps0, fds0 = _rss_bytes(), len(_maps()), _fd_count()
    peak_maps = maps0
    for i in range(cycles):
        cycle()
        if i % 500 == 0:
            peak_maps = max(peak_maps, len(_maps()))
    gc.collect()
    return {"rss_growth": _rss_bytes() - rss0, "maps0": maps0, "maps1": len(_maps()), "peak_maps": peak_maps,
            "fds0": fds0, "fds1": _fd_count()}


def _assert_no_leak(m: Dict[str, int]) -> None:
    assert m["rss_growth"] < RSS_LIMIT, m
    assert m["maps1"] <= m["maps0"] + MAPS_SLACK, m
    assert m["peak_maps"] <= m["maps0"] + MAPS_SLACK + 4, m  # released promptly, not only at gc.collect
    assert m["fds1"] == m["fds0"], m


@pytest.mark.parametrize("mode", ["anon", "memfd"])
def test_load_close_cycles_do_not_leak(mode: str, wx, state_objects) -> None:
    wx(mode)
    obj = next(iter(state_objects.values()))

    def cycle() -> None:
        lo = load_object(obj)
        assert lo.function("bump", ctypes.c_int)() == 101
        lo.close()

    m = _measure(cycle)
    print("load/close x%d (%s): %s" % (CYCLES, mode, m))
    _assert_no_leak(m)


@pytest.mark.parametrize("mode", ["anon", "memfd"])
def test_plan_build_execute_release_cycles_do_not_leak(mode: str, wx, plan_object) -> None:
    wx(mode)
    dev = CpuDevice(threads=2)

    def cycle() -> None:
        x = dev.allocate([64], "float32")
        y = dev.allocate([64], "float32")
        z = dev.allocate([64], "float32")
        x.copyin([float(i) for i in range(64)])
        prog = dev.load(plan_object, "scale_add", buf_count=2, var_names=["n", "k"])
        kernel = CachedKernel(prog, "CPU", PLAN_SRC, "scale_add", ["n", "k"], [0, 1], [0], [1], True, (1, 1, 1))
        b = ExecutionPlanBuilder(dev)
        ix, iy, iz = b.add_buffer(0, x), b.add_buffer(1, y), b.add_buffer(2, z)
        b.add_op(PreparedKernel(0, kernel, [iy, ix], [0], [64, 2], {"n": 64}, [], [RuntimeVar("k", 0, 9)],
                                extents={0: "n", 1: "n"}))
        b.add_op(PreparedCopy(1, [iz, iy], [0]))
        b.set_output_buffer(iz)
        plan = b.build()
        plan.execute_with_vars({"k": 3})
        assert z.tolist()[5] == 16.0
        plan.release_intermediate_buffers()

    m = _measure(cycle)
    print("plan build/execute/release x%d (%s): %s" % (CYCLES, mode, m))
    _assert_no_leak(m)


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


# === 4. concurrency ==========================================================================

THREADS = 8
RUNS = 1000

CORE_SRC = r"""
void scale_core(float* restrict out, const float* restrict x, const int n, const int k, const int core_id) {
    int half = (n + 1) / 2, lo = core_id * half, hi = lo + half < n ? lo + half : n;
    for (int i = lo; i < hi; ++i) out[i] = x[i] * (float)k + (float)core_id;
}
"""


@needs_cc
def test_eight_threads_times_1000_runs_of_independent_plans() -> None:
    dev = CpuDevice(threads=2)
    # One compiled kernel shared by every plan (as the kernel cache shares it); core_id
    # dispatch puts all eight threads on the device's one pool at once.
    prog = dev.load(clang.compile_c(CORE_SRC), "scale_core", buf_count=2, var_names=["n", "k", "core_id"])
    kernel = CachedKernel(prog, "CPU", CORE_SRC, "scale_core", ["n", "k", "core_id"], [0, 1], [0], [1], True, (2, 1, 1))
    n = 64
    errors: List[str] = []
    done = [0] * THREADS
    barrier = threading.Barrier(THREADS)

    def worker(tid: int) -> None:
        try:
            x = dev.allocate([n], "float32")
            y = dev.allocate([n], "float32")
            z = dev.allocate([n], "float32")
            x.copyin([float(tid * 100 + i) for i in range(n)])
            b = ExecutionPlanBuilder(dev)
            ix, iy, iz = b.add_buffer(0, x), b.add_buffer(1, y), b.add_buffer(2, z)
            b.add_op(PreparedKernel(0, kernel, [iy, ix], [0], [n, 1, 0], {"n": n}, [], [RuntimeVar("k", 0, 1 << 20)]))
            b.add_op(PreparedCopy(1, [iz, iy], [0]))
            b.set_output_buffer(iz)
            plan = b.build()
            xs = x.tolist()
            barrier.wait()
            for run in range(RUNS):
                k = tid * RUNS + run
                plan.execute_with_vars({"k": k})
                got = z.tolist()
                want = [xs[i] * k + (0 if i < n // 2 else 1) for i in range(n)]
                if got != [float(ctypes.c_float(w).value) for w in want]:
                    errors.append("thread %d run %d: %r != %r" % (tid, run, got[:4], want[:4]))
                    return
                done[tid] += 1
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append("thread %d: %s: %s" % (tid, type(exc).__name__, exc))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert done == [RUNS] * THREADS


ANSWER_SRC = "int scale = %d;\nint answer(int x) { return x * scale + 1; }\n"

_CACHE_READER = r"""
import ctypes, os, sys, time
from svod_min.kernel_cache import ObjectCache
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
from svod_min.kernel_cache import ObjectCache

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
    env = _child_env()
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


# === 5. hostile filesystems and missing tools ===================================================


def _unusable_dirs(tmp_path) -> Dict[str, str]:
    blocker = tmp_path / "a-regular-file"
    blocker.write_text("not a directory")
    return {
        "under a regular file": str(blocker / "objects"),  # root ignores permissions, not ENOTDIR
        "read-only pseudo-filesystem": "/proc/self/svod-objects",
    }


@needs_cc
@pytest.mark.parametrize("which", ["under a regular file", "read-only pseudo-filesystem"])
def test_unusable_cache_dir_runs_uncached_with_a_debug_message(which: str, tmp_path, monkeypatch, caplog) -> None:
    path = _unusable_dirs(tmp_path)[which]
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


@needs_cc
def test_cli_runs_with_an_unusable_cache_dir(tmp_path) -> None:
    path = _unusable_dirs(tmp_path)["under a regular file"]
    result = subprocess.run([sys.executable, "-m", "svod_min", "run"], capture_output=True, text=True, timeout=300,
                            env=_child_env(SVOD_OBJECT_CACHE_DIR=path))
    assert result.returncode == 0, result.stderr
    assert "verify y: ok" in result.stdout
    assert result.stderr == ""  # the debug message stays at debug level


def _no_compiler_env(tmp_path) -> Dict[str, str]:
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    return _child_env(PATH=str(empty), SVOD_CC=None, CC=None)


INLINE_C_PLAN = {
    "svod_plan": 1,
    "buffers": {"x": {"shape": [4], "init": "arange"}, "y": {"shape": [4], "output": True}},
    "kernels": {"twice": {"source": "void twice(float* restrict y, const float* restrict x) "
                                    "{ for (int i = 0; i < 4; ++i) y[i] = 2 * x[i]; }", "buffers": 2}},
    "ops": [{"kernel": "twice", "buffers": ["y", "x"]}],
    "expect": {"y": {"values": [0, 2, 4, 6]}},
}


def test_no_compiler_inline_c_fails_clearly_but_library_plan_runs(tmp_path) -> None:
    env = _no_compiler_env(tmp_path)
    plan = tmp_path / "inline.json"
    plan.write_text(json.dumps(INLINE_C_PLAN))
    # a plan file with inline C needs a compiler: one clear line, exit 3, nothing ran
    result = subprocess.run([sys.executable, "-m", "svod_min", "run", str(plan)], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == EXIT_DEVICE == 3, result.stderr
    line = _one_line_error(result.stderr)
    assert line.startswith("error: no C compiler found"), line
    assert "install clang or gcc, or set SVOD_CC" in line
    assert "verify" not in result.stdout
    # the default plan is built from the kernel library: prebuilt objects, no compiler needed
    result = subprocess.run([sys.executable, "-m", "svod_min", "run"], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert "verify y: ok" in result.stdout
    info = subprocess.run([sys.executable, "-m", "svod_min", "info"], capture_output=True, text=True, timeout=120,
                          env=env)
    assert info.returncode == 0 and "compiler: none found" in info.stdout, info.stdout + info.stderr


_NO_CC_API = r"""
import ctypes, sys
from svod_min.devices.cpu import CpuDevice
from svod_min.error import CompilerNotFoundError
from svod_min.jit_loader import load_object
with open(sys.argv[1], "rb") as fh:
    obj = fh.read()
with load_object(obj) as lo:  # a prebuilt object needs no compiler
    print("energy", lo.function("energy", ctypes.c_float, ctypes.c_float)(1.0))
    print("bump", lo.function("bump", ctypes.c_int)())
try:
    CpuDevice(threads=1).compile("void f(float* o) { o[0] = 1; }", "f", buf_count=1)
except CompilerNotFoundError as exc:
    print("compile:", str(exc).splitlines()[0])
"""


def test_no_compiler_prebuilt_objects_still_load_and_inline_c_is_refused(state_objects, tmp_path) -> None:
    path = tmp_path / "prebuilt.o"
    path.write_bytes(next(iter(state_objects.values())))
    result = _python(_NO_CC_API, str(path), env=_no_compiler_env(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = dict(ln.split(None, 1) for ln in result.stdout.strip().splitlines())
    assert float(lines["energy"]) == pytest.approx(ENERGY_1, rel=1e-6)
    assert lines["bump"] == "101"
    assert lines["compile:"].startswith("no C compiler found: tried clang, gcc, cc on PATH")


_NO_CC_LIBRARY = r"""
from svod_min import kernels
from svod_min.devices.cpu import CpuDevice
k = kernels.get("add", dtype="float32")
dev = CpuDevice(threads=2)
n = 1000
out, a, b = (dev.allocate([n], "float32") for _ in range(3))
a.copyin([float(i) for i in range(n)])
b.copyin([0.5] * n)
k.run([out, a, b], n=n)
print(k.prebuilt, out.tolist()[:3], out.tolist()[-1])
"""


def test_no_compiler_library_kernels_run_from_prebuilt_objects(tmp_path) -> None:
    try:
        from svod_min import kernels

        if kernels.get("add", dtype="float32").prebuilt is not True:
            pytest.skip("no prebuilt library object for this host")
    except (ImportError, SvodError, AttributeError) as exc:
        pytest.skip("kernel library not available: %s" % exc)
    result = _python(_NO_CC_LIBRARY, env=_no_compiler_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "[0.5,", "1.5,", "2.5]", "999.5"], result.stdout


def _files_under(root: str) -> List[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        out.extend(os.path.join(dirpath, n) for n in dirnames + filenames)
    return out


@pytest.mark.parametrize("tmpdir_kind", ["empty", "nonexistent"])
def test_tmpdir_receives_nothing_from_compile_and_load(cc: str, tmpdir_kind: str, tmp_path, monkeypatch) -> None:
    tmpdir = tmp_path / "tmpdir"
    if tmpdir_kind == "empty":
        tmpdir.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    monkeypatch.setattr(tempfile, "tempdir", None)  # forget the cached gettempdir()
    seen: set = set()
    stop = threading.Event()

    def watch() -> None:  # anything with an execute bit, even briefly, is a failure
        while not stop.is_set():
            for path in _files_under(str(tmpdir)):
                try:
                    mode = os.stat(path).st_mode
                except OSError:
                    continue
                if stat.S_ISREG(mode) and mode & 0o111:
                    seen.add(path)

    t = threading.Thread(target=watch)
    t.start()
    try:
        obj = clang.compile_c(STATE_SRC + "/* %s */\n" % uuid.uuid4(), compiler=cc)
        for mode in ("anon", "memfd"):
            monkeypatch.setattr(memory, "_mode", mode)
            with load_object(obj) as lo:
                assert lo.function("bump", ctypes.c_int)() == 101
    finally:
        stop.set()
        t.join()
    assert seen == set()
    assert _files_under(str(tmpdir)) == []
    assert os.path.isdir(tmpdir) == (tmpdir_kind == "empty")


_NOEXEC_SCRIPT = r"""
set -e
mount -t tmpfs -o noexec,nosuid,nodev,size=64m tmpfs "$1"
mount -t tmpfs -o ro,size=1m tmpfs "$2"
touch "$1/probe" && chmod +x "$1/probe"
if "$1/probe" 2>/dev/null; then echo "noexec not enforced"; exit 97; fi
rm "$1/probe"
for cc in $4; do
    SVOD_CC=$cc "$3" -m svod_min run > "$5.$cc" 2>&1 || { cat "$5.$cc"; exit 98; }
done
echo "left in TMPDIR: [$(ls -A "$1")]"
"""


@needs_cc
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1)")
def test_real_noexec_tmpdir_and_read_only_cache_mount(tmp_path) -> None:
    """In a private mount namespace: TMPDIR on a noexec tmpfs, the cache on a read-only tmpfs."""
    noexec, readonly = tmp_path / "noexec", tmp_path / "ro"
    noexec.mkdir()
    readonly.mkdir()
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot create a mount namespace: %s" % probe.stderr.decode().strip())
    env = _child_env(TMPDIR=str(noexec), SVOD_OBJECT_CACHE_DIR=str(readonly / "objects"))
    result = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", _NOEXEC_SCRIPT, "sh", str(noexec), str(readonly),
         sys.executable, " ".join(COMPILERS), str(tmp_path / "run")],
        capture_output=True, text=True, timeout=600, env=env,
    )
    if result.returncode != 0 and "mount:" in result.stderr:
        pytest.skip("mount is not permitted here: %s" % result.stderr.strip())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "left in TMPDIR: []" in result.stdout
    for cc in COMPILERS:
        out = (tmp_path / ("run." + cc)).read_text()
        assert "verify y: ok" in out, out


# === 6. vendored drop-in ===========================================================================


def _vendor(tmp_path) -> str:
    elftools = pytest.importorskip("elftools")
    vendor = tmp_path / "vendored"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(os.path.dirname(os.path.abspath(svod_min.__file__)), str(vendor / "svod_min"), ignore=ignore)
    shutil.copytree(os.path.dirname(os.path.abspath(elftools.__file__)), str(vendor / "elftools"), ignore=ignore)
    return str(vendor)


def _clean_env() -> Dict[str, str]:
    drop = ("VIRTUAL_ENV", "__PYVENV_LAUNCHER__")
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k not in drop}


@needs_cc
def test_vendored_copy_runs_in_an_empty_venv_without_numpy(tmp_path) -> None:
    vendor = _vendor(tmp_path)
    venv = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], capture_output=True, text=True,
                          timeout=120)
    if made.returncode != 0:
        pytest.skip("cannot create a virtual environment: %s" % made.stderr.strip()[-300:])
    python = str(venv / "bin" / "python")
    env = _clean_env()
    probe = subprocess.run(
        [python, "-c", "import importlib.util as u, svod_min, elftools, sys; "
                       "print(u.find_spec('numpy') is None, svod_min.__file__, elftools.__file__, sys.prefix)"],
        capture_output=True, text=True, timeout=60, cwd=vendor, env=env,
    )
    assert probe.returncode == 0, probe.stderr
    no_numpy, svod_file, elf_file, prefix = probe.stdout.split()
    assert no_numpy == "True", "the fresh venv must not see numpy"
    assert svod_file.startswith(vendor) and elf_file.startswith(vendor)
    assert os.path.realpath(prefix) == os.path.realpath(str(venv))
    result = subprocess.run([python, "-m", "svod_min", "run"], capture_output=True, text=True, timeout=300, cwd=vendor,
                            env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verify y: ok" in result.stdout


_WITH_NUMPY = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy, runpy, svod_min, elftools
assert svod_min.__file__.startswith(sys.argv[1]), svod_min.__file__
assert elftools.__file__.startswith(sys.argv[1]), elftools.__file__
print("numpy", numpy.__version__, file=sys.stderr)
sys.argv = ["svod_min", "run"]
runpy.run_module("svod_min", run_name="__main__", alter_sys=True)
"""


@needs_cc
def test_vendored_copy_runs_isolated_with_numpy_available(tmp_path) -> None:
    pytest.importorskip("numpy")
    vendor = _vendor(tmp_path)
    result = subprocess.run([sys.executable, "-I", "-c", _WITH_NUMPY, vendor], capture_output=True, text=True,
                            timeout=300, cwd=str(tmp_path), env=_clean_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verify y: ok" in result.stdout
    assert result.stderr.startswith("numpy ")


# === 7. bad input everywhere =====================================================================

ALLOCATE_CASES = [
    ((-1,), "buffer size must be >= 0"),
    ((1 << 62,), "cannot allocate"),
    (([1 << 31, 1 << 31],), "cannot allocate"),
    (([4, -1],), "shape dimension must be >= 0"),
    ((3.5,), "buffer size must be an integer"),
    (("64",), "buffer size must be an integer"),
    ((None,), "buffer size must be an integer"),
    ((10, "float32"), "not a whole number of float32"),
    ((16, "float33"), "float33"),
    ((16, 7), "dtype"),
    ((16, None), "dtype"),
]


@pytest.mark.parametrize("args, message", ALLOCATE_CASES, ids=[repr(c[0]) for c in ALLOCATE_CASES])
def test_allocate_bad_sizes_and_dtypes(args: tuple, message: str) -> None:
    with pytest.raises(SvodError) as info:
        CpuDevice(threads=1).allocate(*args)
    assert message in str(info.value)
    assert isinstance(info.value, (BufferAllocationError, PlanError, ValueError))


def _counting_plan(dev: CpuDevice, prog: CpuProgram, nbuf: int = 64, extent_max: int = 64, n: int = 64):
    """y = x * k + 1 over n elements; n and k are runtime variables; extents n on both buffers."""
    x, y = dev.allocate([nbuf], "float32"), dev.allocate([nbuf], "float32")
    x.copyin([1.0] * nbuf)
    kernel = CachedKernel(prog, "CPU", PLAN_SRC, "scale_add", ["n", "k"], [0, 1], [0], [1], True, (1, 1, 1))
    b = ExecutionPlanBuilder(dev)
    ix, iy = b.add_buffer(0, x), b.add_buffer(1, y)
    b.add_op(PreparedKernel(0, kernel, [iy, ix], [0], [n, 2], {}, [],
                            [RuntimeVar("n", 0, extent_max), RuntimeVar("k", -5, 5)], extents={0: "n", 1: "n"}))
    b.set_output_buffer(iy)
    return b, y


BAD_VARS = [
    ({"k": 6}, VariableBoundsError, "outside bounds [-5, 5]"),
    ({"k": -6}, VariableBoundsError, "outside bounds"),
    ({"k": 1 << 40}, VariableBoundsError, "outside bounds"),
    ({"k": 1.5}, VariableBoundsError, "must be an int"),
    ({"k": "3"}, VariableBoundsError, "must be an int"),
    ({"k": True}, VariableBoundsError, "must be an int"),
    ({"k": None}, VariableBoundsError, "must be an int"),
    ({"m": 1}, PlanError, "unknown variable 'm'"),
    ({"k": 2, "n": 100}, BufferAllocationError, "needs 100 elements"),  # in bounds, but past the buffers
    ({"n": 65}, BufferAllocationError, "refusing to dispatch"),
]


@needs_cc
def test_bad_variables_dispatch_nothing_and_do_not_poison(plan_object) -> None:
    dev = CpuDevice(threads=1)
    prog = dev.load(plan_object, "scale_add", buf_count=2, var_names=["n", "k"])
    calls = prog._loaded.function("scale_add_calls", ctypes.c_int)
    builder, y = _counting_plan(dev, prog, nbuf=64, extent_max=128)
    plan = builder.build()
    plan.execute_with_vars({"k": 3, "n": 64})
    assert calls() == 1 and y.tolist()[0] == 4.0
    before = y.copyout()
    for values, exc_type, message in BAD_VARS:
        with pytest.raises(exc_type, match=message.replace("[", r"\[").replace("]", r"\]")):
            plan.execute_with_vars(values)
        assert calls() == 1, "dispatched despite %r" % (values,)
        assert y.copyout() == before
        assert not plan.poisoned
    plan.execute_with_vars({"k": 5, "n": 64})  # still usable, and the rejected values left no trace
    assert calls() == 2 and y.tolist()[0] == 6.0


@needs_cc
def test_buffer_smaller_than_declared_extent_is_refused_at_build(plan_object) -> None:
    dev = CpuDevice(threads=1)
    prog = dev.load(plan_object, "scale_add", buf_count=2, var_names=["n", "k"])
    calls = prog._loaded.function("scale_add_calls", ctypes.c_int)
    builder, _y = _counting_plan(dev, prog, nbuf=32, n=64)  # n = 64 > 32 elements
    with pytest.raises(BufferAllocationError, match="needs 64 elements .* holds 32"):
        builder.build()
    assert calls() == 0


@needs_cc
def test_program_level_bad_arguments_dispatch_nothing(plan_object) -> None:
    dev = CpuDevice(threads=1)
    prog = dev.load(plan_object, "scale_add", buf_count=2, var_names=["n", "k"])
    calls = prog._loaded.function("scale_add_calls", ctypes.c_int)
    y = dev.allocate([4], "float32")
    cases = [
        (([y], [4, 1]), "takes 2 buffers, got 1"),
        (([y, "not a buffer"], [4, 1]), "has no address"),
        (([y, y], [4]), "takes 2 variables"),
        (([y, y], [4, 1 << 31]), "does not fit the kernel's int32"),
        (([y, y], [4, 0.5]), "is not an integer"),
    ]
    for (buffers, vals), message in cases:
        with pytest.raises(SvodError, match=message):
            prog.execute(buffers, vals)
    assert calls() == 0


@pytest.mark.parametrize("spec", ["TPU", "TPU:0", "", "CPU:1", "CPU:x", "cpu:-1", "GPU:zero"])
def test_unknown_or_malformed_devices(spec: str) -> None:
    from svod_min.device_registry import DEVICE_FACTORIES

    with pytest.raises(InvalidDeviceError):
        DEVICE_FACTORIES.device(spec)


def test_loader_api_bad_arguments() -> None:
    for bad in (None, 42, "ELF", [0x7F, 0x45]):
        with pytest.raises(ElfFormatError, match="expected ELF object bytes"):
            load_object(bad)  # type: ignore[arg-type]
        with pytest.raises(ElfFormatError):
            relocate(bad, 0x10000000, lambda n: 0)  # type: ignore[arg-type]


@needs_cc
def test_relocate_at_an_unaligned_base(state_objects) -> None:
    with pytest.raises(LoaderError, match="not page-aligned"):
        relocate(next(iter(state_objects.values())), 0x10000010, lambda n: 0x10800000)


def _cli_in_process(argv: List[str], capsys) -> tuple:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


CLI_BAD = [
    (["run", "--device", "TPU"], "invalid device 'TPU': unknown kind 'TPU'"),
    (["run", "--device", "CPU:1"], "CPU takes no device index"),
    (["run", "--var", "rows"], "expected NAME=INT"),
    (["run", "--var", "=3"], "expected NAME=INT"),
    (["run", "--var", "nosuch=1"], "unknown variable"),
    (["run", "--var", "rows=1.5"], "is not an integer"),
    (["run", "--repeat", "-3"], "--repeat must be >= 1"),
]


@pytest.mark.parametrize("argv, message", CLI_BAD, ids=[" ".join(c[0]) for c in CLI_BAD])
def test_cli_bad_input_is_one_line_and_exit_2(argv: List[str], message: str, capsys) -> None:
    code, out, err = _cli_in_process(argv, capsys)
    assert code == EXIT_BAD_INPUT == 2, err
    assert message in _one_line_error(err)
    assert "verify" not in out  # nothing ran


def test_cli_plan_path_is_a_directory(tmp_path, capsys) -> None:
    code, _out, err = _cli_in_process(["run", str(tmp_path)], capsys)
    assert "cannot read plan file" in _one_line_error(err)
    assert code == EXIT_BAD_INPUT


def test_cli_empty_device_is_refused(capsys) -> None:
    code, _out, err = _cli_in_process(["run", "--device", ""], capsys)
    assert code == EXIT_BAD_INPUT
    assert "empty device spec" in err


@needs_cc
@pytest.mark.parametrize("option", ["--trace", "--save"])
def test_cli_output_path_under_a_regular_file(option: str, tmp_path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _out, err = _cli_in_process(["run", option, str(blocker / "out")], capsys)
    line = _one_line_error(err)
    assert "internal error" not in line and str(blocker) in line
    assert code == EXIT_BAD_INPUT
