"""onnxruntime's attention contrib ops (``com.microsoft``) rewritten into default-domain ONNX ops.

Exported transformers optimised by onnxruntime's tools carry these in place of the MatMul/Softmax chains they fused.
Each becomes the chain again, with onnxruntime's semantics as its contrib op documentation and its CPU kernels give
them (the tests hold each rewrite to onnxruntime's own run of the contrib op):

- ``MultiHeadAttention``: query (B, S, D), key (B, L, D), value (B, L, Dv), optional packed bias (D + D + Dv) added
  to them, heads split as (B, N, S, D/N); ``softmax(Q K^T * scale + attention_bias + mask) V`` with ``scale``
  1/sqrt(head size) unless given, and the heads merged back to (B, S, Dv). ``key_padding_mask`` (B, L): a 0 adds
  ``mask_filter_value`` (-10000) to that key's scores.
- ``Attention``: ``input @ weights + bias`` cut into Q, K, V (equal thirds, or ``qkv_hidden_sizes``), then as
  above; ``mask_index`` as a raw mask of (B, L) or (B, S, L) (0: masked); ``unidirectional`` masks each query's
  later keys.
- ``RotaryEmbedding``: input (B, S, N*H) or (B, N, S, H); cos/sin caches (max position, R/2) gathered at
  ``position_ids`` (B, S), or at offset + 0..S-1 where ``position_ids`` is one offset; the first R = 2 x the
  caches' width (``rotary_embedding_dim``) of each head rotated in halves (or in adjacent pairs where
  ``interleaved``), the rest passed through. ``scale`` is not applied: onnxruntime's CPU kernel ignores it.

Refused by name: past key/value caches and present outputs, packed QKV, a key in (B, N, L, H), ``do_rotary``,
``unidirectional`` MultiHeadAttention (onnxruntime's CPU kernel aligns it in a way it does not document for S != L),
a mask_index of sequence lengths (1-D) or 4-D, and opsets below 11 (Range, Slice with inputs).
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

from onnx import TensorProto

from .contrib_emit import Emit

FILTER = -10000.0  # onnxruntime's default mask_filter_value


def _need_opset(e: Emit) -> None:
    if e.opset < 11:
        raise e.refuse("needs opset 11 or later (Range, Slice with inputs)")


def _unread(e: Emit, outputs: Dict[int, str], readers: Dict[str, int]) -> None:
    for i, what in outputs.items():
        name = e.out(i)
        if name and readers.get(name, 0):
            raise e.refuse("output %d (%s, %r) is read; only the attention output is supported" % (i, what, name))


def _absent(e: Emit, inputs: Dict[int, str]) -> None:
    for i, what in inputs.items():
        if e.inp(i, required=False):
            raise e.refuse("input %d (%s) is not supported" % (i, what))


def _heads(e: Emit, x: str, n: int) -> str:
    """(B, S, N*H) -> (B, N, S, H)."""
    return e.op("Transpose", [e.op("Reshape", [x, e.ints([0, 0, n, -1])])], perm=[0, 2, 1, 3])


def _inverse_sqrt_head(e: Emit, qh: str) -> str:
    """1 / sqrt(head size) in q's dtype, from q's shape."""
    size = e.op("Cast", [e.dim(qh, -1)], to=e.types.get(e.inp(0), TensorProto.FLOAT))
    return e.op("Reciprocal", [e.op("Sqrt", [size])])


def _filled(e: Emit, masked: str, like: str, fill: float) -> str:
    """``fill`` where ``masked`` (bool) holds, else 0, in ``like``'s dtype."""
    return e.op("Where", [masked, e.const(fill, like), e.const(0.0, like)])


def _causal(e: Emit, scores: str, fill: float) -> str:
    """(S, L): ``fill`` where key j comes after query i (j > i + L - S), else 0."""
    zero, one = e.ints(0), e.ints(1)
    s, l = e.dim(scores, -2), e.dim(scores, -1)
    scalar_s, scalar_l = e.squeeze(s, [0]), e.squeeze(l, [0])
    rows = e.unsqueeze(e.op("Range", [zero, scalar_s, one]), [1])
    cols = e.unsqueeze(e.op("Range", [zero, scalar_l, one]), [0])
    later = e.op("Greater", [cols, e.op("Add", [rows, e.op("Sub", [scalar_l, scalar_s])])])
    return _filled(e, later, e.inp(0), fill)


def _key_mask(e: Emit, mask: str, fill: float) -> str:
    """A raw mask (B, L) or (B, S, L), 0 where masked, as scores to add, (B, 1, 1, L) or (B, 1, S, L)."""
    rank = e.ranks.get(mask)
    if rank not in (2, 3):
        raise e.refuse("a mask of rank %s is not supported (only a raw mask of (B, L) or (B, S, L))" % rank)
    masked = e.op("Equal", [mask, e.const(0, mask)])
    return e.unsqueeze(_filled(e, masked, e.inp(0), fill), [1, 2] if rank == 2 else [1])


