"""PTX handling without a GPU: the ISA version a driver accepts, svod's PTX rules, kernel parameters, ptxas.

:func:`select_ptx_version` / :func:`check_ptx_version` map a driver version to
the newest PTX ISA it loads; :func:`validate_ptx` checks svod's rules and
returns what it read (:class:`PtxInfo`); :func:`rewrite_ptx_version` lowers a
module's ``.version`` for an older driver; :func:`ptx_entry_params` reads a
kernel's parameter sizes; :func:`ptxas_check` assembles offline when the
toolkit is installed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

from ...error import CompilationError, NotSupportedError, PtxError
from .launch import as_int

_PTXAS_ENV = "SVOD_CUDA_PTXAS"  # "0": never run ptxas


# --- PTX ISA versions per driver -------------------------------------------------------------------
#
# (CUDA release, highest PTX ISA its driver / ptxas accepts), from the "PTX ISA
# release history" table of NVIDIA's PTX ISA manual (mirrored in cuda-python's
# cuda/bindings/utils/_ptx_utils.py). 12.6 added no ISA version; 12.7 never
# shipped a driver but is listed there. CUDA 13.N has so far carried PTX 9.N
# (13.0 -> 9.0, 13.1 -> 9.1, 13.4 -> 9.4), which _max_ptx extrapolates.

PTX_FOR_CUDA: Tuple[Tuple[Tuple[int, int], Tuple[int, int]], ...] = (
    ((9, 0), (6, 0)),
    ((9, 1), (6, 1)),
    ((9, 2), (6, 2)),
    ((10, 0), (6, 3)),
    ((10, 1), (6, 4)),
    ((10, 2), (6, 5)),
    ((11, 0), (7, 0)),
    ((11, 1), (7, 1)),
    ((11, 2), (7, 2)),
    ((11, 3), (7, 3)),
    ((11, 4), (7, 4)),
    ((11, 5), (7, 5)),
    ((11, 6), (7, 6)),
    ((11, 7), (7, 7)),
    ((11, 8), (7, 8)),
    ((12, 0), (8, 0)),
    ((12, 1), (8, 1)),
    ((12, 2), (8, 2)),
    ((12, 3), (8, 3)),
    ((12, 4), (8, 4)),
    ((12, 5), (8, 5)),
    ((12, 6), (8, 5)),
    ((12, 7), (8, 6)),
    ((12, 8), (8, 7)),
    ((12, 9), (8, 8)),
    ((13, 0), (9, 0)),
    ((13, 1), (9, 1)),
)

# The lowest PTX ISA each target accepts (PTX ISA manual, "Target ISA notes").
PTX_MIN_FOR_TARGET: Dict[str, Tuple[int, int]] = {
    "sm_50": (4, 0),
    "sm_52": (4, 1),
    "sm_53": (4, 2),
    "sm_60": (5, 0),
    "sm_61": (5, 0),
    "sm_62": (5, 0),
    "sm_70": (6, 0),
    "sm_72": (6, 1),
    "sm_75": (6, 3),
    "sm_80": (7, 0),
    "sm_86": (7, 1),
    "sm_87": (7, 4),
    "sm_89": (7, 8),
    "sm_90": (7, 8),
    "sm_90a": (8, 0),
    "sm_100": (8, 6),
    "sm_100a": (8, 6),
    "sm_101": (8, 6),
    "sm_101a": (8, 6),
    "sm_103": (8, 8),
    "sm_103a": (8, 8),
    "sm_110": (9, 0),
    "sm_110a": (9, 0),
    "sm_120": (8, 7),
    "sm_120a": (8, 7),
    "sm_121": (8, 8),
    "sm_121a": (8, 8),
}

Version = Tuple[int, int]


def driver_version_tuple(driver_version: int) -> Version:
    """``cuDriverGetVersion``'s int (``12040``) as ``(12, 4)``."""
    value = as_int(driver_version, "driver version")
    return value // 1000, (value % 1000) // 10


def format_version(version: Version) -> str:
    return "%d.%d" % version


def _max_ptx(driver_version: int) -> Tuple[Version, bool]:
    """(highest PTX ISA, known exactly) for a driver version."""
    cuda = driver_version_tuple(driver_version)
    if cuda < PTX_FOR_CUDA[0][0]:
        raise PtxError("CUDA driver %s is older than 9.0; svod_min needs a CUDA 11+ driver" % format_version(cuda))
    for release, ptx in reversed(PTX_FOR_CUDA):
        if cuda == release:
            return ptx, True
        if cuda > release:
            if cuda[0] == 13:  # 13.N carries PTX 9.N so far
                return (9, cuda[1]), False
            return ptx, False  # newer than the table: the newest version known to load
    raise AssertionError("unreachable")  # pragma: no cover


