"""C cases shared by the loader tests: sources, and how to call them and compare the results.

Used by ``test_linker_oracle.py`` (the sources, relocated and checked against
ld.lld) and by the aarch64 stage in ``tests/aarch64/`` (each case executed
through ``load_object`` and through ``ctypes.CDLL`` of the same source built
``-shared``, at ``-O0``/``-O2``, with and without ``-fno-plt``).

An :class:`ExecCase` names a source, the externals it needs defined
(``PROVIDER`` defines them: for the shared object it is linked in, for the
loader it is loaded as a second object whose addresses are handed over as
symbols) and an ``exercise(get)`` function that calls entry points through
``get(name, restype, *argtypes)`` (and ``get.address(name)`` for a symbol's
address on that side) and returns comparable values (never raw addresses).
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any, Callable, List

Getter = Callable[..., Any]  # get(name, restype, *argtypes) -> a callable; also get.address(name)

# --- sources ------------------------------------------------------------------------------

#: External calls (libm through veneers/stubs, memcpy), a function-pointer table with an
#: external entry, .bss and .data.
EXEC_SOURCE = r"""
float expf(float);
void *memcpy(void *, const void *, unsigned long);
int table[8] = {3, 1, 4, 1, 5, 9, 2, 6};
int counter;
__attribute__((noinline)) float sq(float x) { return x * x; }
static float cube(float x) { return x * x * x; }
float (*const fns[3])(float) = {expf, sq, cube};
float call_expf(float x) { return expf(x) + 1.0f; }
float tail_expf(float x) { return expf(x); }
float via_table(int i, float x) { return fns[i % 3](x); }
int read_table(int i) { counter += i; return table[i & 7] * 100 + counter; }
void copy(char *d, const char *s) { memcpy(d, s, 4096); }
"""

#: aarch64 GOT loads of external data and functions, CALL26/JUMP26, ABS64 pointers.
A64_GOT = r"""
float expf(float);
void *memcpy(void *, const void *, unsigned long);
extern int ext_data;
extern void ext_fn(void);
int gvar[4] = {5, 6, 7, 8};
__attribute__((noinline)) int helper(int i) { return gvar[i & 3] * 3; }
float call_expf(float x) { return expf(x) + 1.0f; }
float tail_expf(float x) { return expf(x); }
int call_helper(int i) { return helper(i) + 1; }
int read_ext(void) { return ext_data + gvar[1]; }
void *addr_fn(void) { return (void *)&ext_fn; }
void copy(char *d, const char *s) { memcpy(d, s, 4096); }
void *const ptrs[3] = {(void *)&ext_fn, (void *)helper, (void *)&gvar[2]};
"""

#: aarch64 ADRP + ADD / LDST8..128 to .data and .bss at odd element offsets, local calls.
A64_DIRECT = r"""
typedef float v4f __attribute__((vector_size(16)));
extern int near_data __attribute__((visibility("hidden")));
/* Element 3 of each array: a non-zero, odd-multiple-of-the-size low part,
   so a wrong LDST scale or a dropped addend changes the address. */
