"""Seeded generator of small C programs in issue 19's defect shape (GCC vector extensions).

Each program defines ``void run(float *outf, int *outi, int n)`` that writes every
result into the two output buffers (never through a vector return register), so
loader-vs-dlopen comparisons read memory only. The shape: ``vector_size(16)``
float/int/double types, static const vector tables and vector literals
(``.rodata.cst16``), static zero-initialised arrays with 16/32/64-byte alignment
(``.bss``, some over several pages), static initialised arrays (``.data``),
const tables (``.rodata``), local arrays cleared with ``= {0}`` and copied
(memset/memcpy through CALL26), loops and branches that make gcc share one
ADRP across basic blocks, static helpers (section-symbol relocations with
addends), cold helpers (``.text.unlikely``) and state kept across calls.
"""

from __future__ import annotations

import random
from typing import List

OUT_FLOATS = 64
OUT_INTS = 64

_HEADER = """\
#include <string.h>
typedef float v4f __attribute__((vector_size(16)));
typedef int v4i __attribute__((vector_size(16)));
typedef double v2d __attribute__((vector_size(16)));
"""


def _flt(rng: random.Random) -> str:
    return "%d.%df" % (rng.randint(-9, 9), rng.randint(0, 99))


def _int(rng: random.Random) -> str:
    return str(rng.randint(-50, 50))


