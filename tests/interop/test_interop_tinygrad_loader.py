"""svod_min as the loader of tinygrad's CPU programs (svod_min.interop.tinygrad_loader, the launcher).

Needs tinygrad 0.14 (the ``tinygrad`` tox env); elsewhere the tests skip. tinygrad's own
``test/test_tiny.py`` (from its 0.14.0 source distribution) runs twice, as shipped and hooked,
when ``SVOD_TINYGRAD_SUITE=1`` (the tinygrad tox env sets it; .ci/run fetches the sdist);
``SVOD_TINYGRAD_TEST_TINY_LEAVE_OUT=test_a,test_b`` leaves named tests of it out of both runs (the
aarch64 stage leaves out the two mnist tests, minutes under emulation).
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import threading
from typing import Any, Dict, List

import pytest
from support.maps import mapping_perms

import svod_min
from svod_min.error import TinygradHookError, TinygradProgramError, TinygradVersionError
from svod_min.interop import tinygrad_launch, tinygrad_loader
from svod_min.jit_loader import host_arch

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/: where tinygrad_hook_plugin.py is
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(svod_min.__file__)))
HAVE_LLD = shutil.which("ld.lld") is not None
HAVE_TINYGRAD = sys.version_info >= (3, 11) and importlib.util.find_spec("tinygrad") is not None
pytestmark = pytest.mark.skipif(not HAVE_TINYGRAD, reason="tinygrad 0.14 is not installed (tox -e tinygrad)")

LEAVE_OUT_ENV = "SVOD_TINYGRAD_TEST_TINY_LEAVE_OUT"
MARKER = 0x5A5A1234
MARKED_KERNEL = "static const volatile unsigned c = 0x5a5a1234u; void k(unsigned *o) { o[0] = c; }"


@pytest.fixture(autouse=True)
def _hook_left_as_found():
    """Every test leaves the hook uninstalled, whatever it did."""
    yield
    if tinygrad_loader.is_installed():
        tinygrad_loader.restore_tinygrad_loader()


@pytest.fixture(scope="module")
def cpu() -> Any:
    from tinygrad import Device

    return Device["CPU"]


def _compile(cpu: Any, source: str) -> bytes:
    """An object compiled the way tinygrad compiles its kernels (its ClangCompiler, its flags)."""
    from tinygrad.runtime.support.compiler_cpu import ClangCompiler

    return ClangCompiler(cpu.arch.split(",")).compile(source)


def _elf(cpu: Any, lib: bytes, name: str) -> Any:
    from tinygrad.device import TinyELF

    return TinyELF(lib, name, cpu.renderer.target, ())


def _marked_kernels(cpu: Any) -> Any:
    """A factory of distinct kernels: kernel(i) stores i (its constant patched in the object)."""
    lib = _compile(cpu, MARKED_KERNEL)
    marker = MARKER.to_bytes(4, "little")
    assert lib.count(marker) == 1
    at = lib.index(marker)
    return lambda i: _elf(cpu, lib[:at] + i.to_bytes(4, "little") + lib[at + 4 :], "k")


def _run_marked(program: Any) -> int:
    out = ctypes.c_uint32(0)
    program.fxn(ctypes.c_uint64(ctypes.addressof(out)))  # the way CPUProgram.__call__ passes a buffer
    return out.value


def _pythonpath(*extra: str) -> Dict[str, str]:
    # the caller's PYTHONPATH stays after ours (the aarch64 stage finds tinygrad through it)
    inherited = tuple(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    env = dict(os.environ, DEV="CPU", PYTHONPATH=os.pathsep.join(extra + (PACKAGE_PARENT,) + inherited))
    env.pop("DEBUG", None)
    return env


# --- the hook in this process -------------------------------------------------------------------


def test_hook_patches_and_restores_cpu_program() -> None:
    from tinygrad.runtime.ops_cpu import CPUProgram

    original = CPUProgram.__dict__["__init__"]
    with tinygrad_loader.svod_loader():
        assert tinygrad_loader.is_installed() and CPUProgram.__dict__["__init__"] is not original
    assert not tinygrad_loader.is_installed() and CPUProgram.__dict__["__init__"] is original


def test_tensor_program_loaded_by_svod_matches_numpy(cpu: Any) -> None:
    np = pytest.importorskip("numpy")
    from tinygrad import Tensor
    from tinygrad.engine.realize import runtime_cache

    before = tinygrad_loader.loader_stats()
    data = np.arange(12, dtype=np.float32) - 5
    with tinygrad_loader.svod_loader():
        got = ((Tensor(data, device="CPU") * 3.25 - 0.8125).relu()).numpy()  # constants no other test uses
    after = tinygrad_loader.loader_stats()
    np.testing.assert_array_equal(got, np.maximum(data * np.float32(3.25) - np.float32(0.8125), 0))
    assert after.svod_loaded > before.svod_loaded
    assert after.tinygrad_elf == before.tinygrad_elf
    ours = [p for p in runtime_cache.values() if getattr(p, "svod_object", None) is not None]
    assert ours, "no cached tinygrad program was loaded by svod_min"
    for program in ours:
        assert program.addr == program.svod_object.address(program.name)
        if os.path.exists("/proc/self/maps"):  # (the aarch64 stage's chroot mounts no /proc)
            assert mapping_perms(program.addr) == "r-xp"  # executable, never writable
    with tinygrad_loader.svod_loader():  # an ELF object that tinygrad's own loader relocates is counted
        ours[0]._load(_compile(cpu, MARKED_KERNEL))
    assert tinygrad_loader.loader_stats().tinygrad_elf == after.tinygrad_elf + 1


def test_ten_thousand_kernels_dropped_stay_under_an_rss_bound(cpu: Any) -> None:
    kernel = _marked_kernels(cpu)

    def rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    with tinygrad_loader.svod_loader():
        for i in range(200):  # warm: allocator arenas, caches
            assert _run_marked(cpu.runtime(kernel(i))) == i
        gc.collect()
        start_rss, start_live = rss(), tinygrad_loader.loader_stats().svod_live
        for i in range(10000):
            program = cpu.runtime(kernel(i + 1000))
            assert _run_marked(program) == i + 1000
            del program
        gc.collect()
        grown, live = rss() - start_rss, tinygrad_loader.loader_stats().svod_live - start_live
    # a leak would keep 10,000 mappings of >= 2 touched pages each (80 MB)
    assert live == 0
    assert grown < 16 << 20, "RSS grew by %d bytes over 10,000 kernels" % grown


def test_loads_and_drops_from_many_threads(cpu: Any) -> None:
    kernel = _marked_kernels(cpu)
    errors: List[str] = []

    def work(tid: int) -> None:
        for i in range(150):
            value = tid * 100000 + i
            program = cpu.runtime(kernel(value))
            if _run_marked(program) != value:
                errors.append("thread %d kernel %d gave a wrong value" % (tid, value))
            if i % 3 == 0:
                program.svod_object.close()  # explicit close racing with the other threads' loads
            del program

    with tinygrad_loader.svod_loader():
        before = tinygrad_loader.loader_stats()
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        gc.collect()
        after = tinygrad_loader.loader_stats()
    assert errors == []
    assert after.svod_loaded - before.svod_loaded == 600
    assert after.svod_live == before.svod_live


# --- bad use --------------------------------------------------------------------------------------


def test_installing_twice_is_an_error_and_keeps_the_first_hook() -> None:
    from tinygrad.runtime.ops_cpu import CPUProgram

    tinygrad_loader.use_svod_loader()
    hooked = CPUProgram.__dict__["__init__"]
    with pytest.raises(TinygradHookError, match="already installed"):
        tinygrad_loader.use_svod_loader()
    assert CPUProgram.__dict__["__init__"] is hooked


def test_restoring_without_installing_is_an_error() -> None:
    with pytest.raises(TinygradHookError, match="not installed"):
        tinygrad_loader.restore_tinygrad_loader()


def test_unsupported_version_names_both_and_installs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinygrad.runtime.ops_cpu import CPUProgram

    original = CPUProgram.__dict__["__init__"]
    monkeypatch.setattr(tinygrad_loader, "installed_tinygrad_version", lambda: "0.15.2")
    with pytest.raises(TinygradVersionError, match=r"supports tinygrad 0\.14\.x; installed: 0\.15\.2"):
        tinygrad_loader.use_svod_loader()
    assert not tinygrad_loader.is_installed() and CPUProgram.__dict__["__init__"] is original


def test_changed_program_class_shape_installs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinygrad.runtime import ops_cpu

    class Reshaped:  # a CPUProgram that keeps its entry point elsewhere
        def __init__(self, dev: Any, obj: Any) -> None:
            self.dev, self.name, self.signature, self.runtimevars, self.lvp, self.entry = dev, obj.name, 0, {}, False, 0

        def __call__(self) -> None:
            return self.entry

        def _load(self, lib: bytes) -> bytes:
            return lib

    original = Reshaped.__dict__["__init__"]
    monkeypatch.setattr(ops_cpu, "CPUProgram", Reshaped)
    with pytest.raises(TinygradVersionError, match=r"changed shape: CPUProgram.__init__ no longer sets addr, fxn"):
        tinygrad_loader.use_svod_loader()
    assert not tinygrad_loader.is_installed() and Reshaped.__dict__["__init__"] is original


def test_refused_object_names_the_kernel_and_tinygrad_stays_usable(cpu: Any) -> None:
    np = pytest.importorskip("numpy")
    from tinygrad import Tensor

    tls = _elf(cpu, _compile(cpu, "__thread int x; void tls_kernel(int *o) { o[0] = x; }"), "tls_kernel")
    before = tinygrad_loader.loader_stats()
    with tinygrad_loader.svod_loader():
        with pytest.raises(TinygradProgramError, match=r"tinygrad kernel 'tls_kernel'.*thread-local"):
            cpu.runtime(tls)
        got = (Tensor([1.5, -2.0], device="CPU") * 7.0625).numpy()  # the next program loads and runs
    np.testing.assert_array_equal(got, np.array([1.5, -2.0], np.float32) * np.float32(7.0625))
    assert tinygrad_loader.loader_stats().refused == before.refused + 1


def test_entry_is_the_named_function_else_the_one_at_the_start_of_text(cpu: Any) -> None:
    lib = _compile(cpu, MARKED_KERNEL)
    with tinygrad_loader.svod_loader():
        renamed = cpu.runtime(_elf(cpu, lib, "not_in_the_object"))  # tinygrad runs image offset 0: k
        assert _run_marked(renamed) == MARKER
        data_only = _elf(cpu, _compile(cpu, "int table[4] = {1, 2, 3, 4};"), "table_kernel")
        with pytest.raises(TinygradProgramError, match=r"'table_kernel'.*defines no function 'table_kernel'"):
            cpu.runtime(data_only)


@pytest.mark.skipif(host_arch() != "x86_64", reason="the raw program is x86 machine code")
def test_non_elf_program_stays_with_tinygrad_unless_strict(cpu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _elf(cpu, bytes.fromhex("c7072a000000c3"), "raw_x86")  # mov dword [rdi], 42; ret (X86 renderer style)
    before = tinygrad_loader.loader_stats()
    with tinygrad_loader.svod_loader():
        program = cpu.runtime(raw)
        assert _run_marked(program) == 42 and getattr(program, "svod_object", None) is None
        monkeypatch.setenv(tinygrad_loader.STRICT_ENV, "1")
        with pytest.raises(TinygradProgramError, match=r"'raw_x86'.*not an ELF object.*SVOD_TINYGRAD_STRICT=1"):
            cpu.runtime(raw)
    assert tinygrad_loader.loader_stats().tinygrad_non_elf == before.tinygrad_non_elf + 1


# --- tinygrad's arm64 objects (item 4, partly: relocation checked here, not run in the arm64 root) ----

A64_BASE = 0x7F0000000000


def _tinygrad_arm64_objects(cpu: Any) -> List[Any]:
    """The CPU device's helper programs and the kernels of a few ops, rendered and compiled for arm64."""
    from dataclasses import replace

    from tinygrad import Tensor, dtypes
    from tinygrad.codegen import do_to_program
    from tinygrad.helpers import Context
    from tinygrad.renderer.cstyle import ClangRenderer
    from tinygrad.runtime import ops_cpu
    from tinygrad.uop.ops import KernelInfo, Ops

    renderer = ClangRenderer(replace(cpu.renderer.target, renderer="CLANG", arch="arm64,generic"))
    with Context(EMULATED_DTYPES="", TRACK_MATCH_STATS=0):
        helpers = [
            do_to_program(f().sink(arg=KernelInfo(f.__name__), tag=1), renderer).to_elf()
            for f in (ops_cpu.signal_prog, ops_cpu.wait_prog, ops_cpu.timestamp_prog, ops_cpu.worker_prog)
        ]
    a, b = Tensor.rand(33, 17, device="CPU"), Tensor.rand(17, 9, device="CPU")
    outs = [
        a @ b,
        (a.exp() + a.sqrt()).sum(1),
        a.sin().half().float(),
        (a > 0.5).where(a, 3.0).max(0),
        a.cast(dtypes.int).cumsum(1),
    ]
    calls = Tensor.schedule_linear(*outs).src
    kernels = [do_to_program(c.src[0], renderer).to_elf() for c in calls if c.src[0].op is Ops.SINK]
    return helpers + kernels


