/* A stand-in for libcuda.so.1 used by the CUDA tests (tests/cuda_support.py builds it) on machines without a GPU.
 *
 * It exports the driver entry points svod_min binds, with the same C ABI, so
 * the real binding code (prototype table, checked calls, contexts, memory,
 * modules, launches, graphs) runs against it. "Device memory" is host memory
 * (a CUdeviceptr is a malloc'd address), the current context is per thread
 * like the real one, and a few kernels are emulated on the host by name so
 * argument blobs can be checked end to end. Like recent drivers, a launch
 * whose CU_LAUNCH_PARAM_BUFFER_SIZE differs from the kernel's exact parameter
 * size (no tail padding) is refused with CUDA_ERROR_INVALID_VALUE, and one
 * with more than 48 KiB of dynamic shared memory unless cuFuncSetAttribute
 * opted the function in. Work queued on a stream runs as late as a GPU may run
 * it (see "deferred streams"), and graph nodes in an order their edges allow.
 *
 * Test controls: fake_configure(init_rc, version, count) (or FAKE_CUDA_DEVICES=N), fake_set_mem_limit,
 * fake_set_func_max_threads, fake_set_events_pending(n) / fake_complete_events() (events that stay
 * "not ready"), fake_fail_memcpy_nodes(1) (a driver without graph memcpy nodes), fake_counter(name),
 * fake_last_launch(...), fake_set_graph_order(fifo) (graph nodes run newest-ready-first by default),
 * fake_load_emulator(path) or FAKE_CUDA_EMULATOR=path (run the real kernel library's code on the host,
 * see tests/cuda_emu_support.py), fake_check_guards() (allocations whose guard zones were overwritten).
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

enum { OK = 0, E_VALUE = 1, E_OOM = 2, E_NOT_INIT = 3, E_NO_DEVICE = 100, E_DEVICE = 101,
       E_CONTEXT = 201, E_PTX = 218, E_NOT_FOUND = 500, E_PEER_ENABLED = 704, E_LAUNCH_FAILED = 719, E_NOT_SUPPORTED = 801 };

/* ---- controls and counters ---- */
static int g_init_rc = 0, g_version = 12040, g_count = 0, g_initialised = 0, g_func_max_threads = 1024;
static size_t g_mem_limit = (size_t)1 << 32;
static __thread void *g_current = NULL;
static long g_set_current, g_launches, g_live_dev, g_live_host, g_live_modules, g_live_streams, g_live_events;
static long g_set_params, g_graph_launches, g_peer_enables, g_memcpy, g_pushes, g_func_set_attrs, g_memcpy_nodes;
static long g_stream_syncs, g_event_records, g_event_queries, g_event_syncs;
static unsigned g_last_dims[7];
static unsigned char g_last_args[512];
static size_t g_last_size;
static int g_last_extra;
static char g_ctx[8];

static int g_configured = 0; /* fake_configure() wins over FAKE_CUDA_DEVICES */
void fake_configure(int init_rc, int version, int count) { g_init_rc = init_rc; g_version = version; g_count = count; g_configured = 1; }
void fake_set_mem_limit(size_t limit) { g_mem_limit = limit; }
void fake_set_func_max_threads(int n) { g_func_max_threads = n; }

