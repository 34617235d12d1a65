"""CudaDevice's program slot: ``program_forms`` and ``load_program`` over PTX, CUDA C and library PTX.

Runs against the stand-in driver (tests/support/fake_libcuda.c).
"""

from __future__ import annotations

from typing import Callable

import pytest
from support.cuda import FAKE_PTX, Fake, fake, fake_so, int_values  # noqa: F401  (fixtures)

from svod_min import kernels
from svod_min.devices.base import CUBIN, CUDA_C, LLVM_IR, PTX, ProgramSource
from svod_min.error import NotSupportedError, UnsupportedDeviceError
from svod_min.kernels.library import device_kernel, library_form

np = pytest.importorskip("numpy")


def test_fake_cuda_lists_gpu_forms_and_loads_ptx(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    assert dev.program_forms == (PTX, CUBIN, CUDA_C) and library_form(dev) == PTX
    prog = dev.load_program(ProgramSource(PTX, FAKE_PTX, "fake_iota", 1, ["n"], block=(128,), name="iota"))
    assert prog.name == "iota" and tuple(prog.local_size) == (128, 1, 1)
    out = dev.allocate([6], "int32")
    prog.execute([out], [4], global_size=(1,))
    assert int_values(out) == [0, 1, 2, 3, 0, 0]


def test_fake_cuda_refuses_a_form_it_does_not_list(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    with pytest.raises(
        NotSupportedError, match=r"CUDA:0 does not load 'llvm_ir' programs \(it loads: ptx, cubin, cuda_c\)"
    ):
        dev.load_program(ProgramSource(LLVM_IR, "", "k", 1))


def test_library_kernels_on_a_ptx_device_come_from_the_shipped_ptx(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    lib = device_kernel(dev, "add", dtype="float32")
    assert lib.program.signature is lib.sig and lib.source == "" and lib.local_size == tuple(lib.sig.block)
    assert lib.program.name.startswith("add{")
    with pytest.raises(UnsupportedDeviceError, match="CUDA:0 loads ptx, cubin, cuda_c programs.*PTX"):
        kernels.get("add", device=dev)
