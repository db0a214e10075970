import json
from collections import Counter
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from appliance.catalogue.catalog_jsonl import convert_catalog
from appliance.errors import ImportFailed

BENCH = Path(__file__).resolve().parents[3] / "bench" / "data" / "retrieval"
COUNTS = {"toolbench": 2479, "bfcl-live": 528, "livemcpbench": 527, "metatool": 199}
LINE = {
    "toolkit": "kit",
    "name": "do it",
    "description": "d",
    "input_schema": {"type": "object", "properties": {}},
}


def _bytes(*rows: object) -> bytes:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows).encode()


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_each_retrieval_catalogue_converts_with_unique_gold_keys(name):
    data = (BENCH / name / "catalog.jsonl").read_bytes()
    kit = convert_catalog(data, "bench", max_bytes=50_000_000)
    assert len(kit.tools) == COUNTS[name]
    keys = [f"{t.group}/{t.upstream_name}" for t in kit.tools]
    assert len(set(keys)) == len(keys)
    gold = {
        g
        for line in (BENCH / name / "queries-dev.jsonl").read_text().splitlines()
        if line.strip()
        for g in json.loads(line)["gold"]
    }
    assert gold <= set(keys)
    names = [t.name for t in kit.tools]
    assert len(set(names)) == len(names) and max(map(len, names)) <= 64
    assert all(t.kind == "read" and t.binding is None for t in kit.tools)
    assert kit.base_url is None and kit.source_kind == "catalog"


def test_a_single_toolkit_catalogue_names_tools_from_the_name_alone():
    kit = convert_catalog(_bytes(LINE), "s", max_bytes=10_000)
    assert kit.tools[0].name == "s__do_it"
    assert (kit.tools[0].group, kit.tools[0].upstream_name) == ("kit", "do it")


def test_a_multi_toolkit_catalogue_prefixes_the_toolkit():
    kit = convert_catalog(_bytes(LINE, {**LINE, "toolkit": "other"}), "s", max_bytes=10_000)
    assert [t.name for t in kit.tools] == ["s__kit_do_it", "s__other_do_it"]


def test_bfcl_style_type_names_are_normalised_and_draft4_bounds_repaired():
    schema = {
        "type": "dict",
        "properties": {"x": {"type": "float", "minimum": 0, "exclusiveMinimum": True}},
        "$schema": "http://json-schema.org/draft-07/schema#",
    }
    kit = convert_catalog(_bytes({**LINE, "input_schema": schema}), "s", max_bytes=10_000)
    out = kit.tools[0].input_schema
    assert out == {"type": "object", "properties": {"x": {"type": "number", "exclusiveMinimum": 0}}}
    Draft202012Validator.check_schema(out)


def test_a_kind_field_is_honoured_and_blank_lines_are_ignored():
    kit = convert_catalog(
        _bytes(LINE, "", "  ", {**LINE, "name": "rm", "kind": "destructive"}), "s", max_bytes=10_000
    )
    assert [t.kind for t in kit.tools] == ["read", "destructive"]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ((LINE, "{not json"), "line 2: not valid JSON"),
        ((LINE, {**LINE, "name": "x", "input_schema": []}), "line 2: input_schema must be an object"),
        (({**LINE, "name": ""},), "line 1: name must be a non-empty string"),
        (({**LINE, "kind": "maybe"},), "line 1: kind must be one of"),
        (
            ({**LINE, "input_schema": {"type": "object", "properties": {"a": {"minLength": -1}}}},),
            "line 1: input_schema is not valid",
        ),
        ((LINE, LINE), "line 2: tool kit/do it repeats line 1"),
        (("[1]",), "line 1: must be a JSON object"),
    ],
)
def test_a_bad_line_fails_the_whole_file_naming_the_line(rows, message):
    with pytest.raises(ImportFailed) as info:
        convert_catalog(_bytes(*rows), "s", max_bytes=10_000)
    assert info.value.public_message.startswith(message)


def test_a_too_large_catalogue_is_refused():
    with pytest.raises(ImportFailed, match="limit"):
        convert_catalog(_bytes(LINE) * 10, "s", max_bytes=100)


def test_names_stay_unique_when_names_sanitise_alike():
    kit = convert_catalog(_bytes({**LINE, "name": "a b"}, {**LINE, "name": "a_b"}), "s", max_bytes=10_000)
    names = [t.name for t in kit.tools]
    assert len(set(names)) == 2 and Counter(n[:6] for n in names) == {"s__a_b": 2}
