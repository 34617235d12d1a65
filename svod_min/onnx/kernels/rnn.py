"""LSTM and GRU as one generated C kernel per node that loops over time, one call per (direction, batch row)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from .ckernel import CKernel, flt, make_kernel

def _sigmoid(v: str) -> str:
    return "(1.0f / (1.0f + expf(-(%s))))" % v


def _clip(v: str, clip: Optional[float]) -> str:
    if clip is None:
        return v
    return "__builtin_fminf(%s, __builtin_fmaxf(-%s, %s))" % (flt(clip), flt(clip), v)


def _lstm_update(H: int, peephole: bool, input_forget: bool, clip: Optional[float]) -> str:
    """One LSTM cell's state update from the gate pre-activations g (order i, o, f, c)."""
    def peep(gate: int, c: str) -> str:
        return f" + p[d * {3 * H} + {gate * H} + j] * {c}" if peephole else ""

    i_gate = _sigmoid(_clip(f"g[j]{peep(0, 'cp')}", clip))
    f_gate = "1.0f - ig" if input_forget else _sigmoid(_clip(f"g[{2 * H} + j]{peep(2, 'cp')}", clip))
    o_gate = _sigmoid(_clip(f"g[{H} + j]{peep(1, 'cn')}", clip))
    cand = _clip(f"g[{3 * H} + j]", clip)
    return f"""for (long j = 0; j < {H}; ++j) {{
      float cp = c[j];
      float ig = {i_gate};
      float fg = {f_gate};
      float cn = fg * cp + ig * tanhf({cand});
      float og = {o_gate};
      c[j] = cn;
      h[j] = og * tanhf(cn);
    }}"""


def _gru_update(H: int, clip: Optional[float]) -> str:
    """One GRU cell's update from z (g[0..H)) and the candidate's pre-activation (g[2H..3H))."""
    z = _sigmoid(_clip("g[j]", clip))
    cand = _clip(f"g[{2 * H} + j]", clip)
    return f"""for (long j = 0; j < {H}; ++j) {{
      float z = {z};
      float hc = tanhf({cand});
      h[j] = (1.0f - z) * hc + z * h[j];
    }}"""


def _gate_rows(k: Dict[str, Any], lo: str, hi: str, recurrent: str, bias_r: bool) -> str:
    """C filling g[lo..hi) with W x_t + bias (+ R h, + R's bias) for the gates in that range."""
    G, I, H = k["G"], k["I"], k["H"]
    bias = f"bias[d * {2 * G} + q]" if k["bias"] else "0.0f"
    if bias_r and k["bias"]:
        bias += f" + bias[d * {2 * G} + {G} + q]"
    dot_h = f"for (long i = 0; i < {H}; ++i) acc += {recurrent}[i] * rq[i];" if recurrent else ""
    return f"""for (long q = {lo}; q < {hi}; ++q) {{
      const float *wq = w + (d * {G} + q) * {I}, *rq = r + (d * {G} + q) * {H};
      float acc = {bias};
      for (long i = 0; i < {I}; ++i) acc += xt[i] * wq[i];
      {dot_h}
      g[q] = acc;
    }}"""


def _gates(k: Dict[str, Any], op: str, before_reset: bool, clip: Optional[float]) -> str:
    """C computing the gate pre-activations; GRU's candidate after r, where linear_before_reset says."""
    G, H = k["G"], k["H"]
    if op == "LSTM":
        return _gate_rows(k, "0", str(G), "h", True)
    zr = _gate_rows(k, "0", str(2 * H), "h", True)
    r_gate = _sigmoid(_clip(f"g[{H} + q]", clip))
    if not before_reset:
        return zr + f"""
    for (long q = 0; q < {H}; ++q) rh[q] = {r_gate} * h[q];
    """ + _gate_rows(k, str(2 * H), str(G), "rh", True)
    rb = f"bias[d * {2 * G} + {G} + {2 * H} + q]" if k["bias"] else "0.0f"
    return zr + "\n    " + _gate_rows(k, str(2 * H), str(G), "", False) + f"""
    for (long q = 0; q < {H}; ++q) {{
      const float *rq = r + (d * {G} + {2 * H} + q) * {H};
      float lin = {rb};
      for (long i = 0; i < {H}; ++i) lin += h[i] * rq[i];
      g[{2 * H} + q] += {r_gate} * lin;
    }}"""


