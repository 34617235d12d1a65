from __future__ import annotations

import os
import shutil

import pytest

HAVE_CLANG = shutil.which("clang") is not None
HAVE_GCC = shutil.which("gcc") is not None
COMPILERS = [c for c, ok in (("clang", HAVE_CLANG), ("gcc", HAVE_GCC)) if ok]

needs_clang = pytest.mark.skipif(not HAVE_CLANG, reason="clang is not installed")
needs_cc = pytest.mark.skipif(not COMPILERS, reason="no C compiler installed")


@pytest.fixture(autouse=True, scope="session")
def _private_object_cache(tmp_path_factory: pytest.TempPathFactory):
    """Never let the suite write into the user's real ~/.cache."""
    import os

    old = os.environ.get("SVOD_OBJECT_CACHE_DIR")
    os.environ["SVOD_OBJECT_CACHE_DIR"] = str(tmp_path_factory.mktemp("object-cache"))
    yield
    if old is None:
        os.environ.pop("SVOD_OBJECT_CACHE_DIR", None)
    else:
        os.environ["SVOD_OBJECT_CACHE_DIR"] = old


# Tests whose subject does not change with the Python version (foreign objects against a linker and
# under qemu, the committed generated tree) run at the two ends of the tox matrix; outside tox, always.
MATRIX_MIDDLE = ("py39", "py310", "py311", "py312")


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    env = os.environ.get("TOX_ENV_NAME", "")
    if env not in MATRIX_MIDDLE:
        return
    skip = pytest.mark.skip(reason="same on every Python: runs in py38 and py313 of the tox matrix (this is %s)" % env)
    for item in items:
        if item.get_closest_marker("matrix_ends") is not None:
            item.add_marker(skip)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Tests that take a `cc` argument run once per installed compiler.
    if "cc" in metafunc.fixturenames:
        metafunc.parametrize("cc", COMPILERS or [pytest.param("none", marks=pytest.mark.skip("no compiler"))])


@pytest.fixture(scope="session")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The one-file runtime (``python -m svod_min zipapp``), built once per session from this svod_min."""
    from svod_min.planfile.pyz import build_pyz

    path = str(tmp_path_factory.mktemp("pyz") / "svod_min.pyz")
    build_pyz(path)
    return path
