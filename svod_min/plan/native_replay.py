"""Native batched replay: one foreign call runs a whole sequence of CPU kernels.

A small C runner (shipped prebuilt per architecture, ``kernels/prebuilt/<arch>-baseline/runtime.o``
from codegen, else compiled once per process through svod_min's own compiler, loader and object
cache) walks a packed table of 64-bit words:

    [fn, nargs, ncalls, core_pos, threads, arg0 .. arg{nargs-1}]   per kernel

and calls ``fn(arg0, ...)`` ``ncalls`` times, writing the invocation number
into ``arg[core_pos]`` when the kernel is ``core_id``-threaded. Threaded
kernels are spread over the runner's worker threads (pthreads resolved by the
loader from libc; started on first use and kept for the process), which claim
the invocations one at a time, as the Python path's threads do. During a replay
idle workers poll for the next kernel (a kernel of 0.1 ms would otherwise wait
on a sleeping CPU's wake-up); between replays they sleep. ``SVOD_NATIVE_SPIN=0``
makes them sleep as soon as they find no kernel, even during a replay (each
threaded kernel then wakes them); the caller still polls for the workers' last
core ids of a kernel. Set ``SVOD_NATIVE_THREADS=0`` to run the invocations
serially instead.

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
from ..error import NotSupportedError, SvodError
from ..jit_loader.rt_helpers import loaded_runtime

MAX_ARGS = 32
HEADER_WORDS = 5
#: How the runner calls one kernel op: ``(fn address, args, ncalls, core_pos, threads)``.
NativeEntry = Tuple[int, List[int], int, int, int]

RUNNER_C = r"""
typedef unsigned long long u64;
typedef unsigned long pthread_t;
extern int pthread_create(pthread_t*, const void*, void* (*)(void*), void*);
extern int pthread_detach(pthread_t);
extern int pthread_attr_init(void*);
extern int pthread_attr_setstacksize(void*, unsigned long);
extern int pthread_attr_destroy(void*);
extern int pthread_mutex_lock(void*);
extern int pthread_mutex_trylock(void*);
extern int pthread_mutex_unlock(void*);
extern int pthread_cond_wait(void*, void*);
extern int pthread_cond_broadcast(void*);
extern int sched_yield(void);
extern int getpid(void);

#define MAX_ARGS %(max_args)d
#define MAX_THREADS 64
/* A worker's stack: what the calling thread has on Linux by default (8 MiB). Kernels keep their tiles on
   the stack (conv2d_gemm ~0.5 MiB), more than some libcs give a new thread (musl: 128 KiB). */
#define WORKER_STACK (8UL << 20)
/* Idle workers poll this many times between yields of their CPU ... */
#define SPINS_PER_YIELD 256
/* ... and sleep after this many polls without a kernel (some 0.1-0.5 ms): a long serial stretch of a
   replay, or more threads than CPUs, then costs no CPU time. */
#define SPINS_BEFORE_SLEEP (16 * SPINS_PER_YIELD)

/* Plain loads and stores with acquire/release order: no read-modify-write, so gcc never calls
   libgcc's outlined atomics on aarch64; every counter below changes under a mutex. */
#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

static void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

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
        /* 9..32 arguments: pass 32 (the callee ignores the extra stack slots, which the
           caller owns); copy first so we never read past this entry of the table */
        u64 b[32] = {0};
        for (int k = 0; k < n && k < 32; k++) b[k] = a[k];
        ((void (*)(u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64,
                   u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64))f)(
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15],
            b[16], b[17], b[18], b[19], b[20], b[21], b[22], b[23], b[24], b[25], b[26], b[27], b[28], b[29], b[30], b[31]);
    }
    }
}

/* All zeros is PTHREAD_MUTEX_INITIALIZER and PTHREAD_COND_INITIALIZER (glibc, musl); 64 bytes hold
   either on every 64-bit Linux. */
typedef union { char bytes[64]; long long align; } sync_t;

typedef struct {
    u64 fn; int nargs; int core_pos; long ncalls; long* next; sync_t* lock; u64 args[MAX_ARGS];
} chunk_t;

/* The threads of a call claim core ids one at a time, so a thread on a slower CPU takes fewer. */
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

static void chunk_of(chunk_t* c, const u64* e, long* next, sync_t* lock) {
    c->fn = e[0]; c->nargs = (int)e[1]; c->ncalls = (long)e[2]; c->core_pos = (int)(long long)e[3];
    c->next = next; c->lock = lock;
    for (int k = 0; k < c->nargs; k++) c->args[k] = e[%(header)d + k];
}

