"""Constants of the prelude's libm-free math, per C floating type.

The polynomials are plain Taylor series on the reduced ranges
(|r| <= ln2/2 for exp, |s| <= 0.1716 for log's atanh series), truncated
where the next term drops below half an ulp of the type; docs/kernels.md
states the resulting, tested error bounds.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Tuple

from svod_min.kernels.elementwise import c_literal


@dataclass(frozen=True)
class MathType:
    c: str  # "float" / "double"
    s: str  # prelude suffix
    bits: str  # svod_u2<bits> / svod_<bits>2u: "f" or "d"
    int: str
    uint: str
    bias: int
    mant: int
    exp_mask: str
    mant_mask: str
    one_bits: str
    magic: str  # 1.5 * 2^mant: adding and subtracting it rounds to an integer
    exp_lo: float  # exp() input clamp: exp_lo gives 0, exp_hi gives inf
    exp_hi: float
    kmin: int
    kmax: int
    tanh_hi: float  # beyond it tanh rounds to +-1
    min_normal: float
    ln2_hi: float  # Cody-Waite split: k * ln2_hi is exact for the k in range
    ln2_lo: float
    exp_terms: int  # Taylor terms of exp(r): 1, r, r^2/2, ...
    log_terms: int  # terms of w(z) = 2/3 + 2/5 z + ...

    log2e: float = 1.4426950408889634

    def lit(self, value: float) -> str:
        return c_literal(value, self.c)

    @property
    def exp_coef(self) -> Tuple[float, ...]:
        return tuple(1.0 / math.factorial(k) for k in range(self.exp_terms))

    @property
    def log_coef(self) -> Tuple[float, ...]:
        return tuple(2.0 / (2 * k + 3) for k in range(self.log_terms))


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


FLOAT = MathType(
    c="float",
    s="f",
    bits="f",
    int="svod_i32",
    uint="svod_u32",
    bias=127,
    mant=23,
    exp_mask="0xffu",
    mant_mask="0x007fffffu",
    one_bits="0x3f800000u",
    magic="12582912.0f",
    exp_lo=-104.0,
    exp_hi=89.0,
    kmin=-150,
    kmax=129,
    tanh_hi=9.0,
    min_normal=_f32(1.1754943508222875e-38),
    ln2_hi=0.693145751953125,
    ln2_lo=1.428606765330187e-06,
    exp_terms=8,
    log_terms=4,
)
DOUBLE = MathType(
    c="double",
    s="",
    bits="d",
    int="svod_i64",
    uint="svod_u64",
    bias=1023,
    mant=52,
    exp_mask="0x7ffull",
    mant_mask="0x000fffffffffffffull",
    one_bits="0x3ff0000000000000ull",
    magic="6755399441055744.0",
    exp_lo=-746.0,
    exp_hi=710.0,
    kmin=-1077,
    kmax=1025,
    tanh_hi=20.0,
    min_normal=2.2250738585072014e-308,
    ln2_hi=6.93147180369123816490e-01,
    ln2_lo=1.90821492927058770002e-10,
    exp_terms=14,
    log_terms=10,
)
MATH_TYPES = (FLOAT, DOUBLE)
