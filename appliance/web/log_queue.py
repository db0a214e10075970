"""Log records leave the event loop through a queue; a thread writes them out.

A tool call logs one line. Written from the loop, that line is a blocking ``write`` to
whatever stderr is (a pipe to journald, a supervisor, a test harness): whenever the reader
falls behind and the pipe fills, every request in flight waits with it. The records and
their text are unchanged; only the writing moves to a thread.

The thread polls (every ``interval_s``) instead of being woken per record, as
``logging.handlers.QueueListener`` is: on a busy machine each wake-up hands the GIL over
and cost the loop about a millisecond per line, more than the write it saved.
"""

from __future__ import annotations

import collections
import logging
import threading
from logging.handlers import QueueHandler
from typing import Any


class _Buffer:
    """The queue ``QueueHandler`` puts into: a deque (appending wakes nobody)."""

    def __init__(self) -> None:
        self.records: collections.deque[logging.LogRecord] = collections.deque()

    def put_nowait(self, record: Any) -> None:
        self.records.append(record)


class LogQueue:
    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self._buffer = _Buffer()
        self._handler: QueueHandler | None = None
        self._moved: list[logging.Handler] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Put the root logger's handlers behind the queue (nothing to do without handlers)."""
        root = logging.getLogger()
        if self._thread is not None or not root.handlers:
            return
        self._moved = list(root.handlers)
        for handler in self._moved:
            root.removeHandler(handler)
        self._handler = QueueHandler(self._buffer)  # type: ignore[arg-type]
        root.addHandler(self._handler)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="toolspoke-log", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._drain()
        self._drain()

    def _drain(self) -> None:
        records = self._buffer.records
        while records:
            record = records.popleft()
            for handler in self._moved:
                if record.levelno >= handler.level:
                    handler.handle(record)

    def stop(self) -> None:
        """Write out what is queued and give the handlers back to the root logger."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        root = logging.getLogger()
        if self._handler is not None:
            root.removeHandler(self._handler)
        self._stop.set()
        thread.join(timeout=5)
        self._drain()  # anything logged between the thread's last pass and the removal
        for handler in self._moved:
            root.addHandler(handler)
        self._moved = []
