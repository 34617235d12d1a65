"""Model bundles: build, determinism, running in place with no compiler, target choice, bad bundles refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from typing import Any, Dict, List, Optional, Tuple

import pytest
from conftest import HAVE_CLANG, needs_cc
from support.paths import REPO_DIR

from svod_min.error import BundleError, NoUsableTargetError
from svod_min.planfile.bundle import (
    MANIFEST,
    PLAN,
    STORE_ABOVE,
    Limits,
    open_bundle,
    sha256,
    write_bundle,
    write_fixed_zip,
)
from svod_min.planfile.bundle_build import build_bundle
from svod_min.planfile.load import load_plan

REPO = REPO_DIR
EXAMPLES = os.path.join(REPO, "examples", "tinygrad")
PLANS: Dict[str, Optional[str]] = {"default": None}
PLANS.update({m: os.path.join(EXAMPLES, m, "plan.json") for m in ("mlp", "convnet", "attention")})
TARGETS = ["x86_64", "x86_64-v3", "aarch64"]
needs_clang_targets = pytest.mark.skipif(not HAVE_CLANG, reason="aarch64 objects need clang (gcc builds its own arch)")


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    """One bundle per plan, for x86_64, x86_64-v3 and (with clang) aarch64."""
    if not HAVE_CLANG and not shutil.which("gcc"):
        pytest.skip("no C compiler to build bundles with")
    out = tmp_path_factory.mktemp("bundles")
    paths = {}
    for name, plan in PLANS.items():
        paths[name] = str(out / (name + ".svod"))
        build_bundle(plan, paths[name], targets=TARGETS if HAVE_CLANG else TARGETS[:2])
    return paths


# --- build --------------------------------------------------------------------------------


@needs_cc
def test_every_source_kernel_gets_an_object_per_target(bundles: Dict[str, str]) -> None:
    for name in ("mlp", "convnet", "attention"):
        bundle = open_bundle(bundles[name])
        with open(PLANS[name]) as fh:  # type: ignore[arg-type]
            sources = [k for k, v in json.load(fh)["kernels"].items() if "file" in v or "source" in v]
        assert sources and sorted(bundle.kernel_targets()) == sorted(sources)
        for kernel, targets in bundle.kernel_targets().items():
            assert targets == (TARGETS if HAVE_CLANG else TARGETS[:2]), kernel
        m = bundle.manifest
        assert m["svod_bundle"] == 1 and m["svod_min"] and m["compiler"]["family"] in ("clang", "gcc")
        assert set(m["flags"]) == set(m["targets"]) and all("-march=" in " ".join(f) for f in m["flags"].values())
        for entry, meta in m["entries"].items():
            assert meta["sha256"] == sha256(bundle.entries[entry])


@needs_cc
def test_the_same_inputs_give_a_byte_identical_bundle(bundles: Dict[str, str], tmp_path: Any) -> None:
    again = str(tmp_path / "again.svod")
    build_bundle(PLANS["mlp"], again, targets=TARGETS if HAVE_CLANG else TARGETS[:2])
    with open(again, "rb") as a, open(bundles["mlp"], "rb") as b:
        assert a.read() == b.read()
    with zipfile.ZipFile(again) as zf:
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        assert zf.namelist()[0] == MANIFEST and zf.namelist()[1:] == sorted(zf.namelist()[1:])


def test_gcc_builds_its_own_arch_and_names_what_it_cannot(tmp_path: Any) -> None:
    if not shutil.which("gcc"):
        pytest.skip("gcc is not installed")
    notes: List[str] = []
    report = build_bundle(
        PLANS["mlp"], str(tmp_path / "g.svod"), targets=["x86_64", "aarch64"], compiler="gcc", progress=notes.append
    )
    host = "x86_64" if os.uname().machine == "x86_64" else "aarch64"
    assert report.built == [host] and list(report.skipped) == [t for t in ("x86_64", "aarch64") if t != host]
    assert any("gcc" in n and "is not built" in n for n in notes), notes


def test_unknown_target_is_refused(tmp_path: Any) -> None:
    from svod_min.error import ConfigError

    with pytest.raises(ConfigError, match="unknown target 'sparc'"):
        build_bundle(PLANS["mlp"], str(tmp_path / "x.svod"), targets=["sparc"])


# --- running where nothing can be compiled or written ----------------------------------------


def _interpreters() -> List[str]:
    """This Python; outside tox also the oldest and newest of the matrix where installed (real paths, not shims).

    Under tox every version of the matrix runs these tests as its own ``sys.executable``.
    """
    found = [sys.executable]
    for minor in () if os.environ.get("TOX_ENV_NAME") else ("3.8", "3.13"):
        path = shutil.which("python" + minor)
        if path is None:
            continue
        proc = subprocess.run(
            [path, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, timeout=60
        )
        real = proc.stdout.strip()
        if proc.returncode == 0 and real and real not in found:
            found.append(real)
    return found


def bare_env(tmp_path: Any) -> Tuple[Dict[str, str], List[str]]:
    """PATH with no compiler, object cache off, HOME and TMPDIR empty and read-only (checked afterwards)."""
    dirs = [str(tmp_path / d) for d in ("bin", "home", "tmp")]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    os.chmod(dirs[1], 0o555)
    os.chmod(dirs[2], 0o555)
    env = {"PATH": dirs[0], "HOME": dirs[1], "TMPDIR": dirs[2], "SVOD_OBJECT_CACHE": "0", "LANG": "C.UTF-8"}
    return env, dirs[1:]


def run_verified(cmd: List[str], env: Dict[str, str], untouched: List[str], cwd: str) -> Dict[str, Any]:
    proc = subprocess.run(cmd + ["--json"], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (cmd, proc.stderr)
    report = json.loads(proc.stdout)
    assert report["verify"] and all(v["ok"] for v in report["verify"]), report["verify"]
    for d in untouched:
        assert os.listdir(d) == [], "%s was written to: %s" % (d, os.listdir(d))
    return report


@needs_cc
@pytest.mark.parametrize("name", list(PLANS))
def test_bundle_runs_with_no_compiler_no_cache_and_read_only_home(
    bundles: Dict[str, str], name: str, tmp_path: Any
) -> None:
    import svod_min

    env, untouched = bare_env(tmp_path)
    site = os.path.dirname(os.path.dirname(svod_min.__file__))
    import elftools

    env["PYTHONPATH"] = os.pathsep.join(sorted({site, os.path.dirname(os.path.dirname(elftools.__file__))}))
    report = run_verified([sys.executable, "-m", "svod_min", "run", bundles[name]], env, untouched, str(tmp_path))
    assert report["plan"] == bundles[name]


@needs_cc
@pytest.mark.python_independent  # it runs every bare Python itself, whatever the env's Python is
@pytest.mark.parametrize("name", list(PLANS))
def test_bundle_runs_from_the_one_file_runtime_on_bare_pythons(
    bundles: Dict[str, str], name: str, pyz: str, tmp_path: Any
) -> None:
    env, untouched = bare_env(tmp_path)
    for python in _interpreters():  # -S: not even the interpreter's own site-packages (no numpy, no pyelftools)
        run_verified([python, "-I", "-S", pyz, "run", bundles[name]], env, untouched, str(tmp_path))


@needs_cc
def test_only_aarch64_objects_on_x86_64_exit_3_naming_both(tmp_path: Any, pyz: str) -> None:
    if os.uname().machine != "x86_64" or not HAVE_CLANG:
        pytest.skip("needs an x86_64 host with clang")
    path = str(tmp_path / "arm.svod")
    build_bundle(PLANS["mlp"], path, targets=["aarch64"])
    env, _ = bare_env(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-I", pyz, "run", path], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 3, proc.stderr
    line = proc.stderr.strip()
    assert line.count("\n") == 0 and "no precompiled object runs on this host (target x86_64" in line
    assert "objects for aarch64" in line and "no compiler here" in line


@needs_cc
def test_no_usable_target_compiles_the_source_when_a_compiler_exists(tmp_path: Any) -> None:
    if os.uname().machine != "x86_64" or not HAVE_CLANG:
        pytest.skip("needs an x86_64 host with clang")
    path = str(tmp_path / "arm.svod")
    build_bundle(PLANS["mlp"], path, targets=["aarch64"])
    loaded = load_plan(path)
    loaded.plan.execute()
    assert all(ok for _, ok, _ in loaded.verify())


@needs_cc
def test_forced_target_is_the_object_loaded(bundles: Dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from svod_min.devices.cpu.device import CpuDevice

    seen: List[bytes] = []
    real = CpuDevice.load
    monkeypatch.setattr(CpuDevice, "load", lambda self, obj, *a, **kw: (seen.append(obj), real(self, obj, *a, **kw))[1])
    bundle = open_bundle(bundles["mlp"])
    by_target = {m["target"]: bundle.entries[e] for e, m in bundle.manifest["objects"].items()}
    for target in ("x86_64", "x86_64-v3"):
        monkeypatch.setenv("SVOD_TARGET", target)
        seen.clear()
        loaded = load_plan(bundles["mlp"])
        loaded.plan.execute()
        assert all(ok for _, ok, _ in loaded.verify())
        objects = [o for o in seen if o in by_target.values()]
        assert objects and all(
            o in [d for e, d in bundle.entries.items() if bundle.manifest["objects"].get(e, {}).get("target") == target]
            for o in objects
        )


@needs_cc
def test_info_names_the_targets_and_this_hosts_choice(bundles: Dict[str, str]) -> None:
    env = dict(os.environ, SVOD_TARGET="x86_64") if os.uname().machine == "x86_64" else dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "svod_min", "info", bundles["mlp"]], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "targets: %s" % ", ".join(TARGETS if HAVE_CLANG else TARGETS[:2]) in proc.stdout
    if os.uname().machine == "x86_64":
        assert "would use x86_64\n" in proc.stdout and "uses x86_64\n" in proc.stdout


# --- bad bundles --------------------------------------------------------------------------


def _small_bundle(path: str, mutate: Any = None) -> str:
    """A valid one-kernel-free bundle of the default plan's shape, or with ``mutate(files, manifest)`` applied."""
    plan = {
        "svod_plan": 1,
        "buffers": {
            "x": {"dtype": "float32", "shape": [4], "init": {"npy": "data/x.npy"}},
            "y": {"dtype": "float32", "shape": [4], "output": True},
        },
        "ops": [{"copy": {"dst": "y", "src": "x"}}],
    }
    npy = b"\x93NUMPY\x01\x00v\x00" + b"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }".ljust(117) + b"\n"
    files = {PLAN: json.dumps(plan).encode(), "data/x.npy": npy + bytes(16)}
    manifest: Dict[str, Any] = {"svod_min": "test"}
    if mutate is not None:
        mutate(files, manifest)
    write_bundle(path, files, manifest)
    return path


