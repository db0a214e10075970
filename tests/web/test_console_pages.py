"""The console's agent, user, search, overview and settings pages over HTTP, in process:
every form does what it names and nothing without its CSRF token; a user sees and manages
their own agents and account only (another user's answers 404); a new key is shown once;
the playground's results are the agent's own search's; hostile names stay text.

The sign-in, headers and toolkit pages are ``test_console.py``; the browser's own view of
the whole flow is ``tests/e2e/test_console_flow.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from appliance.gateway.admin import agent_pages, keys, ledger, people
from appliance.gateway.backfill import backfill
from tests.support import hostile_pages, worlds
from tests.support.clients import modern_tools_call
from tests.support.console_pages import unlabelled
from tests.support.inprocess import InProcess, served_in_process
from tests.support.worlds import KitSpec, World
from tests.web.test_console import _assert_inert, assert_console_headers, csrf_of, signed_in

pytestmark = pytest.mark.inprocess

WORLD = World(
    users=[False, False],  # u0 (ann) and u1 (bob), neither an admin
    agents=[0, 1],  # a0 acts for ann, a1 for bob
    kits=[
        KitSpec("alpha", "default", owner=0, active=[True, True, True], words="invoice"),
        KitSpec("bravo", "default", owner=1, visibility="published", active=[True, True], words="invoice"),
        KitSpec("charlie", "default", owner=1, active=[True], words="invoice"),
        KitSpec("dflt", "default", owner=None, default=True, active=[True], words="invoice"),
        KitSpec("evil", "default", owner=1, visibility="published", active=[True], words=hostile_pages.TEXT),
    ],
)
HOSTILE_AGENT = "<img src=x onerror=alert(1)>"
KEY_SHOWN = re.compile(r'<code id="new-key-value" class="secret">(tsk_[^<]+)</code>')


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    folder = tmp_path_factory.mktemp("console-pages")
    with served_in_process(folder / "data", env={"TOOLSPOKE_HEALTH_INTERVAL_S": "0"}) as served:
        served.ctx = served.run(worlds.build(served.rt, WORLD))  # type: ignore[attr-defined]
        yield served


def built(app: InProcess) -> worlds.Built:
    return app.ctx  # type: ignore[attr-defined, no-any-return]


def agent_path(app: InProcess, index: int) -> str:
    return f"/console/agents/{built(app).agent_ids[index]}"


def mcp_search(app: InProcess, key: str, query: str) -> list[str]:
    headers, body = modern_tools_call(key, "search_tools", {"query": query})
    answer = app.client(timeout=20).post("/mcp", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    text = answer.json()["result"]["content"][0]["text"]
    return re.findall(r'"name":\s*"([a-z0-9_]+__[a-zA-Z0-9_]+)"', text)


def shown_results(page: str) -> list[str]:
    table = page.split('id="results"', 1)[1]
    return re.findall(r"<td><code>([^<]+)</code>", table)


def key_form(client: httpx.Client, path: str) -> str:
    """The one-time token of the agent page's key form, as a browser would send it."""
    found = re.search(r'name="once" value="([0-9a-f]{32})"', client.get(path).text)
    assert found
    return found.group(1)


def new_key(app: InProcess, client: httpx.Client, csrf: str, path: str, name: str = "") -> str:
    made = client.post(path + "/keys", data={"csrf": csrf, "name": name, "once": key_form(client, path)})
    assert made.status_code == 200 and "no-store" in made.headers["cache-control"]
    assert 'data-copy="new-key-value"' in made.text and "shown this once" in made.text
    found = KEY_SHOWN.search(made.text)
    assert found, made.text[:800]
    assert "<script>" not in made.text  # the copy button's script is a static file
    return found.group(1)


# -- agents -------------------------------------------------------------------------------------


