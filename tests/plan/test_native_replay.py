"""Native batched replay gives exactly the Python replay path's results."""

from __future__ import annotations

import ctypes
import glob
import os
import random
import time
from typing import List, Tuple

import pytest
from conftest import needs_cc
from support.dispatch import WAIT_ENTRY, WAIT_SRC, all_ids_ran
from support.paths import REPO_DIR

from svod_min.cache.kernel_cache import CachedKernel
from svod_min.devices.cpu.device import CpuDevice, create_cpu_device
from svod_min.error import PlanPoisonedError
from svod_min.jit_loader import load_object
from svod_min.plan import native_replay
from svod_min.plan.execution_plan import (
    ExecutionPlanBuilder,
    PreparedCopy,
    PreparedCustomFunction,
    PreparedKernel,
    RuntimeVar,
    register_custom_function,
)
from svod_min.planfile.load import load_plan

pytestmark = needs_cc

EXAMPLES = sorted(glob.glob(os.path.join(REPO_DIR, "examples", "*.json")))
TINYGRAD_EXAMPLES = sorted(glob.glob(os.path.join(REPO_DIR, "examples", "tinygrad", "*", "plan.json")))

OPS_C = r"""
/* o[i] = a[i] * k + b[i] over [0, n): reads a, b; writes o */
void axpb(float* restrict o, const float* restrict a, const float* restrict b, int n, int k) {
    for (int i = 0; i < n; i++) o[i] = a[i] * (float)k + b[i];
}
/* in-place: o[i] = o[i] * 0.5 + c, chunked by core_id over 4 chunks */
void halve(float* o, int n, int c, int core_id) {
    int lo = core_id * n / 4, hi = (core_id + 1) * n / 4;
    for (int i = lo; i < hi; i++) o[i] = o[i] * 0.5f + (float)c;
}
"""


def _outputs(plan) -> List[bytes]:
    return [b.copyout() for b in plan.buffers() if b is not None]


def _run_both(build, runs: int = 3, var_sets=()) -> None:
    """Build twice (fresh buffers), run natively and on the Python path, compare every buffer."""
    native, python = build(), build()
    assert native.set_native_replay(True), "native runner unavailable"
    assert not python.set_native_replay(False)
    for _ in range(runs):
        native.execute()
        python.execute()
        assert _outputs(native) == _outputs(python)
    for values in var_sets:
        native.execute_with_vars(values)
        python.execute_with_vars(values)
        assert _outputs(native) == _outputs(python)


@pytest.mark.parametrize("path", EXAMPLES, ids=[os.path.basename(p) for p in EXAMPLES])
def test_example_plans_match_python_path(path: str) -> None:
    _run_both(lambda: load_plan(path).plan)


@pytest.mark.parametrize(
    "path", TINYGRAD_EXAMPLES, ids=[os.path.basename(os.path.dirname(p)) for p in TINYGRAD_EXAMPLES]
)
def test_exported_tinygrad_plans_match_python_path(path: str) -> None:
    var_sets = [{"batch": 2}, {"batch": 16}] if "mlp" in path else ()
    _run_both(lambda: load_plan(path).plan, var_sets=var_sets)


def test_default_plan_matches_python_path_and_verifies() -> None:
    from svod_min.planfile.default_plan import default_plan_document

    _run_both(lambda: load_plan(default_plan_document()).plan, var_sets=[{"rows": 3}, {"rows": 8}])
    loaded = load_plan(default_plan_document())
    assert loaded.plan.native_replay
    loaded.plan.execute()
    assert all(ok for _, ok, _ in loaded.verify())


