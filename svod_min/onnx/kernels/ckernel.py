"""The generated kernel: :class:`CKernel`, its name, how its work is shared out between core_id calls, C literals,
and :func:`render`, which renders a kernel family's Jinja template (``templates/*.c.j2``) from a dict of constants.

Each kernel is one C function in svod's calling convention (``void k(float *out, const T *in..., int core_id)``,
run ``chunks`` times with ``core_id = 0..chunks-1``, each call doing its own contiguous share). Shapes, strides
and attributes are compiled in as constants: the bundle compiles every kernel for every target at build time,
and constant trip counts let the compiler unroll and vectorise. No header is included (a cross target may lack
the C library's headers); the few libm functions used are declared here and resolved by the loader.

The C text comes from templates only: a family's Python computes the constants (sizes, strides, chunking, the
C expressions of :mod:`svod_min.onnx.activations`), its template lays out the C. A template names the entry
``KNAME``: the entry is named after the hash of the rendered text, so :func:`make_kernel` substitutes it after
rendering. Shared pieces (the core_id item range, the NaN-propagating max and min) are macros of
``templates/prelude.c.j2``. jinja2 is needed at build time only, like onnx: a bundle carries the rendered C's
objects.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import os
from dataclasses import dataclass
from typing import Any, Iterator, Sequence, Tuple

from ..ctext import flt
from .libmath import library_math

PROTOTYPES = (
    "float expf(float); float logf(float); float tanhf(float); float erff(float); "
    "float powf(float, float); float floorf(float); float ceilf(float); float nearbyintf(float);\n"
)


#: Elements one core_id call handles at least: smaller tensors run on one thread.
GRAIN = 1 << 15
#: At most this many core_id calls per kernel.
MAX_CHUNKS = 64
#: The kernel families' templates.
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
#: The largest batch of a ranged-batch build whose kernels are rendered now (0: a fixed build). Each kernel then takes
#: the batch as an int argument before core_id (``int svod_batch, int core_id``), so that the plan can size its
#: launch by the run's batch, and shares its items in a multiple of that many calls, so that a call covers one
#: batch row's items (or a part of them) rather than straddling rows.
_RANGED = contextvars.ContextVar("svod_onnx_ranged_batch", default=0)


@contextlib.contextmanager
def ranged_batch(rows: int) -> Iterator[None]:
    """Render the kernels of a ranged-batch build of at most ``rows`` rows (their entries take ``int svod_batch``)
    inside this block."""
    token = _RANGED.set(int(rows))
    try:
        yield
    finally:
        _RANGED.reset(token)


def takes_batch() -> bool:
    """Whether kernels rendered now take the batch argument."""
    return _RANGED.get() > 0


@dataclass(frozen=True)
class CKernel:
    """A generated kernel: entry name, C text, pointer count, element counts each buffer must hold, calls, and
    compiler flags it adds to the target's (after them, so they win). ``rows_first``: its core_id calls share the
    items of its first buffer in C order, so the first k calls cover at least the first k/chunks of that buffer (a
    ranged batch runs only the calls that cover the bound rows)."""

    name: str
    source: str
    extents: Tuple[int, ...]
    chunks: int
    flags: Tuple[str, ...] = ()
    flops: int = 0
    rows_first: bool = False

    @property
    def buffers(self) -> int:
        return len(self.extents)


def make_kernel(
    tag: str,
    body: str,
    extents: Sequence[int],
    chunks: int,
    flags: Sequence[str] = (),
    flops: int = 0,
    rows_first: bool = False,
) -> CKernel:
    """A CKernel named after the hash of its text and flags (equal ones share one compiled kernel); the library math
    functions the body calls (:mod:`.libmath`) come before it. ``rows_first``: see :class:`CKernel`."""
    text = library_math(body) + body
    digest = hashlib.sha256("\0".join([text, *flags]).encode("utf-8")).hexdigest()[:12]
    name = "svod_onnx_%s_%s" % (tag, digest)
    sizes = tuple(max(1, int(e)) for e in extents)
    return CKernel(
        name, PROTOTYPES + text.replace("KNAME", name), sizes, max(1, int(chunks)), tuple(flags), int(flops), rows_first
    )


@functools.lru_cache(maxsize=None)
def _environment() -> Any:
    """The Jinja environment of the kernel templates: strict (an undefined name raises), fixed whitespace rules, so a
    template and its constants always render to the same bytes (the kernel's name hashes them)."""
    import jinja2  # build time only: the onnx extra brings it

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["flt"] = flt
    return env


def render(template: str, **constants: Any) -> str:
    """The C text of ``template`` (a file of ``templates/``) with ``constants`` (and ``batch_param``, the entry's
    batch argument in a ranged build, else nothing)."""
    batch_param = "int svod_batch, " if takes_batch() else ""
    return _environment().get_template(template).render(batch_param=batch_param, **constants)


def chunks_for(items: int, work_per_item: int, grain: int = GRAIN) -> int:
    """How many core_id calls share ``items`` independent items of ``work_per_item`` elements each (each call doing
    ``grain`` of that work at least); in a ranged-batch build a multiple of its largest batch where the items are
    (so that a run of fewer rows launches only the calls of its rows)."""
    chunks = max(1, min(items, MAX_CHUNKS, (items * max(1, work_per_item)) // grain))
    rows = _RANGED.get()
    if rows > 1 and items % rows == 0:
        chunks = rows * _calls_per_row(items // rows, -(-chunks // rows))
    return chunks


def _calls_per_row(row_items: int, wanted: int) -> int:
    """The calls one batch row's ``row_items`` items are shared by: the divisor of ``row_items`` nearest ``wanted``
    within a factor of two (each call then ends on a row's last item, so a run of fewer rows does no item of the
    next), else ``wanted`` (a call may straddle two rows: a run does a part of the next row too)."""
    near = [d for d in range(max(1, wanted // 2), min(row_items, 2 * wanted) + 1) if row_items % d == 0]
    return min(near, key=lambda d: (abs(d - wanted), -d)) if near else min(wanted, row_items)


def share(items: int, work_per_item: int, grain: int = GRAIN) -> Tuple[int, int]:
    """(calls, items per call): :func:`chunks_for`'s calls, and the contiguous share of ``items`` each one takes."""
    chunks = chunks_for(items, work_per_item, grain)
    return chunks, -(-items // chunks)
