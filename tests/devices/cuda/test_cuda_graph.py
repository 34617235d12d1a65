"""svod_min.devices.cuda.graph: CUDA graphs, their edges and in-place patching on replay."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from support.cuda import FAKE_PTX, Fake, fake, fake_so, gpu, gpu_test, int_values  # noqa: F401  (fixtures)

from svod_min.devices import cuda
from svod_min.devices.cuda import CudaGraph
from svod_min.error import ExecutionError
from svod_min.kernels import cuda_library_kernel

np = pytest.importorskip("numpy")


def test_fake_graph_runs_nodes_in_any_order_their_edges_allow(fake: Callable[..., Fake]) -> None:
    """The stand-in runs the newest ready node first, as a GPU may: a missing edge shows as a wrong result."""
    f = fake()
    dev = f.device()
    n = 64
    add, relu = cuda_library_kernel(dev, "add", dtype="float32"), cuda_library_kernel(dev, "relu", dtype="float32")
    x, t, out = (dev.allocate([n], "float32") for _ in range(3))
    x.copyin(np.arange(n, dtype=np.float32) - n // 2)
    want = np.maximum(2 * (np.arange(n) - n // 2), 0).astype(np.float32)

    def replay(dependencies: Any) -> Any:
        t.copyin(bytes(4 * n))
        out.copyin(bytes(4 * n))
        CudaGraph([add.bind([t, x, x], [n]), relu.bind([out, t], [n])], dependencies).launch()
        return np.frombuffer(out.copyout(), np.float32)

    assert np.array_equal(replay(None), want)  # a chain: relu waits for add
    assert np.array_equal(replay([[], [0]]), want)
    assert not replay([[], []]).any()  # no edge: relu ran first, on zeros
    f.cfg.fake_set_graph_order(1)  # oldest ready first: the missing edge goes unnoticed
    assert np.array_equal(replay([[], []]), want)


def test_fake_graph_replay_patches_only_changed_nodes(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    iota = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"])
    axpb = dev.load_ptx(FAKE_PTX, "fake_axpb", 2, ["n", "k", "c"])
    x, y = dev.allocate([6], "int32"), dev.allocate([6], "int32")
    first = iota.bind([x], [6])
    second = axpb.bind([y, x], [6, 2, 1])
    graph = CudaGraph([first, second])
    graph.launch()
    assert int_values(y) == [1, 3, 5, 7, 9, 11]
    assert f.counter("set_params") == 0 and f.counter("launches") == 0  # no eager launches at all
    second.set_val(1, 3)
    graph()
    assert int_values(y) == [1, 4, 7, 10, 13, 16]
    assert f.counter("set_params") == 1 and graph.patched == 1
    graph()
    assert f.counter("set_params") == 1 and f.counter("graph_launches") == 3
    eager = dev.allocate([6], "int32")
    second.set_buffer(0, eager)
    graph()
    assert int_values(eager) == int_values(y)
    with pytest.raises(ExecutionError, match="only depend on earlier nodes"):
        CudaGraph([first, second], dependencies=[[], [1]])
    with pytest.raises(ExecutionError, match="at least one"):
        CudaGraph([])
    parallel = CudaGraph([first, second], dependencies=[[], [0]])
    parallel.launch()
    # one patch reaches every graph holding the launch, and blob-level and dims patches count too
    second.blob.set_int(2, 0)  # c = 0
    graph()
    parallel()
    assert int_values(eager) == [0, 3, 6, 9, 12, 15] and graph.patched == 3 and parallel.patched == 1
    second.set_dims((1, 1, 1), (64, 1, 1))
    graph()
    assert graph.patched == 4 and f.counter("set_params") == 5  # 4 for graph, 1 for parallel
    import weakref

    gone = iota.bind([x], [6])
    ref = weakref.ref(gone)
    del gone  # the blob's change hook holds no strong reference: refcounting alone frees the launch
    assert ref() is None
    twice = CudaGraph([second, second])  # the same launch as two nodes: both re-uploaded
    second.set_val(2, 5)
    twice()
    assert twice.patched == 2 and int_values(eager) == [5, 8, 11, 14, 17, 20]
    graph.close()


@gpu_test
def test_gpu_graph_replay_equals_eager(gpu: cuda.CudaDevice) -> None:
    n = 4096
    add, mul, relu = (cuda_library_kernel(gpu, k, dtype="float32") for k in ("add", "mul", "relu"))
    x, y, t1, t2, out, eager = (gpu.allocate([n], "float32") for _ in range(6))
    rng = np.random.default_rng(2)
    x.copyin(rng.standard_normal(n).astype(np.float32))
    y.copyin(rng.standard_normal(n).astype(np.float32))
    launches = [add.bind([t1, x, y], [n]), mul.bind([t2, t1, y], [n]), relu.bind([out, t2], [n])]
    graph = CudaGraph(launches)
    graph.launch()
    for bound in launches[:2]:
        bound()
    relu.execute([eager, t2], [n])
    assert out.copyout() == eager.copyout()
    launches[2].set_buffer(0, eager)  # patch one node's buffer and another's variable
    launches[0].set_val(0, n // 2)
    t1.copyin(bytes(4 * n))
    graph()
    assert graph.patched == 2
    host_t1 = np.frombuffer(t1.copyout(), np.float32)
    assert not host_t1[n // 2 :].any() and host_t1[: n // 2].any()


def test_fake_graph_copies_keep_rows_within_the_pitch_limit(fake: Callable[..., Fake]) -> None:
    """A copy node wider than the device's CU_DEVICE_ATTRIBUTE_MAX_PITCH is refused by the driver: svod_min
    splits it into rows within the limit, and copies eagerly what fits no such rows."""
    f = fake()
    f.cfg.fake_set_max_pitch(1024)
    dev = f.device()
    assert dev.info.max_pitch == 1024
    src, dst = dev.allocate([4096], "float32"), dev.allocate([4096], "float32")
    data = np.arange(4096, dtype=np.float32)
    src.copyin(data)
    node = dev.graph.copy_node(dst, src)
    params = node.memcpy_params()
    assert (params.WidthInBytes, params.Height, params.srcPitch, params.dstPitch) == (1024, 16, 1024, 1024)
    relu = cuda_library_kernel(dev, "relu", dtype="float32")
    out = dev.allocate([4096], "float32")
    graph = CudaGraph([node, relu.bind([out, dst], [4096])])
    graph.launch()
    assert np.array_equal(out.numpy(), data) and f.counter("memcpy_nodes") == 1
    odd_src, odd_dst = dev.allocate(70001), dev.allocate(70001)  # an odd size: 70001 rows of 1 byte, too many
    assert dev.graph.copy_node(odd_dst, odd_src) is None
    assert cuda.copy_rows(70001, 1024) is None and cuda.copy_rows(70001, 70001) == (70001, 1)
    assert cuda.copy_rows(4099, 1024) == (1, 4099)
    assert cuda.copy_rows(3 << 31, 2**31 - 1) == (1 << 30, 6)