def test_a_user_lists_and_opens_their_own_agents_and_never_another_users(app: InProcess) -> None:
    ann, csrf = signed_in(app, built(app).user_keys[0])
    listing = ann.get("/console/agents")
    assert listing.status_code == 200
    assert (
        f'href="{agent_path(app, 0)}"' in listing.text and f'href="{agent_path(app, 1)}"' not in listing.text
    )
    row = re.search(rf'href="{agent_path(app, 0)}">a0</a></td>\s*((?:<td>[^<]*</td>\s*){{3}})', listing.text)
    assert row and re.findall(r"<td>([^<]*)</td>", row.group(1)) == [
        "0",
        "1",
        "0",
    ]  # grants, live keys, preload
    assert ann.get(agent_path(app, 0)).status_code == 200
    bobs = agent_path(app, 1)
    for answer in (
        ann.get(bobs),
        ann.get(bobs + "/grants/1"),
        ann.post(bobs + "/keys", data={"csrf": csrf}),
        ann.post(bobs + "/grant", data={"csrf": csrf, "toolkit": "default/bravo"}),
        ann.post(bobs + "/preload", data={"csrf": csrf, "preload": "bravo__t0"}),
        ann.get("/console/search", params={"q": "invoice", "agent": str(built(app).agent_ids[1])}),
    ):
        assert answer.status_code == 404, answer.text[:300]
        assert_console_headers(answer)
    admin, _ = signed_in(app, app.key)
    everyone = admin.get("/console/agents").text
    assert f'href="{agent_path(app, 0)}"' in everyone and f'href="{agent_path(app, 1)}"' in everyone
    assert admin.get(bobs).status_code == 200


def test_grants_of_whole_toolkits_or_selected_tools_and_opt_outs_change_what_the_agent_finds(
    app: InProcess,
) -> None:
    ann, csrf = signed_in(app, built(app).user_keys[0])
    path, key = agent_path(app, 0), built(app).agent_keys[0]
    assert mcp_search(app, key, "invoice") == ["dflt__t0"]  # the platform default only
    page = ann.get(path).text
    assert 'value="default/alpha"' in page and 'value="default/bravo"' in page  # own, published
    assert 'value="default/charlie"' not in page  # bob's private toolkit is not hers to grant
    refused = ann.post(path + "/grant", data={"csrf": csrf, "toolkit": "default/charlie"})
    assert refused.status_code == 404
    made = ann.post(path + "/grant", data={"csrf": csrf, "toolkit": "default/alpha"})
    assert made.status_code == 303 and "/grants/" in made.headers["location"]
    grant_page = made.headers["location"].split("?")[0]
    assert sorted(mcp_search(app, key, "invoice")) == ["alpha__t0", "alpha__t1", "alpha__t2", "dflt__t0"]
    shown = ann.get(made.headers["location"]).text
    assert "Grant made" in shown and shown.count('name="tools"') == 3
    saved = ann.post(grant_page + "/save", data={"csrf": csrf, "enabled": "on", "tools": ["alpha__t1"]})
    assert saved.status_code == 303
    assert sorted(mcp_search(app, key, "invoice")) == ["alpha__t1", "dflt__t0"]
    assert 'value="alpha__t1" checked' in ann.get(grant_page).text
    stranger = ann.post(grant_page + "/save", data={"csrf": csrf, "enabled": "on", "tools": ["bravo__t0"]})
    assert stranger.status_code == 404  # a tool of another toolkit is not this grant's
    out = ann.post(path + "/opt-out", data={"csrf": csrf, "toolkit": "default/dflt"})
    assert out.status_code == 303 and out.headers["location"] == path + "?done=opted-out"
    assert mcp_search(app, key, "invoice") == ["alpha__t1"]
    assert "opted out" in ann.get(path).text
    no_token = ann.post(grant_page + "/remove", data={})
    assert no_token.status_code == 403
    assert mcp_search(app, key, "invoice") == ["alpha__t1"]  # nothing changed
    removed = ann.post(grant_page + "/remove", data={"csrf": csrf})
    assert removed.status_code == 303 and "done=grant-removed" in removed.headers["location"]
    assert mcp_search(app, key, "invoice") == []