def select_ptx_version(driver_version: int) -> str:
    """The highest PTX ``.version`` a driver of ``cuDriverGetVersion`` value ``driver_version`` loads.

    12000 -> "8.0", 12040 -> "8.4", 12080 -> "8.7", 13000 -> "9.0". Drivers
    newer than the table get the highest version known to be safe for them.
    """
    return format_version(_max_ptx(driver_version)[0])


def check_ptx_version(ptx_version: Union[str, Version], driver_version: int) -> None:
    """Raise :class:`PtxError` when a module's ``.version`` is newer than the driver accepts."""
    have = _parse_version(ptx_version) if isinstance(ptx_version, str) else tuple(ptx_version)
    limit, exact = _max_ptx(driver_version)
    cuda = driver_version_tuple(driver_version)
    if have > limit and (exact or cuda[0] <= 13):
        raise PtxError(
            "driver %s accepts PTX up to %s; this module is %s (CUDA_ERROR_UNSUPPORTED_PTX_VERSION). "
            "Update the NVIDIA driver, regenerate the PTX with an older toolkit, or lower its .version with "
            "rewrite_ptx_version(text, %r) when it uses no newer instructions"
            % (format_version(cuda), format_version(limit), format_version(have), format_version(limit))  # type: ignore[arg-type]
        )


# --- PTX text ------------------------------------------------------------------------------------

_TOKEN_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/', re.S)
_VERSION_RE = re.compile(r"^[ \t]*\.version[ \t]+(\d+)\.(\d+)\b", re.M)
_TARGET_RE = re.compile(r"^[ \t]*\.target[ \t]+([^\n;]*)", re.M)
_ENTRY_RE = re.compile(r"\.entry\s+([A-Za-z_$%][\w$%]*)\s*\(")
_EXTERN_FUNC_RE = re.compile(r"\.extern\s+\.func\b(?:\s*\([^)]*\))?\s*([A-Za-z_$%][\w$%]*)?")
_ADDRESS_RE = re.compile(r"^[ \t]*\.address_size[ \t]+(\d+)", re.M)
_ARCH_RE = re.compile(r"(?:sm_|compute_)?(\d+)([af]?)\Z")
# `.param [.align N] .type [.ptr [.space] [.align N]] name[count]`: the `.ptr` attribute (PTX ISA 2.2+) is
# what LLVM's NVPTX backend emits for kernel pointer parameters.
_PARAM_RE = re.compile(
    r"\.param\s+(?:\.align\s+\d+\s+)?\.([busf])(8|16|32|64)\s+"
    r"(?:\.ptr\s+(?:\.(?:global|shared|const|local)\s+)?(?:\.align\s+\d+\s+)?)?"
    r"[A-Za-z_$%][\w$%]*\s*(?:\[(\d+)\])?"
)


@dataclass(frozen=True)
class PtxInfo:
    """What :func:`validate_ptx` read from a module."""

    version: Version
    target: str
    entries: Tuple[str, ...]
    address_size: int

    @property
    def version_string(self) -> str:
        return format_version(self.version)


def blank_comments(text: str) -> str:
    """``text`` with every comment replaced by spaces (offsets and newlines kept, strings untouched)."""

    def blank(match: "re.Match[str]") -> str:
        token = match.group(0)
        if token.startswith('"'):
            return token
        return re.sub(r"[^\n]", " ", token)

    return _TOKEN_RE.sub(blank, text)


def _parse_version(text: str) -> Version:
    match = re.match(r"\s*(\d+)\.(\d+)\s*\Z", str(text))
    if not match:
        raise PtxError("a PTX ISA version looks like '8.4', got %r" % (text,))
    return int(match.group(1)), int(match.group(2))


def parse_arch(arch: Any) -> Tuple[int, str]:
    """``"sm_90a"`` / ``"compute_80"`` / ``"80"`` / ``80`` / ``(8, 0)`` -> ``(90, "a")`` / ``(80, "")``."""
    if isinstance(arch, tuple) and len(arch) == 2:
        return int(arch[0]) * 10 + int(arch[1]), ""
    if isinstance(arch, int) and not isinstance(arch, bool):
        return arch, ""
    match = _ARCH_RE.match(str(arch).strip().lower())
    if not match:
        raise PtxError("unknown GPU architecture %r (expected e.g. 'sm_80')" % (arch,))
    return int(match.group(1)), match.group(2)


def arch_name(arch: Any) -> str:
    number, suffix = parse_arch(arch)
    return "sm_%d%s" % (number, suffix)


def _target_runs_on(target: str, arch: Any, exact: bool) -> bool:
    t_num, t_suffix = parse_arch(target)
    a_num, a_suffix = parse_arch(arch)
    if exact:
        return (t_num, t_suffix) == (a_num, a_suffix)
    if t_suffix == "a":  # arch-specific code runs on that exact chip only
        return t_num == a_num
    if t_suffix == "f":  # family code: same major, same or newer minor
        return t_num // 10 == a_num // 10 and t_num <= a_num
    return t_num <= a_num  # plain PTX is JIT-compiled forward to newer GPUs


