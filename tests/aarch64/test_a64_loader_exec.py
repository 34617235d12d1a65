"""load_object against ctypes.CDLL of the same source built -shared, executed on aarch64.

Every case of ``tests/support/loader_cases.py`` (libm/libc calls through veneers,
.bss/.data/.rodata, GOT loads, jump tables, function-pointer tables, a big
function, GCC vector code with 16-byte constants) is built by the root's gcc
at -O0 and -O2, with and without -fno-plt: once ``-c`` for the loader, once
``-shared`` for the dynamic linker. Both must give the same results.
Thread-local storage must be refused by name, not run.

Each comparison runs in a forked child: wrongly relocated code may fault,
and that must fail one test, not end the whole stage.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import pickle
import shutil
import subprocess
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
from a64_support import BREAK_ENV, NOT_AARCH64, ON_AARCH64
from support.loader_cases import EXEC_CASES, PROVIDER, TLS_SOURCE, ExecCase

from svod_min.error import UnsupportedRelocationError
from svod_min.jit_loader import LoadedObject, load_object

if not ON_AARCH64:
    pytest.skip(NOT_AARCH64, allow_module_level=True)
if shutil.which("gcc") is None:
    pytest.skip("the root's gcc is needed to build the cases", allow_module_level=True)

VARIANTS: List[Tuple[str, Tuple[str, ...]]] = [
    ("O0", ("-O0",)),
    ("O0-noplt", ("-O0", "-fno-plt")),
    ("O2", ("-O2",)),
    ("O2-noplt", ("-O2", "-fno-plt")),
]


def gcc(args: List[str], source: Optional[str] = None) -> None:
    proc = subprocess.run(["gcc", "-fPIC", *args], input=source, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, "gcc %s failed:\n%s" % (" ".join(args), proc.stderr)


def build_object(source: str, flags: Tuple[str, ...], workdir: str, tag: str) -> bytes:
    path = os.path.join(workdir, tag + ".o")
    gcc([*flags, "-c", "-x", "c", "-", "-o", path], source)
    with open(path, "rb") as fh:
        return fh.read()


def build_shared(source: str, flags: Tuple[str, ...], workdir: str, tag: str, extra: str = "") -> ctypes.CDLL:
    src = os.path.join(workdir, tag + ".c")
    with open(src, "w") as fh:
        fh.write(source + extra)
    path = os.path.join(workdir, tag + ".so")
    gcc(["-shared", *flags, src, "-o", path, "-lm"])
    return ctypes.CDLL(path)


class Side:
    """``get(name, restype, *argtypes)`` and ``get.address(name)`` on one side of a comparison."""

    def __init__(
        self,
        lib: Optional[ctypes.CDLL] = None,
        lo: Optional[LoadedObject] = None,
        externals: Optional[Dict[str, int]] = None,
    ) -> None:
        self.lib, self.lo, self.externals = lib, lo, externals or {}

    def __call__(self, name: str, restype: Any, *argtypes: Any) -> Any:
        if self.lo is not None:
            return self.lo.function(name, restype, *argtypes)
        fn = getattr(self.lib, name)
        fn.restype, fn.argtypes = restype, list(argtypes)
        return fn

    def address(self, name: str) -> int:
        if self.lo is not None:
            return self.externals[name] if name in self.externals else self.lo.address(name)
        return ctypes.cast(getattr(self.lib, name), ctypes.c_void_p).value or 0


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory):
    """The externals the cases declare, as a loaded object: name -> address."""
    workdir = str(tmp_path_factory.mktemp("provider"))
    with load_object(build_object(PROVIDER, ("-O2",), workdir, "provider")) as lo:
        yield {name: lo.address(name) for name in ("ext_data", "ext_fn", "near_data")}


def run_both(case: ExecCase, flags: Tuple[str, ...], workdir: str, externals: Dict[str, int]) -> Tuple[list, list]:
    extra = PROVIDER if case.needs_provider else ""
    lib = build_shared(case.source, flags, workdir, case.name, extra)
    obj = build_object(case.source, flags, workdir, case.name)
    symbols = externals if case.needs_provider else None
    with load_object(obj, symbols=symbols) as lo:
        ours = case.exercise(Side(lo=lo, externals=externals))
    return ours, case.exercise(Side(lib=lib))


def in_child(fn: Callable[[], Any]) -> Any:
    """``fn()`` in a forked child; its result, or a test failure naming the exception or signal."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read_fd)
        faulthandler.disable()  # a fault is reported once, by the parent, as a test failure
        try:
            payload = pickle.dumps(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - reported by the parent
            payload = pickle.dumps(("error", "%s: %s" % (type(exc).__name__, exc)))
        with os.fdopen(write_fd, "wb") as fh:
            fh.write(payload)
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        payload = fh.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        pytest.fail("the comparison died with signal %d (wrongly relocated code?)" % os.WTERMSIG(status))
    kind, value = pickle.loads(payload)
    if kind == "error":
        pytest.fail(value)
    return value


@pytest.mark.parametrize("variant,flags", VARIANTS, ids=[v for v, _ in VARIANTS])
@pytest.mark.parametrize("case", EXEC_CASES, ids=[c.name for c in EXEC_CASES])
def test_loaded_code_matches_shared_object(case: ExecCase, variant: str, flags, tmp_path, provider) -> None:
    ours, theirs = in_child(lambda: run_both(case, flags, str(tmp_path), provider))
    assert ours == theirs, "%s %s: load_object and ctypes.CDLL disagree" % (case.name, variant)


@pytest.mark.parametrize("variant,flags", VARIANTS, ids=[v for v, _ in VARIANTS])
def test_thread_local_storage_is_refused_by_name(variant: str, flags, tmp_path) -> None:
    lib = build_shared(TLS_SOURCE, flags, str(tmp_path), "tls")
    assert [lib.bump_tls(), lib.bump_tls()] == [1, 2]  # the dynamic linker runs it...
    obj = build_object(TLS_SOURCE, flags, str(tmp_path), "tls")
    with pytest.raises(UnsupportedRelocationError, match="thread-local storage"):
        load_object(obj)  # ...the loader refuses it cleanly


def test_a_broken_adrp_makes_these_comparisons_fail(tmp_path) -> None:
    """Acceptance of issue 19: every ADRP page one page off (SVOD_AARCH64_BREAK=adrp) is caught."""
    if os.environ.get(BREAK_ENV):
        pytest.skip("this whole session already runs with %s set" % BREAK_ENV)
    here = os.path.abspath(__file__)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    select = "test_loaded_code_matches_shared_object and vector and O2"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", here, "-k", select],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=repo,
        env=dict(os.environ, **{BREAK_ENV: "adrp"}),
    )
    out = proc.stdout + proc.stderr
    print("with %s=adrp: exit %d\n%s" % (BREAK_ENV, proc.returncode, out[-3000:]))
    assert proc.returncode not in (0, 5), "a broken ADRP went unnoticed:\n" + out[-3000:]
    # Either the results differ, or the wrong page makes the code fault.
    assert "disagree" in out or "died with signal" in out, out[-3000:]
