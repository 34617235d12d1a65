"""RNN, LSTM and GRU as one generated C kernel per node that loops over time, one call per (direction, batch row): the C
is rendered from ``templates/rnn.c.j2``."""

from __future__ import annotations

from typing import Any, Dict, List

from ...planfile.status import SLOT_WORDS
from ..ctext import C_TYPES
from .ckernel import CKernel, make_kernel, render


def _present(op: str, k: Dict[str, Any]) -> List[bool]:
    """Which of the kernel's thirteen buffers (y, yh, yc, scratch, x, w, r, bias, lens, h0, c0, p, status) the node
    has (status: where the kernel reports a bad length from lens)."""
    return [
        k["y"],
        True,
        op == "LSTM",
        True,
        True,
        True,
        True,
        k["bias"],
        k["lens"],
        k["h0"],
        k["c0"],
        k["peephole"],
    ] + [k["lens"]]


def _extents(k: Dict[str, Any]) -> List[int]:
    """The element count of each of the thirteen buffers."""
    T, B, D, I, H, G = k["T"], k["B"], k["D"], k["I"], k["H"], k["G"]
    state = D * B * H
    return [
        T * D * B * H,
        state,
        state,
        D * B * (G + H),
        T * B * I,
        D * G * I,
        D * G * H,
        D * 2 * G,
        B,
        state,
        state,
        D * 3 * H,
        D * B * SLOT_WORDS,
    ]


#: -O3: the gate rows' lane loops (templates/rnn.c.j2) become vector code at every compiler's -O3.
OPT_FLAGS = ("-O3",)


def rnn_kernel(op: str, k: Dict[str, Any], a: Dict[str, Any], dtype: str = "float32") -> CKernel:
    """The kernel of RNN, LSTM or GRU ``op`` with sizes and present inputs ``k`` and the node's attributes ``a``."""
    present = _present(op, k)
    body = render(
        "rnn.c.j2",
        T=C_TYPES[dtype],
        lstm=op == "LSTM",
        vanilla=op == "RNN",
        steps=k["T"],
        batch=k["B"],
        dirs=k["D"],
        n_in=k["I"],
        hidden=k["H"],
        n_gates=k["G"],
        batch_major=k["layout"] != 0,
        reverse=bool(k["reverse"]),
        has_y=bool(k["y"]),
        has_bias=bool(k["bias"]),
        has_lens=bool(k["lens"]),
        has_h0=bool(k["h0"]),
        has_c0=bool(k["c0"]),
        peephole=bool(k["peephole"]),
        clip=float(a["clip"]) if "clip" in a else None,
        input_forget=bool(a.get("input_forget", 0)),
        before_reset=bool(a.get("linear_before_reset", 0)),
        words=SLOT_WORDS,
    )
    extents = [e for e, keep in zip(_extents(k), present) if keep]
    return make_kernel(op.lower(), body, extents, k["D"] * k["B"], OPT_FLAGS)