def _rewrite(path: str, change: Any) -> None:
    """Rewrite the zip at ``path`` member by member: ``change(name, data)`` -> (name, data) or None to drop."""
    with zipfile.ZipFile(path) as zf:
        members = [(i.filename, zf.read(i.filename)) for i in zf.infolist()]
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members:
            out = change(name, data)
            if out is not None:
                zf.writestr(out[0], out[1])


def _manifest_edit(edit: Any) -> Any:
    def change(name: str, data: bytes) -> Tuple[str, bytes]:
        if name != MANIFEST:
            return name, data
        m = json.loads(data)
        edit(m)
        return name, json.dumps(m).encode()

    return change


def test_a_good_small_bundle_runs(tmp_path: Any) -> None:
    loaded = load_plan(_small_bundle(str(tmp_path / "ok.svod")))
    loaded.plan.execute()
    assert loaded.buffers["y"].tolist() == [0.0] * 4


def test_truncated_zip(tmp_path: Any) -> None:
    path = _small_bundle(str(tmp_path / "t.svod"))
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises(BundleError, match="not a readable bundle \\(truncated or corrupt zip"):
        open_bundle(path)


def test_corrupt_member_data(tmp_path: Any) -> None:
    path = _small_bundle(str(tmp_path / "c.svod"))
    _rewrite(path, lambda n, d: (n, d))  # stored, not deflated: the bytes are easy to find
    raw = bytearray(open(path, "rb").read())
    at = raw.index(b"NUMPY") + 130  # inside data/x.npy's payload
    raw[at] ^= 0xFF
    open(path, "wb").write(bytes(raw))
    with pytest.raises(BundleError, match="entry 'data/x.npy' (cannot be read|does not match its sha256)"):
        open_bundle(path)


