"""matmul's unpacked path for a few rows of A (M <= MATMUL_THIN_ROWS: batch-1 fully connected layers) against
numpy float64, within the matmul bound 2 K eps (|A| @ |B|): K not a multiple of its 4-row step, N past its
column block and not a multiple of the vector width, columns split over core ids, the prebuilt and from-source
instances."""

from __future__ import annotations

from typing import Any

import pytest
from support.kernel_check import check_matmul, needs_cc, rng  # noqa: F401 - rng is a fixture

np = pytest.importorskip("numpy")

from codegen.catalogue import MATMUL_THIN_ROWS  # noqa: E402
from svod_min import kernels  # noqa: E402
from svod_min.kernels.sig import compile_expr  # noqa: E402

# the emulated arches compile this file's kernels from source with their own gcc (.ci/*-stage)
pytestmark = pytest.mark.from_source_sample

#: (M, N, K): each thin row count, K = 1..3 (only the remainder loop), K % 4 != 0, N = 1, N over one column
#: block (2048 float32 / 1024 float64) with a ragged end, and the first row count past the thin path.
THIN_SHAPES = [
    (1, 1, 1),
    (1, 3, 2),
    (2, 37, 3),
    (1, 2085, 9),
    (3, 1000, 257),
    (4, 65, 64),
    (MATMUL_THIN_ROWS, 33, 19),
    (MATMUL_THIN_ROWS + 1, 33, 19),
]


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_thin_matmul_matches_numpy(dt: str, rng: Any) -> None:
    k = kernels.get("matmul", dtype=dt)
    for m, n, kk in THIN_SHAPES:
        check_matmul(rng, k, dt, m, n, kk)


@pytest.mark.parametrize("threads", [2, 3])
def test_thin_matmul_splits_columns_over_core_ids(threads: int, rng: Any) -> None:
    k = kernels.get("matmul", dtype="float32")
    for m, n, kk in [(1, 4099, 130), (2, 17, 5), (1, 4, 9)]:  # fewer columns than core ids x 16 too
        check_matmul(rng, k, "float32", m, n, kk, threads=threads)


def test_thin_matmul_gives_the_same_bits_at_any_thread_count(rng: Any) -> None:
    k = kernels.get("matmul", dtype="float32")
    a, b = rng.uniform(-1, 1, (1, 999)).astype(np.float32), rng.uniform(-1, 1, (999, 3001)).astype(np.float32)
    outs = []
    for threads in (1, 2, 4):
        c = np.empty((1, 3001), np.float32)
        k.run([c, a, b], M=1, N=3001, K=999, threads=threads)
        outs.append(c)
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def test_thin_matmul_parallelism_counts_column_blocks() -> None:
    k = kernels.get("matmul", dtype="float32")
    par = compile_expr(k.sig.parallelism)
    assert par({"M": 1, "N": 4096, "K": 9216}) == 4096 // 64
    assert par({"M": MATMUL_THIN_ROWS + 1, "N": 4096, "K": 9}) == -(-(MATMUL_THIN_ROWS + 1) // k.params["mr"])


@needs_cc
def test_thin_matmul_from_source(rng: Any) -> None:
    k = kernels.get("matmul", dtype="float32", prebuilt=False)
    assert not k.prebuilt
    for m, n, kk in THIN_SHAPES[:4]:
        check_matmul(rng, k, "float32", m, n, kk)


def test_thin_matmul_sums_long_rows_in_blocks(rng: Any) -> None:
    """K = 25,088 (VGG's first fully connected layer): the products are summed in blocks of MATMUL_THIN_K_BLOCK rows,
    so the error stays near a blocked GEMM's; one running sum over all of K was 2.7e-6 of the largest output here."""
    k = kernels.get("matmul", dtype="float32")
    big_k, n = 25088, 40
    a = np.maximum(rng.standard_normal((1, big_k)), 0).astype(np.float32)  # ReLU outputs: same-signed terms
    b = (rng.standard_normal((big_k, n)) * 0.01).astype(np.float32)
    c = np.empty((1, n), np.float32)
    k.run([c, a, b], M=1, N=n, K=big_k)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert float(np.abs(c - want).max() / np.abs(want).max()) < 1e-6
