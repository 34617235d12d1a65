"""Where the checkout's folders are, for tests at any depth of tests/."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
EXAMPLES = REPO / "examples"
REPO_DIR = str(REPO)