def test_hash_mismatch_names_the_entry(tmp_path: Any) -> None:
    path = _small_bundle(str(tmp_path / "h.svod"))
    _rewrite(path, lambda n, d: (n, d[:-1] + b"\x01") if n == "data/x.npy" else (n, d))
    with pytest.raises(BundleError, match="entry 'data/x.npy' does not match its sha256 in the manifest"):
        open_bundle(path)


def test_unknown_format_version(tmp_path: Any) -> None:
    path = _small_bundle(str(tmp_path / "v.svod"))
    _rewrite(path, _manifest_edit(lambda m: m.update(svod_bundle=7)))
    with pytest.raises(BundleError, match="unknown bundle format version 7 \\(this svod_min reads 1\\)"):
        open_bundle(path)


@pytest.mark.parametrize("bad", ["../evil.npy", "/etc/passwd", "data/../../x", "a\\b", "C:/x"])
def test_entry_path_that_escapes(tmp_path: Any, bad: str) -> None:
    path = _small_bundle(str(tmp_path / "e.svod"))
    with zipfile.ZipFile(path, "a") as zf:
        info = zipfile.ZipInfo("placeholder")
        info.filename = bad  # ZipInfo would otherwise normalise some of these away
        zf.writestr(info, b"x")
    with pytest.raises(BundleError, match="escapes the bundle"):
        open_bundle(path)


