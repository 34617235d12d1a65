"""What one engine made of one test, and the comparison rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

#: Outcomes that are fine: a pass, or a refusal by name (svod_min's own error, exit 2).
PASS, REFUSED = "pass", "refused"
#: Outcomes that must never happen to svod_min (the suite's count of them is the headline figure).
WRONG, CRASH, SIGNAL, HANG = "wrong", "crash", "signal", "hang"
FAILURES = (WRONG, CRASH, SIGNAL, HANG)
#: A test whose graph inputs or outputs are sequences, maps or optionals: svod_min runs tensors only.
NOT_TENSOR = "not-tensor"
#: svod_min's outputs differ from the suite's data but equal the installed onnx's reference evaluator, which the data
#: contradicts too: the data was made by an older onnx whose function body the spec has since corrected (Attention's
#: softcap and qk_matmul_output between onnx 1.19 and 1.23; onnxruntime follows the current spec as well).
STALE_DATA = "stale-data"
#: svod_min's outputs differ from the suite's data and onnx's reference evaluator, but equal onnxruntime's, on a test
#: whose data follows a reading of the spec that its text contradicts (listed in :data:`DISPUTED`, with the reason).
DISPUTED = "disputed"

#: The node tests whose data (and onnx's reference evaluator) contradict the spec's own text, with the reason. A test
#: here counts as DISPUTED only where svod_min equals onnxruntime on it, which the runner checks; otherwise WRONG.
DISPUTED_TESTS = {
    "test_resize_downsample_scales_linear_align_corners": (
        "align_corners maps by (length_original - 1) / (length_resized - 1), the spec's length_resized being the "
        "resized tensor's length (floor(4 * 0.6) = 2); the data takes the unfloored 2.4, onnxruntime and PyTorch 2"
    ),
    "test_resize_downsample_scales_cubic_align_corners": (
        "align_corners maps by (length_original - 1) / (length_resized - 1), the spec's length_resized being the "
        "resized tensor's length (floor(4 * 0.8) = 3); the data takes the unfloored 3.2, onnxruntime and PyTorch 3"
    ),
}

#: ONNX's own backend runner compares with these defaults.
RTOL, ATOL = 1e-3, 1e-7


@dataclass
class Outcome:
    kind: str
    detail: str = ""

    def as_dict(self) -> Dict[str, str]:
        return {"kind": self.kind, "detail": self.detail}


def compare(got: Dict[str, Any], want: Sequence[Tuple[str, Any]]) -> Outcome:
    """Every expected output present with the same dtype and shape, and values within ONNX's tolerance."""
    import numpy as np

    problems: List[str] = []
    for name, expected in want:
        if name not in got:
            problems.append("%s: missing" % name)
            continue
        value = np.asarray(got[name])
        expected = np.asarray(expected)
        if expected.dtype.name == "bfloat16" and value.dtype == np.uint16:  # load_model's bfloat16: its bits
            # compared as float32 (exact): numpy's isclose does not see bfloat16's NaNs as equal
            value, expected = value.view(expected.dtype).astype(np.float32), expected.astype(np.float32)
        if value.dtype != expected.dtype or value.shape != expected.shape:
            problems.append(
                "%s: %s%s, expected %s%s" % (name, value.dtype, list(value.shape), expected.dtype, list(expected.shape))
            )
            continue
        mismatch = _mismatch(value, expected)
        if mismatch is not None:
            problems.append("%s: %s" % (name, mismatch))
    return Outcome(WRONG, "; ".join(problems)) if problems else Outcome(PASS)


def _mismatch(value: Any, expected: Any) -> Optional[str]:
    import numpy as np

    if expected.dtype.kind in "fc":
        ok = np.isclose(value, expected, rtol=RTOL, atol=ATOL, equal_nan=True)
    else:
        ok = value == expected
    if bool(np.all(ok)):
        return None
    bad = int(np.size(ok) - np.count_nonzero(ok))
    first = tuple(int(i) for i in np.argwhere(~ok)[0])
    return "%d of %d elements differ (first at %s: %r, expected %r)" % (
        bad,
        int(np.size(ok)),
        list(first),
        value[first].item(),
        expected[first].item(),
    )
