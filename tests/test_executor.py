"""Executor: timelines, parallel groups, sync strategies, kernels and transfers."""

from __future__ import annotations

import functools
import random
import threading
import time
from typing import Any, List, Optional, Tuple

import pytest

from svod_min.device_registry import DEVICE_FACTORIES, DeviceRegistry, DeviceSpec
from svod_min.error import BufferAllocationError, ExecutionError, PlanError, UnsupportedDeviceError
from svod_min.executor import (
    DeviceContext,
    ExecutionGraph,
    ExecutionNode,
    KernelBufferAccess,
    SyncStrategy,
    TimelineSignal,
    UnifiedExecutor,
    global_executor,
)

LONG = 10.0  # generous: only hit when something is broken
SHORT = 0.05  # "still blocked" probes: a slow machine can only make these pass


def _node(i: int, preds: Tuple[int, ...] = (), access: Tuple[KernelBufferAccess, ...] = ()) -> ExecutionNode:
    return ExecutionNode(i, DeviceSpec("CPU"), predecessors=list(preds), buffer_access=list(access))


def _graph(edges: List[Tuple[int, Tuple[int, ...]]]) -> ExecutionGraph:
    g = ExecutionGraph()
    for i, preds in edges:
        g.add_node(_node(i, preds))
    return g


def _start(target: Any) -> Tuple[threading.Thread, List[Any]]:
    """Run ``target()`` on a thread; the list receives its result or exception."""
    out: List[Any] = []

    def run() -> None:
        try:
            out.append(target())
        except BaseException as exc:  # handed back to the test thread
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _wait_until(predicate: Any) -> None:
    deadline = time.monotonic() + LONG
    while not predicate():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.001)


# --- fakes for non-CPU devices (no GPU needed) ----------------------------------------


class FakeDevice:
    def __init__(self, spec: DeviceSpec, peer: bool = False) -> None:
        self.spec = spec
        self.peer_copies: List[Tuple[Any, Any]] = []
        self.synced = 0
        if peer:
            self.copy_from_peer = self._copy_from_peer

    def _copy_from_peer(self, dst: "FakeBuffer", src: "FakeBuffer") -> None:
        self.peer_copies.append((dst, src))
        dst.data[:] = src.data

    def synchronize(self) -> None:
        self.synced += 1


class FakeBuffer:
    """A device buffer as the executor sees it (base.Buffer): not host memory, copies itself."""

    on_host = False

    def __init__(self, device: Any, data: bytes) -> None:
        self.device = device
        self.data = bytearray(data)

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def copyout(self) -> bytes:
        return bytes(self.data)

    def copyin(self, data: Any) -> None:
        """Bytes, or another buffer: a peer copy when this device has one (as CudaBuffer.copyin), else staged."""
        if isinstance(data, FakeBuffer):
            peer = getattr(self.device, "copy_from_peer", None)
            if peer is not None and data.device is not self.device:
                peer(self, data)
                return
            data = data.copyout()
        assert len(data) == len(self.data)
        self.data[:] = data


@pytest.fixture
def fake_registry() -> DeviceRegistry:
    reg = DeviceRegistry()
    reg.register_factory("CPU", lambda spec: FakeDevice(spec))
    reg.register_factory("CUDA", lambda spec: FakeDevice(spec, peer=True))
    return reg


# --- parallel groups -------------------------------------------------------------------


def test_chain_gives_three_groups() -> None:
    g = _graph([(1, ()), (2, (1,)), (3, (2,))])
    assert g.compute_parallel_groups() == [[1], [2], [3]]


def test_diamond_groups() -> None:
    g = _graph([(1, ()), (2, (1,)), (3, (1,)), (4, (2, 3))])
    assert g.compute_parallel_groups() == [[1], [2, 3], [4]]


def test_two_roots_join() -> None:
    # The reference's shape: two independent nodes feeding a third.
    g = _graph([(2, ()), (1, ()), (3, (1, 2))])
    assert g.compute_parallel_groups() == [[1, 2], [3]]