def test_plan_naming_a_file_outside_the_bundle(tmp_path: Any) -> None:
    def escape(files: Dict[str, bytes], manifest: Dict[str, Any]) -> None:
        plan = json.loads(files[PLAN])
        plan["buffers"]["x"]["init"]["npy"] = "../x.npy"
        files[PLAN] = json.dumps(plan).encode()

    with pytest.raises(BundleError, match="buffers.x.init.npy names '../x.npy': the path escapes the bundle"):
        open_bundle(_small_bundle(str(tmp_path / "p.svod"), escape))


def test_declared_size_over_the_limit_zip_bomb(tmp_path: Any) -> None:
    def bomb(files: Dict[str, bytes], manifest: Dict[str, Any]) -> None:
        files["data/zeros.bin"] = bytes(64 << 20)

    path = _small_bundle(str(tmp_path / "b.svod"), bomb)
    assert os.path.getsize(path) < 1 << 20  # 64 MiB of zeros deflate to ~64 KiB
    with pytest.raises(BundleError, match="entry 'data/zeros.bin' declares 67108864 bytes; the limit is 1048576"):
        open_bundle(path, Limits(max_entry_bytes=1 << 20))
    with pytest.raises(BundleError, match="entries declare \\d+ bytes in all; the limit is 2097152"):
        open_bundle(path, Limits(max_total_bytes=2 << 20))


def test_actual_size_larger_than_declared(tmp_path: Any) -> None:
    path = _small_bundle(str(tmp_path / "a.svod"))
    raw = bytearray(open(path, "rb").read())
    # lower data/x.npy's uncompressed size in its central directory record: the stream then holds more
    name_at = raw.rindex(b"data/x.npy")
    record = raw.rindex(b"PK\x01\x02", 0, name_at)
    size = int.from_bytes(raw[record + 24 : record + 28], "little")
    raw[record + 24 : record + 28] = (size - 8).to_bytes(4, "little")
    open(path, "wb").write(bytes(raw))
    with pytest.raises(BundleError, match="entry 'data/x.npy'"):
        open_bundle(path)


