/* A strict stand-in for libcuda.so.1 used by the CUDA tests (tests/support/cuda.py builds it) on machines
 * without a GPU.
 *
 * It exports the driver entry points svod_min binds, with the same C ABI, so the real binding code
 * (prototype table, checked calls, contexts, memory, modules, launches, graphs) runs against it. It is
 * strict where the real driver is:
 * - primary contexts are reference-counted and die on their last release (their memory, streams and
 *   everything else made in them with them); every allocation, module, stream, event, graph and graph
 *   exec is tagged with its context and refused (CUDA_ERROR_INVALID_CONTEXT) when another context is
 *   current, or none, and (CUDA_ERROR_INVALID_HANDLE) once its context died;
 * - device addresses are never host pointers: a CUdeviceptr is its backing block's address plus
 *   DEV_OFFSET (bit 55), which faults when the host dereferences it; copies and launches translate
 *   them, and refuse (INVALID_VALUE) or fault (ILLEGAL_ADDRESS, sticky) on ranges outside a live allocation;
 * - each kernel's attributes come from its PTX: parameter sizes and types, .maxntid / .reqntid, static
 *   .shared bytes; launches and graph kernel nodes are validated (zero dimensions, grid and block limits,
 *   threads vs the kernel's limit, static + dynamic shared memory vs 48 KiB or the opt-in);
 * - PTX whose .version is newer than the reported driver supports is refused
 *   (CUDA_ERROR_UNSUPPORTED_PTX_VERSION), and a .target newer than the GPU (NO_BINARY_FOR_GPU);
 * - events are NOT_READY until the work before them ran (each query lets the stream make one step of
 *   progress); elapsed time needs two completed timing events (INVALID_HANDLE for untimed or unrecorded
 *   ones, NOT_READY for pending ones);
 * - graph memcpy nodes keep their pitches within CU_DEVICE_ATTRIBUTE_MAX_PITCH; an exec's kernel node may
 *   change its function (as the real driver allows); graphs have no node cap.
 * Defaults: compute capability 9.0 and driver 13000 (an H100 with a CUDA 13.0 driver); tests pass the old
 * 8.0 / 12040 as a parametrised case. A launch whose CU_LAUNCH_PARAM_BUFFER_SIZE differs from the
 * kernel's exact parameter size (no tail padding) is refused with CUDA_ERROR_INVALID_VALUE. Work queued on
 * a stream runs as late as a GPU may run it (see "deferred streams"), and graph nodes in an order their
 * edges allow. A few kernels are emulated on the host by name so argument blobs can be checked end to end.
 *
 * Test controls: fake_configure(init_rc, version, count) (or FAKE_CUDA_DEVICES=N),
 * fake_set_compute_capability(major, minor), fake_set_mem_limit, fake_set_max_pitch,
 * fake_set_func_max_threads, fake_set_events_pending(n) / fake_complete_events() (events that stay
 * "not ready"), fake_fail_memcpy_nodes(1) (a driver without graph memcpy nodes), fake_counter(name),
 * fake_last_launch(...), fake_set_graph_order(fifo) (graph nodes run newest-ready-first by default),
 * fake_load_emulator(path) or FAKE_CUDA_EMULATOR=path (run the real kernel library's code on the host,
 * see tests/support/cuda_emu.py), fake_check_guards() (allocations whose guard zones were overwritten),
 * fake_context_refs(ordinal) (references to a device's primary context).
 *
 * Build: gcc -shared -fPIC -O1 -o libfakecuda.so fake_libcuda.c -ldl -pthread
 */
#define _GNU_SOURCE /* PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP */
#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum { OK = 0, E_VALUE = 1, E_OOM = 2, E_NOT_INIT = 3, E_NO_DEVICE = 100, E_DEVICE = 101, E_NO_BINARY = 209,
       E_CONTEXT = 201, E_PTX = 218, E_PTX_VERSION = 222, E_HANDLE = 400, E_NOT_FOUND = 500, E_NOT_READY = 600,
       E_ILLEGAL_ADDRESS = 700, E_PEER_ENABLED = 704, E_LAUNCH_FAILED = 719, E_NOT_SUPPORTED = 801 };
enum { MAX_DEVICES = 8 };

/* ---- controls and counters ---- */
static int g_init_rc = 0, g_version = 13000, g_count = 0, g_initialised = 0, g_func_max_threads = 1024;
static int g_cc_major = 9, g_cc_minor = 0;
static size_t g_mem_limit = (size_t)1 << 32, g_max_pitch = 2147483647;
static long g_set_current, g_launches, g_live_dev, g_live_host, g_live_modules, g_live_streams, g_live_events;
static long g_set_params, g_graph_launches, g_peer_enables, g_memcpy, g_pushes, g_func_set_attrs, g_memcpy_nodes;
static long g_stream_syncs, g_event_records, g_event_queries, g_event_syncs, g_ctx_deaths, g_bad_frees;
static unsigned g_last_dims[7];
static unsigned char g_last_args[512];
static size_t g_last_size;
static int g_last_extra;

static int g_configured = 0; /* fake_configure() wins over FAKE_CUDA_DEVICES */
void fake_configure(int init_rc, int version, int count) {
    g_init_rc = init_rc; g_version = version; g_count = count > MAX_DEVICES ? MAX_DEVICES : count; g_configured = 1;
}
void fake_set_compute_capability(int major, int minor) { g_cc_major = major; g_cc_minor = minor; }
void fake_set_mem_limit(size_t limit) { g_mem_limit = limit; }
void fake_set_max_pitch(size_t pitch) { g_max_pitch = pitch; }
void fake_set_func_max_threads(int n) { g_func_max_threads = n; }

long fake_counter(const char *name) {
    static const struct { const char *name; long *value; } table[] = {
        {"set_current", &g_set_current}, {"launches", &g_launches}, {"live_dev", &g_live_dev},
        {"live_host", &g_live_host}, {"live_modules", &g_live_modules}, {"live_streams", &g_live_streams},
        {"live_events", &g_live_events}, {"set_params", &g_set_params}, {"graph_launches", &g_graph_launches},
        {"peer_enables", &g_peer_enables}, {"memcpy", &g_memcpy}, {"pushes", &g_pushes},
        {"func_set_attrs", &g_func_set_attrs}, {"memcpy_nodes", &g_memcpy_nodes},
        {"stream_syncs", &g_stream_syncs}, {"event_records", &g_event_records},
        {"event_queries", &g_event_queries}, {"event_syncs", &g_event_syncs}, {"ctx_deaths", &g_ctx_deaths},
        {"bad_frees", &g_bad_frees}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(name, table[i].name)) return *table[i].value;
    return -1;
}

/* dims[7] = grid xyz, block xyz, shared; returns the argument size and copies the bytes */
size_t fake_last_launch(unsigned *dims, unsigned char *args, size_t cap, int *used_extra) {
    memcpy(dims, g_last_dims, sizeof g_last_dims);
    memcpy(args, g_last_args, g_last_size < cap ? g_last_size : cap);
    *used_extra = g_last_extra;
    return g_last_size;
}

/* ---- contexts and object tags ---- */
typedef struct Ctx { int dev, refs; long gen; } Ctx; /* a primary context: alive while refs > 0 */
static Ctx g_ctxs[MAX_DEVICES];
typedef struct { Ctx *ctx; long gen; } Tag; /* the context (and its life) an object was made in */
static __thread Ctx *g_current = NULL;
static __thread Ctx *g_stack[16];
static __thread int g_depth;

int fake_context_refs(int dev) { return dev >= 0 && dev < MAX_DEVICES ? g_ctxs[dev].refs : -1; }

#define NEED_INIT do { if (!g_initialised) return E_NOT_INIT; } while (0)
#define NEED_CTX do { NEED_INIT; if (!g_current || g_current->refs <= 0) return E_CONTEXT; } while (0)
static Tag tag_here(void) { Tag t = {g_current, g_current->gen}; return t; }
static int tag_alive(const Tag *t) { return t->ctx && t->ctx->refs > 0 && t->ctx->gen == t->gen; }
/* OK when the object lives in the current (live) context; INVALID_HANDLE once its context died. */
static CUresult check_tag(const Tag *t) {
    if (!tag_alive(t)) return E_HANDLE;
    return t->ctx == g_current ? OK : E_CONTEXT;
}
#define NEED_TAG(obj) do { NEED_CTX; CUresult tag_rc_ = check_tag(&(obj)->tag); if (tag_rc_) return tag_rc_; } while (0)

