"""Shared fixtures: a real appliance on loopback and a real HTTP upstream."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import Appliance, PetstoreUpstream, running_appliance


@pytest.fixture
def petstore() -> Iterator[PetstoreUpstream]:
    with PetstoreUpstream() as upstream:
        yield upstream


@pytest.fixture
def appliance(tmp_path: Path) -> Iterator[Appliance]:
    with running_appliance(tmp_path / "data") as app:
        yield app
