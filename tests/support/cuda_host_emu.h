/* Host emulation of the CUDA C subset svod_min's kernel templates use, for tests on machines without a GPU.
 *
 * Included (g++ -include) before a generated .cu file, it turns the CUDA keywords into C++ and
 * threadIdx / blockIdx / blockDim / gridDim into globals that tests/support/cuda_host_emu.cpp sets while it
 * runs every thread of a block as a fiber (ucontext) and __syncthreads() as a real barrier across them.
 * __shared__ arrays become function statics: blocks run one after another, so one copy is the block's.
 *
 * SVOD_EMU_ENTRY(name) defines `extern "C" void svod_emu_<name>(const unsigned char *params)`, which
 * unpacks a cuLaunchKernel parameter buffer into the kernel's arguments. The offsets come from the C++
 * compiler's own alignof/sizeof of the kernel's parameter types (natural alignment, as the CUDA ABI
 * lays kernel parameters out), independently of svod_min's Python packing.
 */
#ifndef SVOD_CUDA_HOST_EMU_H
#define SVOD_CUDA_HOST_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <utility>

struct dim3 {
    unsigned x, y, z;
};
extern "C" dim3 threadIdx, blockIdx, blockDim, gridDim;
extern "C" void svod_emu_syncthreads(void);

#define __global__
#define __launch_bounds__(...)
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads() svod_emu_syncthreads()

namespace svod_emu {

template <typename T>
static T take(const unsigned char *params, size_t &offset) {
    offset = (offset + alignof(T) - 1) / alignof(T) * alignof(T);
    T value;
    memcpy(&value, params + offset, sizeof(T));
    offset += sizeof(T);
    return value;
}

template <typename... A>
static void call(void (*kernel)(A...), const unsigned char *params) {
    size_t offset = 0;
    std::tuple<A...> args{take<A>(params, offset)...}; /* braced list: evaluated left to right */
    std::apply(kernel, args);
}

}  // namespace svod_emu

#define SVOD_EMU_ENTRY(name) \
    extern "C" void svod_emu_##name(const unsigned char *params) { svod_emu::call(name, params); }

#endif
