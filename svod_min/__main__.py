"""Command line: ``python -m svod_min run`` and ``python -m svod_min info``.

Exit codes: 0 ok, 1 verification failed, 2 bad input, 3 device or compile
failure (each error class's ``exit_code``, see :mod:`svod_min.error`). Errors
are printed to stderr as one line; ``--debug`` shows the traceback.

Each command imports the modules it needs when it runs (the plan runtime,
the devices, tinygrad, numpy), so ``--help`` and ``info`` start fast and a
command never pays for another's imports.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional

if TYPE_CHECKING:
    from .planfile.load import LoadedPlan

from .error import EXIT_BAD_INPUT, EXIT_DEVICE, EXIT_OK, EXIT_VERIFY, CompilationError, PlanError, SvodError


def _print_traceback() -> None:
    import traceback  # here: only --debug's error path prints one, so a start does not import it

    traceback.print_exc()


def exit_code_for(exc: BaseException) -> int:
    """The documented exit code of an error: its class's ``exit_code``; any other exception is bad input."""
    return exc.exit_code if isinstance(exc, SvodError) else EXIT_BAD_INPUT


def _parse_vars(items: List[str]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise PlanError("--var %r: expected NAME=INT" % item)
        try:
            out[name.strip()] = int(value, 0)
        except ValueError:
            raise PlanError("--var %r: %r is not an integer" % (item, value)) from None
    return out


def _load(args: argparse.Namespace, var_values: Dict[str, int]) -> "LoadedPlan":
    from .planfile.load import load_plan
    from .planfile.memory_budget import run_memory

    if args.plan is None:
        from .planfile.default_plan import BATCH, default_plan_document  # here: a bundle's run needs neither

        doc = default_plan_document(rows=var_values.get("rows", BATCH))
        return load_plan(doc, device=args.device, var_values=var_values, **run_memory(args.max_memory, args.input))
    return load_plan(
        args.plan,
        device=args.device,
        var_values=var_values,
        trusted_keys=args.trusted_keys,
        **run_memory(args.max_memory, args.input),
    )


def _timed_runs(plan: Any, repeat: int, run: Any = None) -> List[float]:
    """``repeat`` timed runs of ``run`` (default: ``plan.execute``)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        (run or plan.execute)()
        plan.synchronize()  # a GPU plan returns once its work is queued
        times.append(time.perf_counter() - start)
    return times


def _table(profiles: List[Any]) -> str:
    from .profiler import profile_table  # here: a cold start (--once) profiles nothing

    return profile_table(profiles)


def _median(times: List[float]) -> float:
    if len(times) == 1:  # a cold start (--once) times one run: it need not import statistics
        return times[0]
    import statistics

    return statistics.median(times)


def _save_outputs(loaded: "LoadedPlan", directory: str) -> List[str]:
    from .npy import write_npy
    from .planfile.feeds import output_payload

    os.makedirs(directory, exist_ok=True)
    written = []
    for name, buf in _saved_outputs(loaded).items():
        path = os.path.join(directory, _file_name(name) + ".npy")
        write_npy(path, buf.dtype, *output_payload(loaded, name, buf))  # from the buffer itself: no copy
        written.append(path)
    return written


def _saved_outputs(loaded: "LoadedPlan") -> Dict[str, Any]:
    """Output buffers by name; a name with a "." or ".." part is refused (it would leave --save's folder)."""
    outputs = {id(b) for b in loaded.plan.output_buffers()}
    chosen = {name: buf for name, buf in loaded.buffers.items() if id(buf) in outputs}
    for name in chosen:
        parts = name.replace("\\", "/").split("/")
        if not name or "\0" in name or any(p in (".", "..") for p in parts):
            raise PlanError("--save: output buffer %r is not a plain file name" % name)
    return chosen


def _file_name(name: str) -> str:
    """An output's file name under --save: path separators (an ONNX name such as gpu_0/softmax_1) become '_'."""
    return name.replace("/", "_").replace("\\", "_")


def _writing(path: str, option: str, write: Any) -> Any:
    """Run ``write``; an OS error is the user's bad path (exit 2), not an internal error."""
    try:
        return write()
    except OSError as exc:
        raise PlanError("%s %s: cannot write: %s" % (option, path, exc.strerror or exc)) from None


def _cmd_run(args: argparse.Namespace) -> int:
    from .planfile.binding import binding_line
    from .planfile.feeds import replace_inputs

    if args.repeat < 1:
        raise PlanError("--repeat must be >= 1, got %d" % args.repeat)
    if args.once and (args.repeat != 1 or args.profile or args.trace):
        raise PlanError("--once stops after the first run: --repeat, --profile and --trace need further runs")
    given = _parse_vars(args.var)
    loaded = _load(args, given)
    plan = loaded.plan
    if args.save:
        _saved_outputs(loaded)  # refused before anything runs
    replaced, bound = replace_inputs(loaded, args.input, given)
    if bound and not args.json:
        print(binding_line(bound))
    # the first run from the initial state is the one verified; a binding sets the variables for every run
    first = _timed_runs(plan, 1, (lambda: loaded.execute_bound(bound)) if bound else None)
    checks = [] if replaced else loaded.verify()
    saved = _writing(args.save, "--save", lambda: _save_outputs(loaded, args.save)) if args.save else []
    # later runs are warm: they profile and time (--once: none, the command ends at the first output)
    profiles = [] if args.once else plan.execute_profiled()
    times = first if args.once else _timed_runs(plan, args.repeat)
    if args.trace:
        from .profiler import write_chrome_trace

        _writing(args.trace, "--trace", lambda: write_chrome_trace(profiles, args.trace))
    report = {
        "plan": args.plan or "<default MLP>",
        "description": loaded.description,
        "device": str(getattr(plan.device, "spec", plan.device)),
        "vars": loaded.defaults,
        "ops": len(plan.prepared_ops()),
        "memory": dict(loaded.memory),
        # null, not Infinity/NaN: strict JSON has no such numbers (a NaN output gives an infinite error)
        "verify": [
            {"buffer": b, "ok": ok, "max_abs_error": err if math.isfinite(err) else None} for b, ok, err in checks
        ],
        "time_s": {"min": min(times), "median": _median(times), "runs": len(times)},
        "profile": [p.to_dict() for p in profiles],
        "saved": saved,
        "inputs_replaced": replaced,
        "binding": bound,
        # the expectations were recorded at the defaults: another binding computes another tensor
        "binding_differs": {n: v for n, v in bound.items() if v != loaded.defaults.get(n)},
    }
    if args.json:
        print(json.dumps(report, indent=1, allow_nan=False))
    else:
        _print_report(report, _table(profiles) if profiles and (args.profile or args.plan is None) else None)
    failed = [c["buffer"] for c in report["verify"] if not c["ok"]]
    if failed:
        print("verification failed: %s" % ", ".join(failed), file=sys.stderr)
        return EXIT_VERIFY
    return EXIT_OK


def _print_report(report: Dict[str, Any], table: Optional[str]) -> None:
    print("plan: %s%s" % (report["plan"], " (%s)" % report["description"] if report["description"] else ""))
    print("device: %s   ops: %d   vars: %s" % (report["device"], report["ops"], report["vars"] or "-"))
    mem = report["memory"]
    print("memory: weights %d bytes, arena peak live %d bytes" % (mem["weights_bytes"], mem["arena_peak_live_bytes"]))
    if table:
        print(table)
    t = report["time_s"]
    print("total: min %.1f µs, median %.1f µs over %d run(s)" % (t["min"] * 1e6, t["median"] * 1e6, t["runs"]))
    for check in report["verify"]:
        err = check["max_abs_error"]
        print(
            "verify %s: %s (max |err| %s)"
            % (check["buffer"], "ok" if check["ok"] else "FAILED", "%.3g" % err if err is not None else "inf")
        )
    if report["binding_differs"]:
        differs = sorted(report["binding_differs"].items())
        print(
            "verify: skipped: the expectations were recorded at %s, this run binds %s"
            % (" ".join("%s=%d" % (n, report["vars"][n]) for n, _ in differs), " ".join("%s=%d" % kv for kv in differs))
        )
    elif report["inputs_replaced"]:
        print(
            "verify: skipped: inputs replaced (%s); the recorded expectations describe the example inputs"
            % ", ".join(report["inputs_replaced"])
        )
    elif not report["verify"]:
        print('verify: nothing to check (the plan has no "expect" section)')
    for path in report["saved"]:
        print("saved %s" % path)


def _cmd_selfcheck(args: argparse.Namespace) -> int:
    from .devices.registry import DEVICE_FACTORIES
    from .kernels.selfcheck import compile_skipped, format_results, run_selfcheck, skip_note

    device = DEVICE_FACTORIES.device(args.device)
    skipped = compile_skipped(device)  # no compiler here: the prebuilt library is checked instead, and we say so
    results = run_selfcheck(device)
    note = skip_note(skipped, results) if skipped else None
    if args.json:
        print(json.dumps([r.__dict__ for r in results], indent=1))
        if note:  # stdout stays one JSON document
            print(note, file=sys.stderr)
    else:
        print(format_results(results, note))
    return EXIT_OK if all(r.ok for r in results) else EXIT_VERIFY


def _cmd_bench(args: argparse.Namespace) -> int:
    from .perf.bench_suite import format_table, run_suite

    rows = run_suite(args.bench_dir, quick=args.quick, only=args.only or None)
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k != "source"} for r in rows], indent=1))
    else:
        print(format_table(rows))
    return EXIT_OK