def test_preloaded_tools_are_saved_one_a_line(app: InProcess) -> None:
    ann, csrf = signed_in(app, built(app).user_keys[0])
    path = agent_path(app, 0)
    saved = ann.post(path + "/preload", data={"csrf": csrf, "preload": "alpha__t0\n\n alpha__t2 \n"})
    assert saved.status_code == 303
    assert ">alpha__t0\nalpha__t2</textarea>" in ann.get(path).text
    ann.post(path + "/preload", data={"csrf": csrf, "preload": ""})


def test_a_new_key_is_shown_once_works_and_once_revoked_is_refused(app: InProcess) -> None:
    ann, csrf = signed_in(app, built(app).user_keys[0])
    path = agent_path(app, 0)
    before = ann.get(path).text.count("<code>tsk_")
    forged = ann.post(path + "/keys", data={"csrf": "0" * 64})
    assert forged.status_code == 403 and ann.get(path).text.count("<code>tsk_") == before
    key = new_key(app, ann, csrf, path, name="laptop")
    again = ann.get(path).text
    assert key not in again and again.count("<code>tsk_") == before + 1  # its prefix only, from now on
    assert key not in ann.get("/console/agents").text
    headers, body = modern_tools_call(key, "search_tools", {"query": "invoice"})
    assert app.client(timeout=20).post("/mcp", json=body, headers=headers).status_code == 200
    prefix = next(p for p in re.findall(r"<code>(tsk_[^<]+)</code>", again) if key.startswith(p))
    revoked = ann.post(path + "/revoke", data={"csrf": csrf, "prefix": prefix})
    assert revoked.status_code == 303 and "done=revoked" in revoked.headers["location"]
    refused = app.client(timeout=20).post("/mcp", json=body, headers=headers)
    assert refused.status_code == 401
    bob, bob_csrf = signed_in(app, built(app).user_keys[1])
    assert (
        bob.post(agent_path(app, 1) + "/revoke", data={"csrf": bob_csrf, "prefix": prefix}).status_code == 404
    )


def test_the_key_form_makes_a_narrower_key_and_refuses_one_wider_than_the_agent(app: InProcess) -> None:
    """Issue 20 item 6 in the console: a scope (one toolkit a line), a budget and an expiry."""
    ann, csrf = signed_in(app, built(app).user_keys[0])
    path = agent_path(app, 0)
    granted = ann.post(path + "/grant", data={"csrf": csrf, "toolkit": "default/alpha"})
    assert granted.status_code == 303
    form = {"csrf": csrf, "name": "sub", "scope": "alpha:t0", "budget": "2", "expires_at": "2999-01-01T00:00"}
    made = ann.post(path + "/keys", data={**form, "once": key_form(ann, path)})
    found = KEY_SHOWN.search(made.text)
    assert made.status_code == 200 and found, made.text[:800]
    assert mcp_search(app, found.group(1), "invoice") == ["alpha__t0"]  # nothing else it may call
    page = ann.get(path).text
    assert (
        "only alpha (alpha__t0)" in page
        and "spent 0 of 2 credits" in page
        and "2999-01-01T00:00:00.000Z" in page
    )
    wider = ann.post(path + "/keys", data={**form, "scope": "charlie", "once": key_form(ann, path)})
    assert wider.status_code == 403 and "never widen" in wider.text
    removed = ann.post(granted.headers["location"].split("?")[0] + "/remove", data={"csrf": csrf})
    assert removed.status_code == 303
    assert mcp_search(app, found.group(1), "invoice") == []  # the agent's grant gone: the key's too


def test_reloading_the_answer_that_showed_a_key_makes_no_second_key(app: InProcess) -> None:
    ann, csrf = signed_in(app, built(app).user_keys[0])
    path = agent_path(app, 0)
    form = {"csrf": csrf, "name": "reload", "once": key_form(ann, path)}
    first = ann.post(path + "/keys", data=form)
    assert first.status_code == 200 and KEY_SHOWN.search(first.text)
    count = ann.get(path).text.count("<code>tsk_")
    for sent in (form, {**form, "once": ""}, {**form, "once": "0" * 32}, {"csrf": csrf, "name": "x"}):
        again = ann.post(path + "/keys", data=sent)  # the browser's reload, or a form never issued
        assert again.status_code == 303 and again.headers["location"] == path + "?done=key-once"
        assert ann.get(path).text.count("<code>tsk_") == count  # no key was made
    shown = ann.get(again.headers["location"]).text
    assert "shown once and is not shown again" in shown and not KEY_SHOWN.search(shown)
    assert KEY_SHOWN.search(ann.post(path + "/keys", data={**form, "once": key_form(ann, path)}).text)


