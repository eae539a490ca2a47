"""Converters of the command line's values (argparse ``type=``): each names the Make variable in
its error (``SIZE='x' is not a whole number``), so a bad value gets one line that says which
variable to fix (docs/bad-input.md)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from migrate.core.errors import ConfigError
from migrate.core.units import parse_rate_bps

T = TypeVar("T")


def whole(name: str) -> Callable[[str], int]:
    """Converter to int; the error names ``name``."""
    return number(name, int)


def converter(kind: Callable[[str], T], message: Callable[[str], str]) -> Callable[[str], T]:
    """Converter by ``kind``; a text it rejects with ValueError is a ConfigError saying ``message(text)``."""

    def conv(text: str) -> T:
        try:
            return kind(text)
        except ValueError:
            raise ConfigError(message(text)) from None

    return conv


def number(name: str, kind: type) -> Callable[[str], Any]:
    """Converter to ``kind`` (int or float); the error names ``name``."""
    return converter(kind, lambda text: f"{name}={text!r} is not a {'whole ' if kind is int else ''}number")


def seconds(name: str) -> Callable[[str], float]:
    """Converter to float seconds; the error names ``name``."""
    return converter(float, lambda text: f"{name}={text!r} is not a number of seconds")


def _bounded(name: str, unit: str, ok: Callable[[float], bool], requirement: str) -> Callable[[str], float]:
    """Converter to a float in ``unit`` that ``ok`` accepts; the errors name ``name`` and say
    ``requirement``."""
    read = converter(float, lambda text: f"{name}={text!r} is not a number of {unit}")

    def conv(text: str) -> float:
        v = read(text)
        if not ok(v):
            raise ConfigError(f"{name}={text!r} must be {requirement}")
        return v

    return conv


def non_negative(name: str, unit: str) -> Callable[[str], float]:
    """Converter to a finite float of 0 or more in ``unit``; the error names ``name``."""
    return _bounded(name, unit, lambda v: 0 <= v < math.inf, "0 or more")


def positive(name: str, unit: str) -> Callable[[str], float]:
    """Converter to a float above 0 in ``unit`` (e.g. "milliseconds"); the error names ``name``."""
    return _bounded(name, unit, lambda v: v > 0, "above 0")


def names(name: str, example: str) -> Callable[[str], list[str]]:
    """Converter of a comma-separated list of names (order kept, repeats dropped, at least one);
    the error names ``name`` and shows ``example``."""

    def conv(text: str) -> list[str]:
        out = [p.strip() for p in text.split(",") if p.strip()]
        if not out:
            raise ConfigError(f"{name}={text!r}: give at least one name, e.g. {example}")
        return list(dict.fromkeys(out))

    return conv


def rate(name: str) -> Callable[[str], int]:
    """Converter of ``500M``-style rates to bit/s; the error names ``name``."""
    return lambda text: parse_rate_bps(text, name)


def boolean(name: str | None = None, *, empty_is_false: bool = True) -> Callable[[str], bool]:
    """Converter of 1/0, yes/no, true/false, on/off; the error names ``name`` if given."""
    false = ("0", "no", "false", "off", "") if empty_is_false else ("0", "no", "false", "off")

    def conv(text: str) -> bool:
        if text.lower() in ("1", "yes", "true", "on"):
            return True
        if text.lower() in false:
            return False
        raise ConfigError(f"{name + '=' if name else ''}{text!r} is not a boolean: use 1 or 0")

    return conv
