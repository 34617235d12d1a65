"""Run-time checks (svod_min.planfile.status): a kernel reports a bad value in its slot of the status buffer, the
plan raises IndexOutOfRangeError after the run on both replay paths, clears the buffer and is not poisoned; the
document's ``checks`` are validated by JSON path."""

from __future__ import annotations

import copy
import struct
from typing import Any, Dict

import pytest

from svod_min.error import IndexOutOfRangeError, PlanFileError
from svod_min.planfile.load import load_plan
from svod_min.planfile.status import SLOT_WORDS, unravel

# Each call c checks idx[c] against [-4, 3] the way prelude.c.j2's index_check does, and copies x[k] into out[c].
SOURCE = r"""
void check4(float *restrict out, const float *restrict x, const long long *restrict idx, long long *restrict status,
            int core_id) {
  long long k = idx[core_id];
  if (k < -4 || k >= 4) {
    long long *s = status + 8 * core_id;
    s[1] = k; s[2] = core_id; s[3] = -4; s[4] = 3; s[0] = 1;
    return;
  }
  if (k < 0) k += 4;
  out[core_id] = x[k];
}
"""

CALLS = 3


def _doc() -> Dict[str, Any]:
    return {
        "svod_plan": 1,
        "buffers": {
            "x": {"dtype": "float32", "shape": [4], "init": {"values": [10, 11, 12, 13]}},
            "idx": {"dtype": "int64", "shape": [CALLS], "input": True},
            "out": {"dtype": "float32", "shape": [CALLS], "output": True},
            "status": {"dtype": "int64", "shape": [CALLS * SLOT_WORDS]},
        },
        "kernels": {
            "check4": {
                "source": SOURCE,
                "buffers": 4,
                "outputs": [0, 3],
                "vars": ["core_id"],
                "global_size": [CALLS, 1, 1],
            }
        },
        "ops": [{"kernel": "check4", "buffers": ["out", "x", "idx", "status"]}],
        "checks": {
            "buffer": "status",
            "records": [{"offset": 0, "slots": CALLS, "node": "the op", "what": "idx", "shape": [CALLS], "why": "x"}],
        },
    }


def _set(loaded: Any, values: Any) -> None:
    loaded.set_input("idx", "int64", (CALLS,), struct.pack("<%dq" % CALLS, *values))


@pytest.mark.parametrize("native", [True, False])
def test_a_reported_index_raises_after_the_run_and_the_plan_runs_again(native: bool) -> None:
    loaded = load_plan(_doc())
    assert loaded.plan.set_native_replay(native) == native
    _set(loaded, [0, 9, -7])
    with pytest.raises(IndexOutOfRangeError) as info:
        loaded.plan.execute()
    assert info.value.exit_code == 2
    assert "the op: index 9 at position [1] of idx is out of range [-4, 3] (x)" in str(info.value)
    assert loaded.buffers["status"].copyout() == bytes(CALLS * SLOT_WORDS * 8)  # cleared
    _set(loaded, [3, -4, -1])
    loaded.plan.execute()  # not poisoned
    assert loaded.buffers["out"].tolist() == [13.0, 10.0, 13.0]


def test_without_checks_the_same_kernel_reports_nothing() -> None:
    """The check lives in the document: a plan without ``checks`` runs, its status buffer holding the report."""
    doc = _doc()
    del doc["checks"]
    loaded = load_plan(doc)
    _set(loaded, [0, 9, 1])
    loaded.plan.execute()
    assert struct.unpack("<3q", loaded.buffers["status"].copyout()[64:88]) == (1, 9, 1)


@pytest.mark.parametrize(
    "mutate, path, message",
    [
        (lambda c: c.update(buffer="nope"), "checks.buffer", "unknown buffer 'nope'"),
        (lambda c: c.update(extra=1), "checks", "unknown key(s) ['extra']"),
        (lambda c: c["records"][0].update(slots=CALLS + 1), "checks.records[0]", "past the status buffer's 24 words"),
        (lambda c: c["records"][0].update(offset=-1), "checks.records[0].offset", "must be >= 0"),
        (lambda c: c["records"][0].update(shape=[2, "a"]), "checks.records[0].shape[1]", "expected an integer"),
        (lambda c: c["records"][0].pop("node"), "checks.records[0].node", "expected a non-empty string"),
    ],
)
def test_bad_checks_are_named_by_path(mutate: Any, path: str, message: str) -> None:
    doc = copy.deepcopy(_doc())
    mutate(doc["checks"])
    with pytest.raises(PlanFileError) as info:
        load_plan(doc)
    assert str(info.value).startswith(path + ":") and message in str(info.value), str(info.value)


def test_the_status_buffer_must_be_int64() -> None:
    doc = _doc()
    doc["buffers"]["status"]["dtype"] = "float64"
    with pytest.raises(PlanFileError, match="checks.buffer: the status buffer must be int64"):
        load_plan(doc)


def test_unravel_is_c_order() -> None:
    assert unravel(7, (2, 3, 4)) == (0, 1, 3)
    assert unravel(23, (2, 3, 4)) == (1, 2, 3)
    assert unravel(0, ()) == ()
