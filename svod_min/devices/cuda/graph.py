"""CUDA graphs: bound launches and device copies built once into one graph, replayed with one ``cuGraphLaunch``.

Only the launches patched since the last replay are re-uploaded
(``cuGraphExecKernelNodeSetParams``): a patch puts its launch in the graph's
dirty set, so an unpatched replay costs no per-node Python work.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ...error import ExecutionError, ReleasedError
from ...ordering import buffers_overlap
from ..base import RELEASE_EPOCH
from ..graph_segments import graph_segments
from .driver import CUDA_MEMCPY3D, HANDLE, copy_rows, device_finalize, handle_array, memcpy_1d
from .launch import as_sequence
from .memory import CudaBuffer, check_same_size
from .program import BoundLaunch


class GraphCopy:
    """A device-to-device copy as a CUDA graph node (``cuGraphAddMemcpyNode``); never patched."""

    def __init__(self, device: Any, dst: CudaBuffer, src: CudaBuffer) -> None:
        check_same_size(src.nbytes, dst.nbytes, "copy")
        self.device, self.dst, self.src = device, dst, src  # the buffers stay alive with the graph
        if copy_rows(src.nbytes, device.info.max_pitch) is None:
            raise ExecutionError(
                "a %d-byte copy has no rows within the pitch limit %d; copy it eagerly"
                % (src.nbytes, device.info.max_pitch)
            )

    def __repr__(self) -> str:
        return "<GraphCopy %d B on %s>" % (self.src.nbytes, self.device.spec)

    def memcpy_params(self) -> CUDA_MEMCPY3D:
        params = memcpy_1d(self.dst.address, self.src.address, self.src.nbytes, self.device.info.max_pitch)
        assert params is not None  # checked in __init__
        return params


class CudaGraph:
    """Kernel launches (and device copies) as one CUDA graph: built once, replayed with one ``cuGraphLaunch``.

    Nodes run in list order (a chain) unless ``dependencies[i]`` lists the
    earlier node indices node ``i`` waits for. A node is a :class:`BoundLaunch`
    or a :class:`GraphCopy`. On :meth:`launch`, only nodes whose
    :class:`BoundLaunch` was patched since the last launch are re-uploaded
    (``cuGraphExecKernelNodeSetParams``): a patch puts its launch in the
    graph's dirty set, so an unpatched replay costs no per-node Python work.
    """

    def __init__(self, launches: Sequence[BoundLaunch], dependencies: Optional[Sequence[Sequence[int]]] = None) -> None:
        launches = as_sequence(launches, "launches", "CudaGraph")
        if not launches:
            raise ExecutionError("a CUDA graph needs at least one launch")
        for i, member in enumerate(launches):
            if not isinstance(member, (BoundLaunch, GraphCopy)):
                raise ExecutionError("graph node %d is %s, not a BoundLaunch or GraphCopy" % (i, type(member).__name__))
        self.device = launches[0].device
        if any(b.device is not self.device for b in launches):
            raise ExecutionError("every launch of a CUDA graph must be on the same device")
        deps = graph_dependencies(dependencies, len(launches))
        self.launches = launches
        self.closed = False
        self._checked = -1  # release epoch at the last liveness check of the members (-1: never)
        self._check_members()
        lib, dev = self.device.lib, self.device
        dev.activate()
        graph = HANDLE()
        lib.call("cuGraphCreate", ctypes.byref(graph), 0)
        self.graph = graph
        self._graph_fin = device_finalize(self, dev, "cuGraphDestroy", graph.value)
        self.nodes = self._add_nodes(deps)
        exe = HANDLE()
        lib.call("cuGraphInstantiateWithFlags", ctypes.byref(exe), graph, 0)
        self.exec = exe
        self._exec_fin = device_finalize(self, dev, "cuGraphExecDestroy", exe.value)
        self.dirty: set = set()  # launches patched since the last launch (filled by BoundLaunch._touch)
        self._where: Dict[int, List[int]] = {}  # id(launch) -> its node indices
        for i, member in enumerate(self.launches):
            if isinstance(member, BoundLaunch):
                if id(member) not in self._where:
                    member.graphs.append(weakref.ref(self))
                self._where.setdefault(id(member), []).append(i)
        self._graph_launch = lib.untyped("cuGraphLaunch")
        self.patched = 0  # nodes re-uploaded so far (for tests and benchmarks)

    def _add_nodes(self, dependencies: List[List[int]]) -> List[HANDLE]:
        nodes: List[HANDLE] = []
        for i, bound in enumerate(self.launches):
            deps = dependencies[i]
            node, dep_array = HANDLE(), handle_array([nodes[d] for d in deps])
            if isinstance(bound, GraphCopy):
                params = bound.memcpy_params()
                self.device.lib.call(
                    "cuGraphAddMemcpyNode",
                    ctypes.byref(node),
                    self.graph,
                    dep_array,
                    len(deps),
                    ctypes.byref(params),
                    self.device.context,
                )
            else:
                params = bound.node_params()
                self.device.lib.call(
                    "cuGraphAddKernelNode", ctypes.byref(node), self.graph, dep_array, len(deps), ctypes.byref(params)
                )
            nodes.append(node)
        return nodes

    def _check_members(self) -> None:
        """Refuse members whose module was unloaded, device closed or buffers freed
        (checked again after any release)."""
        if self.closed:
            raise ReleasedError("this CUDA graph was closed (CudaGraph.close()); build a new one")
        for member in self.launches:
            if isinstance(member, BoundLaunch):
                member.check_live()
            else:
                member.dst.storage.check_live("graph copy destination")
                member.src.storage.check_live("graph copy source")
        self._checked = RELEASE_EPOCH.value

    def launch(self) -> None:
        """Re-upload patched nodes, then replay the whole graph on the device's stream."""
        if self._checked != RELEASE_EPOCH.value:  # something was freed or closed since the last check
            self._check_members()
        self.device.activate()
        while self.dirty:
            bound = self.dirty.pop()
            params = bound.node_params()
            try:
                for i in self._where[id(bound)]:
                    self.device.lib.call(
                        "cuGraphExecKernelNodeSetParams", self.exec, self.nodes[i], ctypes.byref(params)
                    )
                    self.patched += 1
            except BaseException:
                self.dirty.add(bound)  # still stale: the next launch tries again
                raise
        code = self._graph_launch(self.exec, self.device.stream)  # both prebuilt ctypes handles
        if code:
            raise self.device.lib.error("cuGraphLaunch", code)

    __call__ = launch

    def close(self) -> None:
        """Destroy the graph now; a later :meth:`launch` raises :class:`ReleasedError`."""
        if self.closed:
            return
        self.closed = True
        RELEASE_EPOCH.bump()
        self._exec_fin()
        self._graph_fin()


