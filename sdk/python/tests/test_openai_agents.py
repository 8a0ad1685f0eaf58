"""The OpenAI Agents SDK (the real, pinned package) with a memtape session: an agent run
against the project's scripted OpenAI-compatible server lands on the tape, tool call and
all, and the next run sends it to the model; pop_item and clear_session."""

from __future__ import annotations

import asyncio

import pytest

agents = pytest.importorskip("agents")
from agents import (  # noqa: E402
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import Session  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

import memtape  # noqa: E402
from memtape.integrations.openai_agents import MemtapeSession  # noqa: E402

set_tracing_disabled(True)


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"4 degrees and rain in {city}"


def agent_on(base_url: str) -> Agent:
    model = OpenAIChatCompletionsModel(
        model="scripted", openai_client=AsyncOpenAI(base_url=base_url, api_key="test", max_retries=0)
    )
    return Agent(name="assistant", instructions="Answer briefly.", model=model, tools=[weather])


def test_an_agent_run_lands_on_the_tape_and_the_next_run_sees_it(client, session, scripted):
    model = scripted(
        [
            {"tool_call": {"name": "weather", "arguments": {"city": "Oslo"}}},
            {"text": "It is 4 degrees and raining in Oslo."},
            {"text": "You asked about the weather in Oslo."},
        ]
    )

    async def run() -> None:
        async with memtape.AsyncMemtape(client.base_url, client.api_key) as m:
            memory = MemtapeSession(session, m)
            assert isinstance(memory, Session)
            agent = agent_on(model.base_url)
            first = await Runner.run(agent, "What's the weather in Oslo?", session=memory)
            assert first.final_output == "It is 4 degrees and raining in Oslo."
            second = await Runner.run(agent, "What did I just ask you?", session=memory)
            assert second.final_output == "You asked about the weather in Oslo."

    asyncio.run(run())
    history = client.sessions.history(session).messages
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert history[1].tool_calls[0].function.name == "weather"
    assert history[2].content == "4 degrees and rain in Oslo"
    # The model's third request carried the first run from the tape.
    sent = model.bodies()[2]["messages"]
    texts = [m.get("content") for m in sent]
    assert "What's the weather in Oslo?" in texts
    assert "It is 4 degrees and raining in Oslo." in texts
    assert any(m.get("tool_calls") for m in sent)
    assert texts[-1] == "What did I just ask you?"
    # It is on the tape: searchable like everything else.
    assert client.search("Oslo weather", session=session).hits


def test_get_pop_and_clear(client, session):
    async def run() -> None:
        async with memtape.AsyncMemtape(client.base_url, client.api_key) as m:
            memory = MemtapeSession(session, m)
            assert await memory.get_items() == []
            assert await memory.pop_item() is None
            await memory.add_items(
                [
                    {"role": "user", "content": "one"},
                    {"role": "assistant", "content": "two"},
                    {"role": "user", "content": [{"type": "input_text", "text": "three"}]},
                ]
            )
            items = await memory.get_items()
            assert [i["content"] for i in items] == ["one", "two", "three"]
            assert [i["content"] for i in await memory.get_items(limit=2)] == ["two", "three"]
            popped = await memory.pop_item()
            assert popped == {"role": "user", "content": "three"}
            assert [i["content"] for i in await memory.get_items()] == ["one", "two"]
            await memory.clear_session()
            assert await memory.get_items() == []
            assert await memory.pop_item() is None
            with pytest.raises(ValueError, match="computer_call"):
                await memory.add_items([{"type": "computer_call", "call_id": "x"}])

    asyncio.run(run())
    # Popped means erased: the text is gone from the tape, with a receipt.
    assert client.search("three", session=session).hits == []