signed char c8[8] = {1};
short s16[8] = {2};
int i32[8] = {3};
long l64[8] = {4};
v4f q128[8] = {{1, 2, 3, 4}};
static int tab[64];
int get_c(void) { return c8[3]; }
int get_s(void) { return s16[3]; }
int get_i(void) { return i32[3]; }
long get_l(void) { return l64[3]; }
v4f get_q(void) { return q128[3]; }
float get_q_sum(void) { v4f q = get_q(); return q[0] + 2 * q[1] + 3 * q[2] + 4 * q[3]; }
void set_all(int v) { c8[3] = v; s16[3] = v; i32[3] = v; l64[3] = v; q128[3] = (v4f){v, v, v, v}; }
int *addr_tab(void) { return &tab[5]; }
int read_near(void) { return near_data; }
__attribute__((noinline)) static int helper_s(int x) { return x * 7 + i32[1]; }
int call_local(int x) { return helper_s(x) + 1; }
int tail_local(int x) { return helper_s(x + 1); }
"""

#: The shape of issue 19's defect report: GCC vector extensions at -O2 -fPIC, 16-byte
#: constants loaded by LDST128 from .rodata.cst16, static .bss/.data/.rodata reached by
#: ADRP + ADD (one ADD far from its ADRP), memset through CALL26, arrays over several pages.
VECTOR_SOURCE = r"""
typedef float v4f __attribute__((vector_size(16)));
typedef int v4i __attribute__((vector_size(16)));
void *memset(void *, int, unsigned long);
static float big[3000];
static v4f vacc[300];
static float tail_arr[100];
static float wts[1500] = {1, 2, 3, 4, 5, 6, 7, 8};
static const float coef[2000] = {0.5f, 0.25f, 0.125f, 2, 3, 4, 5, 6, [1999] = 9};
static const v4f kv[8] = {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}, {13, 14, 15, 16}};
__attribute__((noinline)) static float mix(float a, int i) { return a * coef[i % 2000] + wts[i % 1500]; }
float vec_kernel(const float *x, int n) {
    v4f s = {1.5f, -2.25f, 3.125f, 0.75f};
    v4i m = {1, 2, 3, 4};
    memset(big, 0, n * 40 * sizeof(float));
    memset(vacc, 0, n * 4 * sizeof(v4f));
    for (int i = 0; i + 4 <= n; i += 4) {
        v4f v = {x[i], x[i + 1], x[i + 2], x[i + 3]};
        s = s * v + (v4f){0.5f, 0.25f, 0.125f, 0.0625f} + kv[i & 7];
        m = m * (v4i){3, 5, 7, 9} + (v4i){1, 1, 2, 2};
        vacc[(i * 7) % 300] += s * (v4f){1, -1, 2, -2};
        big[(i * 131) % 3000] += mix(s[1], i * 17);
        tail_arr[i % 100] += s[2];
    }
    float r = 0;
    for (int k = 0; k < 3000; k++) r += big[k] * (float)((k % 13) + 1);
    for (int k = 0; k < 300; k++) r += vacc[k][0] - vacc[k][1] + vacc[k][2] * vacc[k][3];
    for (int k = 0; k < 100; k++) r += tail_arr[k];
    return r + s[0] + s[1] + s[2] + s[3] + (float)(m[0] & 0xffff);
}
"""

#: Jump tables, a string-pointer table, libm, memcpy/memset (tests/loader/test_jit_loader.py's
#: kitchen sink, without #include so it also builds for the other architecture).
KITCHEN_SINK = r"""
float expf(float); float logf(float); float powf(float, float);
unsigned long strlen(const char *);
void *memcpy(void *, const void *, unsigned long);
void *memset(void *, int, unsigned long);
static const float table[8] = {1, 2, 3, 5, 7, 11, 13, 17};
static int counter;
int global_state = 100;
static const char *const names[3] = {"zero", "one", "two"};
typedef float (*unop)(float);
static float twice(float x) { return 2 * x; }
static float halve(float x) { return x / 2; }
static unop const ops[2] = {twice, halve};
int bump(void) { counter += 1; global_state += 1; return counter * 1000 + global_state; }
float lookup(int i) { return table[i & 7]; }
float libm(float x) { return expf(x) + logf(x + 2.0f) + powf(x, 1.5f); }
int jump(int x) {
    switch (x) {
    case 0: return 11; case 1: return 22; case 2: return 33; case 3: return 44;
    case 4: return 55; case 5: return 66; case 6: return 77; case 7: return 88;
    default: return -1;
    }
}
int name_len(int i) { return (int)strlen(names[i % 3]); }
float apply_op(int i, float x) { return ops[i & 1](x); }
void big_copy(char *dst, const char *src) { memcpy(dst, src, 16384); memset(dst, 'z', 100); }
"""


def big_function_source(blocks: int = 1000) -> str:
    """One function of ~``blocks`` * 40 bytes of code whose external calls sit at both ends.

    The calls reach libm through the loader's veneers from far inside a big body, and
    ``volatile`` keeps every block (the compiler cannot fold them away).
    """
    body = "\n".join(
        "    acc = acc * 0.75f + v[%d & 7] * 0.%02df; v[%d & 7] = acc;" % (i, i % 17 + 1, i + 3) for i in range(blocks)
    )
    return (
        "float expf(float); float sinf(float);\n"
        "float big_fn(float x) {\n"
        "    volatile float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};\n"
        "    float acc = expf(x);\n%s\n"
        "    return acc + sinf(acc);\n}\n" % body
    )


#: Thread-local storage: the loader must refuse it by name, never run it.
TLS_SOURCE = r"""
__thread int tls_counter;
int bump_tls(void) { return ++tls_counter; }
"""

#: Definitions of the externals the cases above declare but do not define.
PROVIDER = r"""
int ext_data = 1234;
void ext_fn(void) {}
int near_data __attribute__((visibility("hidden"))) = 77;
"""

# --- how each case is exercised --------------------------------------------------------------

F, I, P = ctypes.c_float, ctypes.c_int, ctypes.c_void_p


def _exercise_exec(get: Getter) -> List[Any]:
    call_expf, tail_expf = get("call_expf", F, F), get("tail_expf", F, F)
    via_table, read_table = get("via_table", F, I, F), get("read_table", I, I)
    out: List[Any] = []
    for x in (-2.0, 0.0, 0.5, 3.25):
        out += [call_expf(x), tail_expf(x)] + [via_table(i, x) for i in range(3)]
    assert math.isclose(out[1], math.exp(-2.0), rel_tol=1e-6)  # the real libm, not merely equal
    out += [read_table(i) for i in range(10)]
    return out + [_copies(get("copy", None, P, P), 4096)]


def _copies(fn: Any, size: int) -> bool:
    src = (ctypes.c_char * size)(*[(i * 7 + 3) % 256 for i in range(size)])
    dst = (ctypes.c_char * size)()
    fn(ctypes.addressof(dst), ctypes.addressof(src))
    return bytes(dst[:]) == bytes(src[:])


def _exercise_got(get: Getter) -> List[Any]:
    out: List[Any] = [get("call_expf", F, F)(0.5), get("tail_expf", F, F)(1.5)]
    out += [get("call_helper", I, I)(i) for i in range(5)] + [get("read_ext", I)()]
    out.append(get("addr_fn", P)() == get.address("ext_fn"))
    return out + [_copies(get("copy", None, P, P), 4096)]


def _exercise_direct(get: Getter) -> List[Any]:
    getters = [get(n, r) for n, r in (("get_c", I), ("get_s", I), ("get_i", I), ("get_l", ctypes.c_long))]
    get_q = get("get_q_sum", F)  # (a vector return is in q0, which ctypes cannot read)
    out: List[Any] = [g() for g in getters] + [get_q()]
    get("set_all", None, I)(9)
    out += [g() for g in getters] + [get_q()]
    addr = get("addr_tab", P)()
    out += [get("read_near", I)(), bool(addr) and addr % 4 == 0]
    return out + [get("call_local", I, I)(i) for i in range(4)] + [get("tail_local", I, I)(3)]


def _exercise_vector(get: Getter) -> List[Any]:
    fn = get("vec_kernel", F, P, I)
    out = []
    for n in (4, 64, 75):
        x = (ctypes.c_float * n)(*[(i % 7) * 0.5 - 1 for i in range(n)])
        out += [fn(x, n), fn(x, n)]
    return out


def _exercise_kitchen(get: Getter) -> List[Any]:
    out: List[Any] = [get("bump", I)() for _ in range(3)]
    out += [get("lookup", F, I)(i) for i in range(10)]
    out += [round(get("libm", F, F)(x), 4) for x in (0.5, 1.0, 2.5)]
    out += [get("jump", I, I)(i) for i in range(-1, 10)]
    out += [get("name_len", I, I)(i) for i in range(3)] + [get("apply_op", F, I, F)(i, 3.0) for i in range(2)]
    src = ctypes.create_string_buffer(bytes(range(256)) * 64)
    dst = ctypes.create_string_buffer(16384)
    get("big_copy", None, P, P)(dst, src)
    return out + [dst.raw[:100] == b"z" * 100 and dst.raw[100:16384] == src.raw[100:16384]]


def _exercise_big(get: Getter) -> List[Any]:
    fn = get("big_fn", F, F)
    return [fn(x) for x in (-1.0, 0.0, 0.25)]


@dataclass(frozen=True)
class ExecCase:
    name: str
    source: str
    exercise: Callable[[Getter], List[Any]]
    needs_provider: bool = False  # declares externals that PROVIDER defines


EXEC_CASES = [
    ExecCase("calls", EXEC_SOURCE, _exercise_exec),
    ExecCase("got", A64_GOT, _exercise_got, needs_provider=True),
    ExecCase("direct", A64_DIRECT, _exercise_direct, needs_provider=True),
    ExecCase("vector", VECTOR_SOURCE, _exercise_vector),
    ExecCase("kitchen", KITCHEN_SINK, _exercise_kitchen),
    ExecCase("big", big_function_source(), _exercise_big),
]
