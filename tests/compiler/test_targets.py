"""Compile targets: the best target for a CPU's features, forcing one, and an object's machine against its target."""

from __future__ import annotations

from typing import Any

import pytest

from svod_min.compiler import targets
from svod_min.compiler.targets import TARGETS, choose_target, host_target, object_target_mismatch
from svod_min.error import ConfigError

V3 = TARGETS["x86_64-v3"].requires
V4 = TARGETS["x86_64-v4"].requires
ALL = ["x86_64", "x86_64-v3", "x86_64-v4", "aarch64"]


def test_baseline_features_choose_the_baseline_object() -> None:
    assert choose_target(ALL, arch="x86_64", features=frozenset({"sse2"})) == "x86_64"


def test_avx2_host_chooses_v3_and_avx512_host_v4() -> None:
    assert choose_target(ALL, arch="x86_64", features=V3) == "x86_64-v3"
    assert choose_target(ALL, arch="x86_64", features=V4) == "x86_64-v4"
    assert choose_target(["x86_64", "x86_64-v3"], arch="x86_64", features=V4) == "x86_64-v3"


def test_v3_needs_every_one_of_its_features() -> None:
    for missing in sorted(V3):
        assert choose_target(ALL, arch="x86_64", features=V3 - {missing}) == "x86_64", missing


def test_an_aarch64_host_takes_the_aarch64_object_and_nothing_else() -> None:
    assert choose_target(ALL, arch="aarch64", features=frozenset({"fp", "asimd"})) == "aarch64"
    assert choose_target(["x86_64"], arch="aarch64", features=frozenset()) is None
    assert choose_target(["aarch64"], arch="x86_64", features=V4) is None


def test_unknown_target_names_are_kept_but_never_chosen() -> None:
    assert choose_target(["riscv64-future", "x86_64"], arch="x86_64", features=V3) == "x86_64"
    assert choose_target(["riscv64-future"], arch="x86_64", features=V3) is None


def test_the_environment_forces_a_target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVOD_TARGET", "x86_64")
    assert choose_target(ALL, arch="x86_64", features=V4) == "x86_64"
    assert choose_target(["x86_64-v3"], arch="x86_64", features=V4) is None  # forced, and absent
    monkeypatch.setenv("SVOD_TARGET", "aarch64")
    with pytest.raises(ConfigError, match="SVOD_TARGET=aarch64 is a aarch64 target; this host is x86_64"):
        choose_target(ALL, arch="x86_64", features=V4)
    monkeypatch.setenv("SVOD_TARGET", "pentium")
    with pytest.raises(ConfigError, match="unknown target 'pentium'"):
        choose_target(ALL, arch="x86_64", features=V4)


def test_host_target_follows_proc_cpuinfo() -> None:
    flags = targets.cpu_features()
    arch = targets.host_arch()
    want = None
    for name in ("x86_64", "x86_64-v3", "x86_64-v4", "aarch64"):  # in rising priority per arch
        if TARGETS[name].arch == arch and TARGETS[name].requires <= flags:
            want = name
    assert host_target() == want


def test_cpuinfo_of_another_machine(tmp_path: Any) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor : 0\nflags : fpu sse2 %s\n\nprocessor : 1\n" % " ".join(sorted(V3)))
    assert targets.cpu_features(str(info)) == frozenset({"fpu", "sse2"}) | V3
    arm = tmp_path / "arm"
    arm.write_text("processor : 0\nFeatures : fp asimd evtstrm\n")
    assert targets.cpu_features(str(arm)) == frozenset({"fp", "asimd", "evtstrm"})


def _elf(machine: int, etype: int = 1, cls: int = 2) -> bytes:
    head = bytearray(64)
    head[:4] = b"\x7fELF"
    head[4], head[5] = cls, 1
    head[16:18] = etype.to_bytes(2, "little")
    head[18:20] = machine.to_bytes(2, "little")
    return bytes(head)


def test_an_object_must_be_for_its_targets_machine() -> None:
    assert object_target_mismatch(_elf(62), "x86_64-v3") is None
    assert object_target_mismatch(_elf(183), "aarch64") is None
    assert "ELF machine 183 (aarch64) does not match target x86_64 (x86_64)" in str(
        object_target_mismatch(_elf(183), "x86_64")
    )
    assert "not a relocatable object" in str(object_target_mismatch(_elf(62, etype=3), "x86_64"))
    assert "64-bit little-endian" in str(object_target_mismatch(_elf(62, cls=1), "x86_64"))
    assert object_target_mismatch(b"MZ" + bytes(100), "x86_64") == "not an ELF file"
    assert object_target_mismatch(_elf(243), "riscv64-future") is None  # unknown here: never chosen anyway


@pytest.mark.parametrize("arch", ["riscv64", "ppc64le", "loongarch64"])
def test_a_host_of_each_new_arch_picks_its_own_target(arch: str) -> None:
    every = list(TARGETS)
    assert choose_target(every, arch=arch, features=frozenset()) == arch
    assert choose_target([t for t in every if t != arch], arch=arch, features=frozenset()) is None


def test_new_arch_objects_are_checked_by_machine() -> None:
    assert object_target_mismatch(_elf(243), "riscv64") is None
    assert object_target_mismatch(_elf(21), "ppc64le") is None
    assert object_target_mismatch(_elf(258), "loongarch64") is None
    assert "does not match target ppc64le" in str(object_target_mismatch(_elf(243), "ppc64le"))


def test_info_names_this_hosts_target() -> None:
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "svod_min", "info"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "host target: %s " % (host_target() or "none known for this arch") in proc.stdout
    from svod_min.kernels import host_variant

    variant = host_variant()
    assert "kernel library: %s" % ("prebuilt %s\n" % variant if variant else "compiled on demand") in proc.stdout
    env = dict(os.environ, SVOD_KERNELS_VARIANT="bogus")
    proc = subprocess.run(
        [sys.executable, "-m", "svod_min", "info"], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0 and "kernel library: unusable: SVOD_KERNELS_VARIANT='bogus'" in proc.stdout


def test_compiler_triples_name_the_loaders_architectures() -> None:
    from svod_min.compiler.clang import CompilerInfo
    from svod_min.planfile.bundle_build import compiler_arch

    for triple, arch in (
        ("x86_64-linux-gnu", "x86_64"),
        ("powerpc64le-linux-gnu", "ppc64le"),
        ("aarch64-unknown-linux-gnu", "aarch64"),
        ("riscv64-linux-gnu", "riscv64"),
    ):
        assert compiler_arch(CompilerInfo("/usr/bin/gcc", "gcc", "12", triple)) == arch