def _without_merge_flags(obj: bytes) -> bytes:
    """``obj`` with SHF_MERGE cleared: lld reorders the entries of mergeable constant sections, which
    moves constants rather than checking relocations (svod_min keeps them in place either way)."""
    from elftools.elf.elffile import ELFFile

    elf, out = ELFFile(io.BytesIO(obj)), bytearray(obj)
    for i, section in enumerate(elf.iter_sections()):
        flags_at = elf["e_shoff"] + i * elf["e_shentsize"] + 8  # Elf64_Shdr.sh_flags
        struct.pack_into("<Q", out, flags_at, section["sh_flags"] & ~0x10)
    return bytes(out)


@pytest.mark.skipif(not HAVE_LLD, reason="ld.lld is not installed")
def test_tinygrads_arm64_objects_relocate_as_lld_links_them(cpu: Any, tmp_path: Any) -> None:
    from support import oracle as osup

    from svod_min.jit_loader import relocate

    objects = _tinygrad_arm64_objects(cpu)
    assert len(objects) >= 10
    for obj in objects:
        info = osup.parse_object(obj.lib)
        assert info.arch == "aarch64" and not info.externals, obj.name
        image = relocate(obj.lib, A64_BASE, lambda name: 0)
        sec_addr = {name: image.sections[name] for name in info.sections}
        ours = osup.Memory([(image.base, image.image)], "ours")
        linked = osup.link_with_lld(_without_merge_flags(obj.lib), info, sec_addr, {}, str(tmp_path), obj.name)
        comparison = osup.compare(info, ours, image.symbols, sec_addr, {}, linked, {})
        assert comparison.failures() == [], obj.name
        assert obj.name in image.symbols


