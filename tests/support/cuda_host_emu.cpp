/* The runtime of the host CUDA emulation (see cuda_host_emu.h): runs one launch's blocks in order, the
 * threads of each block as fibers on one OS thread, switching at __syncthreads().
 *
 * svod_emu_launch returns 0, or -1 when threads of one block disagree about a barrier (some returned
 * while others wait at __syncthreads(): undefined behaviour on a GPU, a hang or garbage there), or -2
 * when a block is larger than 1024 threads, or -3 when the fiber stacks cannot be mapped. The fake
 * driver turns a non-zero result into CUDA_ERROR_LAUNCH_FAILED.
 */
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <vector>

#include "cuda_host_emu.h"

extern "C" {
dim3 threadIdx, blockIdx, blockDim, gridDim;
}

namespace {

enum State { READY, AT_BARRIER, DONE };

struct Fiber {
    ucontext_t context;
    State state;
    dim3 index;
};

typedef void (*Entry)(const unsigned char *);

const size_t STACK_BYTES = 64 << 10; /* each fiber's stack sits above an inaccessible guard page */
pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* one launch at a time: the globals are shared */
ucontext_t g_scheduler;
Fiber *g_current;
Entry g_entry;
const unsigned char *g_params;
int g_reverse; /* run blocks, and a block's fibers, last to first: exposes the races the other order hides */

void fiber_main() {
    g_entry(g_params);
    g_current->state = DONE; /* then uc_link returns to the scheduler */
}

/* Run every fiber until it waits at a barrier or returns; repeat while all of them wait. */
/* Fiber stacks, each above a PROT_NONE page: a kernel whose locals overflow its stack faults at once
 * instead of silently overwriting the next fiber's stack. */
struct Stacks {
    char *base = nullptr;
    size_t slot = 0, count = 0;
    explicit Stacks(size_t n) : count(n) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        slot = page + STACK_BYTES;
        void *m = mmap(nullptr, slot * n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return;
        base = (char *)m;
        for (size_t i = 0; i < n; i++) mprotect(base + i * slot, page, PROT_NONE);
    }
    ~Stacks() {
        if (base) munmap(base, slot * count);
    }
    char *stack(size_t i) const { return base + i * slot + (slot - STACK_BYTES); }
};

int run_block(std::vector<Fiber> &fibers, const Stacks &stacks) {
    for (size_t i = 0; i < fibers.size(); i++) {
        Fiber &f = fibers[i];
        getcontext(&f.context);
        f.context.uc_stack.ss_sp = stacks.stack(i);
        f.context.uc_stack.ss_size = STACK_BYTES;
        f.context.uc_link = &g_scheduler;
        f.state = READY;
        makecontext(&f.context, fiber_main, 0);
    }
    for (;;) {
        size_t waiting = 0, done = 0;
        for (size_t i = 0; i < fibers.size(); i++) {
            Fiber &f = fibers[g_reverse ? fibers.size() - 1 - i : i];
            if (f.state != READY) continue;
            g_current = &f;
            threadIdx = f.index;
            swapcontext(&g_scheduler, &f.context);
        }
        for (Fiber &f : fibers) (f.state == DONE ? done : waiting)++;
        if (done == fibers.size()) return 0;
        if (done) return -1;
        for (Fiber &f : fibers) f.state = READY;
    }
}

}  // namespace

/* Between two barriers, threads run one after another in index order (or reversed): a thread that reads
 * shared memory another thread of the block writes in the same phase (a missing __syncthreads) reads it
 * too early or too late in at least one of the two orders, so tests run the shared-memory kernels both ways. */
extern "C" void svod_emu_set_reverse(int reverse) { g_reverse = reverse; }

extern "C" void svod_emu_syncthreads(void) {
    g_current->state = AT_BARRIER;
    swapcontext(&g_current->context, &g_scheduler);
}

/* dims: grid x, y, z, block x, y, z */
extern "C" int svod_emu_launch(Entry entry, const unsigned char *params, const unsigned *dims) {
    unsigned long threads = (unsigned long)dims[3] * dims[4] * dims[5];
    if (threads == 0 || threads > 1024) return -2;
    pthread_mutex_lock(&g_lock);
    gridDim = dim3{dims[0], dims[1], dims[2]};
    blockDim = dim3{dims[3], dims[4], dims[5]};
    g_entry = entry;
    g_params = params;
    std::vector<Fiber> fibers(threads);
    Stacks stacks(threads);
    if (!stacks.base) {
        pthread_mutex_unlock(&g_lock);
        return -3;
    }
    for (unsigned long t = 0; t < threads; t++)
        fibers[t].index = dim3{(unsigned)(t % dims[3]), (unsigned)(t / dims[3] % dims[4]), (unsigned)(t / dims[3] / dims[4])};
    int rc = 0;
    unsigned long blocks = (unsigned long)dims[0] * dims[1] * dims[2];
    for (unsigned long i = 0; i < blocks && !rc; i++) {
        unsigned long b = g_reverse ? blocks - 1 - i : i; /* reversed too: blocks must not depend on each other */
        blockIdx = dim3{(unsigned)(b % dims[0]), (unsigned)(b / dims[0] % dims[1]), (unsigned)(b / dims[0] / dims[1])};
        rc = run_block(fibers, stacks);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}
