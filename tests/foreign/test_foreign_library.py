"""Every kernel of the prebuilt library objects of riscv64, ppc64le and loongarch64, executed under qemu-user.

The committed object (``svod_min/kernels/prebuilt/<arch>-baseline/library.o``)
is linked statically by a real linker into a program that calls every entry
point (foreign_library.py builds the driver from the signatures), and,
separately, relocated by svod_min on this host and mapped by the static harness
(foreign_support.py). Both run under qemu and must print the same bytes for
every written buffer of every kernel. The object is the very same, so only
relocation differs. One program per architecture runs all kernels; each kernel
is its own test, reported passed, failed, or skipped with the reason it cannot
be driven. Without ``SVOD_FOREIGN=1`` (the CI stage ``.ci/foreign-arch-stage``)
only a few kernels per architecture run.
"""

from __future__ import annotations

import os
from typing import Dict, List, Tuple, Union

import pytest

pytest.importorskip("elftools")

import foreign_library as fl  # noqa: E402
import foreign_support as fs  # noqa: E402

from svod_min.jit_loader.elf import parse_object  # noqa: E402
from svod_min.jit_loader.layout import ARCHES  # noqa: E402
from svod_min.kernels import variants  # noqa: E402
from svod_min.kernels.lookup import generated  # noqa: E402

pytestmark = pytest.mark.python_independent  # foreign code under qemu

FULL = os.environ.get("SVOD_FOREIGN", "") == "1"
ARCH_NAMES = ("riscv64", "ppc64le", "loongarch64")
QUICK = ("svod_add_f32", "svod_matmul_f64_4x4", "svod_matmul_f64_6x8", "svod_softmax_f32", "svod_conv2d_f32")


def _variant(arch: str) -> str:
    return arch + "-baseline"


def _calls(arch: str) -> List[fl.Call]:
    return fl.library_calls(generated().VARIANTS[_variant(arch)]["exclude"])


def _object(arch: str) -> bytes:
    with open(variants.object_path(_variant(arch)), "rb") as fh:
        return fh.read()


Outputs = Dict[str, List[str]]
_runs: Dict[str, Union[Tuple[Outputs, Outputs], RuntimeError]] = {}


def _run(arch: str, tmp_path_factory: pytest.TempPathFactory) -> Tuple[Outputs, Outputs]:
    """(reference, loaded) outputs by entry of the one program of ``arch`` (built and run once; a failure too)."""
    tc, reason = fs.toolchain(arch)
    if tc is None:
        pytest.skip("%s: %s" % (arch, reason))
    if arch not in _runs:
        calls = [c for c in _calls(arch) if c.skip is None and (FULL or c.entry in QUICK)]
        workdir = str(tmp_path_factory.mktemp("library-%s" % arch))
        try:
            outcome = fs.run_object(
                tc, _object(arch), fl.driver_source(calls), [c.entry for c in calls], workdir, bend=fs.breaking(arch)
            )
            _runs[arch] = (fl.outputs_by_entry(outcome.reference), fl.outputs_by_entry(outcome.loaded))
        except RuntimeError as exc:  # e.g. the relocated image crashed: every kernel of the arch fails with it
            _runs[arch] = exc
    result = _runs[arch]
    if isinstance(result, RuntimeError):  # a fresh failure each time: re-raising one exception grows its traceback
        pytest.fail("%s: %s" % (arch, str(result)[:2000]), pytrace=False)
    return result


def _params() -> List[object]:
    out = []
    for arch in ARCH_NAMES:
        for call in _calls(arch):
            marks = []
            if call.skip is not None:
                marks = [pytest.mark.skip(reason="%s: %s cannot be driven: %s" % (arch, call.entry, call.skip))]
            elif not FULL and call.entry not in QUICK:
                marks = [pytest.mark.skip(reason="every library kernel: full matrix only (SVOD_FOREIGN=1)")]
            out.append(pytest.param(arch, call.entry, id="%s-%s" % (arch, call.entry), marks=marks))
    return out


@pytest.mark.parametrize("arch, entry", _params())
def test_library_kernel_matches_linked_program(arch: str, entry: str, tmp_path_factory) -> None:
    reference, loaded = _run(arch, tmp_path_factory)
    assert reference.get(entry), "the reference program printed nothing for %s" % entry
    assert len(reference[entry]) >= 2  # one core id, then several
    got, want = loaded.get(entry, []), reference[entry]
    if got != want:  # a short message: pytest's own diff of these long hex lines takes minutes
        diff = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
        pytest.fail(
            "%s on %s: the relocated image's output differs from the linked program's (line %d of %d: "
            "%.80s... vs %.80s...)"
            % (entry, arch, diff, len(want), (got + [""])[min(diff, len(got))], (want + [""])[diff]),
            pytrace=False,
        )


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_every_entry_point_of_the_object_is_driven(arch: str) -> None:
    """The calls cover exactly the object's global functions: no kernel is left out unseen."""
    obj = parse_object(_object(arch), tuple(ARCHES))
    functions = {s.name for s in obj.symbols if s.name and s.shndx != 0 and s.bind != 0 and s.type == 2}
    assert functions == {c.entry for c in _calls(arch)}


def test_inputs_follow_the_signature() -> None:
    calls = {c.entry: c for c in _calls("riscv64")}
    add = calls["svod_add_f32"]
    assert (
        add.skip is None
        and add.args == (37,)
        and add.buffers == (("float32", "w", 37),) * 1 + (("float32", "r", 37),) * 2
    )
    conv = calls["svod_conv2d_f32"]
    assert conv.skip is None and conv.buffers[0] == ("float32", "w", 2 * 4 * 7 * 3)
    bad = fl.plan_call(
        {
            "entry": "x",
            "family": "elementwise",
            "vars": (("q", 0, "int"), ("core_id_count", 1, "int"), ("core_id", 0, "int")),
            "buffers": (),
        }
    )
    assert bad.skip == "no input rule for variable q"
    assert fl.pool_bytes("float16")[:2] != b"\0\0" and len(fl.pool_bytes("float64")) == fl.POOL * 8
