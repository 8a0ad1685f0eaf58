"""LangChain (the real, pinned langchain-core): a chat message history on a memtape
session, used by RunnableWithMessageHistory across two turns, and memtape's search as a
retriever, sync and async."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langchain_core")
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder  # noqa: E402
from langchain_core.runnables.history import RunnableWithMessageHistory  # noqa: E402

import memtape  # noqa: E402
from memtape.integrations.langchain import MemtapeChatMessageHistory, MemtapeRetriever  # noqa: E402


def test_messages_round_trip_with_tool_calls(client, session):
    history = MemtapeChatMessageHistory(session, client)
    assert history.messages == []
    history.add_messages(
        [
            SystemMessage("You are terse."),
            HumanMessage("Weather in Oslo?"),
            AIMessage("", tool_calls=[{"id": "call_1", "name": "weather", "args": {"city": "Oslo"}}]),
            ToolMessage("4 degrees", tool_call_id="call_1"),
            AIMessage("4 degrees."),
        ]
    )
    got = history.messages
    # A system message is kept on the tape; the history a model gets leaves it out (the
    # prompt's own system text comes first), as memtape's history does everywhere.
    assert [e.payload.get("role") for e in client.sessions.entries(session).entries][0] == "system"
    assert [type(m).__name__ for m in got] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
    ]
    assert got[1].tool_calls[0]["args"] == {"city": "Oslo"}
    assert got[2].tool_call_id == "call_1"
    history.clear()
    assert history.messages == []


def test_a_chain_with_memtape_history_remembers_the_last_turn(client, session):
    model = GenericFakeChatModel(
        messages=iter([AIMessage("Nice to meet you, Ada."), AIMessage("You are Ada.")])
    )
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Be brief."), MessagesPlaceholder("history"), ("human", "{input}")]
    )
    chain = RunnableWithMessageHistory(
        prompt | model,
        lambda session_id: MemtapeChatMessageHistory(session_id, client),
        input_messages_key="input",
        history_messages_key="history",
    )
    config = {"configurable": {"session_id": session}}
    chain.invoke({"input": "I am Ada."}, config=config)
    seen = []
    chain_with_spy = RunnableWithMessageHistory(
        prompt | (lambda p: seen.append(p.to_messages()) or p) | model,
        lambda session_id: MemtapeChatMessageHistory(session_id, client),
        input_messages_key="input",
        history_messages_key="history",
    )
    answer = chain_with_spy.invoke({"input": "Who am I?"}, config=config)
    assert answer.content == "You are Ada."
    assert [m.content for m in seen[0]] == ["Be brief.", "I am Ada.", "Nice to meet you, Ada.", "Who am I?"]
    assert [m.content for m in client.sessions.history(session).messages] == [
        "I am Ada.",
        "Nice to meet you, Ada.",
        "Who am I?",
        "You are Ada.",
    ]


def test_the_retriever_finds_what_memtape_holds(client, session):
    client.sessions.append(session, role="user", content="The spare key is under the blue flowerpot.")
    retriever = MemtapeRetriever(client=client, k=2, search_kwargs={"session": session})
    docs = retriever.invoke("where is the spare key")
    assert docs and "blue flowerpot" in docs[0].page_content
    assert docs[0].metadata["session"] == session and docs[0].metadata["role"] == "user"
    assert isinstance(docs[0].metadata["score"], float)

    async def run() -> None:
        async with memtape.AsyncMemtape(client.base_url, client.api_key) as m:
            history = MemtapeChatMessageHistory(session, client, async_client=m)
            await history.aadd_messages([AIMessage("Noted.")])
            assert (await history.aget_messages())[-1].content == "Noted."
            async_retriever = MemtapeRetriever(async_client=m, k=1, search_kwargs={"session": session})
            found = await async_retriever.ainvoke("flowerpot")
            assert "flowerpot" in found[0].page_content

    asyncio.run(run())
