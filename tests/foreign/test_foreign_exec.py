"""svod-relocated code executed on riscv64, ppc64le and loongarch64 under qemu-user.

Each case's object is linked statically by a real linker (the reference) and,
separately, relocated by ``svod_min.jit_loader`` on this host and mapped by a
static harness at a fixed base; both run under qemu and must print the same
results (see foreign_support.py). The full matrix (every case, each compiler,
``-O0``, ``-O2 -fPIC`` and svod's own flags) runs with ``SVOD_FOREIGN=1`` (the CI
stage ``.ci/foreign-arch-stage``); by default two cases per compiler with svod's flags.
A deliberately bent relocation per architecture must be caught.
"""

from __future__ import annotations

import os
from typing import List

import pytest

pytest.importorskip("elftools")

import foreign_support as fs  # noqa: E402
from foreign_cases import CASES  # noqa: E402

pytestmark = pytest.mark.python_independent  # foreign code under qemu

FULL = os.environ.get("SVOD_FOREIGN", "") == "1"
COMPILERS = {"riscv64": ("gcc", "clang"), "ppc64le": ("gcc", "clang"), "loongarch64": ("zig", "clang16")}
QUICK_CASES = ("calls", "kitchen")


def _params() -> List[object]:
    out = []
    for arch, compilers in COMPILERS.items():
        for compiler in compilers:
            for opt in ("-O0", "-O2", "svod"):
                for case in CASES:
                    quick = opt == "svod" and case.name in QUICK_CASES
                    marks = [] if FULL or quick else [pytest.mark.skip(reason="full matrix only (SVOD_FOREIGN=1)")]
                    out.append(
                        pytest.param(
                            arch,
                            compiler,
                            opt,
                            case,
                            id="%s-%s-%s-%s" % (arch, compiler, opt.lstrip("-"), case.name),
                            marks=marks,
                        )
                    )
    return out


def _toolchain(arch: str, compiler: str) -> fs.Toolchain:
    tc, reason = fs.toolchain(arch)
    if tc is None:
        pytest.skip("%s: %s" % (arch, reason))
    if compiler not in tc.compilers:
        pytest.skip("%s: compiler %s is not installed" % (arch, compiler))
    return tc


@pytest.mark.parametrize("arch, compiler, opt, case", _params())
def test_relocated_image_matches_linked_program(arch: str, compiler: str, opt: str, case: object, tmp_path) -> None:
    tc = _toolchain(arch, compiler)
    outcome = fs.run_case(tc, compiler, opt, case, str(tmp_path), bend=fs.breaking(arch))  # type: ignore[arg-type]
    assert outcome.reference.strip(), "the reference program printed nothing"
    assert outcome.loaded == outcome.reference


@pytest.mark.parametrize("arch", list(COMPILERS))
def test_a_bent_relocation_is_caught(arch: str, tmp_path) -> None:
    """A HI20 one page off / a TOC base 8 bytes off / a B26 one instruction off changes what runs."""
    compiler = COMPILERS[arch][0]
    tc = _toolchain(arch, compiler)
    case = next(c for c in CASES if c.name == "kitchen")
    try:
        outcome = fs.run_case(tc, compiler, "-O2", case, str(tmp_path), bend=True)
    except RuntimeError as exc:
        assert "running the relocated image failed" in str(exc)  # it crashed: caught
        return
    assert outcome.loaded != outcome.reference
