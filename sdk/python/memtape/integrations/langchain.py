"""LangChain on memtape: `MemtapeChatMessageHistory`, a chat message history kept on a
memtape session (for `RunnableWithMessageHistory` and anything else that takes a
`BaseChatMessageHistory`), and `MemtapeRetriever`, memtape's hybrid search as a retriever.

`clear()` starts the conversation again as nanobot's `/new` does: the tape keeps the old
one (searchable, archived into memory); `client.erase("session", session=...)` deletes it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.documents import Document
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from .._client import AsyncMemtape, Memtape
from .._errors import NotFoundError
from .._models import Hits
from ._convert import entry_metadata, entry_text


class MemtapeChatMessageHistory(BaseChatMessageHistory):
    """The messages of memtape session `session_id` (the history memtape gives a model:
    its unconsolidated tail; system messages stay on the tape but out of it, the prompt's
    own system text comes first). `async_client` serves the `a*` methods when given."""

    def __init__(
        self,
        session_id: str,
        client: Memtape | None = None,
        *,
        async_client: AsyncMemtape | None = None,
        agent: str | None = None,
        user: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.client = client or Memtape()
        self.async_client = async_client
        self.agent = agent
        self.user = user

    def _scope(self) -> dict[str, Any]:
        return {"agent": self.agent, "user": self.user}

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's messages, oldest first (none for a session not started yet)."""
        try:
            history = self.client.sessions.history(self.session_id, **self._scope())
        except NotFoundError:
            return []
        return [to_langchain(m.model_dump(exclude_none=True)) for m in history.messages]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Appends the messages in one transaction (retried without storing twice)."""
        if messages:
            self.client.sessions.append(
                self.session_id, messages=[to_chat(m) for m in messages], **self._scope()
            )

    def clear(self) -> None:
        """Starts the conversation again: the history is empty after."""
        try:
            self.client.sessions.new(self.session_id, **self._scope())
        except NotFoundError:
            pass

    async def aget_messages(self) -> list[BaseMessage]:
        """[`messages`][], with the async client when there is one."""
        if self.async_client is None:
            return await super().aget_messages()
        try:
            history = await self.async_client.sessions.history(self.session_id, **self._scope())
        except NotFoundError:
            return []
        return [to_langchain(m.model_dump(exclude_none=True)) for m in history.messages]

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """[`add_messages`][], with the async client when there is one."""
        if self.async_client is None:
            return await super().aadd_messages(messages)
        if messages:
            await self.async_client.sessions.append(
                self.session_id, messages=[to_chat(m) for m in messages], **self._scope()
            )

    async def aclear(self) -> None:
        """[`clear`][], with the async client when there is one."""
        if self.async_client is None:
            return await super().aclear()
        try:
            await self.async_client.sessions.new(self.session_id, **self._scope())
        except NotFoundError:
            pass


class MemtapeRetriever(BaseRetriever):
    """memtape's search (BM25 + embeddings, fused) as a LangChain retriever: each hit a
    `Document` of the entry's text, with its id, session, kind, role, time and score."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: Memtape | None = None
    """The client (default: `Memtape()`, from the environment)."""
    async_client: AsyncMemtape | None = None
    """Serves `ainvoke` when given."""
    k: int = 4
    """How many documents."""
    search_kwargs: dict[str, Any] = {}
    """More arguments of `search` (`scope`, `session`, `kind`, `role`, `mode`, `agent`, ...)."""

    def _documents(self, hits: Hits) -> list[Document]:
        return [
            Document(page_content=entry_text(h.entry), metadata=entry_metadata(h.entry, h.score))
            for h in hits.hits
        ]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        client = self.client or Memtape()
        return self._documents(client.search(query, limit=self.k, **self.search_kwargs))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self.async_client is None:
            return await super()._aget_relevant_documents(query, run_manager=run_manager)
        hits = await self.async_client.search(query, limit=self.k, **self.search_kwargs)
        return self._documents(hits)


def to_chat(message: BaseMessage) -> dict[str, Any]:
    """A LangChain message as a chat message."""
    if isinstance(message, HumanMessage):
        return {"role": "user", "content": message.content}
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.content}
    if isinstance(message, ToolMessage):
        content = message.content
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "content": content if isinstance(content, str) else json.dumps(content),
        }
    if isinstance(message, AIMessage):
        chat: dict[str, Any] = {"role": "assistant", "content": message.content or None}
        if message.tool_calls:
            chat["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": json.dumps(call["args"])},
                }
                for call in message.tool_calls
            ]
        return chat
    raise ValueError(
        f"a {type(message).__name__} has no chat message form: memtape keeps human, AI, "
        "system and tool messages"
    )


def to_langchain(message: dict[str, Any]) -> BaseMessage:
    """A chat message as a LangChain message."""
    role, content = message.get("role"), message.get("content")
    if content is None:
        content = ""
    if role == "user":
        return HumanMessage(content=content)
    if role == "system":
        return SystemMessage(content=content)
    if role == "tool":
        return ToolMessage(content=content, tool_call_id=message.get("tool_call_id", ""))
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        try:
            args = json.loads(function.get("arguments") or "{}")
        except ValueError:
            args = {"arguments": function.get("arguments")}
        calls.append({"id": call.get("id"), "name": function.get("name", ""), "args": args})
    return AIMessage(content=content, tool_calls=calls)