def _random_plan_builder(seed: int, dev: CpuDevice, progs):
    """A random DAG of small kernels over a few arenas and overlapping views."""
    axpb, halve = progs

    def build():
        rng = random.Random(seed)
        b = ExecutionPlanBuilder(dev)
        bufs = []
        for a in range(3):
            arena = dev.allocate([64], "float32").copyin([rng.uniform(-1, 1) for _ in range(64)])
            bufs.append(b.add_buffer(len(bufs), arena))
            for off in (0, 16, 24, 48):  # 16-element views, some overlapping
                bufs.append(b.add_buffer(len(bufs), arena.view(off * 4, 64, dtype="float32", shape=(16,))))
        n_var = RuntimeVar("n", 1, 16)
        ops = 0
        for op_id in range(rng.randint(5, 25)):
            deps = sorted(rng.sample(range(op_id), min(op_id, rng.randint(0, 2))))
            if rng.random() < 0.7:
                o, x, y = (rng.choice(bufs[1:]) for _ in range(3))
                k = CachedKernel(axpb, "CPU", OPS_C, "axpb", ["n", "k"], [0, 1, 2], [0], [1, 2], True, (1, 1, 1))
                op = PreparedKernel(
                    op_id,
                    k,
                    [o, x, y],
                    [0],
                    [16, rng.randint(-3, 3)],
                    {"k": 0},
                    deps,
                    [n_var],
                    extents={0: "n", 1: "n", 2: "n"},
                )
                op.fixedvars = {"k": op.vals[1]}
            elif rng.random() < 0.8:
                o = rng.choice(bufs[1:])
                k = CachedKernel(halve, "CPU", OPS_C, "halve", ["n", "c", "core_id"], [0], [0], [], True, (4, 1, 1))
                op = PreparedKernel(
                    op_id,
                    k,
                    [o],
                    [0],
                    [16, rng.randint(0, 2), 0],
                    {"c": 1},
                    deps,
                    [n_var],
                    extents={0: "n"},
                    flops=str(rng.choice([10, 10**7])),
                )
                op.fixedvars = {"c": op.vals[1]}
            else:
                dst, src = rng.sample([i for i in bufs if i % 5], 2)
                op = PreparedCopy(op_id, [dst, src], deps)
            b.add_op(op)
            ops += 1
        b.set_output_buffers([bufs[0], bufs[5], bufs[10]])
        return b.build()

    return build


@pytest.mark.parametrize("seed", range(25))
def test_random_dags_match_python_path(seed: int) -> None:
    dev = create_cpu_device()
    progs = (
        dev.compile(OPS_C, "axpb", buf_count=3, var_names=["n", "k"]),
        dev.compile(OPS_C, "halve", buf_count=1, var_names=["n", "c", "core_id"]),
    )
    _run_both(_random_plan_builder(seed, dev, progs), var_sets=[{"n": 7}, {"n": 1}, {"n": 16}])


def test_variable_updates_take_effect_in_native_tables() -> None:
    doc = {
        "svod_plan": 1,
        "vars": {"n": [1, 8, 8]},
        "buffers": {"x": {"shape": [8], "init": "arange"}, "y": {"shape": [8], "output": True}},
        "kernels": {
            "k": {
                "source": "void k(float* o, const float* a, int n){for(int i=0;i<n;i++)o[i]=a[i]*2;}",
                "buffers": 2,
                "vars": ["n"],
                "extents": {"0": "n", "1": "n"},
            }
        },
        "ops": [{"kernel": "k", "buffers": ["y", "x"]}],
    }
    loaded = load_plan(doc)
    plan = loaded.plan
    assert plan.native_replay
    plan.execute_with_vars({"n": 3})
    assert plan.output_buffer().tolist() == [0, 2, 4, 0, 0, 0, 0, 0]
    plan.execute_with_vars({"n": 8})
    assert plan.output_buffer().tolist() == [0, 2, 4, 6, 8, 10, 12, 14]


