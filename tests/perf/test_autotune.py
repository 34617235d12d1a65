"""The autotuner (svod_min.perf.autotune): candidates, verification, the store, get(shape=...), `tune` CLI.

Small shapes and two timing rounds keep it fast; nothing asserts on
timings. Every test has its own object cache directory, so its own
``tuning.json`` beside it.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from typing import Any, Dict, List

import pytest
from conftest import needs_cc

from svod_min import kernels
from svod_min.__main__ import EXIT_BAD_INPUT, EXIT_OK, main
from svod_min.error import ExecutionError, KernelArgumentError
from svod_min.kernels import KernelParamError, LibraryKernel, tuning
from svod_min.perf import autotune, autotune_trials
from svod_min.perf.benchmark import BenchmarkConfig

SHAPE = {"M": 64, "N": 64, "K": 64}
FAST = BenchmarkConfig(warmup_runs=0, timing_runs=2)
needs_prebuilt = pytest.mark.skipif(kernels.host_variant() is None, reason="no prebuilt variant fits this host")


@pytest.fixture(autouse=True)
def store(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """A private cache root per test: objects/ and the tuning store lie in it."""
    monkeypatch.setenv("SVOD_OBJECT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(autotune.TUNING_FILE_ENV, raising=False)
    return str(tmp_path / "tuning.json")


def _tune(**kw: Any) -> autotune.TuneResult:
    kw.setdefault("shape", SHAPE)
    kw.setdefault("config", FAST)
    return autotune.tune("matmul", **kw)


def _tile(k: LibraryKernel) -> Dict[str, Any]:
    return {p: k.params[p] for p in ("ku", "mr", "nr")}


# --- candidates ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_candidates_enumerate_the_catalogue_default_first(dtype: str) -> None:
    cands = autotune.candidate_params("matmul", dtype)
    instances = [
        {k: v for k, v in i.items() if k != "dtype"}
        for i in kernels.catalogue()["matmul"]["instances"]
        if i["dtype"] == dtype
    ]
    assert sorted(map(str, cands)) == sorted(map(str, instances))
    if kernels.host_variant() is not None:
        assert cands[0] == _tile(kernels.get("matmul", dtype=dtype))


def test_tuning_params_exclude_dtypes_and_structural_params() -> None:
    assert autotune.tuning_params("matmul") == ["ku", "mr", "nr"]
    assert autotune.tuning_params("transpose") == ["tile"]
    assert autotune.tuning_params("conv2d") == []  # bias adds a buffer: not a tuning param
    assert autotune.tuning_params("cast") == []


def test_bad_shapes_and_candidates_are_param_errors() -> None:
    with pytest.raises(KernelParamError, match="exactly the variables"):
        _tune(shape={"M": 4, "N": 4})
    with pytest.raises(KernelArgumentError, match="outside"):
        _tune(shape={"M": 0, "N": 4, "K": 4})
    with pytest.raises(KernelParamError, match="tuning params"):
        _tune(candidates=[{"bias": True}])
    with pytest.raises(KernelParamError, match="shape"):
        kernels.get("matmul", shape=[64, 64, 64])


# --- tune, store, get --------------------------------------------------------------------------


def test_tune_verifies_times_and_stores_the_winner(store: str) -> None:
    lines: List[str] = []
    result = _tune(progress=lines.append)
    ok = [r for r in result.rows if r.status == "ok"]
    assert ok and all(r.min_s and r.median_s and r.gflops for r in ok)
    chosen = [r for r in result.rows if r.chosen]
    assert len(chosen) == 1 and chosen[0].params == result.best_params
    assert chosen[0].min_s == min(r.min_s for r in ok)
    assert len(result.table) == len(result.rows) and all(len(t) == 4 for t in result.table)
    assert sum("verified" in ln for ln in lines) == len(ok) and any("GFLOP/s" in ln for ln in lines)
    assert result.stored and result.store_path == store
    doc = json.load(open(store))
    (entry,) = doc["entries"].values()
    assert entry["params"] == result.best_params and entry["shape"] == SHAPE
    assert set(entry["machine"]) == {"arch", "cpu", "variant", "svod_min"}
    assert autotune.best_params("matmul", "float32", {"K": 64, "N": 64, "M": 64}) == result.best_params


@needs_cc
def test_get_uses_the_stored_winner_only_when_asked() -> None:
    default = kernels.get("matmul", dtype="float32")
    result = _tune(candidates=[{"mr": 8, "nr": 8, "ku": 4}])
    assert result.best_params == {"ku": 4, "mr": 8, "nr": 8}
    tuned = kernels.get("matmul", dtype="float32", shape=SHAPE)
    assert _tile(tuned) == result.best_params and tuned.entry_point == "svod_matmul_f32_8x8"
    assert kernels.get("matmul", dtype="float32") is default  # no shape: as before
    assert kernels.get("matmul", dtype="float32", shape={"M": 65, "N": 64, "K": 64}) is default  # not tuned
    assert kernels.get("matmul", dtype="float32", shape=SHAPE, mr=6, nr=16).entry_point == "svod_matmul_f32_6x16"
    assert kernels.get("matmul", dtype="float64", shape=SHAPE).params["dtype"] == "float64"  # other dtype


def test_another_machine_does_not_see_the_result(monkeypatch: pytest.MonkeyPatch) -> None:
    result = _tune()
    other = dict(autotune.machine_fingerprint(), cpu="Some Other CPU")
    monkeypatch.setattr(tuning, "machine_fingerprint", lambda *_: other)  # the store reads it
    assert result.stored and autotune.best_params("matmul", "float32", SHAPE) is None


def test_stale_entry_falls_back_to_the_default(store: str) -> None:
    result = _tune()
    doc = json.load(open(store))
    for entry in doc["entries"].values():
        entry["params"] = {"ku": 4, "mr": 5, "nr": 5}  # no such instance (any more)
    with open(store, "w") as fh:
        json.dump(doc, fh)
    assert result.stored and autotune.best_params("matmul", "float32", SHAPE) == {"ku": 4, "mr": 5, "nr": 5}
    assert kernels.get("matmul", dtype="float32", shape=SHAPE) is kernels.get("matmul", dtype="float32")


# --- wrong or unavailable candidates -------------------------------------------------------------


class _Corrupting:
    """A program that runs the real kernel, then overwrites one element of its output."""

    def __init__(self, program: Any) -> None:
        self._program, self.device = program, program.device

    def bind(self, addrs: List[int], vals: List[int], **kw: Any) -> Any:
        call = self._program.bind(addrs, vals, **kw)

        def broken() -> None:
            call()
            ctypes.memset(addrs[0] + 5 * 4, 0, 4)  # c[5] = 0.0

        return broken


def _break(monkeypatch: pytest.MonkeyPatch, victim: Dict[str, Any]) -> None:
    real = autotune._load

    def load(name: str, dtype: str, params: Dict[str, Any], device: Any) -> Any:
        k = real(name, dtype, params, device)
        return LibraryKernel(k.sig, _Corrupting(k.program), k.prebuilt, k.variant) if params == victim else k

    monkeypatch.setattr(autotune, "_load", load)


@needs_cc
@pytest.mark.parametrize("reference", ["pure", "majority"])
def test_a_wrong_candidate_is_dropped_and_never_chosen(monkeypatch: pytest.MonkeyPatch, reference: str) -> None:
    cands = autotune.candidate_params("matmul", "float32")
    victim = cands[0] if reference == "majority" else cands[-1]  # majority vote: even the default can lose
    if reference == "majority":
        monkeypatch.setattr(autotune_trials, "REFERENCE_MAX_WORK", 0)
    _break(monkeypatch, victim)
    lines: List[str] = []
    result = _tune(progress=lines.append)
    (bad,) = [r for r in result.rows if r.params == victim]
    assert bad.status.startswith("wrong result") and "c:" in bad.status
    assert bad.min_s is None and not bad.chosen and result.best_params != victim
    assert [r for r in result.rows if r.status == "ok"] and any("wrong result" in ln for ln in lines)
    assert autotune.best_params("matmul", "float32", SHAPE) == result.best_params


@needs_prebuilt
def test_all_wrong_is_an_error_and_nothing_is_stored(monkeypatch: pytest.MonkeyPatch, store: str) -> None:
    first = autotune.candidate_params("matmul", "float32")[0]
    _break(monkeypatch, first)
    with pytest.raises(ExecutionError, match="no candidate"):
        _tune(candidates=[first])
    assert not os.path.exists(store)


@needs_prebuilt
def test_without_a_compiler_only_prebuilt_candidates_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(autotune, "have_compiler", lambda: False)
    result = _tune()
    assert result.best_params and all(r.prebuilt for r in result.rows if r.status == "ok")
    skipped = [r for r in result.rows if not r.prebuilt]
    assert all(r.status.startswith("skipped") and r.min_s is None for r in skipped)


# --- a store that cannot be used ------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe\x00", b"[1, 2]", b'{"format": 99, "entries": {}}'])
def test_corrupt_store_is_ignored_then_replaced(store: str, content: bytes) -> None:
    with open(store, "wb") as fh:
        fh.write(content)
    assert autotune.best_params("matmul", "float32", SHAPE) is None
    assert kernels.get("matmul", dtype="float32", shape=SHAPE) is kernels.get("matmul", dtype="float32")
    result = _tune()
    assert result.stored and autotune.best_params("matmul", "float32", SHAPE) == result.best_params


def test_unwritable_store_is_ignored(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    os.makedirs(store)  # a directory where the file should be: cannot be read or replaced
    result = _tune()
    assert not result.stored and result.best_params
    assert autotune.best_params("matmul", "float32", SHAPE) is None
    os.rmdir(store)

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tuning.tempfile, "mkstemp", refuse)  # a read-only directory, even for root
    assert not _tune().stored and not os.path.exists(store)


def test_read_only_directory_is_ignored(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories")
    ro = tmp_path / "ro"
    ro.mkdir()
    monkeypatch.setenv(autotune.TUNING_FILE_ENV, str(ro / "tuning.json"))
    ro.chmod(0o500)
    try:
        assert not _tune().stored
    finally:
        ro.chmod(0o700)


# --- CLI --------------------------------------------------------------------------------------------


def test_cli_tune_prints_progress_and_table(capsys: pytest.CaptureFixture, store: str) -> None:
    assert main(["tune", "matmul", "--shape", "M=64,N=64,K=64", "--runs", "2", "--warmup", "0"]) == EXIT_OK
    out, err = capsys.readouterr()
    header = next(ln for ln in out.splitlines() if ln.startswith("params"))
    for column in ("min µs", "median µs", "GFLOP/s", "chosen"):
        assert column in header
    assert sum(ln.rstrip().endswith("*") for ln in out.splitlines()) == 1
    assert "stored in %s" % store in out
    n = len(autotune.candidate_params("matmul", "float32"))
    assert sum(ln.startswith("[") and "verified" in ln or "skipped" in ln for ln in err.splitlines()) == n


def test_cli_tune_json(capsys: pytest.CaptureFixture) -> None:
    assert (
        main(["tune", "matmul", "--dtype", "float64", "--shape", "M=32,N=48,K=16", "--runs", "1", "--json"]) == EXIT_OK
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["kernel"] == "matmul" and doc["dtype"] == "float64" and doc["shape"] == {"M": 32, "N": 48, "K": 16}
    assert doc["stored"] is True and [r["params"] for r in doc["rows"] if r["chosen"]] == [doc["best_params"]]


@pytest.mark.parametrize(
    "args, message",
    [
        (["tune", "matmull", "--shape", "M=4,N=4,K=4"], "did you mean matmul"),
        (["tune", "matmul", "--shape", "M=4,N=4"], "exactly the variables"),
        (["tune", "matmul", "--shape", "M=four,N=4,K=4"], "--shape"),
        (["tune", "matmul", "--shape", "M=4,N=4,K=4", "--dtype", "int8"], "dtype"),
        (["tune", "matmul", "--shape", "M=4,N=4,K=4", "--runs", "0"], "--runs"),
    ],
)
def test_cli_tune_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture, args: List[str], message: str) -> None:
    assert main(args) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and len(err.splitlines()) == 1


def test_cli_tune_as_a_program() -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "svod_min", "tune", "nope", "--shape", "n=1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == EXIT_BAD_INPUT and bad.stderr.count("\n") == 1
    good = subprocess.run(
        [sys.executable, "-m", "svod_min", "tune", "transpose", "--shape", "rows=33,cols=17", "--runs", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert good.returncode == EXIT_OK, good.stderr
    assert "tile=32" in good.stdout and "[1/1]" in good.stderr


def test_tune_refuses_a_shape_whose_buffers_exceed_the_limit_before_allocating(monkeypatch: pytest.MonkeyPatch) -> None:
    # 20000^2 float32 twice (in and out) is 3.2 GB: it used to die with MemoryError or the OOM killer
    monkeypatch.setattr(autotune_trials, "MAX_TUNE_BYTES", 1 << 20)
    with pytest.raises(KernelParamError, match=r"needs 3200000000 bytes of buffers; tuning is limited to 1048576"):
        autotune.tune("transpose", shape={"rows": 20000, "cols": 20000}, store=False)


# --- layering: the store lives in kernels/, the tuner uses public names only ---------------------

_SVOD = os.path.dirname(os.path.dirname(os.path.abspath(autotune.__file__)))


def _imports(path: str) -> List[Any]:
    """``(module, names)`` of every import in a source file, function-level ones included."""
    import ast

    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out.append(("." * node.level + (node.module or ""), [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.append(("", [a.name for a in node.names]))
    return out


def test_the_kernel_library_never_imports_the_tuner() -> None:
    folder = os.path.join(_SVOD, "kernels")
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            for module, names in _imports(os.path.join(folder, name)):
                assert "autotune" not in module and not any("autotune" in n for n in names), (name, module)
                assert "benchmark" not in module, (name, module)
    code = (
        "import sys; from svod_min import kernels; "
        "kernels.get('matmul', dtype='float32', shape={'M': 8, 'N': 8, 'K': 8}); "
        "print(sorted(m for m in sys.modules if 'autotune' in m or m.endswith('benchmark')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("source", ["perf/autotune.py", "perf/autotune_trials.py"])
def test_the_tuner_uses_only_public_names(source: str) -> None:
    for module, names in _imports(os.path.join(_SVOD, source)):
        if module == "__future__":
            continue
        parts = [p for p in module.lstrip(".").split(".") if p]
        assert not any(p.startswith("_") for p in parts), module
        assert not any(n.startswith("_") for n in names), (module, names)


def test_the_store_names_are_the_same_objects_in_both_places() -> None:
    for name in ("best_params", "tuned_params", "store_path", "machine_fingerprint", "TUNING_FILE_ENV", "HOST"):
        assert getattr(autotune, name) is getattr(tuning, name), name


def test_the_store_lies_under_the_cache_root_beside_the_objects(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from svod_min.cache.disk import default_cache_dir
    from svod_min.config import cache_root

    assert autotune.store_path() == store and os.path.dirname(store) == cache_root()
    assert os.path.dirname(default_cache_dir() or "") == cache_root()
    other = os.path.join(os.path.dirname(store), "elsewhere", "t.json")
    monkeypatch.setenv(autotune.TUNING_FILE_ENV, other)  # an explicit file wins
    assert autotune.store_path() == other and _tune().stored and os.path.exists(other) and not os.path.exists(store)