long fake_counter(const char *name) {
    static const struct { const char *name; long *value; } table[] = {
        {"set_current", &g_set_current}, {"launches", &g_launches}, {"live_dev", &g_live_dev},
        {"live_host", &g_live_host}, {"live_modules", &g_live_modules}, {"live_streams", &g_live_streams},
        {"live_events", &g_live_events}, {"set_params", &g_set_params}, {"graph_launches", &g_graph_launches},
        {"peer_enables", &g_peer_enables}, {"memcpy", &g_memcpy}, {"pushes", &g_pushes},
        {"func_set_attrs", &g_func_set_attrs}, {"memcpy_nodes", &g_memcpy_nodes},
        {"stream_syncs", &g_stream_syncs}, {"event_records", &g_event_records},
        {"event_queries", &g_event_queries}, {"event_syncs", &g_event_syncs}};
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

#define NEED_INIT do { if (!g_initialised) return E_NOT_INIT; } while (0)
#define NEED_CTX do { NEED_INIT; if (!g_current) return E_CONTEXT; } while (0)

/* Streams run their work later (see "deferred streams" at the end); these enqueue or flush it. */
typedef struct Stream Stream;
typedef struct Event Event;
static void enqueue_copy(void *stream, void *dst, const void *src, size_t n);
static void enqueue_set(void *stream, void *dst, unsigned char value, size_t n);
static void enqueue_record(void *stream, Event *e);
static void enqueue_wait(void *stream, Event *e);
static CUresult flush_stream(Stream *s);
static CUresult flush_event(Event *e);
static CUresult flush_all(void);

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
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
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
    if (env && !g_initialised && !g_configured) g_count = atoi(env);
    if (emu && !g_emu && fake_load_emulator(emu)) return 999; /* a broken test set-up must not pass quietly */
    if (g_init_rc) return g_init_rc;
    g_initialised = 1;
    return OK;
}
CUresult cuDriverGetVersion(int *v) { *v = g_version; return OK; }
CUresult cuDeviceGetCount(int *n) { NEED_INIT; *n = g_count; return OK; }
CUresult cuDeviceGet(int *dev, int ordinal) { NEED_INIT; if (ordinal < 0 || ordinal >= g_count) return E_DEVICE; *dev = ordinal; return OK; }
CUresult cuDeviceGetName(char *buf, int len, int dev) { NEED_INIT; snprintf(buf, (size_t)len, "Fake GPU %d", dev); return OK; }
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) { (void)dev; NEED_INIT; *bytes = (size_t)16 << 30; return OK; }
CUresult cuDeviceComputeCapability(int *major, int *minor, int dev) { (void)dev; NEED_INIT; *major = 8; *minor = 0; return OK; }

CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    NEED_INIT;
    if (dev < 0 || dev >= g_count) return E_DEVICE;
    switch (attr) {
    case 1: case 2: case 3: *v = 1024; break;
    case 4: *v = 64; break;
    case 5: *v = 2147483647; break;
    case 6: case 7: *v = 65535; break;
    case 8: *v = 49152; break;
    case 97: *v = 232448; break; /* opt-in shared memory per block, as on an H100 */
    case 16: *v = 4; break;
    case 41: *v = 1; break;
    case 75: *v = 8; break;
    case 76: *v = 0; break;
    default: *v = 0;
    }
    return OK;
}

CUresult cuDeviceCanAccessPeer(int *can, int a, int b) { NEED_INIT; *can = a != b; return OK; }

/* ---- contexts ---- */
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { NEED_INIT; if (dev < 0 || dev >= g_count) return E_DEVICE; *ctx = &g_ctx[dev]; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return OK; }
CUresult cuCtxSetCurrent(void *ctx) { NEED_INIT; g_current = ctx; g_set_current++; return OK; }
CUresult cuCtxGetCurrent(void **ctx) { *ctx = g_current; return OK; }
static __thread void *g_stack[16];
static __thread int g_depth;
CUresult cuCtxPushCurrent_v2(void *ctx) {
    NEED_INIT;
    if (g_depth >= 16) return E_VALUE;
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
CUresult cuCtxEnablePeerAccess(void *peer, unsigned flags) {
    static void *enabled[8][8];
    (void)flags;
    NEED_CTX;
    int a = (int)((char *)g_current - g_ctx), b = (int)((char *)peer - g_ctx);
    if (enabled[a][b]) return E_PEER_ENABLED;
    enabled[a][b] = peer;
    g_peer_enables++;
    return OK;
}

/* ---- memory ---- */
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) { NEED_CTX; *free_bytes = *total = (size_t)16 << 30; return OK; }
/* Every allocation sits between two guard zones, so a kernel (emulated, see fake_load_emulator) that
 * writes out of bounds is caught: fake_check_guards() counts the live allocations whose guards changed. */
enum { GUARD = 64, GUARD_BYTE = 0xC5 };
typedef struct Alloc { struct Alloc *prev, *next; size_t n; } Alloc; /* fits in the front guard's place */
static Alloc g_allocs = {&g_allocs, &g_allocs, 0};
static long g_guard_breaches;
static pthread_mutex_t g_alloc_lock = PTHREAD_MUTEX_INITIALIZER;

