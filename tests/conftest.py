from __future__ import annotations

import shutil

import pytest

HAVE_CLANG = shutil.which("clang") is not None
HAVE_GCC = shutil.which("gcc") is not None
COMPILERS = [c for c, ok in (("clang", HAVE_CLANG), ("gcc", HAVE_GCC)) if ok]

needs_clang = pytest.mark.skipif(not HAVE_CLANG, reason="clang is not installed")
needs_cc = pytest.mark.skipif(not COMPILERS, reason="no C compiler installed")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Tests that take a `cc` argument run once per installed compiler.
    if "cc" in metafunc.fixturenames:
        metafunc.parametrize("cc", COMPILERS or [pytest.param("none", marks=pytest.mark.skip("no compiler"))])
