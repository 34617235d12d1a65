"""What the generic relocator needs to know about one architecture.

Each architecture module builds one :class:`Arch`: a table from relocation
type number to :class:`RelocSpec` (field width, how the symbol is reached,
and a small function that encodes the value), the types it refuses by name,
and how to write a call stub. :func:`host_arch` names the machine we run on.

Three hooks serve the architectures whose fields are not plain ``S + A - P``:
a spec's ``anchor`` says what P is (the field, the TOC base of ppc64le, or the
riscv64 ``HI20`` a ``PCREL_LO12`` names through its label); ``toc_symbol``
names the symbol the layout defines as that TOC base; ``local_entry`` and
``after_stub_call`` give ppc64le's local entry points and the ``nop`` after a
call through a stub that becomes the TOC restore.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Optional

from ..error import FieldOverflow  # aarch64.py and layout.py import it from here


def host_arch() -> str:
    """The loader's name for this machine's architecture (``x86_64``, ``aarch64``)."""
    return arch_name(os.uname().machine)


def read_cpu_flags(path: str = "/proc/cpuinfo") -> Optional[FrozenSet[str]]:
    """The first ``flags`` (x86) or ``Features`` (arm) line of ``path``, as a set; None where it cannot be read.
    The one reader of the CPU's features: compile targets (compiler/targets.py) and the values kernels read
    (rt_helpers.py) both ask it."""
    try:
        with open(path) as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                if sep and key.strip().lower() in ("flags", "features"):
                    return frozenset(value.split())
    except OSError:
        return None
    return frozenset()


def arch_name(machine: str) -> str:
    """The loader's name for a machine or triple architecture as the OS or a compiler spells it."""
    machine = machine.lower()
    return {"amd64": "x86_64", "arm64": "aarch64", "ppc64el": "ppc64le", "powerpc64le": "ppc64le"}.get(machine, machine)


#: How a relocation reaches its symbol.
DIRECT = "direct"  # S is the symbol's address
GOT = "got"  # S is the address of a GOT slot holding the symbol's address
CALL = "call"  # S is the symbol, or a call stub when the symbol is external

#: What P (the last argument of apply) is.
PLACE = "place"  # the field's own address
TOC_BASE = "toc"  # the TOC base (ppc64le TOC16/GOT16: S + A - .TOC.)
HI20_LABEL = "hi20"  # riscv64 PCREL_LO12: S, A and P of the HI20 field at the symbol's address

#: apply(image, offset, S, A, P) patches the field; raises FieldOverflow.
ApplyFn = Callable[[bytearray, int, int, int, int], None]


@dataclass(frozen=True)
class RelocSpec:
    name: str
    width: int  # bytes patched, for the bounds check at parse time
    via: str  # DIRECT, GOT or CALL
    apply: ApplyFn
    anchor: str = PLACE
    is_hi20: bool = False  # a riscv64 PC-relative HI20 that PCREL_LO12 fields may name
    # The field's bits depend on S and P only through S - P or their offsets within a 4 KiB page,
    # so against an image address it is the same at every (page-aligned) base: the layout patches
    # it once, and a load only copies the template. False is always correct, just slower.
    base_free: bool = False


@dataclass(frozen=True)
class Arch:
    name: str
    machine: int
    relocs: Dict[int, RelocSpec]
    refused: Dict[int, str]  # type -> name, refused with a reason
    refuse_reason: Dict[int, str]
    stub_size: int
    write_stub: Callable[[bytearray, int, int], None]  # (image, offset, target address)
    # x86_64 applies the addend to the GOT/stub address (PC bias); aarch64 to the target.
    addend_on_target: bool
    none_types: frozenset = field(default_factory=frozenset)
    page_size: int = 4096  # smallest page of the target's usual kernels (segment alignment)
    toc_symbol: Optional[str] = None  # undefined name the layout resolves to its TOC base
    local_entry: Optional[Callable[[int], int]] = None  # st_other -> offset a direct call adds
    # (template, field offset, where): fix the code around a call that goes through a stub
    after_stub_call: Optional[Callable[[bytearray, int, str], None]] = None

    def type_name(self, rtype: int) -> str:
        spec = self.relocs.get(rtype)
        if spec is not None:
            return spec.name
        return self.refused.get(rtype, "type %d" % rtype)


def check_signed(value: int, bits: int, what: str) -> int:
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise FieldOverflow(value, "%s does not fit in %d signed bits" % (what, bits))
    return value


def check_aligned(value: int, alignment: int, what: str) -> int:
    if value % alignment:
        raise FieldOverflow(value, "%s 0x%x is not a multiple of %d" % (what, value & ((1 << 64) - 1), alignment))
    return value


def check_unsigned_or_signed(value: int, bits: int, what: str) -> int:
    if not -(1 << (bits - 1)) <= value < (1 << bits):
        raise FieldOverflow(value, "%s does not fit in %d bits" % (what, bits))
    return value & ((1 << bits) - 1)
