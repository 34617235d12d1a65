"""Environment settings: one parse rule for on/off variables and one cache root.

A leaf module (stdlib and :mod:`svod_min.error` only), so the loader, the
compiler driver and the caches can all read it without importing each other.

On/off variables (``SVOD_OBJECT_CACHE``, ``SVOD_NATIVE_REPLAY`` ...) share
one rule, :func:`env_flag`: ``0 false no off disable disabled`` turn a
feature off, ``1 true yes on enable enabled`` turn it on (any case, spaces
ignored), unset or empty keeps the default, and anything else is a
:class:`~svod_min.error.ConfigError` naming the variable.

Every on-disk store lives under :func:`cache_root`: the object cache in
``<root>/objects``, compiler probes in ``<root>/compilers.json`` (both off with
``SVOD_OBJECT_CACHE=0``), and the tuner's results in ``<root>/tuning.json``
(user data written on request, so it stays on).
"""

from __future__ import annotations

import os
import re
from typing import Optional, Tuple

from .error import ConfigError

FALSE_WORDS = frozenset({"0", "false", "no", "off", "disable", "disabled"})
TRUE_WORDS = frozenset({"1", "true", "yes", "on", "enable", "enabled"})

#: On/off switch for every on-disk store (object cache, compiler probes).
CACHE_FLAG_ENV = "SVOD_OBJECT_CACHE"
#: The cache root; default ``$XDG_CACHE_HOME/svod_min``, else ``~/.cache/svod_min``.
CACHE_DIR_ENV = "SVOD_OBJECT_CACHE_DIR"
#: Environment variables :func:`cache_root` and :func:`disk_cache_enabled` read.
CACHE_ENV_VARS = (CACHE_FLAG_ENV, CACHE_DIR_ENV, "XDG_CACHE_HOME", "HOME")
#: The trust policy for bundles: a directory of ``*.pub`` keys (or one key file); unset or empty: no policy.
TRUSTED_KEYS_ENV = "SVOD_TRUSTED_KEYS"
#: Sanitizers generated kernels are compiled with (``undefined``, ``address``; comma-separated), for fuzzing and
#: debugging; unset or empty: none, and the objects are the default ones (docs/fuzzing.md).
SANITIZE_ENV = "SVOD_SANITIZE"
SANITIZERS = ("undefined", "address")
#: The zoo's folder (models and the wheels they come from); unset: the cache root's ``zoo/``.
ZOO_DIR_ENV = "SVOD_ZOO_DIR"


def env_str(name: str) -> Optional[str]:
    """The variable's value with surrounding spaces removed; None when unset or empty."""
    value = os.environ.get(name, "").strip()
    return value or None


def parse_flag(name: str, raw: Optional[str], default: bool) -> bool:
    """``raw`` (the value of variable ``name``) as on/off by the rule of :func:`env_flag`."""
    word = (raw or "").strip().lower()
    if not word:
        return default
    if word in FALSE_WORDS:
        return False
    if word in TRUE_WORDS:
        return True
    raise ConfigError(
        "%s=%r is not an on/off value (use one of %s or %s)"
        % (name, raw, ", ".join(sorted(TRUE_WORDS)), ", ".join(sorted(FALSE_WORDS)))
    )


def env_flag(name: str, default: bool) -> bool:
    """Whether the on/off variable ``name`` is on; ``default`` when unset or empty."""
    return parse_flag(name, os.environ.get(name), default)