static int guards_intact(const Alloc *a) {
    const unsigned char *front = (const unsigned char *)a + sizeof(Alloc), *back = (const unsigned char *)a + GUARD + a->n;
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

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    NEED_CTX;
    if (!n) return E_VALUE;
    if (n > g_mem_limit) return E_OOM;
    Alloc *a = malloc(n + 2 * GUARD);
    if (!a) return E_OOM;
    memset(a, GUARD_BYTE, n + 2 * GUARD);
    memset((unsigned char *)a + GUARD, 0xAB, n); /* garbage, so zero-filling is observable */
    a->n = n;
    pthread_mutex_lock(&g_alloc_lock);
    a->prev = g_allocs.prev; a->next = &g_allocs;
    g_allocs.prev->next = a; g_allocs.prev = a;
    pthread_mutex_unlock(&g_alloc_lock);
    *p = (CUdeviceptr)(uintptr_t)((unsigned char *)a + GUARD);
    g_live_dev++;
    return OK;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
    NEED_CTX;
    flush_all(); /* like the real driver, a free waits for the work in flight */
    Alloc *a = (Alloc *)(uintptr_t)(p - GUARD);
    pthread_mutex_lock(&g_alloc_lock);
    g_guard_breaches += !guards_intact(a); /* a breach stays counted after the free */
    a->prev->next = a->next; a->next->prev = a->prev;
    pthread_mutex_unlock(&g_alloc_lock);
    free(a);
    g_live_dev--;
    return OK;
}
CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) { (void)flags; NEED_CTX; *p = malloc(n); g_live_host++; return *p ? OK : E_OOM; }
CUresult cuMemFreeHost(void *p) { flush_all(); free(p); g_live_host--; return OK; }
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void *s) { NEED_CTX; enqueue_set(s, (void *)(uintptr_t)p, v, n); return OK; }

static CUresult copy(void *dst, const void *src, size_t n) { memcpy(dst, src, n); g_memcpy++; return OK; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { NEED_CTX; return copy((void *)(uintptr_t)d, s, n); }
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { NEED_CTX; return copy(d, (void *)(uintptr_t)s, n); }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { NEED_CTX; return copy((void *)(uintptr_t)d, (void *)(uintptr_t)s, n); }
/* The synchronous copies above run at once: they do not wait for work queued on svod_min's non-blocking
 * stream (neither does the real driver). The async ones below run when their stream gets there. */
static CUresult async_copy(void *st, void *d, const void *s, size_t n) { NEED_CTX; g_memcpy++; enqueue_copy(st, d, s, n); return OK; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, void *st) { return async_copy(st, (void *)(uintptr_t)d, s, n); }
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, void *st) { return async_copy(st, d, (const void *)(uintptr_t)s, n); }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void *st) {
    return async_copy(st, (void *)(uintptr_t)d, (const void *)(uintptr_t)s, n);
}
CUresult cuMemcpyPeerAsync(CUdeviceptr d, void *dc, CUdeviceptr s, void *sc, size_t n, void *st) {
    (void)dc; (void)sc;
    return async_copy(st, (void *)(uintptr_t)d, (const void *)(uintptr_t)s, n);
}

/* ---- streams and events ---- */
/* Events complete when their stream's work reaches them (deferred streams, below). On top of that, after
 * fake_set_events_pending(n) the next n recorded events stay not ready (cuEventQuery ->
 * CUDA_ERROR_NOT_READY) until cuEventSynchronize is called on them, or until any cuStreamSynchronize /
 * fake_complete_events(). */
