"""Host symbols for loaded kernels: found through dlopen/dlsym, without starting a process on glibc."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import svod_min

CHILD = r"""
import ctypes, os, subprocess, sys
def refuse(*args, **kwargs):
    raise AssertionError("a process was started: %r" % (args[:1],))
subprocess.Popen = refuse
os.fork = refuse
from svod_min.jit_loader import symbols
for name in ("expf", "memcpy", "sqrtf"):
    assert symbols.lookup(name), name
libm = ctypes.CDLL("libm.so.6")
assert symbols.lookup("cosf") == ctypes.cast(libm.cosf, ctypes.c_void_p).value
print("ok")
"""


@pytest.mark.skipif(
    not os.path.exists("/lib/x86_64-linux-gnu/libc.so.6")
    and not os.path.exists("/lib64/libc.so.6")
    and not os.path.exists("/usr/lib/libc.so.6"),
    reason="glibc sonames only",
)
def test_host_symbols_resolve_without_starting_a_process() -> None:
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(svod_min.__file__))))
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
