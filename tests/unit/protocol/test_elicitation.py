"""Elicitation's wire vocabulary (``protocol/elicitation.py``): what a client declared, and an
``input_required`` result's shape (basic/patterns/mrtr.mdx)."""

from __future__ import annotations

from appliance.protocol import elicitation


def test_form_mode_is_declared_by_an_empty_elicitation_object_or_a_form_member() -> None:
    assert elicitation.asks_forms({"elicitation": {}})  # backwards compatibility: form only
    assert elicitation.asks_forms({"elicitation": {"form": {}, "url": {}}})
    for not_form in ({}, {"elicitation": {"url": {}}}, {"elicitation": None}, {"elicitation": []}, None, "x"):
        assert not elicitation.asks_forms(not_form), not_form


def test_an_input_required_result_carries_one_elicitation_and_the_state() -> None:
    result = elicitation.input_required("approval", {"mode": "form", "message": "m"}, "s")
    assert result == {
        "resultType": "input_required",
        "inputRequests": {
            "approval": {"method": "elicitation/create", "params": {"mode": "form", "message": "m"}}
        },
        "requestState": "s",
    }