/* Streams run their work later (see "deferred streams" at the end); these enqueue or flush it. */
typedef struct Stream Stream;
typedef struct Event Event;
typedef struct Function Function;
typedef struct Exec Exec;
static void enqueue_copy(Stream *stream, void *dst, const void *src, size_t n);
static void enqueue_set(Stream *stream, void *dst, unsigned char value, size_t n);
static void enqueue_record(Stream *stream, Event *e);
static void enqueue_wait(Stream *stream, Event *e);
static CUresult flush_stream(Stream *s);
static CUresult flush_event(Event *e);
static CUresult flush_all(void);
static void context_died(Ctx *c);

/* ---- errors ---- */
static const struct { int code; const char *name, *text; } ERRORS[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult describe(CUresult code, const char **out, int want_name) {
    for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++)
        if (ERRORS[i].code == code) { *out = want_name ? ERRORS[i].name : ERRORS[i].text; return OK; }
    *out = NULL;
    return E_VALUE; /* like the real driver for an unknown code */
}
CUresult cuGetErrorName(CUresult code, const char **out) { return describe(code, out, 1); }
CUresult cuGetErrorString(CUresult code, const char **out) { return describe(code, out, 0); }

/* ---- init and devices ---- */
/* FAKE_CUDA_DEVICES=N in the environment: N devices without fake_configure (for CLI subprocess tests). */
int fake_load_emulator(const char *path);
static void *g_emu;

CUresult cuInit(unsigned flags) {
    (void)flags;
    const char *env = getenv("FAKE_CUDA_DEVICES"), *emu = getenv("FAKE_CUDA_EMULATOR");
    if (env && !g_initialised && !g_configured) g_count = atoi(env) > MAX_DEVICES ? MAX_DEVICES : atoi(env);
    if (emu && !g_emu && fake_load_emulator(emu)) return 999; /* a broken test set-up must not pass quietly */
    if (g_init_rc) return g_init_rc;
    g_initialised = 1;
    return OK;
}
CUresult cuDriverGetVersion(int *v) { *v = g_version; return OK; }
CUresult cuDeviceGetCount(int *n) { NEED_INIT; *n = g_count; return OK; }
#define NEED_DEVICE(dev) do { NEED_INIT; if ((dev) < 0 || (dev) >= g_count) return E_DEVICE; } while (0)
CUresult cuDeviceGet(int *dev, int ordinal) { NEED_DEVICE(ordinal); *dev = ordinal; return OK; }
CUresult cuDeviceGetName(char *buf, int len, int dev) { NEED_DEVICE(dev); snprintf(buf, (size_t)len, "Fake GPU %d", dev); return OK; }
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) { NEED_DEVICE(dev); *bytes = (size_t)16 << 30; return OK; }
CUresult cuDeviceComputeCapability(int *major, int *minor, int dev) {
    NEED_DEVICE(dev);
    *major = g_cc_major; *minor = g_cc_minor;
    return OK;
}
/* The most shared memory one block may opt in to: 227 KiB on 9.0 (H100), 163 KiB on 8.0 (A100), else 99 KiB. */
static int optin_shared(void) { return g_cc_major >= 9 ? 232448 : g_cc_major == 8 && g_cc_minor == 0 ? 166912 : 101376; }

CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    NEED_DEVICE(dev);
    switch (attr) {
    case 1: case 2: *v = 1024; break; /* max threads per block, block x */
    case 3: *v = 1024; break;
    case 4: *v = 64; break;
    case 5: *v = 2147483647; break;
    case 6: case 7: *v = 65535; break;
    case 8: *v = 49152; break;
    case 11: *v = (int)g_max_pitch; break;
    case 97: *v = optin_shared(); break;
    case 16: *v = g_cc_major >= 9 ? 132 : 108; break;
    case 41: *v = 1; break;
    case 75: *v = g_cc_major; break;
    case 76: *v = g_cc_minor; break;
    default: *v = 0;
    }
    return OK;
}

CUresult cuDeviceCanAccessPeer(int *can, int a, int b) { NEED_DEVICE(a); NEED_DEVICE(b); *can = a != b; return OK; }

/* ---- contexts ---- */
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    NEED_DEVICE(dev);
    Ctx *c = &g_ctxs[dev];
    c->dev = dev;
    if (c->refs++ == 0) c->gen++; /* a new life: what the previous one made is gone */
    *ctx = c;
    return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
    NEED_DEVICE(dev);
    Ctx *c = &g_ctxs[dev];
    if (c->refs <= 0) return E_CONTEXT;
    if (--c->refs == 0) context_died(c);
    return OK;
}
CUresult cuCtxSetCurrent(void *ctx) { NEED_INIT; g_current = ctx; g_set_current++; return OK; }
CUresult cuCtxGetCurrent(void **ctx) { NEED_INIT; *ctx = g_current; return OK; }
CUresult cuCtxPushCurrent_v2(void *ctx) {
    NEED_INIT;
    if (g_depth >= 16 || !ctx) return E_VALUE;
    g_stack[g_depth++] = g_current;
    g_current = ctx;
    g_pushes++;
    return OK;
}
CUresult cuCtxPopCurrent_v2(void **ctx) {
    NEED_INIT;
    if (!g_depth) return E_CONTEXT;
    if (ctx) *ctx = g_current;
    g_current = g_stack[--g_depth];
    return OK;
}
CUresult cuCtxSynchronize(void) { NEED_CTX; return flush_all(); }
static void *g_peers[MAX_DEVICES][MAX_DEVICES];
CUresult cuCtxEnablePeerAccess(void *peer, unsigned flags) {
    Ctx *p = peer;
    (void)flags;
    NEED_CTX;
    if (!p || p < g_ctxs || p >= g_ctxs + MAX_DEVICES || p->refs <= 0 || p == g_current) return E_CONTEXT;
    int a = g_current->dev, b = p->dev;
    if (g_peers[a][b]) return E_PEER_ENABLED;
    g_peers[a][b] = peer;
    g_peer_enables++;
    return OK;
}

/* ---- memory ---- */
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) { NEED_CTX; *free_bytes = *total = (size_t)16 << 30; return OK; }
/* Every allocation sits between two guard zones, so a kernel (emulated, see fake_load_emulator) that
 * writes out of bounds is caught: fake_check_guards() counts the live allocations whose guards changed.
 * Its device address is the host address of its bytes plus DEV_OFFSET: the host cannot dereference it. */
#define DEV_OFFSET 0x0080000000000000ULL
enum { GUARD = 64, GUARD_BYTE = 0xC5 };
typedef struct Alloc { struct Alloc *prev, *next; size_t n; Tag tag; } Alloc; /* fits in the front guard's place */
static Alloc g_allocs = {&g_allocs, &g_allocs, 0, {NULL, 0}};
static long g_guard_breaches;
static pthread_mutex_t g_alloc_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static unsigned char *bytes_of(const Alloc *a) { return (unsigned char *)a + GUARD; }
static CUdeviceptr address_of(const Alloc *a) { return (CUdeviceptr)(uintptr_t)bytes_of(a) + DEV_OFFSET; }
static int is_device_address(uint64_t p) { return p >= DEV_OFFSET && p - DEV_OFFSET < (1ULL << 47); }

static int guards_intact(const Alloc *a) {
    const unsigned char *front = (const unsigned char *)a + sizeof(Alloc), *back = bytes_of(a) + a->n;
    for (size_t i = 0; i < GUARD - sizeof(Alloc); i++) if (front[i] != GUARD_BYTE) return 0;
    for (size_t i = 0; i < GUARD; i++) if (back[i] != GUARD_BYTE) return 0;
    return 1;
}
long fake_check_guards(void) {
    long bad = 0;
    pthread_mutex_lock(&g_alloc_lock);
    for (const Alloc *a = g_allocs.next; a != &g_allocs; a = a->next) bad += !guards_intact(a);
    pthread_mutex_unlock(&g_alloc_lock);
    return bad + g_guard_breaches;
}