def validate_ptx(text: str, arch: Any = None, *, entry: Optional[str] = None, exact_target: bool = False) -> PtxInfo:
    """Check svod's PTX rules; returns what was read, raises :class:`PtxError` listing every problem.

    Rules: a ``.version`` directive; a ``.target`` whose architecture runs on
    ``arch`` (equal to it with ``exact_target=True``, svod's strict rule;
    otherwise an older plain target is fine since the driver JITs PTX
    forward); at least one ``.entry name(``; ``entry`` among them when given;
    no ``.extern .func`` (the driver cannot link one); ``.address_size 64``
    when stated (svod passes 8-byte pointers). Comments are ignored.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    if not isinstance(text, str) or not text.strip():
        raise PtxError("PTX module is empty")
    if "\0" in text:
        raise PtxError("PTX text contains a NUL byte (binary data? use load_cubin for CUBIN images)")
    code = blank_comments(text)
    problems: List[str] = []
    version = _check_version_directive(code, problems)
    target = _check_target(code, arch, exact_target, problems)
    entries = tuple(_ENTRY_RE.findall(code))
    _check_entries(code, entries, entry, problems)
    address = _ADDRESS_RE.search(code)
    address_size = int(address.group(1)) if address else 64
    if address_size != 64:
        problems.append(".address_size is %d; svod passes 64-bit pointers" % address_size)
    if problems:
        raise PtxError("invalid PTX: " + "; ".join(problems))
    return PtxInfo(version, target, entries, address_size)


def _check_version_directive(code: str, problems: List[str]) -> Version:
    found = _VERSION_RE.findall(code)
    if not found:
        problems.append("no .version directive")
        return (0, 0)
    if len(found) > 1:
        problems.append("%d .version directives (one module per text)" % len(found))
    return int(found[0][0]), int(found[0][1])


def _check_target(code: str, arch: Any, exact: bool, problems: List[str]) -> str:
    match = _TARGET_RE.search(code)
    if not match:
        problems.append("no .target directive")
        return ""
    target = match.group(1).split(",")[0].strip()
    try:
        parse_arch(target)
    except PtxError:
        problems.append(".target %r is not an sm_XX architecture" % target)
        return target
    if arch is not None and not _target_runs_on(target, arch, exact):
        rule = "must equal" if exact else "must run on"
        problems.append(".target %s %s the device architecture %s" % (target, rule, arch_name(arch)))
    return target


def _check_entries(code: str, entries: Tuple[str, ...], entry: Optional[str], problems: List[str]) -> None:
    if not entries:
        problems.append("no kernel: expected at least one '.entry name('")
    elif entry is not None and entry not in entries:
        problems.append("entry %r not found (entries: %s)" % (entry, ", ".join(entries)))
    for match in _EXTERN_FUNC_RE.finditer(code):
        name = match.group(1) or "?"
        problems.append(".extern .func %s: the driver cannot link external device functions" % name)


def ptx_entries(text: str) -> Tuple[str, ...]:
    """The kernel names (``.entry``) of a PTX module, comments ignored."""
    return tuple(_ENTRY_RE.findall(blank_comments(text)))


def ptx_version_of(text: str) -> Version:
    """The module's ``.version`` (raises :class:`PtxError` when it has none)."""
    match = _VERSION_RE.search(blank_comments(text))
    if not match:
        raise PtxError("invalid PTX: no .version directive")
    return int(match.group(1)), int(match.group(2))


def rewrite_ptx_version(text: str, version: Union[str, Version]) -> str:
    """``text`` with its ``.version`` set to ``version`` (to lower it for an older driver).

    Refuses a version below what the module's ``.target`` requires. Whether
    the code itself uses newer instructions is for ptxas / the driver JIT to
    say (:func:`ptxas_check`); the JIT log then names the instruction.
    """
    want = _parse_version(version) if isinstance(version, str) else (int(version[0]), int(version[1]))
    code = blank_comments(text)
    match = _VERSION_RE.search(code)
    if not match:
        raise PtxError("invalid PTX: no .version directive to rewrite")
    target = _TARGET_RE.search(code)
    if target:
        name = target.group(1).split(",")[0].strip()
        floor = PTX_MIN_FOR_TARGET.get(name)
        if floor is not None and want < floor:
            raise PtxError(
                ".target %s needs PTX >= %s; cannot lower to %s" % (name, format_version(floor), format_version(want))
            )
    start, end = match.span(1)[0], match.span(2)[1]
    return text[:start] + "%d.%d" % want + text[end:]


