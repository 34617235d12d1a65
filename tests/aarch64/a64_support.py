"""Support for the aarch64 stage (issue 19), the tests that execute aarch64 code.

(Not a conftest.py: a second module named ``conftest`` would shadow
tests/conftest.py, which other test files import by that name.)

``.ci/aarch64-stage`` runs this directory inside a Debian arm64 root under
qemu user-mode emulation (with the root's own Python and gcc); on an arm64
machine ``python3 -m pytest tests/aarch64`` runs it natively. On any other
host every module here skips, except the relocation-only checks that need
nothing but the aarch64 binutils.

``SVOD_AARCH64_BREAK=adrp`` deliberately breaks one relocation for the whole
process as soon as this module is imported (every ADRP page one page too far),
to show that the stage catches a wrong relocation; it must make the stage fail.
"""

from __future__ import annotations

import os
import platform
from typing import Dict

import pytest

from svod_min.jit_loader.aarch64 import AARCH64
from svod_min.jit_loader.arch import RelocSpec

ON_AARCH64 = platform.machine().lower() in ("aarch64", "arm64")
NOT_AARCH64 = "executes aarch64 code: run .ci/aarch64-stage (qemu user-mode emulation) or use an arm64 host"
needs_aarch64 = pytest.mark.skipif(not ON_AARCH64, reason=NOT_AARCH64)

BREAK_ENV = "SVOD_AARCH64_BREAK"
ADRP_TYPES = (275, 276, 311)  # R_AARCH64_ADR_PREL_PG_HI21(_NC), R_AARCH64_ADR_GOT_PAGE


def _page_too_far(spec: RelocSpec) -> RelocSpec:
    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        spec.apply(image, off, s, a + 0x1000, p)

    apply.deliberately_broken = True  # type: ignore[attr-defined]
    return RelocSpec(spec.name, spec.width, spec.via, apply)


def break_adrp(relocs: Dict[int, RelocSpec]) -> Dict[int, RelocSpec]:
    """The table with every ADRP page one page too far (the originals are returned)."""
    saved = {t: relocs[t] for t in ADRP_TYPES}
    relocs.update({t: _page_too_far(spec) for t, spec in saved.items()})
    return saved


def break_from_environment() -> str:
    """Apply the break ``SVOD_AARCH64_BREAK`` asks for (once); returns its name or ""."""
    broken = os.environ.get(BREAK_ENV, "").strip().lower()
    if broken and broken != "adrp":
        raise ValueError("%s=%s: the only deliberate break is 'adrp'" % (BREAK_ENV, broken))
    if broken and not getattr(AARCH64.relocs[ADRP_TYPES[0]].apply, "deliberately_broken", False):
        break_adrp(AARCH64.relocs)
    return broken


BROKEN = break_from_environment()
