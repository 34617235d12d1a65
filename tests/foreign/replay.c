/* Replays a bundle's plan as a list of kernel calls (tests/foreign/onnx_replay.py), for harness.c.
 *
 * SVOD_REPLAY names the file onnx_replay.replay_file() wrote: "SVODRPL1", u64 blob size, number of
 * calls, number of outputs; the blob (weights, inputs, outputs and the arena, each buffer at its
 * offset); per call a 56-byte NUL-padded entry name, u64 nargs, ncalls, core_pos (all ones: none),
 * pointer mask, then nargs int64 values (a pointer argument is an offset into the blob); per output
 * u64 offset, size. Each call runs ncalls times with its core_pos argument 0 .. ncalls-1; the outputs'
 * bytes are written, in order, to the file SVOD_REPLAY_OUT.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 24

void *svod_sym(const char *name);

typedef uint64_t u64;
typedef void (*call24)(u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64,
                       u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64);

static void fail(const char *what) {
    fprintf(stderr, "replay: %s\n", what);
    exit(4);
}

static u64 take_u64(FILE *fh) {
    u64 v;
    if (fread(&v, 8, 1, fh) != 1) fail("truncated replay file");
    return v;
}

static void run_call(FILE *fh, unsigned char *blob, u64 blob_size) {
    char name[57] = {0};
    u64 a[MAX_ARGS] = {0};
    if (fread(name, 56, 1, fh) != 1) fail("truncated call");
    u64 nargs = take_u64(fh), ncalls = take_u64(fh), core_pos = take_u64(fh), mask = take_u64(fh);
    if (nargs > MAX_ARGS || (core_pos != ~(u64)0 && core_pos >= nargs)) fail("bad call header");
    for (u64 i = 0; i < nargs; i++) {
        u64 v = take_u64(fh);
        if (mask >> i & 1) {
            if (v > blob_size) fail("pointer argument outside the blob");
            v = (u64)(uintptr_t)(blob + v);
        }
        a[i] = v;
    }
    call24 f = (call24)svod_sym(name);
    for (u64 c = 0; c < ncalls; c++) {
        if (core_pos != ~(u64)0) a[core_pos] = c;
        f(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
          a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23]);
    }
}

void run_case(void) {
    const char *in = getenv("SVOD_REPLAY"), *out = getenv("SVOD_REPLAY_OUT");
    if (!in || !out) fail("SVOD_REPLAY and SVOD_REPLAY_OUT must name the replay file and the outputs' file");
    FILE *fh = fopen(in, "rb");
    char magic[8];
    if (!fh || fread(magic, 8, 1, fh) != 1 || memcmp(magic, "SVODRPL1", 8) != 0) fail("not a replay file");
    u64 blob_size = take_u64(fh), ncalls = take_u64(fh), noutputs = take_u64(fh);
    void *blob = NULL;
    if (posix_memalign(&blob, 64, blob_size ? blob_size : 64) != 0) fail("out of memory");
    if (blob_size && fread(blob, 1, blob_size, fh) != blob_size) fail("truncated blob");
    for (u64 k = 0; k < ncalls; k++) run_call(fh, blob, blob_size);
    FILE *oh = fopen(out, "wb");
    if (!oh) fail("cannot write the outputs' file");
    for (u64 k = 0; k < noutputs; k++) {
        u64 offset = take_u64(fh), size = take_u64(fh);
        if (offset > blob_size || size > blob_size - offset) fail("output outside the blob");
        if (size && fwrite((unsigned char *)blob + offset, 1, size, oh) != size) fail("short write");
    }
    fclose(oh);
    fclose(fh);
}