def ptx_entry_param_types(text: str, entry: str) -> List[str]:
    """Each ``.param`` of kernel ``entry`` in declaration order as its PTX type: ``".u64"``, ``".f32"``,
    ``".b8[16]"`` (an array)."""
    code = blank_comments(text)
    match = re.search(r"\.entry\s+%s\s*\(([^)]*)\)" % re.escape(entry), code)
    if not match:
        raise PtxError("entry %r not found in the PTX module" % entry)
    return [
        ".%s%s%s" % (kind, bits, "[%s]" % count if count else "")
        for kind, bits, count in _PARAM_RE.findall(match.group(1))
    ]


def ptx_required_block(text: str, entry: str) -> Optional[Tuple[int, int, int]]:
    """The block kernel ``entry`` requires (its ``.reqntid x[, y[, z]]`` directive), or None."""
    code = blank_comments(text)
    match = re.search(r"\.entry\s+%s\s*\([^)]*\)([^{]*)\{" % re.escape(entry), code)
    if not match:
        raise PtxError("entry %r not found in the PTX module" % entry)
    req = re.search(r"\.reqntid\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", match.group(1))
    if not req:
        return None
    return int(req.group(1)), int(req.group(2) or 1), int(req.group(3) or 1)


def _param_bytes(param_type: str) -> int:
    kind, _, count = param_type.partition("[")
    return int(kind[2:]) // 8 * (int(count[:-1]) if count else 1)


def ptx_entry_params(text: str, entry: str) -> List[int]:
    """Byte size of each ``.param`` of kernel ``entry`` in declaration order."""
    return [_param_bytes(t) for t in ptx_entry_param_types(text, entry)]


#: What svod packs, and the PTX types that receive it bit for bit: a 64-bit device address, an int32.
_POINTER_TYPES = (".u64", ".s64", ".b64")
_INT32_TYPES = (".u32", ".s32", ".b32")


def check_entry_params(text: str, entry: str, buf_count: int, var_count: int) -> None:
    """Raise :class:`PtxError` unless ``entry`` takes ``buf_count`` pointers (``.u64``/``.s64``/``.b64``) then
    ``var_count`` int32 scalars (``.u32``/``.s32``/``.b32``): a ``.f32`` scalar would receive an int32's bits."""
    types = ptx_entry_param_types(text, entry)
    have = [_param_bytes(t) for t in types]
    want = [8] * buf_count + [4] * var_count
    if have != want:
        raise PtxError(
            "kernel %s declares parameters of %s bytes; svod passes %d pointers then %d int32 (%s bytes)"
            % (entry, have, buf_count, var_count, want)
        )
    for index, param_type in enumerate(types):
        allowed, what = (_POINTER_TYPES, "a 64-bit buffer address") if index < buf_count else (_INT32_TYPES, "an int32")
        if param_type not in allowed:
            raise PtxError(
                "kernel %s parameter %d is %s; svod passes %s there (%s)"
                % (entry, index, param_type, what, "/".join(allowed))
            )


# --- ptxas (offline validation) -------------------------------------------------------------------


def find_ptxas() -> Optional[str]:
    """ptxas from $CUDA_HOME, $CUDA_PATH, /usr/local/cuda or PATH; None when absent or SVOD_CUDA_PTXAS=0."""
    import shutil  # on use, like subprocess below: importing the CUDA package must stay cheap (registry probe)

    if os.environ.get(_PTXAS_ENV, "").strip() == "0":
        return None
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            path = os.path.join(root, "bin", "ptxas")
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return shutil.which("ptxas")


def ptxas_check(ptx_text: str, arch: Any, *, ptxas: Optional[str] = None, timeout: float = 300.0) -> bytes:
    """Assemble ``ptx_text`` for ``arch`` with ptxas; returns the CUBIN, raises CompilationError with its log."""
    import subprocess
    import tempfile

    exe = ptxas or find_ptxas()
    if exe is None:
        raise NotSupportedError("ptxas not found (set CUDA_HOME, or put the CUDA toolkit's bin/ on PATH)")
    target = arch_name(arch)
    with tempfile.TemporaryDirectory(prefix="svod-ptxas-") as tmp:
        src, out = os.path.join(tmp, "module.ptx"), os.path.join(tmp, "module.cubin")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write(ptx_text)
        proc = subprocess.run(
            [exe, "-arch=" + target, "-o", out, src], capture_output=True, text=True, timeout=timeout, check=False
        )
        if proc.returncode != 0:
            raise CompilationError(
                "ptxas -arch=%s rejected the PTX (exit %d)" % (target, proc.returncode),
                diagnostics=(proc.stderr + proc.stdout).replace(src, "<ptx>"),
                compiler=exe,
            )
        with open(out, "rb") as fh:
            return fh.read()
