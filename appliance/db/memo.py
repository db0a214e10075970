"""Remembered lookups, valid for one cache generation (``db/generation.py``).

Two memos, both cleared when the generation moves:

- ``Memo``: a scratch dict for one generation. Each connection carries one (``Reader.memo``):
  a function running on that connection reads the generation first, on the same
  connection and in the same hop, and gets the dict for it. Rooms keep derived figures in it
  (a caller's scope, token frequencies).
- ``LoopMemo``: the process's memo, looked up on the event loop (a few µs, no thread hop),
  which lets a call authenticate and resolve its tool without any hop when nothing changed.
  It reads the generation at most once per turn of the loop, and ``pin`` lets one request
  keep the memo it took first, however many turns it spans.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Hashable, Iterator
from typing import Any

log = logging.getLogger(__name__)


class Memo:
    """A dict that is handed out fresh whenever the generation it is asked for moves."""

    def __init__(self) -> None:
        self.generation: int | None = None
        self.values: dict[Any, Any] = {}

    def at(self, generation: int) -> dict[Any, Any]:
        if generation != self.generation:
            self.generation = generation
            self.values = {}
        return self.values


class LoopMemo:
    """The memo of the event loop's side: ``get()`` for the dict, ``pin()`` for a request.

    ``look`` reads the current generation where it is cheapest (``Database._look``); it may
    return None (unknown), and then nothing remembered is trusted: ``get`` hands out an empty
    dict that nobody else sees.
    """

    def __init__(self, look: Callable[[], int | None], failure: type[BaseException]):
        self._look = look
        self._failure = failure  # what a failed look raises (sqlean.Error): logged, not raised
        self._memo = Memo()
        self._checked = False
        # The request tasks inside ``pin`` and the dict each took: a task's own state, kept
        # here by task rather than in a ContextVar, so that a task started inside the block
        # (which would inherit a ContextVar) looks for itself.
        self._pinned: dict[asyncio.Task[Any], dict[Hashable, Any]] = {}

    def get(self) -> dict[Hashable, Any]:
        """The dict for the current generation.

        One look per turn of the event loop (a request asks four or five times, ~12 µs a
        look): nothing this process commits can land before the next turn, and another
        process's commit could as well have landed just after the look. A value read after
        ``get()`` was called is safe to store in the dict: if the database moved meanwhile,
        the next ``get()`` hands out a fresh one.
        """
        if self._pinned:
            pinned = self._pinned.get(asyncio.current_task())  # type: ignore[arg-type]
            if pinned is not None:
                return pinned
        if self._checked:
            return self._memo.values
        try:
            generation = self._look()
        except self._failure as exc:
            log.warning("cache generation probe failed, memo skipped: %s", exc)
            generation = None
        if generation is None:
            return {}
        values = self._memo.at(generation)
        try:
            asyncio.get_running_loop().call_soon(self._unchecked)
            self._checked = True
        except RuntimeError:
            pass  # no loop running (a synchronous caller): look every time
        return values

    def _unchecked(self) -> None:
        self._checked = False

    @contextlib.contextmanager
    def pin(self) -> Iterator[None]:
        """Within this block, this task's ``get()`` is the dict it got on entering.

        A request asks for the memo four or five times (key, tool, credential, connection);
        one look per request is enough: a change committed before the request arrived is
        seen by it, as before.
        """
        task = asyncio.current_task()
        if task is None:
            yield  # no task to pin for (a synchronous caller): every get() looks
            return
        outer = self._pinned.pop(task, None)  # nested: this block takes its own look
        self._pinned[task] = self.get()
        try:
            yield
        finally:
            if outer is None:
                del self._pinned[task]
            else:
                self._pinned[task] = outer

    def clear(self) -> None:
        self._memo = Memo()
        self._checked = False
