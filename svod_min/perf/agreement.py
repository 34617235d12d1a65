"""Whether two engines' outputs agree, by a bundle's own tolerance: the ONNX bench's gate before it times anything.

The outputs must be as many, under the same names and of the same shapes, and each element within the tolerance
the bundle recorded for its output (``svod_min build`` records onnxruntime's outputs with rtol and a per-output
atol), by the rule ``run`` verifies a bundle with: |got - want| <= atol + rtol x |want|; NaN never agrees.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Tuple


def tolerances(model: Any) -> Dict[str, Tuple[float, float]]:
    """The bundle's own (rtol, atol) per output: its ``expect`` entries, as ``svod_min build`` recorded them."""
    return {e.buffer: (e.rtol, e.atol) for e in model.loaded.expectations}


def excess(got: Any, want: Any, rtol: float, atol: float) -> Tuple[float, int]:
    """The worst element's error over what the tolerance allows (<= 1: within it; NaN counts as infinite),
    and its flat index: |got - want| <= atol + rtol * |want|, the rule ``run`` verifies a bundle with
    (:func:`svod_min.planfile.data.check_expectation`)."""
    import numpy as np

    want = np.asarray(want, np.float64).ravel()
    if not want.size:
        return 0.0, 0
    err = np.abs(np.asarray(got, np.float64).ravel() - want)
    allowed = atol + rtol * np.abs(want)
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero allowance: any error is infinitely over it
        ratio = np.where(err == 0, 0.0, err / allowed)
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    worst = int(np.argmax(ratio))
    return float(ratio[worst]), worst


def disagreement(
    got: Mapping[str, Any], want: Sequence[Tuple[str, Any]], tols: Mapping[str, Tuple[float, float]]
) -> Optional[str]:
    """What differs between svod_min's outputs (``got``, by name) and onnxruntime's (``want``: (name, array) in
    order), or None: the number of outputs, then each output's presence, recorded tolerance, shape and values."""
    if len(got) != len(want):
        return "svod_min gives %d outputs (%s), onnxruntime %d (%s)" % (
            len(got),
            ", ".join(got),
            len(want),
            ", ".join(n for n, _ in want),
        )
    for name, value in want:
        if name not in got:
            return "output %s is missing (svod_min gives %s)" % (name, ", ".join(got))
        if name not in tols:
            return "the bundle records no tolerance for output %s" % name
        if tuple(got[name].shape) != tuple(value.shape):
            return "output %s has shape %s, onnxruntime's %s" % (name, tuple(got[name].shape), tuple(value.shape))
        rtol, atol = tols[name]
        worst, at = excess(got[name], value, rtol, atol)
        if not worst <= 1.0:
            return (
                "output %s element %d is %r, onnxruntime's %r: %.3g times the bundle's tolerance (rtol %g, atol %g)"
                % (name, at, float(got[name].ravel()[at]), float(value.ravel()[at]), worst, rtol, atol)
            )
    return None