/* The live allocation holding [p, p + n), or NULL. */
static Alloc *find_alloc(CUdeviceptr p, size_t n) {
    Alloc *found = NULL;
    if (!is_device_address(p)) return NULL;
    pthread_mutex_lock(&g_alloc_lock);
    for (Alloc *a = g_allocs.next; a != &g_allocs && !found; a = a->next)
        if (p >= address_of(a) && p - address_of(a) <= a->n && n <= a->n - (p - address_of(a)) && tag_alive(&a->tag)) found = a;
    pthread_mutex_unlock(&g_alloc_lock);
    return found;
}
/* Host bytes behind device range [p, p + n) of a live allocation, or NULL (the copy is refused). */
static void *device_bytes(CUdeviceptr p, size_t n) { return find_alloc(p, n) ? (void *)(uintptr_t)(p - DEV_OFFSET) : NULL; }

static void unlink_alloc(Alloc *a) {
    g_guard_breaches += !guards_intact(a); /* a breach stays counted after the free */
    a->prev->next = a->next; a->next->prev = a->prev;
    free(a);
    g_live_dev--;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    NEED_CTX;
    if (!n) return E_VALUE;
    if (n > g_mem_limit) return E_OOM;
    Alloc *a = malloc(n + 2 * GUARD);
    if (!a) return E_OOM;
    memset(a, GUARD_BYTE, n + 2 * GUARD);
    memset(bytes_of(a), 0xAB, n); /* garbage, so zero-filling is observable */
    a->n = n;
    a->tag = tag_here();
    pthread_mutex_lock(&g_alloc_lock);
    a->prev = g_allocs.prev; a->next = &g_allocs;
    g_allocs.prev->next = a; g_allocs.prev = a;
    pthread_mutex_unlock(&g_alloc_lock);
    *p = address_of(a);
    g_live_dev++;
    return OK;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
    NEED_CTX;
    Alloc *a = find_alloc(p, 0);
    if (!a || address_of(a) != p) { g_bad_frees++; return E_VALUE; }
    if (a->tag.ctx != g_current) return E_CONTEXT;
    flush_all(); /* like the real driver, a free waits for the work in flight */
    pthread_mutex_lock(&g_alloc_lock);
    unlink_alloc(a);
    pthread_mutex_unlock(&g_alloc_lock);
    return OK;
}
CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) { (void)flags; NEED_CTX; *p = malloc(n); g_live_host++; return *p ? OK : E_OOM; }
CUresult cuMemFreeHost(void *p) { NEED_CTX; flush_all(); free(p); g_live_host--; return OK; }

/* A device range of the current context (or of one it has peer access to), as host bytes; NULL: refused. */
static void *current_bytes(CUdeviceptr p, size_t n) {
    Alloc *a = find_alloc(p, n);
    if (!a) return NULL;
    if (a->tag.ctx != g_current && !g_peers[g_current->dev][a->tag.ctx->dev]) return NULL;
    return (void *)(uintptr_t)(p - DEV_OFFSET);
}
/* The stream argument of an async call: NULL (the legacy stream) or a stream of the current context. */
static CUresult check_stream(Stream *s);

CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void *s) {
    NEED_CTX;
    CUresult rc = check_stream(s);
    void *dst = current_bytes(p, n);
    if (rc) return rc;
    if (!dst) return E_VALUE;
    enqueue_set(s, dst, v, n);
    return OK;
}

static CUresult copy(void *dst, const void *src, size_t n) {
    if (!dst || !src) return E_VALUE;
    memcpy(dst, src, n); g_memcpy++;
    return OK;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { NEED_CTX; return copy(current_bytes(d, n), s, n); }
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { NEED_CTX; return copy(d, current_bytes(s, n), n); }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { NEED_CTX; return copy(current_bytes(d, n), current_bytes(s, n), n); }
/* The synchronous copies above run at once: they do not wait for work queued on svod_min's non-blocking
 * stream (neither does the real driver). The async ones below run when their stream gets there. */
static CUresult async_copy(void *st, void *d, const void *s, size_t n) {
    NEED_CTX;
    CUresult rc = check_stream(st);
    if (rc) return rc;
    if (!d || !s) return E_VALUE;
    g_memcpy++;
    enqueue_copy(st, d, s, n);
    return OK;
}
static int is_host_address(const void *p) { return p && !is_device_address((uint64_t)(uintptr_t)p); }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, void *st) {
    NEED_CTX;
    return async_copy(st, current_bytes(d, n), is_host_address(s) ? s : NULL, n);
}
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, void *st) {
    NEED_CTX;
    return async_copy(st, is_host_address(d) ? d : NULL, current_bytes(s, n), n);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void *st) {
    NEED_CTX;
    return async_copy(st, current_bytes(d, n), current_bytes(s, n), n);
}
/* Each side in its own context; the driver stages through the host when the pair has no peer access. */
CUresult cuMemcpyPeerAsync(CUdeviceptr d, void *dc, CUdeviceptr s, void *sc, size_t n, void *st) {
    Alloc *da = find_alloc(d, n), *sa = find_alloc(s, n);
    NEED_CTX;
    if (!da || !sa || da->tag.ctx != (Ctx *)dc || sa->tag.ctx != (Ctx *)sc) return E_VALUE;
    return async_copy(st, device_bytes(d, n), device_bytes(s, n), n);
}

/* ---- streams and events ---- */
/* Events complete when their stream's work reaches them (deferred streams, below): until then cuEventQuery
 * says CUDA_ERROR_NOT_READY (and lets the stream run one queued item, as a GPU makes progress on its own).
 * On top of that, after fake_set_events_pending(n) the next n recorded events stay not ready until
 * cuEventSynchronize is called on them, or until any cuStreamSynchronize / fake_complete_events(). */
enum { EVENT_DISABLE_TIMING = 2 };
struct Event { Tag tag; unsigned flags; double t; int pending; long epoch; Stream *stream; long recorded, done; };
static double g_clock = 0.0;
static int g_events_pending;
static long g_event_epoch; /* bumped by a stream sync: every event recorded before it is complete */
void fake_set_events_pending(int n) { g_events_pending = n; }
void fake_complete_events(void) { g_event_epoch++; }
static Stream *new_stream(void);
static void free_stream(Stream *s);
static Tag *stream_tag(Stream *s);
static int step_stream(Stream *s);
static CUresult check_stream(Stream *s) { return s ? check_tag(stream_tag(s)) : OK; }

CUresult cuStreamCreate(void **s, unsigned flags) { (void)flags; NEED_CTX; *s = new_stream(); g_live_streams++; return *s ? OK : E_OOM; }
CUresult cuStreamSynchronize(void *s) {
    NEED_CTX;
    CUresult rc = check_stream(s);
    if (rc) return rc;
    g_stream_syncs++; g_event_epoch++;
    return s ? flush_stream(s) : flush_all();
}
CUresult cuStreamDestroy_v2(void *s) {
    NEED_CTX;
    CUresult rc = check_stream(s);
    if (rc) return rc;
    flush_stream(s); free_stream(s); g_live_streams--;
    return OK;
}
#define NEED_EVENT(e) do { if (!(e)) return E_HANDLE; NEED_TAG((Event *)(e)); } while (0)
CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) {
    (void)f;
    NEED_EVENT(e);
    CUresult rc = check_stream(s);
    if (rc) return rc;
    enqueue_wait(s, e);
    return OK;
}
CUresult cuEventCreate(void **e, unsigned flags) {
    NEED_CTX;
    Event *ev = calloc(1, sizeof(Event));
    ev->tag = tag_here();
    ev->flags = flags;
    *e = ev;
    g_live_events++;
    return OK;
}
CUresult cuEventRecord(void *e, void *s) {
    Event *ev = e;
    NEED_EVENT(e);
    CUresult rc = check_stream(s);
    if (rc) return rc;
    enqueue_record(s, ev);
    ev->pending = g_events_pending > 0;
    if (ev->pending) g_events_pending--;
    ev->epoch = g_event_epoch;
    g_event_records++;
    return OK;
}
static int event_complete(const Event *ev) { return ev->done >= ev->recorded && !(ev->pending && ev->epoch == g_event_epoch); }
CUresult cuEventQuery(void *e) {
    Event *ev = e;
    NEED_EVENT(e);
    g_event_queries++;
    if (event_complete(ev)) return OK;
    if (ev->done < ev->recorded && !step_stream(ev->stream)) return flush_event(ev); /* progress: one step per query */
    return E_NOT_READY;
}
CUresult cuEventSynchronize(void *e) {
    NEED_EVENT(e);
    g_event_syncs++;
    ((Event *)e)->pending = 0;
    return flush_event(e);
}
CUresult cuEventElapsedTime(float *ms, void *start, void *end) {
    Event *a = start, *b = end;
    NEED_EVENT(start);
    NEED_EVENT(end);
    if ((a->flags | b->flags) & EVENT_DISABLE_TIMING || !a->recorded || !b->recorded) return E_HANDLE;
    if (!event_complete(a) || !event_complete(b)) return E_NOT_READY;
    *ms = (float)((b->t - a->t) * 0.25);
    return OK;
}
CUresult cuEventElapsedTime_v2(float *ms, void *start, void *end) { return cuEventElapsedTime(ms, start, end); }
CUresult cuEventDestroy_v2(void *e) {
    NEED_EVENT(e);
    flush_all();
    free(e);
    g_live_events--;
    return OK;
}
CUresult cuStreamBeginCapture_v2(void *s, int mode) { (void)s; (void)mode; return E_NOT_SUPPORTED; }
CUresult cuStreamEndCapture(void *s, void **g) { (void)s; (void)g; return E_NOT_SUPPORTED; }