# --- the launcher ---------------------------------------------------------------------------------


def test_launcher_bad_use_is_exit_2() -> None:
    for argv in ([], ["-m"], ["--frobnicate"], ["/no/such/script.py"]):
        assert tinygrad_launch.launch(argv) == 2, argv
    assert not tinygrad_loader.is_installed()


def test_launcher_runs_script_and_module_with_their_arguments_and_status(tmp_path: Any) -> None:
    body = (
        "import sys, json\nfrom tinygrad import Tensor\n"
        "print(json.dumps([sys.argv[1:], (Tensor([1.0, 2.0]) * 3 + 1).tolist()]))\nsys.exit(7)\n"
    )
    (tmp_path / "prog.py").write_text(body)
    env = dict(_pythonpath(), SVOD_TINYGRAD_REPORT="1")
    for target in (["prog.py"], ["-m", "prog"]):
        child = subprocess.run(
            [sys.executable, "-m", "svod_min", "tinygrad", *target, "a", "--b"],
            cwd=str(tmp_path),
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert child.returncode == 7, child.stderr
        assert json.loads(child.stdout.strip().splitlines()[-1]) == [["a", "--b"], [4.0, 7.0]]
        stats = json.loads(child.stderr.split("svod_min tinygrad loader: ")[1])
        assert stats["svod_loaded"] >= 5 and stats["tinygrad_elf"] == 0 and stats["tinygrad_non_elf"] == 0


# --- under memory-deny-write-execute (a subprocess) -------------------------------------------------

MDWE_CHILD = r"""
import ctypes, json, sys
if "mdwe" in sys.argv[1:]:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(65, 1, 0, 0, 0) != 0:  # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN
        print("NO_MDWE errno %d" % ctypes.get_errno()); sys.exit(77)
from tinygrad import Context, Tensor, TinyJit, nn
Tensor.manual_seed(3)
l1, l2 = nn.Linear(8, 16), nn.Linear(16, 4)
opt = nn.optim.SGD([l1.weight, l1.bias, l2.weight, l2.bias], lr=0.1)
x, y = Tensor.randn(5, 8), Tensor([0, 1, 2, 3, 0])
with Context(TRAINING=1):
    loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y)
    opt.zero_grad(); loss.backward(); opt.step()
step = [loss.item()] + l1.weight.numpy().ravel().tolist() + l2.bias.numpy().tolist()
@TinyJit
def f(a): return (l2(l1(a).relu()) * 2).realize()
jit = [f(Tensor.full((5, 8), i / 4.0).contiguous().realize()).numpy().ravel().tolist() for i in range(5)]
print(json.dumps({"step": step, "jit": jit}))
"""


def _mdwe_child(tmp_path: Any, *launcher: str, mdwe: bool) -> subprocess.CompletedProcess:
    script = tmp_path / "mdwe_child.py"
    script.write_text(MDWE_CHILD)
    argv = [sys.executable, *launcher, str(script)] + (["mdwe"] if mdwe else [])
    env = dict(_pythonpath(), CACHELEVEL="0", SVOD_TINYGRAD_REPORT="1")
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))


