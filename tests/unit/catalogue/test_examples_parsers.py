"""The three example formats, each parsed into the same Example rows, and their refusals."""

from __future__ import annotations

import base64
import json

import pytest

from appliance.catalogue.examples_curl import parse_curl
from appliance.catalogue.examples_entry import MAX_EXAMPLES, detect_format
from appliance.catalogue.examples_har import parse_har
from appliance.catalogue.examples_http import parse_http
from appliance.errors import ImportFailed

TOKEN = "tok-0123456789abcdef"


def test_curl_reads_every_option_that_shapes_a_request() -> None:
    text = f"""
# a comment, then a command over three lines
curl -sSL -X PUT 'https://api.example.com/v1/notes/7?draft=true' \\
  -H 'Authorization: Bearer {TOKEN}' \\
  --data-raw '{{"title": "x"}}' -H 'Content-Type: application/json'
curl --json '{{"a": 1}}' https://api.example.com/v1/things
curl -G https://api.example.com/search -d q=cats --data-urlencode 'tag=a b'
curl -u alice:pw-0123456789 -XDELETE api.example.com/v1/notes/8
curl -F name=report -F kind=pdf https://api.example.com/upload
"""
    put, post, search, delete, form = parse_curl(text)
    assert (put.where, put.method, put.url) == (
        "line 3",
        "PUT",
        "https://api.example.com/v1/notes/7?draft=true",
    )
    assert put.header("authorization") == f"Bearer {TOKEN}"
    assert put.body == '{"title": "x"}' and put.media_type == "application/json"
    assert (post.method, post.media_type, post.body) == ("POST", "application/json", '{"a": 1}')
    assert (search.method, search.url, search.body) == (
        "GET",
        "https://api.example.com/search?q=cats&tag=a+b",
        None,
    )
    basic = base64.b64encode(b"alice:pw-0123456789").decode()
    assert (delete.method, delete.url) == ("DELETE", "http://api.example.com/v1/notes/8")
    assert delete.header("Authorization") == f"Basic {basic}"
    assert form.method == "POST" and form.form == (("name", "report"), ("kind", "pdf"))
    assert form.media_type == "multipart/form-data"
    assert detect_format(text) == "curl"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("curl -d @body.json https://x.test/a", "line 1: the body is read from a file"),
        ("curl --upload-file f https://x.test/a", "line 1: unsupported curl option --upload-file"),
        ("curl 'https://x.test/a", "line 1: cannot split the command"),
        ("curl -X POST", "line 1: the command has no URL"),
        ("curl https://x.test/a\nwget https://x.test/b", "line 2: not a curl command"),
        ("curl -F file=@secret.txt https://x.test/a", "line 1: -F takes name=value"),
        ("# only a comment", "no curl command found"),
    ],
)
def test_curl_refuses_what_it_cannot_read_naming_the_line(text: str, says: str) -> None:
    with pytest.raises(ImportFailed) as caught:
        parse_curl(text)
    assert says in caught.value.public_message


def test_raw_http_pairs_with_and_without_separators() -> None:
    text = f"""GET /v1/notes/1 HTTP/1.1
Host: api.example.com
X-API-Key: {TOKEN}

HTTP/1.1 200 OK
Content-Type: application/json

{{"id": 1, "title": "a"}}
###
POST /v1/notes HTTP/1.1
Host: api.example.com
Content-Type: application/json

{{"title": "b"}}

HTTP/1.1 201 Created

{{"id": 2}}
DELETE /v1/notes/2
Host: api.example.com
"""
    get, post, delete = parse_http(text)
    assert (get.where, get.url, get.status) == ("line 1", "http://api.example.com/v1/notes/1", 200)
    assert get.header("x-api-key") == TOKEN and get.header("host") is None
    assert json.loads(get.response_body or "") == {"id": 1, "title": "a"}
    assert (post.where, post.body, post.status, post.response_body) == (
        "line 10",
        '{"title": "b"}',
        201,
        '{"id": 2}',
    )
    assert (delete.method, delete.status) == ("DELETE", None)
    assert detect_format(text) == "http"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("hello\nGET /a", "line 1: expected a request line"),
        ("GET /a HTTP/1.1\nno colon here\n", "line 2: a header line is 'Name: value'"),
        ("HTTP/1.1 200 OK\n\n{}", "line 1: an answer without its request"),
        ("GET /a\n\nHTTP/1.1 200 OK\n\nHTTP/1.1 201 Created\n", "an answer without its request"),
    ],
)
def test_raw_http_refusals_name_the_line(text: str, says: str) -> None:
    with pytest.raises(ImportFailed) as caught:
        parse_http(text)
    assert says in caught.value.public_message


