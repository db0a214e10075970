"""Screenshots of every main console page, from a seeded appliance, in Debian's Chromium.

``make screenshots`` runs ``python -m tests.support.screenshots docs/console`` (the PNGs the
README and docs/console.md show); ``tests/e2e/test_console_screenshots.py`` runs the same
driver into a temporary folder and checks what it took. The appliance is a real
``toolspoke serve`` in a temporary data directory, seeded through its own API and CLI: the
fixture specs of ``tests/fixtures/openapi`` (the petstores), a stdio MCP server whose tools
wait for approval, a user, an agent with a grant, and a few calls through MCP. The browser
is ``/usr/bin/chromium`` driven by Playwright; nothing is downloaded.

A page is a ``Shot``: its file name, the path it opens and, when it needs one, what to do
on the page first (fill a form, press a button). Add one to ``SHOTS`` to add a page.
"""

from __future__ import annotations

import json
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support import tiny_stdio
from tests.support.clients import modern_tools_call
from tests.support.servers import REPO, Appliance, import_mcp, running_appliance, sandbox_reading

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
VIEWPORT = {"width": 1280, "height": 900}
WAIT_MS = 20_000
SPECS = REPO / "tests" / "fixtures" / "openapi"
TOOLS = [
    {"name": "lookup", "description": "Look a word up in the dictionary.", "inputSchema": {"type": "object"}},
    {"name": "define", "description": "Define a word, with examples.", "inputSchema": {"type": "object"}},
    {"name": "rhyme", "description": "Words that rhyme with a word.", "inputSchema": {"type": "object"}},
]


def _paste_petstore(page: Any) -> None:
    page.get_by_label("Slug").fill("petstore-preview")
    page.get_by_label("or paste it").fill((SPECS / "oai-v3.0-petstore.yaml").read_text())
    page.get_by_role("button", name="Dry run").click()
    page.wait_for_load_state("load")


def _open_agent(page: Any) -> None:
    page.get_by_role("link", name="helper-bot", exact=True).first.click()
    page.wait_for_load_state("load")


def _open_grant(page: Any) -> None:
    _open_agent(page)
    page.get_by_role("link", name="Manage the tools of demo").click()
    page.wait_for_load_state("load")


# A seeded user's key (``seed`` keeps it here): the "My account" shot signs in as them.
USER_KEYS: dict[str, str] = {}


def _as_ann(page: Any) -> None:
    """Sign out, sign in as ann, open her own page: the session is hers afterwards, so this
    shot comes last."""
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/console/sign-in")
    page.get_by_label("Your API key").fill(USER_KEYS["ann"])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/toolkits")
    page.get_by_role("link", name="My account", exact=True).click()
    page.wait_for_load_state("load")


@dataclass(frozen=True)
class Shot:
    name: str  # the PNG's file name, without .png
    path: str
    then: Callable[[Any], None] | None = None  # what to do on the page before the picture
    signed_in: bool = True


SHOTS = [
    Shot("sign-in", "/console/sign-in", signed_in=False),
    Shot("toolkits", "/console/toolkits"),
    Shot("toolkit-openapi", "/console/toolkits/default/petstore"),
    Shot("toolkit-mcp-pending", "/console/toolkits/default/words"),
    Shot("import", "/console/import"),
    Shot("import-dry-run", "/console/import", then=_paste_petstore),
    Shot("overview", "/console/overview"),
    Shot("agents", "/console/agents"),
    Shot("agent", "/console/agents", then=_open_agent),
    Shot("users", "/console/users"),
    Shot("search", "/console/search?q=list+the+pets"),
    Shot("grant", "/console/agents", then=_open_grant),
    Shot("settings", "/console/settings"),
    Shot("my-account", "/console/users", then=_as_ann),  # last: it signs in as ann
]


@dataclass(frozen=True)
class Taken:
    name: str
    file: Path
    status: int
    title: str
    error_page: bool


