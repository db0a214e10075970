"""Text preparation for the lexical index: splitting, stop-words, and a MATCH that never fails."""

from __future__ import annotations

from typing import Any

import sqlean
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.search.text import (
    STOP_WORDS,
    identifier_text,
    index_text,
    match_expression,
    param_names,
    query_tokens,
    split_identifier,
)

TOKENIZER = "porter unicode61 remove_diacritics 2"


def _fts() -> sqlean.Connection:
    conn = sqlean.connect(":memory:")
    conn.execute(
        f"CREATE VIRTUAL TABLE t USING fts5(name, toolkit, description, params, tokenize='{TOKENIZER}')"
    )
    conn.execute("INSERT INTO t VALUES ('list Pets listpets', 'petstore', 'Lists all pets', 'limit')")
    return conn


FTS = _fts()


def test_camel_case_acronyms_digits_and_separators_are_split() -> None:
    assert split_identifier("getHTTPResponse2xx_v2").split() == [
        "get",
        "HTTP",
        "Response",
        "2",
        "xx",
        "v",
        "2",
    ]
    assert split_identifier("AclApi.add_mapping").split() == ["Acl", "Api", "add", "mapping"]
    assert split_identifier("a-b/c:d").split() == ["a", "b", "c", "d"]


def test_identifier_text_keeps_the_joined_form_once() -> None:
    assert identifier_text("getPetById") == "get Pet By Id getpetbyid"
    assert identifier_text("weather") == "weather"


def test_index_text_fills_four_columns_from_name_group_description_and_params() -> None:
    schema: dict[str, Any] = {"properties": {"petId": {}, "body": {"properties": {"tagName": {}}}}}
    name, toolkit, description, params = index_text(
        "petstore__getPetById", "petstore", "pets", "Find a petById", schema, upstream_name="getPetById"
    )
    assert "getpetbyid" in name.split()
    assert toolkit == "pets petstore"
    assert "pet By Id" in description
    assert params.split() == ["pet", "Id", "body", "tag", "Name"]


def test_params_are_read_three_levels_deep() -> None:
    deep: dict[str, Any] = {
        "properties": {"a": {"properties": {"b": {"properties": {"c": {"properties": {"d": {}}}}}}}}
    }
    assert param_names(deep) == ["a", "b", "c"]


def test_stop_words_are_dropped_unless_they_are_all_there_is() -> None:
    assert query_tokens("show me the weather in Paris") == ["weather", "paris"]
    assert query_tokens("who are you") == ["who", "are", "you"]
    assert "the" in STOP_WORDS


def test_query_identifiers_yield_their_words_and_joined_form() -> None:
    assert query_tokens("getPetById") == ["pet", "id", "getpetbyid"]


def test_fts_operators_become_plain_quoted_words() -> None:
    expr = match_expression('pets AND "cats" NEAR(x y) * ^z col:dogs')
    assert expr is not None
    assert " AND " not in expr.replace(' "and" ', " ")
    FTS.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()


def test_punctuation_emoji_and_controls_leave_nothing_to_search() -> None:
    assert match_expression("!!! ??? *** \x00 \ud800 🙂 ()") is None
    assert match_expression("") is None


def test_a_huge_query_is_capped() -> None:
    expr = match_expression(" ".join(f"word{i}" for i in range(20_000)))
    assert expr is not None and expr.count(" OR ") < 100
    FTS.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.text(alphabet=st.characters(), max_size=300)
    | st.sampled_from(['"', "*", "NEAR(", "a:b", "^", "AND OR NOT"])
)
def test_any_text_yields_none_or_an_expression_fts5_accepts(text: str) -> None:
    expr = match_expression(text)
    if expr is not None:
        FTS.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ['"', "*", "(", ")", ":", "^", "NEAR", "AND", "OR", "NOT", "x", "\x00", "é", "🙂", "-"]
        ),
        max_size=40,
    )
)
def test_fts5_syntax_fragments_in_any_order_are_safe(parts: list[str]) -> None:
    expr = match_expression(" ".join(parts) + "".join(parts))
    if expr is not None:
        FTS.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()
