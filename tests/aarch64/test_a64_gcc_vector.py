"""Issue 19's defect shape, checked by relocation on any host with the aarch64 binutils.

``data/vector_gcc12_O2.s`` is gcc 12's arm64 output for ``VECTOR_SOURCE``
(tests/support/loader_cases.py) at -O2 -fPIC: 16-byte constants loaded with
LDST128_ABS_LO12_NC from ``.rodata.cst16``, static arrays over several pages
reached by ADRP + ADD pairs (some ADDs far from their ADRP), memset through
CALL26. It is assembled by ``aarch64-linux-gnu-as`` (or ``as`` on arm64),
relocated at a base with a non-zero page offset for externals, and every
ADRP/ADD/LDST field against a section is decoded back (by the linker oracle's
independent decoder) and must reach that section's address plus the addend.
Execution of the same source is in test_a64_loader_exec.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

pytest.importorskip("elftools")

from a64_support import ON_AARCH64  # noqa: E402
from support import oracle as osup  # noqa: E402  (tests/ is on sys.path, like conftest)

from svod_min.jit_loader import relocate  # noqa: E402

# the aarch64 stage's from-source pass assembles it with the arm64 root's own `as`
pytestmark = pytest.mark.from_source_sample

ASM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "vector_gcc12_O2.s")
ASSEMBLER = "as" if ON_AARCH64 else "aarch64-linux-gnu-as"
BASE = 0x40000000
MEMSET = 0x7F5500000000 + 0x7F0  # far: only a veneer reaches it
PAIR_TYPES = {
    "R_AARCH64_ADR_PREL_PG_HI21",
    "R_AARCH64_ADD_ABS_LO12_NC",
    "R_AARCH64_LDST128_ABS_LO12_NC",
    "R_AARCH64_LDST32_ABS_LO12_NC",
    "R_AARCH64_LDST64_ABS_LO12_NC",
}


@pytest.fixture(scope="module")
def vector_object(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    if shutil.which(ASSEMBLER) is None:
        pytest.skip("%s (binutils-aarch64-linux-gnu) is not installed" % ASSEMBLER)
    out = str(tmp_path_factory.mktemp("vector") / "vector.o")
    proc = subprocess.run([ASSEMBLER, ASM, "-o", out], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with open(out, "rb") as fh:
        return fh.read()


def test_the_case_still_has_the_defect_report_shape(vector_object: bytes) -> None:
    info = osup.parse_object(vector_object)
    names = {osup.type_name("aarch64", r.type) for r in info.relocs}
    assert {
        "R_AARCH64_LDST128_ABS_LO12_NC",
        "R_AARCH64_ADR_PREL_PG_HI21",
        "R_AARCH64_ADD_ABS_LO12_NC",
        "R_AARCH64_CALL26",
    } <= names
    assert any(r.sym == ".rodata.cst16" for r in info.relocs if r.type == 299)
    assert any(r.sym == "memset" and r.external for r in info.relocs if r.type == 283)


def test_every_page_and_low12_field_reaches_its_section_plus_addend(vector_object: bytes) -> None:
    info = osup.parse_object(vector_object)
    image = relocate(vector_object, BASE, lambda name: MEMSET)
    sec_addr = {name: image.sections[name] for name in info.sections}
    assert sec_addr[".rodata.cst16"] % 16 == 0, "16-byte constants lost their alignment"
    decoder = osup.Decoder(info, osup.Memory([(image.base, image.image)], "ours"), sec_addr)
    checked = 0
    for index, r in enumerate(info.relocs):
        if osup.type_name("aarch64", r.type) not in PAIR_TYPES or r.sym not in sec_addr:
            continue
        expected = sec_addr[r.sym] + r.addend
        target = decoder.decode(index)
        assert expected in target.value, "%s at %s+0x%x against %s%+d: reaches %s, expected 0x%x" % (
            osup.type_name("aarch64", r.type),
            r.section,
            r.offset,
            r.sym,
            r.addend,
            [hex(v) for v in target.value],
            expected,
        )
        checked += 1
    assert checked >= 20


def test_memset_calls_reach_memset_through_a_veneer(vector_object: bytes) -> None:
    info = osup.parse_object(vector_object)
    image = relocate(vector_object, BASE, lambda name: MEMSET)
    sec_addr = {name: image.sections[name] for name in info.sections}
    decoder = osup.Decoder(info, osup.Memory([(image.base, image.image)], "ours"), sec_addr)
    calls = [i for i, r in enumerate(info.relocs) if r.type == 283 and r.sym == "memset"]
    assert calls
    for index in calls:
        assert MEMSET in decoder.decode(index).value
