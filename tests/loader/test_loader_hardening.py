"""The loader's hardening: strict W^X hosts (memfd route, no writable+executable mapping ever),
no leaks over 10,000 load/close cycles, nothing written to TMPDIR, a noexec TMPDIR with a read-only
cache, bad arguments, and what the loader imports.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import List

import pytest
from conftest import COMPILERS, needs_cc
from support.hardening import (  # noqa: F401 - fixtures
    CYCLES,
    ENERGY_1,
    STATE_SRC,
    assert_no_leak,
    child_env,
    maps_lines,
    measure,
    run_python,
    state_objects,
    wx,
)

from svod_min.compiler import clang
from svod_min.error import ElfFormatError, LoaderError
from svod_min.jit_loader import arch, load_object, memory, relocate


def test_the_loader_does_not_import_the_compiler_driver() -> None:
    code = (
        "import sys, svod_min.jit_loader; "
        "print(sorted(m for m in sys.modules if m.startswith('svod_min.compiler.clang')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_host_arch_lives_in_the_loader(monkeypatch) -> None:
    assert clang.host_arch is arch.host_arch  # the compiler driver re-exports the loader's
    for machine, name in (("AMD64", "x86_64"), ("arm64", "aarch64"), ("x86_64", "x86_64"), ("riscv64", "riscv64")):
        monkeypatch.setattr(arch.os, "uname", lambda m=machine: os.uname_result(("Linux", "h", "r", "v", m)))
        assert arch.host_arch() == name


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
    result = run_python(_MDWE_CHILD, *paths)
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
    baseline = _wx_lines(maps_lines())
    seen_wx: List[str] = []
    samples = [0]
    seen_exec_images: set = set()
    stop = threading.Event()
    loaded_bases: set = set()

    def sampler() -> None:
        while not stop.is_set():
            lines = maps_lines()
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
    assert [m for m in _wx_lines(maps_lines()) if m not in baseline] == []


def test_memfd_images_are_not_files_on_disk(wx, state_objects) -> None:
    wx("memfd")
    obj = next(iter(state_objects.values()))
    with load_object(obj) as lo:
        mine = [ln for ln in maps_lines() if lo.base <= int(ln.split("-", 1)[0], 16) < lo.base + lo.size]
        assert mine
        for ln in mine:
            parts = ln.split(None, 5)
            path = parts[5].strip() if len(parts) > 5 else ""
            assert path.startswith("/memfd:svod_min-kernel"), ln
            assert "w" not in parts[1] or "x" not in parts[1], ln


@pytest.mark.parametrize("mode", ["anon", "memfd"])
def test_load_close_cycles_do_not_leak(mode: str, wx, state_objects) -> None:
    wx(mode)
    obj = next(iter(state_objects.values()))

    def cycle() -> None:
        lo = load_object(obj)
        assert lo.function("bump", ctypes.c_int)() == 101
        lo.close()

    m = measure(cycle)
    print("load/close x%d (%s): %s" % (CYCLES, mode, m))
    assert_no_leak(m)


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
    env = child_env(TMPDIR=str(noexec), SVOD_OBJECT_CACHE_DIR=str(readonly / "objects"))
    result = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            _NOEXEC_SCRIPT,
            "sh",
            str(noexec),
            str(readonly),
            sys.executable,
            " ".join(COMPILERS),
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    if result.returncode != 0 and "mount:" in result.stderr:
        pytest.skip("mount is not permitted here: %s" % result.stderr.strip())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "left in TMPDIR: []" in result.stdout
    for cc in COMPILERS:
        out = (tmp_path / ("run." + cc)).read_text()
        assert "verify y: ok" in out, out


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