#define E_NOT_READY 600
struct Event { double t; int pending; long epoch; Stream *stream; long recorded, done; };
static double g_clock = 0.0;
static int g_events_pending;
static long g_event_epoch; /* bumped by a stream sync: every event recorded before it is complete */
void fake_set_events_pending(int n) { g_events_pending = n; }
void fake_complete_events(void) { g_event_epoch++; }
static Stream *new_stream(void);
static void free_stream(Stream *s);
CUresult cuStreamCreate(void **s, unsigned flags) { (void)flags; NEED_CTX; *s = new_stream(); g_live_streams++; return *s ? OK : E_OOM; }
CUresult cuStreamSynchronize(void *s) { NEED_CTX; g_stream_syncs++; g_event_epoch++; return s ? flush_stream(s) : flush_all(); }
CUresult cuStreamDestroy_v2(void *s) { flush_stream(s); free_stream(s); g_live_streams--; return OK; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) { (void)f; NEED_CTX; enqueue_wait(s, e); return OK; }
CUresult cuEventCreate(void **e, unsigned flags) { (void)flags; NEED_CTX; *e = calloc(1, sizeof(Event)); g_live_events++; return OK; }
CUresult cuEventRecord(void *e, void *s) {
    Event *ev = e;
    NEED_CTX;
    enqueue_record(s, ev);
    ev->pending = g_events_pending > 0;
    if (ev->pending) g_events_pending--;
    ev->epoch = g_event_epoch;
    g_event_records++;
    return OK;
}
CUresult cuEventQuery(void *e) {
    Event *ev = e;
    g_event_queries++;
    CUresult rc = flush_event(ev); /* the GPU makes progress on its own */
    if (rc) return rc;
    return ev->pending && ev->epoch == g_event_epoch ? E_NOT_READY : OK;
}
CUresult cuEventSynchronize(void *e) { g_event_syncs++; ((Event *)e)->pending = 0; return flush_event(e); }
CUresult cuEventElapsedTime(float *ms, void *start, void *end) { *ms = (float)((((Event *)end)->t - ((Event *)start)->t) * 0.25); return OK; }
CUresult cuEventElapsedTime_v2(float *ms, void *start, void *end) { return cuEventElapsedTime(ms, start, end); }
CUresult cuEventDestroy_v2(void *e) { flush_all(); free(e); g_live_events--; return OK; }
CUresult cuStreamBeginCapture_v2(void *s, int mode) { (void)s; (void)mode; return E_NOT_SUPPORTED; }
CUresult cuStreamEndCapture(void *s, void **g) { (void)s; (void)g; return E_NOT_SUPPORTED; }

/* ---- modules and functions ---- */
typedef void (*EmuEntry)(const unsigned char *params);
typedef struct { char name[128]; int nparams; int sizes[64]; int max_dynamic_shared; EmuEntry emu; } Function;

/* The host emulation of the real kernel library (tests/cuda_host_emu.*): once loaded, an entry that the
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
typedef struct { char *text; } Module;

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

CUresult cuModuleLoadDataEx(void **mod, const void *image, unsigned n, int *opts, void **vals) {
    NEED_CTX;
    const char *text = (const char *)image;
    if (strstr(text, "FAKE_JIT_ERROR")) {
        set_log(n, opts, vals, "ptxas application ptx input, line 7; error   : Unknown symbol 'FAKE_JIT_ERROR'");
        return E_PTX;
    }
    Module *m = calloc(1, sizeof(Module));
    m->text = strdup(memcmp(text, "\x7f" "ELF", 4) ? text : "");
    *mod = m;
    g_live_modules++;
    return OK;
}

CUresult cuModuleUnload(void *mod) { flush_all(); Module *m = mod; free(m->text); free(m); g_live_modules--; return OK; }

static int parse_params(const char *open, Function *f) {
    const char *close = strchr(open, ')');
    const char *p = open;
    if (!close) return -1;
    while (p < close) {
        const char *q = strstr(p, ".param");
        if (!q || q > close) break;
        q += 6;
        while (isspace((unsigned char)*q)) q++;
        if (!strncmp(q, ".align", 6)) { q += 6; while (isspace((unsigned char)*q) || isdigit((unsigned char)*q)) q++; }
        if (*q++ != '.') return -1;
        q++; /* u, s, b, f */
        int bits = atoi(q), count = 1;
        while (isdigit((unsigned char)*q)) q++;
        while (isspace((unsigned char)*q)) q++;
        while (isalnum((unsigned char)*q) || *q == '_' || *q == '$' || *q == '%') q++;
        if (*q == '[') count = atoi(q + 1);
        if (f->nparams < 64) f->sizes[f->nparams++] = bits / 8 * count;
        p = q;
    }
    return 0;
}

CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
    NEED_CTX;
    const char *text = ((Module *)mod)->text, *p = text;
    size_t len = strlen(name);
    while ((p = strstr(p, ".entry")) != NULL) {
        p += 6;
        while (isspace((unsigned char)*p)) p++;
        if (strncmp(p, name, len)) continue;
        const char *q = p + len;
        while (isspace((unsigned char)*q)) q++;
        if (*q != '(') continue;
        Function *f = calloc(1, sizeof(Function)); /* leaked on purpose: tiny, test-only */
        snprintf(f->name, sizeof f->name, "%s", name);
        if (parse_params(q, f)) { free(f); return E_PTX; }
        f->emu = emulated_entry(name);
        *fn = f;
        return OK;
    }
    return E_NOT_FOUND;
}

CUresult cuFuncGetAttribute(int *v, int attr, void *fn) {
    const Function *f = fn;
    *v = attr == 0 ? g_func_max_threads : attr == 8 ? (f->max_dynamic_shared ? f->max_dynamic_shared : 49152) : 0;
    return OK;
}

/* Only the dynamic shared-memory opt-in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8) is modelled. */
CUresult cuFuncSetAttribute(void *fn, int attr, int value) {
    NEED_CTX;
    if (attr != 8 || value < 0 || value > 232448) return E_VALUE;
    ((Function *)fn)->max_dynamic_shared = value;
    g_func_set_attrs++;
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
    if (extra) {
        const void *buf = NULL;
        size_t have = (size_t)-1;
        for (int i = 0; extra[i]; i += 2) {
            if ((uintptr_t)extra[i] == 1) buf = extra[i + 1];
            else if ((uintptr_t)extra[i] == 2) have = *(const size_t *)extra[i + 1];
            else return E_VALUE;
        }
        if (!buf || have != want || want > 512) return E_VALUE;
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

/* A kernel's work: its emulated real code when loaded (a failed emulation is a failed launch), else run(). */
static CUresult execute(const Function *f, const unsigned char *a, const unsigned *dims) {
    if (f->emu) return g_emu_launch(f->emu, a, dims) ? E_LAUNCH_FAILED : OK;
    run(f, a, dims);
    return OK;
}

static void enqueue_kernel(void *stream, const Function *f, const unsigned char *args, size_t size, const unsigned *dims);
CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
    NEED_CTX;
    unsigned char args[512];
    size_t size = 0;
    CUresult rc = pack((const Function *)fn, params, extra, args, &size);
    if (rc) return rc;
    const Function *f = fn;
    if (shared > 49152u && shared > (unsigned)f->max_dynamic_shared) return E_VALUE; /* no opt-in: refused like the driver */
    unsigned dims[7] = {gx, gy, gz, bx, by, bz, shared};
    memcpy(g_last_dims, dims, sizeof dims);
    memcpy(g_last_args, args, size);
    g_last_size = size;
    g_last_extra = extra != NULL;
    g_launches++;
    enqueue_kernel(stream, f, args, size, dims);
    return OK;
}

/* ---- graphs (kernel nodes only) ---- */
typedef struct {
    void *func;
    unsigned gx, gy, gz, bx, by, bz, shared;
    void **kernelParams, **extra;
    void *kern, *ctx;
} NodeParams;
/* a kernel node (f set) or a 1-D device copy node (f NULL: copy_n bytes copy_src -> copy_dst) */
typedef struct {
    const Function *f; unsigned char args[512]; unsigned dims[7]; CUdeviceptr copy_dst, copy_src; size_t copy_n;
    unsigned char deps[128]; /* deps[j]: this node waits for node j */
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
typedef struct { int n; Node nodes[128]; } Graph;
typedef struct { const Graph *src; int n; Node nodes[128]; } Exec;

CUresult cuGraphCreate(void **g, unsigned flags) { (void)flags; NEED_CTX; *g = calloc(1, sizeof(Graph)); return OK; }
CUresult cuGraphDestroy(void *g) { free(g); return OK; }

CUresult cuGraphAddKernelNode_v2(void **node, void *graph, void **deps, size_t ndeps, const NodeParams *p) {
    Graph *g = graph;
    size_t size;
    NEED_CTX;
    for (size_t i = 0; i < ndeps; i++)
        if ((Node *)deps[i] < g->nodes || (Node *)deps[i] >= g->nodes + g->n) return E_VALUE;
    if (g->n >= 128) return E_OOM;
    Node *nd = &g->nodes[g->n];
    memset(nd->deps, 0, sizeof nd->deps);
    for (size_t i = 0; i < ndeps; i++) nd->deps[(Node *)deps[i] - g->nodes] = 1;
    nd->f = p->func;
    CUresult rc = pack(nd->f, p->kernelParams, p->extra, nd->args, &size);
    if (rc) return rc;
    memcpy(nd->dims, &p->gx, sizeof nd->dims); /* gx..shared are seven consecutive unsigneds */
    g->n++;
    *node = nd;
    return OK;
}
CUresult cuGraphAddKernelNode(void **node, void *graph, void **deps, size_t ndeps, const NodeParams *p) {
    return cuGraphAddKernelNode_v2(node, graph, deps, ndeps, p);
}

/* Only what svod_min builds: one row of device memory to device memory, in the calling context. */
CUresult cuGraphAddMemcpyNode(void **node, void *graph, void **deps, size_t ndeps, const Memcpy3D *p, void *ctx) {
    Graph *g = graph;
    NEED_CTX;
    if (g_fail_memcpy_nodes) return E_NOT_SUPPORTED;
    for (size_t i = 0; i < ndeps; i++)
        if ((Node *)deps[i] < g->nodes || (Node *)deps[i] >= g->nodes + g->n) return E_VALUE;
    if (ctx != g_current || p->srcMemoryType != 2 || p->dstMemoryType != 2 || p->Height != 1 || p->Depth != 1 ||
        p->srcXInBytes || p->dstXInBytes || p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes)
        return E_VALUE;
    if (g->n >= 128) return E_OOM;
    Node *nd = &g->nodes[g->n++];
    memset(nd, 0, sizeof *nd);
    for (size_t i = 0; i < ndeps; i++) nd->deps[(Node *)deps[i] - g->nodes] = 1;
    nd->copy_dst = p->dstDevice;
    nd->copy_src = p->srcDevice;
    nd->copy_n = p->WidthInBytes;
    g_memcpy_nodes++;
    *node = nd;
    return OK;
}

CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    (void)flags;
    NEED_CTX;
    Exec *e = calloc(1, sizeof(Exec));
    e->src = graph;
    e->n = e->src->n;
    memcpy(e->nodes, e->src->nodes, sizeof e->nodes);
    *exec = e;
    return OK;
}
CUresult cuGraphExecDestroy(void *e) { flush_all(); free(e); return OK; }

CUresult cuGraphExecKernelNodeSetParams_v2(void *exec, void *node, const NodeParams *p) {
    Exec *e = exec;
    size_t size;
    NEED_CTX;
    ptrdiff_t i = (const Node *)node - e->src->nodes;
    if (i < 0 || i >= e->n || p->func != (void *)e->nodes[i].f) return E_VALUE;
    g_set_params++;
    memcpy(e->nodes[i].dims, &p->gx, sizeof e->nodes[i].dims);
    return pack(e->nodes[i].f, p->kernelParams, p->extra, e->nodes[i].args, &size);
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
        for (int j = 0; j < e->n && ready; j++) ready = !e->nodes[i].deps[j] || done[j];
        if (ready && (pick < 0 || !g_graph_fifo)) pick = i;
    }
    done[pick] = 1; /* a DAG always has a ready node while some are left */
    return pick;
}