def _skip_without_mdwe() -> None:
    probe = (
        "import ctypes; l = ctypes.CDLL(None, use_errno=True); r = l.prctl(65, 1, 0, 0, 0); "
        "print(ctypes.get_errno() if r else 0)"
    )
    errno = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip()
    if errno != "0":
        pytest.skip("this kernel lacks PR_SET_MDWE (Linux >= 6.3): prctl errno %s" % errno)


def test_mdwe_tinygrad_as_shipped_is_refused_and_the_launcher_runs_it(tmp_path: Any) -> None:
    _skip_without_mdwe()
    shipped = _mdwe_child(tmp_path, mdwe=True)
    assert shipped.returncode != 0 and "PermissionError: [Errno 13] Permission denied" in shipped.stderr, (
        shipped.stderr[-2000:]
    )

    reference = _mdwe_child(tmp_path, mdwe=False)  # tinygrad as shipped, no MDWE
    hooked = _mdwe_child(tmp_path, "-m", "svod_min", "tinygrad", mdwe=True)
    assert reference.returncode == 0, reference.stderr[-2000:]
    assert hooked.returncode == 0, hooked.stderr[-2000:]
    want, got = (json.loads(r.stdout.strip().splitlines()[-1]) for r in (reference, hooked))
    assert got == want  # the same machine code: the same bits
    stats = json.loads(hooked.stderr.split("svod_min tinygrad loader: ")[1])
    assert stats["svod_loaded"] > 0 and stats["tinygrad_elf"] == 0 and stats["tinygrad_non_elf"] == 0