def _api(app: Appliance, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    done = httpx.request(
        method,
        app.base_url + "/api/v1" + path,
        json=body,
        headers={"Authorization": f"Bearer {app.key}"},
        timeout=60,
    )
    assert done.status_code in (200, 201), (path, done.status_code, done.text[:300])
    return dict(done.json())


def seed(app: Appliance, tools_dir: Path, env: dict[str, str]) -> None:
    """A few toolkits, a user, an agent with a grant and some calls."""
    for slug, name in (
        ("petstore", "oai-v2.0-petstore.json"),
        ("petstore-expanded", "oai-v2.0-petstore-expanded.json"),
        ("gotify", "gotify-spec.json"),
    ):
        spec = json.loads((SPECS / name).read_text())
        _api(
            app,
            "POST",
            "/toolkits/openapi",
            {"slug": slug, "spec": spec, "base_url": "http://127.0.0.1:9/v1"},
        )
    tools_dir.mkdir(parents=True, exist_ok=True)
    listed = tools_dir / "words.json"
    listed.write_text(json.dumps(TOOLS))
    connection = tiny_stdio.connection(listed)
    import_mcp(
        app,
        "--slug",
        "words",
        "--require-approval",
        "--",
        connection["command"],
        *connection["args"],
        env=env,
    )
    ann = _api(app, "POST", "/users", {"name": "ann"})
    USER_KEYS["ann"] = _api(app, "POST", "/keys", {"name": "laptop", "user_id": ann["id"]})["key"]
    _api(app, "POST", "/agents", {"name": "ann-bot", "user_id": ann["id"]})
    _api(app, "POST", f"/users/{ann['id']}/credits", {"amount": 20, "note": "welcome"})
    agent = _api(app, "POST", "/agents", {"name": "helper-bot"})
    _api(app, "POST", "/grants", {"agent_id": agent["id"], "toolkit": "demo"})
    for tool, arguments in (
        ("demo__createNote", {"body": {"title": "Groceries"}}),
        ("demo__listNotes", {}),
        ("petstore__listPets", {}),
    ):
        headers, body = modern_tools_call(app.key, tool, arguments)
        httpx.post(app.mcp_url, json=body, headers=headers, timeout=30)  # an upstream failure is history too


@contextmanager
def seeded_appliance(folder: Path) -> Iterator[Appliance]:
    reading = sandbox_reading(folder / "tools")
    with running_appliance(folder / "data", env={**reading, "TOOLSPOKE_HEALTH_INTERVAL_S": "0"}) as app:
        seed(app, folder / "tools", reading)
        yield app


def sign_in(page: Any, app: Appliance) -> None:
    page.goto(app.base_url + "/console/sign-in")
    page.get_by_label("Your API key").fill(app.key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/toolkits")


@contextmanager
def browser_page() -> Iterator[Any]:
    """A page of Debian's Chromium (a fresh profile), closed with it."""
    from playwright import sync_api

    with tempfile.TemporaryDirectory() as profile, sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), args=ARGS, headless=True, viewport=VIEWPORT
        )
        context.set_default_timeout(WAIT_MS)
        try:
            yield context.new_page()
        finally:
            context.close()


def shoot(page: Any, app: Appliance, shot: Shot, out: Path) -> Taken:
    """One page as ``out/<name>.png`` (the page signed in already when the shot needs it)."""
    out.mkdir(parents=True, exist_ok=True)
    answer = page.goto(app.base_url + shot.path)
    status = answer.status if answer is not None else 0
    if shot.then is not None:
        shot.then(page)
        status = 200 if page.locator("main").count() else 0
    file = out / f"{shot.name}.png"
    page.screenshot(path=str(file), full_page=True)
    error_page = page.locator("main p.alert").count() > 0 and page.locator("main form").count() == 0
    return Taken(shot.name, file, status, page.title(), error_page)


def take(app: Appliance, out: Path, shots: list[Shot] = SHOTS) -> list[Taken]:
    """Every shot of ``shots`` as ``out/<name>.png``; what each page answered."""
    out.mkdir(parents=True, exist_ok=True)
    taken = []
    with browser_page() as page:
        signed = False
        for shot in sorted(shots, key=lambda s: s.signed_in):  # the signed-out ones first
            if shot.signed_in and not signed:
                sign_in(page, app)
                signed = True
            taken.append(shoot(page, app, shot, out))
    return taken


def distinct_colours(png: bytes, *, enough: int = 3) -> int:
    """How many distinct byte values the decoded image rows hold (a blank page: one or two)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    at, data = 8, b""
    while at < len(png):
        length = int.from_bytes(png[at : at + 4], "big")
        kind = png[at + 4 : at + 8]
        if kind == b"IDAT":
            data += png[at + 8 : at + 8 + length]
        at += 12 + length
    return min(enough, len(set(zlib.decompress(data)[:2_000_000])))


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else "docs/console")
    if not CHROMIUM.exists():
        print(f"{CHROMIUM} is missing: run `make debs` (installs Debian's chromium)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as folder, seeded_appliance(Path(folder)) as app:
        for shot in take(app, out):
            print(f"{shot.file}  {shot.status}  {shot.title}")
            if shot.status != 200 or shot.error_page:
                print(f"{shot.name}: the page did not render", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
