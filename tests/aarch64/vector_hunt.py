"""Compare load_object with dlopen over generated vector programs (run on arm64).

    python3 tests/aarch64/vector_hunt.py [--from-source] FIRST COUNT [FLAGSET_INDEX...]

Each program (vector_progs.program(seed)) is built ``-fPIC -c`` once; the
shared library is linked from that same object, so the two sides run the same
instructions and any difference is the loader's (``--from-source`` compiles the
shared library from the source instead, as issue 19's report did). ``run`` is called three times
in a row (state kept in .bss/.data), then the object is loaded a second time
and called three times again: that second load must start from pristine data.
Each comparison runs in a forked child so a fault fails one comparison only.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import tempfile
from typing import List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vector_progs  # noqa: E402

from svod_min.jit_loader import load_object  # noqa: E402

CALL_NS = (5, 23, 40)
_PROTO = (None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)


def build(source: str, flags: Tuple[str, ...], workdir: str, from_source: bool = False) -> Tuple[bytes, str]:
    """The ``-c`` object's bytes and the path of the shared library (linked from it, or compiled anew)."""
    src, obj, lib = (os.path.join(workdir, "p" + ext) for ext in (".c", ".o", ".so"))
    with open(src, "w") as fh:
        fh.write(source)
    subprocess.run(["gcc", "-fPIC", *flags, "-c", src, "-o", obj], check=True, capture_output=True)
    shared_input = [*flags, src] if from_source else [obj]
    subprocess.run(["gcc", "-fPIC", "-shared", *shared_input, "-o", lib], check=True, capture_output=True)
    with open(obj, "rb") as fh:
        return fh.read(), lib


def _calls(fn: object) -> List[bytes]:
    out = []
    for n in CALL_NS:
        outf = (ctypes.c_float * vector_progs.OUT_FLOATS)()
        outi = (ctypes.c_int * vector_progs.OUT_INTS)()
        fn(ctypes.addressof(outf), ctypes.addressof(outi), n)  # type: ignore[operator]
        out.append(bytes(outf) + bytes(outi))
    return out


def compare_in_child(obj: bytes, lib: str) -> Optional[str]:
    """None when the loader agrees with dlopen; else what differs (or how the child died)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        message = b""
        try:
            dl = ctypes.CDLL(lib)
            dl.run.restype, dl.run.argtypes = None, list(_PROTO[1:])
            want = _calls(dl.run)
            for attempt in ("first load", "second load"):
                lo = load_object(obj)
                got = _calls(lo.function("run", *_PROTO))
                for call, (g, w) in enumerate(zip(got, want)):
                    if g != w:
                        diff = [i for i in range(0, len(g), 4) if g[i : i + 4] != w[i : i + 4]]
                        message = ("%s, call %d: words %s differ" % (attempt, call, diff[:12])).encode()
                        break
                if message:
                    break
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            message = ("exception %r" % exc).encode()
        os.write(wfd, message)
        os._exit(0)
    os.close(wfd)
    data = b""
    while True:
        chunk = os.read(rfd, 4096)
        if not chunk:
            break
        data += chunk
    os.close(rfd)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        return "child died with status %d" % status
    return data.decode() or None


def main(argv: List[str]) -> int:
    from_source = "--from-source" in argv  # the report's way: the -shared build compiled on its own
    argv = [a for a in argv if a != "--from-source"]
    first, count = int(argv[0]), int(argv[1])
    sets = [vector_progs.FLAG_SETS[int(i)] for i in argv[2:]] or list(vector_progs.FLAG_SETS)
    bad = total = 0
    with tempfile.TemporaryDirectory() as workdir:
        for seed in range(first, first + count):
            source = vector_progs.program(seed)
            for flags in sets:
                obj, lib = build(source, flags, workdir, from_source)
                total += 1
                why = compare_in_child(obj, lib)
                if why:
                    bad += 1
                    print("MISMATCH seed %d %s: %s" % (seed, " ".join(flags), why), flush=True)
    print("compared %d, mismatched %d" % (total, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
