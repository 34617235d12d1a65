"""SVOD_SANITIZE: sanitizer flags for every kernel the driver compiles (docs/fuzzing.md); unset, nothing changes."""

from __future__ import annotations

import ctypes
import os
import signal

import pytest
from conftest import needs_cc, needs_clang

from svod_min.compiler import clang
from svod_min.compiler.run import family_flags
from svod_min.config import sanitizers
from svod_min.error import ConfigError
from svod_min.jit_loader import load_object

#: Signed overflow: UB that -fsanitize=signed-integer-overflow (part of "undefined") checks.
SOURCE = "int add_one(int a) { return a + 1; }\n"


@needs_cc
def test_unset_means_no_sanitizer_flags(monkeypatch) -> None:
    monkeypatch.delenv("SVOD_SANITIZE", raising=False)
    assert sanitizers() == ()
    assert not [f for f in family_flags(clang.find_compiler()) if "sanitize" in f]


def test_names_are_checked(monkeypatch) -> None:
    monkeypatch.setenv("SVOD_SANITIZE", " Undefined , address")
    assert sanitizers() == ("undefined", "address")
    monkeypatch.setenv("SVOD_SANITIZE", "undefined,thread")
    with pytest.raises(ConfigError, match="SVOD_SANITIZE.*thread is not a sanitizer"):
        sanitizers()


@needs_clang
def test_undefined_traps_in_a_loaded_kernel_and_changes_the_cache_key(monkeypatch) -> None:
    from svod_min.cache.kernel_cache import object_key

    monkeypatch.delenv("SVOD_SANITIZE", raising=False)
    plain_key, plain = object_key(SOURCE), clang.compile_c(SOURCE)
    monkeypatch.setenv("SVOD_SANITIZE", "undefined")
    assert object_key(SOURCE) != plain_key  # a sanitized object never answers for a default one
    obj = clang.compile_c(SOURCE)
    assert obj != plain
    fn = load_object(obj).function("add_one", ctypes.c_int, ctypes.c_int)
    assert fn(41) == 42
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child traps
        fn(2**31 - 1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGILL, signal.SIGTRAP)