def env_int(name: str, default: int, *, minimum: int = 1) -> int:
    """The integer variable ``name`` (at least ``minimum``); ``default`` when unset or empty."""
    raw = env_str(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError("%s=%r is not an integer" % (name, raw)) from None
    if value < minimum:
        raise ConfigError("%s=%d is below its minimum %d" % (name, value, minimum))
    return value


def trusted_keys_path() -> Optional[str]:
    """Where ``SVOD_TRUSTED_KEYS`` puts the trusted keys (``~`` expanded); None when no policy is set."""
    raw = env_str(TRUSTED_KEYS_ENV)
    return None if raw is None else os.path.expanduser(raw)


#: The memory budget a plan or bundle must fit (planfile/memory_budget.py); a size: ``512M``, ``2G``, ``1.5GiB``.
MAX_MEMORY_ENV = "SVOD_MAX_MEMORY"
#: Size suffixes (any case, with or without ``B`` or ``iB``): K M G T, powers of 1024 (memory is counted in them).
_SIZE_UNITS = {letter + tail: 1 << 10 * power for power, letter in enumerate("kmgt", 1) for tail in ("", "b", "ib")}
_SIZE_UNITS.update({"": 1, "b": 1})
_SIZE_TEXT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)", re.ASCII)


def parse_size(raw: str, name: str) -> int:
    """``raw`` (the value of setting ``name``) as a positive byte count: ``4096``, ``512M``, ``2G``, ``1.5GiB``;
    :class:`~svod_min.error.ConfigError` naming ``name`` otherwise."""
    found = _SIZE_TEXT.fullmatch(str(raw).strip().lower())
    number, unit = (float(found.group(1)), found.group(2)) if found else (0.0, "")
    if unit not in _SIZE_UNITS or int(number * _SIZE_UNITS[unit]) < 1:
        raise ConfigError(
            "%s=%r is not a size (a positive number of bytes, or of K, M, G or T (powers of 1024, "
            "KiB and KB alike): 512M, 2G, 1.5GiB)" % (name, raw)
        )
    return int(number * _SIZE_UNITS[unit])


def sanitizers() -> Tuple[str, ...]:
    """The sanitizers ``SVOD_SANITIZE`` names, in :data:`SANITIZERS` order; ConfigError for any other name."""
    raw = env_str(SANITIZE_ENV)
    if raw is None:
        return ()
    names = {part.strip().lower() for part in raw.split(",") if part.strip()}
    unknown = sorted(names - set(SANITIZERS))
    if unknown:
        raise ConfigError(
            "%s=%r: %s is not a sanitizer (%s)" % (SANITIZE_ENV, raw, ", ".join(unknown), ", ".join(SANITIZERS))
        )
    return tuple(n for n in SANITIZERS if n in names)


def disk_cache_enabled() -> bool:
    """False when ``SVOD_OBJECT_CACHE`` turns every on-disk store off."""
    return env_flag(CACHE_FLAG_ENV, True)


def cache_root() -> Optional[str]:
    """The directory every on-disk store lives under (absolute); None when there is no home.

    ``SVOD_OBJECT_CACHE_DIR`` (``~`` expanded), else ``$XDG_CACHE_HOME/svod_min``
    when that is absolute (the XDG spec says a relative value is invalid and
    must be ignored), else ``~/.cache/svod_min``.
    """
    explicit = env_str(CACHE_DIR_ENV)
    if explicit is not None:
        return os.path.abspath(os.path.expanduser(explicit))
    xdg = env_str("XDG_CACHE_HOME")
    if xdg is not None and os.path.isabs(xdg):
        return os.path.join(xdg, "svod_min")
    home_cache = os.path.expanduser(os.path.join("~", ".cache"))
    if home_cache.startswith("~"):
        return None
    return os.path.join(home_cache, "svod_min")


def cache_path(*parts: str) -> Optional[str]:
    """``parts`` joined under :func:`cache_root`; None when the disk cache is off or has no root."""
    if not disk_cache_enabled():
        return None
    root = cache_root()
    return None if root is None else os.path.join(root, *parts)


__all__ = [
    "CACHE_DIR_ENV",
    "CACHE_ENV_VARS",
    "CACHE_FLAG_ENV",
    "FALSE_WORDS",
    "MAX_MEMORY_ENV",
    "TRUE_WORDS",
    "TRUSTED_KEYS_ENV",
    "ZOO_DIR_ENV",
    "cache_path",
    "cache_root",
    "disk_cache_enabled",
    "env_flag",
    "env_int",
    "env_str",
    "parse_flag",
    "parse_size",
    "trusted_keys_path",
]