def _attend(
    e: Emit, q: str, k: str, v: str, heads: int, added: List[str], causal: bool, fill: float, scale: Optional[float]
) -> None:
    """softmax(Q K^T * scale + added) V over ``heads`` heads, merged into the node's output 0."""
    qh, kh, vh = _heads(e, q, heads), _heads(e, k, heads), _heads(e, v, heads)
    scores = e.op("MatMul", [qh, e.op("Transpose", [kh], perm=[0, 1, 3, 2])])
    factor = e.const(scale, e.inp(0)) if scale is not None else _inverse_sqrt_head(e, qh)
    scores = e.op("Mul", [scores, factor])
    for extra in added:
        scores = e.op("Add", [scores, extra])
    if causal:
        scores = e.op("Add", [scores, _causal(e, scores, fill)])
    context = e.op("MatMul", [e.op("Softmax", [scores], axis=-1), vh])
    merged = e.op("Transpose", [context], perm=[0, 2, 1, 3])
    e.op("Reshape", [merged, e.ints([0, 0, -1])], e.out(0))


def _heads_attr(e: Emit) -> int:
    heads = int(e.attrs().get("num_heads", 0))
    if heads <= 0:
        raise e.refuse("num_heads must be positive (got %d)" % heads)
    return heads


def _scale(e: Emit) -> Optional[float]:
    scale = float(e.attrs().get("scale", 0.0))
    return scale if scale != 0.0 else None


def rw_multi_head_attention(e: Emit, readers: Dict[str, int]) -> None:
    _need_opset(e)
    _unread(e, {1: "present_key", 2: "present_value", 3: "qk"}, readers)
    _absent(e, {6: "past_key", 7: "past_value", 8: "past_sequence_length", 9: "cache_indirection"})
    a = e.attrs()
    if int(a.get("unidirectional", 0)):
        raise e.refuse("unidirectional=1 is not supported")
    q, k, v = e.inp(0), e.inp(1, required=False), e.inp(2, required=False)
    if not k or not v:
        raise e.refuse("packed QKV (no key or value input) is not supported")
    for name in (q, k, v):
        if e.ranks.get(name) != 3:
            raise e.refuse("%r has rank %s; only 3-D query, key and value are supported" % (name, e.ranks.get(name)))
    bias = e.inp(3, required=False)
    if bias:
        dq, dk = e.dim(q, -1), e.dim(k, -1)
        end_k = e.op("Add", [dq, dk])
        q = e.op("Add", [q, e.slice_last(bias, e.ints([0]), dq)])
        k = e.op("Add", [k, e.slice_last(bias, dq, end_k)])
        v = e.op("Add", [v, e.slice_last(bias, end_k, e.ints([2**62]))])
    fill = float(a.get("mask_filter_value", FILTER))
    added = []
    padding = e.inp(4, required=False)
    if padding:
        if e.ranks.get(padding) != 2:
            raise e.refuse("key_padding_mask of rank %s is not supported (only (B, L))" % e.ranks.get(padding))
        added.append(_key_mask(e, padding, fill))
    if e.inp(5, required=False):
        added.append(e.inp(5))
    _attend(e, q, k, v, _heads_attr(e), added, False, fill, _scale(e))


def rw_attention(e: Emit, readers: Dict[str, int]) -> None:
    _need_opset(e)
    _unread(e, {1: "present"}, readers)
    _absent(e, {4: "past", 6: "past_sequence_length"})
    a = e.attrs()
    if int(a.get("do_rotary", 0)):
        raise e.refuse("do_rotary=1 is not supported")
    projected = e.op("MatMul", [e.inp(0), e.inp(1)])
    bias = e.inp(2, required=False)
    if bias:
        projected = e.op("Add", [projected, bias])
    sizes = [int(s) for s in a.get("qkv_hidden_sizes", [])]
    if sizes:
        if len(sizes) != 3 or min(sizes) <= 0 or sizes[0] != sizes[1]:
            raise e.refuse("qkv_hidden_sizes %r: expected three positive sizes, Q's equal to K's" % (sizes,))
        bounds = [0, sizes[0], sizes[0] + sizes[1], sum(sizes)]
        q, k, v = (e.slice_last(projected, e.ints([lo]), e.ints([hi])) for lo, hi in zip(bounds, bounds[1:]))
    else:
        q, k, v = e.split(projected, -1, 3)
    fill = float(a.get("mask_filter_value", FILTER))
    added = []
    mask = e.inp(3, required=False)
    if mask:
        added.append(_key_mask(e, mask, fill))
    if e.inp(5, required=False):
        added.append(e.inp(5))
    _attend(e, q, k, v, _heads_attr(e), added, bool(int(a.get("unidirectional", 0))), fill, _scale(e))


