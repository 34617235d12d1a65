"""The loader's hardening: what it imports, and how it behaves on hostile or unusual hosts."""

from __future__ import annotations

import os
import subprocess
import sys

from svod_min import clang
from svod_min.jit_loader import arch


def test_the_loader_does_not_import_the_compiler_driver() -> None:
    code = "import sys, svod_min.jit_loader; print(sorted(m for m in sys.modules if m.startswith('svod_min.clang')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_host_arch_lives_in_the_loader(monkeypatch) -> None:
    assert clang.host_arch is arch.host_arch  # the compiler driver re-exports the loader's
    for machine, name in (("AMD64", "x86_64"), ("arm64", "aarch64"), ("x86_64", "x86_64"), ("riscv64", "riscv64")):
        monkeypatch.setattr(arch.os, "uname", lambda m=machine: os.uname_result(("Linux", "h", "r", "v", m)))
        assert arch.host_arch() == name
