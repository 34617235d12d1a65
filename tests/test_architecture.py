"""The package's structure: layer contracts (import-linter), no import cycles, no private
cross-module imports, no oversized modules, no eval/exec, no device imports inside plan code."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest

import svod_min

# static checks of the source: the same on every Python (tests/conftest.py runs them in one env of the matrix)
pytestmark = pytest.mark.python_independent

REPO = Path(__file__).resolve().parents[1]
CONTRACTS = REPO / ".importlinter"
PACKAGE = Path(svod_min.__file__).resolve().parent  # the tested copy (an installed wheel under tox)
MAX_LINES = 800
# A module over MAX_LINES names its reason here: a concept that does not split by meaning.
LONG_MODULES: Dict[str, str] = {}
# Modules above the device interface: they talk to devices only through svod_min.devices.base.
INTERFACE_USERS = ("plan", "executor", "planfile")

LINT = (
    "import sys\n"
    "from importlinter.cli import lint_imports\n"
    "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True))\n"
)


def _lint(package_parent: Path, cwd: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("importlinter")
    env = {"PYTHONPATH": str(package_parent), "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-c", LINT, str(CONTRACTS)], cwd=str(cwd), env=env, capture_output=True, text=True, timeout=300
    )


def _modules() -> Iterator[Tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def test_layer_contracts_are_kept(tmp_path: Path) -> None:
    result = _lint(PACKAGE.parent, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    contracts = CONTRACTS.read_text(encoding="utf-8").count("[importlinter:contract:")
    assert "%d kept, 0 broken" % contracts in result.stdout


def test_an_upward_import_breaks_the_contracts(tmp_path: Path) -> None:
    """The check can fail: error.py (the bottom layer) importing the plan layer is reported."""
    copy = tmp_path / "pkg" / "svod_min"
    shutil.copytree(str(PACKAGE), str(copy), ignore=shutil.ignore_patterns("__pycache__", "*.o", "*.so"))
    with open(str(copy / "error.py"), "a", encoding="utf-8") as fh:
        fh.write("\nfrom .plan import execution_plan  # deliberate upward import\n")
    result = _lint(copy.parent, tmp_path)
    assert result.returncode != 0
    assert "svod_min.error -> svod_min.plan.execution_plan" in result.stdout


def test_a_kernel_module_importing_a_lowering_breaks_the_onnx_contract(tmp_path: Path) -> None:
    """The ONNX layers can fail too: a generated-kernel module importing the lowering above it is reported."""
    copy = tmp_path / "pkg" / "svod_min"
    shutil.copytree(str(PACKAGE), str(copy), ignore=shutil.ignore_patterns("__pycache__", "*.o", "*.so"))
    with open(str(copy / "onnx" / "kernels" / "ckernel.py"), "a", encoding="utf-8") as fh:
        fh.write("\nfrom ..ops import lowering  # deliberate upward import\n")
    result = _lint(copy.parent, tmp_path)
    assert result.returncode != 0
    assert "svod_min.onnx.kernels.ckernel -> svod_min.onnx.ops.lowering" in result.stdout


def _import_graph() -> Dict[str, Set[str]]:
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("svod_min", cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def _cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    assert _cycles(_import_graph()) == []


def _private_imports(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    yield "from %s%s import %s" % ("." * node.level, node.module or "", alias.name)


def _private_attribute_uses(tree: ast.Module) -> Iterator[str]:
    """``mod._name`` where ``mod`` is a svod_min module bound by an import in this file."""
    modules: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("svod_min")):
            modules.update(a.asname or a.name for a in node.names if not a.name[:1].isupper())
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names if a.name.startswith("svod_min"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                yield "%s.%s" % (node.value.id, node.attr)


def test_no_private_cross_module_imports() -> None:
    found = []
    for module, path in _modules():
        tree = _tree(path)
        found += ["%s: %s" % (module, use) for use in _private_imports(tree)]
        found += ["%s: %s" % (module, use) for use in _private_attribute_uses(tree)]
    assert found == []


def test_modules_stay_small() -> None:
    big = {
        m: n
        for m, p in _modules()
        if "_generated" not in m
        for n in [len(p.read_text(encoding="utf-8").splitlines())]
        if n > MAX_LINES and m not in LONG_MODULES
    }
    assert big == {}, "modules over %d lines without a reason in LONG_MODULES: %s" % (MAX_LINES, big)
    assert all(reason.strip() for reason in LONG_MODULES.values())


def test_no_eval_or_exec() -> None:
    calls = []
    for module, path in _modules():
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("eval", "exec"):
                calls.append("%s:%d %s()" % (module, node.lineno, node.func.id))
    assert calls == []


def _function_imports(tree: ast.Module) -> Iterator[Tuple[int, str]]:
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                if isinstance(node, ast.ImportFrom):
                    yield node.lineno, "." * node.level + (node.module or "")
                elif isinstance(node, ast.Import):
                    yield from ((node.lineno, a.name) for a in node.names)


def test_plan_code_imports_no_device_inside_functions() -> None:
    """Plans, executor and plan files reach devices through the interface, not late imports."""
    found = []
    for module, path in _modules():
        if module.split(".")[1:2] and module.split(".")[1] in INTERFACE_USERS:
            found += [
                "%s:%d %s" % (module, line, name) for line, name in _function_imports(_tree(path)) if "devices" in name
            ]
    assert found == []


def _kind_comparisons(tree: ast.Module, kinds: Set[str]) -> Iterator[Tuple[int, str]]:
    """``x.kind == "CUDA"`` (or ``!=``, ``in (...)``) and ``hasattr(device, ...)`` / ``hasattr(dev, ...)``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left] + list(node.comparators)
            if any(isinstance(o, ast.Attribute) and o.attr == "kind" for o in operands):
                consts = [c for o in operands for c in ([o] if isinstance(o, ast.Constant) else getattr(o, "elts", []))]
                named = sorted(c.value for c in consts if isinstance(c, ast.Constant) and c.value in kinds)
                if named:
                    yield node.lineno, "compares a kind with %s" % named
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr" and node.args:
            target = node.args[0]
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name in ("dev", "device"):
                yield node.lineno, "probes a device with hasattr"


def test_only_devices_name_device_kinds() -> None:
    """Above devices/, code asks a device for its slots (program_forms, load_program...), never for its kind."""
    from svod_min.devices.spec import KNOWN_KINDS

    kinds = set(KNOWN_KINDS) | {"GPU"}
    found = []
    for module, path in _modules():
        if module.split(".")[1:2] != ["devices"]:
            found += ["%s:%d %s" % (module, line, what) for line, what in _kind_comparisons(_tree(path), kinds)]
    assert found == []


def test_kind_comparison_finder_finds_one() -> None:
    tree = ast.parse(
        "if device.spec.kind == 'CUDA': pass\nif spec.kind in ('CPU', 'X'): pass\nhasattr(dev, 'compile')\n"
    )
    assert [line for line, _ in _kind_comparisons(tree, {"CPU", "CUDA"})] == [1, 2, 3]