# -- the search playground ----------------------------------------------------------------------


def test_the_playground_answers_what_the_agents_own_search_would(app: InProcess) -> None:
    admin, csrf = signed_in(app, app.key)
    bob_agent = built(app).agent_ids[1]
    granted = admin.post(
        f"/console/agents/{bob_agent}/grant", data={"csrf": csrf, "toolkit": "default/bravo"}
    )
    assert granted.status_code == 303
    expected = mcp_search(app, built(app).agent_keys[1], "invoice operation")
    assert sorted(expected) == ["bravo__t0", "bravo__t1", "dflt__t0"]
    page = admin.get("/console/search", params={"q": "invoice operation", "agent": str(bob_agent)})
    assert page.status_code == 200
    assert shown_results(page.text) == expected
    assert "agent a1 (of u1)" in page.text and "Lexical rank" in page.text and "BM25" in page.text
    mine = admin.get("/console/search", params={"q": "invoice operation"})
    # an admin's own search is an admin key's: published, defaults, the platform's; not ann's private one
    assert {"bravo__t0", "dflt__t0"} <= set(shown_results(mine.text))
    assert "alpha__t0" not in shown_results(mine.text)
    bob, _ = signed_in(app, built(app).user_keys[1])
    own = bob.get("/console/search", params={"q": "invoice operation", "agent": str(bob_agent)})
    assert shown_results(own.text) == expected  # a user searches as their own agent too
    assert admin.get("/console/search", params={"q": "x", "limit": "0"}).status_code == 422
    assert admin.get("/console/search", params={"q": "x", "agent": "nope"}).status_code == 422
    assert admin.get("/console/search", params={"q": "x" * 5000}).status_code == 422


def test_the_playground_lists_recent_misses_escaped_and_only_to_whom_they_belong(app: InProcess) -> None:
    ann_miss, bob_miss = "<script>alert('ann')</script> zzqx", "bob wants a unicorn qqzv"
    mcp_search(app, built(app).agent_keys[0], ann_miss)  # a0 acts for ann
    mcp_search(app, built(app).agent_keys[1], bob_miss)  # a1 for bob

    async def settle() -> None:  # as the window's end would
        app.rt.usage.expire(everything=True)
        await app.rt.usage.flush()

    app.run(settle())

    def misses(key: str) -> str:
        client, _ = signed_in(app, key)
        page = client.get("/console/search")
        assert page.status_code == 200
        assert "<script>alert(" not in page.text
        return page.text.split('id="misses"', 1)[1]

    ann, bob, admin = (misses(k) for k in (*built(app).user_keys, app.key))
    escaped = "&lt;script&gt;alert(&#39;ann&#39;)&lt;/script&gt; zzqx"
    assert escaped in ann and "unicorn" not in ann
    assert "unicorn qqzv" in bob and "zzqx" not in bob
    assert escaped in admin and "unicorn qqzv" in admin
    assert "a0 (u0)" in ann and "a1 (u1)" in bob


@pytest.fixture(scope="module")
def semantic_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    """The same world with the bundled local model on and every tool embedded (the backfill
    run to its end), so the playground's search is hybrid."""
    folder = tmp_path_factory.mktemp("console-semantic")
    env = {"TOOLSPOKE_HEALTH_INTERVAL_S": "0", "TOOLSPOKE_EMBEDDINGS": "local"}
    with served_in_process(folder / "data", env=env) as served:
        served.ctx = served.run(worlds.build(served.rt, WORLD))  # type: ignore[attr-defined]
        report = served.run(backfill(served.rt), timeout=120)
        assert report.embedded >= 8, report  # every active tool of the world
        yield served


