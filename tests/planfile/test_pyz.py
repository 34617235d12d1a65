"""The one-file runtime: ``python -m svod_min zipapp``, run by a bare interpreter, data read from the archive."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from typing import Any, List, Optional

import pytest

from svod_min.planfile.pyz import build_pyz


def _bare(cmd: List[str], tmp_path: Any) -> subprocess.CompletedProcess:
    env = {"PATH": str(tmp_path), "SVOD_OBJECT_CACHE": "0", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    return subprocess.run(cmd, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300)


def test_the_archive_holds_svod_min_pyelftools_and_a_main(pyz: str) -> None:
    with zipfile.ZipFile(pyz) as zf:
        names = zf.namelist()
    assert names[0] == "__main__.py"
    assert "svod_min/__main__.py" in names and "elftools/elf/elffile.py" in names
    assert "svod_min/kernels/prebuilt/x86_64-baseline/library.o" in names
    assert any(n.startswith("svod_min/kernels/_generated/cuda/") and n.endswith(".ptx") for n in names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyo")]
    # bytecode of the building interpreter beside each module (others fall back to the source)
    assert {n[:-1] for n in names if n.endswith(".pyc")} == {
        n for n in names if n.endswith(".py") and n != "__main__.py"
    }
    with open(pyz, "rb") as fh:
        assert fh.read(2) == b"#!"
    assert os.access(pyz, os.X_OK)


def test_the_same_sources_give_the_same_archive_and_a_pyz_rebuilds_itself(pyz: str, tmp_path: Any) -> None:
    again = str(tmp_path / "again.pyz")
    build_pyz(again)
    from_itself = str(tmp_path / "self.pyz")
    proc = _bare([sys.executable, "-I", pyz, "zipapp", "-o", from_itself], tmp_path)
    assert proc.returncode == 0, proc.stderr
    with open(pyz, "rb") as a, open(from_itself, "rb") as c:
        assert a.read() == c.read()  # a running .pyz copies its members as they are
    with zipfile.ZipFile(pyz) as a, zipfile.ZipFile(again) as b:
        assert a.namelist() == b.namelist()
        assert [i.date_time for i in a.infolist()] == [i.date_time for i in b.infolist()]
        # everything but bytecode is byte-identical; CPython 3.8 may order a code object's constants by
        # address (ASLR), so its .pyc of the same source can differ between two builds
        differ = [n for n in a.namelist() if a.read(n) != b.read(n)]
        assert [n for n in differ if not n.endswith(".pyc")] == []
        if sys.version_info >= (3, 11):
            assert differ == []


def test_default_plan_runs_on_a_bare_interpreter(pyz: str, tmp_path: Any) -> None:
    proc = _bare([sys.executable, "-I", "-S", pyz, "run", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["plan"] == "<default MLP>" and report["verify"] and all(v["ok"] for v in report["verify"])


def test_package_data_comes_from_inside_the_archive(pyz: str, tmp_path: Any) -> None:
    probe = (
        "import sys; sys.path.insert(0, %r)\n"
        "import importlib.util, os, svod_min.resources as r\n"
        "assert importlib.util.find_spec('numpy') is None  # -S: no site-packages at all\n"
        "from svod_min.kernels import variants\n"
        "assert r.in_archive() and r.archive_path() == %r\n"
        "v = variants.choose_variant()\n"
        "path = variants.object_path(v)\n"
        "assert not os.path.exists(path), path\n"
        "obj = variants.load_variant(v)\n"
        "from svod_min.kernels import library\n"
        "print(v, library.get('add', dtype='float32') is not None)\n"
    ) % (pyz, pyz)
    proc = _bare([sys.executable, "-I", "-S", "-c", probe], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("True")


def test_info_and_help_run_from_the_archive(pyz: str, tmp_path: Any) -> None:
    proc = _bare([sys.executable, "-I", pyz, "info"], tmp_path)
    assert proc.returncode == 0 and "W^X mode" in proc.stdout, proc.stderr
    proc = _bare([sys.executable, "-I", pyz, "--help"], tmp_path)
    assert proc.returncode == 0 and "build" in proc.stdout and "zipapp" in proc.stdout


def _real_python(name: str) -> Optional[str]:
    """The interpreter ``name`` on PATH runs as (a pyenv shim needs the PATH the bare runs strip), or None."""
    found = shutil.which(name)
    if found is None:
        return None
    proc = subprocess.run(
        [found, "-I", "-S", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, timeout=60
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    return proc.stdout.strip()


@pytest.mark.python_independent  # it runs python3.8 from PATH itself, whatever the env's Python is
def test_main_job_runs_on_a_bare_python38_with_the_archive_named_relatively(pyz: str, tmp_path: Any) -> None:
    # README's main job as a new user types it: `python3 svod_min.pyz run` beside the archive, no compiler.
    # Python 3.8 keeps the archive's path as typed (3.9+ make it absolute): issue 39, item 1.
    python = _real_python("python3.8")
    if python is None:
        pytest.skip("python3.8 is not on PATH (CI puts every pyenv version there)")
    app, home = tmp_path / "app", tmp_path / "home"
    for d in (app, home, tmp_path / "bin"):
        d.mkdir()
    shutil.copy(pyz, str(app / "svod_min.pyz"))
    os.chmod(str(home), 0o555)
    env = {"PATH": str(tmp_path / "bin"), "SVOD_OBJECT_CACHE": "0", "HOME": str(home), "LANG": "C.UTF-8"}

    def bare(*args: str) -> subprocess.CompletedProcess:
        cmd = [python, "-I", "-S", "svod_min.pyz", *args]
        return subprocess.run(cmd, env=env, cwd=str(app), capture_output=True, text=True, timeout=300)

    run = bare("run")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "verify y: ok" in run.stdout
    check = bare("selfcheck")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "compiling skipped: no C compiler" in check.stdout and "FAIL" not in check.stdout
    info = bare("info")
    assert info.returncode == 0, info.stdout + info.stderr
    assert "kernel library: prebuilt" in info.stdout and "compiler: none found" in info.stdout
    assert os.listdir(str(home)) == []  # root ignores the mode: nothing written is the check


_RELATIVE_ON_SYS_PATH = r"""
import os, sys
sys.path.insert(0, "svod_min.pyz")  # relative, as PYTHONPATH=svod_min.pyz or a 3.8 zipapp start leaves it
import svod_min.resources as r
from svod_min.kernels import variants
v = variants.choose_variant()
assert v is not None, "no prebuilt variant found in the archive"
member = variants.object_member(v)
os.chdir("/")  # package data is still read from the archive the package came from
assert r.exists(member) and r.read_bytes(member)[:4] == b"\x7fELF"
assert r.read_text("kernels/_generated/c/prelude.h")
print(v)
"""


def test_package_data_is_read_when_the_archive_is_on_sys_path_relatively(pyz: str, tmp_path: Any) -> None:
    shutil.copy(pyz, str(tmp_path / "svod_min.pyz"))
    proc = _bare([sys.executable, "-I", "-S", "-c", _RELATIVE_ON_SYS_PATH], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
