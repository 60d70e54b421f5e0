"""feather.parsing's JSON depth guard: its verdict is the parsed depth, exactly, in every encoding
json.loads reads, so nothing deeper than MAX_JSON_DEPTH reaches the recursive decoder."""
from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings, strategies as st

from feather.parsing import MAX_JSON_DEPTH, JsonTooDeep, json_depth_ok, loads_limited

ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"]
tricky = st.text(alphabet='[]{}"\\:,a \u2200\u225b\u5c22\u007b\U0001f600\x00\n', max_size=12)
leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | tricky
values = st.recursive(leaf, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(tricky, kids, max_size=3),
                      max_leaves=10)


def depth(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


@st.composite
def nested(draw):
    """A value wrapped in enough arrays and objects to land on either side of the limit."""
    value = draw(values)
    for wrap in draw(st.lists(st.booleans(), min_size=MAX_JSON_DEPTH - 8, max_size=MAX_JSON_DEPTH + 8)):
        value = [value] if wrap else {draw(tricky): value}
    return value


@settings(deadline=None, max_examples=200)
@given(nested(), st.booleans(), st.sampled_from(ENCODINGS))
def test_the_verdict_is_the_parsed_depth_in_every_encoding(value, ascii_only, encoding):
    text = json.dumps(value, ensure_ascii=ascii_only)
    deep = depth(value) > MAX_JSON_DEPTH
    data = text.encode(encoding)
    assert json_depth_ok(text) is json_depth_ok(data) is (not deep)
    if deep:
        with pytest.raises(JsonTooDeep):
            loads_limited(data)
    else:
        assert loads_limited(data) == value == loads_limited(text)


def test_exactly_the_limit_passes_and_one_more_is_refused():
    assert json_depth_ok("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    assert not json_depth_ok("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    assert json_depth_ok("[[[]]]", limit=3) and not json_depth_ok("[[[]]]", limit=2)
    assert json_depth_ok("", limit=0) and not json_depth_ok("[]", limit=0)


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le"])
def test_brackets_behind_a_character_whose_bytes_look_like_a_quote_are_still_counted(encoding):
    # In UTF-16 "∀" (U+2200) is the bytes 00 22 or 22 00: read as UTF-8 they hold a quote, which
    # opened a phantom string that hid the 5,000 brackets after it from the count.
    body = ('["\u2200", ' + "[" * 5000 + "]" * 5000 + ', "\u2200"]').encode(encoding)
    assert not json_depth_ok(body)
    with pytest.raises(JsonTooDeep):
        loads_limited(body)


@pytest.mark.parametrize("text, expected", [
    ('{"a": "\\"[[[["}', {"a": '"[[[['}),  # an escaped quote does not end the string
    ('"\\\\"', "\\"),  # an escaped backslash does not escape the closing quote
    ('["\\\\", [[]]]', ["\\", [[]]]),
    ('"\\u005b"', "["),
])
def test_strings_hide_their_brackets_and_only_their_brackets(text, expected):
    assert loads_limited(text, limit=3) == expected


@given(st.text(alphabet='"\\[]{}a', max_size=30).map(lambda s: "[" * 70 + s))
@example('[' * 70 + '"')  # an unterminated string opened after the brackets
def test_brackets_before_any_string_always_count(text):
    assert not json_depth_ok(text)


def test_bytes_that_are_not_text_are_a_value_error_like_json_loads_gives():
    with pytest.raises(UnicodeDecodeError):
        loads_limited(b'"\xff"')
    assert json_depth_ok(b'"\xff"') and not json_depth_ok(b"[" * 65 + b"\xff")