/* Runs a launched graph's snapshot (nodes set after the launch only affect later launches). */
static CUresult run_graph(const Exec *e) {
    unsigned char done[128] = {0};
    for (int step = 0; step < e->n; step++) {
        const Node *nd = &e->nodes[next_ready(e, done)];
        if (nd->f) {
            CUresult rc = execute(nd->f, nd->args, nd->dims);
            if (rc) return rc;
        } else memmove((void *)(uintptr_t)nd->copy_dst, (const void *)(uintptr_t)nd->copy_src, nd->copy_n);
    }
    return OK;
}

static void enqueue_graph(void *stream, const Exec *e);
CUresult cuGraphLaunch(void *exec, void *stream) {
    NEED_CTX;
    enqueue_graph(stream, exec);
    g_graph_launches++;
    return OK;
}

/* ---- deferred streams ----
 * Work queued on a stream runs later, in order, when something waits for it: cuStreamSynchronize,
 * cuEventSynchronize / cuEventQuery (up to that event), cuCtxSynchronize, a stream waiting on an event
 * of another stream (when the waiting stream gets there), and frees and destroys (everything). That is
 * the latest a GPU may run it, so host code that reads a pinned block, or reuses one, before the DMA is
 * done sees the wrong bytes here too. Work on the NULL stream, and the synchronous copies, run at once.
 * A kernel that fails while a stream runs (an emulated launch, see fake_load_emulator) is reported by
 * the call that ran it, and by every later one that waits for work: the error is sticky, as on a GPU. */
