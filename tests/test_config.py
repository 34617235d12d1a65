"""svod_min.config: the on/off rule for environment flags and the one cache root."""

from __future__ import annotations

import os

import pytest

from svod_min import config
from svod_min.cache import kernel_cache as kc
from svod_min.compiler import probe
from svod_min.error import ConfigError, SvodError

FLAG = "SVOD_TEST_FLAG"


@pytest.fixture(autouse=True)
def _clean_cache_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in config.CACHE_ENV_VARS:
        monkeypatch.delenv(name, raising=False)


# --- env_flag ------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["0", "false", "no", "off", "disable", "disabled", " OFF ", "False"])
def test_false_words_turn_a_flag_off(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(FLAG, raw)
    assert config.env_flag(FLAG, True) is False


@pytest.mark.parametrize("raw", ["1", "true", "yes", "on", "enable", "enabled", " Yes "])
def test_true_words_turn_a_flag_on(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(FLAG, raw)
    assert config.env_flag(FLAG, False) is True


@pytest.mark.parametrize("default", [True, False])
def test_unset_or_empty_keeps_the_default(monkeypatch: pytest.MonkeyPatch, default: bool) -> None:
    monkeypatch.delenv(FLAG, raising=False)
    assert config.env_flag(FLAG, default) is default
    monkeypatch.setenv(FLAG, "  ")
    assert config.env_flag(FLAG, default) is default


@pytest.mark.parametrize("raw", ["2", "maybe", "nope", "0x1"])
def test_anything_else_is_a_config_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(FLAG, raw)
    with pytest.raises(ConfigError, match="%s=%r is not an on/off value" % (FLAG, raw)) as info:
        config.env_flag(FLAG, True)
    assert isinstance(info.value, SvodError) and info.value.exit_code == 2


def test_env_int(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FLAG, raising=False)
    assert config.env_int(FLAG, 7) == 7
    monkeypatch.setenv(FLAG, " 12 ")
    assert config.env_int(FLAG, 7) == 12
    monkeypatch.setenv(FLAG, "0")
    with pytest.raises(ConfigError, match="below its minimum 1"):
        config.env_int(FLAG, 7)
    monkeypatch.setenv(FLAG, "many")
    with pytest.raises(ConfigError, match="SVOD_TEST_FLAG='many' is not an integer"):
        config.env_int(FLAG, 7)


def test_a_bad_cache_switch_is_refused_not_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVOD_OBJECT_CACHE", "sometimes")
    with pytest.raises(ConfigError, match="SVOD_OBJECT_CACHE"):
        kc.object_cache()


# --- cache_root ----------------------------------------------------------------------------


def test_cache_root_order(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert config.cache_root() == str(tmp_path / "home" / ".cache" / "svod_min")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert config.cache_root() == str(tmp_path / "xdg" / "svod_min")
    monkeypatch.setenv("SVOD_OBJECT_CACHE_DIR", "~/mine")
    assert config.cache_root() == str(tmp_path / "home" / "mine")


# The three ways the compiler-probe store and the object cache used to disagree.


@pytest.mark.parametrize("raw", sorted(config.FALSE_WORDS))
def test_the_cache_switch_turns_off_every_store(tmp_path, monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("SVOD_OBJECT_CACHE_DIR", str(tmp_path / "root"))
    monkeypatch.setenv("SVOD_OBJECT_CACHE", raw)
    assert probe.probe_store() is None  # "disable" used to leave the probe store on
    assert not kc.object_cache().enabled
    assert not (tmp_path / "root").exists()


def test_a_relative_xdg_cache_home_is_ignored_by_every_store(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    root = str(tmp_path / "home" / ".cache" / "svod_min")
    assert probe.probe_store() == os.path.join(root, "compilers.json")
    assert kc.default_cache_dir() == os.path.join(root, "objects")


def test_the_cache_dir_variable_names_the_root_for_every_store(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVOD_OBJECT_CACHE_DIR", str(tmp_path / "root"))
    assert probe.probe_store() == str(tmp_path / "root" / "compilers.json")
    assert kc.object_cache().directory == str(tmp_path / "root" / "objects")