def test_the_playground_shows_the_semantic_side_and_the_fused_explanation(semantic_app: InProcess) -> None:
    admin, _ = signed_in(semantic_app, semantic_app.key)
    page = admin.get("/console/search", params={"q": "invoice operation"})
    assert page.status_code == 200, page.text[:300]
    assert "Ranking: <strong>hybrid</strong>" in page.text
    assert "standardised within its own list" in page.text  # what a fused score is, said once
    table = page.text.split('id="results"', 1)[1].split("</tbody>", 1)[0]
    rows = [r for r in table.split("<tbody>", 1)[1].split("</tr>") if "<td>" in r]
    assert rows
    for row in rows:
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        score, lexical_rank, bm25, semantic_rank, cosine, why = cells[3], *cells[4:9]
        assert re.fullmatch(r"-?\d+\.\d{3}", score), cells
        assert re.fullmatch(r"\d+", semantic_rank) and re.fullmatch(r"-?\d\.\d{3}", cosine), cells
        if lexical_rank != "\u2013":  # found by its words too (an en dash: not): what each side gave
            assert re.fullmatch(r"-?\d+\.\d{2}", bm25), cells
            assert (
                f"lexical #{lexical_rank} (BM25 {bm25}) and semantic #{semantic_rank} (cosine {cosine})"
                in why
            )
            assert re.search(r"fused: words [+-]\d\.\d\d, meaning [+-]\d\.\d\d", why), why
    assert any(re.search(r"<td>\d+</td>\s*<td>-?\d+\.\d{2}</td>\s*<td>\d+</td>", r) for r in rows)
    assert any("so it placed by meaning alone: words" in r for r in rows)  # found by meaning only


# -- users, credit, overview, settings -----------------------------------------------------------


def _admin_id(app: InProcess) -> int:
    return app.run(worlds.principal(app.rt, app.key)).user_id


def test_users_and_credit_are_an_admins_and_each_user_sees_only_their_own_page(app: InProcess) -> None:
    ann, ann_csrf = signed_in(app, built(app).user_keys[0])
    ann_id, bob_id = built(app).user_ids[:2]
    assert ann.get("/console/users").status_code == 403
    assert ann.get(f"/console/users/{bob_id}").status_code == 404
    assert ann.get("/console/users/999999").status_code == 404
    own = ann.get(f"/console/users/{ann_id}")
    assert own.status_code == 200 and "0 credits" in own.text and 'id="amount"' not in own.text
    assert "this session's key" in own.text
    assert (
        ann.post(f"/console/users/{ann_id}/credit", data={"csrf": ann_csrf, "amount": "5"}).status_code == 403
    )
    admin, csrf = signed_in(app, app.key)
    listing = admin.get("/console/users").text
    assert f'href="/console/users/{bob_id}"' in listing
    note = "<script>alert('note')</script>"
    forged = admin.post(f"/console/users/{ann_id}/credit", data={"amount": "5", "note": note})
    assert forged.status_code == 403
    done = admin.post(f"/console/users/{ann_id}/credit", data={"csrf": csrf, "amount": "7.5", "note": note})
    assert done.status_code == 303 and done.headers["location"] == f"/console/users/{ann_id}?done=credit"
    page = admin.get(done.headers["location"]).text
    assert "Credit saved." in page and "7.5 credits" in page
    assert note not in page and "&lt;script&gt;alert(&#39;note&#39;)&lt;/script&gt;" in page
    back = admin.post(f"/console/users/{ann_id}/credit", data={"csrf": csrf, "amount": "-2.5", "note": ""})
    assert back.status_code == 303 and "5 credits" in admin.get(f"/console/users/{ann_id}").text
    too_much = admin.post(f"/console/users/{ann_id}/credit", data={"csrf": csrf, "amount": "-50"})
    assert too_much.status_code == 422 and "below 0" in too_much.text
    assert "7.5 credits" not in ann.get(f"/console/users/{ann_id}").text
    assert "5 credits" in ann.get(f"/console/users/{ann_id}").text  # her own balance, on her page
    promoted = admin.post(f"/console/users/{bob_id}/admin", data={"csrf": csrf, "is_admin": "on"})
    assert promoted.status_code == 303
    assert "<dt>Admin</dt><dd>yes" in admin.get(f"/console/users/{bob_id}").text
    admin.post(f"/console/users/{bob_id}/admin", data={"csrf": csrf})
    assert "<dt>Admin</dt><dd>no" in admin.get(f"/console/users/{bob_id}").text
    themselves = admin.post(f"/console/users/{_admin_id(app)}/admin", data={"csrf": csrf})
    assert themselves.status_code == 409


