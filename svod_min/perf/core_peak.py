"""One core's float32 peak, the yardstick of the ONNX bench's profile rows.

    python -m svod_min.perf.core_peak

The theoretical peak is FLOP per cycle per FMA unit x FMA units x clock:

* FLOP per cycle per unit from the vector ISA in ``/proc/cpuinfo``'s flags: an FMA of 16 float32
  lanes is 32 FLOP with ``avx512f``, of 8 lanes 16 with ``avx2`` and ``fma``, of 4 lanes 8 with
  NEON's ``asimd``; without FMA, 4 lanes of SSE2 count a multiply and an add (8 FLOP).
* FMA units: cpuinfo does not say (some AVX-512 cores have one 512-bit unit, others two), so a
  small probe (``fma_probe.c``, compiled by the project's compiler with the flags of that ISA and
  loaded like a kernel) runs 16 independent FMA chains and its rate, over the per-unit figure at
  the clock, rounded, is the count.
* The clock: the same probe's chain of dependent integer adds (one per cycle on x86-64) measures
  the clock this core runs at now, turbo included; elsewhere, or when the probe cannot be built,
  cpuinfo's ``cpu MHz`` (the nominal clock a hypervisor reports), and the row says which.

Without a compiler the peak is given for one unit, labelled so.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

#: ISA per set of flags, best first: (flags that must all be present, name, vector bytes, FLOP per lane
#: per instruction, compiler flags of the probe).
_ISAS: Tuple[Tuple[Tuple[str, ...], str, int, int, Tuple[str, ...]], ...] = (
    (("avx512f",), "AVX-512 FMA", 64, 2, ("-mavx512f", "-mfma", "-ffp-contract=fast")),
    (("avx2", "fma"), "AVX2 FMA", 32, 2, ("-mavx2", "-mfma", "-ffp-contract=fast")),
    (("asimd",), "NEON FMA", 16, 2, ("-ffp-contract=fast",)),
    (("sse2",), "SSE2 multiply + add", 16, 2, ("-msse2", "-ffp-contract=off")),
)


class Isa(NamedTuple):
    name: str
    vector_bytes: int
    flop_per_cycle_per_unit: int
    compile_flags: Tuple[str, ...]


class CorePeak(NamedTuple):
    """One core's float32 peak and how each factor was found."""

    isa: Isa
    units: int
    units_source: str
    mhz: float
    mhz_source: str
    probe_gflops: Optional[float]

    @property
    def gflops(self) -> float:
        return self.isa.flop_per_cycle_per_unit * self.units * self.mhz / 1e3

    def describe(self) -> str:
        probe = "" if self.probe_gflops is None else "; the probe's FMA loop reached %.1f GFLOP/s" % self.probe_gflops
        return "%.1f GFLOP/s = %d FLOP/cycle per unit (%s) x %d FMA unit%s (%s) x %.0f MHz (%s)%s" % (
            self.gflops,
            self.isa.flop_per_cycle_per_unit,
            self.isa.name,
            self.units,
            "" if self.units == 1 else "s",
            self.units_source,
            self.mhz,
            self.mhz_source,
            probe,
        )


