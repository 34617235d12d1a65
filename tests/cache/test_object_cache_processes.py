"""Processes sharing one object cache: concurrent writers and readers, writers killed mid-write (a torn
temp file never becomes an entry), and readers loading and running what they read."""

from __future__ import annotations

import ctypes
import hashlib
import os
import signal
import struct
import subprocess
import sys
import time

import pytest
from conftest import needs_cc
from support.cache_races import isolated_cache, spawn  # noqa: F401 - isolated_cache is a fixture
from support.hardening import child_env

from svod_min.cache import kernel_cache as kc
from svod_min.cache.kernel_cache import ObjectCache
from svod_min.compiler import clang
from svod_min.jit_loader import load_object

# --- multiple processes ----------------------------------------------------


_RW_WORKER = """
    import hashlib, sys
    from svod_min.cache.kernel_cache import ObjectCache
    directory, wid, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    cache = ObjectCache(directory, budget_bytes=budget)
    def payload(i):
        return hashlib.sha256(b"k%d" % i).digest() * (64 * (i + 1))
    bad = 0
    for rnd in range(25):
        for i in range(16):
            if (rnd + i + wid) % 2:
                cache.put("key-%d" % i, payload(i))
            else:
                got = cache.get("key-%d" % i)
                bad += got is not None and got != payload(i)
    print("bad=%d enabled=%s" % (bad, cache.enabled))
    sys.exit(1 if bad or not cache.enabled else 0)
"""


def _payload(i):
    return hashlib.sha256(b"k%d" % i).digest() * (64 * (i + 1))