def test_a_paid_call_shows_in_the_overview_and_its_charge_is_voided_from_the_users_page(
    app: InProcess,
) -> None:
    admin, csrf = signed_in(app, app.key)
    admin_id = _admin_id(app)
    actor = app.run(worlds.principal(app.rt, app.key))
    app.run(ledger.set_quota(app.rt, actor, "demo", {"fee": 0.5}, "default"))
    made = admin.post("/console/agents", data={"csrf": csrf, "name": HOSTILE_AGENT, "user": str(admin_id)})
    assert made.status_code == 303
    path = made.headers["location"].split("?")[0]
    page = admin.get(path).text
    assert HOSTILE_AGENT not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert admin.post(path + "/grant", data={"csrf": csrf, "toolkit": "default/demo"}).status_code == 303
    key = new_key(app, admin, csrf, path)
    admin.post(f"/console/users/{admin_id}/credit", data={"csrf": csrf, "amount": "10"})
    headers, body = modern_tools_call(key, "demo__createNote", {"body": {"title": "paid"}})
    answer = app.client(timeout=20).post("/mcp", json=body, headers=headers)
    assert answer.status_code == 200 and answer.json()["result"]["isError"] is False, answer.text
    overview = admin.get("/console/overview")
    assert overview.status_code == 200 and overview.headers["content-type"].startswith("text/html")
    text = overview.text
    assert "<svg" in text and "demo__createNote" in text and "Spend per agent" in text
    assert HOSTILE_AGENT not in text and "&lt;img src=x onerror=alert(1)&gt; (of " in text
    assert "<script" not in text.split("</head>")[1]
    ann, _ = signed_in(app, built(app).user_keys[0])
    assert "demo__createNote" not in ann.get("/console/overview").text  # not her call, not her toolkit
    mine = admin.get(f"/console/users/{admin_id}").text
    charge = re.search(r'name="entry" value="(\d+)"', mine)
    assert charge and "9.5 credits" in mine
    assert admin.post(f"/console/users/{admin_id}/void", data={"entry": charge.group(1)}).status_code == 403
    voided = admin.post(
        f"/console/users/{admin_id}/void", data={"csrf": csrf, "entry": charge.group(1), "note": "test"}
    )
    assert voided.status_code == 303
    after = admin.get(f"/console/users/{admin_id}").text
    assert "10 credits" in after and "voided" in after and 'name="entry"' not in after
    assert admin.post(f"/console/users/{admin_id}/void", data={"csrf": csrf, "entry": "x"}).status_code == 422


def test_settings_switch_semantic_search_and_show_vault_versions_to_admins_only(app: InProcess) -> None:
    ann, ann_csrf = signed_in(app, built(app).user_keys[0])
    assert ann.get("/console/settings").status_code == 403
    assert ann.post("/console/settings/semantic", data={"csrf": ann_csrf}).status_code == 403
    admin, csrf = signed_in(app, app.key)
    page = admin.get("/console/settings")
    assert page.status_code == 200 and "Vault key versions" in page.text and "tools embedded" in page.text
    assert "<dt>State</dt><dd>on" in page.text
    assert admin.post("/console/settings/semantic", data={}).status_code == 403
    assert "<dt>State</dt><dd>on" in admin.get("/console/settings").text  # unchanged without the token
    off = admin.post("/console/settings/semantic", data={"csrf": csrf})
    assert off.status_code == 303
    assert "<dt>State</dt><dd>off" in admin.get(off.headers["location"]).text
    admin.post("/console/settings/semantic", data={"csrf": csrf, "enabled": "on"})
    assert "<dt>State</dt><dd>on" in admin.get("/console/settings").text


