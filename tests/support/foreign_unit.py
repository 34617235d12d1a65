"""Helpers for the per-architecture loader unit tests (test_jit_loader_riscv64/ppc64le/loongarch64.py)."""

from __future__ import annotations

import shutil
import struct
import subprocess
from typing import Dict, List, Optional, Tuple

import pytest

from svod_min.jit_loader.arch import Arch, RelocSpec
from svod_min.jit_loader.layout import ARCHES

#: arch -> clang command producing its objects (clang 14 has no loongarch64; Debian's clang-16 has).
CLANG = {
    "riscv64": ("clang", "--target=riscv64-linux-gnu"),
    "ppc64le": ("clang", "--target=powerpc64le-linux-gnu"),
    "loongarch64": ("clang-16", "--target=loongarch64-linux-gnu"),
}


def arch(name: str) -> Arch:
    return next(a for a in ARCHES.values() if a.name == name)


def spec(arch_name: str, reloc_name: str) -> RelocSpec:
    return next(s for s in arch(arch_name).relocs.values() if s.name == reloc_name)


def apply(arch_name: str, reloc_name: str, contents: bytes, s: int, a: int = 0, p: int = 0x1000) -> bytes:
    """The field after ``reloc_name`` patched it (the field sits at offset 0 of a scratch image)."""
    image = bytearray(contents) + bytearray(16)
    spec(arch_name, reloc_name).apply(image, 0, s, a, p)
    return bytes(image[: len(contents)])


def u32(data: bytes, off: int = 0) -> int:
    return struct.unpack_from("<I", data, off)[0]


def sext(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def compile_for(arch_name: str, source: str, *flags: str) -> bytes:
    command = CLANG[arch_name]
    if not shutil.which(command[0]):
        pytest.skip("%s is not installed (it builds %s objects)" % (command[0], arch_name))
    proc = subprocess.run(
        [*command, "-c", "-x", "c", "-", "-o", "-", *flags], input=source.encode(), capture_output=True, timeout=120
    )
    if proc.returncode != 0:
        pytest.skip("%s cannot build for %s: %s" % (command[0], arch_name, proc.stderr.decode()[-300:]))
    return proc.stdout


def relocations(obj: bytes) -> List[Tuple[int, str, int, int]]:
    """(file offset of the RELA entry, target section name, r_offset, type) for every entry."""
    from io import BytesIO

    from elftools.elf.elffile import ELFFile
    from elftools.elf.relocation import RelocationSection

    elf = ELFFile(BytesIO(obj))
    out = []
    for sec in elf.iter_sections():
        if isinstance(sec, RelocationSection) and sec.is_RELA():
            target = elf.get_section(sec["sh_info"]).name
            for i, rel in enumerate(sec.iter_relocations()):
                out.append((sec["sh_offset"] + 24 * i, target, rel["r_offset"], rel["r_info_type"]))
    return out


def with_type(obj: bytes, entry_offset: int, rtype: int) -> bytes:
    """``obj`` with the RELA entry at ``entry_offset`` given relocation type ``rtype``."""
    data = bytearray(obj)
    info = struct.unpack_from("<Q", data, entry_offset + 8)[0]
    struct.pack_into("<Q", data, entry_offset + 8, (info & ~0xFFFFFFFF) | rtype)
    return bytes(data)


def resolver(addresses: Optional[Dict[str, int]] = None):
    return lambda name: (addresses or {}).get(name, 0x7F0000001000)
