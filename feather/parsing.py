"""Parsing what clients and remote servers send: integers are ASCII digits and nothing else.

`int()` and `str.isdigit()` accept far more than "0-9": `int("٣")` is 3, `"²".isdigit()` is True
but `int("²")` raises, and `int()` also takes spaces, underscores and a sign. Every integer that
arrives from outside goes through `ascii_int` instead, so a stray superscript is a clean refusal
(the caller decides: a 400, a default, a NetError), never a 500.
"""
from __future__ import annotations

import re

_DIGITS = re.compile(r"[0-9]{1,18}")  # 18 digits always fit in a signed 64-bit column
_SIGNED = re.compile(r"-?[0-9]{1,18}")


def ascii_int(raw: object, *, signed: bool = False) -> int | None:
    """The integer spelled by raw in ASCII digits (a leading '-' only when signed), else None."""
    if not isinstance(raw, str) or not (_SIGNED if signed else _DIGITS).fullmatch(raw):
        return None
    return int(raw)


MAX_JSON_DEPTH = 64  # atproto records nest a handful of levels; nothing we accept needs more
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


class JsonTooDeep(ValueError):
    """Nested deeper than MAX_JSON_DEPTH. A ValueError, so every `except ValueError` that guards a
    json.loads already treats it as malformed input."""


def json_depth_ok(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether text nests arrays and objects at most limit deep: one linear scan that skips string
    contents, run before json.loads so a deep body never reaches the recursive decoder."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    depth = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if match.group() in "[{" else -1
        if depth > limit:
            return False
    return True


def loads_limited(text: str | bytes, limit: int = MAX_JSON_DEPTH):
    """json.loads that refuses deep nesting with JsonTooDeep instead of a RecursionError."""
    import json

    if not json_depth_ok(text, limit):
        raise JsonTooDeep(f"JSON nested deeper than {limit} levels is refused.")
    return json.loads(text)