/* ---- modules and functions ---- */
typedef void (*EmuEntry)(const unsigned char *params);
typedef struct Module { Tag tag; char *text; int ptx_version; } Module;
/* What the driver knows of a kernel, read from its PTX: parameters (size in bytes, type letter u/s/b/f),
 * .maxntid / .reqntid, static shared bytes; plus the dynamic shared bytes it was opted in to. */
struct Function {
    char name[128]; Module *mod; int nparams; int sizes[64]; char kinds[64];
    unsigned maxntid[3], reqntid[3]; int static_shared, max_dynamic_shared; EmuEntry emu;
};

/* The host emulation of the real kernel library (tests/support/cuda_host_emu.*): once loaded, an entry that the
 * emulator exports as svod_emu_<name> runs its real CUDA C code, every thread of every block. */
static int (*g_emu_launch)(EmuEntry, const unsigned char *, const unsigned *);
int fake_load_emulator(const char *path) {
    g_emu = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!g_emu) return -1;
    *(void **)&g_emu_launch = dlsym(g_emu, "svod_emu_launch");
    return g_emu_launch ? 0 : -1;
}
static EmuEntry emulated_entry(const char *name) {
    char symbol[160];
    EmuEntry entry = NULL;
    if (!g_emu) return NULL;
    snprintf(symbol, sizeof symbol, "svod_emu_%s", name);
    *(void **)&entry = dlsym(g_emu, symbol);
    return entry;
}

static void set_log(unsigned n, const int *opts, void **vals, const char *msg) {
    for (unsigned i = 0; i < n; i++) {
        if (opts[i] != 5) continue;
        for (unsigned j = 0; j < n; j++) {
            if (opts[j] != 6) continue;
            size_t cap = (size_t)(uintptr_t)vals[j];
            snprintf((char *)vals[i], cap, "%s", msg);
            vals[j] = (void *)(uintptr_t)strlen(msg);
        }
    }
}

/* The first line starting (after blanks) with ``directive``: its text after the directive, or NULL.
 * Comment lines (//...) never start with a directive, so they are skipped. */
static const char *directive(const char *text, const char *name) {
    size_t len = strlen(name);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!strncmp(p, name, len) && isspace((unsigned char)p[len])) return p + len;
    }
    return NULL;
}

/* The highest PTX ISA version (major * 10 + minor) a driver of version ``v`` loads. */
static int max_ptx(int v) {
    static const int cuda12[] = {80, 81, 82, 83, 84, 85, 85, 86, 87, 88};
    int major = v / 1000, minor = v % 1000 / 10;
    if (major >= 13) return 90 + minor;
    if (major == 12) return cuda12[minor < 9 ? minor : 9];
    if (major == 11) return 70 + minor;
    return 63;
}

CUresult cuModuleLoadDataEx(void **mod, const void *image, unsigned n, int *opts, void **vals) {
    NEED_CTX;
    const char *text = (const char *)image, *version, *target;
    int ptx = 0, arch = 0;
    if (strstr(text, "FAKE_JIT_ERROR")) {
        set_log(n, opts, vals, "ptxas application ptx input, line 7; error   : Unknown symbol 'FAKE_JIT_ERROR'");
        return E_PTX;
    }
    if (memcmp(text, "\x7f" "ELF", 4)) { /* PTX: .version and .target as the JIT reads them */
        int major = 0, minor = 0;
        version = directive(text, ".version");
        target = directive(text, ".target");
        if (!version || sscanf(version, " %d.%d", &major, &minor) != 2 || !target) {
            set_log(n, opts, vals, "ptxas fatal   : no .version / .target directive");
            return E_PTX;
        }
        ptx = major * 10 + minor;
        if (ptx > max_ptx(g_version)) {
            set_log(n, opts, vals, "ptxas application ptx input: Unsupported .version; current version is lower");
            return E_PTX_VERSION;
        }
        if (sscanf(target, " sm_%d", &arch) == 1 && arch > g_cc_major * 10 + g_cc_minor) return E_NO_BINARY;
    }
    Module *m = calloc(1, sizeof(Module));
    m->tag = tag_here();
    m->text = strdup(memcmp(text, "\x7f" "ELF", 4) ? text : "");
    m->ptx_version = ptx;
    *mod = m;
    g_live_modules++;
    return OK;
}

CUresult cuModuleUnload(void *mod) {
    Module *m = mod;
    if (!m) return E_HANDLE;
    NEED_TAG(m);
    flush_all();
    free(m->text);
    m->text = NULL; /* its Functions (leaked, tiny) must not be used any more: their module is gone */
    m->tag.ctx = NULL;
    g_live_modules--;
    return OK;
}

static const char *skip_blank(const char *p) { while (isspace((unsigned char)*p)) p++; return p; }

static int parse_params(const char *open, const char *close, Function *f) {
    const char *p = open;
    while (p < close) {
        const char *q = strstr(p, ".param");
        if (!q || q > close) break;
        q = skip_blank(q + 6);
        if (!strncmp(q, ".align", 6)) { q += 6; while (isspace((unsigned char)*q) || isdigit((unsigned char)*q)) q++; }
        if (*q++ != '.') return -1;
        char kind = *q++; /* u, s, b, f */
        int bits = atoi(q), count = 1;
        if (!strchr("usbf", kind) || bits % 8) return -1;
        while (isdigit((unsigned char)*q)) q++;
        q = skip_blank(q);
        if (!strncmp(q, ".ptr", 4)) { /* .ptr [.space] [.align N] */
            q = skip_blank(q + 4);
            if (*q == '.' && strncmp(q, ".align", 6)) { while (*q && !isspace((unsigned char)*q)) q++; q = skip_blank(q); }
            if (!strncmp(q, ".align", 6)) { q += 6; while (isspace((unsigned char)*q) || isdigit((unsigned char)*q)) q++; }
        }
        while (isalnum((unsigned char)*q) || *q == '_' || *q == '$' || *q == '%') q++;
        if (*q == '[') count = atoi(q + 1);
        if (f->nparams < 64) { f->kinds[f->nparams] = kind; f->sizes[f->nparams++] = bits / 8 * count; }
        p = q;
    }
    return 0;
}

static void parse_ntid(const char *p, unsigned *xyz) {
    xyz[0] = xyz[1] = xyz[2] = 1;
    sscanf(p, " %u , %u , %u", &xyz[0], &xyz[1], &xyz[2]);
}

/* Performance directives between the parameter list and the body: .maxntid, .reqntid (others ignored). */
static const char *parse_directives(const char *p, Function *f) {
    while (*(p = skip_blank(p)) == '.') {
        if (!strncmp(p, ".maxntid", 8)) parse_ntid(p + 8, f->maxntid);
        else if (!strncmp(p, ".reqntid", 8)) parse_ntid(p + 8, f->reqntid);
        while (*p && *p != '\n' && *p != '{') p++;
    }
    return p;
}