/* The process's worker threads, started on first use and kept: a thread started per kernel cost a
   wake-up of the other CPU per kernel, more than a small kernel's whole run.  One replay at a time
   owns the pool (another replay meanwhile runs its kernels serially).  While a replay runs, idle
   workers poll `gen` for the next shared kernel, for a while: then, and between replays, they sleep
   on `wake` until `wakes` changes (each replay's start, and each kernel posted while one sleeps;
   a wake-up missed in a race costs that kernel a helper, never an answer).  A replay without `spin`
   has its workers sleep as soon as they find no kernel (no wake-up at its start: they would find
   none); `polls` counts the idle polls workers made, added when they sleep, for the tests.  A worker
   joins a kernel under `claims` only while ids are left and fewer than its thread cap have joined,
   so a late worker never holds the caller up, and the caller's kernel is done when its ids are all
   claimed and `inflight` is back to 0. */
static struct {
    sync_t owner, sleep, wake, claims;
    int pid, workers, active, inflight, cap, sleepers, spin;
    long gen, next, wakes, polls;
    chunk_t job;
} pool;

static void pool_join(void) {
    chunk_t c;
    pthread_mutex_lock(&pool.claims);
    int joined = pool.next < pool.job.ncalls && pool.inflight + 1 < pool.cap;
    if (joined) {
        STORE(&pool.inflight, pool.inflight + 1);
        c = pool.job;
    }
    pthread_mutex_unlock(&pool.claims);
    if (!joined) return;
    run_chunk(&c);
    pthread_mutex_lock(&pool.claims);
    STORE(&pool.inflight, pool.inflight - 1);
    pthread_mutex_unlock(&pool.claims);
}

/* Sleeps until the next wake-up, unless a kernel came after `seen` meanwhile; counts `polled`. */
static void pool_sleep(long seen, long polled) {
    pthread_mutex_lock(&pool.sleep);
    pool.polls += polled;
    long wakes = pool.wakes;
    STORE(&pool.sleepers, pool.sleepers + 1);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);  /* pairs with pool_run's: one of the two sees the other */
    while (pool.wakes == wakes && LOAD(&pool.gen) == seen) pthread_cond_wait(&pool.wake, &pool.sleep);
    STORE(&pool.sleepers, pool.sleepers - 1);
    pthread_mutex_unlock(&pool.sleep);
}

static void pool_wake(void) {
    pthread_mutex_lock(&pool.sleep);
    pool.wakes++;
    if (pool.sleepers) pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.sleep);
}

static void* pool_worker(void* unused) {
    (void)unused;
    long seen = LOAD(&pool.gen), polled = 0;
    unsigned spins = 0;
    for (;;) {
        long gen = LOAD(&pool.gen);
        if (gen != seen) {
            seen = gen;
            spins = 0;
            pool_join();
        } else if (!LOAD(&pool.active) || !LOAD(&pool.spin) || spins >= SPINS_BEFORE_SLEEP) {
            pool_sleep(seen, polled);
            spins = 0;
            polled = 0;
        } else {
            polled++;
            if (++spins %% SPINS_PER_YIELD) relax(); else sched_yield();
        }
    }
    return 0;
}

/* Owns the pool for a replay of `threads`, starting workers it lacks; 0 when another replay owns it. */
static int pool_acquire(int threads, int spin) {
    int pid = getpid();
    if (pool.pid != pid) {  /* first use, or a child after fork(): the parent's workers are not here */
        char* bytes = (char*)&pool;
        for (unsigned long i = 0; i < sizeof(pool); i++) bytes[i] = 0;
        pool.pid = pid;
    }
    if (pthread_mutex_trylock(&pool.owner) != 0) return 0;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    sync_t attr;  /* a pthread_attr_t: 56 bytes on 64-bit glibc and musl */
    int sized = pthread_attr_init(&attr) == 0;
    if (sized && pthread_attr_setstacksize(&attr, WORKER_STACK) != 0) {
        pthread_attr_destroy(&attr);
        sized = 0;
    }
    while (pool.workers + 1 < threads) {
        pthread_t tid;
        if (pthread_create(&tid, sized ? &attr : 0, pool_worker, 0) != 0) break;  /* fewer workers: ids go to the rest */
        pthread_detach(tid);
        pool.workers++;
    }
    if (sized) pthread_attr_destroy(&attr);
    STORE(&pool.spin, spin);
    STORE(&pool.active, 1);
    if (spin) pool_wake();
    return 1;
}

