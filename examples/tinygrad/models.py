"""Three small tinygrad models exported as svod_min plans (``python examples/tinygrad/models.py``).

Needs tinygrad 0.14 (``pip install 'svod-min[tinygrad]'``) to re-export; the committed bundles
next to this file run with svod_min alone::

    python -m svod_min run examples/tinygrad/mlp/plan.json --var batch=3
"""

from __future__ import annotations

import os
import sys

import numpy as np

os.environ.setdefault("DEV", "CPU")

from tinygrad import Tensor, Variable  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_BATCH = 16


def _weights(seed: int, *shapes: tuple) -> list:
    rng = np.random.default_rng(seed)
    return [Tensor((rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)).realize() for s in shapes]


def mlp(batch: int = 4, symbolic: bool = True):
    """x[batch, 16] -> 32 -> 32 -> softmax over 10 classes; ``batch`` is a plan variable (1..16).

    ``symbolic=False`` slices with a plain int: the same model for a fixed batch (a reference).
    """
    w1, w2, w3 = _weights(1, (16, 32), (32, 32), (32, 10))
    b1 = Tensor(np.linspace(-0.1, 0.1, 32, dtype=np.float32)).realize()
    rng = np.random.default_rng(2)
    xs = Tensor(rng.standard_normal((MAX_BATCH, 16)).astype(np.float32)).realize()

    def model(xs: Tensor) -> dict:
        n = Variable("batch", 1, MAX_BATCH).bind(batch) if symbolic else batch
        x = xs.shrink(((0, n), None))
        h = (x @ w1 + b1).relu()
        h = (h @ w2).gelu()
        return {"probs": (h @ w3).softmax()}

    return model, {"xs": xs}, {"w1": w1, "b1": b1, "w2": w2, "w3": w3}


def convnet():
    """2x1x12x12 images -> conv3x3(6) -> relu -> maxpool -> conv3x3(8) -> relu -> global mean -> linear(4)."""
    c1, c2 = _weights(3, (6, 1, 3, 3), (8, 6, 3, 3))
    (fc,) = _weights(4, (8, 4))
    rng = np.random.default_rng(5)
    images = rng.standard_normal((2, 1, 12, 12)).astype(np.float32)

    def model(images: Tensor) -> dict:
        h = images.conv2d(c1, padding=1).relu().max_pool2d()
        h = h.conv2d(c2).relu().mean(axis=(2, 3))
        return {"logits": h @ fc}

    return model, {"images": images}, {"c1": c1, "c2": c2, "fc": fc}


def attention():
    """One pre-norm self-attention block: 8 tokens, width 16, 2 heads, residual."""
    wq, wk, wv, wo = _weights(6, (16, 16), (16, 16), (16, 16), (16, 16))
    rng = np.random.default_rng(7)
    tokens = rng.standard_normal((1, 8, 16)).astype(np.float32)

    def model(tokens: Tensor) -> dict:
        x = tokens.layernorm()
        heads = lambda t: t.reshape(1, 8, 2, 8).transpose(1, 2)  # noqa: E731
        q, k, v = heads(x @ wq), heads(x @ wk), heads(x @ wv)
        a = q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(1, 8, 16)
        return {"y": tokens + a @ wo}

    return model, {"tokens": tokens}, {"wq": wq, "wk": wk, "wv": wv, "wo": wo}


MODELS = {"mlp": mlp, "convnet": convnet, "attention": attention}


def export_all(out_root: str = HERE) -> dict:
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
    from svod_min.interop.tinygrad import export_tinygrad

    results = {}
    for name, make in MODELS.items():
        model, inputs, weights = make()
        results[name] = export_tinygrad(
            model,
            os.path.join(out_root, name),
            inputs=inputs,
            weights=weights,
            description="tinygrad example: " + (make.__doc__ or name).strip().splitlines()[0],
        )
    return results


if __name__ == "__main__":
    for name, r in export_all(sys.argv[1] if len(sys.argv) > 1 else HERE).items():
        print("%-10s %s: %d kernels, %d ops, vars %s" % (name, r.plan_path, r.kernels, r.ops, r.variables or "-"))
