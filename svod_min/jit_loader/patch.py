"""One relocation field to patch: :class:`Patch`, and how a field is written and named in messages.

The layout (:mod:`.layout`) makes these; most fields never become a ``Patch``: a
PC-relative field against a placed symbol is written into the template at once.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from ..error import ElfFormatError, RelocationRangeError
from .arch import GOT, HI20_LABEL, TOC_BASE, FieldOverflow, RelocSpec

# A reference to an address: ("img", offset) | ("ext", name) | ("abs", value).
Ref = Tuple[str, object]

#: Where a relocation sits, for messages: (its section's name, offset in it); formatted only on error.
At = Tuple[str, Optional[int]]


class Patch:
    """A field patched per load (it depends on the base or an external), or one that needs the
    layout's GOT, stubs, TOC or HI20 pairing first. Plain slots: a load may make dozens."""

    __slots__ = ("offset", "spec", "ref", "addend", "at", "symbol", "anchor")

    def __init__(
        self, offset: int, spec: RelocSpec, ref: Ref, addend: int, at: At, symbol: str, anchor: Optional[int] = None
    ) -> None:
        self.offset = offset  # image offset of the field (P - base)
        self.spec = spec
        self.ref = ref  # what S is
        self.addend = addend
        self.at = at
        self.symbol = symbol
        self.anchor = anchor  # image offset P stands for, when not the field's own

    @property
    def where(self) -> str:
        """``section+0xoff`` of the relocation, for messages."""
        return place_text(*self.at)

    def apply(self, image: bytearray, s: int, base: int) -> None:
        """Patch the field for symbol address ``s`` and load address ``base``; refuses to truncate."""
        p = base + (self.offset if self.anchor is None else self.anchor)
        apply_field(image, self.spec, self.offset, s, self.addend, p, self.symbol, self.at)


def apply_field(
    image: bytearray, spec: RelocSpec, offset: int, s: int, addend: int, p: int, symbol: str, at: At
) -> None:
    """Write the field at image ``offset`` for S, A and P; a value that does not fit names the relocation."""
    try:
        spec.apply(image, offset, s, addend, p)
    except FieldOverflow as exc:
        raise RelocationRangeError(
            "%s against %r at %s: %s (value 0x%x); refusing to truncate"
            % (spec.name, symbol or "section", place_text(*at), exc.detail, exc.value & 0xFFFFFFFFFFFFFFFF)
        ) from None


def place_text(section: str, offset: Optional[int]) -> str:
    return section if offset is None else "%s+0x%x" % (section, offset)


GOT_OR_STUB: At = ("GOT/stub entry", None)  # the place named when a GOT slot or stub refers to a bad symbol


def toc_only(spec: RelocSpec, sym_index: int) -> bool:
    return sym_index == 0 and spec.anchor == TOC_BASE and spec.via != GOT


def pair_with_hi20(patches: List[Patch]) -> List[Patch]:
    """Give each riscv64 PCREL_LO12 the target, addend and place of the HI20 at its label."""
    his = {p.offset: p for p in patches if p.spec.is_hi20}
    for p in patches:
        if p.spec.anchor != HI20_LABEL:
            continue
        kind, label = p.ref
        hi = his.get(label) if kind == "img" else None  # type: ignore[arg-type]
        if hi is None:
            raise ElfFormatError(
                "%s at %s names %s, which is not the label of a PCREL_HI20 or GOT_HI20 instruction"
                % (p.spec.name, p.where, p.symbol or "a section offset")
            )
        if p.addend:
            raise ElfFormatError(
                "%s at %s has a non-zero addend %d; its HI20 carries the addend" % (p.spec.name, p.where, p.addend)
            )
        p.ref, p.addend, p.anchor = hi.ref, hi.addend, hi.offset
    return patches
