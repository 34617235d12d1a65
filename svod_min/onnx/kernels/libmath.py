"""The kernel library's math in generated kernels: one accuracy contract for exp, log, tanh, sigmoid and gelu.

The library's elementwise kernels compute these with libm-free, branch-free float functions (``svod_expf``,
``svod_logf``, ``svod_tanhf``, ``svod_sigmoidf``, ``svod_geluf``; NaN-propagating ``svod_maxf``/``svod_minf``)
whose accuracy docs/kernels.md states and tests/kernels measures. A generated kernel that calls one gets the
same definitions, taken from the library's rendered prelude (``kernels/_generated/c/prelude.h``, shipped with
the package): the same results as the library's kernels where their semantics agree, and loops the compiler
vectorises (a libm call stops that). Only the functions a kernel names are copied in, with what they call and
the types they use; a kernel that names none is unchanged. The ONNX kernels' own functions (``svod_erff``, which
the library lacks) come from ``templates/math.c.j2`` the same way.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Dict, List, Set

from ...kernels.sources import prelude

_NAME = re.compile(r"\bsvod_\w+\b")
_TYPEDEF = re.compile(r"^typedef .*\b(svod_\w+);")
_FUNCTION = re.compile(r"^static inline [^(]*\b(svod_\w+)\(")


@functools.lru_cache(maxsize=None)
def _definitions() -> Dict[str, str]:
    """The prelude's typedefs and functions in file order: name -> text with the comment before it."""
    out: Dict[str, str] = {}
    comment: List[str] = []
    lines = (prelude() + "\n" + _onnx_math()).splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        typedef, function = _TYPEDEF.match(line), _FUNCTION.match(line)
        if typedef:
            out[typedef.group(1)] = line
        elif function:
            end = _function_end(lines, i)
            out[function.group(1)] = "".join(comment + lines[i:end])
            i = end
            comment = []
            continue
        comment = comment + [line] if line.startswith(("/*", "   ")) and not line.startswith("/* ----") else []
        i += 1
    return out


def _onnx_math() -> str:
    """The ONNX kernels' own math (``templates/math.c.j2``: erf), after the library's prelude whose functions it
    calls."""
    import jinja2  # build time only, like the kernel templates

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates", "math.c.j2")
    with open(path, encoding="utf-8") as f:
        return jinja2.Template(f.read(), keep_trailing_newline=True).render()


def _function_end(lines: List[str], start: int) -> int:
    """The index after the line that closes the function starting at ``start`` (braces balance)."""
    depth, opened = 0, False
    for i in range(start, len(lines)):
        depth += lines[i].count("{") - lines[i].count("}")
        opened = opened or "{" in lines[i]
        if opened and depth == 0:
            return i + 1
    raise ValueError("unbalanced braces in the library prelude")


def library_math(body: str) -> str:
    """The library definitions ``body`` calls (directly or through each other), in the prelude's order."""
    defined = _definitions()
    wanted: Set[str] = set()
    todo = [n for n in _NAME.findall(body) if n in defined]
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        wanted.add(name)
        todo.extend(n for n in _NAME.findall(defined[name]) if n in defined and n != name)
    return "".join(text for name, text in defined.items() if name in wanted)