@pytest.mark.parametrize("budget", [1 << 30, 150_000], ids=["roomy", "evicting"])
def test_concurrent_processes_share_the_cache(tmp_path, budget):
    d = str(tmp_path / "shared")
    procs = [spawn(_RW_WORKER, d, wid, budget) for wid in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, (out + err).decode()
    cache = kc.ObjectCache(d, budget_bytes=budget)
    assert cache.verify() == []
    present = 0
    for i in range(16):
        got = cache.get("key-%d" % i)
        assert got is None or got == _payload(i)
        present += got is not None
    assert present == 16 if budget == 1 << 30 else present >= 1
    assert not [n for n in os.listdir(d) if n.startswith(kc.TMP_PREFIX)]


_KILLED_WRITER = """
    import struct, sys
    from svod_min.cache.kernel_cache import ObjectCache
    cache = ObjectCache(sys.argv[1])
    gen = 0
    print("ready", flush=True)
    while True:
        gen += 1
        for i in range(3):
            cache.put("big-%d" % i, struct.pack("<Q", gen) + bytes([gen % 251]) * (6 << 20))
"""

# Writes generation 1 normally, then tears generation 2 of big-0 half-way
# through the payload write and waits to be killed: a deterministic mid-write kill.
_TORN_WRITER = """
    import os, struct, sys, time
    from svod_min.cache.kernel_cache import ObjectCache
    cache = ObjectCache(sys.argv[1])
    def payload(gen):
        return struct.pack("<Q", gen) + bytes([gen % 251]) * (6 << 20)
    for i in range(3):
        cache.put("big-%d" % i, payload(1))
    real_fdopen = os.fdopen
    class Torn:
        def __init__(self, fh): self.fh = fh
        def __enter__(self): return self
        def __exit__(self, *exc): return False
        def write(self, data):
            if len(data) > 1000:
                self.fh.write(data[: len(data) // 2])
                self.fh.flush()
                print("torn", flush=True)
                time.sleep(60)
            return self.fh.write(data)
    os.fdopen = lambda *a, **k: Torn(real_fdopen(*a, **k))
    cache.put("big-0", payload(2))
"""


def _valid_big(data):
    gen = struct.unpack_from("<Q", data)[0]
    return len(data) == 8 + (6 << 20) and data[8:] == bytes([gen % 251]) * (6 << 20)


def _kill(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    proc.stdout.close()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


def test_sigkill_mid_write_leaves_previous_entry_intact(tmp_path):
    d = str(tmp_path / "torn")
    proc = spawn(_TORN_WRITER, d)
    try:
        line = proc.stdout.readline().strip()
        assert line == b"torn", proc.stderr.read().decode()
    finally:
        _kill(proc)
    temps = [n for n in os.listdir(d) if n.startswith(kc.TMP_PREFIX)]
    assert len(temps) == 1  # the half-written file exists, under a temp name
    assert 0 < os.path.getsize(os.path.join(d, temps[0])) < kc.HEADER.size + 8 + (6 << 20)
    reader = kc.ObjectCache(d)
    for i in range(3):
        got = reader.get("big-%d" % i)
        assert got is not None and _valid_big(got)
        assert struct.unpack_from("<Q", got)[0] == 1  # generation 1 survived
    assert reader.verify() == []


def test_sigkill_at_random_points_never_yields_corrupt_entry(tmp_path):
    d = str(tmp_path / "killed")
    reader = kc.ObjectCache(d)
    for delay in (0.15, 0.33, 0.52):
        proc = spawn(_KILLED_WRITER, d)
        try:
            assert proc.stdout.readline().strip() == b"ready"
            deadline = time.time() + delay
            while time.time() < deadline:  # read while it writes
                for i in range(3):
                    got = reader.get("big-%d" % i)
                    assert got is None or _valid_big(got)
        finally:
            _kill(proc)
        for i in range(3):
            got = reader.get("big-%d" % i)
            assert got is None or _valid_big(got)
        assert reader.verify() == []
    assert any(reader.get("big-%d" % i) is not None for i in range(3))


ANSWER_SRC = "int scale = %d;\nint answer(int x) { return x * scale + 1; }\n"


_CACHE_READER = r"""
import ctypes, os, sys, time
from svod_min.cache.kernel_cache import ObjectCache
from svod_min.jit_loader import load_object

directory, stop_file, objdir = sys.argv[1], sys.argv[2], sys.argv[3]
objs = {}
for name in sorted(os.listdir(objdir)):
    with open(os.path.join(objdir, name), "rb") as fh:
        objs["obj-" + name.split(".")[0]] = (fh.read(), int(name.split(".")[0]))
cache = ObjectCache(directory)
rounds = bad = loads = fills = 0
deadline = time.time() + 60
while (not os.path.exists(stop_file) or rounds < 30) and time.time() < deadline:
    rounds += 1
    for key, (obj, scale) in objs.items():
        data = cache.get(key)
        if data is None or rounds % 7 == 0:
            cache.put(key, obj)  # fill, and keep overwriting: writers race with readers
            fills += 1
            continue
        if data != obj:
            bad += 1
            continue
        with load_object(data) as lo:  # an entry in use is loaded and run
            loads += 1
            bad += lo.function("answer", ctypes.c_int, ctypes.c_int)(3) != 3 * scale + 1
print("rounds=%d loads=%d fills=%d bad=%d enabled=%s" % (rounds, loads, fills, bad, cache.enabled))
sys.exit(1 if bad or not cache.enabled else 0)
"""


# Fills the cache like the readers, then tears a write of one of their keys half-way
# and waits for SIGKILL: a kill that is guaranteed to land mid-write.
_CACHE_VICTIM = r"""
import os, sys, time
from svod_min.cache.kernel_cache import ObjectCache

directory, objdir = sys.argv[1], sys.argv[2]
cache = ObjectCache(directory)
names = sorted(os.listdir(objdir))
for name in names:
    with open(os.path.join(objdir, name), "rb") as fh:
        cache.put("obj-" + name.split(".")[0], fh.read())
real_fdopen = os.fdopen
class Torn:
    def __init__(self, fh): self.fh = fh
    def __enter__(self): return self
    def __exit__(self, *exc): return False
    def write(self, data):
        if len(data) > 100:
            self.fh.write(data[: len(data) // 2])
            self.fh.flush()
            print("torn", flush=True)
            time.sleep(120)
        return self.fh.write(data)
os.fdopen = lambda *a, **k: Torn(real_fdopen(*a, **k))
with open(os.path.join(objdir, names[0]), "rb") as fh:
    cache.put("obj-" + names[0].split(".")[0], fh.read() + b"\0" * 4096)
"""


@needs_cc
def test_four_processes_share_one_object_cache_while_one_is_killed_mid_write(tmp_path) -> None:
    """test_kernel_cache.py covers 4 concurrent writers and a lone SIGKILLed writer; this runs
    both at once, with real objects that the readers load and execute from the cache."""
    directory, objdir, stop = tmp_path / "cache", tmp_path / "objs", tmp_path / "stop"
    objdir.mkdir()
    for scale in (2, 3, 5, 7, 11, 13):
        (objdir / ("%d.o" % scale)).write_bytes(clang.compile_c(ANSWER_SRC % scale))
    env = child_env()
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", _CACHE_READER, str(directory), str(stop), str(objdir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for _ in range(3)
    ]
    victim = subprocess.Popen(
        [sys.executable, "-c", _CACHE_VICTIM, str(directory), str(objdir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        line = victim.stdout.readline().strip()
        assert line == b"torn", victim.stderr.read().decode()
        temps = [n for n in os.listdir(directory) if n.startswith(".svodtmp-")]
        assert temps, "the victim's half-written temp file should exist"
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        assert victim.returncode == -signal.SIGKILL
        time.sleep(0.3)  # readers keep going after the kill
        stop.write_text("stop")
        for p in readers:
            out, err = p.communicate(timeout=90)
            assert p.returncode == 0, (out + err).decode()
            assert b"bad=0" in out and b"loads=0" not in out, out
            print("cache reader:", out.decode().strip())
    finally:
        for p in readers + [victim]:
            if p.poll() is None:
                p.kill()
                p.wait()
            for stream in (p.stdout, p.stderr):
                if stream:
                    stream.close()
    cache = ObjectCache(str(directory))
    assert cache.verify() == []
    for scale in (2, 3, 5, 7, 11, 13):
        data = cache.get("obj-%d" % scale)
        assert data == (objdir / ("%d.o" % scale)).read_bytes()
        with load_object(data) as lo:
            assert lo.function("answer", ctypes.c_int, ctypes.c_int)(3) == 3 * scale + 1