# --- tinygrad's own test suite, as shipped and hooked ------------------------------------------------


def _test_tiny(tmp_path: Any) -> str:
    """A copy of tinygrad 0.14.0's test/test_tiny.py (from SVOD_TINYGRAD_TEST_TINY or the sdist .ci/run caches).

    Copied alone into ``tmp_path``: next to the sdist's tinygrad/ and pyproject.toml it would import
    that tinygrad and take that pytest configuration. An empty pytest.ini beside it makes that folder
    the rootdir (no configuration found above it; node ids ``test_tiny.py::TestTiny::NAME``).
    """
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    path = tmp_path / "test_tiny.py"
    explicit = os.environ.get("SVOD_TINYGRAD_TEST_TINY")
    if explicit:
        with open(explicit, "rb") as fh:
            path.write_bytes(fh.read())
        return str(path)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    sdist = os.path.join(cache, "svod-ci", "tinygrad-0.14.0", "tinygrad-0.14.0.tar.gz")
    if not os.path.isfile(sdist):
        pytest.skip("tinygrad 0.14.0 sdist not cached at %s (.ci/run fetches it)" % sdist)
    with tarfile.open(sdist) as tar:
        member = tar.extractfile("tinygrad-0.14.0/test/test_tiny.py")
        assert member is not None
        path.write_bytes(member.read())
    return str(path)


