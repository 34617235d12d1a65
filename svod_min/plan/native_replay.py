"""Native batched replay: one foreign call runs a whole sequence of CPU kernels.

A small C runner (shipped prebuilt per architecture, ``kernels/prebuilt/<arch>-baseline/runtime.o``
from codegen, else compiled once per process through svod_min's own compiler, loader and object
cache) walks a packed table of 64-bit words:

    [fn, nargs, ncalls, core_pos, threads, arg0 .. arg{nargs-1}]   per kernel

and calls ``fn(arg0, ...)`` ``ncalls`` times, writing the invocation number
into ``arg[core_pos]`` when the kernel is ``core_id``-threaded. Threaded
kernels are spread over pthreads (resolved by the loader from libc), which
claim the invocations one at a time, as the Python path's threads do; set
``SVOD_NATIVE_THREADS=0`` to run their invocations serially instead.

Passing every argument as a 64-bit integer is ABI-correct for svod's kernels
(pointers and int32 variables only) on x86_64 and aarch64: integer arguments
travel in 64-bit registers or 8-byte stack slots, and an int32 parameter
reads the low half.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from ..config import env_flag, env_int
from ..jit_loader.rt_helpers import loaded_runtime
from ..error import NotSupportedError, SvodError

MAX_ARGS = 16
HEADER_WORDS = 5
#: How the runner calls one kernel op: ``(fn address, args, ncalls, core_pos, threads)``.
NativeEntry = Tuple[int, List[int], int, int, int]

RUNNER_C = r"""
typedef unsigned long long u64;
typedef unsigned long pthread_t;
extern int pthread_create(pthread_t*, const void*, void* (*)(void*), void*);
extern int pthread_join(pthread_t, void**);
extern int pthread_mutex_lock(void*);
extern int pthread_mutex_unlock(void*);

#define MAX_ARGS %(max_args)d
#define MAX_THREADS 64

static void call(u64 f, int n, const u64* a) {
    switch (n) {
    case 0: ((void (*)(void))f)(); break;
    case 1: ((void (*)(u64))f)(a[0]); break;
    case 2: ((void (*)(u64, u64))f)(a[0], a[1]); break;
    case 3: ((void (*)(u64, u64, u64))f)(a[0], a[1], a[2]); break;
    case 4: ((void (*)(u64, u64, u64, u64))f)(a[0], a[1], a[2], a[3]); break;
    case 5: ((void (*)(u64, u64, u64, u64, u64))f)(a[0], a[1], a[2], a[3], a[4]); break;
    case 6: ((void (*)(u64, u64, u64, u64, u64, u64))f)(a[0], a[1], a[2], a[3], a[4], a[5]); break;
    case 7: ((void (*)(u64, u64, u64, u64, u64, u64, u64))f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6]); break;
    case 8: ((void (*)(u64, u64, u64, u64, u64, u64, u64, u64))f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]); break;
    default: {
        /* 9..16 arguments: pass 16 (the callee ignores the extra stack slots, which the
           caller owns); copy first so we never read past this entry of the table */
        u64 b[16] = {0};
        for (int k = 0; k < n && k < 16; k++) b[k] = a[k];
        ((void (*)(u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64))f)(
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    }
    }
}

/* All zeros is PTHREAD_MUTEX_INITIALIZER (glibc, musl); 64 bytes hold every 64-bit Linux's mutex. */
typedef union { char bytes[64]; long long align; } mutex_t;

typedef struct {
    u64 fn; int nargs; int core_pos; long ncalls; long* next; mutex_t* lock; u64 args[MAX_ARGS];
} chunk_t;

/* The threads of a call claim core ids one at a time, so a thread on a slower CPU takes fewer
   (a mutex, not an atomic: gcc would call libgcc's outlined atomics on aarch64). */
static long claim(chunk_t* c) {
    if (!c->lock) return (*c->next)++;
    pthread_mutex_lock(c->lock);
    long i = (*c->next)++;
    pthread_mutex_unlock(c->lock);
    return i;
}

static void run_chunk(chunk_t* c) {
    for (long i = claim(c); i < c->ncalls; i = claim(c)) {
        c->args[c->core_pos] = (u64)i;
        call(c->fn, c->nargs, c->args);
    }
}

static void* chunk_thread(void* p) { run_chunk((chunk_t*)p); return 0; }

