"""The console's import page for a Lore knowledge base and for tools inferred from endpoint
examples (web/console/imports.py over gateway/admin/imports.py, which calls the same
``lore.import_lore`` and ``examples_import.import_examples`` as the admin API), in process.

Each is a dry run first, which stores nothing (the catalogue's counts before and after),
then a save of exactly that draft: a Lore toolkit whose ``search_lore`` finds a passage
through the bridge (an SDK client on ``/mcp``); inferred tools stored pending, invisible to
agents, approved one by one (approve-all refused, the API's rule), their credential sealed
and never shown. Refusals name the form's field and store nothing; a POST without the CSRF
token is refused; file names and HAR URLs carrying script are shown as text; every new
control is labelled.
"""

from __future__ import annotations

import io
import json
import re
import secrets
import zipfile
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from appliance.catalogue import store
from appliance.gateway.admin import imports as admin_imports
from tests.support import hostile_pages, worlds
from tests.support.accounts import as_key, run
from tests.support.clients import connect
from tests.support.console_pages import CSRF, unlabelled
from tests.support.console_pages import signed_in as signed_in_at
from tests.support.inprocess import InProcess, served_in_process
from tests.support.leaks import assert_no_leak
from tests.support.worlds import World

pytestmark = pytest.mark.inprocess

WORLD = World(users=[False, False], agents=[], kits=[])
API = "http://127.0.0.1:9"  # never called: only the examples' shapes are imported
DRAFT = re.compile(r'name="draft" value="([^"]*)"')


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    env = {
        "TOOLSPOKE_DEMO": "0",
        "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
        "TOOLSPOKE_IMPORTS_PER_HOUR": "1000",
        "ALLOWED_TOOL_CIDRS": "127.0.0.1/32",
    }
    with served_in_process(tmp_path_factory.mktemp("console-kb") / "data", env=env) as served:
        served.ctx = served.run(worlds.build(served.rt, WORLD))  # type: ignore[attr-defined]
        yield served


def user_key(app: InProcess, i: int) -> str:
    return app.ctx.user_keys[i]  # type: ignore[attr-defined, no-any-return]


def signed_in(app: InProcess, key: str) -> tuple[httpx.Client, str]:
    return signed_in_at(app, key, landing="/console/import")


def counts(app: InProcess) -> tuple[int, int]:
    async def both() -> tuple[int, int]:
        async with app.rt.db.read() as conn:
            kits = await conn.one("SELECT count(*) AS n FROM toolkits")
            return int(kits["n"]), await store.tool_count(conn)

    return app.run(both())


def draft_of(page: httpx.Response) -> str:
    found = DRAFT.search(page.text)
    assert found, page.text[:600]
    return found.group(1)


def alert(page: httpx.Response) -> str:
    found = re.search(r'role="alert"[^>]*>([^<]*)<', page.text)
    assert found, page.text[-800:]
    return found.group(1)


def invalid(page: httpx.Response) -> list[str]:
    """The ids of the form's controls marked as the field at fault."""
    return re.findall(r'id="([^"]+)"[^>]*aria-invalid="true"', page.text)


