"""The rendered C sources of the library (package data under ``_generated/c``).

Each family file holds BEGIN/END-delimited blocks, one per entry point (its
typedefs and helpers included), after an ``#include "prelude.h"``. A
kernel's stand-alone source is the prelude followed by its block: the same
text, minus the other kernels, that the prebuilt objects were compiled from.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from typing import Dict, Optional

from .. import resources
from ..error import KernelParamError

HERE = os.path.dirname(os.path.abspath(__file__))
C_DIR = os.path.join(HERE, "_generated", "c")
_BLOCK_RE = re.compile(r"^/\* BEGIN (\w+) \*/\n.*?^/\* END \1 \*/\n", re.MULTILINE | re.DOTALL)

_lock = threading.Lock()
_files: Dict[str, str] = {}


def split_blocks(text: str) -> "OrderedDict[str, str]":
    """entry -> its BEGIN ... END block, in file order."""
    return OrderedDict((m.group(1), m.group(0)) for m in _BLOCK_RE.finditer(text))


def _read(name: str) -> str:
    with _lock:
        text = _files.get(name)
        if text is None:
            path = os.path.join(C_DIR, name)
            try:
                text = resources.read_text("kernels/_generated/c/" + name)
            except OSError as exc:
                raise KernelParamError(
                    "kernel source %s is missing (%s); regenerate with python -m codegen" % (path, exc)
                ) from None
            _files[name] = text
        return text


def prelude() -> str:
    return _read("prelude.h")


def kernel_source(family: str, entry: str) -> str:
    """Prelude + the block of ``entry``: a translation unit defining just that kernel."""
    block = find_block(_read(family + ".c"), entry)
    if block is None:
        raise KernelParamError("entry %s is not in %s.c; regenerate with python -m codegen" % (entry, family))
    return prelude() + "\n" + block


def find_block(text: str, entry: str) -> Optional[str]:
    """The BEGIN ... END block of ``entry`` in a family's text, or None (a scan for its markers: a family
    file is megabytes, and a load asks for a few of its hundreds of blocks)."""
    begin, end = "/* BEGIN %s */\n" % entry, "/* END %s */\n" % entry
    start = text.find(begin)
    while start > 0 and text[start - 1] != "\n":
        start = text.find(begin, start + 1)
    if start < 0:
        return None
    stop = text.find(end, start)
    while stop > 0 and text[stop - 1] != "\n":
        stop = text.find(end, stop + 1)
    return None if stop < 0 else text[start : stop + len(end)]


__all__ = ["C_DIR", "find_block", "kernel_source", "prelude", "split_blocks"]
