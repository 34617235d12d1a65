"""Helpers shared by the tests (imported as ``support.<name>``; tests/ is on sys.path through conftest.py)."""
