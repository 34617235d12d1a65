"""svod_min.error: one tree, single inheritance, an exit code per class that the CLI returns."""

from __future__ import annotations

import inspect
from typing import Dict, List, Type

import pytest

from svod_min import error
from svod_min.__main__ import EXIT_BAD_INPUT, EXIT_DEVICE, exit_code_for


def _classes() -> List[Type[BaseException]]:
    return [
        c
        for _, c in inspect.getmembers(error, inspect.isclass)
        if issubclass(c, BaseException) and c.__module__ == error.__name__
    ]


# The command line's mapping before exit codes became class attributes (2: bad input, 3: device or
# compile failure). A class moved in the tree keeps its code.
EXPECTED_EXIT_CODES: Dict[str, int] = {
    "SvodError": 3,
    "CompilationError": 3,
    "CompilerNotFoundError": 3,
    "LoaderError": 3,
    "ElfFormatError": 3,
    "UnsupportedRelocationError": 3,
    "RelocationRangeError": 3,
    "FieldOverflow": 3,
    "SymbolNotFoundError": 3,
    "ExecMemoryError": 3,
    "DeviceError": 3,
    "InvalidDeviceError": 2,
    "UnsupportedDeviceError": 3,
    "BufferAllocationError": 2,
    "CacheError": 3,
    "ConfigError": 2,
    "SignatureError": 2,
    "BundleSignatureError": 2,
    "IndexOutOfRangeError": 2,
    "PinnedInputError": 2,
    "ZooFetchError": 3,
    "PlanError": 2,
    "VariableBoundsError": 2,
    "ExecutionError": 3,
    "PlanPoisonedError": 3,
    "NotSupportedError": 3,
    "ExportError": 2,
    "KernelParamError": 2,
    "KernelNotFoundError": 2,
    "KernelArgumentError": 2,
    "PlanFileError": 2,
    "BundleError": 2,
    "UnsupportedModelError": 2,
    "ModelFileError": 2,
    "NoUsableTargetError": 3,
    "CudaError": 3,
    "CudaSymbolError": 3,
    "PtxError": 2,
    "LaunchConfigError": 2,
    "ArgumentRangeError": 2,
    "KernelVariableError": 2,
    "ForkedChildError": 3,
    "ReleasedError": 3,
    "FreedBufferError": 2,
    "MemoryBudgetError": 2,
    "TinygradHookError": 2,
    "TinygradVersionError": 2,
    "TinygradProgramError": 3,
}


def test_every_class_is_in_the_tree_with_one_base() -> None:
    for cls in _classes():
        assert len(cls.__bases__) == 1, "%s has bases %s" % (cls.__name__, cls.__bases__)
        if cls is not error.SvodError:
            assert issubclass(cls, error.SvodError), cls.__name__


def test_every_class_states_its_exit_code() -> None:
    assert sorted(c.__name__ for c in _classes()) == sorted(EXPECTED_EXIT_CODES)
    for cls in _classes():
        assert "exit_code" in vars(cls), "%s inherits its exit code silently" % cls.__name__
        assert cls.exit_code == EXPECTED_EXIT_CODES[cls.__name__], cls.__name__


def test_every_class_is_exported_and_drawn_in_the_docstring() -> None:
    for cls in _classes():
        assert cls.__name__ in error.__all__
        assert "── %s " % cls.__name__ in error.__doc__ or cls is error.SvodError


def test_the_cli_reads_exit_code() -> None:
    class Odd(error.DeviceError):
        exit_code = EXIT_BAD_INPUT

    assert exit_code_for(Odd("x")) == EXIT_BAD_INPUT
    assert exit_code_for(error.DeviceError("x")) == EXIT_DEVICE
    assert exit_code_for(error.FreedBufferError("x")) == EXIT_BAD_INPUT
    assert exit_code_for(ValueError("not ours")) == EXIT_BAD_INPUT


@pytest.mark.parametrize("cls", [error.ArgumentRangeError, error.KernelVariableError])
def test_out_of_range_variables_are_variable_bounds_errors(cls: type) -> None:
    assert issubclass(cls, error.VariableBoundsError) and issubclass(cls, error.PlanError)
