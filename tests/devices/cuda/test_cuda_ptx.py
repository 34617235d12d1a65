"""svod_min.devices.cuda.ptx: PTX ISA versions per driver, svod's PTX rules, kernel parameters, the shipped PTX
and ptxas.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
from typing import Any, Dict, Optional, Tuple

import pytest
from support.cuda import GOOD_PTX, cuda_sigs  # noqa: F401  (fixtures)

from svod_min.devices import cuda
from svod_min.devices.cuda import PtxError, launch_dims, select_ptx_version, validate_ptx
from svod_min.error import CompilationError, DeviceError, NotSupportedError
from svod_min.kernels import GEN_DIR

PTX_FILES = sorted(glob.glob(os.path.join(GEN_DIR, "cuda", "*.ptx")))


needs_ptx_files = pytest.mark.skipif(not PTX_FILES, reason="no generated PTX under svod_min/kernels/_generated/cuda")


PTXAS = cuda.find_ptxas()


def _ptxas_resources(path: str, arch: str) -> Dict[str, Tuple[int, int]]:
    """{entry: (registers per thread, static shared bytes)} from ``ptxas -v``."""
    assert PTXAS is not None
    proc = subprocess.run(
        [PTXAS, "-v", "-arch=" + arch, "-o", os.devnull, path], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    found, entry = {}, None
    for line in proc.stderr.splitlines():
        named = re.search(r"Compiling entry function '(\w+)'", line)
        used = re.search(r"Used (\d+) registers.*?(?:(\d+) bytes smem|$)", line)
        if named:
            entry = named.group(1)
        elif used and entry:
            found[entry] = (int(used.group(1)), int(used.group(2) or 0))
    return found


@pytest.mark.parametrize(
    "driver, ptx",
    [
        (11000, "7.0"),
        (11080, "7.8"),
        (12000, "8.0"),
        (12010, "8.1"),
        (12040, "8.4"),
        (12050, "8.5"),
        (12060, "8.5"),
        (12080, "8.7"),
        (12090, "8.8"),
        (13000, "9.0"),
        (13010, "9.1"),
        (13040, "9.4"),
        (13050, "9.5"),  # 13.N -> 9.N, extrapolated past the table
        (14000, "9.1"),  # unknown major: the newest version known to load
    ],
)
def test_select_ptx_version(driver: int, ptx: str) -> None:
    assert select_ptx_version(driver) == ptx


def test_ptx_newer_than_the_driver_is_a_clear_error() -> None:
    with pytest.raises(PtxError, match=r"driver 12\.4 accepts PTX up to 8\.4; this module is 9\.0") as info:
        cuda.check_ptx_version("9.0", 12040)
    assert isinstance(info.value, DeviceError)
    with pytest.raises(PtxError, match=r"driver 13\.0 accepts PTX up to 9\.0; this module is 9\.5"):
        cuda.check_ptx_version((9, 5), 13000)
    cuda.check_ptx_version("8.4", 12040)
    cuda.check_ptx_version("7.0", 13000)
    cuda.check_ptx_version("9.5", 14000)  # unknown future driver: let it decide
    with pytest.raises(PtxError, match="older than 9.0"):
        select_ptx_version(8000)
    assert cuda.driver_version_tuple(12040) == (12, 4)


def test_ptx_version_table_is_monotonic() -> None:
    releases = [r for r, _ in cuda.PTX_FOR_CUDA]
    versions = [v for _, v in cuda.PTX_FOR_CUDA]
    assert releases == sorted(releases) and versions == sorted(versions)


PTX_CASES = [
    ("good", GOOD_PTX, "sm_80", None, None),
    ("older target runs forward", GOOD_PTX, "sm_90", None, None),
    ("missing .version", GOOD_PTX.replace(".version 7.8\n", ""), "sm_80", None, "no .version directive"),
    (
        "version only in a comment",
        GOOD_PTX.replace(".version 7.8\n", "// .version 7.8\n"),
        "sm_80",
        None,
        "no .version",
    ),
    (
        "wrong target",
        GOOD_PTX.replace("sm_80", "sm_90"),
        "sm_80",
        None,
        ".target sm_90 must run on the device architecture sm_80",
    ),
    ("missing target", GOOD_PTX.replace(".target sm_80\n", ""), "sm_80", None, "no .target"),
    ("target not an sm", GOOD_PTX.replace("sm_80", "gfx90a"), "sm_80", None, "not an sm_XX"),
    (
        "no entry",
        GOOD_PTX.replace(".entry k(", ".func k("),
        "sm_80",
        None,
        "no kernel: expected at least one '.entry name('",
    ),
    ("entry not found", GOOD_PTX, "sm_80", "other", "entry 'other' not found (entries: k)"),
    (
        "extern func",
        GOOD_PTX.replace(
            ".address_size 64\n", ".address_size 64\n.extern .func (.param .b32 r) helper (.param .b32 a);\n"
        ),
        "sm_80",
        None,
        ".extern .func helper",
    ),
    (
        "32-bit addresses",
        GOOD_PTX.replace(".address_size 64", ".address_size 32"),
        "sm_80",
        None,
        ".address_size is 32",
    ),
    ("two versions", GOOD_PTX.replace(".target", ".version 8.0\n.target"), "sm_80", None, "2 .version directives"),
    ("arch-specific target on another chip", GOOD_PTX.replace("sm_80", "sm_90a"), "sm_100", None, "must run on"),
    ("arch-specific target on its chip", GOOD_PTX.replace("sm_80", "sm_90a"), "sm_90", None, None),
    ("family target, newer minor", GOOD_PTX.replace("sm_80", "sm_100f"), "sm_103", None, None),
    ("family target, other major", GOOD_PTX.replace("sm_80", "sm_100f"), "sm_120", None, "must run on"),
    ("target with options", GOOD_PTX.replace("sm_80", "sm_80, debug"), "sm_80", None, None),
    ("empty", "   \n", "sm_80", None, "empty"),
    ("binary", "\x7fELF\0\0", "sm_80", None, "NUL byte"),
]


@pytest.mark.parametrize("name, text, arch, entry, error", PTX_CASES, ids=[c[0] for c in PTX_CASES])
def test_validate_ptx(name: str, text: str, arch: str, entry: Optional[str], error: Optional[str]) -> None:
    if error is None:
        info = validate_ptx(text, arch, entry=entry)
        assert info.entries == ("k",) and info.address_size == 64
        return
    with pytest.raises(PtxError) as info:
        validate_ptx(text, arch, entry=entry)
    assert error in str(info.value)
    assert isinstance(info.value, DeviceError)


def test_validate_ptx_exact_target_is_svods_strict_rule() -> None:
    assert validate_ptx(GOOD_PTX, "sm_80", exact_target=True).target == "sm_80"
    with pytest.raises(PtxError, match="must equal"):
        validate_ptx(GOOD_PTX, "sm_90", exact_target=True)


def test_validate_ptx_reports_every_problem_and_reads_the_header() -> None:
    bad = ".target sm_80\n.extern .func f;\n"
    with pytest.raises(PtxError) as info:
        validate_ptx(bad, "sm_80")
    message = str(info.value)
    assert "no .version" in message and "no kernel" in message and ".extern .func f" in message
    read = validate_ptx(GOOD_PTX.encode(), None)
    assert (read.version, read.version_string, read.target) == ((7, 8), "7.8", "sm_80")


def test_parse_arch() -> None:
    assert cuda.parse_arch("sm_90a") == (90, "a")
    assert cuda.parse_arch("compute_80") == (80, "")
    assert cuda.parse_arch(86) == (86, "") and cuda.parse_arch((8, 9)) == (89, "")
    assert cuda.arch_name("SM_75") == "sm_75"
    with pytest.raises(PtxError, match="unknown GPU architecture"):
        cuda.parse_arch("gfx90a")


def test_rewrite_ptx_version() -> None:
    lowered = cuda.rewrite_ptx_version(GOOD_PTX, "7.0")
    assert cuda.ptx_version_of(lowered) == (7, 0)
    assert lowered.replace(".version 7.0", ".version 7.8") == GOOD_PTX  # only the directive changed
    assert "// a comment that mentions .extern .func nothing and .version 99.9" in lowered
    assert cuda.ptx_version_of(cuda.rewrite_ptx_version(GOOD_PTX, (8, 4))) == (8, 4)
    with pytest.raises(PtxError, match=r"sm_80 needs PTX >= 7\.0; cannot lower to 6\.5"):
        cuda.rewrite_ptx_version(GOOD_PTX, "6.5")
    with pytest.raises(PtxError, match="no .version"):
        cuda.rewrite_ptx_version(".target sm_80\n", "7.0")
    with pytest.raises(PtxError, match="looks like"):
        cuda.rewrite_ptx_version(GOOD_PTX, "eight")


def test_entry_params() -> None:
    assert cuda.ptx_entry_params(GOOD_PTX, "k") == [8, 4]
    cuda.check_entry_params(GOOD_PTX, "k", 1, 1)
    with pytest.raises(PtxError, match=r"declares parameters of \[8, 4\] bytes; svod passes 2 pointers then 0 int32"):
        cuda.check_entry_params(GOOD_PTX, "k", 2, 0)
    arrays = ".entry s(.param .align 8 .b8 s_p0[16], .param .f64 s_p1)"
    assert cuda.ptx_entry_params(arrays, "s") == [16, 8]
    with pytest.raises(PtxError, match="not found"):
        cuda.ptx_entry_params(GOOD_PTX, "nope")


@needs_ptx_files
def test_shipped_ptx_follows_the_rules_and_matches_the_signatures() -> None:
    from svod_min.kernels import cuda_kernels, ptx_path

    for path in PTX_FILES:
        with open(path, encoding="utf-8") as fh:
            info = validate_ptx(fh.read(), "sm_75")
        cuda.check_ptx_version(info.version, 11080)  # loads on any CUDA 11.8+ driver
    sigs = cuda_kernels()
    assert sigs
    for sig in sigs:
        with open(ptx_path(sig.module), encoding="utf-8") as fh:
            cuda.check_entry_params(fh.read(), sig.entry, len(sig.buffers), len(sig.vars))
        launch_dims(tuple(1 if isinstance(d, str) else d for d in sig.grid), sig.block)


@needs_ptx_files
@pytest.mark.python_independent
@pytest.mark.skipif(PTXAS is None, reason="ptxas not found (CUDA toolkit not installed)")
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_ptxas_assembles_the_shipped_ptx(arch: str) -> None:
    for path in PTX_FILES:
        with open(path, encoding="utf-8") as fh:
            cubin = cuda.ptxas_check(fh.read(), arch)
        assert cubin[:4] == b"\x7fELF", path


@pytest.mark.python_independent
@pytest.mark.skipif(PTXAS is None, reason="ptxas not found (CUDA toolkit not installed)")
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_library_kernels_fit_their_blocks(arch: str) -> None:
    """Registers x threads of each library kernel's block fit one SM's 64K registers, static shared memory
    fits 48 KiB: otherwise every launch of it fails with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES on a real GPU."""
    from svod_min.kernels import ptx_path

    sigs = cuda_sigs()
    resources: Dict[str, Tuple[int, int]] = {}
    for module in sorted({s.module for s in sigs}):
        resources.update(_ptxas_resources(ptx_path(module), arch))
    for sig in sigs:
        regs, smem = resources[sig.entry]
        threads = sig.block[0] * sig.block[1] * sig.block[2]
        assert regs * threads <= 65536, "%s: %d registers x %d threads" % (sig.entry, regs, threads)
        assert smem + sig.shared_bytes <= 48 << 10, "%s: %d bytes of shared memory" % (sig.entry, smem)


@pytest.mark.skipif(PTXAS is None, reason="ptxas not found (CUDA toolkit not installed)")
def test_ptxas_rejects_bad_ptx_with_its_log() -> None:
    bad = GOOD_PTX.replace("    ret;", "    bogus.instruction.f32 %f1;\n    ret;")
    validate_ptx(bad, "sm_80")  # svod's rules cannot see it ...
    with pytest.raises(CompilationError, match="ptxas -arch=sm_80 rejected") as info:
        cuda.ptxas_check(bad, "sm_80")  # ... ptxas can
    assert info.value.diagnostics and "<ptx>" in info.value.diagnostics


def test_ptxas_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVOD_CUDA_PTXAS", "0")
    assert cuda.find_ptxas() is None
    with pytest.raises(NotSupportedError, match="ptxas not found"):
        cuda.ptxas_check(GOOD_PTX, "sm_80")


@pytest.mark.parametrize(
    "params, buf_count, var_count, refused",
    [
        (".param .u64 p, .param .u32 n", 1, 1, None),
        (".param .s64 p, .param .s32 n", 1, 1, None),
        (".param .b64 p, .param .b32 n", 1, 1, None),
        (".param .u64 .ptr .global .align 4 p, .param .u32 n", 1, 1, None),
        (".param .u64 p, .param .f32 eps", 1, 1, r"parameter 1 is \.f32; svod passes an int32 there"),
        (".param .f64 p, .param .u32 n", 1, 1, r"parameter 0 is \.f64; svod passes a 64-bit buffer address"),
        (".param .u64 p, .param .b8 n[4]", 1, 1, r"parameter 1 is \.b8\[4\]"),
    ],
)
def test_entry_param_types_must_receive_what_svod_packs(
    params: str, buf_count: int, var_count: int, refused: Any
) -> None:
    """Sizes alone let a .f32 scalar through (it would get an int32's bits): the PTX types are checked too."""
    text = ".entry k(%s)" % params
    assert cuda.ptx_entry_params(text, "k") == [8, 4]
    if refused is None:
        cuda.check_entry_params(text, "k", buf_count, var_count)
    else:
        with pytest.raises(PtxError, match=refused):
            cuda.check_entry_params(text, "k", buf_count, var_count)
    assert cuda.ptx_entry_param_types(".entry s(.param .align 8 .b8 s_p0[16], .param .f64 s_p1)", "s") == [
        ".b8[16]",
        ".f64",
    ]


@needs_ptx_files
def test_shipped_ptx_requires_each_signatures_block() -> None:
    """Every library entry carries `.reqntid` of its signature's block (from `__launch_bounds__`), so the
    driver itself refuses a launch with another block, whoever makes it."""
    from svod_min.kernels import cuda_kernels, ptx_path

    for sig in cuda_kernels():
        with open(ptx_path(sig.module), encoding="utf-8") as fh:
            text = fh.read()
        match = re.search(r"\.entry %s\([^)]*\)\s*\.reqntid (\d+), (\d+), (\d+)\s*\{" % sig.entry, text)
        assert match, sig.entry
        assert tuple(int(v) for v in match.groups()) == tuple(sig.block) + (1,) * (3 - len(sig.block)), sig.entry


def test_required_block_is_read_from_the_entry() -> None:
    def entry(directives: str) -> str:
        return (
            ".visible .entry k(\n.param .u64 p\n)\n%s\n{\n ret;\n}\n.visible .entry j()\n.reqntid 7\n{\n ret;\n}\n"
            % directives
        )

    assert cuda.ptx_required_block(entry(".reqntid 64, 2, 1"), "k") == (64, 2, 1)
    assert cuda.ptx_required_block(entry(".maxntid 256, 1, 1\n.reqntid 32"), "k") == (32, 1, 1)
    assert cuda.ptx_required_block(entry(".maxntid 256, 1, 1"), "k") is None  # an upper bound only
    assert cuda.ptx_required_block(entry("// .reqntid 64, 1, 1"), "k") is None  # a comment
    assert cuda.ptx_required_block(entry(""), "j") == (7, 1, 1)  # each entry its own
    with pytest.raises(PtxError, match="not found"):
        cuda.ptx_required_block(entry(""), "nope")