def isa_of(flags: str) -> Isa:
    """The widest float32 vector ISA the flags name (a scalar fallback of one lane where none)."""
    have = set(flags.split())
    for needed, name, width, per_lane, cflags in _ISAS:
        if all(f in have for f in needed):
            return Isa(name, width, width // 4 * per_lane, cflags)
    return Isa("scalar", 4, 2, ())


def cpuinfo() -> Dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (empty where there is none)."""
    fields: Dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if not line.strip():
                    if fields:
                        break
                    continue
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_flags(info: Dict[str, str]) -> str:
    return info.get("flags") or info.get("Features") or ""


def cpuinfo_mhz(info: Dict[str, str]) -> Optional[float]:
    try:
        return float(info["cpu MHz"])
    except (KeyError, ValueError):
        return None


#: A probe's result: (FMA-loop GFLOP/s, clock MHz or None), or None when it could not be built.
ProbeResult = Optional[Tuple[float, Optional[float]]]


def run_probe(isa: Isa, seconds: float = 0.05) -> ProbeResult:
    """The probe's best of three: its FMA rate and, on x86-64, the clock; None when it cannot be built or loaded
    (no compiler, another architecture's flags)."""
    from svod_min.compiler.clang import compile_c
    from svod_min.jit_loader import load_object

    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "fma_probe.c")) as fh:
            source = fh.read()
        obj = load_object(compile_c(source, extra_flags=("-DVEC_BYTES=%d" % isa.vector_bytes,) + isa.compile_flags))
    except Exception as exc:  # a host without a compiler still gets a labelled per-unit peak
        print("core_peak: the FMA probe could not be built: %s" % str(exc).splitlines()[0], file=sys.stderr)
        return None
    fma = obj.function("svod_fma_probe", ctypes.c_double, ctypes.c_long, ctypes.POINTER(ctypes.c_float))
    clock = obj.function("svod_clock_probe", ctypes.c_long, ctypes.c_long)
    out = ctypes.c_float()
    flop_rate = _best_rate(lambda n: fma(n, ctypes.byref(out)), seconds)
    add_rate = _best_rate(lambda n: clock(n), seconds)
    return flop_rate / 1e9, (add_rate / 1e6 if add_rate > 0 else None)


def _best_rate(fn: Callable[[int], float], seconds: float) -> float:
    """Work per second of ``fn(n)`` (it returns the work done), best of three runs of about ``seconds`` of this
    thread's CPU time: on a shared host the time the thread waits for a CPU does not count against the core."""
    n, best = 1000, 0.0
    for _ in range(30):  # grow n until one call lasts a tenth of ``seconds``
        start = time.thread_time()
        done = fn(n)
        if time.thread_time() - start >= seconds / 10 or not done:
            break
        n *= 4
    n = max(1, int(n * seconds / max(time.thread_time() - start, 1e-9)))
    for _ in range(3):
        start = time.thread_time()
        done = fn(n)
        best = max(best, done / max(time.thread_time() - start, 1e-9))
    return best


def core_peak(flags: Optional[str] = None, mhz: Optional[float] = None, probe: Any = run_probe) -> CorePeak:
    """This core's peak (or that of ``flags`` at ``mhz``); ``probe(isa)`` measures the FMA rate and the clock."""
    info = cpuinfo() if flags is None or mhz is None else {}
    flags = cpu_flags(info) if flags is None else flags
    nominal = cpuinfo_mhz(info) if mhz is None else mhz
    isa = isa_of(flags)
    measured = probe(isa) if probe is not None else None
    if measured is not None and measured[1]:
        clock, clock_source = measured[1], "measured: dependent integer adds"
    elif nominal:
        clock, clock_source = nominal, "cpuinfo cpu MHz, nominal"
    else:
        clock, clock_source = 1000.0, "unknown: 1 GHz assumed"
    if measured is None:
        return CorePeak(isa, 1, "not measured: no FMA probe, one unit assumed", clock, clock_source, None)
    per_unit = isa.flop_per_cycle_per_unit * clock / 1e3
    units = max(1, int(round(measured[0] / per_unit)))
    return CorePeak(isa, units, "measured: FMA probe", clock, clock_source, measured[0])


def peak_row(peak: CorePeak) -> Dict[str, Any]:
    """The bench row stating the peak the profile rows' percentages are of."""
    return {
        "measure": "onnx: one core's float32 FMA peak: %s" % peak.describe(),
        "svod_min": round(peak.gflops, 1),
        "peer": None,
        "peer_value": None,
        "ratio": None,
        "goal": "info",
        "met": None,
    }


def main() -> int:
    print(core_peak().describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