def test_groups_are_deterministic_and_idempotent() -> None:
    edges = [(1, ()), (2, (1,)), (3, (1,)), (4, (2, 3)), (5, ()), (6, (5, 4)), (7, (1,)), (8, (7, 7))]
    expected = [[1, 5], [2, 3, 7], [4, 8], [6]]
    rng = random.Random(1234)
    for _ in range(20):
        shuffled = list(edges)
        rng.shuffle(shuffled)
        g = _graph(shuffled)
        assert g.compute_parallel_groups() == expected
        assert g.compute_parallel_groups() == expected  # no state accumulates between calls
        assert g.topological_order() == [n for grp in expected for n in grp]


def test_cycle_lists_blocked_ids() -> None:
    g = _graph([(1, ()), (2, (1, 3)), (3, (2,)), (4, (3,)), (5, (1,))])
    with pytest.raises(PlanError, match=r"cycle.*blocked_ids=\[2, 3, 4\]"):
        g.compute_parallel_groups()


def test_self_dependency_is_a_cycle() -> None:
    with pytest.raises(PlanError, match=r"blocked_ids=\[1\]"):
        _graph([(1, (1,))]).compute_parallel_groups()


def test_unknown_predecessor_and_duplicate_id() -> None:
    with pytest.raises(PlanError, match="unknown node id 9"):
        _graph([(1, ()), (2, (9,))]).compute_parallel_groups()
    g = _graph([(1, ())])
    with pytest.raises(PlanError, match="duplicate"):
        g.add_node(_node(1))


def test_empty_graph() -> None:
    assert ExecutionGraph().compute_parallel_groups() == []


def test_node_accepts_device_string() -> None:
    assert ExecutionNode(0, "cuda:1").device == DeviceSpec("CUDA", 1)  # type: ignore[arg-type]


# --- hazards -------------------------------------------------------------------------------


def R(buf: str, rng: Optional[Tuple[int, int]] = None) -> KernelBufferAccess:
    return KernelBufferAccess(buf, False, rng)


def W(buf: str, rng: Optional[Tuple[int, int]] = None) -> KernelBufferAccess:
    return KernelBufferAccess(buf, True, rng)


def test_dependencies_from_access_raw_war_waw() -> None:
    g = ExecutionGraph()
    g.add_node(_node(1, access=(W("a"),)))  # produce a
    g.add_node(_node(2, access=(R("a"), W("b"))))  # RAW on a
    g.add_node(_node(3, access=(R("a"), W("c"))))  # RAW on a, independent of 2
    g.add_node(_node(4, access=(W("a"),)))  # WAR vs 2, 3; WAW vs 1
    g.add_node(_node(5, access=(R("x"),)))  # read-only, untouched buffer
    g.add_node(_node(6, access=(R("x"),)))  # read after read: no hazard
    added = g.add_dependencies_from_access()
    assert set(added) == {(1, 2), (1, 3), (1, 4), (2, 4), (3, 4)}
    assert g.compute_parallel_groups() == [[1, 5, 6], [2, 3], [4]]
    assert g.add_dependencies_from_access() == []  # idempotent


def test_access_byte_ranges_narrow_hazards() -> None:
    g = ExecutionGraph()
    g.add_node(_node(1, access=(W("arena", (0, 64)),)))
    g.add_node(_node(2, access=(W("arena", (64, 128)),)))  # disjoint view: no edge
    g.add_node(_node(3, access=(R("arena", (60, 70)),)))  # overlaps both
    g.add_node(_node(4, access=(R("arena"),)))  # whole buffer: conflicts with both writes
    assert set(g.add_dependencies_from_access()) == {(1, 3), (2, 3), (1, 4), (2, 4)}
    assert g.compute_parallel_groups() == [[1, 2], [3, 4]]


def test_access_of_cpu_views_keys_on_storage() -> None:
    buf = DEVICE_FACTORIES.device("CPU").allocate(256)
    lo, hi, mid = buf.view(0, 128), buf.view(128, 128), buf.view(64, 128)
    assert KernelBufferAccess.of(lo, True).byte_range == (0, 128)
    assert not KernelBufferAccess.of(lo, True).conflicts(KernelBufferAccess.of(hi, True))
    assert KernelBufferAccess.of(mid).conflicts(KernelBufferAccess.of(hi, True))
    other = DEVICE_FACTORIES.device("CPU").allocate(256)
    assert not KernelBufferAccess.of(other, True).conflicts(KernelBufferAccess.of(buf, True))
    assert KernelBufferAccess.of("key", True) == W("key")  # anything else is its own key