def _left_out() -> List[str]:
    """Tests of test_tiny.py named in SVOD_TINYGRAD_TEST_TINY_LEAVE_OUT (comma-separated), not run either way."""
    return [name.strip() for name in os.environ.get(LEAVE_OUT_ENV, "").split(",") if name.strip()]


def _run_test_tiny(test_tiny: str, tmp_path: Any, hooked: bool) -> Dict[str, Any]:
    results = tmp_path / ("hooked.json" if hooked else "shipped.json")
    # Both runs share one compile cache (the caller's CACHEDB, else one here): the hooked run loads the
    # very objects the shipped run loaded, and clang (slow under emulation) compiles each kernel once.
    env = dict(
        _pythonpath(HERE),
        SVOD_TINYGRAD_HOOK="1" if hooked else "0",
        SVOD_TINYGRAD_RESULTS=str(results),
        CACHEDB=os.environ.get("CACHEDB") or str(tmp_path / "tinygrad-cache.db"),
    )
    name = os.path.basename(test_tiny)
    leave_out = [arg for test in _left_out() for arg in ("--deselect", "%s::TestTiny::%s" % (name, test))]
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tinygrad_hook_plugin",
            "-p",
            "no:cacheprovider",
            name,
            *leave_out,
        ],
        cwd=os.path.dirname(test_tiny),
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert results.exists(), child.stdout[-3000:] + child.stderr[-3000:]
    return json.loads(results.read_text())


@pytest.mark.skipif(
    os.environ.get("SVOD_TINYGRAD_SUITE") != "1", reason="set SVOD_TINYGRAD_SUITE=1 (tox -e tinygrad does)"
)
def test_tinygrads_test_tiny_passes_with_svod_loader(tmp_path: Any) -> None:
    test_tiny = _test_tiny(tmp_path)
    shipped = _run_test_tiny(test_tiny, tmp_path, hooked=False)
    hooked = _run_test_tiny(test_tiny, tmp_path, hooked=True)
    passed = sorted(t for t, outcome in shipped["outcomes"].items() if outcome == "passed")
    assert len(passed) >= 15 - len(_left_out()), shipped["outcomes"]  # 19 passed, 2 skipped on x86_64 and aarch64
    assert not [t for t in shipped["outcomes"] if t.rsplit("::", 1)[-1] in _left_out()]
    regressions = [t for t in passed if hooked["outcomes"].get(t) != "passed"]
    assert regressions == [], "pass as shipped, not with svod_min's loader: %s" % regressions
    assert not shipped["hooked"] and shipped["stats"]["svod_loaded"] == 0
    assert hooked["hooked"] and hooked["stats"]["svod_loaded"] > 0
    assert hooked["stats"]["tinygrad_elf"] == 0 and hooked["stats"]["refused"] == 0


def test_the_hook_is_reachable_under_the_exporters_module_name() -> None:
    from svod_min.interop import tinygrad, tinygrad_loader

    for name in ("use_svod_loader", "restore_tinygrad_loader", "svod_loader", "loader_stats"):
        assert getattr(tinygrad, name) is getattr(tinygrad_loader, name)