def _positions(e: Emit, x: str, rank: int) -> str:
    """position_ids as (B, S), or (S,) from one offset: offset + 0..S-1."""
    positions = e.inp(1)
    if e.ranks.get(positions) == 2:
        return positions
    if e.ranks.get(positions) != 1:
        raise e.refuse("position_ids of rank %s is not supported (only (B, S) or one offset)" % e.ranks.get(positions))
    seq = e.dim(x, 1 if rank == 3 else 2)
    seq = e.squeeze(seq, [0])
    steps = e.op("Range", [e.ints(0), seq, e.ints(1)])
    return e.op("Add", [steps, e.op("Cast", [positions], to=TensorProto.INT64)])


def _rotate(e: Emit, x: str, cos: str, sin: str, interleaved: bool) -> str:
    """The rotation of ``x``'s last axis (its rotated part only) by the gathered cos and sin."""
    if interleaved:
        pairs = e.op("Reshape", [x, e.ints([0, 0, 0, -1, 2])])
        first = e.op("Gather", [pairs, e.ints(0)], axis=-1)
        second = e.op("Gather", [pairs, e.ints(1)], axis=-1)
    else:
        first, second = e.split(x, -1, 2)
    out1 = e.op("Sub", [e.op("Mul", [first, cos]), e.op("Mul", [second, sin])])
    out2 = e.op("Add", [e.op("Mul", [second, cos]), e.op("Mul", [first, sin])])
    if not interleaved:
        return e.op("Concat", [out1, out2], axis=-1)
    stacked = e.op("Concat", [e.unsqueeze(out1, [-1]), e.unsqueeze(out2, [-1])], axis=-1)
    return e.op("Reshape", [stacked, e.ints([0, 0, 0, -1])])


def rw_rotary_embedding(e: Emit) -> None:
    _need_opset(e)
    a = e.attrs()
    if int(a.get("is_packed_batching", 0)):
        raise e.refuse("is_packed_batching=1 is not supported")
    x, cos_cache, sin_cache = e.inp(0), e.inp(2), e.inp(3)
    rank = e.ranks.get(x)
    if rank not in (3, 4):
        raise e.refuse("input of rank %s is not supported (only (B, S, N*H) or (B, N, S, H))" % rank)
    rotary = int(a.get("rotary_embedding_dim", 0))
    heads = int(a.get("num_heads", 0))
    x4 = x
    if rank == 3:
        if heads > 0:
            x4 = e.op("Reshape", [x, e.ints([0, 0, heads, -1])])
        else:
            cache = e.initializer_dims(cos_cache)
            if rotary or cache is None or len(cache) != 2:
                raise e.refuse("a 3-D input needs num_heads (or a constant cos_cache spanning the whole head)")
            x4 = e.op("Reshape", [x, e.ints([0, 0, -1, 2 * cache[1]])])
    positions = _positions(e, x, rank)
    head_axis = [2] if rank == 3 else [1]  # cos/sin get a heads axis of 1 where the input has its heads
    cos, sin = (e.op("Gather", [cache, positions], axis=0) for cache in (cos_cache, sin_cache))
    if e.ranks.get(e.inp(1)) == 2:
        cos, sin = e.unsqueeze(cos, head_axis), e.unsqueeze(sin, head_axis)
    elif rank == 3:
        cos, sin = e.unsqueeze(cos, [1]), e.unsqueeze(sin, [1])
    interleaved = bool(int(a.get("interleaved", 0)))
    if rotary:
        kept = e.slice_last(x4, e.ints([rotary]), e.ints([2**62]))
        turned = _rotate(e, e.slice_last(x4, e.ints([0]), e.ints([rotary])), cos, sin, interleaved)
        out4 = e.op("Concat", [turned, kept], axis=-1)
    else:
        out4 = _rotate(e, x4, cos, sin, interleaved)
    if rank == 3:
        e.op("Reshape", [out4, e.ints([0, 0, -1])], e.out(0))
    else:
        e.op("Identity", [out4], e.out(0))


#: op -> (rewrite, whether it needs the readers count, which inputs' ranks it needs); :mod:`.contrib` merges these.
ATTENTION_REWRITES: Dict[str, Tuple[Callable[..., None], bool, Tuple[int, ...]]] = {
    "MultiHeadAttention": (rw_multi_head_attention, True, (0, 1, 2, 4)),
    "Attention": (rw_attention, True, (0, 3)),
    "RotaryEmbedding": (rw_rotary_embedding, False, (0, 1)),
}
