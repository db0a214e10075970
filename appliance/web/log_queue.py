"""Log records leave the event loop through a queue; a thread writes them out.

A tool call logs one line. Written from the loop, that line is a blocking ``write`` to
whatever stderr is (a pipe to journald, a supervisor, a test harness): whenever the reader
falls behind and the pipe fills, every request in flight waits with it. Under the overhead
benchmark's load that was the largest single wait in a call. The records and their text
are unchanged; only the writing moves to ``QueueListener``'s thread.
"""

from __future__ import annotations

import logging
import queue
from logging.handlers import QueueHandler, QueueListener


class LogQueue:
    def __init__(self) -> None:
        self._listener: QueueListener | None = None
        self._handler: QueueHandler | None = None
        self._moved: list[logging.Handler] = []

    def start(self) -> None:
        """Put the root logger's handlers behind a queue (nothing to do without handlers)."""
        root = logging.getLogger()
        if self._listener is not None or not root.handlers:
            return
        records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        self._moved = list(root.handlers)
        for handler in self._moved:
            root.removeHandler(handler)
        self._handler = QueueHandler(records)
        root.addHandler(self._handler)
        self._listener = QueueListener(records, *self._moved, respect_handler_level=True)
        self._listener.start()

    def stop(self) -> None:
        """Write out what is queued and give the handlers back to the root logger."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        root = logging.getLogger()
        if self._handler is not None:
            root.removeHandler(self._handler)
        listener.stop()  # drains the queue first
        for handler in self._moved:
            root.addHandler(handler)
        self._moved = []
