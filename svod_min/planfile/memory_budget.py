"""The memory budget: a plan's peak memory, computed from its document before anything is allocated.

A plan names every buffer it allocates, so its peak is known before the first byte: the buffers (inputs,
outputs, weights, arenas: every buffer that is not a view), the expected values it holds as Python numbers,
the copies made while loading (bundle entries read into memory, init data packed before it is copied in) and
the copies a run makes (``run --input`` files, the values ``verify`` unpacks, the arrays ``load_model()(...)``
hands back). :func:`plan_peak` adds them up; :func:`memory_budget` says how much there is room for:
``--max-memory`` / ``load_model(max_memory=)``, else ``SVOD_MAX_MEMORY``, else the smaller of the host's
``MemAvailable`` and the room left under the process's cgroup limit. A plan over budget is refused with
:class:`~svod_min.error.MemoryBudgetError`, naming its largest items, before anything is allocated.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Tuple

from ..config import MAX_MEMORY_ENV, env_str, parse_size
from ..dtypes import dtype as to_dtype
from ..error import MemoryBudgetError, SvodError
from .bundle import DEFAULT_LIMITS, Limits, plan_file_entry
from .data import MAX_BUFFER_BYTES

#: An expected value held in a list as a Python float: a 24-byte object and an 8-byte slot.
PY_VALUE_BYTES = 32
#: Checking one element of a buffer: the unpacked tuple, its list and the float objects (40), the nested
#: lists of ``tolist`` (8) and the flat list the comparison walks (8).
VERIFY_BYTES_PER_ELEMENT = 56
#: A cgroup v1 limit at or above this is "no limit" (v1 writes it as a page-rounded 2^63 - 1).
UNLIMITED = 1 << 60
#: What a run copies beside its buffers: ``run --input`` reads each input file whole, ``run``'s check unpacks
#: each expected buffer into Python values, ``load_model()(...)`` returns a new array per output.
COPY_INPUTS, COPY_VERIFY, COPY_OUTPUTS = "inputs", "verify", "outputs"

Reader = Callable[[str], Optional[str]]
Items = Tuple[Tuple[str, int], ...]


def read_text(path: str) -> Optional[str]:
    """The text of a small system file (``/proc``, ``/sys/fs/cgroup``); None when it cannot be read."""
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read(1 << 16)
    except OSError:
        return None


def format_size(nbytes: int) -> str:
    """``nbytes`` for a person: ``16.0 GiB``, ``512.0 MiB``, ``300 B``."""
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return "%d B" % nbytes if unit == "B" else "%.1f %s" % (size, unit)
        size /= 1024
    return "%d B" % nbytes  # not reached


# --- the budget ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryBudget:
    """How many bytes a plan may need at its peak (None: no figure to go by, nothing is checked) and why."""

    limit: Optional[int]
    source: str


def memory_budget(max_memory: Any = None, *, option: str = "max_memory", read: Reader = read_text) -> MemoryBudget:
    """The budget: ``max_memory`` (bytes, a size such as ``2G`` (``option`` names it in errors) or a
    MemoryBudget), else the ``SVOD_MAX_MEMORY`` variable, else :func:`host_budget`."""
    if isinstance(max_memory, MemoryBudget):
        return max_memory
    if max_memory is not None:
        if type(max_memory) is int and max_memory > 0:
            return MemoryBudget(max_memory, "%s %d" % (option, max_memory))
        return MemoryBudget(parse_size(str(max_memory), option), "%s %s" % (option, max_memory))
    raw = env_str(MAX_MEMORY_ENV)
    if raw is not None:
        return MemoryBudget(parse_size(raw, MAX_MEMORY_ENV), "%s=%s" % (MAX_MEMORY_ENV, raw))
    return host_budget(read)


def host_budget(read: Reader = read_text) -> MemoryBudget:
    """The smaller of ``MemAvailable`` (/proc/meminfo) and the room under the process's cgroup memory limit."""
    figures = []
    available = meminfo_available(read("/proc/meminfo"))
    if available is not None:
        figures.append((available, "MemAvailable of /proc/meminfo"))
    room = cgroup_room(read)
    if room is not None:
        figures.append(room)
    if not figures:
        return MemoryBudget(None, "no host memory figure (no /proc/meminfo or cgroup limit)")
    limit, source = min(figures)
    return MemoryBudget(limit, source)


