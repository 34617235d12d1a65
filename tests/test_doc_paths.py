"""Every ``svod_min.`` name and every checkout path that a document names is alive.

The documents: README.md, docs/**/*.md and every text file under examples/. A dotted name
(``svod_min.compiler.clang.compile_c``, ``from svod_min.kernels import get``) resolves when its
longest importable prefix imports and the rest are attributes of it; a path (``svod_min/plan/ops.py``,
``tests/kernels/``, ``templates/c/*.j2``, ``svod_min/kernels/prebuilt/<variant>/library.o``) exists,
or, as a pattern, matches at least one file.
"""

from __future__ import annotations

import glob
import importlib
import os
import re
from typing import Dict, Iterator, List, Set, Tuple

import pytest
from support.paths import REPO

#: ``svod_min.pyz`` used as a file name (the one-file runtime): written by ``-o``, or run with a command.
PYZ_FILE = re.compile(r"(?<=-o )svod_min\.pyz\b|svod_min\.pyz(?=\s+(?:run|info|selfcheck|bench)\b)")
DOTTED = re.compile(r"(?<![\w./-])svod_min(?:\.[A-Za-z_]\w*)+")
FROM_IMPORT = re.compile(r"\bfrom\s+(svod_min(?:\.\w+)*)\s+import\s+\(?\s*(\w+(?:\s*,\s*\w+)*)")
PATH = re.compile(
    r"(?<![\w./-])(?:svod_min|tests|examples|templates|codegen|docs|bench|\.ci)/(?:\{[\w.,-]+\}|[\w./<>*-])*"
)
#: An imported name that stands for any name (``from svod_min.devices.cuda import X``).
PLACEHOLDER = "X"
#: Slash-separated words that are not paths.
NOT_PATHS = {"svod_min/peer": "a ratio column of the benchmark tables: svod_min's value over the peer's"}


def documents() -> List[str]:
    """README.md, docs/**/*.md and the text files under examples/, relative to the checkout."""
    found = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md")), *sorted((REPO / "examples").glob("**/*"))]
    out = []
    for path in found:
        if not path.is_file():
            continue
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # .npy data, bytecode
            continue
        out.append(path.relative_to(REPO).as_posix())
    return out


def dotted_names(text: str) -> Set[str]:
    """The ``svod_min.`` names in ``text``, each ``from svod_min.x import a, b`` giving ``svod_min.x.a``, ..."""
    text = PYZ_FILE.sub("", text)
    names = set(DOTTED.findall(text))
    for module, imported in FROM_IMPORT.findall(text):
        names.update("%s.%s" % (module, n.strip()) for n in imported.split(",") if n.strip() != PLACEHOLDER)
    return names


def paths(text: str) -> Set[str]:
    return {p.rstrip(".") for p in PATH.findall(text) if p.rstrip(".") not in NOT_PATHS}


def resolve(name: str) -> str:
    """'' when ``name`` resolves, else why not (``needs X`` when the module imports X, not installed here)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and not exc.name.startswith("svod_min"):
                return "needs %s" % exc.name  # an optional dependency (onnx, numpy...) of an existing module
            if exc.name is None or not module.startswith(exc.name):
                return "importing %s: %s" % (module, exc)
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return "%s has no attribute %r" % (getattr(obj, "__name__", obj), attr)
            obj = getattr(obj, attr)
        return ""
    return "no module %s" % parts[0]


def expand_braces(pattern: str) -> Iterator[str]:
    m = re.search(r"\{([^{}]*)\}", pattern)
    if m is None:
        yield pattern
        return
    for choice in m.group(1).split(","):
        yield from expand_braces(pattern[: m.start()] + choice + pattern[m.end() :])


def path_exists(path: str, root: str) -> bool:
    """A plain path exists; a pattern (``*``, ``<placeholder>``, ``{a,b}``) matches a file for each choice."""
    for one in expand_braces(path):
        pattern = re.sub(r"<[^<>/]*>", "*", one)
        if not glob.glob(os.path.join(root, pattern)):
            return False
    return True


def named(kind: str) -> List[Tuple[str, str]]:
    """(name or path, the documents that name it) for every name (``kind="name"``) or path in the documents."""
    seen: Dict[str, List[str]] = {}
    for doc in documents():
        text = (REPO / doc).read_text(encoding="utf-8")
        for item in dotted_names(text) if kind == "name" else paths(text):
            seen.setdefault(item, []).append(doc)
    return sorted((item, ", ".join(docs)) for item, docs in seen.items())


NAMES, PATHS = named("name"), named("path")


@pytest.mark.parametrize("name, doc", NAMES, ids=[name for name, _ in NAMES])
def test_named_module_path_resolves(name: str, doc: str) -> None:
    why = resolve(name)
    if why.startswith("needs "):
        pytest.skip("%s: %s is not installed" % (name, why[len("needs ") :]))
    assert not why, "%s names %s: %s" % (doc, name, why)


@pytest.mark.parametrize("path, doc", PATHS, ids=[path for path, _ in PATHS])
def test_named_file_path_exists(path: str, doc: str) -> None:
    assert path_exists(path, str(REPO)), "%s names %s, which does not exist" % (doc, path)


def test_the_documents_name_paths_at_all() -> None:
    assert {"README.md", "docs/ARCHITECTURE.md", "examples/tinygrad/models.py"} <= set(documents())
    assert len(NAMES) > 10 and len(PATHS) > 50


def test_a_dead_name_or_path_fails(tmp_path) -> None:  # noqa: ANN001 - pytest's tmp_path
    doc = """Call `svod_min.compiler.clang.compile_c` (alive), `svod_min.plan_builder.PlanBuilder` (a module
    that is gone) and `svod_min.kernels.no_such_kernel`; `from svod_min.kernels import get, nothing_here`.
    Build `python -m svod_min zipapp -o svod_min.pyz`, then `python3 -I svod_min.pyz run m.svod`; see
    svod_min/plan/ops.py, svod_min/execution_plan.py, templates/c/*.j2, templates/c/*.nope,
    tests/support/{paths,nothing}.py, svod_min/kernels/prebuilt/<variant>/library.o and svod_min/peer."""
    names = dotted_names(doc)
    assert "svod_min.pyz" not in names
    dead = sorted(n for n in names if resolve(n))
    assert dead == [
        "svod_min.kernels.no_such_kernel",
        "svod_min.kernels.nothing_here",
        "svod_min.plan_builder.PlanBuilder",
    ]
    assert not resolve("svod_min.compiler.clang.compile_c") and not resolve("svod_min.kernels.get")
    assert "svod_min.pyz" in dotted_names("the module `svod_min.pyz` does not exist")  # only file uses are skipped
    assert dotted_names("from svod_min.devices.cuda import X") == {"svod_min.devices.cuda"}
    assert resolve("svod_min.pyz")
    found = paths(doc)
    assert "svod_min/peer" not in found
    missing = sorted(p for p in found if not path_exists(p, str(REPO)))
    assert missing == ["svod_min/execution_plan.py", "templates/c/*.nope", "tests/support/{paths,nothing}.py"]