def archive(files: dict[str, bytes | str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, body in files.items():
            z.writestr(name, body)
    return out.getvalue()


HANDBOOK = {
    "runbooks/deploy.md": "# Deploy\n\n## Rollback\n\nTo roll back, run the quokka lever twice.\n",
    "faq.html": "<html><head><title>FAQ</title></head><h1>Questions</h1><p>Ask the desk.</p></html>",
    "notes.txt": "Plain notes about nothing in particular.",
    "logo.png": b"\x89PNG\r\n\x1a\n\x00\x00binary",
}


def lore_form(csrf: str, slug: str, **more: str) -> dict[str, str]:
    return {"csrf": csrf, "slug": slug, "title": "Team handbook", **more}


def search_lore(app: InProcess, tool: str, query: str) -> list[dict[str, Any]]:
    """``tool`` run through the bridge (``use_tool``) with its owner's key (user 0)."""

    async def go() -> Any:
        async with connect(as_key(app, user_key(app, 0))) as client:
            return await client.call_tool("use_tool", {"tool": tool, "input": {"query": query}})

    result = run(go())
    assert result.is_error is False, result.content[0].text
    passages: list[dict[str, Any]] = json.loads(result.content[0].text)["passages"]
    return passages


# -- the page ---------------------------------------------------------------------------------


def test_the_new_forms_are_labelled_and_examples_are_an_admins(app: InProcess) -> None:
    admin, _ = signed_in(app, app.key)
    for mode in ("lore", "examples"):
        page = admin.get("/console/import", params={"mode": mode}).text
        assert f'action="/console/import/{mode}"' in page
        assert unlabelled(page) == [], (mode, unlabelled(page))
    ann, csrf = signed_in(app, user_key(app, 0))
    page = ann.get("/console/import").text
    assert "/console/import?mode=lore" in page and "mode=examples" not in page
    lore = ann.get("/console/import", params={"mode": "lore"}).text
    assert 'id="k-archive"' in lore and unlabelled(lore) == []
    assert 'id="e-text"' not in ann.get("/console/import", params={"mode": "examples"}).text
    # the API's rule (examples_import): a user's dry run is refused, nothing read or stored
    before = counts(app)
    refused = ann.post(
        "/console/import/examples", data={"csrf": csrf, "slug": "mine", "examples": f"curl {API}/x"}
    )
    assert refused.status_code == 403 and counts(app) == before


# -- a Lore knowledge base ----------------------------------------------------------------------


def test_a_lore_dry_run_lists_documents_and_unreadable_files_then_saves_and_search_finds_a_passage(
    app: InProcess,
) -> None:
    ann, csrf = signed_in(app, user_key(app, 0))
    data = archive(HANDBOOK)
    upload = {"archive": ("handbook.zip", data, "application/zip")}
    before = counts(app)
    dry = ann.post("/console/import/lore", data=lore_form(csrf, "handbook"), files=upload)
    assert dry.status_code == 200, dry.text[-800:]
    assert counts(app) == before  # nothing stored
    assert "Nothing has been saved" in dry.text and "over 3 documents" in dry.text
    rows = re.findall(
        r"<tr><td><code>([^<]+)</code></td><td>[^<]*</td><td>(\w+)</td><td>(\d+)</td>", dry.text
    )
    assert sorted(rows) == [
        ("faq.html", "html", "1"),
        ("notes.txt", "text", "1"),
        ("runbooks/deploy.md", "markdown", "2"),
    ]
    assert "<code>logo.png</code>" in dry.text and "Files it cannot read" in dry.text  # with why
    assert "<code>handbook__search_lore</code>" in dry.text
    assert "Saving this import is refused while a file cannot be read" in dry.text
    # the save of that dry run is refused as the API refuses it, naming the archive
    refused = ann.post("/console/import/save", data={"csrf": csrf, "draft": draft_of(dry)})
    assert refused.status_code == 422 and "cannot be read" in refused.text and "logo.png" in refused.text
    assert counts(app) == before
    # skipping them, as the API's skip_unreadable
    dry = ann.post(
        "/console/import/lore", data=lore_form(csrf, "handbook", skip_unreadable="on"), files=upload
    )
    assert dry.status_code == 200 and "Saving this import is refused" not in dry.text
    no_token = ann.post("/console/import/save", data={"draft": draft_of(dry)})
    assert no_token.status_code == 403 and counts(app) == before
    saved = ann.post("/console/import/save", data={"csrf": csrf, "draft": draft_of(dry)})
    assert saved.status_code == 303, saved.text[-500:]
    assert saved.headers["location"] == "/console/toolkits/default/handbook?done=imported&n=3&held=0&docs=3"
    assert counts(app) == (before[0] + 1, before[1] + 3)
    page = ann.get(saved.headers["location"]).text
    assert "Imported 3 tools over 3 documents." in page and "Lore knowledge base" in page
    assert "<h1>Team handbook</h1>" in page and "Re-import the knowledge base" in page
    (hit, *_) = search_lore(app, "handbook__search_lore", "quokka lever")
    assert hit["path"] == "runbooks/deploy.md" and hit["heading"] == "Deploy > Rollback"


def test_lore_refusals_name_the_field_and_store_nothing(app: InProcess) -> None:
    ann, csrf = signed_in(app, user_key(app, 0))
    before = counts(app)
    cases: list[tuple[dict[str, str], bytes | None, str, str]] = [
        (lore_form(csrf, "kb"), archive({"only.bin": b"\x00\x01"}), "k-archive", "nothing to import"),
        (lore_form(csrf, "kb"), b"PK\x03\x04 not a zip at all", "k-archive", "archive"),
        (lore_form(csrf, "kb"), archive({"../up.md": "# out"}), "k-archive", ".."),
        (lore_form(csrf, "kb"), None, "k-archive", "&#39;archive&#39; is required"),
        (lore_form(csrf, "kb", title="bell\x07"), archive({"a.md": "# a"}), "k-title", "&#39;title&#39;"),
        (lore_form(csrf, "Not A Slug"), archive({"a.md": "# a"}), "k-slug", "slug"),
    ]
    for form, data, field, says in cases:
        files = {"archive": ("kb.zip", data, "application/zip")} if data is not None else None
        refused = ann.post("/console/import/lore", data=form, files=files)
        assert refused.status_code == 422, (field, refused.status_code, refused.text[-600:])
        assert says in alert(refused) and invalid(refused) == [field], (field, alert(refused))
        assert 'value="Team handbook"' in refused.text or field == "k-title"  # the form kept
    no_token = ann.post(
        "/console/import/lore",
        data={"slug": "kb"},
        files={"archive": ("kb.zip", archive({"a.md": "# a"}), "application/zip")},
    )
    assert no_token.status_code == 403
    # another user's slug: the save is refused as the API refuses it (409), nothing changed
    bob, bob_csrf = signed_in(app, user_key(app, 1))
    mine = bob.post(
        "/console/import/lore",
        data=lore_form(bob_csrf, "bobs"),
        files={"archive": ("b.zip", archive({"a.md": "# a"}), "application/zip")},
    )
    saved = bob.post("/console/import/save", data={"csrf": bob_csrf, "draft": draft_of(mine)})
    assert saved.status_code == 303
    taken = ann.post(
        "/console/import/lore",
        data=lore_form(csrf, "bobs"),
        files={"archive": ("b.zip", archive({"b.md": "# b"}), "application/zip")},
    )
    assert taken.status_code == 200  # a dry run reads; the save decides who owns the slug
    again = ann.post("/console/import/save", data={"csrf": csrf, "draft": draft_of(taken)})
    assert again.status_code == 409
    assert counts(app) == (before[0] + 1, before[1] + 3)


def test_a_lore_toolkit_is_re_imported_from_its_page_and_the_answer_changes(app: InProcess) -> None:
    ann, csrf = signed_in(app, user_key(app, 0))
    first = {"guide.md": "# Guide\n\nThe office plant is a fern.", "old.md": "# Old\n\nGone soon."}
    dry = ann.post(
        "/console/import/lore",
        data={"csrf": csrf, "slug": "office"},
        files={"archive": ("o.zip", archive(first), "application/zip")},
    )
    assert ann.post("/console/import/save", data={"csrf": csrf, "draft": draft_of(dry)}).status_code == 303
    assert search_lore(app, "office__search_lore", "fern")[0]["path"] == "guide.md"
    page = ann.get("/console/toolkits/default/office").text
    assert "<h1>Lore: office</h1>" in page and unlabelled(page) == []
    token = CSRF.search(page)
    assert token
    base = "/console/toolkits/default/office/reimport"
    missing = ann.post(base, data={"csrf": token.group(1)})
    assert missing.status_code == 422 and "&#39;archive&#39;" in missing.text
    second = {"guide.md": "# Guide\n\nThe office plant is a cactus now.", "new.md": "# New\n\nHello."}
    again = ann.post(
        base,
        data={"csrf": token.group(1)},
        files={"archive": ("o2.zip", archive(second), "application/zip")},
    )
    assert again.status_code == 200, again.text[-600:]
    assert "<dt>Added</dt><dd><code>new.md</code></dd>" in again.text
    assert "<dt>Changed (indexed again)</dt><dd><code>guide.md</code></dd>" in again.text
    assert "<dt>Removed</dt><dd><code>old.md</code></dd>" in again.text
    assert search_lore(app, "office__search_lore", "cactus")[0]["path"] == "guide.md"
    assert search_lore(app, "office__search_lore", "fern") == []
    assert "<h1>Lore: office</h1>" in ann.get("/console/toolkits/default/office").text  # title kept


def test_hostile_file_names_are_shown_as_text(app: InProcess) -> None:
    ann, csrf = signed_in(app, user_key(app, 0))
    names = [f"{p.replace('/', '|')}.md" for p in hostile_pages.PAYLOADS[:4]]
    files = {name: f"# {hostile_pages.TEXT}\n\nwords" for name in names}
    dry = ann.post(
        "/console/import/lore",
        data={"csrf": csrf, "slug": "hostile-kb", "title": hostile_pages.PAYLOADS[1]},
        files={"archive": ("h.zip", archive({**files, "<svg onload=x>.bin": b"\x00"}), "application/zip")},
    )
    assert dry.status_code == 200, dry.text[-600:]
    main = dry.text.split("<main", 1)[1]
    assert "&lt;script&gt;window.__pwned" in main and "&lt;svg onload=x&gt;.bin" in main
    assert not re.search(r"<(?:script|img|svg|iframe)\b", main)
    assert 'href="javascript:' not in main


# -- tools from examples --------------------------------------------------------------------------


def curl_lines(token: str) -> str:
    auth = f"-H 'Authorization: Bearer {token}'"
    return "\n".join(
        [
            f"curl {auth} '{API}/v1/notes?limit=5'",
            f"curl {auth} {API}/v1/notes/3",
            f"curl {auth} -X DELETE {API}/v1/notes/4",
            f'curl {auth} --json \'{{"title": "t", "tags": ["a"]}}\' {API}/v1/notes',
        ]
    )


def test_an_examples_dry_run_lists_inferred_tools_then_saves_them_pending_and_unseen(
    app: InProcess,
) -> None:
    admin, csrf = signed_in(app, app.key)
    token = f"tok-{secrets.token_hex(16)}"
    before = counts(app)
    form = {"csrf": csrf, "slug": "notes", "examples": curl_lines(token)}
    dry = admin.post("/console/import/examples", data=form)
    assert dry.status_code == 200, dry.text[-800:]
    assert counts(app) == before
    assert_no_leak(dry.text, token, where="in the dry run's page")
    assert "would infer 4 tools, each pending until approved by name" in dry.text
    row = re.search(r"<code>notes__get_note</code>.*?</tr>", dry.text, re.S)
    assert row and "<code>GET /v1/notes/{note_id}</code>" in row.group(0) and "line 2" in row.group(0)
    assert "<code>note_id</code> (path, integer, required)" in row.group(0)
    listing = re.search(r"<code>notes__list_notes</code>.*?</tr>", dry.text, re.S)
    assert listing and "<code>limit</code> (query, integer, required)" in listing.group(0)
    assert "named by the model" not in dry.text  # no naming model is configured here
    assert "credential (bearer) would be sealed in the vault" in dry.text
    assert admin.post("/console/import/save", data={"draft": draft_of(dry)}).status_code == 403
    saved = admin.post("/console/import/save", data={"csrf": csrf, "draft": draft_of(dry)})
    assert saved.status_code == 303, saved.text[-500:]
    assert saved.headers["location"].endswith("?done=imported&n=4&held=0&pending=4")
    assert counts(app) == (before[0] + 1, before[1] + 4)
    page = admin.get(saved.headers["location"])
    assert_no_leak(page.text, token, where="on the toolkit's page")
    assert "4 tools inferred from examples: approve each by name below." in page.text
    assert "(inferred from endpoint examples)" in page.text and "Approve all" not in page.text
    assert (
        page.text.count('class="badge state-pending"') == 4 and "<dt>Scheme</dt><dd>bearer</dd>" in page.text
    )
    assert "Re-import the spec" not in page.text  # an inferred toolkit has no spec to fetch again
    assert unlabelled(page.text) == []
    # invisible to agents until approved, and approved one by one (the API's rule, reused)
    assert found_by_agents(app, "notes") == []
    page_csrf = CSRF.search(page.text)
    assert page_csrf
    every = admin.post(
        "/console/toolkits/default/notes/approve", data={"csrf": page_csrf.group(1), "all": "1"}
    )
    assert every.status_code == 422 and "approve them one by one" in every.text
    one = admin.post(
        "/console/toolkits/default/notes/approve",
        data={"csrf": page_csrf.group(1), "tool": "notes__get_note"},
    )
    assert one.status_code == 303
    assert found_by_agents(app, "notes") == ["notes__get_note"]
    # The page offers no spec re-import, and a hand-made one is refused: a spec would replace
    # the reviewed guesses with tools nobody approved one by one.
    spec = json.dumps(
        {
            "openapi": "3.0.0",
            "info": {"title": "t", "version": "1"},
            "paths": {
                "/v1/notes": {
                    "get": {"operationId": "list_notes", "responses": {"200": {"description": "ok"}}}
                }
            },
        }
    )
    forged = admin.post(
        "/console/toolkits/default/notes/reimport", data={"csrf": page_csrf.group(1), "spec_text": spec}
    )
    assert forged.status_code == 422 and "import its examples again" in forged.text
    assert counts(app) == (before[0] + 1, before[1] + 4)


def found_by_agents(app: InProcess, query: str) -> list[str]:
    async def go() -> Any:
        async with connect(app) as client:
            return await client.call_tool("search_tools", {"query": query})

    result = run(go())
    text = result.content[0].text
    return sorted(set(re.findall(r'"name":\s*"(notes__[a-z_]+)"', text)))


def har(urls: list[str], method: str = "GET") -> str:
    entries = [
        {
            "request": {"method": method, "url": url, "headers": [], "queryString": []},
            "response": {
                "status": 200,
                "headers": [],
                "content": {"mimeType": "application/json", "text": "{}"},
            },
        }
        for url in urls
    ]
    return json.dumps({"log": {"version": "1.2", "entries": entries}})


def test_examples_refusals_name_the_field_and_store_nothing(app: InProcess) -> None:
    admin, csrf = signed_in(app, app.key)
    token = f"tok-{secrets.token_hex(16)}"
    before = counts(app)
    conflicting = (
        f"curl --json '{{\"a\": 1}}' {API}/x\ncurl --json '{{\"a\": [1]}}' {API}/x -H 'X-Api-Key: {token}'"
    )
    cases: list[tuple[dict[str, str], bytes | None, str, str]] = [
        ({"format": "har"}, b"{this is not json", "e-har", "the HAR file is not JSON"),
        ({"examples": conflicting}, None, "e-text", "conflicting shapes"),
        ({"examples": f"curl {API}/x", "format": "yaml"}, None, "e-format", "format"),
        ({"examples": f"curl {API}/x", "base_url": "http://169.254.169.254/"}, None, "e-base", ""),
        ({"examples": f"curl {API}/x"}, har([f"{API}/y"]).encode(), "e-text", "not both"),
        ({}, None, "e-text", "&#39;examples&#39; is required"),
    ]
    for extra, upload, field, says in cases:
        files = {"har_file": ("x.har", upload, "application/json")} if upload is not None else None
        refused = admin.post(
            "/console/import/examples", data={"csrf": csrf, "slug": "bad", **extra}, files=files
        )
        assert refused.status_code == 422, (field, refused.status_code, refused.text[-600:])
        assert says in alert(refused) and invalid(refused) == [field], (
            field,
            alert(refused),
            invalid(refused),
        )
        assert_no_leak(refused.text, token, where="in a refusal")
        assert "--json" not in refused.text.split("<main", 1)[1]  # the examples are never echoed
    no_token = admin.post("/console/import/examples", data={"slug": "bad", "examples": f"curl {API}/x"})
    assert no_token.status_code == 403
    # examples that name no host dry-run, and their save is refused as the API refuses it
    hostless = admin.post(
        "/console/import/examples", data={"csrf": csrf, "slug": "bad", "examples": "curl /v1/x"}
    )
    assert hostless.status_code == 200 and "saving this import needs --base-url" in hostless.text
    save = admin.post("/console/import/save", data={"csrf": csrf, "draft": draft_of(hostless)})
    assert save.status_code == 422 and "the examples name no host" in save.text
    assert counts(app) == before


def test_a_save_whose_inferred_tools_differ_from_the_dry_runs_stores_nothing(app: InProcess) -> None:
    """The naming model may answer a save otherwise than it answered the dry run: what is saved
    must be what was shown (``import_examples``'s ``expect``), else nothing is."""
    admin, csrf = signed_in(app, app.key)
    dry = admin.post(
        "/console/import/examples", data={"csrf": csrf, "slug": "drifted", "examples": f"curl {API}/v1/a"}
    )
    assert dry.status_code == 200, dry.text[-600:]
    key = draft_of(dry)
    held = admin_imports.drafts(app.rt)._held[key]
    held.fingerprint = "0" * 64  # as if the dry run had listed other tools
    before = counts(app)
    refused = admin.post("/console/import/save", data={"csrf": csrf, "draft": key})
    assert refused.status_code == 422 and "differ from the dry run" in refused.text
    assert counts(app) == before


def test_har_urls_carrying_script_are_shown_as_text(app: InProcess) -> None:
    admin, csrf = signed_in(app, app.key)
    urls = [
        f"{API}/items/<script>window.__pwned=1<\\/script>?q=%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E",
        f'{API}/javascript:alert(1)/"><svg onload=alert(2)>',
    ]
    dry = admin.post(
        "/console/import/examples",
        data={"csrf": csrf, "slug": "hostile-har"},
        files={"har_file": ("h.har", har(urls).encode(), "application/json")},
    )
    assert dry.status_code == 200, dry.text[-600:]
    main = dry.text.split("<main", 1)[1]
    assert not re.search(r"<(?:script|img|svg|iframe)\b", main), main[:2000]
    assert "<code>GET /items/&lt;script&gt;window.__pwned=1&lt;\\/script&gt;</code>" in main
    assert "/javascript:alert(1)/&#34;&gt;&lt;svg onload=alert(2)&gt;</code>" in main
    assert 'href="javascript:' not in main and "onerror" not in main  # a query value is never shown
