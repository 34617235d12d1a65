from __future__ import annotations

import os
import re
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


# Tests marked `python_independent` check something the Python version cannot change (objects against
# a real linker, foreign code under qemu, the committed generated tree, every library kernel through
# clang, fuzz rounds over the relocator's inputs): under tox they run in ONE env of the py3X matrix,
# ONE_PYTHON_ENV (SVOD_ONE_PYTHON_ENV names another), and are skipped with that reason in the other
# py3X envs. Outside tox, and in envs named otherwise (tinygrad, onnx), they always run.
ONE_PYTHON_ENV = os.environ.get("SVOD_ONE_PYTHON_ENV") or "py313"
MATRIX_ENV = re.compile(r"py3(?:[89]|1[0-9])$")  # py38 ... py319


def pytest_configure(config: pytest.Config) -> None:
    if not MATRIX_ENV.match(ONE_PYTHON_ENV):  # a typo would skip these tests in every env
        raise pytest.UsageError(
            "SVOD_ONE_PYTHON_ENV=%r is not an env of the tox matrix (py38 ... py313)" % ONE_PYTHON_ENV
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    env = os.environ.get("TOX_ENV_NAME", "")
    if not MATRIX_ENV.match(env) or env == ONE_PYTHON_ENV:
        return
    skip = pytest.mark.skip(
        reason="same on every Python: runs in %s of the tox matrix only (this is %s)" % (ONE_PYTHON_ENV, env)
    )
    for item in items:
        if item.get_closest_marker("python_independent") is not None:
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
