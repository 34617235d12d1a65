"""A whole ONNX bundle executed on riscv64 or loongarch64, which have no Python here: the host replays the plan.

The host reads the bundle (tests/foreign/onnx_bundles.py ``build``, with that target among its targets)
and turns its plan into a call list: every op in order, its kernel's entry point for that architecture
(a library kernel's from the arch's prebuilt variant, ``find_sig``; a generated kernel's from the
bundle's own object for the target), its arguments (buffers as offsets into one blob holding every
weight, input, output and the arena; variables as integers; ``core_id_count`` 1 and ``core_id`` 0
for a library kernel, ``core_id`` 0 .. global_size-1 for a generated one). It relocates the prebuilt
library object and the bundle's objects side by side into one image (svod_min's loader, for the
harness' fixed base and the externals' addresses the harness reports), and replay.c, linked into
harness.c, maps it, runs the calls under qemu-user and writes the outputs' bytes. They must match the
host's own run of the same bundle within a relative 1e-4.

Every argument travels as a 64-bit integer (an int32 variable sign-extended): pointers and int32
parameters are integer registers or 8-byte stack slots on riscv64 and loongarch64 (LP64D), as on
ppc64le; 24 are always passed and the kernel reads the ones it declares.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import zipfile
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import foreign_support as fs

from svod_min.dtypes import dtype
from svod_min.jit_loader.layout import apply_layout, plan_layout
from svod_min.kernels import variants
from svod_min.kernels.lookup import find_sig
from svod_min.npy import parse_npy, read_npy

MAX_ARGS = 24  # replay.c's call passes this many
ALIGN = 64  # every buffer of the blob starts on a cache line, as the runtime's allocations do
OBJECT_ALIGN = 0x10000  # each object of the image on its own 64 KiB: no page shared between two objects
NAME_BYTES = 56


class ReplayError(Exception):
    """The plan holds something the replay cannot express (named)."""


@dataclass
class Call:
    entry: str
    args: List[Tuple[bool, int]]  # (is a blob offset, value)
    calls: int  # how many times, with core_pos set to 0 .. calls-1
    core_pos: int  # -1: no core id argument


@dataclass
class Replay:
    blob: bytearray
    calls: List[Call]
    outputs: Dict[str, Tuple[int, int]]  # buffer name -> (offset, bytes)
    objects: List[bytes]  # the library object first, then the bundle's objects for the arch


def _align(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def _place_buffers(buffers: Dict[str, Any]) -> Tuple[Dict[str, int], int]:
    """Each buffer's offset in the blob: roots laid out in turn, views at their root's offset plus theirs."""
    offsets: Dict[str, int] = {}
    size = 0
    for name, spec in buffers.items():
        if "view_of" not in spec:
            offsets[name] = size
            count = 1
            for d in spec["shape"]:
                count *= int(d)
            size = _align(size + count * dtype(spec["dtype"]).itemsize, ALIGN)
    for name, spec in buffers.items():
        root, offset = name, 0
        while "view_of" in buffers[root]:
            offset += int(buffers[root].get("offset", 0))
            root = buffers[root]["view_of"]
        offsets[name] = offsets[root] + offset
    return offsets, size


def _library_call(kernel: Dict[str, Any], op: Dict[str, Any], variant: str, pointers: List[Tuple[bool, int]]) -> Call:
    sig = find_sig(kernel["library"], variant, **kernel.get("params", {}))
    if not variants.has_entry(variant, sig.entry):
        raise ReplayError("%s is not in the prebuilt %s object: that host would compile it" % (sig.entry, variant))
    values = dict(op.get("vars", {}), core_id_count=1, core_id=0)
    missing = [v.name for v in sig.vars if v.name not in values]
    if missing:
        raise ReplayError("op of %s gives no value for %s" % (sig.entry, ", ".join(missing)))
    scalars = [(False, _int_arg(values[v.name], v.kind)) for v in sig.vars]
    return Call(sig.entry, pointers + scalars, 1, -1)


def _int_arg(value: Any, kind: str) -> int:
    if kind == "f32":  # passed as its bits in an int32 (the library's convention for float variables)
        value = struct.unpack("<i", struct.pack("<f", float(value)))[0]
    if not isinstance(value, int) or not -(2**31) <= value < 2**31:
        raise ReplayError("variable value %r is not an int32" % (value,))
    return value


def _generated_call(name: str, kernel: Dict[str, Any], op: Dict[str, Any], pointers: List[Tuple[bool, int]]) -> Call:
    names = list(kernel.get("vars", []))
    if names != ["core_id"] or op.get("global_size") is not None:
        raise ReplayError("generated kernel %s: variables %s / per-op global_size are not replayed" % (name, names))
    size = kernel.get("global_size", [1, 1, 1])
    if not all(isinstance(d, int) for d in size) or size[1:] != [1, 1]:
        raise ReplayError("generated kernel %s: global_size %s is not [N, 1, 1]" % (name, size))
    return Call(name, pointers + [(False, 0)], int(size[0]), len(pointers))


def build_replay(bundle: str, arch: str, inputs: Dict[str, str]) -> Replay:
    """The replay of ``bundle`` for ``arch``; ``inputs``: input buffer name -> .npy file replacing its data."""
    variant = arch + "-baseline"
    with zipfile.ZipFile(bundle) as zf:
        plan = json.loads(zf.read("plan.json"))
        buffers, kernels = plan["buffers"], plan["kernels"]
        offsets, size = _place_buffers(buffers)
        blob = bytearray(size)
        for name, spec in buffers.items():
            if name in inputs:
                _, _, payload = read_npy(inputs[name])
            elif "npy" in spec.get("init", {}):
                _, _, payload = parse_npy(zf.read(spec["init"]["npy"]), spec["init"]["npy"])
            else:
                continue
            blob[offsets[name] : offsets[name] + len(payload)] = payload
        objects: Dict[str, bytes] = {}  # the bundle's objects for the arch, by member name
        calls = []
        for index, op in enumerate(plan["ops"]):
            kernel = kernels[op["kernel"]]
            pointers = [(True, offsets[b]) for b in op["buffers"]]
            if "library" in kernel:
                calls.append(_library_call(kernel, op, variant, pointers))
                continue
            files = [o["file"] for o in kernel.get("objects", []) if o["target"] == arch]
            if not files:
                raise ReplayError("op %d: the bundle holds no %s object of %s" % (index, arch, op["kernel"]))
            if files[0] not in objects:
                objects[files[0]] = zf.read(files[0])
            calls.append(_generated_call(op["kernel"], kernel, op, pointers))
    unknown = [n for n in inputs if n not in buffers]
    if unknown:
        raise ReplayError("no input buffer %s in the plan" % ", ".join(unknown))
    outputs = {n: (offsets[n], _nbytes(s)) for n, s in buffers.items() if s.get("output")}
    return Replay(blob, calls, outputs, [_library_object(variant), *objects.values()])


def _nbytes(spec: Dict[str, Any]) -> int:
    count = 1
    for d in spec["shape"]:
        count *= int(d)
    return count * dtype(spec["dtype"]).itemsize


def _library_object(variant: str) -> bytes:
    with open(variants.object_path(variant), "rb") as fh:
        return fh.read()


def replay_file(replay: Replay) -> bytes:
    """What replay.c reads: "SVODRPL1", u64 blob size, calls, outputs; the blob; per call a 56-byte entry name,
    u64 nargs, calls, core_pos (all ones: none), pointer mask, nargs values; per output u64 offset, size."""
    out = [
        b"SVODRPL1",
        struct.pack("<QQQ", len(replay.blob), len(replay.calls), len(replay.outputs)),
        bytes(replay.blob),
    ]
    for call in replay.calls:
        if len(call.args) > MAX_ARGS or len(call.entry.encode()) >= NAME_BYTES:
            raise ReplayError(
                "%s: %d arguments (at most %d) or a name of %d+ bytes"
                % (call.entry, len(call.args), MAX_ARGS, NAME_BYTES)
            )
        mask = sum(1 << i for i, (pointer, _) in enumerate(call.args) if pointer)
        header = (call.entry.encode(), len(call.args), call.calls, call.core_pos & (2**64 - 1), mask)
        out.append(struct.pack("<56sQQQQ", *header))
        out.append(struct.pack("<%dq" % len(call.args), *[v for _, v in call.args]))
    for offset, nbytes in replay.outputs.values():
        out.append(struct.pack("<QQ", offset, nbytes))
    return b"".join(out)


def link_and_run(tc: Any, replay: Replay, workdir: str) -> Dict[str, bytes]:
    """Relocate the objects into one image, link the harness with replay.c, run it under qemu; outputs' bytes."""
    layouts = [plan_layout(obj) for obj in replay.objects]
    externals = sorted({name for layout in layouts for name in layout.externals})
    for name in ("replay.c", "harness.c"):
        shutil.copy(os.path.join(fs.HERE, name), workdir)
    with open(os.path.join(workdir, "keep.c"), "w") as fh:
        fh.write(fs.symbol_table("svod_keep", "svod_keep_n", externals))
    fs.run_tool(
        list(tc.link_cc)
        + ["-static", "-O1", "-DSVOD_LOADED", "harness.c", "replay.c", "keep.c", "-lm", "-o", "loaded"],
        workdir,
        "linking the harness",
    )
    addresses = {}
    for line in fs.run_tool([tc.qemu, "./loaded", "--symbols"], workdir, "reading the harness' symbols").splitlines():
        name, value = line.split()
        addresses[name] = int(value, 16)
    image, segments, symbols = bytearray(), [], {}
    wanted = {c.entry for c in replay.calls}
    for layout in layouts:
        offset = _align(len(image), OBJECT_ALIGN)
        image += bytes(offset - len(image))
        image += apply_layout(layout, fs.BASE + offset, lambda name: addresses[name])
        segments += [(offset + s.offset, s.size, s.prot) for s in layout.segments]
        symbols.update(
            {n: fs.BASE + offset + layout.symbols[n] for n in wanted & set(layout.symbols) if n not in symbols}
        )
    missing = sorted(wanted - set(symbols))
    if missing:
        raise ReplayError("no object defines %s" % ", ".join(missing))
    fs.write_segments_image(os.path.join(workdir, "bundle.img"), len(image), segments, bytes(image), symbols)
    with open(os.path.join(workdir, "replay.bin"), "wb") as fh:
        fh.write(replay_file(replay))
    env = dict(os.environ, SVOD_REPLAY="replay.bin", SVOD_REPLAY_OUT="outputs.bin")
    fs.run_tool([tc.qemu, "./loaded", "bundle.img"], workdir, "replaying the bundle", env=env)
    with open(os.path.join(workdir, "outputs.bin"), "rb") as fh:
        data = fh.read()
    found, at = {}, 0
    for name, (_, nbytes) in replay.outputs.items():
        found[name] = data[at : at + nbytes]
        at += nbytes
    if at != len(data):
        raise ReplayError("replay.c wrote %d bytes of outputs, %d expected" % (len(data), at))
    return found


def replay_bundle(tc: Any, bundle: str, arch: str, inputs: Dict[str, str], workdir: str) -> Dict[str, bytes]:
    return link_and_run(tc, build_replay(bundle, arch, inputs), workdir)


__all__ = ["Call", "Replay", "ReplayError", "build_replay", "link_and_run", "replay_bundle", "replay_file"]
