"""A kernel's translation unit cut from its family's rendered file: the marker scan against the full split."""

from __future__ import annotations

import glob
import os

import pytest

from svod_min.error import KernelParamError
from svod_min.kernels import sources


def test_find_block_cuts_what_split_blocks_cuts_for_every_entry() -> None:
    count = 0
    for path in sorted(glob.glob(os.path.join(sources.C_DIR, "*.c"))):
        text = open(path).read()
        for entry, block in sources.split_blocks(text).items():
            assert sources.find_block(text, entry) == block, (path, entry)
            count += 1
    assert count > 100  # the library's entries, not an empty folder


def test_find_block_needs_markers_at_line_starts_and_a_whole_name() -> None:
    text = "x /* BEGIN k */\nno\n/* BEGIN k2 */\nb\n/* END k2 */\n/* BEGIN k */\nyes\n/* END k */\n"
    assert sources.find_block(text, "k") == "/* BEGIN k */\nyes\n/* END k */\n"
    assert sources.find_block(text, "k2") == "/* BEGIN k2 */\nb\n/* END k2 */\n"
    assert sources.find_block(text, "k3") is None
    assert sources.find_block("/* BEGIN open */\nno end\n", "open") is None


def test_an_unknown_entry_is_a_kernel_param_error() -> None:
    with pytest.raises(KernelParamError, match="entry svod_no_such_kernel is not in elementwise.c"):
        sources.kernel_source("elementwise", "svod_no_such_kernel")