def test_every_new_page_has_the_nav_and_labels_every_control(app: InProcess) -> None:
    admin, _ = signed_in(app, app.key)
    for path in (
        "/console/agents",
        agent_path(app, 0),
        "/console/users",
        "/console/overview",
        "/console/settings",
    ):
        page = admin.get(path).text
        assert 'href="/console/overview"' in page and 'href="/console/agents"' in page
        assert unlabelled(page) == [], (path, unlabelled(page))
    assert csrf_of(admin.get("/console/agents"))


def test_every_form_of_these_pages_refuses_a_post_without_its_csrf_token(app: InProcess) -> None:
    admin, _ = signed_in(app, app.key)
    agent, user = agent_path(app, 0), f"/console/users/{built(app).user_ids[0]}"

    def pages() -> list[str]:  # each render issues a fresh one-time key-form token: not a change
        return [
            re.sub(r'name="once" value="[0-9a-f]+"', "", admin.get(p).text.split("</header>")[1])
            for p in (agent, user, "/console/agents", "/console/users")
        ]

    before = pages()
    for path in (
        "/console/agents",
        *(f"{agent}/{action}" for action in ("grant", "opt-out", "preload", "keys", "revoke")),
        f"{agent}/grants/1/save",
        f"{agent}/grants/1/remove",
        "/console/users",
        *(f"{user}/{action}" for action in ("admin", "credit", "void", "revoke")),
        "/console/settings/semantic",
    ):
        refused = admin.post(path, data={"name": "x", "toolkit": "default/alpha", "amount": "1"})
        assert refused.status_code == 403 and "CSRF" in refused.text, path
    assert pages() == before


def test_hostile_tool_text_stays_text_on_the_grant_and_search_pages(app: InProcess) -> None:
    ann, csrf = signed_in(app, built(app).user_keys[0])
    path = agent_path(app, 0)
    made = ann.post(path + "/grant", data={"csrf": csrf, "toolkit": "default/evil"})
    assert made.status_code == 303
    grant = ann.get(made.headers["location"]).text
    searched = ann.get(
        "/console/search", params={"q": "operation number", "agent": str(built(app).agent_ids[0])}
    )
    assert "evil__t0" in shown_results(searched.text)
    for text in (grant, searched.text, ann.get(path).text):
        _assert_inert(text)
    assert "&lt;script&gt;window.__pwned" in grant and "&lt;script&gt;window.__pwned" in searched.text
    ann.post(made.headers["location"].split("?")[0] + "/remove", data={"csrf": csrf})


# -- paging, and the "Add tool" list bounded -----------------------------------------------------

ROW_LINK = {
    "agents": re.compile(r'<td><a href="/console/agents/(\d+)">'),
    "users": re.compile(r'<td><a href="/console/users/(\d+)">'),
}


def _listed(client: httpx.Client, what: str, page: int | None = None) -> tuple[list[int], str]:
    answer = client.get(f"/console/{what}", params={} if page is None else {"page": str(page)})
    assert answer.status_code == 200, answer.text[:300]
    return [int(i) for i in ROW_LINK[what].findall(answer.text)], answer.text


