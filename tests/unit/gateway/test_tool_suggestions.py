"""Did-you-mean for unknown tool names: close names, only among those the caller may see, with
bounded work. In-process on a real database (the runners, direct tools/call, /mcp/<slug>)."""

from __future__ import annotations

import asyncio
import difflib
import tempfile
from dataclasses import dataclass, field
from typing import Any

import pytest

from appliance import config
from appliance.catalogue import naming
from appliance.catalogue.naming import close_names
from appliance.errors import ToolNotFound
from appliance.gateway import bridge, direct
from appliance.gateway.pipeline import call_tool
from appliance.gateway.runtime import Runtime
from appliance.models import OPERATOR, CallResult, Principal
from tests.support import worlds
from tests.support.worlds import GrantSpec, KitSpec, World


@dataclass
class NamedKit(KitSpec):
    names: list[str] = field(default_factory=list)

    def tool_name(self, i: int) -> str:
        return f"{self.slug}__{self.names[i]}"


PETS = NamedKit(
    slug="pets",
    project="default",
    owner=None,
    visibility="published",
    names=["list_pets", "list_pets_private", "create_pet"],
    active=[True, True, True],
)
VAULT = NamedKit(slug="vault", project="default", owner=None, names=["list_pets"], active=[True])
# One user; its agent is granted pets__list_pets alone. vault is private to the platform.
WORLD = World(users=[False], agents=[0], kits=[PETS, VAULT], grants=[GrantSpec(agent=0, kit=0, tools=[0])])


def suggestions(outcome: ToolNotFound | CallResult) -> list[str]:
    data: dict[str, Any] = outcome.data if isinstance(outcome, ToolNotFound) else outcome.meta
    return list(data.get("suggestions", []))


async def each_path(rt: Runtime, who: Principal, name: str) -> list[list[str]]:
    """What the runner, a direct tools/call and /mcp/pets suggest for ``name``."""
    out = []
    ran = await bridge.call_bridge(rt, who, "use_tool", {"tool": name})
    assert ran.is_error and ran.meta["reason"] == "tool_not_found", ran
    out.append(suggestions(ran))
    with pytest.raises(ToolNotFound) as direct_call:
        await call_tool(rt, who, name, {})
    out.append(suggestions(direct_call.value))
    kit = await direct.resolve_toolkit(rt, who, "pets", project="default")
    with pytest.raises(ToolNotFound) as per_kit:
        await direct.call(rt, who, kit, name.removeprefix("pets__"), {})
    out.append(["pets__" + s for s in suggestions(per_kit.value)])
    return out


def test_suggestions_come_only_from_names_the_caller_may_see() -> None:
    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            env = {"TOOLSPOKE_DATA_DIR": tmp, "TOOLSPOKE_DEMO": "0", "TOOLSPOKE_DEFAULT_FEE": "0"}
            rt = Runtime(config.load(env=env))
            await rt.open()
            try:
                built = await worlds.build(rt, WORLD)
                agent = await worlds.principal(rt, built.agent_keys[0])
                # A typo of a visible tool: that tool, never its hidden neighbours.
                assert await each_path(rt, agent, "pets__list_pet") == [["pets__list_pets"]] * 3
                # The exact name of a hidden tool: answered like any unknown name, and never
                # itself offered (nor the same action in the private toolkit).
                for hidden in ("pets__list_pets_private", "pets__list_pets_privat", "pets__create_pet"):
                    for offered in await each_path(rt, agent, hidden):
                        assert set(offered) <= {"pets__list_pets"}, (hidden, offered)
                # The hidden toolkit's exact name: the same action where the caller sees it.
                ran = await bridge.call_bridge(rt, agent, "use_tool", {"tool": "vault__list_pets"})
                assert suggestions(ran) == ["pets__list_pets"]
                # The operator sees everything, so is offered the hidden names too.
                with pytest.raises(ToolNotFound) as seen_all:
                    await call_tool(rt, OPERATOR, "pets__list_pets_privat", {})
                assert suggestions(seen_all.value)[0] == "pets__list_pets_private"
                assert "did you mean 'pets__list_pets_private'" in seen_all.value.public_message
            finally:
                await rt.close()

    asyncio.run(asyncio.wait_for(main(), timeout=60))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("petstore__listPet", ["petstore__listPets"]),  # a typo in the action
        ("petstor__listPets", ["petstore__listPets"]),  # a typo in the slug
        ("listPets", ["petstore__listPets"]),  # the slug left out
        ("PETSTORE__SHOWPETBYID", ["petstore__showPetById"]),  # case
        ("petstore__zzzz", []),  # sharing the slug alone is not close
        ("x" * 500, []),  # longer than any tool name can be
    ],
)
def test_close_names(name: str, expected: list[str]) -> None:
    names = ["petstore__listPets", "petstore__createPets", "petstore__showPetById", "other__listPets2"]
    assert close_names(name, names)[: len(expected) or None] == expected


def test_the_work_is_bounded_for_10000_names_and_the_longest_input(monkeypatch: pytest.MonkeyPatch) -> None:
    compared = []

    class Counting(difflib.SequenceMatcher):  # type: ignore[type-arg]
        def set_seqs(self, a: Any, b: Any) -> None:
            if a or b:  # (the constructor sets two empty ones)
                compared.append(len(a) + len(b))
            super().set_seqs(a, b)

    monkeypatch.setattr(naming.difflib, "SequenceMatcher", Counting)
    names = [f"kit{i % 100}__action_number_{i}" for i in range(10_000)]
    longest = "k" + "x" * (naming.SUGGEST_INPUT_MAX - 1)
    close_names(longest, names)
    assert len(compared) <= naming.SUGGEST_POOL
    assert max(compared) <= naming.SUGGEST_INPUT_MAX + naming.MAX_NAME + 16
    compared.clear()
    # Over the pool, the toolkit the name names is searched: its 100 names, not the first 1000.
    assert close_names("kit7__action_number_7007x", names)[0] == "kit7__action_number_7007"
    assert len(compared) <= 100