def har(*entries: dict) -> str:
    return json.dumps({"log": {"version": "1.2", "entries": list(entries)}})


def entry(
    method: str,
    url: str,
    *,
    status: int = 200,
    mime: str = "application/json",
    text: str = "{}",
    **request: object,
) -> dict:
    return {
        "request": {"method": method, "url": url, "headers": [], **request},
        "response": {"status": status, "headers": [], "content": {"mimeType": mime, "text": text}},
    }


def test_har_entries_become_examples_and_non_api_entries_are_reported_skipped() -> None:
    encoded = base64.b64encode(b'{"id": 3, "ok": true}').decode()
    text = har(
        entry("GET", "https://app.test/index.html", mime="text/html", text="<html>"),
        entry("OPTIONS", "https://app.test/api/notes"),
        entry(
            "POST",
            "https://app.test/api/notes",
            status=201,
            headers=[
                {"name": ":authority", "value": "app.test"},
                {"name": "Authorization", "value": f"Bearer {TOKEN}"},
            ],
            postData={"mimeType": "application/json", "text": '{"title": "t"}'},
        ),
        {
            "request": {"method": "GET", "url": "https://app.test/api/notes/3", "headers": []},
            "response": {
                "status": 200,
                "content": {"mimeType": "application/json", "encoding": "base64", "text": encoded},
            },
        },
    )
    examples, skipped = parse_har(text)
    assert [s.where for s in skipped] == [
        "entry 1 (GET https://app.test/index.html)",
        "entry 2 (OPTIONS https://app.test/api/notes)",
    ]
    post, get = examples
    assert (post.where, post.media_type, post.body, post.status) == (
        "entry 3",
        "application/json",
        '{"title": "t"}',
        201,
    )
    # the pseudo-header is gone; postData's media type is the Content-Type
    assert post.headers == (("Authorization", f"Bearer {TOKEN}"), ("Content-Type", "application/json"))
    assert json.loads(get.response_body or "") == {"id": 3, "ok": True}
    assert detect_format(text) == "har"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "the HAR file is not JSON"),
        ('{"log": {}}', "not a HAR file: it has no log.entries list"),
        (har({"response": {}}), "entry 1: an entry is an object with a 'request'"),
        (
            har({"request": {"method": "GET", "url": "https://x.test/", "headers": "x"}}),
            "entry 1: request.headers must be a list",
        ),
        (
            har(entry("GET", "https://x.test/a.png", mime="image/png")),
            "the HAR file has no API request (1 entries skipped)",
        ),
    ],
)
def test_har_refusals_are_clear(text: str, says: str) -> None:
    with pytest.raises(ImportFailed) as caught:
        parse_har(text)
    assert says in caught.value.public_message


def test_an_oversized_recording_is_refused_before_any_entry_is_read() -> None:
    text = json.dumps({"log": {"entries": [0] * (MAX_EXAMPLES + 1)}})
    with pytest.raises(ImportFailed, match="more than 5000 examples"):
        parse_har(text)


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ImportFailed, match="cannot tell the examples' format"):
        detect_format("hello world")


def test_a_skipped_entry_is_reported_without_its_query() -> None:
    text = har(
        entry("GET", f"https://app.test/logo.png?api_key={TOKEN}", mime="image/png"),
        entry("GET", "https://app.test/api/x"),
    )
    _, skipped = parse_har(text)
    assert skipped[0].where == "entry 1 (GET https://app.test/logo.png)"
    assert TOKEN not in repr(skipped)