def test_access_of_any_interface_buffer_uses_its_storage_window() -> None:
    """Only the device interface's slots (storage, offset, nbytes) are read: a buffer of any device works."""

    class Window:  # a base.Buffer as another device would give it: no byte_range(), no address
        def __init__(self, storage: object, offset: int, nbytes: int) -> None:
            self.storage, self.offset, self.nbytes = storage, offset, nbytes

    arena = object()
    lo, hi, mid = Window(arena, 0, 128), Window(arena, 128, 128), Window(arena, 64, 128)
    assert KernelBufferAccess.of(hi, True) == W(arena, (128, 256))
    assert not KernelBufferAccess.of(lo, True).conflicts(KernelBufferAccess.of(hi, True))
    assert KernelBufferAccess.of(mid).conflicts(KernelBufferAccess.of(lo, True))
    assert not KernelBufferAccess.of(Window(object(), 0, 128), True).conflicts(KernelBufferAccess.of(lo, True))


# --- sync strategy ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "src, dst, expected",
    [
        ("CPU", "CPU", SyncStrategy.NONE),
        ("CUDA:0", "cuda", SyncStrategy.NONE),
        ("CUDA:0", "CUDA:1", SyncStrategy.PEER_TO_PEER),
        ("GPU:1", "CUDA:0", SyncStrategy.PEER_TO_PEER),
        ("CPU", "CUDA", SyncStrategy.HOST_STAGED),
        ("CUDA:1", "CPU", SyncStrategy.HOST_STAGED),
        ("METAL", "CUDA", SyncStrategy.HOST_STAGED),
    ],
)
def test_sync_strategy_table(src: str, dst: str, expected: SyncStrategy) -> None:
    assert UnifiedExecutor.sync_strategy(src, dst) is expected
    assert UnifiedExecutor.sync_strategy(DeviceSpec.parse(src), DeviceSpec.parse(dst)) is expected


def test_cpu_mediated_is_an_alias() -> None:
    assert SyncStrategy["CPU_MEDIATED"] is SyncStrategy.HOST_STAGED
    assert len(SyncStrategy) == 3


# --- timeline signal -------------------------------------------------------------------------


def test_timeline_signal_blocks_waiter_until_signalled() -> None:
    sig = TimelineSignal(name="CPU")
    started, done = threading.Event(), threading.Event()
    result: List[bool] = []

    def waiter() -> None:
        started.set()
        result.append(sig.wait(3, timeout=LONG))
        done.set()

    threading.Thread(target=waiter, daemon=True).start()
    assert started.wait(LONG)
    sig.signal(2)
    assert not done.wait(SHORT)  # 2 < 3: still blocked
    sig.signal(3)
    assert done.wait(LONG)
    assert result == [True]
    assert sig.value == 3


def test_timeline_signal_ignores_lower_values_and_times_out() -> None:
    sig = TimelineSignal(5, name="CUDA:1")
    sig.signal(2)
    assert sig.value == 5
    assert sig.wait(5, timeout=0) is True
    assert sig.wait(6, timeout=0.01) is False
    with pytest.raises(ExecutionError, match=r"CUDA:1 timeline value 6 \(current value 5\)"):
        sig.wait_or_raise(6, timeout=0.01)
    with pytest.raises(ExecutionError):
        sig.signal(-1)
    with pytest.raises(ExecutionError):
        sig.signal(2**64)


def test_context_completes_in_order() -> None:
    ctx = DeviceContext(DeviceSpec("CPU"))
    a, b = ctx.next_timeline(), ctx.next_timeline()
    assert (a, b) == (1, 2)
    ctx.signal_completion(b)  # finished first, but 1 is still running
    assert ctx.current_value == 0
    ctx.signal_completion(a)
    assert ctx.current_value == 2
    ctx.wait_for(2, timeout=0)
    with pytest.raises(ExecutionError, match="never reserved"):
        ctx.wait_for(3)
    with pytest.raises(ExecutionError, match="cannot complete"):
        ctx.signal_completion(7)


# --- executor: kernels -------------------------------------------------------------------------