static void pool_release(void) {
    STORE(&pool.active, 0);
    pthread_mutex_unlock(&pool.owner);
}

/* One kernel's core ids over the caller and up to threads - 1 workers. */
static void pool_run(const u64* e, int threads) {
    chunk_t c;
    pthread_mutex_lock(&pool.claims);
    chunk_of(&pool.job, e, &pool.next, &pool.claims);
    pool.next = 0;
    pool.cap = threads;
    STORE(&pool.inflight, 0);
    STORE(&pool.gen, pool.gen + 1);
    c = pool.job;
    pthread_mutex_unlock(&pool.claims);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (LOAD(&pool.sleepers)) pool_wake();
    run_chunk(&c);
    unsigned spins = 0;
    while (LOAD(&pool.inflight) != 0)
        if (++spins %% SPINS_PER_YIELD) relax(); else sched_yield();
}

/* The rows each hold their arguments (a row longer than MAX_ARGS would overrun chunk_t) and end
   with the table: 1 when one of them is threaded, 0 when none is, -1 when a row is malformed. */
static int check_rows(const u64* p, const u64* end) {
    int threaded = 0;
    while (p < end) {
        if (end - p < %(header)d || p[1] > MAX_ARGS || (long)(end - p) < %(header)d + (long)p[1]) return -1;
        long long core_pos = (long long)p[3];
        if (core_pos >= (long long)p[1] || core_pos < -1) return -1;
        if ((long)p[2] > 1 && core_pos >= 0 && (int)p[4] > 1) threaded = 1;
        p += %(header)d + (int)p[1];
    }
    return threaded;
}

/* This runner's row limit, for the Python side to check it against its own. */
int svod_replay_max_args(void) { return MAX_ARGS; }

/* Idle polls of the workers so far (those of a worker still polling are added when it sleeps). */
long svod_replay_polls(void) {
    if (pool.pid != getpid()) return 0;  /* no pool yet in this process */
    pthread_mutex_lock(&pool.sleep);
    long polls = pool.polls;
    pthread_mutex_unlock(&pool.sleep);
    return polls;
}

/* Returns the number of kernels run, or -1 (nothing run) for a malformed table.  `spin`: idle
   workers poll for the next kernel during the replay (1) or sleep at once (0). */
long svod_replay_spin(const u64* table, long nwords, int threads, int spin) {
    long done = 0;
    const u64* p = table;
    const u64* end = table + nwords;
    int threaded = check_rows(p, end);
    if (threaded < 0) return -1;
    int pooled = threads > 1 && threaded && pool_acquire(threads, spin);
    if (pooled && threads > pool.workers + 1) threads = pool.workers + 1;
    while (p < end) {
        int nargs = (int)p[1];
        long ncalls = (long)p[2];
        int core_pos = (int)(long long)p[3];
        int want = (int)p[4] < threads ? (int)p[4] : threads;
        if (ncalls > 1 && core_pos >= 0 && want > 1 && pooled) {
            pool_run(p, want);
        } else if (ncalls > 1 && core_pos >= 0) {
            long next = 0;
            chunk_t c;
            chunk_of(&c, p, &next, 0);
            run_chunk(&c);
        } else {
            call(p[0], nargs, p + %(header)d);
        }
        p += %(header)d + nargs;
        done++;
    }
    if (pooled) pool_release();
    return done;
}