/* Static .shared bytes declared in the body {...} that starts at ``p`` (dynamic .extern ones are 0). */
static int static_shared(const char *p) {
    int depth = 0, total = 0;
    if (*p != '{') return 0;
    for (; *p; p++) {
        if (*p == '{') depth++;
        else if (*p == '}' && --depth == 0) break;
        else if (*p == '\n') {
            const char *q = skip_blank(p + 1);
            unsigned align = 1, bits = 8, count = 1;
            if (strncmp(q, ".shared", 7) || !isspace((unsigned char)q[7])) continue;
            q = skip_blank(q + 7);
            if (sscanf(q, ".align %u", &align) == 1) { q = skip_blank(q + 6); while (isdigit((unsigned char)*q)) q++; q = skip_blank(q); }
            if (q[0] == '.' && strchr("usbf", q[1])) bits = (unsigned)atoi(q + 2);
            const char *bracket = strchr(q, '['), *eol = strchr(q, '\n');
            while (bracket && (!eol || bracket < eol)) { count *= (unsigned)atoi(bracket + 1); bracket = strchr(bracket + 1, '['); }
            total = (total + (int)align - 1) / (int)align * (int)align + (int)(bits / 8 * count);
        }
    }
    return total;
}

CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
    Module *m = mod;
    if (!m || !m->text) return E_HANDLE;
    NEED_TAG(m);
    const char *p = m->text;
    size_t len = strlen(name);
    while ((p = strstr(p, ".entry")) != NULL) {
        p = skip_blank(p + 6);
        if (strncmp(p, name, len)) continue;
        const char *open = skip_blank(p + len), *close;
        if (*open != '(' || !(close = strchr(open, ')'))) continue;
        Function *f = calloc(1, sizeof(Function)); /* leaked on purpose: tiny, test-only */
        snprintf(f->name, sizeof f->name, "%s", name);
        f->mod = m;
        if (parse_params(open, close, f)) { free(f); return E_PTX; }
        f->static_shared = static_shared(parse_directives(close + 1, f));
        f->emu = emulated_entry(name);
        *fn = f;
        return OK;
    }
    return E_NOT_FOUND;
}

#define NEED_FUNC(fn) do { if (!(fn) || !((Function *)(fn))->mod->text) return E_HANDLE; NEED_TAG(((Function *)(fn))->mod); } while (0)

/* The most threads one block of ``f`` may have: its .reqntid / .maxntid, fake_set_func_max_threads, 1024. */
static unsigned func_max_threads(const Function *f) {
    unsigned n = (unsigned)g_func_max_threads;
    const unsigned *t = f->reqntid[0] ? f->reqntid : f->maxntid;
    if (t[0] && t[0] * t[1] * t[2] < n) n = t[0] * t[1] * t[2];
    return n;
}
static int dynamic_shared_max(const Function *f) { return f->max_dynamic_shared ? f->max_dynamic_shared : 49152 - f->static_shared; }

CUresult cuFuncGetAttribute(int *v, int attr, void *fn) {
    const Function *f = fn;
    NEED_FUNC(fn);
    switch (attr) {
    case 0: *v = (int)func_max_threads(f); break;    /* MAX_THREADS_PER_BLOCK */
    case 1: *v = f->static_shared; break;            /* SHARED_SIZE_BYTES */
    case 4: *v = 32; break;                          /* NUM_REGS */
    case 5: *v = f->mod->ptx_version; break;         /* PTX_VERSION */
    case 6: *v = g_cc_major * 10 + g_cc_minor; break; /* BINARY_VERSION */
    case 8: *v = dynamic_shared_max(f); break;       /* MAX_DYNAMIC_SHARED_SIZE_BYTES */
    default: *v = 0;
    }
    return OK;
}

/* Only the dynamic shared-memory opt-in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8) is modelled. */
CUresult cuFuncSetAttribute(void *fn, int attr, int value) {
    NEED_FUNC(fn);
    Function *f = fn;
    if (attr != 8 || value < 0 || value > optin_shared() - f->static_shared) return E_VALUE;
    f->max_dynamic_shared = value;
    g_func_set_attrs++;
    return OK;
}

/* A launch the driver refuses (CUDA_ERROR_INVALID_VALUE) before queueing anything. dims: grid, block, shared. */
static CUresult check_launch(const Function *f, const unsigned *d) {
    for (int i = 0; i < 6; i++) if (!d[i]) return E_VALUE;
    if (d[0] > 2147483647u || d[1] > 65535u || d[2] > 65535u || d[3] > 1024u || d[4] > 1024u || d[5] > 64u) return E_VALUE;
    if ((unsigned long)d[3] * d[4] * d[5] > func_max_threads(f)) return E_VALUE;
    if (f->reqntid[0] && (d[3] != f->reqntid[0] || d[4] != f->reqntid[1] || d[5] != f->reqntid[2])) return E_VALUE;
    if ((int)d[6] > dynamic_shared_max(f) || f->static_shared + (long)d[6] > optin_shared()) return E_VALUE;
    return OK;
}

/* exact parameter size: natural alignment, no tail padding */
static size_t param_layout(const Function *f, size_t *offsets) {
    size_t off = 0;
    for (int i = 0; i < f->nparams; i++) {
        size_t sz = (size_t)f->sizes[i], al = sz >= 8 ? 8 : sz;
        off = (off + al - 1) / al * al;
        offsets[i] = off;
        off += sz;
    }
    return off;
}

static CUresult pack(const Function *f, void **params, void **extra, unsigned char *out, size_t *size) {
    size_t offsets[64], want = param_layout(f, offsets);
    if (want > 512) return E_VALUE;
    if (extra) {
        const void *buf = NULL;
        size_t have = (size_t)-1;
        for (int i = 0; extra[i]; i += 2) {
            if ((uintptr_t)extra[i] == 1) buf = extra[i + 1];
            else if ((uintptr_t)extra[i] == 2) have = *(const size_t *)extra[i + 1];
            else return E_VALUE;
        }
        if (!buf || have != want) return E_VALUE;
        memcpy(out, buf, want);
    } else {
        if (!params && f->nparams) return E_VALUE;
        for (int i = 0; i < f->nparams; i++) memcpy(out + offsets[i], params[i], (size_t)f->sizes[i]);
    }
    *size = want;
    return OK;
}

static uint64_t u64_at(const unsigned char *a, size_t off) { uint64_t v; memcpy(&v, a + off, 8); return v; }
static int32_t i32_at(const unsigned char *a, size_t off) { int32_t v; memcpy(&v, a + off, 4); return v; }

static float *f32_at(const unsigned char *a, size_t off) { return (float *)(uintptr_t)u64_at(a, off); }

/* Library matmul: one tile x tile block per grid cell, like the real kernel, so a wrong grid
 * leaves part of C unwritten. dims = grid xyz, block xyz. */
static void emulate_matmul(const unsigned char *a, const unsigned *dims, int tile) {
    float *c = f32_at(a, 0), *x = f32_at(a, 8), *y = f32_at(a, 16);
    int32_t M = i32_at(a, 24), N = i32_at(a, 28), K = i32_at(a, 32);
    if (dims[3] != (unsigned)tile || dims[4] != (unsigned)tile) return; /* wrong block: nothing written */
    for (int32_t i = 0; i < M && i < (int32_t)(dims[1] * tile); i++)
        for (int32_t j = 0; j < N && j < (int32_t)(dims[0] * tile); j++) {
            float acc = 0.0f;
            for (int32_t k = 0; k < K; k++) acc += x[i * K + k] * y[k * N + j];
            c[i * N + j] = acc;
        }
}

static void emulate_softmax(const unsigned char *a) {
    float *out = f32_at(a, 0), *x = f32_at(a, 8);
    int32_t rows = i32_at(a, 16), cols = i32_at(a, 20);
    for (int32_t r = 0; r < rows; r++) {
        const float *row = x + (size_t)r * cols;
        float m = row[0], sum = 0.0f;
        for (int32_t j = 1; j < cols; j++) m = row[j] > m ? row[j] : m;
        for (int32_t j = 0; j < cols; j++) sum += (out[(size_t)r * cols + j] = __builtin_expf(row[j] - m));
        for (int32_t j = 0; j < cols; j++) out[(size_t)r * cols + j] /= sum;
    }
}