static void run_threaded(const u64* e, int nargs, long ncalls, int core_pos, int threads) {
    chunk_t chunks[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    int started[MAX_THREADS];
    long next = 0;
    mutex_t lock = {{0}};
    if (threads > ncalls) threads = (int)ncalls;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    for (int t = 0; t < threads; t++) {
        chunks[t].fn = e[0]; chunks[t].nargs = nargs; chunks[t].core_pos = core_pos;
        chunks[t].ncalls = ncalls; chunks[t].next = &next; chunks[t].lock = &lock;
        for (int k = 0; k < nargs; k++) chunks[t].args[k] = e[%(header)d + k];
        started[t] = 0;
    }
    for (int t = 1; t < threads; t++)  /* a thread that cannot start leaves its ids to the others */
        started[t] = pthread_create(&tids[t], 0, chunk_thread, &chunks[t]) == 0;
    run_chunk(&chunks[0]);
    for (int t = 1; t < threads; t++)
        if (started[t]) pthread_join(tids[t], 0);
}

/* Returns the number of kernels run. */
long svod_replay(const u64* table, long nwords, int threads) {
    long done = 0;
    const u64* p = table;
    const u64* end = table + nwords;
    while (p < end) {
        int nargs = (int)p[1];
        long ncalls = (long)p[2];
        int core_pos = (int)(long long)p[3];
        int want = (int)p[4] < threads ? (int)p[4] : threads;
        if (ncalls > 1 && core_pos >= 0 && want > 1) {
            run_threaded(p, nargs, ncalls, core_pos, want);
        } else if (ncalls > 1 && core_pos >= 0) {
            long next = 0;
            chunk_t c; c.fn = p[0]; c.nargs = nargs; c.core_pos = core_pos; c.ncalls = ncalls; c.next = &next; c.lock = 0;
            for (int k = 0; k < nargs; k++) c.args[k] = p[%(header)d + k];
            run_chunk(&c);
        } else {
            call(p[0], nargs, p + %(header)d);
        }
        p += %(header)d + nargs;
        done++;
    }
    return done;
}
""" % {"max_args": MAX_ARGS, "header": HEADER_WORDS}

_lock = threading.Lock()
_runner: Optional[object] = None
_runner_error: Optional[str] = None


def _load_runner() -> object:
    # On first use only: plans import this module, and GPU-only ones never build the runner.
    from ..jit_loader import load_object
    from ..cache.kernel_cache import compile_cached

    loaded = prebuilt_runtime(load_object)
    if loaded is None:
        loaded = load_object(compile_cached(RUNNER_C, kind="c"))
    fn = loaded.function(
        "svod_replay", ctypes.c_long, ctypes.POINTER(ctypes.c_uint64), ctypes.c_long, ctypes.c_int
    )
    return fn


def prebuilt_runtime(load: Any) -> Any:
    """The runner codegen built for this architecture, mapped once and shared with the loader's runtime
    helpers (None: compile it; SVOD_KERNELS_PREBUILT=0 too).

    Shipped with the package so that a cold start (a bundle, the one-file runtime) never waits on a
    compiler, nor needs one.
    """
    if not env_flag("SVOD_KERNELS_PREBUILT", True):
        return None
    return loaded_runtime(load)


def runner() -> object:
    """The process-wide runner function; NotSupportedError when it cannot be built."""
    global _runner, _runner_error
    with _lock:
        if _runner is None and _runner_error is None:
            try:
                _runner = _load_runner()
            except SvodError as exc:  # no compiler, hostile host...: the Python path remains
                _runner_error = str(exc).splitlines()[0]
        if _runner is None:
            raise NotSupportedError("native replay is unavailable: %s" % _runner_error)
        return _runner


def available() -> bool:
    """True when the runner can be (or has been) built; never raises."""
    try:
        runner()
        return True
    except SvodError:
        return False


def native_threads(default: int) -> int:
    """Threads for core_id kernels inside the runner: ``SVOD_NATIVE_THREADS`` (0 or 1: serial) or ``default``."""
    return max(1, env_int("SVOD_NATIVE_THREADS", default, minimum=0))


class ReplayTable:
    """A packed, in-place patchable table of kernel calls."""

    def __init__(self) -> None:
        self._words: List[int] = []
        self._array: Optional[ctypes.Array] = None

    def add(self, fn: int, args: Sequence[int], ncalls: int = 1, core_pos: int = -1, threads: int = 1 << 30) -> None:
        """Append a kernel call; ``threads`` caps the pthreads used for its core_id invocations."""
        if len(args) > MAX_ARGS:
            raise NotSupportedError("native replay supports kernels with up to %d arguments, got %d" % (MAX_ARGS, len(args)))
        self._words += [fn, len(args), ncalls, core_pos & 0xFFFFFFFFFFFFFFFF, max(1, threads)]
        self._words += [a & 0xFFFFFFFFFFFFFFFF for a in args]
        self._array = None

    def __len__(self) -> int:
        return len(self._words)

    def freeze(self) -> "ctypes.Array":
        if self._array is None:
            self._array = (ctypes.c_uint64 * max(len(self._words), 1))(*self._words)
        return self._array

    def bind(self, threads: int) -> "functools.partial":
        """A zero-argument callable replaying the table (no per-call lookups)."""
        return functools.partial(runner(), self.freeze(), len(self._words), threads)

    def run(self, threads: int) -> int:
        return self.bind(threads)()


def native_entry(address: Optional[int], bufs: Sequence[Any], vals: Sequence[int], ncalls: int,
                 core_index: Optional[int], threads: int) -> Optional[NativeEntry]:  # fmt: skip
    """How the runner would call a kernel (``address``: its program's ``native_address``).

    None when it cannot: no native entry, a buffer off the host, or more arguments than a table
    row holds (the kernel then takes the Python path).
    """
    if address is None or not all(b.on_host for b in bufs):
        return None
    args = [b.address for b in bufs] + list(vals)
    if len(args) > MAX_ARGS:
        return None
    core_pos = len(bufs) + core_index if (ncalls > 1 and core_index is not None) else -1
    return (address, args, ncalls, core_pos, threads)


def pack_segments(groups: Sequence[List[int]], entries: Mapping[int, NativeEntry], threads: int) -> Optional[List[Any]]:
    """Runs of groups whose ops all have an entry become one bound table each (one C call per replay).

    Other groups stay op-index lists for the caller to run. None when there is nothing to pack or
    the runner cannot be built.
    """
    if not entries or not available():
        return None
    segments: List[Any] = []
    table: Optional[ReplayTable] = None
    for group in groups:
        if all(i in entries for i in group):
            table = table or ReplayTable()
            for i in group:
                table.add(*entries[i])
            continue
        if table is not None:
            segments.append(table)
            table = None
        segments.append(group)
    if table is not None:
        segments.append(table)
    threads = native_threads(threads)  # bound once: a replay is then one C call per table, no lookups
    return [seg if isinstance(seg, list) else seg.bind(threads) for seg in segments]