def test_add_device_is_idempotent_and_parses_strings() -> None:
    ex = UnifiedExecutor()
    ctx = ex.add_device("cpu")
    assert ex.add_device(DeviceSpec("CPU")) is ctx
    assert ex.context("CPU") is ctx
    assert ctx.device_handle is DEVICE_FACTORIES.device("CPU")
    assert ex.devices() == [DeviceSpec("CPU")]
    assert ex.context("CUDA:3") is None
    with pytest.raises(UnsupportedDeviceError):
        ex.add_device("METAL")


def test_execute_kernel_returns_increasing_values() -> None:
    ex = UnifiedExecutor()
    ran: List[int] = []
    values = [ex.execute_kernel("CPU", functools.partial(ran.append, i)) for i in range(5)]
    assert values == [1, 2, 3, 4, 5]
    assert ran == [0, 1, 2, 3, 4]
    assert ex.context("CPU").current_value == 5  # type: ignore[union-attr]


def test_concurrent_kernels_get_unique_values() -> None:
    ex = UnifiedExecutor()
    ex.add_device("CPU")
    values: List[int] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(50):
            v = ex.execute_kernel("CPU", lambda: None)
            with lock:
                values.append(v)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LONG)
    assert sorted(values) == list(range(1, 401))
    ex.synchronize_all(timeout=LONG)
    assert ex.context("CPU").current_value == 400  # type: ignore[union-attr]


def test_failing_kernel_raises_and_waiter_gets_error() -> None:
    ex = UnifiedExecutor()
    ctx = ex.add_device("CPU")
    release = threading.Event()

    def bad() -> None:
        assert release.wait(LONG)
        raise ValueError("boom")

    kernel, kernel_out = _start(lambda: ex.execute_kernel("CPU", bad))
    _wait_until(lambda: ctx.last_reserved >= 1)  # the kernel thread has reserved value 1
    waiter, waiter_out = _start(lambda: ctx.wait_for(1, timeout=LONG))
    assert not ctx.signal.wait(1, timeout=SHORT)  # kernel still running; waiter blocked
    release.set()
    kernel.join(LONG)
    waiter.join(LONG)
    assert isinstance(kernel_out[0], ExecutionError) and "boom" in str(kernel_out[0])
    assert isinstance(kernel_out[0].__cause__, ValueError)
    assert isinstance(waiter_out[0], ExecutionError), waiter_out
    assert "value(s) [1] failed" in str(waiter_out[0]) and "boom" in str(waiter_out[0])
    # Later ops still run; the failure stays visible until acknowledged.
    assert ex.execute_kernel("CPU", lambda: None) == 2
    with pytest.raises(ExecutionError, match="failed"):
        ex.synchronize_all(timeout=LONG)
    assert list(ctx.clear_failures()) == [1]
    ex.synchronize_all(timeout=LONG)


def test_svod_errors_pass_through_unwrapped() -> None:
    ex = UnifiedExecutor()

    def bad() -> None:
        raise BufferAllocationError("too big")

    with pytest.raises(BufferAllocationError, match="too big"):
        ex.execute_kernel("CPU", bad)


# --- executor: transfers ---------------------------------------------------------------------


def test_transfer_cpu_to_cpu_copies_bytes() -> None:
    ex = UnifiedExecutor()
    cpu = DEVICE_FACTORIES.device("CPU")
    src = cpu.allocate(16)
    dst = cpu.allocate(16)
    payload = bytes(range(100, 116))
    src.copyin(payload)
    value = ex.execute_transfer(src, dst, "CPU", "CPU")
    assert value == 1
    assert dst.copyout() == payload
    assert src.copyout() == payload


def test_transfer_between_overlapping_views() -> None:
    ex = UnifiedExecutor()
    buf = DEVICE_FACTORIES.device("CPU").allocate(8)
    buf.copyin(bytes(range(8)))
    ex.execute_transfer(buf.view(0, 6), buf.view(2, 6), "CPU", "CPU")  # memmove semantics
    assert buf.copyout() == bytes([0, 1, 0, 1, 2, 3, 4, 5])