enum { OP_COPY, OP_SET, OP_KERNEL, OP_GRAPH, OP_RECORD, OP_WAIT };
typedef struct Op {
    int kind;
    void *dst; const void *src; size_t n; unsigned char value; /* copy, set */
    const Function *f; unsigned char args[512]; unsigned dims[7]; /* kernel */
    Exec *graph; /* a snapshot, freed once run */
    Event *event; long gen; /* record, wait */
    struct Op *next;
} Op;
struct Stream { Op *head, *tail; int count; };
enum { MAX_QUEUED = 256, MAX_STREAMS = 64 };
static pthread_mutex_t g_queue_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static Stream *g_streams[MAX_STREAMS];
static CUresult g_async_error; /* sticky */

static Stream *new_stream(void) {
    Stream *s = calloc(1, sizeof(Stream));
    pthread_mutex_lock(&g_queue_lock);
    for (int i = 0; s && i < MAX_STREAMS; i++)
        if (!g_streams[i]) { g_streams[i] = s; break; }
    pthread_mutex_unlock(&g_queue_lock);
    return s;
}

static void free_stream(Stream *s) {
    pthread_mutex_lock(&g_queue_lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (g_streams[i] == s) g_streams[i] = NULL;
    pthread_mutex_unlock(&g_queue_lock);
    free(s);
}

static CUresult flush_until(Stream *s, const Event *e, long gen);
static int live_stream(const Stream *s);
static CUresult run_op(Op *op) {
    CUresult rc = OK;
    switch (op->kind) {
    case OP_COPY: memmove(op->dst, op->src, op->n); break;
    case OP_SET: memset(op->dst, op->value, op->n); break;
    case OP_KERNEL: rc = execute(op->f, op->args, op->dims); break;
    case OP_GRAPH: rc = run_graph(op->graph); free(op->graph); break;
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

/* Run the queued work of ``s`` up to and including the record of generation ``gen`` of ``e`` (all with e NULL). */
static CUresult flush_until(Stream *s, const Event *e, long gen) {
    pthread_mutex_lock(&g_queue_lock);
    while (s->head && !(e && e->done >= gen)) {
        Op *op = s->head;
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        s->count--;
        run_op(op);
    }
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

static void enqueue(void *stream, Op *op) {
    Stream *s = stream;
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

static void enqueue_copy(void *stream, void *dst, const void *src, size_t n) {
    Op *op = new_op(OP_COPY);
    op->dst = dst; op->src = src; op->n = n;
    enqueue(stream, op);
}

static void enqueue_set(void *stream, void *dst, unsigned char value, size_t n) {
    Op *op = new_op(OP_SET);
    op->dst = dst; op->value = value; op->n = n;
    enqueue(stream, op);
}

static void enqueue_kernel(void *stream, const Function *f, const unsigned char *args, size_t size, const unsigned *dims) {
    Op *op = new_op(OP_KERNEL);
    op->f = f;
    memcpy(op->args, args, size);
    memcpy(op->dims, dims, sizeof op->dims);
    enqueue(stream, op);
}

static void enqueue_graph(void *stream, const Exec *e) {
    Op *op = new_op(OP_GRAPH);
    op->graph = malloc(sizeof(Exec));
    if (!op->graph) abort();
    memcpy(op->graph, e, offsetof(Exec, nodes) + (size_t)e->n * sizeof(Node));
    enqueue(stream, op);
}

static void enqueue_record(void *stream, Event *e) {
    Op *op = new_op(OP_RECORD);
    pthread_mutex_lock(&g_queue_lock);
    e->stream = stream;
    op->event = e;
    op->gen = ++e->recorded;
    pthread_mutex_unlock(&g_queue_lock);
    enqueue(stream, op);
}

static void enqueue_wait(void *stream, Event *e) {
    Op *op = new_op(OP_WAIT);
    op->event = e;
    op->gen = e->recorded;
    enqueue(stream, op);
}