def meminfo_available(text: Optional[str]) -> Optional[int]:
    """``MemAvailable`` of a /proc/meminfo text, in bytes (the kernel writes kB, meaning KiB)."""
    for line in (text or "").splitlines():
        key, _, rest = line.partition(":")
        if key.strip() == "MemAvailable":
            fields = rest.split()
            if fields and fields[0].isdigit():
                scale = 1024 if len(fields) > 1 and fields[1].lower() == "kb" else 1
                return int(fields[0]) * scale
    return None


def cgroup_room(read: Reader = read_text) -> Optional[Tuple[int, str]]:
    """The bytes left under the tightest memory limit of the process's cgroup and its ancestors, and which
    limit that is; None without a limit. The memory controller on cgroup v1 (a ``memory`` line of
    /proc/self/cgroup) reads ``memory.limit_in_bytes`` and ``memory.usage_in_bytes``; on v2 (the ``0::``
    line), ``memory.max`` (``max``: no limit) and ``memory.current``. Inactive file pages (``memory.stat``)
    are not counted as used: the kernel reclaims them before it runs out."""
    v1 = v2 = None
    for line in (read("/proc/self/cgroup") or "").splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        if "memory" in parts[1].split(","):
            v1 = parts[2]
        elif parts[0] == "0" and not parts[1]:
            v2 = parts[2]
    if v1 is not None:
        return _tightest(read, "/sys/fs/cgroup/memory", v1, "v1", "memory.limit_in_bytes", "memory.usage_in_bytes")
    if v2 is not None:
        return _tightest(read, "/sys/fs/cgroup", v2, "v2", "memory.max", "memory.current")
    return None


