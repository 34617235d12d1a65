"""Compile targets of precompiled kernel objects, and the one this host runs best.

A target is an instruction-set level that objects are built for ahead of time
(``python -m svod_min build``) and chosen from at run time without a compiler:
the most specific target whose CPU features this host has wins. Features come
from ``/proc/cpuinfo`` (x86 ``flags``, arm ``Features``), or from ``AT_HWCAP``
through ``getauxval`` where ``/proc`` is not mounted. ``SVOD_TARGET`` forces one.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Optional, Tuple

from ..config import env_str
from ..error import ConfigError
from ..jit_loader.arch import host_arch, read_cpu_flags

TARGET_ENV = "SVOD_TARGET"
CPUINFO = "/proc/cpuinfo"

#: ELF ``e_machine`` numbers of the architectures targets exist for.
EM_X86_64, EM_AARCH64, EM_PPC64, EM_RISCV, EM_LOONGARCH = 62, 183, 21, 243, 258

_X86_V2 = ("cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3")
_X86_V3 = _X86_V2 + ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave")
_X86_V4 = _X86_V3 + ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")


@dataclass(frozen=True)
class Target:
    """One target: the architecture, its ELF machine, the CPU features it needs, and how to compile for it."""

    name: str
    arch: str
    elf_machine: int
    requires: FrozenSet[str]
    priority: int  # among the targets of one arch, higher is more specific
    isa_flags: Tuple[str, ...]  # the instruction set (gcc and clang spell these the same way)
    triple: str

    def compile_flags(self, compiler_family: str, compiler_arch: str) -> Optional[List[str]]:
        """Flags that make ``compiler_family`` (targeting ``compiler_arch``) build for this target; None: it cannot."""
        if compiler_family == "clang":
            return ["--target=%s" % self.triple, *self.isa_flags]
        if compiler_arch == self.arch:  # gcc builds for its own architecture only
            return list(self.isa_flags)
        return None


TARGETS: Dict[str, Target] = {
    t.name: t
    for t in (
        Target("x86_64", "x86_64", EM_X86_64, frozenset(), 0, ("-march=x86-64",), "x86_64-linux-gnu"),
        Target("x86_64-v3", "x86_64", EM_X86_64, frozenset(_X86_V3), 3, ("-march=x86-64-v3",), "x86_64-linux-gnu"),
        Target("x86_64-v4", "x86_64", EM_X86_64, frozenset(_X86_V4), 4, ("-march=x86-64-v4",), "x86_64-linux-gnu"),
        Target("aarch64", "aarch64", EM_AARCH64, frozenset(), 0, ("-march=armv8-a",), "aarch64-linux-gnu"),
        Target("riscv64", "riscv64", EM_RISCV, frozenset(), 0, ("-march=rv64gc", "-mabi=lp64d"), "riscv64-linux-gnu"),
        Target("ppc64le", "ppc64le", EM_PPC64, frozenset(), 0, ("-mcpu=power8",), "powerpc64le-linux-gnu"),
        Target(
            "loongarch64", "loongarch64", EM_LOONGARCH, frozenset(), 0, ("-march=loongarch64",), "loongarch64-linux-gnu"
        ),
    )
}

#: What a target name may look like (names this svod_min does not know are kept, never chosen).
TARGET_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")

_lock = threading.Lock()
_features: Optional[FrozenSet[str]] = None

# AT_HWCAP bits of arm64 Linux (asm/hwcap.h) that name cpuinfo features; x86 needs cpuinfo.
_AT_HWCAP = 16
_ARM64_HWCAP = {
    0: "fp",
    1: "asimd",
    3: "aes",
    4: "pmull",
    5: "sha1",
    6: "sha2",
    7: "crc32",
    8: "atomics",
    9: "fphp",
    10: "asimdhp",
    20: "asimddp",
    22: "sve",
}


def cpu_features(path: str = CPUINFO) -> FrozenSet[str]:
    """The CPU's feature flags (x86 ``flags`` / arm ``Features``), read once; ``AT_HWCAP`` without /proc."""
    global _features
    if path != CPUINFO:
        return _read_cpuinfo(path) or frozenset()
    with _lock:
        if _features is None:
            found = _read_cpuinfo(path)
            _features = found if found is not None else _hwcap_features()
        return _features


