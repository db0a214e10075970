"""The storage seam: what the rooms and the gateway may ask of a database, engine aside.

SQLite (``db/connection.py``) is the one implementation; a second engine would implement
these protocols and nothing above ``db/`` would change.

The unit of work is a *function over a reader or a writer*: a synchronous callable that
takes a ``Reader`` (or a ``Writer``) and runs where the connection lives, all of it in one
hand-off (one thread hop for SQLite), however many statements it runs. Rooms expose such
functions (named ``…_in`` by convention); the gateway runs one of them per hop with
``Store.reading`` or ``Store.writing``. The per-statement async API (``AsyncReader``,
``AsyncWriter``) remains for the cold paths (admin, CLI), one hop per statement.

The memo (``db/memo.py``) is part of the seam: ``Reader.memo`` is a dict valid until the
database's cache generation moves (``db/generation.py``), ``Store.memo()`` the same for the
event loop's side, without any hop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
Params = Sequence[Any] | dict[str, Any]


class Reader(Protocol):
    """A connection inside a function run on it: statements answer at once."""

    memo: dict[Any, Any]

    def all(self, sql: str, params: Params = ()) -> list[Any]: ...

    def one(self, sql: str, params: Params = ()) -> Any: ...

    def chunks(self, sql: str, params: Params = (), size: int = 4096) -> Iterator[list[Any]]:
        """The rows of one statement, ``size`` at a time (one snapshot, never all held at once)."""
        ...


class Writer(Reader, Protocol):
    """A reader inside a write transaction, committed when its function returns."""

    def run(self, sql: str, params: Params = ()) -> int: ...

    def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...


class AsyncReader(Protocol):
    """A connection lent to one task: each statement is one hop; ``batch`` runs a function."""

    async def all(self, sql: str, params: Params = ()) -> list[Any]: ...

    async def one(self, sql: str, params: Params = ()) -> Any: ...

    async def batch(self, fn: Callable[[Reader], T]) -> T: ...


class AsyncWriter(AsyncReader, Protocol):
    async def run(self, sql: str, params: Params = ()) -> int: ...

    async def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...


class Store(Protocol):
    """The database as the rest of the code uses it."""

    generation: int  # this process's commits so far (a room's own caches compare it)

    async def reading(self, fn: Callable[[Reader], T]) -> T: ...

    async def writing(self, fn: Callable[[Writer], T]) -> T: ...

    def write_now(self, fn: Callable[[Writer], T]) -> tuple[T] | None: ...

    def read(self) -> contextlib.AbstractAsyncContextManager[AsyncReader]: ...

    def write(self) -> contextlib.AbstractAsyncContextManager[AsyncWriter]: ...

    def memo(self) -> dict[Hashable, Any]: ...

    def one_look(self) -> contextlib.AbstractContextManager[None]: ...

    async def cached(self, key: Hashable, load: Callable[[Any], Awaitable[T]]) -> T: ...

    async def remembered(self, key: Hashable, fn: Callable[[Reader], T]) -> T: ...