def _number(text: str) -> Any:
    try:
        return int(text, 0)
    except ValueError:
        return float(text)


def _parse_shape(text: str) -> Dict[str, Any]:
    """``M=256,N=256,K=256`` -> ``{"M": 256, ...}`` (floats for float variables; PlanError: exit 2)."""
    shape: Dict[str, Any] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError(item)
            shape[name.strip()] = _number(value.strip())
        except ValueError:
            raise PlanError("--shape %r: expected NAME=NUMBER[,NAME=NUMBER...]" % text) from None
    return shape


def _cmd_tune(args: argparse.Namespace) -> int:
    from .perf.autotune import format_table, tune
    from .perf.benchmark import BenchmarkConfig

    if args.runs < 1 or args.warmup < 0:
        raise PlanError("--runs must be >= 1 and --warmup >= 0")
    config = BenchmarkConfig(warmup_runs=args.warmup, timing_runs=args.runs)
    result = tune(
        args.kernel,
        dtype=args.dtype,
        shape=_parse_shape(args.shape),
        config=config,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(json.dumps(result.to_dict(), indent=1) if args.json else format_table(result))
    return EXIT_OK


def _library_variant() -> str:
    """Which prebuilt library object this host loads (``SVOD_KERNELS_VARIANT`` may name a wrong one)."""
    from .error import KernelParamError
    from .kernels.lookup import host_variant

    try:
        variant = host_variant()
    except KernelParamError as exc:
        return "unusable: %s" % exc
    return "prebuilt %s" % variant if variant else "compiled on demand (no prebuilt object fits this host)"


def info_lines() -> List[str]:
    """What ``info`` prints: devices, compilers, W^X mode, cache."""
    from .cache.kernel_cache import object_cache
    from .compiler import clang
    from .devices.registry import DEVICE_FACTORIES
    from .jit_loader import wx_mode

    lines = ["devices: %s" % ", ".join(DEVICE_FACTORIES.available_kinds())]
    compilers = clang.available_compilers()
    for info in compilers:
        lines.append("compiler: %s %s (%s) at %s" % (info.family, info.version, info.target, info.path))
    if not compilers:
        lines.append("compiler: none found (inline C cannot be compiled)")
    lines.append("cpu backend: %s" % clang.CpuBackend.from_env().value)
    lines.append("host arch: %s" % clang.host_arch())
    from .compiler.targets import host_target

    lines.append(
        "host target: %s (the objects a model bundle loads here)" % (host_target() or "none known for this arch")
    )
    lines.append("kernel library: %s" % _library_variant())
    lines.append("W^X mode: %s (executable memory is never writable)" % wx_mode())
    cache = object_cache()
    if cache.enabled:
        lines.append(
            "object cache: %s (%d entries, %d bytes)" % (cache.directory, len(cache.entries()), cache.size_bytes())
        )
    else:
        lines.append("object cache: disabled")
    lines.append("threads: %s" % os.environ.get("SVOD_THREADS", "default (%d)" % (os.cpu_count() or 1)))
    from .devices.cuda import info_lines as cuda_info_lines

    lines += cuda_info_lines()
    return lines


def _cmd_export_tinygrad(args: argparse.Namespace) -> int:
    os.environ.setdefault("DEV", "CPU")  # before tinygrad is imported: the schedule must be the CPU's C
    from .interop.tinygrad import export_tinygrad, load_target
    from .npy import read_npy
    from .planfile.load import load_plan

    inputs: Dict[str, Any] = {}
    for item in args.input:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise PlanError("--input %r: expected NAME=FILE.npy" % item)
        inputs[name] = _npy_to_numpy(read_npy(path))
    result = export_tinygrad(
        load_target(args.target),
        args.out_dir,
        inputs=inputs,
        rtol=args.rtol,
        atol=args.atol,
        flags=args.flag,
        beam=args.beam,
    )
    print(
        "wrote %s: %d kernels, %d ops, vars %s"
        % (result.plan_path, result.kernels, result.ops, result.variables or "-")
    )
    search = "BEAM=%d search and compile" % result.beam if result.beam else "compile (no BEAM search)"
    print("tinygrad %s: %.1f s" % (search, result.compile_seconds))
    if args.bundle:
        from .planfile.bundle_build import build_bundle

        report = build_bundle(
            result.plan_path,
            args.bundle,
            targets=args.bundle_targets or None,
            progress=lambda line: print(line, file=sys.stderr),
        )
        print("wrote %s: targets %s" % (report.path, ", ".join(report.built)))
    if args.no_verify:
        return EXIT_OK
    loaded = load_plan(args.bundle or result.plan_path)
    loaded.plan.execute()
    failed = []
    for buffer, ok, err in loaded.verify():
        print("svod_min vs tinygrad, %s: %s (max |err| %.3g)" % (buffer, "ok" if ok else "FAILED", err))
        failed += [] if ok else [buffer]
    return EXIT_VERIFY if failed else EXIT_OK


def _npy_to_numpy(parsed: Any) -> Any:
    """(dtype, shape, bytes) from svod_min's reader -> a numpy array (tinygrad needs numpy anyway)."""
    import numpy as np

    dt, shape, payload = parsed
    return np.frombuffer(payload, dtype=dt.numpy_name).reshape(shape).copy()


def _cmd_info(args: argparse.Namespace) -> int:
    if args.bundle is not None:
        from .planfile.signing import bundle_info_lines

        print("\n".join(bundle_info_lines(args.bundle)))
        return EXIT_OK
    print("\n".join(info_lines()))
    return EXIT_OK


def _cmd_build(args: argparse.Namespace) -> int:
    if args.plan is not None and _is_onnx(args.plan):
        return _build_onnx(args)
    if args.dim or args.shape or args.pin:
        raise PlanError(
            "--dim, --shape and --pin bind an ONNX model's dynamic dims and inputs; %s is a plan"
            % (args.plan or "the default plan")
        )
    from .planfile.bundle_build import build_bundle

    report = build_bundle(
        args.plan,
        args.output,
        targets=args.target or None,
        compiler=args.cc,
        progress=lambda line: print(line, file=sys.stderr),
        tune=_plan_tuner(args),
        sign=_signer(args.sign),
    )
    _print_build(report)
    return EXIT_OK


def _plan_tuner(args: argparse.Namespace) -> Any:
    """``build --tune``'s step (None without --tune): the tile of each library op timed here, at --tune-threads."""
    if args.tune_threads is not None and (args.tune_threads < 1 or not args.tune):
        raise PlanError("--tune-threads takes a positive thread count, with --tune")
    if not args.tune:
        return None
    from .perf.plan_tune import tune_plan

    def tune(doc: Dict[str, Any], progress: Any) -> Optional[Dict[str, Any]]:
        result = tune_plan(doc, progress, threads=args.tune_threads or 1)
        if result is None:
            return None
        progress("tuned %d op shape(s) for %s in %.1f s" % (len(result.ops), result.variant, result.seconds))
        return result.summary()

    return tune


def _signer(key: Optional[str]) -> Any:
    """``build --sign KEY``'s signer, the key read before the build starts (None without --sign)."""
    from .planfile.signing import signer

    return signer(key) if key else None


def _cmd_keygen(args: argparse.Namespace) -> int:
    from .planfile.signing import generate_key

    print("wrote %s (private, mode 0600) and %s.pub: key %s" % (args.output, args.output, generate_key(args.output)))
    return EXIT_OK


def _print_build(report: Any) -> None:
    library = "; %d library object(s) for variants whose prebuilt object lacks the instance" % report.library_objects
    print(
        "wrote %s: %d kernel(s) x %d target(s) = %d object(s)%s; targets %s%s"
        % (
            report.path,
            report.kernels,
            len(report.built),
            report.objects,
            library if report.library_objects else "",
            ", ".join(report.built) or "-",
            "; not built: %s" % ", ".join(report.skipped) if report.skipped else "",
        )
    )


def _is_onnx(path: str) -> bool:
    from .onnx import looks_like_onnx

    return looks_like_onnx(path)


def _build_onnx(args: argparse.Namespace) -> int:
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise PlanError(
            "%s is an ONNX model: building it needs the onnx package (pip install 'svod-min[onnx]')" % args.plan
        ) from None
    from .onnx import build_onnx

    dims = _parse_dims(args.dim)
    shapes = _parse_input_shapes(args.shape)
    pins = _parse_pins(args.pin)
    result = build_onnx(
        args.plan,
        args.output,
        targets=args.target or None,
        compiler=args.cc,
        dims=dims,
        shapes=shapes,
        expect=not args.no_expect,
        progress=lambda line: print(line, file=sys.stderr),
        tune=_plan_tuner(args),
        sign=_signer(args.sign),
        pins=pins,
    )
    _print_build(result.report)
    return EXIT_OK


def _parse_dims(items: List[str]) -> Dict[str, Any]:
    """``--dim batch=1`` (repeatable) -> {"batch": 1}; ``--dim batch=1..8`` -> a ranged dim."""
    from .onnx.frontend.ranged import parse_dim

    out: Dict[str, Any] = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError(item)
            out[name] = parse_dim(value)
        except ValueError:
            raise PlanError("--dim %r: expected NAME=N or NAME=MIN..MAX" % item) from None
    return out


def _parse_input_shapes(items: List[str]) -> Dict[str, List[Any]]:
    """``--shape input=1,3,224,224`` (repeatable; the name may hold any character but the last '='); a dim
    ``MIN..MAX`` is ranged."""
    from .onnx.frontend.ranged import parse_dim

    out: Dict[str, List[Any]] = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError(item)
            out[name] = [parse_dim(d) for d in value.split(",")] if value.strip() else []
        except ValueError:
            raise PlanError("--shape %r: expected INPUT=D0,D1,... (a dim may be MIN..MAX)" % item) from None
    return out


def _parse_pins(items: List[str]) -> Dict[str, Any]:
    """``--pin axes=0,2`` (a list of numbers: it takes the input's shape) or ``--pin axes=FILE.npy`` (an array of
    its own shape), repeatable; the name may hold any character but the last '='."""
    out: Dict[str, Any] = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        if not sep or not name:
            raise PlanError("--pin %r: expected INPUT=V0,V1,... or INPUT=FILE.npy" % item)
        if name in out:
            raise PlanError("--pin %s is given twice" % name)
        if value.endswith(".npy"):
            import numpy as np  # an ONNX build has numpy (onnx needs it)

            try:
                out[name] = np.load(value, allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise PlanError("--pin %s=%s: not a readable .npy file (%s)" % (name, value, exc)) from None
            continue
        try:
            out[name] = [_pin_number(v.strip()) for v in value.split(",")] if value.strip() else []
        except ValueError:
            raise PlanError("--pin %r: expected INPUT=V0,V1,... (numbers) or INPUT=FILE.npy" % item) from None
    return out


def _pin_number(text: str) -> Any:
    """An integer where the text is one, else a float (``nan``, ``inf`` and ``1e-3`` included)."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def _cmd_zipapp(args: argparse.Namespace) -> int:
    from .planfile.pyz import build_pyz

    size = build_pyz(args.output, python=args.python)
    print("wrote %s (%d bytes): run it with python3 %s run [PLAN.json | MODEL.svod]" % (args.output, size, args.output))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m svod_min", description="svod_min kernel runtime")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run a plan file (default: the embedded MLP plan), verify and time it")
    run.add_argument("plan", nargs="?", help="plan file (JSON, docs/plan-format.md) or model bundle (.svod)")
    run.add_argument("--device", default=None, help="device spec (CPU, CUDA:0, ...); overrides the plan's")
    run.add_argument("--var", action="append", default=[], metavar="NAME=INT", help="set a plan variable")
    run.add_argument("--repeat", type=int, default=1, help="timed runs after the first (default 1)")
    run.add_argument("--profile", action="store_true", help="print the per-op profile table")
    run.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace of the profiled run")
    run.add_argument("--save", metavar="DIR", help="write output buffers as .npy files")
    run.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="replace a plan input before the run (repeatable; shape and dtype must match)",
    )
    run.add_argument("--json", action="store_true", help="machine-readable output")
    run.add_argument(
        "--max-memory",
        metavar="SIZE",
        default=None,
        help="refuse a plan whose peak memory exceeds SIZE (512M, 2G, 1.5GiB; default: SVOD_MAX_MEMORY, "
        "else the host's available memory and cgroup room)",
    )
    run.add_argument(
        "--trusted-keys",
        metavar="DIR",
        default=None,
        help="run only bundles signed by a key in DIR (*.pub; default: SVOD_TRUSTED_KEYS, unset: no policy)",
    )
    run.add_argument(
        "--once",
        action="store_true",
        help="stop after the first run: load, replace inputs, run once (verified when the inputs are the "
        "examples), --save; no profiled or timed runs, so the command's time is a cold start",
    )
    run.set_defaults(func=_cmd_run)
    check = sub.add_parser(
        "selfcheck",
        help="compile and verify the built-in kernels (no compiler here: verify the prebuilt library kernels)",
    )
    check.add_argument("--device", default="CPU")
    check.add_argument("--json", action="store_true")
    check.set_defaults(func=_cmd_selfcheck)
    bench = sub.add_parser("bench", help="run every benchmark in bench/ and print one table")
    bench.add_argument("--json", action="store_true", help="rows as a JSON list of objects")
    bench.add_argument("--quick", action="store_true", help="fewer repetitions")
    bench.add_argument("--only", action="append", default=[], metavar="NAME", help="only bench files containing NAME")
    bench.add_argument("--bench-dir", default=None, help="where the bench_*.py files are")
    bench.set_defaults(func=_cmd_bench)
    tune = sub.add_parser("tune", help="time a kernel's tuning params for one shape; get(shape=...) uses the best")
    tune.add_argument("kernel", help="library kernel name (matmul, transpose, ...)")
    tune.add_argument("--dtype", default="float32")
    tune.add_argument("--shape", required=True, metavar="NAME=N,...", help="the kernel's variables: M=256,N=256,K=256")
    tune.add_argument("--runs", type=int, default=5, help="round-robin timing rounds (default 5)")
    tune.add_argument("--warmup", type=int, default=1, help="warm-up runs per candidate (default 1)")
    tune.add_argument("--json", action="store_true", help="machine-readable output")
    tune.set_defaults(func=_cmd_tune)
    export = sub.add_parser(
        "export-tinygrad", help="export a tinygrad CPU computation as a plan bundle (needs tinygrad)"
    )
    export.add_argument(
        "target", help="SCRIPT.py:FUNCTION or MODULE:FUNCTION; FUNCTION(**inputs) returns the output Tensor(s)"
    )
    export.add_argument("out_dir", help="directory for plan.json, kernels/, data/, expect/")
    export.add_argument(
        "--input", action="append", default=[], metavar="NAME=FILE.npy", help="a named input, passed as a keyword"
    )
    export.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance written to expect (default 1e-4)")
    export.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance written to expect (default 1e-5)")
    export.add_argument(
        "--flag", action="append", default=[], metavar="FLAG", help="extra compiler flag for every kernel"
    )
    export.add_argument(
        "--beam",
        type=int,
        default=0,
        metavar="N",
        help="run tinygrad's BEAM search of width N on every kernel at export (build time only; "
        "the search time is printed; default 0: no search)",
    )
    export.add_argument("--no-verify", action="store_true", help="do not run the written plan with svod_min afterwards")
    export.set_defaults(func=_cmd_export_tinygrad)
    export.add_argument("--bundle", metavar="MODEL.svod", help="also build a model bundle of the written plan")
    export.add_argument(
        "--target",
        dest="bundle_targets",
        action="append",
        default=[],
        metavar="T",
        help="bundle target (repeatable; default: all)",
    )
    build = sub.add_parser(
        "build", help="compile a plan's (or an ONNX model's) kernels for every target into one bundle (MODEL.svod)"
    )
    build.add_argument("plan", nargs="?", help="plan file or ONNX model (default: the embedded MLP plan)")
    build.add_argument("-o", "--output", required=True, metavar="MODEL.svod", help="the bundle to write")
    build.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="T",
        help="x86_64, x86_64-v3, x86_64-v4, aarch64 (repeatable; default: all)",
    )
    build.add_argument("--cc", default=None, help="compiler to build with (default: SVOD_CC, clang, gcc)")
    build.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=N",
        help="ONNX: bind a dynamic dim by name (repeatable); NAME=MIN..MAX ranges the batch, bound at run time",
    )
    build.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="INPUT=D0,D1,...",
        help="ONNX: the whole shape of one input (repeatable); a leading dim MIN..MAX ranges the batch",
    )
    build.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="INPUT=V0,V1,...|INPUT=FILE.npy",
        help="ONNX: build for this value of an input whose value decides shapes (Reshape's shape, Reduce axes, "
        "Slice starts...); runs check that the input is fed this value (repeatable)",
    )
    build.add_argument(
        "--no-expect", action="store_true", help="ONNX: do not record onnxruntime's outputs as expectations"
    )
    build.add_argument(
        "--tune",
        action="store_true",
        help="time the register tiles of the library ops (conv2d_gemm, matmul) on this machine and record "
        "the fastest for its kernel variant; other hosts use the defaults",
    )
    build.add_argument(
        "--tune-threads", type=int, default=None, metavar="N", help="threads the --tune timings run at (default 1)"
    )
    build.add_argument("--sign", metavar="KEY", help="sign the bundle with this Ed25519 private key (keygen -o KEY)")
    build.set_defaults(func=_cmd_build)
    keygen = sub.add_parser("keygen", help="write an Ed25519 key pair for build --sign: NAME (private) and NAME.pub")
    keygen.add_argument("-o", "--output", required=True, metavar="NAME")
    keygen.set_defaults(func=_cmd_keygen)
    pyz = sub.add_parser("zipapp", help="write a one-file runtime (svod_min and pyelftools in one .pyz)")
    pyz.add_argument("-o", "--output", required=True, metavar="svod_min.pyz")
    pyz.add_argument(
        "--python", default="/usr/bin/env python3", help="interpreter line (default: /usr/bin/env python3)"
    )
    pyz.set_defaults(func=_cmd_zipapp)
    # `tinygrad` is dispatched in main() before parsing (its arguments are the script's); listed for --help
    sub.add_parser(
        "tinygrad", help="run SCRIPT [ARGS] or -m MODULE with svod_min loading tinygrad's CPU programs (W^X)"
    )
    info = sub.add_parser("info", help="devices, compilers, W^X mode, cache; or what a bundle holds")
    info.add_argument("bundle", nargs="?", help="a model bundle (.svod): its kernels, targets and this host's choice")
    info.set_defaults(func=_cmd_info)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["tinygrad"]:
        from .interop.tinygrad_launch import launch

        return launch(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(args.func(args))
    except SvodError as exc:
        if args.debug:
            _print_traceback()
        print("error: %s" % one_line(exc), file=sys.stderr)
        return exit_code_for(exc)
    except Exception as exc:  # a bug of ours: still one line and a documented code
        if args.debug:
            _print_traceback()
        print(
            "error: internal error %s: %s (rerun with --debug and report it)" % (type(exc).__name__, exc),
            file=sys.stderr,
        )
        return EXIT_DEVICE


def one_line(exc: BaseException) -> str:
    """The error as one line; compile errors add the compiler's first complaint."""
    text = str(exc).strip()
    head = text.splitlines()[0] if text else type(exc).__name__
    if isinstance(exc, CompilationError):
        complaint = next((ln.strip() for ln in exc.diagnostics.splitlines() if "error" in ln), "")
        if complaint:
            head = "%s: %s" % (head, complaint)
    return head


if __name__ == "__main__":
    sys.exit(main())
