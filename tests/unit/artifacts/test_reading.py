"""Picking a part of a kept result (pure): characters kept whole, lines, literal matches, JSON paths."""

from __future__ import annotations

import re
import time

import orjson
import pytest

from appliance.artifacts import reading
from appliance.errors import InvalidParams

TEXT = "é€😀 plain\nsecond line\nthird: needle here, needle again\n\nlast needle".encode()


def test_a_cut_never_splits_a_character_and_says_how_much_it_skipped() -> None:
    word = "é€😀".encode()  # 2 + 3 + 4 bytes
    assert reading.whole_chars(word[:4]) == ("é".encode(), 0)  # € cut: left out
    assert reading.whole_chars(word[1:]) == ("€😀".encode(), 1)  # begins inside é
    assert reading.whole_chars(word[3:8], at_start=True) == (b"", 2)  # inside € and 😀
    assert reading.whole_chars(b"plain") == (b"plain", 0)


def test_lines_are_numbered_from_one_bounded_and_say_where_to_go_on() -> None:
    assert reading.count_lines(TEXT) == 5 and reading.count_lines(b"a\n") == 1
    got = reading.lines(TEXT, 2, 2, 1000)
    assert got == {"line": 2, "lines": ["second line", "third: needle here, needle again"], "next_line": 4}
    assert reading.lines(TEXT, 4, 10, 1000) == {"line": 4, "lines": ["", "last needle"], "end": True}
    assert reading.lines(TEXT, 99, 10, 1000) == {"line": 99, "lines": [], "end": True}
    assert reading.lines(TEXT, 2, 10, 15)["lines"] == ["second line"]  # the byte cap
    long = reading.lines(b"x" * 50 + b"\nnext", 1, 10, 20)  # one line longer than a read
    assert long == {"line": 1, "lines": ["x" * 20], "cut": True, "next_offset": 20}


def test_a_match_is_literal_counts_each_line_once_and_continues_from_a_line() -> None:
    got = reading.matching(TEXT, reading.needle("needle"), 10, 1000)
    assert [f["line"] for f in got["found"]] == [3, 5] and got["end"] is True
    assert got["found"][0]["text"] == "third: needle here, needle again"
    first = reading.matching(TEXT, b"needle", 1, 1000)
    assert first["next_line"] == 4 and len(first["found"]) == 1
    assert [f["line"] for f in reading.matching(TEXT, b"needle", 5, 1000, 4)["found"]] == [5]
    assert reading.matching(TEXT, reading.needle("a.*b"), 5, 1000)["found"] == []  # no pattern language
    wide = reading.matching(b"a" * 5000 + b"needle" + b"b" * 5000, b"needle", 5, 1000)
    [one] = wide["found"]
    assert one["cut"] and "needle" in one["text"] and len(one["text"]) <= reading.EXCERPT + 6


def test_a_hostile_match_on_a_hostile_body_stays_linear() -> None:
    body = b"a" * 2_000_000
    started = time.perf_counter()
    got = reading.matching(body, reading.needle("a" * 199 + "b"), 10, 1000)
    assert got["found"] == [] and time.perf_counter() - started < 5


def test_a_json_path_walks_keys_and_indices_and_shows_the_shape_of_what_is_too_large() -> None:
    doc = orjson.dumps(
        {"items": [{"id": 1, "tags": ["a", "b"]}, {"id": 2}], "n": 2, "big": list(range(2000))}
    )
    assert reading.at_path(doc, reading.parse_path("items[0].tags[1]"), 1000) == {
        "path": "items[0].tags[1]",
        "value": "b",
    }
    assert reading.at_path(doc, reading.parse_path("$.n"), 1000)["value"] == 2
    assert reading.at_path(doc, reading.parse_path("$"), 100_000)["value"]["n"] == 2
    big = reading.at_path(doc, reading.parse_path("big"), 100)
    assert big["type"] == "array" and big["length"] == 2000 and big["cut"] and len(big["text"]) <= 100
    for path, words in (("items[5]", "no index [5] in items (an array of 2)"), ("n.x", "no key 'x' in n")):
        with pytest.raises(InvalidParams, match=re.escape(words)):
            reading.at_path(doc, reading.parse_path(path), 1000)
    with pytest.raises(InvalidParams, match="not JSON"):
        reading.at_path(b"plain text", [], 1000)


@pytest.mark.parametrize(
    "path", ["", "a..b", "a.", "a[", "a[-1]", "a[1e3]", "a]b", "a[0]b", "[٣]", "x" * 257, ".".join("a" * 40)]
)
def test_a_malformed_json_path_is_refused_naming_the_field(path: str) -> None:
    with pytest.raises(InvalidParams) as refused:
        reading.parse_path(path)
    assert refused.value.field == "path"


def test_well_formed_paths_parse_to_their_steps() -> None:
    assert reading.parse_path("a.b[0].c") == ["a", "b", 0, "c"]
    assert reading.parse_path("$[2][3]") == [2, 3]
    assert reading.parse_path("$.items") == ["items"]
    assert reading.parse_path("has space.k-1") == ["has space", "k-1"]