long svod_replay(const u64* table, long nwords, int threads) { return svod_replay_spin(table, nwords, threads, 1); }
""" % {"max_args": MAX_ARGS, "header": HEADER_WORDS}  # noqa: E501 (C source, kept as written)

#: The runner's entry points this svod_min calls: a prebuilt object without them is of an older svod_min.
ENTRIES = ("svod_replay_spin", "svod_replay_polls")

_lock = threading.Lock()
_runner: Optional[Tuple[Any, Any]] = None
_runner_error: Optional[str] = None


def _load_runner() -> Tuple[Any, Any]:
    # On first use only: plans import this module, and GPU-only ones never build the runner.
    from ..cache.kernel_cache import compile_cached
    from ..jit_loader import load_object

    loaded = prebuilt_runtime(load_object)
    if loaded is None or runner_row_limit(loaded) != MAX_ARGS or not all(e in loaded.symbols for e in ENTRIES):
        loaded = load_object(compile_cached(RUNNER_C, kind="c"))  # none shipped, or one of another svod_min
    replay = loaded.function(
        "svod_replay_spin", ctypes.c_long, ctypes.POINTER(ctypes.c_uint64), ctypes.c_long, ctypes.c_int, ctypes.c_int
    )
    return replay, loaded.function("svod_replay_polls", ctypes.c_long)


def runner_row_limit(loaded: Any) -> Optional[int]:
    """The arguments per row the runner in ``loaded`` takes (None: a runner too old to say)."""
    if "svod_replay_max_args" not in loaded.symbols:
        return None
    return int(loaded.function("svod_replay_max_args", ctypes.c_int)())


def prebuilt_runtime(load: Any) -> Any:
    """The runner codegen built for this architecture, mapped once and shared with the loader's runtime
    helpers (None: compile it; SVOD_KERNELS_PREBUILT=0 too).

    Shipped with the package so that a cold start (a bundle, the one-file runtime) never waits on a
    compiler, nor needs one.
    """
    if not env_flag("SVOD_KERNELS_PREBUILT", True):
        return None
    return loaded_runtime(load)


def _entries() -> Tuple[Any, Any]:
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


def runner() -> Any:
    """The process-wide runner function ``(table, nwords, threads, spin)``;
    NotSupportedError when it cannot be built."""
    return _entries()[0]


def idle_polls() -> int:
    """How often the runner's idle workers have polled for a kernel in this process (the tests read it)."""
    return int(_entries()[1]())


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


#: The switch of the runner's idle workers: poll for the next kernel during a replay (on) or sleep at once (off).
SPIN_ENV = "SVOD_NATIVE_SPIN"


def native_spin() -> bool:
    """Whether the runner's idle workers poll for the next kernel during a replay (``SVOD_NATIVE_SPIN``, on by
    default) or sleep at once, woken for each threaded kernel."""
    return env_flag(SPIN_ENV, True)


class ReplayTable:
    """A packed, in-place patchable table of kernel calls."""

    def __init__(self) -> None:
        self._words: List[int] = []
        self._array: Optional[ctypes.Array] = None

    def add(self, fn: int, args: Sequence[int], ncalls: int = 1, core_pos: int = -1, threads: int = 1 << 30) -> None:
        """Append a kernel call; ``threads`` caps the pthreads used for its core_id invocations."""
        if len(args) > MAX_ARGS:
            raise NotSupportedError(
                "native replay supports kernels with up to %d arguments, got %d" % (MAX_ARGS, len(args))
            )
        self._words += [fn, len(args), ncalls, core_pos & 0xFFFFFFFFFFFFFFFF, max(1, threads)]
        self._words += [a & 0xFFFFFFFFFFFFFFFF for a in args]
        self._array = None

    def __len__(self) -> int:
        return len(self._words)

    def freeze(self) -> "ctypes.Array":
        if self._array is None:
            self._array = (ctypes.c_uint64 * max(len(self._words), 1))(*self._words)
        return self._array

    def bind(self, threads: int, spin: bool = True) -> "functools.partial":
        """A zero-argument callable replaying the table (no per-call lookups); ``spin``: see :func:`native_spin`.

        Its arguments are ctypes objects made here (the table's address, a c_long, two c_ints), which the runner's
        argument types pass as they are: a replay converts nothing, a third of the foreign call's cost on a tiny
        model. The pointer keeps the table alive.
        """
        table = ctypes.cast(self.freeze(), ctypes.POINTER(ctypes.c_uint64))
        words, workers, polls = ctypes.c_long(len(self._words)), ctypes.c_int(threads), ctypes.c_int(int(spin))
        return functools.partial(runner(), table, words, workers, polls)

    def run(self, threads: int, spin: bool = True) -> int:
        return self.bind(threads, spin)()


def native_entry(
    address: Optional[int],
    bufs: Sequence[Any],
    vals: Sequence[int],
    ncalls: int,
    core_index: Optional[int],
    threads: int,
) -> Optional[NativeEntry]:
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
    # bound once: a replay is then one C call per table, no lookups
    threads, spin = native_threads(threads), native_spin()
    return [seg if isinstance(seg, list) else seg.bind(threads, spin) for seg in segments]
