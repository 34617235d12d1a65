"""Real tinygrad programs for the aarch64 check of svod_min's tinygrad loader hook.

Run as a script it computes, with tinygrad's CPU device, an elementwise expression, reductions, a
matmul, one MLP training step (forward, backward, SGD update) and a ``TinyJit`` loop, calls the CPU
device's own helper programs (signal, wait, timestamp; the worker runs everything else) directly,
and prints one JSON line: the results, which helper programs svod_min loaded, and the loader's
counts. ``tests/aarch64/test_a64_tinygrad_hook.py`` runs it as shipped (``python3 THIS``) and
hooked (``python3 -m svod_min tinygrad THIS``) and compares both with :func:`numpy_reference`.

Importing it imports numpy only (the test computes the numpy reference from the same inputs).
"""

from __future__ import annotations

import ctypes
import json
import time
from typing import Any, Dict, List

import numpy as np

JIT_STEPS = 4
LEARNING_RATE = 0.1


def inputs() -> Dict[str, np.ndarray]:
    """The same float32 inputs for tinygrad and for numpy."""
    rng = np.random.default_rng(21)

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    values = {"x": f32(3, 40), "y": f32(3, 40), "a": f32(24, 33), "b": f32(33, 17)}
    values.update(
        mlp_x=f32(8, 12), mlp_t=f32(8, 5), w1=f32(12, 16) * np.float32(0.3), b1=f32(16), w2=f32(16, 5) * np.float32(0.3)
    )
    values.update(jit_w=f32(10, 6), jit_x=f32(JIT_STEPS, 7, 10))
    return values


def numpy_reference(v: Dict[str, np.ndarray]) -> Dict[str, Any]:
    """What every program must compute, in numpy (float64, then compared with a tolerance)."""
    d = {k: a.astype(np.float64) for k, a in v.items()}
    x, y = d["x"], d["y"]
    out: Dict[str, Any] = {"elementwise": np.maximum(x * 3 + y, 0) - np.sqrt(np.abs(y)) + np.exp(-x * x)}
    out.update(sum_rows=x.sum(axis=1), max_all=x.max(), mean_cols=y.mean(axis=0), matmul=d["a"] @ d["b"])
    pre = d["mlp_x"] @ d["w1"] + d["b1"]
    hidden = np.maximum(pre, 0)
    err = hidden @ d["w2"] - d["mlp_t"]
    out["mlp_loss"] = (err * err).mean()
    g_out = 2 * err / err.size
    g_w2 = hidden.T @ g_out
    g_pre = (g_out @ d["w2"].T) * (pre > 0)
    out.update(
        mlp_w1=d["w1"] - LEARNING_RATE * (d["mlp_x"].T @ g_pre), mlp_b1=d["b1"] - LEARNING_RATE * g_pre.sum(axis=0)
    )
    out["mlp_w2"] = d["w2"] - LEARNING_RATE * g_w2
    out["jit"] = [np.maximum(step @ d["jit_w"], 0).sum(axis=1) for step in d["jit_x"]]
    return out


def run_tinygrad(v: Dict[str, np.ndarray]) -> Dict[str, Any]:
    from tinygrad import Context, Tensor, TinyJit
    from tinygrad.nn.optim import SGD

    x, y = Tensor(v["x"]), Tensor(v["y"])
    out: Dict[str, Any] = {"elementwise": ((x * 3 + y).relu() - y.abs().sqrt() + (-x * x).exp()).numpy()}
    out.update(sum_rows=x.sum(axis=1).numpy(), max_all=x.max().numpy(), mean_cols=y.mean(axis=0).numpy())
    out["matmul"] = (Tensor(v["a"]) @ Tensor(v["b"])).numpy()

    w1, b1, w2 = (Tensor(v[k]) for k in ("w1", "b1", "w2"))
    optimizer = SGD([w1, b1, w2], lr=LEARNING_RATE)  # marks them as needing a gradient
    with Context(TRAINING=1):
        optimizer.zero_grad()
        err = (Tensor(v["mlp_x"]) @ w1 + b1).relu() @ w2 - Tensor(v["mlp_t"])
        loss = (err * err).mean()
        loss.backward()
        out["mlp_loss"] = loss.numpy()  # before the step: the lazy loss reads the weights the step updates
        optimizer.step()
    out.update(mlp_w1=w1.numpy(), mlp_b1=b1.numpy(), mlp_w2=w2.numpy())

    jit_w = Tensor(v["jit_w"])
    step = TinyJit(lambda t: (t @ jit_w).relu().sum(axis=1).realize())
    out["jit"] = [step(Tensor(batch)).numpy() for batch in v["jit_x"]]  # captured on the 2nd, replayed after
    return out


def run_helper_programs() -> Dict[str, Any]:
    """Call the CPU device's own signal, wait and timestamp programs directly (as its worker does)."""
    from tinygrad import Device
    from tinygrad.runtime import ops_cpu

    prgs = Device["CPU"].prgs
    word = ctypes.c_uint32(7)
    prgs[ops_cpu.signal_prog].fxn(ctypes.c_uint64(ctypes.addressof(word)), ctypes.c_uint64(123456))
    signalled = word.value
    prgs[ops_cpu.wait_prog].fxn(
        ctypes.c_uint64(ctypes.addressof(word)), ctypes.c_uint64(123456)
    )  # already there: returns
    clock = ctypes.c_uint64(ctypes.cast(ctypes.CDLL(None).clock_gettime, ctypes.c_void_p).value or 0)
    stamp = ctypes.c_uint64(0)
    before = time.monotonic_ns()
    prgs[ops_cpu.timestamp_prog].fxn(ctypes.c_uint64(ctypes.addressof(stamp)), ctypes.c_uint64(ctypes.addressof(clock)))
    after = time.monotonic_ns()
    svod = {f.__name__: hasattr(p, "svod_object") for f, p in prgs.items()}
    return {"signalled": signalled, "timestamp_in_order": before <= stamp.value <= after, "svod_loaded": svod}


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return np.asarray(value).tolist()  # float32 -> Python float is exact: equal JSON means equal bits


def main() -> None:
    from svod_min.interop.tinygrad_loader import is_installed, loader_stats

    results: Dict[str, List[Any]] = {k: _plain(a) for k, a in run_tinygrad(inputs()).items()}
    report = {"results": results, "helpers": run_helper_programs(), "hooked": is_installed()}
    report["stats"] = loader_stats()._asdict()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
