"""``make screenshots``'s driver (tests/support/screenshots.py) run into a temporary folder:
a seeded ``toolspoke serve``, Debian's Chromium, every page of ``SHOTS`` taken; each must
have answered 200, be no error page and not be blank (its PNG holds more than one colour).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import screenshots
from tests.support.servers import Appliance, running_appliance, sandbox_reading

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-shots")


@pytest.fixture(scope="module")
def app(folder: Path) -> Iterator[Appliance]:
    env = {**sandbox_reading(folder / "tools"), "TOOLSPOKE_HEALTH_INTERVAL_S": "0"}
    with running_appliance(folder / "data", env=env) as running:
        yield running


@pytest.fixture(scope="module")
def seeded(app: Appliance, folder: Path) -> Appliance:
    screenshots.seed(app, folder / "tools", sandbox_reading(folder / "tools"))
    return app


@pytest.fixture(scope="module")
def page(seeded: Appliance) -> Iterator[Any]:
    if not screenshots.CHROMIUM.exists():
        pytest.fail(f"{screenshots.CHROMIUM} is missing: run `make debs` (installs Debian's chromium)")
    with screenshots.browser_page() as found:
        yield found


@pytest.fixture(scope="module")
def signed_page(page: Any, seeded: Appliance) -> Any:
    screenshots.sign_in(page, seeded)
    return page


def test_the_appliance_starts(app: Appliance) -> None:
    # (first: it alone pays for the appliance's start, the next for the seed, the next for the browser)
    assert httpx.get(app.base_url + "/console/sign-in", timeout=10).status_code == 200


def test_the_seed_is_in_place(seeded: Appliance) -> None:
    listed = httpx.get(
        seeded.base_url + "/api/v1/toolkits", headers={"Authorization": f"Bearer {seeded.key}"}, timeout=10
    )
    slugs = {k["toolkit"] for k in listed.json()["toolkits"]}
    assert {"petstore", "petstore-expanded", "gotify", "words", "demo"} <= slugs, slugs


def test_the_browser_signs_in(page: Any, seeded: Appliance, folder: Path) -> None:
    shot = screenshots.shoot(page, seeded, screenshots.SHOTS[0], folder / "shots")  # before signing in
    assert shot.status == 200 and not shot.error_page and shot.title.startswith("Sign in")


@pytest.mark.parametrize("shot", [s for s in screenshots.SHOTS if s.signed_in], ids=lambda s: s.name)
def test_each_page_renders_a_picture(
    signed_page: Any, seeded: Appliance, folder: Path, shot: screenshots.Shot
) -> None:
    taken = screenshots.shoot(signed_page, seeded, shot, folder / "shots")
    assert taken.status == 200, (shot.name, taken.status)
    assert signed_page.url.startswith(seeded.base_url + shot.path.split("?")[0]), signed_page.url
    assert not taken.error_page and "toolspoke console" in taken.title, taken.title
    png = taken.file.read_bytes()
    assert len(png) > 5_000 and screenshots.distinct_colours(png) >= 3, shot.name