def test_transfer_rejects_size_mismatch() -> None:
    ex = UnifiedExecutor()
    cpu = DEVICE_FACTORIES.device("CPU")
    with pytest.raises(BufferAllocationError, match="16 bytes.*8 bytes"):
        ex.execute_transfer(cpu.allocate(16), cpu.allocate(8), "CPU", "CPU")
    assert ex.devices() == []  # rejected before touching any timeline


def test_staged_transfer_waits_for_source(fake_registry: DeviceRegistry) -> None:
    ex = UnifiedExecutor(fake_registry)
    gpu = ex.add_device("CUDA:0").device_handle
    cpu = ex.add_device("CPU").device_handle
    src, dst = FakeBuffer(gpu, b"\0" * 4), FakeBuffer(cpu, b"\0" * 4)
    release = threading.Event()

    def produce() -> None:
        assert release.wait(LONG)
        src.data[:] = b"done"

    kernel, _ = _start(lambda: ex.execute_kernel("CUDA:0", produce))
    _wait_until(lambda: ex.context("CUDA:0").last_reserved >= 1)  # type: ignore[union-attr]
    copy, copy_out = _start(lambda: ex.execute_transfer(src, dst, "CUDA:0", "CPU", timeout=LONG))
    assert not ex.context("CPU").signal.wait(1, timeout=SHORT)  # type: ignore[union-attr]
    release.set()
    kernel.join(LONG)
    copy.join(LONG)
    assert copy_out == [1]
    assert bytes(dst.data) == b"done"  # the copy saw the kernel's write
    assert cpu.synced >= 1  # destination synchronised before the value was signalled


def test_staged_transfer_from_failed_source_raises(fake_registry: DeviceRegistry) -> None:
    ex = UnifiedExecutor(fake_registry)
    gpu = ex.add_device("CUDA:0").device_handle
    cpu = ex.add_device("CPU").device_handle
    with pytest.raises(ExecutionError):
        ex.execute_kernel("CUDA:0", lambda: 1 / 0)
    src, dst = FakeBuffer(gpu, b"abcd"), FakeBuffer(cpu, b"\0" * 4)
    with pytest.raises(ExecutionError, match="CUDA:0.*failed"):
        ex.execute_transfer(src, dst, "CUDA:0", "CPU", timeout=LONG)
    assert bytes(dst.data) == b"\0" * 4
    with pytest.raises(ExecutionError):  # the destination's value is marked failed too
        ex.context("CPU").wait_for(1, timeout=LONG)  # type: ignore[union-attr]


def test_peer_transfer_uses_copy_from_peer(fake_registry: DeviceRegistry) -> None:
    ex = UnifiedExecutor(fake_registry)
    g0 = ex.add_device("CUDA:0").device_handle
    g1 = ex.add_device("CUDA:1").device_handle
    src, dst = FakeBuffer(g0, b"peer"), FakeBuffer(g1, b"\0" * 4)
    assert ex.execute_transfer(src, dst, "CUDA:0", "CUDA:1") == 1
    assert bytes(dst.data) == b"peer"
    assert g1.peer_copies == [(dst, src)]


def test_same_device_non_cpu_transfer_never_memmoves(fake_registry: DeviceRegistry) -> None:
    ex = UnifiedExecutor(fake_registry)
    gpu = ex.add_device("CUDA:0").device_handle
    src, dst = FakeBuffer(gpu, b"same"), FakeBuffer(gpu, b"\0" * 4)
    src.address = dst.address = 0  # type: ignore[attr-defined]  # a device pointer, not a host one
    assert ex.execute_transfer(src, dst, "CUDA:0", "CUDA:0") == 1
    assert bytes(dst.data) == b"same"


def test_peer_transfer_without_peer_copy_is_staged() -> None:
    reg = DeviceRegistry()
    reg.register_factory("CUDA", lambda spec: FakeDevice(spec, peer=False))
    ex = UnifiedExecutor(reg)
    src = FakeBuffer(ex.add_device("CUDA:0").device_handle, b"host")
    dst = FakeBuffer(ex.add_device("CUDA:1").device_handle, b"\0" * 4)
    ex.execute_transfer(src, dst, "CUDA:0", "CUDA:1")
    assert bytes(dst.data) == b"host"


# --- executor: misc ----------------------------------------------------------------------------