/* host emulation of a few kernels (elementwise ones ignore the grid: they are grid-stride loops) */
static void run(const Function *f, const unsigned char *a, const unsigned *dims) {
    if (!strcmp(f->name, "svod_cuda_matmul_f32_t16")) {
        emulate_matmul(a, dims, 16);
    } else if (!strcmp(f->name, "svod_cuda_matmul_f32_t32")) {
        emulate_matmul(a, dims, 32);
    } else if (!strcmp(f->name, "svod_cuda_softmax_f32")) {
        emulate_softmax(a);
    } else if (!strcmp(f->name, "svod_cuda_reduce_sum_f32")) { /* (outer, red, inner) strided by so, sr, si */
        float *out = f32_at(a, 0), *x = f32_at(a, 8);
        int32_t outer = i32_at(a, 16), red = i32_at(a, 20), inner = i32_at(a, 24);
        int32_t so = i32_at(a, 28), sr = i32_at(a, 32), si = i32_at(a, 36);
        for (int32_t o = 0; o < outer; o++)
            for (int32_t i = 0; i < inner; i++) {
                float acc = 0.0f;
                for (int32_t r = 0; r < red; r++) acc += x[(size_t)o * so + (size_t)r * sr + (size_t)i * si];
                out[(size_t)o * inner + i] = acc;
            }
    } else if (!strcmp(f->name, "svod_cuda_transpose_x4")) { /* 32x32 tiles over grid (cols/32, rows/32) */
        uint32_t *out = (uint32_t *)(uintptr_t)u64_at(a, 0), *x = (uint32_t *)(uintptr_t)u64_at(a, 8);
        int32_t rows = i32_at(a, 16), cols = i32_at(a, 20);
        for (int32_t r = 0; r < rows && r < (int32_t)(dims[1] * 32); r++)
            for (int32_t c = 0; c < cols && c < (int32_t)(dims[0] * 32); c++) out[(size_t)c * rows + r] = x[(size_t)r * cols + c];
    } else if (!strcmp(f->name, "saxpy")) { /* examples/saxpy.cu: one thread per element, so the grid matters */
        float *y = f32_at(a, 0), *x = f32_at(a, 8);
        for (int32_t i = 0, n = i32_at(a, 16); i < n && i < (int32_t)(dims[0] * dims[3]); i++) y[i] = 2.0f * x[i] + y[i];
    } else if (!strcmp(f->name, "svod_cuda_add_relu_f32")) {
        float *out = f32_at(a, 0), *x = f32_at(a, 8), *y = f32_at(a, 16);
        for (int32_t i = 0, n = i32_at(a, 24); i < n; i++) out[i] = x[i] + y[i] > 0.0f ? x[i] + y[i] : 0.0f;
    } else if (!strcmp(f->name, "svod_cuda_mul_f32")) {
        float *out = f32_at(a, 0), *x = f32_at(a, 8), *y = f32_at(a, 16);
        for (int32_t i = 0, n = i32_at(a, 24); i < n; i++) out[i] = x[i] * y[i];
    } else if (!strcmp(f->name, "svod_cuda_relu_f32")) {
        float *out = f32_at(a, 0), *x = f32_at(a, 8);
        for (int32_t i = 0, n = i32_at(a, 16); i < n; i++) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
    } else if (!strcmp(f->name, "fake_iota")) {
        int32_t *out = (int32_t *)(uintptr_t)u64_at(a, 0);
        for (int32_t i = 0, n = i32_at(a, 8); i < n; i++) out[i] = i;
    } else if (!strcmp(f->name, "fake_axpb")) { /* out[i] = in[i] * k + c */
        int32_t *out = (int32_t *)(uintptr_t)u64_at(a, 0);
        const int32_t *in = (const int32_t *)(uintptr_t)u64_at(a, 8);
        int32_t n = i32_at(a, 16), k = i32_at(a, 20), c = i32_at(a, 24);
        for (int32_t i = 0; i < n; i++) out[i] = in[i] * k + c;
    } else if (!strcmp(f->name, "svod_cuda_add_f32")) {
        float *out = (float *)(uintptr_t)u64_at(a, 0);
        const float *x = (const float *)(uintptr_t)u64_at(a, 8), *y = (const float *)(uintptr_t)u64_at(a, 16);
        for (int32_t i = 0, n = i32_at(a, 24); i < n; i++) out[i] = x[i] + y[i];
    }
}


/* The kernel's view of its parameters: device addresses in 8-byte integer parameters become the host
 * bytes behind them; one outside every live allocation is an illegal address (sticky, as on a GPU). */
static CUresult translate(const Function *f, const unsigned char *args, unsigned char *out) {
    size_t offsets[64], size = param_layout(f, offsets);
    memcpy(out, args, size);
    for (int i = 0; i < f->nparams; i++) {
        uint64_t v;
        if (f->sizes[i] != 8 || f->kinds[i] == 'f') continue;
        memcpy(&v, out + offsets[i], 8);
        if (!is_device_address(v)) continue;
        if (!find_alloc(v, 0)) return E_ILLEGAL_ADDRESS;
        v -= DEV_OFFSET;
        memcpy(out + offsets[i], &v, 8);
    }
    return OK;
}

/* A kernel's work: its emulated real code when loaded (a failed emulation is a failed launch), else run(). */
static CUresult execute(const Function *f, const unsigned char *args, const unsigned *dims) {
    unsigned char a[512];
    CUresult rc = translate(f, args, a);
    if (rc) return rc;
    if (f->emu) return g_emu_launch(f->emu, a, dims) ? E_LAUNCH_FAILED : OK;
    run(f, a, dims);
    return OK;
}

static void enqueue_kernel(Stream *stream, const Function *f, const unsigned char *args, size_t size, const unsigned *dims);
CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
    NEED_FUNC(fn);
    unsigned char args[512];
    size_t size = 0;
    const Function *f = fn;
    unsigned dims[7] = {gx, gy, gz, bx, by, bz, shared};
    CUresult rc = check_stream(stream);
    if (!rc) rc = pack(f, params, extra, args, &size);
    if (!rc) rc = check_launch(f, dims);
    if (rc) return rc;
    memcpy(g_last_dims, dims, sizeof dims);
    memcpy(g_last_args, args, size);
    g_last_size = size;
    g_last_extra = extra != NULL;
    g_launches++;
    enqueue_kernel(stream, f, args, size, dims);
    return OK;
}

/* ---- graphs ---- */
typedef struct {
    void *func;
    unsigned gx, gy, gz, bx, by, bz, shared;
    void **kernelParams, **extra;
    void *kern, *ctx;
} NodeParams;
typedef struct Graph Graph;
/* A kernel node (f set) or a device copy node (f NULL: copy_h rows of copy_w bytes, src -> dst by pitch). */
typedef struct Node {
    Graph *graph; int index;
    const Function *f; unsigned char args[512]; unsigned dims[7];
    CUdeviceptr copy_dst, copy_src; size_t copy_w, copy_h, dst_pitch, src_pitch;
    int *deps, ndeps; /* the nodes this one waits for, by index */
} Node;
typedef struct { /* CUDA_MEMCPY3D */
    size_t srcXInBytes, srcY, srcZ, srcLOD; int srcMemoryType; const void *srcHost; CUdeviceptr srcDevice; void *srcArray;
    void *reserved0; size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD; int dstMemoryType; void *dstHost; CUdeviceptr dstDevice; void *dstArray;
    void *reserved1; size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} Memcpy3D;
static int g_fail_memcpy_nodes = 0;
void fake_fail_memcpy_nodes(int fail) { g_fail_memcpy_nodes = fail; }
struct Graph { Tag tag; int n, cap; Node **nodes; };      /* nodes are handles: they never move */
struct Exec { Tag tag; const Graph *src; int n; Node *nodes; }; /* a snapshot: its own copies */

CUresult cuGraphCreate(void **g, unsigned flags) {
    (void)flags;
    NEED_CTX;
    Graph *graph = calloc(1, sizeof(Graph));
    graph->tag = tag_here();
    *g = graph;
    return OK;
}
CUresult cuGraphDestroy(void *graph) {
    Graph *g = graph;
    if (!g) return E_HANDLE;
    NEED_TAG(g);
    for (int i = 0; i < g->n; i++) { free(g->nodes[i]->deps); free(g->nodes[i]); }
    free(g->nodes);
    free(g);
    return OK;
}

