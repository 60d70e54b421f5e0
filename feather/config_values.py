"""The value parsers behind the settings table (feather/config.py) and the error they raise.

Each parser takes (variable name, raw text) and returns the typed value, or raises ConfigError
naming the variable and what it accepts: the one line an operator sees before exit code 3.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from feather.parsing import ascii_int


class ConfigError(Exception):
    """A setting is missing or malformed; the message names the variable and what it accepts."""

    def __init__(self, name: str, problem: str):
        self.name = name
        super().__init__(f"{name}: {problem}")


def flag(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(name, f"expected one of 1/0, true/false, yes/no, on/off; got {raw!r}")


def whole(minimum: int | None = None, maximum: int | None = None) -> Callable[[str, str], int]:
    def parse(name: str, raw: str) -> int:
        value = ascii_int(raw.strip().replace("_", ""), signed=True)
        if value is None:
            raise ConfigError(name, f"expected a whole number; got {raw!r}")
        if minimum is not None and value < minimum:
            raise ConfigError(name, f"expected a number >= {minimum}; got {value}")
        if maximum is not None and value > maximum:
            raise ConfigError(name, f"expected a number <= {maximum}; got {value}")
        return value
    return parse


def one_of(*choices: str, upper: bool = False) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        value = raw.strip().upper() if upper else raw.strip().lower()
        if value not in choices:
            raise ConfigError(name, f"expected one of {', '.join(choices)}; got {raw!r}")
        return value
    return parse


def text(name: str, raw: str) -> str:
    return raw.strip()


def names(name: str, raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


def database_url_value(name: str, raw: str) -> str:
    value = raw.strip()
    if not value or value.startswith(("sqlite:///", "postgresql://", "postgres://")) or value == "sqlite://:memory:":
        return value
    raise ConfigError(
        name,
        "expected sqlite:///relative/path.db, sqlite:////absolute/path.db or "
        f"postgresql://user:password@host/dbname; got {raw!r}",
    )


@dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[str, str], Any]
    default: str
    help: str
