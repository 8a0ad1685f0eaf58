"""An OpenAI Agents SDK agent whose conversation lives on memtape: run it twice and the
second run remembers the first. Needs `pip install "memtape[openai-agents]"` and a model:
OPENAI_API_KEY (and OPENAI_BASE_URL / OPENAI_MODEL for any OpenAI-compatible server).
Run: python examples/openai_agents_session.py"""

import asyncio
import os

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

import memtape
from memtape.integrations.openai_agents import MemtapeSession

set_tracing_disabled(True)  # nothing leaves this machine but the model calls


async def main() -> None:
    model = OpenAIChatCompletionsModel(
        model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), openai_client=AsyncOpenAI()
    )
    agent = Agent(name="assistant", instructions="Answer in one sentence.", model=model)
    async with memtape.AsyncMemtape.local() as m:
        session = MemtapeSession("agents-demo", m)
        print((await Runner.run(agent, "My name is Ada.", session=session)).final_output)
        print((await Runner.run(agent, "What is my name?", session=session)).final_output)


asyncio.run(main())
