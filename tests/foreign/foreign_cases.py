"""C drivers for the loader's cases (tests/support/loader_cases.py) on architectures with no Python.

Each driver defines ``run_case()``, which reaches entry points only through
``svod_sym("name")`` (harness.c), calls them with fixed inputs and prints the
results exactly (``%a`` for floats). The same driver runs against the kernel
object linked by a real linker and against svod's relocated image, and the two
outputs must be identical.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List

from support.loader_cases import (
    A64_DIRECT,
    A64_GOT,
    EXEC_SOURCE,
    KITCHEN_SINK,
    PROVIDER,
    VECTOR_SOURCE,
    big_function_source,
)

_PRELUDE = r"""
#include <stdio.h>
#include <string.h>
void *svod_sym(const char *);
typedef float (*f_f)(float);
typedef float (*f_if)(int, float);
typedef float (*f_i)(int);
typedef float (*f_v)(void);
typedef int (*i_i)(int);
typedef int (*i_v)(void);
typedef long (*l_v)(void);
typedef void *(*p_v)(void);
typedef void (*v_i)(int);
typedef void (*v_pp)(char *, const char *);
typedef float (*f_pi)(const float *, int);
#define SYM(type, name) ((type)svod_sym(name))
static char src_buf[16384], dst_buf[16384];
static void fill(void) { for (int i = 0; i < 16384; i++) src_buf[i] = (char)(i * 7 + 3); memset(dst_buf, 0, sizeof dst_buf); }
"""  # noqa: E501 (C source, kept as written)

CALLS = (
    _PRELUDE
    + r"""
void run_case(void) {
    static const float xs[4] = {-2.0f, 0.0f, 0.5f, 3.25f};
    for (int k = 0; k < 4; k++) {
        printf("%a %a", SYM(f_f, "call_expf")(xs[k]), SYM(f_f, "tail_expf")(xs[k]));
        for (int i = 0; i < 3; i++) printf(" %a", SYM(f_if, "via_table")(i, xs[k]));
        printf("\n");
    }
    for (int i = 0; i < 10; i++) printf("%d ", SYM(i_i, "read_table")(i));
    fill();
    SYM(v_pp, "copy")(dst_buf, src_buf);
    printf("\ncopy %d\n", memcmp(dst_buf, src_buf, 4096) == 0);
}
"""
)

GOT = (
    _PRELUDE
    + r"""
extern void ext_fn(void);
void run_case(void) {
    printf("%a %a\n", SYM(f_f, "call_expf")(0.5f), SYM(f_f, "tail_expf")(1.5f));
    for (int i = 0; i < 5; i++) printf("%d ", SYM(i_i, "call_helper")(i));
    printf("\n%d %d\n", SYM(i_v, "read_ext")(), SYM(p_v, "addr_fn")() == (void *)ext_fn);
    fill();
    SYM(v_pp, "copy")(dst_buf, src_buf);
    printf("copy %d\n", memcmp(dst_buf, src_buf, 4096) == 0);
}
"""
)

DIRECT = (
    _PRELUDE
    + r"""
static void show(void) {
    printf("%d %d %d %ld %a\n", SYM(i_v, "get_c")(), SYM(i_v, "get_s")(), SYM(i_v, "get_i")(),
           SYM(l_v, "get_l")(), SYM(f_v, "get_q_sum")());
}
void run_case(void) {
    show();
    SYM(v_i, "set_all")(9);
    show();
    void *tab = SYM(p_v, "addr_tab")();
    printf("%d %d\n", SYM(i_v, "read_near")(), tab != 0 && ((unsigned long)tab & 3) == 0);
    for (int i = 0; i < 4; i++) printf("%d ", SYM(i_i, "call_local")(i));
    printf("%d\n", SYM(i_i, "tail_local")(3));
}
"""
)

VECTOR = (
    _PRELUDE
    + r"""
void run_case(void) {
    static float x[75];
    static const int ns[3] = {4, 64, 75};
    for (int i = 0; i < 75; i++) x[i] = (i % 7) * 0.5f - 1;
    for (int k = 0; k < 3; k++) {
        float a = SYM(f_pi, "vec_kernel")(x, ns[k]);
        float b = SYM(f_pi, "vec_kernel")(x, ns[k]);
        printf("%a %a\n", a, b);
    }
}
"""
)

KITCHEN = (
    _PRELUDE
    + r"""
void run_case(void) {
    for (int i = 0; i < 3; i++) printf("%d ", SYM(i_v, "bump")());
    for (int i = 0; i < 10; i++) printf("%a ", SYM(f_i, "lookup")(i));
    printf("\n%a %a %a\n", SYM(f_f, "libm")(0.5f), SYM(f_f, "libm")(1.0f), SYM(f_f, "libm")(2.5f));
    for (int i = -1; i < 10; i++) printf("%d ", SYM(i_i, "jump")(i));
    for (int i = 0; i < 3; i++) printf("%d ", SYM(i_i, "name_len")(i));
    for (int i = 0; i < 2; i++) printf("%a ", SYM(f_if, "apply_op")(i, 3.0f));
    fill();
    SYM(v_pp, "big_copy")(dst_buf, src_buf);
    int ok = 1;
    for (int i = 0; i < 100; i++) ok &= dst_buf[i] == 'z';
    printf("\ncopy %d\n", ok && memcmp(dst_buf + 100, src_buf + 100, 16384 - 100) == 0);
}
"""
)

BIG = (
    _PRELUDE
    + r"""
void run_case(void) {
    printf("%a %a %a\n", SYM(f_f, "big_fn")(-1.0f), SYM(f_f, "big_fn")(0.0f), SYM(f_f, "big_fn")(0.25f));
}
"""
)


@dataclass(frozen=True)
class ForeignCase:
    name: str
    source: str  # the kernel object's C source
    driver: str  # C defining run_case()
    provider: str = ""  # C defining externals the source declares (linked into both programs)

    def entries(self) -> List[str]:
        return sorted(set(re.findall(r'(?:SYM\([^,]+, |svod_sym\()"(\w+)"', self.driver)))


CASES = [
    ForeignCase("calls", EXEC_SOURCE, CALLS),
    ForeignCase("got", A64_GOT, GOT, PROVIDER),
    ForeignCase("direct", A64_DIRECT, DIRECT, PROVIDER),
    ForeignCase("vector", VECTOR_SOURCE, VECTOR),
    ForeignCase("kitchen", KITCHEN_SINK, KITCHEN),
    ForeignCase("big", big_function_source(300), BIG),
]
