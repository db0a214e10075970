"""A long request's asks (search/asks.py): where it splits, what it keeps, and its cost."""

from __future__ import annotations

import time

from appliance.search.asks import MAX_ASKS, MIN_WORDS, asks_of


def texts(query: str) -> list[str]:
    return [a.text for a in asks_of(query)]


def test_sentences_and_joined_clauses_become_asks() -> None:
    query = (
        "I'm planning a trip to Paris next week. Find me flights from Berlin, "
        "and also check the weather forecast there. Convert the prices to euros as well as pounds!"
    )
    assert texts(query) == [
        "I'm planning a trip to Paris next week.",
        "Find me flights from Berlin",
        "check the weather forecast there.",
        "Convert the prices to euros",
    ]


def test_a_single_ask_or_short_pieces_give_nothing() -> None:
    assert asks_of("list my open pull requests") == []
    assert asks_of("") == [] and asks_of("   \n\n  ") == []
    # "Ethereum" alone says too little to rank by: one ask is left, so none
    assert asks_of("Tell me the correlation between Bitcoin and Ethereum") == []
    assert asks_of("Hi. Thanks. Bye.") == []
    assert all(len(a.split()) >= MIN_WORDS for a in texts("a b c. d e. f g h. i j k l."))


def test_lines_split_and_joiners_are_words_not_substrings() -> None:
    assert texts("read the config file\nwrite the new settings back") == [
        "read the config file",
        "write the new settings back",
    ]
    # "android", "thence", "brand" hold joiners inside words: no split there
    assert asks_of("install the android brand app thence onwards") == []
    # joiners in any case, several in a row, count once
    assert texts("Open the report AND THEN email it to finance") == ["Open the report", "email it to finance"]


def test_at_most_the_longest_asks_are_kept_in_their_order() -> None:
    sentences = [
        "Hi there friend.",
        "Please find every open invoice from last quarter for the Acme account.",
        "Thanks a lot.",
        "Then export the invoices to a spreadsheet in my drive folder.",
        "Send the spreadsheet to the finance team by email today.",
        "Also remind me about it tomorrow morning please.",
        "Cheers for that.",
    ]
    got = texts(" ".join(sentences))
    assert len(got) == MAX_ASKS
    assert got == [
        sentences[1],
        sentences[3].removeprefix("Then "),
        sentences[4],
        sentences[5].removeprefix("Also "),
    ]


def test_each_ask_knows_where_it_stands_in_the_request() -> None:
    query = "Find me flights from Berlin,\r\n  and also\tcheck the weather there.  Book a table for two"
    asks = asks_of(query)
    assert [a.text for a in asks] == [
        "Find me flights from Berlin",
        "check the weather there.",
        "Book a table for two",
    ]
    for ask in asks:
        # the span covers the ask's own words, as they stand (spacing and a trailing comma kept)
        assert " ".join(query[ask.start : ask.end].split()).rstrip(",") == ask.text


def test_work_stays_linear_on_hostile_text() -> None:
    # 100 KB of joiners, of one long word, of sentence ends, of "as well as" near-misses
    for text in ("and " * 25_000, "x" * 100_000, ". " * 50_000, "as well " * 12_500, "a b c. " * 14_000):
        started = time.perf_counter()
        asks = asks_of(text)
        # Linear work takes milliseconds here; quadratic work on 100 KB would take minutes. The
        # bound leaves room for a loaded machine (1.2 s seen with the suite on both cores).
        assert time.perf_counter() - started < 5.0
        assert len(asks) <= MAX_ASKS