def test_single_device_check(fake_registry: DeviceRegistry) -> None:
    cpu = DEVICE_FACTORIES.device("CPU")
    a, b = cpu.allocate(4), cpu.allocate(8)
    assert UnifiedExecutor.single_device_check([a, b]) == DeviceSpec("CPU")
    gpu = FakeBuffer(FakeDevice(DeviceSpec("CUDA", 1)), b"x")
    assert UnifiedExecutor.single_device_check([a, gpu]) is None
    assert UnifiedExecutor.single_device_check([gpu]) == DeviceSpec("CUDA", 1)
    spec_only = FakeBuffer(DeviceSpec("CUDA", 1), b"x")  # .device is a DeviceSpec
    assert UnifiedExecutor.single_device_check([gpu, spec_only]) == DeviceSpec("CUDA", 1)
    assert UnifiedExecutor.single_device_check([FakeBuffer(None, b"x")]) is None
    assert UnifiedExecutor.single_device_check([]) is None


def test_synchronize_all_returns_and_times_out() -> None:
    ex = UnifiedExecutor()
    ex.synchronize_all()  # nothing added
    ex.execute_kernel("CPU", lambda: None)
    ex.synchronize_all(timeout=LONG)
    ctx = ex.context("CPU")
    assert ctx is not None
    pending = ctx.next_timeline()  # reserved, never completed
    with pytest.raises(ExecutionError, match=r"timed out.*CPU timeline value %d" % pending):
        ex.synchronize_all(timeout=0.01)
    ctx.signal_completion(pending)
    ex.synchronize_all(timeout=LONG)


def test_global_executor_is_a_singleton() -> None:
    assert global_executor() is global_executor()
    assert global_executor().registry is DEVICE_FACTORIES


# --- regressions from the 2026-11-24 review -------------------------------------------------------


def test_numpy_accesses_conflict_by_address_not_by_elementwise_equality() -> None:
    np = pytest.importorskip("numpy")
    from svod_min.executor import ExecutionGraph, ExecutionNode, KernelBufferAccess

    arena = np.zeros(8)
    a, b, c = arena[:4], arena[2:6], np.zeros(4)  # a and b overlap; c is elsewhere (and equal in value)
    graph = ExecutionGraph([
        ExecutionNode(0, "CPU", buffer_access=[KernelBufferAccess.of(a, True)]),
        ExecutionNode(1, "CPU", buffer_access=[KernelBufferAccess.of(b, False)]),
        ExecutionNode(2, "CPU", buffer_access=[KernelBufferAccess.of(c, False)]),
    ])  # fmt: skip
    assert graph.add_dependencies_from_access() == [(0, 1)]  # (predecessor, node); raised "truth value is ambiguous" before


@pytest.mark.parametrize("call", [
    lambda ctx: ctx.wait_for("3"),
    lambda ctx: ctx.signal_completion("1"),
    lambda ctx: ctx.wait_for(-1),
])  # fmt: skip
def test_timeline_values_are_checked(call: Any) -> None:
    from svod_min.executor import DeviceContext

    ctx = DeviceContext("CPU")
    ctx.next_timeline()
    with pytest.raises(ExecutionError, match=r"timeline value must be an int in \[0, 2\*\*64\)"):
        call(ctx)


def test_transfers_refuse_non_buffers_and_buffers_named_with_the_wrong_device() -> None:
    from svod_min.device_registry import DeviceSpec
    from svod_min.devices.cpu import CpuDevice
    from svod_min.executor import UnifiedExecutor

    dev = CpuDevice(threads=1)
    host = dev.allocate(16)

    class DeviceBuffer:  # what a CUDA buffer looks like to the executor: its device and a device pointer
        nbytes = 16
        address = 0x10  # never a host address: a memmove from it would read garbage or crash
        device = DeviceSpec.parse("CUDA:0")

    ex = UnifiedExecutor()
    with pytest.raises(ExecutionError, match="transfer source buffer lives on CUDA:0, not on CPU"):
        ex.execute_transfer(DeviceBuffer(), host, "CPU", "CPU")
    with pytest.raises(ExecutionError, match="transfer source must be a device buffer, got bytes"):
        ex.execute_transfer(b"abc", host, "CPU", "CPU")
    assert ex.context("CPU").last_reserved == 0  # refused before a value was reserved