def test_missing_data_file(tmp_path: Any) -> None:
    def drop(files: Dict[str, bytes], manifest: Dict[str, Any]) -> None:
        del files["data/x.npy"]

    with pytest.raises(
        BundleError, match="plan.json buffers.x.init.npy names 'data/x.npy', which the bundle does not hold"
    ):
        open_bundle(_small_bundle(str(tmp_path / "m.svod"), drop))


def test_entry_missing_from_the_zip_or_the_manifest(tmp_path: Any) -> None:
    path = _small_bundle(str(tmp_path / "l.svod"))
    _rewrite(path, lambda n, d: None if n == "data/x.npy" else (n, d))
    with pytest.raises(BundleError, match="entry 'data/x.npy' is listed in the manifest but missing from the bundle"):
        open_bundle(path)
    path = _small_bundle(str(tmp_path / "u.svod"))
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("extra.bin", b"surprise")
    with pytest.raises(BundleError, match="entry 'extra.bin' is not listed in the manifest"):
        open_bundle(path)


@needs_cc
def test_object_whose_machine_does_not_match_its_target(bundles: Dict[str, str], tmp_path: Any) -> None:
    bundle = open_bundle(bundles["mlp"])
    entry, meta = next((e, m) for e, m in bundle.manifest["objects"].items() if m["target"] == "x86_64")
    files = {n: d for n, d in bundle.entries.items()}
    plan = json.loads(files[PLAN])
    for o in plan["kernels"][meta["kernel"]]["objects"]:
        if o["file"] == entry:
            o["target"] = "aarch64"  # an x86_64 object relabelled
            o["file"] = entry.replace("x86_64.o", "aarch64-relabelled.o")
            files[o["file"]] = files[entry]
    files[PLAN] = json.dumps(plan).encode()
    path = str(tmp_path / "relabelled.svod")
    write_bundle(path, files, {"svod_min": "test"})
    with pytest.raises(
        BundleError,
        match="aarch64-relabelled.o' \\(kernel %s, target aarch64\\): ELF machine 62 \\(x86_64\\) "
        "does not match target aarch64" % meta["kernel"],
    ):
        open_bundle(path)


