"""/proc/self/maps helpers for tests that check what is mapped."""

from __future__ import annotations

from typing import Optional


def mapping_perms(address: int) -> Optional[str]:
    """The permissions ("r-xp", ...) of the mapping that covers ``address``, or None.

    Containment, not a line starting at ``address``: the kernel merges adjacent mappings with equal
    permissions (two one-segment JIT images side by side) into one /proc/self/maps line.
    """
    with open("/proc/self/maps") as fh:
        for line in fh:
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= address < hi:
                return perms
    return None


def executable_at(address: int) -> bool:
    """An r-x mapping covers ``address`` (a JIT image's text; a reused freed address is rarely executable)."""
    perms = mapping_perms(address)
    return perms is not None and perms.startswith("r-x")
