"""The serving process's log lines leave the event loop through a queue, unchanged."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from appliance.web.log_queue import LogQueue


@pytest.fixture
def root_stream() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.handlers = [handler]
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.handlers, root.level = saved, level


def test_queued_lines_are_written_as_before_and_all_of_them_by_stop(root_stream: io.StringIO) -> None:
    logs = LogQueue()
    logs.start()
    while_queued = [type(h).__name__ for h in logging.getLogger().handlers]
    log = logging.getLogger("appliance.test")
    for i in range(100):
        log.info("call tool=%s n=%d", "t", i)
    try:
        raise ValueError("boom")
    except ValueError:
        log.error("unhandled error %s", "abc", exc_info=True)
    logs.stop()
    lines = root_stream.getvalue().splitlines()
    assert lines[0] == "INFO appliance.test: call tool=t n=0"
    assert lines[99] == "INFO appliance.test: call tool=t n=99"
    assert lines[100] == "ERROR appliance.test: unhandled error abc"
    assert "ValueError: boom" in root_stream.getvalue()  # the traceback travels too
    assert "QueueHandler" in while_queued and "StreamHandler" not in while_queued
    after = [type(h).__name__ for h in logging.getLogger().handlers]
    assert "StreamHandler" in after and "QueueHandler" not in after


def test_lines_below_a_handlers_level_stay_filtered(root_stream: io.StringIO) -> None:
    logging.getLogger().handlers[0].setLevel(logging.WARNING)
    logs = LogQueue()
    logs.start()
    logging.getLogger("appliance.test").info("quiet")
    logging.getLogger("appliance.test").warning("loud")
    logs.stop()
    assert root_stream.getvalue() == "WARNING appliance.test: loud\n"