def _rows(k: Dict[str, Any]) -> Dict[str, str]:
    """Element offsets of x_t, y_t and the state rows in either layout."""
    T, B, D, I, H = k["T"], k["B"], k["D"], k["I"], k["H"]
    if k["layout"] == 0:
        return {"x": f"(t * {B} + b) * {I}", "y": f"((t * {D} + d) * {B} + b) * {H}", "s": f"(d * {B} + b) * {H}"}
    return {"x": f"(b * {T} + t) * {I}", "y": f"((b * {T} + t) * {D} + d) * {H}", "s": f"(b * {D} + d) * {H}"}


def rnn_kernel(op: str, k: Dict[str, Any], a: Dict[str, Any]) -> CKernel:
    """The kernel of LSTM or GRU ``op`` with sizes and present inputs ``k`` and the node's attributes ``a``."""
    clip = float(a["clip"]) if "clip" in a else None
    T, B, D, H, G = k["T"], k["B"], k["D"], k["H"], k["G"]
    lstm = op == "LSTM"
    update = _lstm_update(H, k["peephole"], bool(a.get("input_forget", 0)), clip) if lstm else _gru_update(H, clip)
    params = ["float *restrict y", "float *restrict yh", "float *restrict yc", "float *restrict scratch",
              "const float *restrict x", "const float *restrict w", "const float *restrict r", "const float *restrict bias",
              "const int *restrict lens", "const float *restrict h0", "const float *restrict c0", "const float *restrict p"]  # fmt: skip
    present = [k["y"], True, lstm, True, True, True, True, k["bias"], k["lens"], k["h0"], k["c0"], k["peephole"]]
    signature = ", ".join(p for p, keep in zip(params, present) if keep)
    rows = _rows(k)
    reverse = "d == 1" if D == 2 else ("1" if k["reverse"] else "0")
    length = f"lens[b] < {T} ? (lens[b] < 0 ? 0 : lens[b]) : {T}" if k["lens"] else str(T)
    init_h = f"h0[{rows['s']} + j]" if k["h0"] else "0.0f"
    init_c = (f"c[j] = {'c0[%s + j]' % rows['s'] if k['c0'] else '0.0f'};") if lstm else ""
    store = f"{{ float *yt = y + {rows['y']}; for (long j = 0; j < {H}; ++j) yt[j] = h[j]; }}" if k["y"] else ""
    tail = f"for (long t = len; t < {T}; ++t) {{ float *yt = y + {rows['y']}; for (long j = 0; j < {H}; ++j) yt[j] = 0.0f; }}" if k["y"] else ""
    body = f"""void KNAME({signature}, int core_id) {{
  const long d = core_id / {B}, b = core_id % {B};
  const int reverse = {reverse};
  const long len = {length};
  float *h = yh + {rows['s']};
  {"float *c = yc + %s;" % rows['s'] if lstm else ""}
  float *g = scratch + (long)core_id * {G + H}, *rh = g + {G};
  (void)rh; (void)reverse;
  for (long j = 0; j < {H}; ++j) {{ h[j] = {init_h}; {init_c} }}
  for (long s = 0; s < len; ++s) {{
    const long t = reverse ? len - 1 - s : s;
    const float *xt = x + {rows['x']};
    {_gates(k, op, bool(a.get("linear_before_reset", 0)), clip)}
    {update}
    {store}
  }}
  {tail}
}}
"""
    state = D * B * H
    extents = [T * D * B * H, state, state, D * B * (G + H), T * B * k["I"], D * G * k["I"], D * G * H, D * 2 * G, B, state, state, D * 3 * H]
    return make_kernel(op.lower(), body, [e for e, keep in zip(extents, present) if keep], D * B)