def test_the_agents_and_users_lists_go_by_pages_of_fifty(app: InProcess) -> None:
    admin_principal = app.run(worlds.principal(app.rt, app.key))
    pager = app.run(people.create_user(app.rt, admin_principal, "pager"))
    for i in range(55):  # the pager's agents: two pages of them, whoever looks
        app.run(people.create_agent(app.rt, admin_principal, f"p{i:02d}", user=pager["id"]))
    for i in range(50):  # and enough users for a second page of users
        app.run(people.create_user(app.rt, admin_principal, f"extra{i:02d}"))
    admin, _ = signed_in(app, app.key)
    for what in ("agents", "users"):
        first, page = _listed(admin, what)
        total = int(re.search(rf"<p class=\"summary\">(\d+) {what}, page 1 of 2\.</p>", page).group(1))  # type: ignore[union-attr]
        assert len(first) == 50 and first == sorted(first)
        assert f'href="/console/{what}?page=2" rel="next"' in page and 'rel="prev"' not in page
        second, page = _listed(admin, what, 2)
        assert len(second) == total - 50 and not set(first) & set(second)
        assert f'href="/console/{what}?page=1" rel="prev"' in page and 'rel="next"' not in page
        assert second[-1] == max(second) and min(second) > max(first)  # id order, nothing skipped
        for bad in ("0", "x", "1000001"):
            refused = admin.get(f"/console/{what}", params={"page": bad})
            assert refused.status_code == 422 and "&#39;page&#39;" in refused.text, refused.text[:300]
    # every agent of the pager once, across the admin's pages
    everyone = _listed(admin, "agents")[0] + _listed(admin, "agents", 2)[0]
    assert len(set(everyone)) == len(everyone)
    # a user pages through their own agents only
    keyed = app.run(keys.issue(app.rt, admin_principal, user=pager["id"]))[0]
    own, _ = signed_in(app, keyed)
    mine, page = _listed(own, "agents")
    assert len(mine) == 50 and "55 agents, page 1 of 2." in page
    assert len(_listed(own, "agents", 2)[0]) == 5
    ann, _ = signed_in(app, built(app).user_keys[0])
    ann_agents, page = _listed(ann, "agents")
    assert built(app).agent_ids[0] in ann_agents and 'class="pages"' not in page
    assert not set(ann_agents) & set(everyone[-55:])


def test_add_tool_offers_a_bounded_list_narrowed_by_a_search(
    app: InProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_pages, "GRANTABLE_MAX", 2)  # the bound, small enough to see
    ann, csrf = signed_in(app, built(app).user_keys[0])
    made = ann.post("/console/agents", data={"csrf": csrf, "name": "picker"})
    path = made.headers["location"].split("?")[0]
    page = ann.get(path).text
    offered = re.findall(
        r'<option value="([^"]+)">', page.split('id="grant-toolkit"')[1].split("</select>")[0]
    )
    # ann reaches her alpha, bob's published bravo and evil, and the platform default; not bob's charlie
    assert offered == ["default/alpha", "default/bravo"]
    assert "Showing the first 2 of 4 toolkits: find one by its title or slug above." in page
    assert 'id="kit-search"' in page and 'hx-get="' + path + '"' in page
    narrowed = ann.get(path, params={"kit": "EV"}).text  # any case, slug or title
    assert re.findall(r'<option value="([^"]+)">', narrowed) == ["default/evil"]
    assert "1 toolkit matching to grant." in narrowed and 'value="EV"' in narrowed
    fragment = ann.get(path, params={"kit": "dfl"}, headers={"HX-Request": "true"})
    assert fragment.text.startswith('<div id="grantable">') and "<html" not in fragment.text
    assert re.findall(r'<option value="([^"]+)">', fragment.text) == ["default/dflt"]
    assert fragment.headers["vary"] == "HX-Request"
    assert "No toolkit to grant matches that search." in ann.get(path, params={"kit": "charlie"}).text
    too_long = ann.get(path, params={"kit": "x" * 201})
    assert too_long.status_code == 422 and "&#39;kit&#39;" in too_long.text
    # the list only shows: a grant of a toolkit past the bound is made all the same, and it
    # leaves the list; one its user does not reach is refused as absent
    granted = ann.post(path + "/grant", data={"csrf": csrf, "toolkit": "default/evil"})
    assert granted.status_code == 303
    after = ann.get(path).text
    assert "Showing the first 2 of 3 toolkits" in after
    assert ann.post(path + "/grant", data={"csrf": csrf, "toolkit": "default/charlie"}).status_code == 404
