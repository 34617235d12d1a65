"""Issue 19's defect shape, generated: load_object against dlopen over random vector programs.

``vector_progs.py`` writes small C programs in the reported shape (GCC vector
extensions, ``.rodata.cst16`` constants through LDST128, ``.bss``/``.data``/
``.rodata`` through ADRP + ADD pairs with ADDs far from their ADRP, memset and
memcpy through CALL26, cold and static helpers, GOT-reached globals, a
function-pointer table, state kept across calls). Each is built ``-fPIC -c``
by the root's gcc; the shared library is linked from that same object, so any
difference is the loader's. Results are compared through memory only, over
three calls in a row and again after a second load of the same object.
A wider run: ``python3 tests/aarch64/vector_hunt.py FIRST COUNT`` (see
docs/reliability.md section 8 for its figures).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Tuple

import pytest
from a64_support import BREAK_ENV, NOT_AARCH64, ON_AARCH64

if not ON_AARCH64:
    pytest.skip(NOT_AARCH64, allow_module_level=True)
if shutil.which("gcc") is None:
    pytest.skip("the root's gcc is needed to build the programs", allow_module_level=True)

import vector_hunt  # noqa: E402
import vector_progs  # noqa: E402

SEEDS = range(4)  # bounded: about 1.5 s of CPU per comparison under emulation (16 in all)
FLAGS = [
    ("-O2",),
    ("-O2", "-fno-plt"),
    ("-O3", "-fno-plt", "-freorder-blocks-and-partition"),
    ("-O2", "-ffunction-sections", "-fdata-sections"),
]


@pytest.mark.parametrize("flags", FLAGS, ids=["_".join(f).replace("-", "") for f in FLAGS])
@pytest.mark.parametrize("seed", SEEDS)
def test_generated_vector_program_matches_shared_object(seed: int, flags: Tuple[str, ...], tmp_path) -> None:
    obj, lib = vector_hunt.build(vector_progs.program(seed), flags, str(tmp_path))
    why = vector_hunt.compare_in_child(obj, lib)
    assert why is None, "seed %d %s: load_object and dlopen disagree: %s" % (seed, " ".join(flags), why)


def test_the_programs_have_the_reported_relocations(tmp_path) -> None:
    """The generated objects really carry the relocation kinds of the report (not only -O2 in name)."""
    elffile = pytest.importorskip("elftools.elf.elffile")
    obj, _ = vector_hunt.build(vector_progs.program(0), ("-O2",), str(tmp_path))
    path = str(tmp_path / "p.o")
    with open(path, "rb") as fh:
        elf = elffile.ELFFile(fh)
        kinds = {
            r["r_info_type"]
            for sec in elf.iter_sections()
            if sec.name.startswith(".rela.text")
            for r in sec.iter_relocations()
        }
    # LDST128_ABS_LO12_NC, ADR_PREL_PG_HI21, ADD_ABS_LO12_NC, CALL26, ADR_GOT_PAGE
    assert {299, 275, 277, 283, 311} <= kinds, sorted(kinds)


def test_a_broken_adrp_makes_the_generated_comparisons_fail() -> None:
    """The comparison can fail: every ADRP one page off (SVOD_AARCH64_BREAK=adrp) is caught."""
    if os.environ.get(BREAK_ENV):
        pytest.skip("this whole session already runs with %s set" % BREAK_ENV)
    here = os.path.abspath(__file__)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", here, "-k", "matches_shared_object and 0-O2"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=repo,
        env=dict(os.environ, **{BREAK_ENV: "adrp"}),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, "a broken ADRP went unnoticed:\n" + out[-3000:]
    assert "disagree" in out, out[-3000:]
