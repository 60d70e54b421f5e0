"""Parsing what clients and remote servers send: integers are ASCII digits and nothing else.

`int()` and `str.isdigit()` accept far more than "0-9": `int("٣")` is 3, `"²".isdigit()` is True
but `int("²")` raises, and `int()` also takes spaces, underscores and a sign. Every integer that
arrives from outside goes through `ascii_int` instead, so a stray superscript is a clean refusal
(the caller decides: a 400, a default, a NetError), never a 500.
"""
from __future__ import annotations

import json
import re
from array import array
from itertools import accumulate

_DIGITS = re.compile(r"[0-9]{1,18}")  # 18 digits always fit in a signed 64-bit column
_SIGNED = re.compile(r"-?[0-9]{1,18}")


def ascii_int(raw: object, *, signed: bool = False) -> int | None:
    """The integer spelled by raw in ASCII digits (a leading '-' only when signed), else None."""
    if not isinstance(raw, str) or not (_SIGNED if signed else _DIGITS).fullmatch(raw):
        return None
    return int(raw)


MAX_JSON_DEPTH = 64  # atproto records nest a handful of levels; nothing we accept needs more
# A string runs to its closing quote or, unterminated, to the end of the text, so the match never
# fails: a quote never starts a scan that is thrown away and retried from the next quote (on
# `"\"\"\…` that retry made the old pattern quadratic). Possessive quantifiers give nothing back.
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_DEPTH_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # as signed bytes: +1 and -1


class JsonTooDeep(ValueError):
    """Nested deeper than MAX_JSON_DEPTH. A ValueError, so every `except ValueError` that guards a
    json.loads already treats it as malformed input."""


def _as_text(data: bytes | bytearray) -> str:
    # The decoding json.loads itself applies to bytes: it honours UTF-16 and UTF-32, where a
    # character's bytes can look like a quote, so counting the raw bytes as UTF-8 could hide brackets.
    return bytes(data).decode(json.detect_encoding(data), "surrogatepass")


def json_depth_ok(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether text nests arrays and objects at most limit deep, run before json.loads so a deep
    body never reaches the recursive decoder. Linear: two regex passes, then the running depth
    summed in C."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = _as_text(text)
        except UnicodeDecodeError:  # json.loads refuses it before nesting anything
            text = bytes(text).decode("utf-8", "replace")
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    if brackets.count("[") + brackets.count("{") <= limit:
        return True
    steps = array("b", brackets.encode("ascii").translate(_DEPTH_STEP))
    return max(accumulate(steps), default=0) <= limit


def loads_limited(text: str | bytes, limit: int = MAX_JSON_DEPTH):
    """json.loads that refuses deep nesting with JsonTooDeep instead of a RecursionError."""
    if isinstance(text, (bytes, bytearray)):
        text = _as_text(text)  # a UnicodeDecodeError is a ValueError, as from json.loads
    if not json_depth_ok(text, limit):
        raise JsonTooDeep(f"JSON nested deeper than {limit} levels is refused.")
    return json.loads(text)
