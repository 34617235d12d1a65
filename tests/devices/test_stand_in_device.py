"""A device kind defined only here (HOSTSIM) runs real plans: adding a kind touches nothing outside devices/.

The stand-in implements devices/base.py's ``Device`` by composition over the CPU's building blocks
(buffers, the object loader, a thread pool). It is registered in :data:`DEVICE_FACTORIES` for each test
and named by its kind string only, so every choice above the device (plan kernels, library kernels,
selfcheck) must come from its ``program_forms`` and ``load_program``, never from its kind.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

from svod_min import kernels
from svod_min.devices.base import C_SOURCE, CUDA_C, MAPPED_OBJECT, OBJECT, PTX, ProgramSource
from svod_min.devices.cpu.device import CpuDevice
from svod_min.devices.registry import DEVICE_FACTORIES
from svod_min.devices.spec import DeviceSpec
from svod_min.error import NotSupportedError, PlanFileError, UnsupportedDeviceError
from svod_min.kernels.selfcheck import run_selfcheck
from svod_min.planfile.kernels import have_compiler
from svod_min.planfile.load import load_plan

np = pytest.importorskip("numpy")

KIND = "HOSTSIM"
needs_cc = pytest.mark.skipif(not have_compiler("c"), reason="no C compiler installed")


class HostSim:
    """A host-memory device of its own kind; it records every program it is asked to load."""

    graph = None
    queues_work = False

    def __init__(self, spec: DeviceSpec, forms: Sequence[str] = (OBJECT, MAPPED_OBJECT, C_SOURCE)) -> None:
        self.spec = spec
        self.program_forms: Tuple[str, ...] = tuple(forms)
        self.threads = 2
        self._host = CpuDevice(threads=2)
        self.loaded: List[ProgramSource] = []

    def load_program(self, source: ProgramSource) -> Any:
        self.loaded.append(source)
        return self._host.load_program(source)

    def allocate(self, nbytes_or_shape: Any, dtype: Any = "uint8") -> Any:
        return self._host.allocate(nbytes_or_shape, dtype)

    def host_pool(self) -> Any:
        return self._host.host_pool()

    def new_event(self, timing: bool = True) -> Any:
        return self._host.new_event(timing)

    def synchronize(self) -> None:
        """Host work is done when its call returns."""

    def close(self) -> None:
        self._host.close()

    def loaded_forms(self) -> Dict[str, str]:
        return {s.entry: s.form for s in self.loaded}


@pytest.fixture
def hostsim() -> Iterator[HostSim]:
    """HOSTSIM registered in the process registry for one test; the device it builds."""
    built: List[HostSim] = []

    def factory(spec: DeviceSpec) -> HostSim:
        built.append(HostSim(spec))
        return built[-1]

    DEVICE_FACTORIES.register_factory(KIND, factory)
    try:
        yield DEVICE_FACTORIES.device(KIND)
    finally:
        DEVICE_FACTORIES.unregister_factory(KIND)
        for dev in built:
            dev.close()


SCALE_C = r"""
void scale(float* restrict y, const float* restrict x, int n, int core_id, int core_id_count) {
    int lo = (int)((long)n * core_id / core_id_count), hi = (int)((long)n * (core_id + 1) / core_id_count);
    for (int i = lo; i < hi; i++) y[i] = 3.0f * x[i];
}
"""
SHIFT_C = r"""
void shift(float* restrict z, const float* restrict y, int n) {
    for (int i = 0; i < n; i++) z[i] = y[i] - 1.0f;
}
"""
ROWS, COLS, N = 5, 7, 64


def _library_doc() -> Dict[str, Any]:
    """out = softmax(a @ b): two library kernels (prebuilt objects where this host has them)."""
    return {
        "svod_plan": 1,
        "device": KIND,
        "buffers": {
            "a": {"dtype": "float32", "shape": [ROWS, COLS], "init": {"random": {"seed": 1, "low": -1, "high": 1}}},
            "b": {"dtype": "float32", "shape": [COLS, COLS], "init": {"random": {"seed": 2, "low": -1, "high": 1}}},
            "t": {"dtype": "float32", "shape": [ROWS, COLS]},
            "out": {"dtype": "float32", "shape": [ROWS, COLS], "output": True},
        },
        "kernels": {
            "matmul": {"library": "matmul", "params": {"dtype": "float32"}},
            "softmax": {"library": "softmax", "params": {"dtype": "float32"}},
        },
        "ops": [
            {"kernel": "matmul", "buffers": ["t", "a", "b"], "vars": {"M": ROWS, "N": COLS, "K": COLS}},
            {"kernel": "softmax", "buffers": ["out", "t"], "vars": {"rows": ROWS, "cols": COLS}},
        ],
    }


def _source_doc() -> Dict[str, Any]:
    """z = 3x - 1 from two C kernels (compiled in one batch) and y + x from the library."""
    return {
        "svod_plan": 1,
        "device": KIND,
        "vars": {"n": {"min": 1, "max": N, "default": N}},
        "buffers": {
            "x": {"dtype": "float32", "shape": [N], "init": {"random": {"seed": 3, "low": -2, "high": 2}}},
            "y": {"dtype": "float32", "shape": [N]},
            "z": {"dtype": "float32", "shape": [N], "output": True},
            "w": {"dtype": "float32", "shape": [N], "output": True},
        },
        "kernels": {
            "scale": {
                "source": SCALE_C,
                "buffers": 2,
                "vars": ["n", "core_id", "core_id_count"],
                "global_size": ["core_id_count", 1, 1],
                "extents": {"0": "n", "1": "n"},
            },
            "shift": {"source": SHIFT_C, "buffers": 2, "vars": ["n"], "extents": {"0": "n", "1": "n"}},
            "add": {"library": "add", "params": {"dtype": "float32"}},
        },
        "ops": [
            {"kernel": "scale", "buffers": ["y", "x"]},
            {"kernel": "shift", "buffers": ["z", "y"]},
            {"kernel": "add", "buffers": ["w", "y", "x"], "vars": {"n": "n"}},
        ],
    }


def _array(loaded: Any, name: str) -> Any:
    return np.frombuffer(loaded.buffers[name].copyout(), dtype=np.float32).copy()


def test_a_kind_registered_at_run_time_is_a_device_spec(hostsim: HostSim) -> None:
    assert DeviceSpec.parse("hostsim") == DeviceSpec(KIND) and str(DeviceSpec.parse(" HostSim ")) == KIND
    assert KIND in DEVICE_FACTORIES.available_kinds()
    assert DEVICE_FACTORIES.device("HOSTSIM") is hostsim and hostsim.spec == DeviceSpec(KIND)


def test_library_plan_runs_on_the_stand_in(hostsim: HostSim) -> None:
    loaded = load_plan(_library_doc())  # the document names the kind; the registry builds the device
    assert loaded.plan.device is hostsim
    a, b = _array(loaded, "a").reshape(ROWS, COLS), _array(loaded, "b").reshape(COLS, COLS)
    loaded.plan.execute()
    t = a.astype(np.float64) @ b
    want = np.exp(t - t.max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(_array(loaded, "out").reshape(ROWS, COLS), want, rtol=1e-4, atol=1e-6)
    forms = hostsim.loaded_forms()  # both library kernels were loaded by the stand-in, as host code
    assert set(forms) == {kernels.get(name, dtype="float32").entry_point for name in ("matmul", "softmax")}
    assert len(hostsim.loaded) == 2 and set(forms.values()) <= {OBJECT, MAPPED_OBJECT}


@needs_cc
def test_source_plan_runs_on_the_stand_in_with_one_compile_batch(
    hostsim: HostSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    import svod_min.planfile.kernels as plan_kernels

    batches: List[int] = []
    real = plan_kernels.compile_many_cached

    def counting(sources: Sequence[str], **kwargs: Any) -> List[bytes]:
        batches.append(len(sources))
        return real(sources, **kwargs)

    monkeypatch.setattr(plan_kernels, "compile_many_cached", counting)
    loaded = load_plan(_source_doc(), device="hostsim")
    x = _array(loaded, "x")
    loaded.plan.execute()
    np.testing.assert_allclose(_array(loaded, "z"), 3 * x - 1, rtol=1e-6)
    np.testing.assert_allclose(_array(loaded, "w"), 3 * x + x, rtol=1e-6)
    assert batches == [2]  # both C kernels in one compiler batch, before the device saw them
    forms = hostsim.loaded_forms()
    assert forms["scale"] == forms["shift"] == OBJECT and len(hostsim.loaded) == 3
    assert all(isinstance(s.code, bytes) for s in hostsim.loaded if s.form == OBJECT)


@needs_cc
def test_a_device_that_compiles_c_itself_gets_the_source(hostsim: HostSim) -> None:
    hostsim.program_forms = (C_SOURCE,)  # no objects: the plan hands over the C text
    doc = _source_doc()
    del doc["kernels"]["add"]
    doc["ops"].pop()
    doc["buffers"].pop("w")
    loaded = load_plan(doc)
    x = _array(loaded, "x")
    loaded.plan.execute()
    np.testing.assert_allclose(_array(loaded, "z"), 3 * x - 1, rtol=1e-6)
    assert [(s.form, s.entry) for s in hostsim.loaded] == [(C_SOURCE, "scale"), (C_SOURCE, "shift")]
    assert hostsim.loaded[0].code == SCALE_C
    with pytest.raises(PlanFileError, match=r"kernels.add: library kernel 'add': HOSTSIM loads c programs"):
        load_plan(_source_doc())


def test_kernel_library_binds_to_the_stand_in(hostsim: HostSim) -> None:
    lib = kernels.get("add", device=KIND)
    assert [s.entry for s in hostsim.loaded] == [lib.entry_point]
    x = np.arange(N, dtype=np.float32)
    out = np.zeros(N, dtype=np.float32)
    lib.run([out, x, x], n=N)
    np.testing.assert_array_equal(out, 2 * x)
    hostsim.program_forms = (PTX,)  # a device of GPU forms: get() refuses it and names the PTX route
    with pytest.raises(UnsupportedDeviceError, match="HOSTSIM loads ptx programs.*PTX"):
        kernels.get("add", device=hostsim)


def test_a_new_device_at_a_dead_devices_address_loads_its_own_kernel() -> None:
    """The library memo keys on id(device); a device created where a closed one lived must not get its kernel."""
    spec = DeviceSpec(KIND)
    reused = 0
    for _ in range(5):
        first = HostSim(spec)
        kernels.get("add", device=first)
        first.close()
        first_id = id(first)
        del first  # its block is the allocator's next: the HostSim made next takes the same address
        second = HostSim(spec)
        reused += id(second) == first_id
        kernels.get("add", device=second)
        assert len(second.loaded) == 1, "the kernel came from the memo of a device that no longer exists"
        second.close()
    if not reused:
        pytest.skip("this interpreter never placed a new device at the dead one's address: nothing was checked")


@needs_cc
def test_selfcheck_follows_the_forms(hostsim: HostSim) -> None:
    results = run_selfcheck(hostsim, n=64, size=8)
    assert results and all(r.ok for r in results)
    assert {s.form for s in hostsim.loaded} == {C_SOURCE}
    hostsim.program_forms = (CUDA_C,)
    with pytest.raises(NotSupportedError, match="selfcheck runs C or PTX kernels; HOSTSIM loads cuda_c"):
        run_selfcheck(hostsim)


@pytest.mark.parametrize(
    "forms, mutate, message",
    [
        ((PTX, CUDA_C), None, "kernels.k: has no CUDA form, and this plan runs on HOSTSIM"),
        ((OBJECT,), "cuda_only", "kernels.k: has only a CUDA form"),
        (("spirv",), None, "kernels.k: device HOSTSIM loads spirv programs; this kernel brings object, c"),
    ],
)
def test_a_kernel_without_a_form_the_device_loads_is_refused(
    hostsim: HostSim, forms: Tuple[str, ...], mutate: Optional[str], message: str
) -> None:
    hostsim.program_forms = forms
    doc = {
        "svod_plan": 1,
        "device": KIND,
        "buffers": {"y": {"shape": [4], "output": True}},
        "kernels": {"k": {"source": "void k(float* y) {}", "buffers": 1}},
        "ops": [{"kernel": "k", "buffers": ["y"]}],
    }
    if mutate == "cuda_only":
        del doc["kernels"]["k"]["source"]
        doc["kernels"]["k"]["cuda"] = {"ptx": ".version 7.0", "grid": [1, 1, 1], "block": [1, 1, 1]}
    with pytest.raises(PlanFileError) as info:
        load_plan(copy.deepcopy(doc))
    assert str(info.value).startswith(message), str(info.value)
    assert hostsim.loaded == []


def test_load_program_refuses_a_form_the_device_does_not_list() -> None:
    with pytest.raises(
        NotSupportedError, match=r"CPU does not load 'ptx' programs \(it loads: object, mapped_object, c, llvm_ir\)"
    ):
        CpuDevice(threads=1).load_program(ProgramSource(PTX, ".version 7.0", "k", 1))


def test_an_unregistered_kind_is_refused_by_the_registry(hostsim: HostSim) -> None:
    DEVICE_FACTORIES.unregister_factory(KIND)
    with pytest.raises(UnsupportedDeviceError, match="device HOSTSIM is not supported"):
        load_plan(_library_doc())
