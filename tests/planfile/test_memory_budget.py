"""The memory budget: a plan's peak, computed before anything is allocated, against the host's room or a set size.

The host's figures come from fake /proc and cgroup texts (a reader over a dict), never from this machine's
memory; the peaks are checked against figures worked out by hand from the buffer declarations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
import zipfile
from typing import Any, Dict

import numpy as np
import pytest
from support.plan_file import REPO

from svod_min.__main__ import main
from svod_min.config import parse_size
from svod_min.dtypes import float32
from svod_min.error import BundleError, ConfigError, MemoryBudgetError
from svod_min.npy import write_npy
from svod_min.planfile.bundle_build import build_bundle_from_document
from svod_min.planfile.load import load_model, load_plan
from svod_min.planfile.memory_budget import (
    COPY_INPUTS,
    COPY_OUTPUTS,
    COPY_VERIFY,
    PY_VALUE_BYTES,
    VERIFY_BYTES_PER_ELEMENT,
    MemoryBudget,
    cgroup_room,
    check_build_values,
    host_budget,
    host_payload,
    memory_budget,
    plan_peak,
    recording_refusal,
)

GIB, MIB = 1 << 30, 1 << 20
MEMINFO = "MemTotal:       32000000 kB\nMemFree:         1000000 kB\nMemAvailable:    8388608 kB\n"  # 8 GiB


def reader(files: Dict[str, str]) -> Any:
    return lambda path: files.get(path)


def copy_plan(n: int = 1000, expect: bool = False) -> Dict[str, Any]:
    """Input a (n float32) copied to output b: no kernel, nothing to compile."""
    doc: Dict[str, Any] = {
        "svod_plan": 1,
        "buffers": {
            "a": {"dtype": "float32", "shape": [n], "input": True},
            "b": {"dtype": "float32", "shape": [n], "output": True},
        },
        "ops": [{"copy": {"dst": "b", "src": "a"}}],
    }
    if expect:
        doc["expect"] = {"b": {"values": [0.0] * n}}
    return doc


# --- sizes -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, size",
    [("4096", 4096), ("512M", 512 * MIB), ("2G", 2 * GIB), ("1.5GiB", 3 * GIB // 2), ("2gb", 2 * GIB), ("1 k", 1024)],
)
def test_sizes_read_binary_units_and_decimal_ones(text: str, size: int) -> None:
    assert parse_size(text, "X") == size


@pytest.mark.parametrize("text", ["", "0", "-1G", "2X", "1e9", "1.2.3G", "G", "nan", "0.1"])
def test_a_bad_size_is_refused_naming_the_setting(text: str) -> None:
    with pytest.raises(ConfigError, match="SETTING=.* is not a size"):
        parse_size(text, "SETTING")


# --- the host's figures ------------------------------------------------------------------------------------------


def test_cgroup_v2_room_is_the_tightest_limit_up_the_tree_less_what_is_used() -> None:
    files = {
        "/proc/meminfo": MEMINFO,
        "/proc/self/cgroup": "0::/app.slice/job\n",
        "/sys/fs/cgroup/app.slice/job/memory.max": "1073741824\n",
        "/sys/fs/cgroup/app.slice/job/memory.current": "%d\n" % (256 * MIB),
        "/sys/fs/cgroup/app.slice/job/memory.stat": "anon 1\ninactive_file %d\nactive_file 5\n" % (64 * MIB),
        "/sys/fs/cgroup/app.slice/memory.max": "max\n",
        "/sys/fs/cgroup/app.slice/memory.current": "%d\n" % GIB,
    }
    room = cgroup_room(reader(files))
    assert room is not None and room[0] == GIB - (256 - 64) * MIB
    assert "cgroup v2 memory.max - memory.current of /sys/fs/cgroup/app.slice/job" == room[1]
    budget = host_budget(reader(files))
    assert (budget.limit, budget.source) == room  # under MemAvailable's 8 GiB
    files["/sys/fs/cgroup/app.slice/memory.max"] = "%d\n" % (GIB + 100 * MIB)  # the parent is tighter
    assert cgroup_room(reader(files)) == (
        100 * MIB,
        "cgroup v2 memory.max - memory.current of /sys/fs/cgroup/app.slice",
    )


def test_cgroup_v2_max_means_no_limit_and_memavailable_decides() -> None:
    files = {
        "/proc/meminfo": MEMINFO,
        "/proc/self/cgroup": "0::/\n",
        "/sys/fs/cgroup/memory.max": "max\n",
        "/sys/fs/cgroup/memory.current": "5\n",
    }
    assert cgroup_room(reader(files)) is None
    assert host_budget(reader(files)) == MemoryBudget(8 * GIB, "MemAvailable of /proc/meminfo")


def test_cgroup_v1_memory_controller_and_its_unlimited_value() -> None:
    files = {
        "/proc/meminfo": MEMINFO,
        "/proc/self/cgroup": "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n",
        "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "%d\n" % (512 * MIB),
        "/sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes": "%d\n" % (200 * MIB),
        "/sys/fs/cgroup/memory/docker/abc/memory.stat": "cache 1\ntotal_inactive_file %d\n" % (50 * MIB),
        "/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
    }
    assert host_budget(reader(files)) == MemoryBudget(
        362 * MIB, "cgroup v1 memory.limit_in_bytes - memory.usage_in_bytes of /sys/fs/cgroup/memory/docker/abc"
    )
    files["/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes"] = "9223372036854771712\n"
    assert host_budget(reader(files)).source == "MemAvailable of /proc/meminfo"


def test_a_container_finds_its_own_cgroup_at_the_mount_root() -> None:
    files = {
        "/proc/self/cgroup": "4:memory:/kubepods/pod1/c2\n",  # the host's path; the container mounts its own
        "/sys/fs/cgroup/memory/memory.limit_in_bytes": "%d\n" % GIB,
        "/sys/fs/cgroup/memory/memory.usage_in_bytes": "%d\n" % (GIB - MIB),
    }
    assert host_budget(reader(files)).limit == MIB  # no /proc/meminfo: the cgroup alone


def test_no_figure_means_no_budget_and_no_refusal() -> None:
    budget = host_budget(reader({}))
    assert budget.limit is None
    assert load_plan(copy_plan(), max_memory=budget).memory["budget_bytes"] == -1


def test_the_flag_beats_the_variable_which_beats_the_host(monkeypatch: Any) -> None:
    fake = reader({"/proc/meminfo": MEMINFO})
    monkeypatch.delenv("SVOD_MAX_MEMORY", raising=False)
    assert memory_budget(read=fake).limit == 8 * GIB
    monkeypatch.setenv("SVOD_MAX_MEMORY", "512M")
    assert memory_budget(read=fake) == MemoryBudget(512 * MIB, "SVOD_MAX_MEMORY=512M")
    assert memory_budget("2G", option="--max-memory", read=fake) == MemoryBudget(2 * GIB, "--max-memory 2G")
    assert memory_budget(1000, read=fake).limit == 1000
    monkeypatch.setenv("SVOD_MAX_MEMORY", "lots")
    with pytest.raises(ConfigError, match="SVOD_MAX_MEMORY='lots' is not a size"):
        memory_budget(read=fake)


# --- the peak ----------------------------------------------------------------------------------------------------


def test_the_peak_counts_buffers_and_the_copies_of_each_kind_of_run() -> None:
    n = 1000
    assert plan_peak(copy_plan(n)).total == 8 * n  # a and b
    assert plan_peak(copy_plan(n), copies=[COPY_INPUTS]).total == 12 * n  # the --input file read whole
    assert plan_peak(copy_plan(n), copies=[COPY_OUTPUTS]).total == 12 * n  # the array returned
    with_expect = plan_peak(copy_plan(n, expect=True), copies=[COPY_VERIFY])
    assert with_expect.total == 8 * n + n * PY_VALUE_BYTES + n * VERIFY_BYTES_PER_ELEMENT
    doc = copy_plan(n)
    doc["buffers"]["w"] = {"dtype": "float64", "shape": [10, 10], "init": "arange"}  # packed, then joined
    doc["buffers"]["v"] = {"dtype": "float32", "shape": [4], "view_of": "w"}  # shares w: counts nothing
    assert plan_peak(doc).total == 8 * n + 800 + 2 * 800
    doc["buffers"]["bad"] = {"dtype": "nope", "shape": [5]}  # refused by name by the reader: counts nothing
    assert plan_peak(doc).total == 8 * n + 800 + 2 * 800


def test_a_plan_just_under_its_budget_loads_and_one_byte_less_is_refused() -> None:
    doc = copy_plan(1000)
    loaded = load_plan(doc, max_memory=8000)
    assert loaded.memory["peak_bytes"] == 8000 and loaded.memory["budget_bytes"] == 8000
    with pytest.raises(MemoryBudgetError) as info:
        load_plan(doc, max_memory=7999)
    assert info.value.exit_code == 2
    with pytest.raises(MemoryBudgetError):
        load_model(doc, max_memory=8000)  # a call's returned array counts too


def test_a_bundle_just_under_its_budget_loads_and_one_byte_less_is_refused(tmp_path: Any) -> None:
    n = 50000  # 200 KB: its weight is stored, read straight into its buffer
    doc = copy_plan(n)
    doc["buffers"]["w"] = {"dtype": "float32", "shape": [n], "init": {"npy": "data/w.npy"}}
    write_npy(str(tmp_path / "w.npy"), float32, (n,), np.arange(n, dtype=np.float32).tobytes())
    out = str(tmp_path / "m.svod")
    build_bundle_from_document(doc, {"data/w.npy": (tmp_path / "w.npy").read_bytes()}, out, targets=["x86_64"])
    peak = load_plan(out, max_memory=GIB).memory["peak_bytes"]
    with zipfile.ZipFile(out) as zf:  # held while loading: the entries but the stored weight and the manifest
        held = sum(i.file_size for i in zf.infolist() if i.filename not in ("data/w.npy", "manifest.json"))
        assert json.loads(zf.read("plan.json"))["buffers"]["w"]["init"] == {"npy": "data/w.npy"}
    assert peak == 12 * n + held
    load_plan(out, max_memory=peak)
    with pytest.raises(MemoryBudgetError):
        load_plan(out, max_memory=peak - 1)
    with pytest.raises(BundleError, match=r"entries declare .* the limit is 1000 \(the memory budget, max_memory"):
        load_plan(out, max_memory=1000)  # more declared than the budget: not even read


def test_the_refusal_names_the_peak_the_budget_its_source_and_the_largest_buffers() -> None:
    doc = copy_plan(10)
    doc["buffers"]["big"] = {"dtype": "float32", "shape": [1 << 20]}
    doc["buffers"]["bigger"] = {"dtype": "float64", "shape": [1 << 20]}
    doc["buffers"]["medium"] = {"dtype": "int8", "shape": [1 << 20]}
    with pytest.raises(MemoryBudgetError) as info:
        load_plan(doc, max_memory=MemoryBudget(MIB, "a test's budget"))
    text = str(info.value)
    assert "needs about 13.0 MiB" in text and "budget of 1.0 MiB (a test's budget)" in text
    largest = text.split("largest: ")[1]
    assert largest.index("'bigger'") < largest.index("'big'") < largest.index("'medium'")
    assert "8.0 MiB" in largest and "'a'" not in largest  # the three largest only


def test_nothing_is_allocated_before_the_refusal(tmp_path: Any) -> None:
    """8 GiB declared, 1 GiB of address space: refused by the budget's message, not by a failed mmap."""
    doc = copy_plan(1 << 31)
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(doc))
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
        "from svod_min.__main__ import main; sys.exit(main(sys.argv[1:]))"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), SVOD_MAX_MEMORY="1G")
    proc = subprocess.run(
        [sys.executable, "-c", code, "run", str(path), "--once"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert "over the memory budget of 1.0 GiB (SVOD_MAX_MEMORY=1G)" in proc.stderr
    assert "buffer 'a' (float32 [2147483648]) 8.0 GiB" in proc.stderr


def test_the_run_flag_sets_the_budget_and_a_bad_one_is_refused(tmp_path: Any, capsys: Any) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(copy_plan(1000)))
    assert main(["run", str(path), "--once", "--max-memory", "7999"]) == 2
    assert "budget of 7.8 KiB (--max-memory 7999)" in capsys.readouterr().err
    assert main(["run", str(path), "--once", "--max-memory", "1.5x"]) == 2
    assert "--max-memory='1.5x' is not a size" in capsys.readouterr().err
    assert main(["run", str(path), "--once", "--max-memory", "12K", "--json"]) == 0
    assert '"peak_bytes": 8000' in capsys.readouterr().out


# --- outputs written once ----------------------------------------------------------------------------------------


def test_save_writes_an_output_from_its_buffer_without_a_copy(tmp_path: Any) -> None:
    loaded = load_plan(copy_plan(1000))
    loaded.set_input("a", "float32", (1000,), np.arange(1000, dtype=np.float32).tobytes())
    loaded.plan.execute()
    buf = loaded.buffers["b"]
    payload = host_payload(buf)
    assert isinstance(payload, memoryview) and payload.nbytes == 4000
    buf.copyin(np.full(1000, 7, np.float32))  # the view is the buffer: it sees the write
    assert np.frombuffer(payload, np.float32)[0] == 7
    write_npy(str(tmp_path / "b.npy"), buf.dtype, tuple(buf.shape), payload)
    np.testing.assert_array_equal(np.load(str(tmp_path / "b.npy")), np.full(1000, 7, np.float32))


def _peak_traced(work: Any) -> int:
    """The most Python- and numpy-allocated bytes held at once while ``work()`` runs (tracing starts afresh)."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_an_output_is_copied_once_into_the_array_a_call_returns_and_not_at_all_by_save(tmp_path: Any) -> None:
    n = 2 << 20  # 8 MiB outputs
    model = load_model(copy_plan(n))
    x = np.arange(n, dtype=np.float32)
    model(a=x)  # warm: the plan's first run sets up what later runs reuse
    peak = _peak_traced(lambda: model(a=x))
    assert 4 * n <= peak < 4 * n + (1 << 20)  # the returned array, and no second copy of it
    from svod_min.__main__ import _save_outputs

    loaded = model.loaded
    peak = _peak_traced(lambda: _save_outputs(loaded, str(tmp_path / "saved")))
    assert peak < 1 << 20  # written from the buffer
    np.testing.assert_array_equal(np.load(str(tmp_path / "saved" / "b.npy")), x)


def test_a_build_records_no_expectations_it_could_not_hold_or_afford() -> None:
    assert recording_refusal(copy_plan(1000), MemoryBudget(16000, "b")) is None  # 8000, and the output twice
    assert "needs about 15.6 KiB, over the memory budget of 15.6 KiB (b)" in str(
        recording_refusal(copy_plan(1000), MemoryBudget(15999, "b"))
    )
    huge = copy_plan(1 << 31)  # an 8 GiB output: no bundle entry may hold its expected values
    assert "output 'b' is 8.0 GiB, more than a bundle entry may hold (4.0 GiB)" == recording_refusal(
        huge, MemoryBudget(None, "none")
    )


def test_a_build_refuses_a_value_no_buffer_can_hold_and_examples_over_the_budget() -> None:
    budget = MemoryBudget(GIB, "a test's budget")
    check_build_values([("x", (1 << 20, 4), "float32")], [("x", (1 << 20, 4), "float32")], budget)
    with pytest.raises(MemoryBudgetError, match=r"value 'y' \(float32 \[1099511627776, 1099511627776\]\)"):
        check_build_values([("y", (1 << 40, 1 << 40), "float32")], [], budget)  # int64 products would wrap
    with pytest.raises(MemoryBudgetError, match=r"example inputs of about 1.5 GiB.*a test's budget.*largest: big"):
        check_build_values([], [("big", (1 << 27,), "float32"), ("small", (4,), "int8")], budget)