/* A new node of ``g`` waiting for ``deps`` (nodes of ``g``), or NULL when one is not. */
static Node *add_node(Graph *g, void **deps, size_t ndeps) {
    for (size_t i = 0; i < ndeps; i++)
        if (!deps[i] || ((Node *)deps[i])->graph != g) return NULL;
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 16;
        g->nodes = realloc(g->nodes, (size_t)g->cap * sizeof(Node *));
    }
    Node *nd = calloc(1, sizeof(Node));
    nd->graph = g;
    nd->index = g->n;
    nd->deps = calloc(ndeps ? ndeps : 1, sizeof(int));
    nd->ndeps = (int)ndeps;
    for (size_t i = 0; i < ndeps; i++) nd->deps[i] = ((Node *)deps[i])->index;
    g->nodes[g->n++] = nd;
    return nd;
}

/* A kernel node's parameters as the driver checks them: a live function of the graph's context, exact
 * arguments, and a launch it would accept. */
static CUresult kernel_node(const NodeParams *p, const Tag *owner, unsigned char *args, unsigned *dims) {
    size_t size;
    const Function *f = p->func;
    if (!f || !f->mod->text || f->mod->tag.ctx != owner->ctx || !tag_alive(&f->mod->tag)) return E_HANDLE;
    memcpy(dims, &p->gx, 7 * sizeof(unsigned)); /* gx..shared are seven consecutive unsigneds */
    CUresult rc = pack(f, p->kernelParams, p->extra, args, &size);
    return rc ? rc : check_launch(f, dims);
}

CUresult cuGraphAddKernelNode_v2(void **node, void *graph, void **deps, size_t ndeps, const NodeParams *p) {
    Graph *g = graph;
    unsigned char args[512];
    unsigned dims[7];
    if (!g) return E_HANDLE;
    NEED_TAG(g);
    CUresult rc = kernel_node(p, &g->tag, args, dims);
    if (rc) return rc;
    Node *nd = add_node(g, deps, ndeps);
    if (!nd) return E_VALUE;
    nd->f = p->func;
    memcpy(nd->args, args, sizeof args);
    memcpy(nd->dims, dims, sizeof dims);
    *node = nd;
    return OK;
}
CUresult cuGraphAddKernelNode(void **node, void *graph, void **deps, size_t ndeps, const NodeParams *p) {
    return cuGraphAddKernelNode_v2(node, graph, deps, ndeps, p);
}

/* Device-to-device copies of Height rows (Depth 1) in the given context; pitches within the device's
 * CU_DEVICE_ATTRIBUTE_MAX_PITCH and at least the width; both ranges inside live allocations. */
CUresult cuGraphAddMemcpyNode(void **node, void *graph, void **deps, size_t ndeps, const Memcpy3D *p, void *ctx) {
    Graph *g = graph;
    if (!g) return E_HANDLE;
    NEED_TAG(g);
    if (g_fail_memcpy_nodes) return E_NOT_SUPPORTED;
    if (ctx != g_current || p->srcMemoryType != 2 || p->dstMemoryType != 2 || !p->Height || p->Depth != 1 ||
        !p->WidthInBytes || p->srcXInBytes || p->dstXInBytes || p->srcY || p->dstY || p->srcZ || p->dstZ ||
        p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes || p->srcPitch > g_max_pitch ||
        p->dstPitch > g_max_pitch)
        return E_VALUE;
    size_t span_src = (p->Height - 1) * p->srcPitch + p->WidthInBytes, span_dst = (p->Height - 1) * p->dstPitch + p->WidthInBytes;
    if (!current_bytes(p->srcDevice, span_src) || !current_bytes(p->dstDevice, span_dst)) return E_VALUE;
    Node *nd = add_node(g, deps, ndeps);
    if (!nd) return E_VALUE;
    nd->copy_dst = p->dstDevice;
    nd->copy_src = p->srcDevice;
    nd->copy_w = p->WidthInBytes;
    nd->copy_h = p->Height;
    nd->dst_pitch = p->dstPitch;
    nd->src_pitch = p->srcPitch;
    g_memcpy_nodes++;
    *node = nd;
    return OK;
}

CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    const Graph *g = graph;
    (void)flags;
    if (!g) return E_HANDLE;
    NEED_TAG(g);
    Exec *e = calloc(1, sizeof(Exec));
    e->tag = tag_here();
    e->src = g;
    e->n = g->n;
    e->nodes = calloc((size_t)(g->n ? g->n : 1), sizeof(Node));
    for (int i = 0; i < g->n; i++) {
        e->nodes[i] = *g->nodes[i];
        e->nodes[i].deps = malloc((size_t)(g->nodes[i]->ndeps + 1) * sizeof(int));
        memcpy(e->nodes[i].deps, g->nodes[i]->deps, (size_t)g->nodes[i]->ndeps * sizeof(int));
    }
    *exec = e;
    return OK;
}
static void free_exec(Exec *e) {
    for (int i = 0; i < e->n; i++) free(e->nodes[i].deps);
    free(e->nodes);
    free(e);
}
CUresult cuGraphExecDestroy(void *exec) {
    Exec *e = exec;
    if (!e) return E_HANDLE;
    NEED_TAG(e);
    flush_all();
    free_exec(e);
    return OK;
}

/* Like the real driver, the node's function may change (to one of the same context); its launch is checked. */
CUresult cuGraphExecKernelNodeSetParams_v2(void *exec, void *node, const NodeParams *p) {
    Exec *e = exec;
    const Node *nd = node;
    unsigned char args[512];
    unsigned dims[7];
    if (!e || !nd) return E_HANDLE;
    NEED_TAG(e);
    if (nd->graph != e->src || nd->index >= e->n || !e->nodes[nd->index].f) return E_VALUE;
    CUresult rc = kernel_node(p, &e->tag, args, dims);
    if (rc) return rc;
    Node *mine = &e->nodes[nd->index];
    mine->f = p->func;
    memcpy(mine->args, args, sizeof args);
    memcpy(mine->dims, dims, sizeof dims);
    g_set_params++;
    return OK;
}
CUresult cuGraphExecKernelNodeSetParams(void *exec, void *node, const NodeParams *p) {
    return cuGraphExecKernelNodeSetParams_v2(exec, node, p);
}

/* A real GPU may run graph nodes in any order their dependencies allow. The fake picks the newest ready
 * node first (fake_set_graph_order(1): the oldest), so a missing dependency edge runs a reader before its
 * writer and the result comes out wrong. */
static int g_graph_fifo = 0;
void fake_set_graph_order(int fifo) { g_graph_fifo = fifo; }

static int next_ready(const Exec *e, unsigned char *done) {
    int pick = -1;
    for (int i = 0; i < e->n; i++) {
        int ready = !done[i];
        for (int j = 0; j < e->nodes[i].ndeps && ready; j++) ready = done[e->nodes[i].deps[j]];
        if (ready && (pick < 0 || !g_graph_fifo)) pick = i;
    }
    done[pick] = 1; /* a DAG always has a ready node while some are left */
    return pick;
}

static CUresult run_copy_node(const Node *nd) {
    for (size_t row = 0; row < nd->copy_h; row++) {
        void *dst = device_bytes(nd->copy_dst + row * nd->dst_pitch, nd->copy_w);
        const void *src = device_bytes(nd->copy_src + row * nd->src_pitch, nd->copy_w);
        if (!dst || !src) return E_ILLEGAL_ADDRESS;
        memmove(dst, src, nd->copy_w);
    }
    return OK;
}

/* Runs a launched graph's snapshot (nodes set after the launch only affect later launches). */
static CUresult run_graph(const Exec *e) {
    unsigned char *done = calloc((size_t)e->n + 1, 1);
    CUresult rc = OK;
    for (int step = 0; step < e->n && !rc; step++) {
        const Node *nd = &e->nodes[next_ready(e, done)];
        rc = nd->f ? execute(nd->f, nd->args, nd->dims) : run_copy_node(nd);
    }
    free(done);
    return rc;
}

