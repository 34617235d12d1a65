"""The CPU backend choice (``SVOD_CPU_BACKEND``): C through a C compiler, or LLVM IR through clang.

Apart from the driver (:mod:`.clang` re-exports it) so that a CPU device can be made without
importing the compiler: a bundle of precompiled objects loads with no compile at all.
"""

from __future__ import annotations

import enum

from ..config import env_str


class CpuBackend(enum.Enum):
    """Which front end compiles CPU kernels: C via a C compiler, or LLVM IR via clang."""

    CLANG = "clang"
    LLVM = "llvm"

    @classmethod
    def from_env(cls) -> "CpuBackend":
        """``SVOD_CPU_BACKEND`` (clang|llvm); unknown values warn and fall back to CLANG."""
        raw = (env_str("SVOD_CPU_BACKEND") or "").lower()
        if not raw:
            return cls.CLANG
        for member in cls:
            if member.value == raw:
                return member
        import logging  # here: the only message of this module, and logging costs ~5 ms of a start

        logging.getLogger("svod_min.compiler.clang").warning(
            "SVOD_CPU_BACKEND=%r is not one of clang, llvm; using clang", raw
        )
        return cls.CLANG


__all__ = ["CpuBackend"]
