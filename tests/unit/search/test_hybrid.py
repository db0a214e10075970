"""Hybrid fusion (pure): what the fused order promises, on hand-made candidate lists."""

from __future__ import annotations

import dataclasses
import math

from appliance.search import hybrid


def test_a_tool_first_in_both_lists_is_first_after_fusion() -> None:
    fused = hybrid.fuse([(1, 9.0), (2, 5.0), (3, 1.0)], [(1, 0.8), (3, 0.5), (2, 0.2)], limit=3)
    assert fused[0].tool_id == 1
    assert fused[0].lexical_rank == 1 and fused[0].semantic_rank == 1


def test_a_strong_semantic_match_the_words_missed_enters_the_results() -> None:
    lexical = [(10, 3.0), (11, 2.9), (12, 2.8), (13, 2.7)]
    semantic = [(99, 0.9), (10, 0.3), (11, 0.29), (12, 0.28)]
    ids = [f.tool_id for f in hybrid.fuse(lexical, semantic, limit=3)]
    assert 99 in ids
    only_lexical = next(f for f in hybrid.fuse(lexical, semantic, limit=5) if f.tool_id == 99)
    assert only_lexical.lexical_rank is None and only_lexical.semantic_score == 0.9


def test_fusion_cuts_to_the_limit_and_handles_empty_sides() -> None:
    assert len(hybrid.fuse([(i, float(100 - i)) for i in range(50)], [], limit=8)) == 8
    assert [f.tool_id for f in hybrid.fuse([], [(5, 0.5), (6, 0.4)], limit=8)] == [5, 6]
    assert hybrid.fuse([], [], limit=8) == []
    assert hybrid.fuse([(1, 1.0)], [(1, 0.5)], limit=0) == []


def test_equal_scores_keep_the_lexical_order() -> None:
    fused = hybrid.fuse([(4, 1.0), (5, 1.0), (6, 1.0)], [], limit=3)
    assert [f.tool_id for f in fused] == [4, 5, 6]


def test_the_service_boost_lifts_a_sibling_of_the_best_match() -> None:
    lexical = [(1, 10.0), (2, 6.0), (3, 6.0)]
    semantic = [(1, 0.9), (2, 0.5), (3, 0.5)]
    # 2 and 3 tie without the boost; 3 shares a service with the winner, 2 does not.
    fused = hybrid.fuse(lexical, semantic, limit=3, toolkit_of={1: 7, 2: 8, 3: 7})
    assert [f.tool_id for f in fused] == [1, 3, 2]


def test_the_list_whose_best_candidate_stands_out_gets_more_say() -> None:
    # Lexical: one tool far ahead of the rest (a rare word of its name); semantic: evenly spread.
    sure = [(1, 10.0)] + [(i, 1.0) for i in range(2, 11)]
    flat = [(i, 0.50 - 0.01 * (i - 11)) for i in range(11, 21)]
    assert hybrid.fuse(sure, flat, limit=1)[0].tool_id == 1
    assert hybrid.fuse(sure, flat, limit=1, by_confidence=False)[0].tool_id == 11
    # The other way round: a semantic match that stands out beats a flat lexical list.
    flat_lexical = [(i, 10.0 - 0.5 * (i - 11)) for i in range(11, 21)]
    sure_semantic = [(1, 0.9)] + [(i, 0.3) for i in range(2, 11)]
    assert hybrid.fuse(flat_lexical, sure_semantic, limit=1)[0].tool_id == 1


def test_a_list_without_spread_keeps_a_little_say() -> None:
    # A single lexical hit has a z-score of 0; its side still counts, and nothing divides by zero.
    fused = hybrid.fuse([(1, 5.0)], [(2, 0.6), (1, 0.55), (3, 0.1)], limit=3)
    assert [f.tool_id for f in fused] == [2, 1, 3]
    assert all(math.isfinite(f.score) for f in fused)
    equal = hybrid.fuse([(4, 1.0), (5, 1.0)], [(5, 0.5), (4, 0.5)], limit=2)
    assert [f.tool_id for f in equal] == [4, 5]


def test_each_fused_score_is_the_sum_of_its_words_meaning_and_service_terms() -> None:
    lexical = [(1, 10.0), (2, 6.0), (3, 2.0)]
    semantic = [(3, 0.9), (1, 0.5), (4, 0.4)]
    fused = hybrid.fuse(lexical, semantic, limit=4, toolkit_of={1: 7, 2: 8, 3: 7, 4: 9})
    for f in fused:
        assert f.lexical_part is not None and f.semantic_part is not None and f.service_part is not None
        assert math.isclose(f.lexical_part + f.semantic_part + f.service_part, f.score, abs_tol=1e-9)
    by_id = {f.tool_id: f for f in fused}
    assert by_id[1].lexical_part > by_id[3].lexical_part  # first by words
    assert by_id[3].semantic_part > by_id[1].semantic_part  # first by meaning
    assert by_id[3].service_part == by_id[1].service_part  # one service, one lift: its best's
    assert by_id[2].service_part != by_id[1].service_part  # a service of its own gets its own lift
    plain = hybrid.fuse(lexical, semantic, limit=4)
    assert all(f.service_part == 0.0 for f in plain)