def _tightest(read: Reader, root: str, path: str, version: str, limit_file: str, usage_file: str) -> Any:
    """The smallest room over the cgroup at ``path`` under ``root`` and its ancestors (a container that mounts
    its own cgroup at ``root`` finds it there, as the deepest that exists)."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    best: Optional[Tuple[int, str]] = None
    for depth in range(len(parts), -1, -1):
        where = "/".join([root] + parts[:depth])
        limit = _number(read(where + "/" + limit_file))
        if limit is None or limit >= UNLIMITED:
            continue
        used = max(0, (_number(read(where + "/" + usage_file)) or 0) - _inactive_file(read(where + "/memory.stat")))
        room = (max(0, limit - used), "cgroup %s %s - %s of %s" % (version, limit_file, usage_file, where))
        best = room if best is None or room[0] < best[0] else best
    return best


def _number(text: Optional[str]) -> Optional[int]:
    word = (text or "").strip()
    return int(word) if word.isdigit() else None


def _inactive_file(text: Optional[str]) -> int:
    """Reclaimable page cache in a memory.stat text (v2 ``inactive_file``, v1 ``total_inactive_file``)."""
    found = {}
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] in ("inactive_file", "total_inactive_file") and fields[1].isdigit():
            found[fields[0]] = int(fields[1])
    return found.get("total_inactive_file", found.get("inactive_file", 0))


# --- the peak ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PeakEstimate:
    """A plan's memory: ``resident`` for its life (buffers, expected values), plus the larger of the copies
    made while ``loading`` and those a run makes (``running``); each item ``(what, bytes)``."""

    resident: Items
    loading: Items
    running: Items

    @property
    def total(self) -> int:
        return _sum(self.resident) + max(_sum(self.loading), _sum(self.running))

    def largest(self, count: int = 3) -> List[Tuple[str, int]]:
        """The ``count`` largest items, largest first."""
        items = [i for i in self.resident + self.loading + self.running if i[1] > 0]
        return sorted(items, key=lambda item: -item[1])[:count]

    def summary(self) -> str:
        """``16.0 GiB (buffers and held values 16.0 GiB, loading 0 B, a run's copies 64.0 MiB)``."""
        return "%s (buffers and held values %s, loading %s, a run's copies %s)" % (
            format_size(self.total),
            format_size(_sum(self.resident)),
            format_size(_sum(self.loading)),
            format_size(_sum(self.running)),
        )


def _sum(items: Items) -> int:
    return sum(n for _, n in items)


def plan_peak(
    doc: Mapping[str, Any], *, held: int = 0, npy_in_memory: bool = True, copies: Iterable[str] = ()
) -> PeakEstimate:
    """The peak of plan document ``doc``, from its declarations alone (a malformed declaration, or a buffer
    over data.MAX_BUFFER_BYTES, counts 0: the plan reader refuses it by name before allocating it).

    ``held``: bytes of a bundle's entries in memory while it loads; ``npy_in_memory``: ``.npy`` inits are read
    whole before being copied in (a plan's folder; a bundle reads them into their buffers or holds them in
    ``held``); ``copies``: the COPY_* a run makes."""
    buffers = doc.get("buffers") if isinstance(doc.get("buffers"), dict) else {}
    sizes = {name: _buffer_bytes(spec) for name, spec in buffers.items()}
    resident = [
        ("buffer %r %s" % (name, _shape_text(spec)), sizes[name])
        for name, spec in buffers.items()
        if isinstance(spec, dict) and "view_of" not in spec
    ]
    packing = [(_init_copy(spec, npy_in_memory) * sizes[name], name) for name, spec in buffers.items()]
    expect = doc.get("expect") if isinstance(doc.get("expect"), dict) else {}
    verify = []
    for name, e in expect.items():
        count = _elements(buffers.get(name))
        if isinstance(e, dict) and type(e.get("count")) is int and 0 <= e["count"] <= count:
            count = e["count"]
        resident.append(("expected values of %r" % name, count * PY_VALUE_BYTES))
        if npy_in_memory and isinstance(e, dict) and "npy" in e:
            packing.append((sizes.get(name, 0), "expect.%s.npy" % name))
        verify.append((_elements(buffers.get(name)) * VERIFY_BYTES_PER_ELEMENT, name))
    loading = [("bundle entries held while loading", held)] if held else []
    if packing and max(packing)[0] > 0:
        loading.append(("init data of %r, packed before its copy" % max(packing)[1], max(packing)[0]))
    running = _run_copies(buffers, sizes, set(copies), max(verify) if verify else (0, ""))
    return PeakEstimate(tuple(resident), tuple(loading), tuple(running))


def _run_copies(
    buffers: Mapping[str, Any], sizes: Mapping[str, int], copies: FrozenSet[str], verify: Tuple[int, str]
) -> List[Tuple[str, int]]:
    def flagged(flag: str) -> List[str]:
        return [n for n, spec in buffers.items() if isinstance(spec, dict) and spec.get(flag) is True]

    running = []
    if COPY_INPUTS in copies:
        running += [("input file for %r" % n, sizes[n]) for n in flagged("input")]
    if COPY_OUTPUTS in copies:
        running += [("returned copy of output %r" % n, sizes[n]) for n in flagged("output")]
    if COPY_VERIFY in copies and verify[0]:
        running.append(("checking %r against its expected values" % verify[1], verify[0]))
    return running


def _elements(spec: Any) -> int:
    shape = spec.get("shape") if isinstance(spec, dict) else None
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        return 0
    count = 1
    for d in shape:
        count *= d
    return count


def _buffer_bytes(spec: Any) -> int:
    if not isinstance(spec, dict):
        return 0
    try:
        itemsize = to_dtype(spec.get("dtype", "float32")).itemsize if isinstance(spec.get("dtype", ""), str) else 0
    except SvodError:
        return 0
    nbytes = _elements(spec) * itemsize
    return nbytes if nbytes <= MAX_BUFFER_BYTES else 0  # over the per-buffer cap: refused by its JSON path


def _shape_text(spec: Mapping[str, Any]) -> str:
    return "(%s %s)" % (spec.get("dtype", "float32"), spec.get("shape"))


def _init_copy(spec: Any, npy_in_memory: bool) -> int:
    """How many copies of a buffer its init makes before it is copied in (arange and random pack chunks, then
    join them: two)."""
    if not isinstance(spec, dict) or "view_of" in spec:
        return 0
    init = spec.get("init", "zeros")
    if init == "zeros":
        return 0
    if init == "arange" or (isinstance(init, dict) and "random" in init):
        return 2
    if isinstance(init, dict) and "npy" in init:
        return 1 if npy_in_memory else 0
    return 1


def bundle_held_bytes(bundle: Any) -> int:
    """Bytes of an open bundle's entries held in memory while its plan loads: those read already, and the
    deferred ones no buffer reads straight into itself (expected outputs, read whole when checked)."""
    into_buffers = set()
    for name, spec in (bundle.plan.get("buffers") or {}).items():
        init = spec.get("init") if isinstance(spec, dict) else None
        if isinstance(init, dict) and isinstance(init.get("npy"), str):
            try:
                into_buffers.add(plan_file_entry(init["npy"], "buffers.%s.init.npy" % name))
            except SvodError:
                continue  # the plan reader names it
    held = sum(len(data) for data in bundle.entries.values())
    return held + sum(info.file_size for name, (info, _) in bundle.deferred.items() if name not in into_buffers)


# --- checks ------------------------------------------------------------------------------------------------------


def check_peak(peak: PeakEstimate, budget: MemoryBudget, what: str) -> None:
    """MemoryBudgetError when ``peak`` exceeds ``budget``, naming both, the budget's source and the largest items."""
    if budget.limit is None or peak.total <= budget.limit:
        return
    largest = ", ".join("%s %s" % (name, format_size(n)) for name, n in peak.largest())
    raise MemoryBudgetError(
        "%s needs about %s at its peak, over the memory budget of %s (%s); largest: %s; nothing was allocated "
        "(set the budget with --max-memory SIZE or %s)"
        % (what, peak.summary(), format_size(budget.limit), budget.source, largest, MAX_MEMORY_ENV)
    )


def check_document(doc: Mapping[str, Any], budget: MemoryBudget, what: str, copies: Iterable[str]) -> PeakEstimate:
    """A plan document's peak (its ``.npy`` files read whole from its folder), checked against ``budget``."""
    peak = plan_peak(doc, copies=copies)
    check_peak(peak, budget, what)
    return peak


def check_bundle(bundle: Any, budget: MemoryBudget, copies: Iterable[str]) -> PeakEstimate:
    """An open bundle's peak (its entries held in memory counted), checked against ``budget``."""
    peak = plan_peak(bundle.plan, held=bundle_held_bytes(bundle), npy_in_memory=False, copies=copies)
    check_peak(peak, budget, bundle.path)
    return peak


def bundle_limits(budget: MemoryBudget, limits: Limits = DEFAULT_LIMITS) -> Limits:
    """``limits`` with the total a bundle's entries may declare cut to the budget: entries are read into memory
    (or into buffers) before the plan they hold can be estimated, so more than the budget is refused unread."""
    if budget.limit is None or budget.limit >= limits.max_total_bytes:
        return limits
    source = "the memory budget, %s: the entries would be read before the plan's peak is known" % budget.source
    return Limits(limits.max_entries, limits.max_entry_bytes, budget.limit, limits.max_manifest_bytes, source)


def build_warning(doc: Mapping[str, Any], budget: Optional[MemoryBudget] = None) -> Optional[str]:
    """A warning when plan ``doc``'s peak (run by ``run``, its check included) exceeds this host's budget;
    None when it fits or there is no figure."""
    budget = budget if budget is not None else memory_budget()
    peak = plan_peak(doc, npy_in_memory=False, copies=(COPY_VERIFY,))
    if budget.limit is None or peak.total <= budget.limit:
        return None
    largest = ", ".join("%s %s" % (name, format_size(n)) for name, n in peak.largest())
    return (
        "warning: the model needs about %s at its peak, more than this host's memory budget of %s (%s); "
        % (
            format_size(peak.total),
            format_size(budget.limit),
            budget.source,
        )
        + "run refuses it on a host like this one; largest: %s" % largest
    )


def run_memory(max_memory: Optional[str], inputs: List[str]) -> Dict[str, Any]:
    """``run``'s memory options for load_plan: its ``--max-memory`` and the copies it makes (the ``--input``
    files it reads, or the check against the expected values it runs when the inputs are the examples)."""
    copies = (COPY_INPUTS,) if inputs else (COPY_VERIFY,)
    return {"max_memory": memory_budget(max_memory, option="--max-memory"), "run_copies": copies}


def recording_refusal(doc: Mapping[str, Any], budget: Optional[MemoryBudget] = None) -> Optional[str]:
    """Why a build should not record plan ``doc``'s expected outputs from another runtime, or None: an output
    larger than a bundle entry may be (the bundle would be refused), or more memory than the budget for the
    model's peak plus each output twice (the runtime's result and its ``.npy`` bytes)."""
    budget = budget if budget is not None else memory_budget()
    buffers = doc.get("buffers") if isinstance(doc.get("buffers"), dict) else {}
    outputs = {n: _buffer_bytes(s) for n, s in buffers.items() if isinstance(s, dict) and s.get("output") is True}
    largest = max(outputs.items(), key=lambda item: item[1], default=("", 0))
    if largest[1] > DEFAULT_LIMITS.max_entry_bytes:
        return "output %r is %s, more than a bundle entry may hold (%s)" % (
            largest[0],
            format_size(largest[1]),
            format_size(DEFAULT_LIMITS.max_entry_bytes),
        )
    need = plan_peak(doc, npy_in_memory=False).total + 2 * sum(outputs.values())
    if budget.limit is not None and need > budget.limit:
        return "recording them needs about %s, over the memory budget of %s (%s)" % (
            format_size(need),
            format_size(budget.limit),
            budget.source,
        )
    return None


def check_build_values(
    values: Iterable[Tuple[str, Tuple[int, ...], str]],
    examples: Iterable[Tuple[str, Tuple[int, ...], str]],
    budget: Optional[MemoryBudget] = None,
) -> None:
    """Refuse, before a build allocates anything for them, a model ``value`` (name, shape, dtype) larger than a
    buffer may be (the plan could never hold it), or example inputs that do not fit this host's budget: the
    build makes each one in memory (drawn in float64, then converted) to run and record the model."""
    for name, shape, dtype in values:
        nbytes = _product(shape) * to_dtype(dtype).itemsize
        if nbytes > MAX_BUFFER_BYTES:
            raise MemoryBudgetError(
                "value %r (%s %s) needs %s, more than a buffer may hold (%s)"
                % (name, dtype, list(shape), format_size(nbytes), format_size(MAX_BUFFER_BYTES))
            )
    budget = budget if budget is not None else memory_budget()
    sized = [(name, _product(shape) * (8 + to_dtype(dtype).itemsize)) for name, shape, dtype in examples]
    need = sum(n for _, n in sized)
    if budget.limit is not None and need > budget.limit:
        largest = ", ".join("%s %s" % (name, format_size(n)) for name, n in sorted(sized, key=lambda x: -x[1])[:3])
        raise MemoryBudgetError(
            "the build makes example inputs of about %s in memory, over the memory budget of %s (%s); largest: %s; "
            "nothing was allocated (build with smaller --shape values, or set the budget with %s)"
            % (format_size(need), format_size(budget.limit), budget.source, largest, MAX_MEMORY_ENV)
        )


def _product(shape: Iterable[int]) -> int:
    """Elements of a shape in Python integers (numpy's int64 product wraps for absurd dims)."""
    count = 1
    for dim in shape:
        count *= int(dim)
    return count


def host_payload(buf: Any) -> Any:
    """A buffer's bytes without copying them when they are in host memory (a window of the mapping), else one
    copy (from a device): ``run --save`` writes an output once."""
    if getattr(buf, "on_host", False) and buf.nbytes:
        return memoryview((ctypes.c_char * buf.nbytes).from_address(buf.address)).cast("B")
    return buf.copyout()


def memory_figures_of(peak: PeakEstimate, budget: MemoryBudget) -> Dict[str, int]:
    """The figures a run report adds: the estimated peak, and the budget (-1: none)."""
    return {"peak_bytes": peak.total, "budget_bytes": budget.limit if budget.limit is not None else -1}


__all__ = [
    "COPY_INPUTS",
    "COPY_OUTPUTS",
    "COPY_VERIFY",
    "MemoryBudget",
    "PeakEstimate",
    "build_warning",
    "bundle_held_bytes",
    "bundle_limits",
    "cgroup_room",
    "check_bundle",
    "check_document",
    "check_peak",
    "format_size",
    "host_budget",
    "host_payload",
    "meminfo_available",
    "memory_budget",
    "memory_figures_of",
    "plan_peak",
    "read_text",
    "recording_refusal",
    "run_memory",
]