def graph_dependencies(dependencies: Any, count: int) -> List[List[int]]:
    """Each node's earlier nodes it waits for: a chain by default; otherwise one list of indices per node."""
    if dependencies is None:
        return [[i - 1] if i else [] for i in range(count)]
    lists = as_sequence(dependencies, "dependencies", "CudaGraph")
    if len(lists) != count:
        raise ExecutionError(
            "CudaGraph: dependencies has %d entries for %d nodes (one list per node)" % (len(lists), count)
        )
    out = []
    for i, deps in enumerate(lists):
        deps = as_sequence(deps, "dependencies[%d]" % i, "CudaGraph")
        if any(type(d) is not int or not 0 <= d < i for d in deps):
            raise ExecutionError("graph node %d may only depend on earlier nodes, got %s" % (i, deps))
        out.append(deps)
    return out


# --- the device's graph slot -----------------------------------------------------------------------


class CudaGraphSlot:
    """``CudaDevice.graph`` (a ``GraphRuntime`` of devices/base.py): memcpy nodes, and runs of graphable plan
    ops packed into CUDA graphs by :func:`svod_min.devices.graph_segments.graph_segments`."""

    __slots__ = ("device",)

    def __init__(self, device: Any) -> None:
        self.device = device

    def copy_node(self, dst: Any, src: Any) -> Optional[GraphCopy]:
        """``dst <- src`` as a graph node, or None when it is not a plain copy on this GPU.

        Overlapping ranges of one allocation are left to the caller (a memcpy
        node, like ``cuMemcpy``, is undefined there), and so is a copy that
        fits no rows within the device's pitch limit (:func:`~.driver.copy_rows`).
        """
        device = self.device
        if (
            not (isinstance(dst, CudaBuffer) and isinstance(src, CudaBuffer))
            or dst.device is not device
            or src.device is not device
        ):
            return None
        if buffers_overlap(dst, src) or copy_rows(src.nbytes, device.info.max_pitch) is None:
            return None  # the eager copy (cuMemcpyDtoDAsync) has no pitch limit
        return GraphCopy(device, dst, src) if src.nbytes else None

    def build(self, groups: Sequence[Sequence[int]], nodes: Mapping[int, Any]) -> List[Any]:
        """Segments for a plan's hazard-ordered ``groups``: op-index lists, and a :class:`CudaGraph` per run."""
        return graph_segments(groups, nodes, CudaGraph)