def test_failure_inside_a_replay_poisons_like_the_python_path() -> None:
    calls = []

    def explode(buffers, vars, attrs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("boom")

    register_custom_function("explode_on_second_run", explode)
    dev = create_cpu_device()
    prog = dev.compile(OPS_C, "axpb", buf_count=3, var_names=["n", "k"])
    b = ExecutionPlanBuilder(dev)
    x = b.add_buffer(0, dev.allocate([16], "float32"))
    y = b.add_buffer(1, dev.allocate([16], "float32"))
    k = CachedKernel(prog, "CPU", OPS_C, "axpb", ["n", "k"], [0, 1, 2], [0], [1, 2], True, (1, 1, 1))
    b.add_op(PreparedKernel(0, k, [y, x, x], [0], [16, 1], {"n": 16, "k": 1}))
    b.add_op(PreparedCustomFunction(1, "explode_on_second_run", [y], dependencies=[0]))
    b.add_op(PreparedKernel(2, k, [x, y, y], [0], [16, 1], {"n": 16, "k": 1}, dependencies=[1]))
    b.set_output_buffer(x)
    plan = b.build()
    assert plan.native_replay
    plan.execute()
    with pytest.raises(Exception, match="boom"):
        plan.execute()
    with pytest.raises(PlanPoisonedError):
        plan.execute()


def test_runner_handles_many_arguments_and_negative_ints() -> None:
    dev = create_cpu_device()
    nvars = native_replay.MAX_ARGS - 1  # a conv2d_gemm entry has 22: the stack slots past 16 count too
    src = (
        "void many(int* o, "
        + ", ".join("int a%d" % i for i in range(nvars))
        + ") { o[0] = "
        + " + ".join("a%d * %d" % (i, i + 1) for i in range(nvars))
        + "; o[1] = a%d; o[2] = a0; }" % (nvars - 1)
    )
    prog = dev.compile(src, "many", buf_count=1, var_names=["a%d" % i for i in range(nvars)])
    out = dev.allocate([3], "int32")
    table = native_replay.ReplayTable()
    args = list(range(-7, nvars - 7))
    table.add(prog.address, [out.address] + args)
    assert table.run(1) == 1
    assert out.tolist() == [sum(a * (i + 1) for i, a in enumerate(args)), args[-1], -7]


def test_runner_threads_claim_core_ids() -> None:
    dev = create_cpu_device()
    prog = dev.compile(WAIT_SRC, WAIT_ENTRY, buf_count=1, var_names=["n", "core_id"])
    n = 8
    flags = dev.allocate([n + 1], "int32").copyin([0] * (n + 1))
    table = native_replay.ReplayTable()
    table.add(prog.address, [flags.address, n, 0], ncalls=n, core_pos=2, threads=2)
    assert table.run(2) == 1
    assert flags.tolist() == all_ids_ran(n)  # id 0 busy: the other thread ran all the rest


def test_too_many_arguments_is_refused() -> None:
    with pytest.raises(Exception, match="up to %d arguments" % native_replay.MAX_ARGS):
        native_replay.ReplayTable().add(0x1000, list(range(native_replay.MAX_ARGS + 1)))


def test_env_switch_keeps_the_python_path(monkeypatch) -> None:
    monkeypatch.setenv("SVOD_NATIVE_REPLAY", "0")
    loaded = load_plan(EXAMPLES[0])
    assert not loaded.plan.native_replay


# --- table rows: which kernels the runner may call, and how groups pack ---------------------------


def _host(address: int) -> object:
    return type("HostBuf", (), {"on_host": True, "address": address})()


def test_native_entry_rows_and_refusals() -> None:
    bufs = [_host(0x1000), _host(0x2000)]
    assert native_replay.native_entry(0xABC, bufs, [5, 0], 1, None, 8) == (0xABC, [0x1000, 0x2000, 5, 0], 1, -1, 8)
    # core_id is the second variable: its slot follows the two buffers; one call needs no slot
    assert native_replay.native_entry(0xABC, bufs, [5, 0], 4, 1, 8)[3] == 3
    assert native_replay.native_entry(0xABC, bufs, [5, 0], 1, 1, 8)[3] == -1
    assert native_replay.native_entry(None, bufs, [], 1, None, 1) is None  # no C entry (a GPU or a double)
    device_buf = type("DeviceBuf", (), {"on_host": False, "address": 0x3000})()
    assert native_replay.native_entry(0xABC, [device_buf], [], 1, None, 1) is None
    too_many = [0] * (native_replay.MAX_ARGS - 1)
    assert native_replay.native_entry(0xABC, bufs, too_many, 1, None, 1) is None
    assert native_replay.native_entry(0xABC, bufs, too_many[:-1], 1, None, 1) is not None  # exactly MAX_ARGS


def test_pack_segments_turns_runs_of_entries_into_tables() -> None:
    assert native_replay.available()
    entry = (0xABC, [1], 1, -1, 1)
    segments = native_replay.pack_segments([[0, 1], [2], [3], [4]], {0: entry, 1: entry, 3: entry, 4: entry}, 1)
    assert segments is not None and [type(s) is list for s in segments] == [False, True, False]
    assert segments[1] == [2]  # an op without an entry stays a group the plan runs itself
    assert native_replay.pack_segments([[0]], {}, 1) is None  # nothing to pack


def test_native_threads_follows_the_one_integer_rule(monkeypatch) -> None:
    from svod_min.error import ConfigError

    monkeypatch.delenv("SVOD_NATIVE_THREADS", raising=False)
    assert native_replay.native_threads(6) == 6
    monkeypatch.setenv("SVOD_NATIVE_THREADS", "0")
    assert native_replay.native_threads(6) == 1  # serial
    monkeypatch.setenv("SVOD_NATIVE_THREADS", "many")
    with pytest.raises(ConfigError, match="SVOD_NATIVE_THREADS='many' is not an integer"):
        native_replay.native_threads(6)


def test_replay_switches_follow_the_one_on_off_rule(monkeypatch) -> None:
    from svod_min.error import ConfigError

    monkeypatch.setenv("SVOD_NATIVE_REPLAY", "maybe")
    with pytest.raises(ConfigError, match="SVOD_NATIVE_REPLAY='maybe' is not an on/off value"):
        ExecutionPlanBuilder(create_cpu_device()).build()


def test_malformed_rows_are_refused_before_anything_runs() -> None:
    dev = create_cpu_device()
    prog = dev.compile(OPS_C, "halve", buf_count=1, var_names=["n", "c", "core_id"])
    out = dev.allocate([8], "float32").copyin([4.0] * 8)
    good = [prog.address, 4, 4, 3, 2, out.address, 8, 1, 0]  # fn, nargs, ncalls, core_pos, threads, args: o = o/2 + 1
    run = native_replay.runner()
    for bad in (
        [prog.address, native_replay.MAX_ARGS + 1, 1, 0xFFFFFFFFFFFFFFFF, 1] + [0] * (native_replay.MAX_ARGS + 1),
        good[:-1],  # a row cut short by the table's end
        good[:3] + [4] + good[4:],  # core_pos past the arguments
    ):
        words = good + bad  # the good row first: a refusal must come before it runs
        table = (ctypes.c_uint64 * len(words))(*words)
        assert run(table, len(words), 2, 1) == -1
        assert out.tolist() == [4.0] * 8
    table = (ctypes.c_uint64 * len(good))(*good)
    assert run(table, len(good), 2, 1) == 1
    assert out.tolist() == [3.0] * 8


def test_the_prebuilt_runner_takes_the_rows_this_svod_min_writes() -> None:
    loaded = native_replay.prebuilt_runtime(load_object)
    if loaded is None:
        pytest.skip("no prebuilt runtime object for this architecture")
    assert native_replay.runner_row_limit(loaded) == native_replay.MAX_ARGS
    assert all(name in loaded.symbols for name in native_replay.ENTRIES)  # else every process compiles the runner


# --- SVOD_NATIVE_SPIN: idle workers poll during a replay, or sleep at once -----------------------

SPIN_C = r"""
/* core id i adds 1 to o[i] */
void bump(int* o, int core_id) { o[core_id] += 1; }
/* a serial stretch of the replay: the workers have nothing to do meanwhile */
void busy(int* o, int n) {
    volatile int s = 0;
    for (int i = 0; i < n; i++) s += i;
    o[0] += s == -1;
}
"""


def _spin_table(dev: CpuDevice, out: object) -> Tuple[native_replay.ReplayTable, List[object]]:
    """Three rounds of a threaded kernel (8 ids on 2 threads) followed by a serial stretch; and the
    programs, which the caller keeps (their code is unmapped with them)."""
    bump = dev.compile(SPIN_C, "bump", buf_count=1, var_names=["core_id"])
    busy = dev.compile(SPIN_C, "busy", buf_count=1, var_names=["n"])
    table = native_replay.ReplayTable()
    for _ in range(3):
        table.add(bump.address, [out.address, 0], ncalls=8, core_pos=1, threads=2)
        table.add(busy.address, [out.address + 32, 2000000])
    return table, [bump, busy]


def _settled_polls() -> int:
    time.sleep(0.05)  # a worker that polled counts its polls when it next sleeps
    return native_replay.idle_polls()


def test_workers_without_spinning_never_poll() -> None:
    dev = create_cpu_device()
    out = dev.allocate([9], "int32").copyin([0] * 9)
    table, _programs = _spin_table(dev, out)
    before = _settled_polls()
    for _ in range(20):
        assert table.run(2, spin=False) == 6
    assert out.tolist()[:8] == [60] * 8  # every id of every round ran, workers woken or not
    assert _settled_polls() == before


def test_workers_with_spinning_poll_between_kernels() -> None:
    dev = create_cpu_device()
    out = dev.allocate([9], "int32").copyin([0] * 9)
    table, _programs = _spin_table(dev, out)
    before = _settled_polls()
    for _ in range(20):
        assert table.run(2, spin=True) == 6
    assert out.tolist()[:8] == [60] * 8
    deadline = time.monotonic() + 5.0
    while native_replay.idle_polls() == before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert native_replay.idle_polls() > before


def test_native_spin_follows_the_one_on_off_rule(monkeypatch) -> None:
    from svod_min.error import ConfigError

    monkeypatch.delenv("SVOD_NATIVE_SPIN", raising=False)
    assert native_replay.native_spin() is True
    monkeypatch.setenv("SVOD_NATIVE_SPIN", "off")
    assert native_replay.native_spin() is False
    entry = (0xABC, [1], 4, 0, 2)
    segments = native_replay.pack_segments([[0]], {0: entry}, 2)
    assert segments is not None  # threads, spin: bound into the table's call as ctypes objects made once
    assert tuple(arg.value for arg in segments[0].args[2:]) == (2, 0)
    monkeypatch.setenv("SVOD_NATIVE_SPIN", "sometimes")
    with pytest.raises(ConfigError, match="SVOD_NATIVE_SPIN='sometimes' is not an on/off value"):
        native_replay.native_spin()
