/* Runs a case's driver against kernel code, on an architecture with no Python.
 *
 * Built twice per case, statically, with the same driver (driver.c, which defines
 * run_case() and calls entry points through svod_sym()):
 *   - reference: the kernel object linked in by a real linker; svod_sym() reads the
 *     linked-in table svod_entries[] (generated, one line per entry point);
 *   - loaded (-DSVOD_LOADED): no kernel object. "harness --symbols" prints the
 *     run-time address of every external the object needs (svod_keep[], generated),
 *     the host relocates the object for a fixed base with those addresses, and
 *     "harness IMAGE" maps the image at that base, makes text read+execute and
 *     calls run_case(), with svod_sym() reading the entry points from IMAGE.
 *
 * IMAGE: "SVODIMG1", then little-endian u64s base, size, nseg, nseg x (offset,
 * size, prot), nsym, nsym x (address, 56-byte NUL-padded name), then size bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct svod_named { const char *name; void *addr; };

#define MAX_SEGMENTS 256  /* one object has two or three; a bundle's objects side by side (onnx_replay.py) more */

#ifdef SVOD_LOADED
extern const struct svod_named svod_keep[];
extern const int svod_keep_n;

static unsigned char *names_blob;
static uint64_t nsyms;

void *svod_sym(const char *name) {
    for (uint64_t i = 0; i < nsyms; i++) {
        unsigned char *rec = names_blob + i * 64;
        if (strncmp((const char *)rec + 8, name, 56) == 0) {
            uint64_t addr;
            memcpy(&addr, rec, 8);
            return (void *)(uintptr_t)addr;
        }
    }
    fprintf(stderr, "harness: no entry point %s in the image\n", name);
    exit(3);
}

static uint64_t read_u64(FILE *fh) {
    uint64_t v;
    if (fread(&v, 8, 1, fh) != 1) { fprintf(stderr, "harness: truncated image\n"); exit(3); }
    return v;
}

static void map_image(const char *path) {
    FILE *fh = fopen(path, "rb");
    char magic[8];
    if (!fh || fread(magic, 8, 1, fh) != 1 || memcmp(magic, "SVODIMG1", 8) != 0) {
        fprintf(stderr, "harness: %s is not an image\n", path);
        exit(3);
    }
    uint64_t base = read_u64(fh), size = read_u64(fh), nseg = read_u64(fh);
    static uint64_t seg[MAX_SEGMENTS][3];
    if (nseg > MAX_SEGMENTS) { fprintf(stderr, "harness: too many segments\n"); exit(3); }
    for (uint64_t i = 0; i < nseg; i++)
        for (int k = 0; k < 3; k++) seg[i][k] = read_u64(fh);
    nsyms = read_u64(fh);
    names_blob = malloc(nsyms * 64 + 1);
    if (nsyms && fread(names_blob, 64, nsyms, fh) != nsyms) { fprintf(stderr, "harness: truncated names\n"); exit(3); }
    void *want = (void *)(uintptr_t)base;
    void *got = mmap(want, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (got != want) {
        fprintf(stderr, "harness: could not map the image at %p (got %p)\n", want, got);
        exit(3);
    }
    if (fread(got, 1, size, fh) != size) { fprintf(stderr, "harness: truncated image bytes\n"); exit(3); }
    fclose(fh);
    for (uint64_t i = 0; i < nseg; i++) {
        int prot = (int)seg[i][2];  /* 1 read, 2 write, 4 execute, as mmap's PROT_* */
        uint64_t start = seg[i][0] & ~(uint64_t)4095, end = (seg[i][0] + seg[i][1] + 4095) & ~(uint64_t)4095;
        if (prot & PROT_EXEC) __builtin___clear_cache((char *)got + start, (char *)got + end);
        if (mprotect((char *)got + start, end - start, prot) != 0) { perror("harness: mprotect"); exit(3); }
    }
}
#else
extern const struct svod_named svod_entries[];
extern const int svod_entries_n;

void *svod_sym(const char *name) {
    for (int i = 0; i < svod_entries_n; i++)
        if (strcmp(svod_entries[i].name, name) == 0) return svod_entries[i].addr;
    fprintf(stderr, "harness: no entry point %s linked in\n", name);
    exit(3);
}
#endif

void run_case(void);

int main(int argc, char **argv) {
#ifdef SVOD_LOADED
    if (argc == 2 && strcmp(argv[1], "--symbols") == 0) {
        for (int i = 0; i < svod_keep_n; i++) printf("%s 0x%llx\n", svod_keep[i].name, (unsigned long long)(uintptr_t)svod_keep[i].addr);
        return 0;
    }
    if (argc != 2) { fprintf(stderr, "usage: harness --symbols | harness IMAGE\n"); return 2; }
    map_image(argv[1]);
#else
    (void)argc; (void)argv;
#endif
    run_case();
    fflush(stdout);
    return 0;
}
