"""The usage log's table (search/usage.py): queries normalised the way the boost counts them,
hostile text stored as given and read back as text, the counts the boost reads, misses read
for everyone or one user."""

from __future__ import annotations

import asyncio
from pathlib import Path

from appliance.db import Database
from appliance.search import usage
from appliance.search.usage import Searched
from tests.support.servers import REPO

MIGRATIONS = REPO / "migrations"
HOSTILE = "'); DROP TABLE search_usage; -- <script>alert(1)</script> \" OR 1=1 \x00 é"


def test_a_query_is_normalised_to_its_sorted_distinct_search_tokens() -> None:
    assert usage.normalised("List my pets!") == usage.normalised("pets: LIST, please") == "list pets"
    assert usage.normalised("getPetById") == "getpetbyid id pet"  # "get" and "by" are stop-words
    assert usage.normalised("") == usage.normalised("?!") == ""
    assert len(usage.normalised(" ".join(f"w{i}x" * 30 for i in range(100)))) <= usage.MAX_KEY


def test_rows_round_trip_hostile_text_and_feed_the_boosts_counts(tmp_path: Path) -> None:
    async def main() -> None:
        db = Database(tmp_path / "t.db")
        await db.open(MIGRATIONS)
        try:
            rows = [
                Searched(1.0, 1, 10, "a (u1)", "list pets", ["k__a", "k__b"], "k__b", 2, 2),
                Searched(2.0, 1, 10, "a (u1)", "pets list!", ["k__a", "k__b"], "k__b", 2, 2),
                Searched(3.0, 1, 10, "a (u1)", "LIST pets", ["k__a"]),
                Searched(4.0, 2, None, "bob", HOSTILE, ["k__<b>"]),
            ]
            assert await db.writing(lambda w: usage.insert_in(w, rows)) == 4
            assert await db.reading(lambda r: usage.observed_in(r, "Pets, list")) == (3, {2: 2})
            assert await db.reading(lambda r: usage.observed_in(r, "nothing like it")) == (0, {})
            everyone = await db.reading(lambda r: usage.misses_in(r, user_id=None, limit=10))
            assert [m.query for m in everyone] == [HOSTILE, "LIST pets"]
            assert everyone[0].results == ["k__<b>"] and everyone[0].principal == "bob"
            ones = await db.reading(lambda r: usage.misses_in(r, user_id=1, limit=10))
            assert [m.query for m in ones] == ["LIST pets"]
            called = await db.reading(lambda r: usage.called_in(r, limit=10))
            assert [(q, name) for _, q, name in called] == [("list pets", "k__b"), ("pets list!", "k__b")]
            assert await db.reading(usage.count_in) == 4
            assert await db.reading(usage.misses_count_in) == 2
        finally:
            await db.close()

    asyncio.run(main())