static void enqueue_graph(Stream *stream, const Exec *e);
CUresult cuGraphLaunch(void *exec, void *stream) {
    Exec *e = exec;
    if (!e) return E_HANDLE;
    NEED_TAG(e);
    CUresult rc = check_stream(stream);
    if (rc) return rc;
    enqueue_graph(stream, exec);
    g_graph_launches++;
    return OK;
}

/* ---- deferred streams ----
 * Work queued on a stream runs later, in order, when something waits for it: cuStreamSynchronize,
 * cuEventSynchronize (up to that event), cuCtxSynchronize, a stream waiting on an event of another
 * stream (when the waiting stream gets there), and frees and destroys (everything); each cuEventQuery
 * on a pending event runs one item. That is the latest a GPU may run it, so host code that reads a
 * pinned block, or reuses one, before the DMA is done sees the wrong bytes here too. Work on the NULL
 * stream, and the synchronous copies, run at once. A kernel that fails while a stream runs (an
 * emulated launch, see fake_load_emulator, or an illegal address) is reported by the call that ran it,
 * and by every later one that waits for work: the error is sticky, as on a GPU. */
enum { OP_COPY, OP_SET, OP_KERNEL, OP_GRAPH, OP_RECORD, OP_WAIT };
typedef struct Op {
    int kind;
    void *dst; const void *src; size_t n; unsigned char value; /* copy, set */
    const Function *f; unsigned char args[512]; unsigned dims[7]; /* kernel */
    Exec *graph; /* a snapshot (its nodes copied, their deps shared with the exec), freed once run */
    Event *event; long gen; /* record, wait */
    struct Op *next;
} Op;
struct Stream { Tag tag; Op *head, *tail; int count; };
enum { MAX_QUEUED = 256, MAX_STREAMS = 64 };
static pthread_mutex_t g_queue_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static Stream *g_streams[MAX_STREAMS];
static CUresult g_async_error; /* sticky */

static Tag *stream_tag(Stream *s) { return &s->tag; }

static Stream *new_stream(void) {
    Stream *s = calloc(1, sizeof(Stream));
    if (!s) return NULL;
    s->tag = tag_here();
    pthread_mutex_lock(&g_queue_lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (!g_streams[i]) { g_streams[i] = s; break; }
    pthread_mutex_unlock(&g_queue_lock);
    return s;
}

static void free_stream(Stream *s) {
    pthread_mutex_lock(&g_queue_lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (g_streams[i] == s) g_streams[i] = NULL;
    pthread_mutex_unlock(&g_queue_lock);
    s->tag.ctx = NULL; /* leaked, not freed: a stale handle then reads INVALID_HANDLE, not freed memory */
}

static CUresult flush_until(Stream *s, const Event *e, long gen);
static int live_stream(const Stream *s);
static CUresult run_op(Op *op) {
    CUresult rc = OK;
    switch (op->kind) {
    case OP_COPY: memmove(op->dst, op->src, op->n); break;
    case OP_SET: memset(op->dst, op->value, op->n); break;
    case OP_KERNEL: rc = execute(op->f, op->args, op->dims); break;
    case OP_GRAPH: rc = run_graph(op->graph); free(op->graph->nodes); free(op->graph); break;
    case OP_RECORD:
        op->event->t = g_clock;
        g_clock += 1.0;
        op->event->done = op->gen;
        break;
    case OP_WAIT: rc = live_stream(op->event->stream) ? flush_until(op->event->stream, op->event, op->gen) : g_async_error; break;
    }
    free(op);
    if (rc && !g_async_error) g_async_error = rc;
    return rc;
}

/* Run the first queued item of ``s``; 0 when there was none. */
static int step_stream(Stream *s) {
    int ran = 0;
    pthread_mutex_lock(&g_queue_lock);
    if (live_stream(s) && s->head) {
        Op *op = s->head;
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        s->count--;
        run_op(op);
        ran = 1;
    }
    pthread_mutex_unlock(&g_queue_lock);
    return ran;
}

/* Run the queued work of ``s`` up to and including the record of generation ``gen`` of ``e`` (all with e NULL). */
static CUresult flush_until(Stream *s, const Event *e, long gen) {
    pthread_mutex_lock(&g_queue_lock);
    while (s->head && !(e && e->done >= gen)) step_stream(s);
    pthread_mutex_unlock(&g_queue_lock);
    return g_async_error;
}

static int live_stream(const Stream *s) {
    for (int i = 0; s && i < MAX_STREAMS; i++)
        if (g_streams[i] == s) return 1;
    return 0; /* NULL, or destroyed (its work ran when it was) */
}

static CUresult flush_stream(Stream *s) { return live_stream(s) ? flush_until(s, NULL, 0) : g_async_error; }
static CUresult flush_event(Event *e) { return live_stream(e->stream) ? flush_until(e->stream, e, e->recorded) : g_async_error; }

static CUresult flush_all(void) {
    pthread_mutex_lock(&g_queue_lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (g_streams[i]) flush_until(g_streams[i], NULL, 0);
    pthread_mutex_unlock(&g_queue_lock);
    return g_async_error;
}

/* The last release of a primary context: its queued work runs (a GPU finishes it), then its streams and
 * memory go; its other objects answer INVALID_HANDLE from now on (their tags name a past life). */
static void context_died(Ctx *c) {
    flush_all();
    pthread_mutex_lock(&g_queue_lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (g_streams[i] && g_streams[i]->tag.ctx == c) { g_streams[i]->tag.ctx = NULL; g_streams[i] = NULL; g_live_streams--; }
    pthread_mutex_unlock(&g_queue_lock);
    pthread_mutex_lock(&g_alloc_lock);
    for (Alloc *a = g_allocs.next, *next; a != &g_allocs; a = next) {
        next = a->next;
        if (a->tag.ctx == c) unlink_alloc(a);
    }
    pthread_mutex_unlock(&g_alloc_lock);
    for (int b = 0; b < MAX_DEVICES; b++) g_peers[c->dev][b] = g_peers[b][c->dev] = NULL;
    g_ctx_deaths++;
}

static void enqueue(Stream *s, Op *op) {
    if (!s) { run_op(op); return; } /* the NULL stream: at once */
    pthread_mutex_lock(&g_queue_lock);
    op->next = NULL;
    if (s->tail) s->tail->next = op; else s->head = op;
    s->tail = op;
    if (++s->count > MAX_QUEUED) flush_stream(s); /* bounded memory: running early is always allowed */
    pthread_mutex_unlock(&g_queue_lock);
}

static Op *new_op(int kind) {
    Op *op = calloc(1, sizeof(Op));
    if (!op) abort(); /* test-only library */
    op->kind = kind;
    return op;
}

static void enqueue_copy(Stream *stream, void *dst, const void *src, size_t n) {
    Op *op = new_op(OP_COPY);
    op->dst = dst; op->src = src; op->n = n;
    enqueue(stream, op);
}

static void enqueue_set(Stream *stream, void *dst, unsigned char value, size_t n) {
    Op *op = new_op(OP_SET);
    op->dst = dst; op->value = value; op->n = n;
    enqueue(stream, op);
}

static void enqueue_kernel(Stream *stream, const Function *f, const unsigned char *args, size_t size, const unsigned *dims) {
    Op *op = new_op(OP_KERNEL);
    op->f = f;
    memcpy(op->args, args, size);
    memcpy(op->dims, dims, sizeof op->dims);
    enqueue(stream, op);
}

static void enqueue_graph(Stream *stream, const Exec *e) {
    Op *op = new_op(OP_GRAPH);
    op->graph = malloc(sizeof(Exec));
    if (!op->graph) abort();
    *op->graph = *e;
    op->graph->nodes = malloc((size_t)(e->n ? e->n : 1) * sizeof(Node));
    if (!op->graph->nodes) abort();
    memcpy(op->graph->nodes, e->nodes, (size_t)e->n * sizeof(Node));
    enqueue(stream, op);
}

static void enqueue_record(Stream *stream, Event *e) {
    Op *op = new_op(OP_RECORD);
    pthread_mutex_lock(&g_queue_lock);
    e->stream = stream;
    op->event = e;
    op->gen = ++e->recorded;
    pthread_mutex_unlock(&g_queue_lock);
    enqueue(stream, op);
}

static void enqueue_wait(Stream *stream, Event *e) {
    Op *op = new_op(OP_WAIT);
    op->event = e;
    op->gen = e->recorded;
    enqueue(stream, op);
}
