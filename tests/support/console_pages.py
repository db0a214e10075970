"""Signing a client in to the console, for the in-process console tests: a browser-like
httpx client with the session cookie, and the CSRF token its pages carry; the controls of a
page that no label names."""

from __future__ import annotations

import re

import httpx

from tests.support.inprocess import InProcess

CSRF = re.compile(r'name="csrf" value="([^"]*)"')


def csrf_of(page: httpx.Response) -> str:
    found = CSRF.search(page.text)
    assert found, page.text[:500]
    return found.group(1)


def signed_in(app: InProcess, key: str, *, landing: str = "/console/toolkits") -> tuple[httpx.Client, str]:
    """A client signed in with ``key`` and the CSRF token of the page at ``landing``."""
    client = app.client(timeout=30)
    done = client.post("/console/sign-in", data={"key": key, "csrf": csrf_of(client.get("/console/sign-in"))})
    assert done.status_code == 303, done.text[:300]
    page = client.get(landing)
    assert page.status_code == 200, page.text[:300]
    return client, csrf_of(page)


_IDS = re.compile(r'<(?:input|select|textarea)[^>]*\bid="([^"]+)"')
_LABELLED = re.compile(r'<label[^>]*for="([^"]+)"')
_NAMELESS = re.compile(
    r'<(?:input|select|textarea)(?![^>]*type="hidden")(?![^>]*\bid=)(?![^>]*aria-label=)[^>]*>'
)


def unlabelled(page: str) -> list[str]:
    """Every control of a page's HTML that no ``<label for>`` names and has no ``aria-label``
    (hidden inputs aside): an empty list when each is labelled."""
    labelled = set(_LABELLED.findall(page))
    return sorted(set(_IDS.findall(page)) - labelled) + _NAMELESS.findall(page)