def test_the_usage_term_is_bounded_smoothed_and_nothing_without_observations() -> None:
    lexical = [(1, 9.0), (2, 8.5), (3, 2.0)]
    semantic = [(1, 0.8), (2, 0.78), (3, 0.3)]
    plain = hybrid.fuse(lexical, semantic, limit=3)
    # the boost on with nothing logged for this query: the same ranking, the same scores
    assert hybrid.fuse(lexical, semantic, limit=3, usage=hybrid.usage_prior(0, {})) == [
        dataclasses.replace(f, usage_part=0.0) for f in plain
    ]
    assert hybrid.usage_prior(5, {}) == {}
    # one call after one search is worth a third of the ceiling; many calls approach it
    assert hybrid.usage_prior(1, {2: 1}) == {2: hybrid.USAGE_BOOST / 3}
    assert hybrid.usage_prior(1000, {2: 1000})[2] < hybrid.USAGE_BOOST
    used = hybrid.fuse(lexical, semantic, limit=3, usage=hybrid.usage_prior(4, {2: 4}))
    assert [f.tool_id for f in used][:2] == [2, 1]  # a near second, called every time, is lifted
    assert used[0].usage_part is not None and 0 < used[0].usage_part < hybrid.USAGE_BOOST
    # only candidates the query found are reordered: an observed tool that is not one stays out
    assert {f.tool_id for f in hybrid.fuse(lexical, semantic, limit=5, usage={99: 1.0})} == {1, 2, 3}
    far = hybrid.fuse(lexical, semantic, limit=3, usage=hybrid.usage_prior(1, {3: 1}))
    assert far[-1].tool_id == 3  # a bounded term cannot lift a poor match over clear winners


def test_asks_lift_a_tool_one_ask_finds_and_add_up() -> None:
    # The whole request leans to tools 1 and 2; its second ask clearly wants tool 9, which the
    # whole request's lists rank low (or miss: tool 8 only an ask found).
    lexical = [(1, 9.0), (2, 8.0), (3, 6.0), (9, 5.0)]
    semantic = [(1, 0.8), (2, 0.7), (3, 0.6), (9, 0.5)]
    first_ask = ([(1, 9.0), (2, 3.0)], [(1, 0.9), (2, 0.4)])
    second_ask = ([(9, 9.0), (8, 2.0), (3, 1.0)], [(9, 0.9), (8, 0.5), (3, 0.1)])
    plain = [f.tool_id for f in hybrid.rank(lexical, semantic, limit=5)]
    assert plain.index(9) == 3
    ranked = hybrid.rank(lexical, semantic, [first_ask, second_ask], limit=6)
    ids = [f.tool_id for f in ranked]
    assert ids[0] == 1 and ids.index(9) < plain.index(9)
    assert 8 in ids  # found by an ask alone, scored with the whole request's lowest
    for f in ranked:
        assert f.ask_part is not None
        assert f.lexical_part is not None and f.semantic_part is not None and f.service_part is not None
        total = f.lexical_part + f.semantic_part + f.service_part + f.ask_part
        assert math.isclose(total, f.score, abs_tol=1e-9)
    # one ask is no split: the plain fusion, no ask term
    assert hybrid.rank(lexical, semantic, [second_ask], limit=5) == hybrid.fuse(lexical, semantic, limit=5)


def test_asks_keep_the_usage_term_last_and_the_limit() -> None:
    lexical = [(1, 9.0), (2, 8.9), (3, 1.0)]
    semantic = [(1, 0.8), (2, 0.79), (3, 0.1)]
    asks = [([(1, 5.0), (2, 4.9)], [(1, 0.5), (2, 0.49)]), ([(2, 5.0), (1, 4.9)], [(2, 0.5), (1, 0.49)])]
    used = hybrid.rank(lexical, semantic, asks, limit=2, usage={3: 5.0})
    assert [f.tool_id for f in used] == [3, 1]  # the usage term is added after the asks'
    assert used[0].usage_part == 5.0 and used[1].usage_part == 0.0
    assert len(hybrid.rank(lexical, semantic, asks, limit=0)) == 0
