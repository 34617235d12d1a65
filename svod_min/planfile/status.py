"""Run-time checks that kernels report: the status buffer a plan's checking kernels write, read after each run.

A kernel that checks what it reads from data (an ONNX Gather's indices, and every later op that takes indices
from a tensor) does not trust it: on a bad value it writes nothing out of bounds, skips that piece of work and
records what it found in its own slot of the plan's status buffer. The plan file declares the buffer and what
each record means (``"checks"``, docs/plan-format.md); after every run the plan compares the buffer with zeros
(one copy of a few hundred bytes) and, when a kernel recorded something, raises
:class:`IndexOutOfRangeError` naming the node, the value, its position and the bound, then clears the buffer so
the next run starts clean. The Python path and the native runner run the same kernels on the same buffers, so
both report alike; the check is not a failure of the plan (it is not poisoned: the next call may bring good data).

Layout: every core_id call of a checking op owns one slot of :data:`SLOT_WORDS` int64 words (no two calls share
a word, so kernels need no atomics, which some targets' compilers would call out of line), laid out as
``[flag, value, position, lo, hi, 0, 0, 0]``: flag 1 once the call met a bad value; the value; its flat position
in the index tensor (the call keeps the lowest it met); the range ``[lo, hi]`` it broke. Of all the slots the one
with the lowest position is reported, so the report does not depend on how the calls were scheduled.

A record's ``kind`` says what its kernel checks: ``"index"`` (the default, so plans written before the field keep
their meaning) as above, or ``"pinned"``: a graph input whose value the bundle was built for (``build --pin``,
docs/onnx.md "Inputs that decide shapes") compared element by element with that value, one slot of
``[flag, fed, position, pinned, 0, 0, 0, 0]`` holding both elements' bits (as int64) at the first position that
differs; it raises :class:`PinnedInputError`. Pinned records are reported before index records: a fed value the
bundle was not built for is the cause, whatever else a kernel found.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

from ..dtypes import dtype as dtype_of
from ..error import IndexOutOfRangeError, PinnedInputError, SvodError
from .schema import as_int, as_list, as_object, as_text, known_keys, need

#: int64 words per core_id call: one 64-byte cache line, so calls on different cores never share a line.
SLOT_WORDS = 8
#: What a record checks: indices read from data (the default), or a pinned input's value.
INDEX, PINNED = "index", "pinned"


@dataclass
class CheckRecord:
    """One checking op: where its slots start (in words), how many, and how to name what it checks."""

    offset: int
    slots: int
    node: str  # "node 3 (Gather, 'g')"
    what: str  # "indices 'i'"
    shape: Tuple[int, ...]  # the index tensor's shape, to give a flat position as an index
    why: str  # where the bound comes from: "axis 1 of 'x' has 4 elements"; pinned: "--pin axes=0,2"
    kind: str = INDEX
    dtype: str = ""  # pinned: the input's dtype, to read the elements' bits back


class StatusCheck:
    """The after-run check of one plan: read the status buffer, raise for the first bad value, clear."""

    def __init__(self, buffer: Any, records: Sequence[CheckRecord]) -> None:
        self.buffer = buffer
        self.records = list(records)
        self.zeros = bytes(int(buffer.nbytes))

    def __call__(self) -> None:
        raw = self.buffer.copyout()
        if raw == self.zeros:
            return
        self.buffer.copyin(self.zeros)  # cleared before raising: the next run starts clean
        raise self.error(raw)

    def describe(self, raw: bytes) -> str:
        return str(self.error(raw))

    def error(self, raw: bytes) -> SvodError:
        """The exception for a status buffer that is not all zeros: the first record in plan order that reported
        (pinned inputs first), at its lowest position."""
        words = struct.unpack("<%dq" % (len(raw) // 8), raw)
        found: List[Tuple[int, int, CheckRecord, Sequence[int]]] = []
        for order, rec in enumerate(self.records):
            slots = [
                words[at : at + SLOT_WORDS] for at in range(rec.offset, rec.offset + rec.slots * SLOT_WORDS, SLOT_WORDS)
            ]
            hits = [s for s in slots if s[0]]
            if hits:
                first = min(hits, key=lambda s: s[2])
                found.append((order if rec.kind == PINNED else order + len(self.records), first[2], rec, first))
        if not found:  # a word outside every record: a kernel broke the layout
            return IndexOutOfRangeError(
                "a kernel wrote its run-time check's status outside its slots; the outputs are not valid"
            )
        _, _, rec, slot = min(found, key=lambda f: f[0])  # the first checking op in plan order
        if rec.kind == PINNED:
            return PinnedInputError(
                "input %r is fed %s at position %s, where the bundle pins %s: it was built with %s, and the shapes it "
                "computes follow from those values; rebuild it with --pin %s=... for other values (this run's "
                "outputs are not returned)"
                % (
                    rec.what,
                    element(slot[1], rec.dtype),
                    list(unravel(slot[2], rec.shape)),
                    element(slot[3], rec.dtype),
                    rec.why,
                    rec.what,
                )
            )
        return IndexOutOfRangeError(
            "%s: index %d at position %s of %s is out of range [%d, %d] (%s); nothing was read or written "
            % (
                rec.node,
                slot[1],
                list(unravel(slot[2], rec.shape)),
                rec.what,
                slot[3],
                slot[4],
                rec.why,
            )
            + "outside a buffer, and this run's outputs are not valid"
        )

    def pinned(self) -> List[CheckRecord]:
        """The records of pinned inputs (what ``info`` lists)."""
        return [r for r in self.records if r.kind == PINNED]


def pinned_inputs(plan: Any) -> Dict[str, str]:
    """Input name -> its pin as built (``--pin axes=0,2``) from a plan document's pinned records; what ``info``
    shows. Lenient: a document not checked yet may hold anything, and what is not a pinned record is skipped."""
    checks = plan.get("checks") if isinstance(plan, dict) else None
    records = checks.get("records") if isinstance(checks, dict) else None
    out: Dict[str, str] = {}
    for r in records if isinstance(records, list) else ():
        if isinstance(r, dict) and r.get("kind") == PINNED and isinstance(r.get("what"), str):
            out[r["what"]] = str(r.get("why", ""))
    return out


def element(bits: int, dtype: str) -> str:
    """One element of ``dtype`` from its bits as a checking kernel stores them (widened to an int64 word)."""
    d = dtype_of(dtype)
    raw = struct.pack("<q", bits)[: d.itemsize]
    if d.name == "bfloat16":  # its bits are a float32's top half
        return repr(struct.unpack("<f", b"\0\0" + raw)[0])
    value = struct.unpack("<" + d.fmt, raw)[0]
    return repr(value) if d.is_float else str(int(value))


def unravel(flat: int, shape: Sequence[int]) -> Tuple[int, ...]:
    """A flat C-order position as an index into ``shape``."""
    out = []
    for dim in reversed(list(shape)):
        out.append(flat % dim if dim else 0)
        flat = flat // dim if dim else 0
    return tuple(reversed(out))


def read_checks(value: Any, buffers: Dict[str, Any], path: str = "checks") -> StatusCheck:
    """The document's ``checks`` object: ``{"buffer": NAME, "records": [{"offset", "slots", "node", "what",
    "shape", "why", "kind", "dtype"}...]}``, each record's slots inside the int64 buffer (``kind``: "index" when
    absent; ``dtype``: a pinned record's input dtype)."""
    spec = as_object(value, path)
    known_keys(spec, {"buffer", "records"}, path)
    name = as_text(spec.get("buffer"), path + ".buffer")
    need(name in buffers, path + ".buffer", "unknown buffer %r" % name)
    buf = buffers[name]
    dtype = getattr(buf.dtype, "name", str(buf.dtype))
    need(dtype == "int64", path + ".buffer", "the status buffer must be int64, not %s" % dtype)
    words = int(buf.nbytes) // 8
    records = []
    for i, r in enumerate(as_list(spec.get("records"), path + ".records")):
        where = "%s.records[%d]" % (path, i)
        r = as_object(r, where)
        known_keys(r, {"offset", "slots", "node", "what", "shape", "why", "kind", "dtype"}, where)
        kind = as_text(r.get("kind", INDEX), where + ".kind")
        need(kind in (INDEX, PINNED), where + ".kind", "expected %r or %r, got %r" % (INDEX, PINNED, kind))
        dtype = as_text(r.get("dtype", ""), where + ".dtype") if kind == PINNED else ""
        if kind == PINNED:
            try:
                dtype_of(dtype)
            except SvodError:
                need(False, where + ".dtype", "unknown dtype %r" % dtype)
        offset = as_int(r.get("offset"), where + ".offset", 0)
        slots = as_int(r.get("slots"), where + ".slots", 1)
        need(offset + slots * SLOT_WORDS <= words, where, "its slots end past the status buffer's %d words" % words)
        shape = tuple(
            as_int(d, "%s.shape[%d]" % (where, j), 0) for j, d in enumerate(as_list(r.get("shape"), where + ".shape"))
        )
        records.append(
            CheckRecord(
                offset,
                slots,
                as_text(r.get("node"), where + ".node"),
                as_text(r.get("what"), where + ".what"),
                shape,
                as_text(r.get("why"), where + ".why"),
                kind,
                dtype,
            )
        )
    return StatusCheck(buf, records)


__all__ = [
    "INDEX",
    "PINNED",
    "SLOT_WORDS",
    "CheckRecord",
    "StatusCheck",
    "element",
    "pinned_inputs",
    "read_checks",
    "unravel",
]