class _Program:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.decls: List[str] = []
        self.helpers: List[str] = []
        self.body: List[str] = []

    def declarations(self) -> None:
        rng = self.rng
        self.nk = rng.randint(2, 6)
        self.decls.append(
            "static const v4f K[%d] = {%s};"
            % (self.nk, ", ".join("{%s}" % ", ".join(_flt(rng) for _ in range(4)) for _ in range(self.nk)))
        )
        self.nki = rng.randint(1, 4)
        self.decls.append(
            "static const v4i KI[%d] = {%s};"
            % (self.nki, ", ".join("{%s}" % ", ".join(_int(rng) for _ in range(4)) for _ in range(self.nki)))
        )
        self.nb = rng.choice([16, 64, 256, 1024, 3000, 9000])
        self.align0 = rng.choice([16, 32, 64, 4096])
        self.decls.append("static float B0[%d] __attribute__((aligned(%d)));" % (self.nb, self.align0))
        self.nb1 = rng.choice([8, 100, 2048, 5000])
        self.align1 = rng.choice([16, 32, 64])
        self.decls.append("static v4f B1[%d] __attribute__((aligned(%d)));" % (self.nb1, self.align1))
        self.decls.append("static int counter;")
        self.decls.append("static char pad0[%d];" % rng.choice([1, 3, 17, 4095, 4097]))
        self.nd = rng.randint(4, 40)
        self.decls.append("static int D[%d] = {%s};" % (self.nd, ", ".join(_int(rng) for _ in range(self.nd))))
        self.decls.append(
            "static v4f DV[2] __attribute__((aligned(%d))) = {{%s}, {%s}};"
            % (rng.choice([16, 32, 64]), ", ".join(_flt(rng) for _ in range(4)), ", ".join(_flt(rng) for _ in range(4)))
        )
        self.nr = rng.randint(4, 600)
        self.decls.append(
            "static const double R[%d] = {%s};"
            % (self.nr, ", ".join("%d.%d" % (rng.randint(-9, 9), rng.randint(0, 9)) for _ in range(self.nr)))
        )
        self.decls.append("static const v2d KD = {%d.5, %d.25};" % (rng.randint(-5, 5), rng.randint(-5, 5)))
        # Globals: reached through the GOT under -fPIC (and interposable in the shared build).
        self.ng = rng.choice([4, 32, 1500])
        self.decls.append("float hunt_g[%d] __attribute__((aligned(%d)));" % (self.ng, rng.choice([16, 64])))
        self.decls.append("v4f hunt_gv = {%s};" % ", ".join(_flt(rng) for _ in range(4)))

    def helper_functions(self) -> None:
        # Every index is in bounds for any n and counter: an out-of-bounds read of a static
        # table reads whatever the layout puts next to it, and dlopen and load_object lay
        # out differently (seed 121 once read R at a negative n + counter).
        rng = self.rng
        attrs = ["static __attribute__((noinline))", "static __attribute__((noinline, cold))", "static"]
        self.helpers.append(
            """%s v4f hv(v4f a, int i) {
    v4f k = {%s, %s, %s, %s};
    if (i & 1) return a * K[i %% %d] + k;
    return a - K[(i + 1) %% %d];
}"""
            % (rng.choice(attrs), _flt(rng), _flt(rng), _flt(rng), _flt(rng), self.nk, self.nk)
        )
        self.helpers.append(
            """%s void fill(int n) {
    for (int i = 0; i < %d; i++) B0[i] = (float)((i * %d + n) %% 13) + R[(unsigned)(i + n) %% %du];
    for (int i = 0; i < %d; i++) B1[i] = (v4f){1.0f, 2.0f, 3.0f, 4.0f} * (float)(i %% 7) + K[i %% %d];
}"""
            % (rng.choice(attrs), self.nb, rng.randint(1, 9), self.nr, self.nb1, self.nk)
        )
        self.helpers.append(
            """%s int cold_path(int x) {
    static const v4i t = {%s, %s, %s, %s};
    v4i y = t * x + KI[x & %d];
    counter += y[0] + y[3];
    return y[1] ^ y[2];
}"""
            % ("static __attribute__((noinline, cold))", _int(rng), _int(rng), _int(rng), _int(rng), 0)
        )

        self.helpers.append(
            """__attribute__((noinline)) v4f hunt_scale(v4f a, float s) {
    hunt_gv += a;
    return a * s + K[%d];
}"""
            % rng.randint(0, self.nk - 1)
        )
        self.helpers.append("""static v4f tw0(v4f a) { return a + K[0]; }
static v4f tw1(v4f a) { return hunt_scale(a, 0.25f); }
static v4f (*const TW[2])(v4f) = {tw0, tw1};""")

    def run_body(self) -> None:
        rng = self.rng
        b = self.body
        b.append("    float tmp[%d] = {0};" % rng.choice([64, 200, 1024]))
        b.append("    int itmp[%d];" % rng.choice([32, 300]))
        b.append("    memset(itmp, 0, sizeof itmp);")
        b.append("    counter++;")
        b.append("    fill(n + counter);")
        b.append("    v4f acc = DV[counter & 1];")
        b.append("    v4i iacc = KI[0];")
        b.append("    for (int i = 0; i < n; i++) {")
        for _ in range(rng.randint(1, 4)):
            kind = rng.randint(0, 7)
            if kind == 0:
                b.append("        acc = hv(acc, i) * 0.5f;")
            elif kind == 1:
                b.append("        if (i %% %d == 0) acc += B1[(i * 7) %% %d];" % (rng.randint(2, 5), self.nb1))
            elif kind == 2:
                b.append("        tmp[i %% 64] += B0[(i * 13) %% %d] + (float)D[i %% %d];" % (self.nb, self.nd))
            elif kind == 3:
                b.append(
                    "        if (n > %d) iacc += KI[i %% %d] * %d; else iacc -= (v4i){%s, %s, %s, %s};"
                    % (rng.randint(0, 20), self.nki, rng.randint(1, 5), _int(rng), _int(rng), _int(rng), _int(rng))
                )
            elif kind == 4:
                b.append(
                    "        if (__builtin_expect(i == %d, 0)) itmp[i %% 32] += cold_path(i);" % rng.randint(0, 30)
                )
            elif kind == 6:
                b.append(
                    "        acc = TW[(i >> %d) & 1](acc); hunt_g[i %% %d] += acc[i & 3];"
                    % (rng.randint(0, 2), self.ng)
                )
            elif kind == 7:
                b.append("        acc = hunt_scale(acc, (float)(i & 3));")
            else:
                b.append("        D[i %% %d] += i; DV[i & 1] += K[i %% %d];" % (self.nd, self.nk))
        b.append("    }")
        copied = min(64, self.nb)
        b.append("    memcpy(B0 + %d, tmp, %d * sizeof(float));" % (rng.randint(0, self.nb - copied), copied))
        b.append("    v2d dd = KD * (double)n;")
        b.append("    for (int j = 0; j < 4; j++) { outf[j] = acc[j]; outi[j] = iacc[j]; }")
        b.append(
            "    for (int j = 0; j < 16; j++) { outf[4 + j] = tmp[j]; outi[4 + j] = itmp[j] + D[j %% %d]; }" % self.nd
        )
        b.append("    outf[20] = (float)dd[0]; outf[21] = (float)dd[1];")
        b.append(
            "    for (int j = 0; j < 16; j++) outf[22 + j] = B0[(j * 31) %% %d] + B1[j %% %d][j & 3];"
            % (self.nb, self.nb1)
        )
        b.append("    for (int j = 0; j < 8; j++) outf[38 + j] = DV[j >> 2][j & 3];")
        b.append("    for (int j = 0; j < 4; j++) outf[46 + j] = hunt_gv[j] + hunt_g[(j * 3) %% %d];" % self.ng)
        b.append("    outi[20] = counter; outi[21] = (int)R[%d];" % (self.nr - 1))
        # Alignment kept (0 on both sides when honoured; raw addresses legitimately differ).
        b.append(
            "    outi[22] = (int)(__UINTPTR_TYPE__)&B1[0] & %d; outi[23] = (int)(__UINTPTR_TYPE__)&B0[0] & %d;"
            % (self.align1 - 1, self.align0 - 1)
        )

    def source(self) -> str:
        self.declarations()
        self.helper_functions()
        self.run_body()
        return "%s\n%s\n\n%s\n\nvoid run(float *outf, int *outi, int n) {\n%s\n}\n" % (
            _HEADER,
            "\n".join(self.decls),
            "\n\n".join(self.helpers),
            "\n".join(self.body),
        )


def program(seed: int) -> str:
    """The C source of program ``seed`` (deterministic)."""
    return _Program(seed).source()


FLAG_SETS = (
    ("-O2",),
    ("-O2", "-fno-plt"),
    ("-O3",),
    ("-Os",),
    ("-O2", "-freorder-blocks-and-partition"),
    ("-O3", "-fno-plt", "-freorder-blocks-and-partition"),
    ("-O0",),
    ("-O2", "-ffunction-sections", "-fdata-sections"),
    ("-O2", "-fno-section-anchors"),
    ("-O3", "-march=armv8.2-a+sve"),
)
