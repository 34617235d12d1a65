"""Relocation fields (jit_loader/patch.py and the layout's template): fields that are the same at every
base are written once into the template, the rest per load; every refusal still names section+offset."""

from __future__ import annotations

import ctypes
import struct

import pytest
from conftest import needs_cc

from svod_min.compiler import clang
from svod_min.error import RelocationRangeError
from svod_min.jit_loader import load_object, plan_layout, relocate
from svod_min.jit_loader.patch import Patch, place_text
from svod_min.jit_loader.x86_64 import X86_64

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
SHDR = struct.Struct("<IIQQQQIIQQ")
RELA = struct.Struct("<QQq")
R_X86_64_PC32 = 2

# A static table reached PC-relatively, no externals: every field is the same at every base.
SELF_CONTAINED = r"""
static const float scale[4] = {1.0f, 2.0f, 3.0f, 4.0f};
float pick(int i) { return scale[i & 3]; }
"""
x86_only = pytest.mark.skipif(clang.host_arch() != "x86_64", reason="objects built and edited as x86_64")


def _first_rela(obj: bytes) -> int:
    """File offset of the first RELA entry."""
    shoff, shnum = EHDR.unpack_from(obj)[6], EHDR.unpack_from(obj)[12]
    for i in range(shnum):
        fields = SHDR.unpack_from(obj, shoff + i * SHDR.size)
        if fields[1] == 4 and fields[5]:
            return fields[4]
    raise AssertionError("no RELA section")


def test_place_text_names_section_and_offset() -> None:
    assert place_text(".text", 0x2A) == ".text+0x2a"
    assert place_text("GOT/stub entry", None) == "GOT/stub entry"


def test_patch_formats_its_place_only_when_asked_and_names_it_on_overflow() -> None:
    spec = X86_64.relocs[R_X86_64_PC32]
    patch = Patch(0x10, spec, ("img", 0), -4, (".text", 0x10), "far")
    assert patch.where == ".text+0x10"
    image = bytearray(32)
    patch.apply(image, 0x40, 0)  # S + A - P = 0x40 - 4 - 0x10 = 0x2c
    assert struct.unpack_from("<i", image, 0x10)[0] == 0x2C
    with pytest.raises(
        RelocationRangeError, match=r"R_X86_64_PC32 against 'far' at \.text\+0x10: .*refusing to truncate"
    ):
        patch.apply(image, 1 << 40, 0)


@needs_cc
@x86_only
def test_self_contained_object_is_its_template_at_every_base() -> None:
    obj = clang.compile_c(SELF_CONTAINED)
    layout = plan_layout(obj)
    assert layout.fixed and not layout.patches
    no_externals = lambda name: pytest.fail("resolved %s" % name)  # noqa: E731
    first, second = relocate(obj, 0x10000000, no_externals), relocate(obj, 0x7F1234560000, no_externals)
    assert first.image == second.image == layout.template
    with load_object(obj) as lo:  # and the one image runs at the base mmap chose
        assert [lo.function("pick", ctypes.c_float, ctypes.c_int)(i) for i in range(5)] == [1.0, 2.0, 3.0, 4.0, 1.0]


@needs_cc
@x86_only
def test_objects_with_externals_keep_per_load_fields() -> None:
    obj = clang.compile_c("#include <math.h>\nfloat f(float x) { return expf(x); }")
    layout = plan_layout(obj)
    assert not layout.fixed and "expf" in layout.externals
    with load_object(obj) as lo:
        assert lo.function("f", ctypes.c_float, ctypes.c_float)(0.0) == 1.0


@needs_cc
@x86_only
def test_overflowing_template_field_names_its_section_and_offset() -> None:
    obj = bytearray(clang.compile_c(SELF_CONTAINED))
    at = _first_rela(bytes(obj))
    r_offset, r_info, _addend = RELA.unpack_from(obj, at)
    assert r_info & 0xFFFFFFFF == R_X86_64_PC32
    RELA.pack_into(obj, at, r_offset, r_info, 1 << 40)  # no 32-bit displacement reaches that
    pattern = r"R_X86_64_PC32 against .* at \.text\+0x%x: .*refusing to truncate" % r_offset
    with pytest.raises(RelocationRangeError, match=pattern):
        plan_layout(bytes(obj))  # refused when laid out, before any memory is mapped
    with pytest.raises(RelocationRangeError, match=pattern):
        load_object(bytes(obj))
