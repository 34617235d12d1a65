"""What the generic relocator needs to know about one architecture.

Each architecture module builds one :class:`Arch`: a table from relocation
type number to :class:`RelocSpec` (field width, how the symbol is reached,
and a small function that encodes the value), the types it refuses by name,
and how to write a call stub. :func:`host_arch` names the machine we run on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Dict

from ..error import FieldOverflow  # aarch64.py and layout.py import it from here


def host_arch() -> str:
    """The loader's name for this machine's architecture (``x86_64``, ``aarch64``)."""
    machine = os.uname().machine.lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


#: How a relocation reaches its symbol.
DIRECT = "direct"  # S is the symbol's address
GOT = "got"  # S is the address of a GOT slot holding the symbol's address
CALL = "call"  # S is the symbol, or a call stub when the symbol is external

#: apply(image, offset, S, A, P) patches the field; raises FieldOverflow.
ApplyFn = Callable[[bytearray, int, int, int, int], None]


@dataclass(frozen=True)
class RelocSpec:
    name: str
    width: int  # bytes patched, for the bounds check at parse time
    via: str  # DIRECT, GOT or CALL
    apply: ApplyFn


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

    def type_name(self, rtype: int) -> str:
        spec = self.relocs.get(rtype)
        if spec is not None:
            return spec.name
        return self.refused.get(rtype, "type %d" % rtype)


def check_signed(value: int, bits: int, what: str) -> int:
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise FieldOverflow(value, "%s does not fit in %d signed bits" % (what, bits))
    return value


def check_unsigned_or_signed(value: int, bits: int, what: str) -> int:
    if not -(1 << (bits - 1)) <= value < (1 << bits):
        raise FieldOverflow(value, "%s does not fit in %d bits" % (what, bits))
    return value & ((1 << bits) - 1)