def test_the_command_line_exits_2_for_a_bad_bundle(tmp_path: Any) -> None:
    path = str(tmp_path / "junk.svod")
    open(path, "wb").write(b"PK\x03\x04 not really a zip")
    proc = subprocess.run([sys.executable, "-m", "svod_min", "run", path], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "junk.svod: not a readable bundle" in proc.stderr, proc.stderr


def test_not_a_bundle_error_is_a_bundle_error_not_a_crash(tmp_path: Any) -> None:
    with pytest.raises(BundleError, match="no such bundle"):
        open_bundle(str(tmp_path / "absent.svod"))
    assert BundleError.exit_code == 2 and NoUsableTargetError.exit_code == 3


# --- aarch64 objects against a real linker -------------------------------------------------


@needs_cc
@pytest.mark.oracle
def test_every_aarch64_object_matches_a_real_linker(bundles: Dict[str, str], tmp_path: Any) -> None:
    if not HAVE_CLANG or shutil.which("ld.lld") is None:
        pytest.skip("needs clang (aarch64 objects) and ld.lld (the oracle)")
    from support import oracle as osup

    from svod_min.jit_loader import relocate

    checked = 0
    for name in ("mlp", "convnet", "attention"):
        bundle = open_bundle(bundles[name])
        for entry, meta in sorted(bundle.manifest["objects"].items()):
            if meta["target"] != "aarch64":
                continue
            obj = bundle.entries[entry]
            info = osup.parse_object(obj)
            assert info.arch == "aarch64"
            ext = {n: 0x50000000 + 0x7F0 + i * 0x1000 for i, n in enumerate(sorted(info.externals))}
            image = relocate(obj, 0x40000000, lambda n: ext[n])
            sec_addr = {s: image.sections[s] for s in info.sections}
            ours = osup.Memory([(image.base, image.image)], "ours")
            for relax in (True, False):
                tag = "%s-%s-%d" % (name, meta["kernel"], relax)
                linked = osup.link_with_lld(obj, info, sec_addr, ext, str(tmp_path), tag, relax=relax)
                result = osup.compare(info, ours, image.symbols, sec_addr, ext, linked, ext)
                assert result.failures() == [], (entry, result.failures())
            checked += 1
    assert checked >= 10, checked


@needs_cc
def test_objects_for_the_other_architectures_are_built_and_relocate(tmp_path: Any) -> None:
    """riscv64 and ppc64le with clang 14; loongarch64 needs a newer clang and is skipped with the reason."""
    if not HAVE_CLANG:
        pytest.skip("cross-architecture objects need clang")
    notes: List[str] = []
    report = build_bundle(
        PLANS["mlp"],
        str(tmp_path / "x.svod"),
        targets=["riscv64", "ppc64le", "loongarch64"],
        compiler="clang",
        progress=notes.append,
    )
    assert {"riscv64", "ppc64le"} <= set(report.built)
    if "loongarch64" not in report.built:
        assert "cannot target it" in report.skipped["loongarch64"] and any("loongarch64" in n for n in notes)
    bundle = open_bundle(report.path)
    machines = {"riscv64": 243, "ppc64le": 21, "loongarch64": 258}
    for entry, meta in bundle.manifest["objects"].items():
        assert int.from_bytes(bundle.entries[entry][18:20], "little") == machines[meta["target"]], entry


def test_weights_over_the_threshold_are_stored_and_the_rest_deflated(tmp_path: Any) -> None:
    """A weight array is stored (a load reads it without inflating); small arrays and everything else deflate."""
    big, small = bytes(STORE_ABOVE + 1), bytes(STORE_ABOVE)
    path = str(tmp_path / "z.svod")
    write_fixed_zip(path, [("data/big.npy", big), ("data/small.npy", small), ("kernels/k.o", big)])
    with zipfile.ZipFile(path) as zf:
        kinds = {info.filename: info.compress_type for info in zf.infolist()}
        assert zf.read("data/big.npy") == big
    assert kinds == {
        "data/big.npy": zipfile.ZIP_STORED,
        "data/small.npy": zipfile.ZIP_DEFLATED,
        "kernels/k.o": zipfile.ZIP_DEFLATED,
    }


def test_an_entry_with_a_long_extra_field_loads(tmp_path: Any) -> None:
    # entries are read from their local headers: an extra field longer than the one read guesses is skipped
    path = _small_bundle(str(tmp_path / "x.svod"))
    with zipfile.ZipFile(path) as zf:
        members = [(i.filename, zf.read(i.filename)) for i in zf.infolist()]
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members:
            info = zipfile.ZipInfo(name)
            info.extra = b"\xfe\xca" + (300).to_bytes(2, "little") + bytes(300)  # an unknown header id, 300 bytes
            zf.writestr(info, data)
    loaded = load_plan(path)
    loaded.plan.execute()
    assert loaded.buffers["y"].tolist() == [0.0] * 4


def test_a_local_header_that_names_another_entry_is_refused(tmp_path: Any) -> None:
    path = _small_bundle(str(tmp_path / "n.svod"))
    _rewrite(path, lambda n, d: (n, d))  # stored: the names are plain in the file
    with zipfile.ZipFile(path) as zf:
        at = zf.getinfo("data/x.npy").header_offset + 30  # the local header's copy of the name
    raw = bytearray(open(path, "rb").read())
    assert raw[at : at + len(b"data/x.npy")] == b"data/x.npy"
    raw[at : at + len(b"data/x.npy")] = b"data/y.npy"
    open(path, "wb").write(bytes(raw))
    with pytest.raises(BundleError, match="entry 'data/x.npy' cannot be read \\(the local header names"):
        open_bundle(path)
