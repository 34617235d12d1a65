"""bench_conv's shape table and its --only selection (no timing: the benchmark itself needs onnxruntime)."""

from __future__ import annotations

from svod_min.perf.benchmarks import bench_conv


def test_select_by_words_in_the_label() -> None:
    picked = bench_conv.select("7x7, 14X14")
    labels = [s.label for s in picked]
    assert labels and all("7x7" in lab.lower() or "14x14" in lab.lower() for lab in labels)
    assert "ResNet-50 3x3 512->512 7x7" in labels and "ResNet-50 3x3 256->256 14x14" in labels
    assert bench_conv.select("") == bench_conv.SHAPES
    assert bench_conv.select("no such layer") == ()


def test_shapes_have_whole_outputs_and_flops() -> None:
    for shape in bench_conv.SHAPES:
        oh, ow = shape.out_hw
        assert oh >= 1 and ow >= 1 and shape.c % shape.groups == 0 and shape.oc % shape.groups == 0
        assert shape.flops == 2.0 * shape.oc * oh * ow * (shape.c // shape.groups) * shape.k * shape.k