def _read_cpuinfo(path: str) -> Optional[FrozenSet[str]]:
    return read_cpu_flags(path)


def _hwcap_features() -> FrozenSet[str]:
    """arm64 features from ``getauxval(AT_HWCAP)`` (no /proc in a minimal container); empty elsewhere."""
    if host_arch() != "aarch64":
        return frozenset()
    import ctypes.util  # only here: it pulls in subprocess and shutil (~15 ms of every start)

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        getauxval = libc.getauxval
    except (OSError, AttributeError):
        return frozenset()
    getauxval.restype, getauxval.argtypes = ctypes.c_ulong, [ctypes.c_ulong]
    bits = int(getauxval(_AT_HWCAP))
    return frozenset(name for bit, name in _ARM64_HWCAP.items() if bits >> bit & 1)


def object_target_mismatch(data: bytes, target_name: str) -> Optional[str]:
    """Why ``data`` is not a relocatable object for ``target_name`` (None: it is, or the target is unknown here)."""
    target = TARGETS.get(target_name)
    if target is None:
        return None
    if len(data) < 64 or data[:4] != b"\x7fELF":
        return "not an ELF file"
    if data[4] != 2 or data[5] != 1:
        return "not a 64-bit little-endian ELF file, as target %s needs" % target_name
    e_type, e_machine = int.from_bytes(data[16:18], "little"), int.from_bytes(data[18:20], "little")
    if e_type != 1:
        return "ELF type %d is not a relocatable object (ET_REL)" % e_type
    if e_machine != target.elf_machine:
        names = {m.elf_machine: m.arch for m in TARGETS.values()}
        return "ELF machine %d (%s) does not match target %s (%s)" % (
            e_machine,
            names.get(e_machine, "unknown"),
            target_name,
            target.arch,
        )
    return None


def check_target_name(name: str) -> Target:
    """The :class:`Target` called ``name``; ConfigError naming the known ones otherwise."""
    target = TARGETS.get(name)
    if target is None:
        raise ConfigError("unknown target %r (known: %s)" % (name, ", ".join(TARGETS)))
    return target


def runnable_here(target: Target, arch: Optional[str] = None, features: Optional[FrozenSet[str]] = None) -> bool:
    """Whether this host (``arch``, ``features``) can run ``target``'s code."""
    have = cpu_features() if features is None else features
    return target.arch == (arch or host_arch()) and target.requires <= have


def host_target(arch: Optional[str] = None, features: Optional[FrozenSet[str]] = None) -> Optional[str]:
    """The most specific known target this host runs (None: svod_min knows no target for this arch)."""
    return choose_target(TARGETS, arch=arch, features=features, honour_env=False)


def choose_target(
    available: Iterable[str],
    *,
    arch: Optional[str] = None,
    features: Optional[FrozenSet[str]] = None,
    honour_env: bool = True,
) -> Optional[str]:
    """The best of ``available`` for this host, or None; ``SVOD_TARGET`` forces one (ConfigError if unusable).

    A forced target must exist in ``available`` and be of this host's architecture; its CPU features
    are the user's responsibility (that is what forcing is for: a baseline build on any x86_64).
    """
    names = list(available)
    forced = env_str(TARGET_ENV) if honour_env else None
    if forced:
        target = check_target_name(forced)
        if target.arch != (arch or host_arch()):
            raise ConfigError(
                "%s=%s is a %s target; this host is %s" % (TARGET_ENV, forced, target.arch, arch or host_arch())
            )
        return forced if forced in names else None
    fits: List[Tuple[int, str]] = [
        (TARGETS[n].priority, n) for n in names if n in TARGETS and runnable_here(TARGETS[n], arch, features)
    ]
    return max(fits)[1] if fits else None


__all__ = [
    "CPUINFO",
    "TARGETS",
    "TARGET_ENV",
    "TARGET_NAME",
    "Target",
    "check_target_name",
    "choose_target",
    "cpu_features",
    "host_target",
    "object_target_mismatch",
    "runnable_here",
]
