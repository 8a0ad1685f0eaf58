"""An OpenAI Agents SDK session on memtape: `MemtapeSession(session_id, client)` is what
`Runner.run(agent, input, session=...)` reads the conversation from and adds each turn to,
so it lands on memtape's tape (searchable, consolidated into memory, shared by every
process on the same server) and the next run sees it.

Items map to chat messages as the Chat Completions API has them: messages keep their role
and text (or content parts), function calls become an assistant message's tool calls,
function call outputs tool messages. Reasoning items are not kept (providers that use them
keep their own state; Chat Completions models never send them back). `pop_item` erases the
latest message from the tape (an erasure with a receipt), `clear_session` starts the
conversation again as nanobot's `/new` does (the tape keeps the old one and memory archives
it; `client.erase("session", session=...)` deletes it for real).
"""

from __future__ import annotations

import json
from typing import Any

from .._client import AsyncMemtape
from .._errors import NotFoundError
from .._models import ChatMessage, EntryWire
from ._convert import text_of

_CONVERSATION = ("message", "tool_call", "tool_result")

# The largest entry id the API takes (2^53 - 1): reading a session backwards starts there.
_END = 2**53 - 1


class MemtapeSession:
    """The Agents SDK's `Session` protocol over a memtape session (`session_id` is the
    memtape session key)."""

    session_settings: Any = None

    def __init__(
        self,
        session_id: str,
        client: AsyncMemtape | None = None,
        *,
        agent: str | None = None,
        user: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.client = client or AsyncMemtape()
        self.agent = agent
        self.user = user

    def _scope(self) -> dict[str, Any]:
        return {"agent": self.agent, "user": self.user}

    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The session's history as memtape gives it to a model (its unconsolidated tail,
        tool calls never cut from their results), the latest `limit` items if given."""
        try:
            history = await self.client.sessions.history(self.session_id, **self._scope())
        except NotFoundError:  # a session nothing was added to yet has no history
            return []
        items = [item for m in history.messages for item in to_items(m.model_dump(exclude_none=True))]
        return items[-limit:] if limit else items

    async def add_items(self, items: list[Any]) -> None:
        """Appends the items as chat messages, all in one transaction (retried without
        storing twice)."""
        messages = to_messages(items)
        if messages:
            await self.client.sessions.append(self.session_id, messages=messages, **self._scope())

    async def pop_item(self) -> dict[str, Any] | None:
        """Erases the latest message of the session and returns it as an item (the last of
        its items, for an assistant message that called several tools); None when the
        conversation is empty."""
        entry = await self._last_message()
        if entry is None:
            return None
        await self.client.erase(
            "entries", ids=[entry.id], reason="pop_item (OpenAI Agents SDK session)", **self._scope()
        )
        items = to_items(entry.payload)
        return items[-1] if items else None

    async def clear_session(self) -> None:
        """Starts the conversation again (nanobot's `/new`): the history is empty after."""
        try:
            await self.client.sessions.new(self.session_id, **self._scope())
        except NotFoundError:
            pass

    async def _last_message(self) -> EntryWire | None:
        before = _END
        while True:
            try:
                page = await self.client.sessions.entries(
                    self.session_id, before=before, limit=100, **self._scope()
                )
            except NotFoundError:
                return None
            for entry in reversed(page.entries):
                if entry.erased is not None:
                    continue
                # Anything else (a `/new` boundary, an anchor) ends the conversation.
                return entry if entry.kind in _CONVERSATION else None
            if not page.entries or page.prev is None:
                return None
            before = page.prev


def to_messages(items: list[Any]) -> list[dict[str, Any]]:
    """Agents SDK input items as chat messages; consecutive function calls are one
    assistant message (parallel tool calls)."""
    messages: list[dict[str, Any]] = []
    for raw in items:
        item = raw if isinstance(raw, dict) else raw.model_dump(exclude_none=True)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role == "developer":
                role = "system"
            if role not in ("system", "user", "assistant"):
                raise ValueError(f"an input item with role {role!r} has no chat message form")
            messages.append({"role": role, "content": _content(item.get("content"))})
        elif kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"},
            }
            last = messages[-1] if messages else None
            if (
                last
                and last["role"] == "assistant"
                and last.get("tool_calls")
                and last.get("content") is None
            ):
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item["call_id"],
                    "content": output if isinstance(output, str) else json.dumps(output),
                }
            )
        elif kind == "reasoning":
            continue
        else:
            raise ValueError(
                f"an input item of type {kind!r} has no chat message form: memtape keeps "
                "messages, function calls and their outputs"
            )
    return messages


def _content(content: Any) -> Any:
    """Responses content as chat content: text stays text; parts become chat parts."""
    if content is None or isinstance(content, str):
        return content
    parts = []
    for part in content:
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": part.get("text", "")})
        elif kind == "refusal":
            parts.append({"type": "text", "text": part.get("refusal", "")})
        elif kind == "input_image":
            image = {"url": part.get("image_url") or part.get("file_id", "")}
            if part.get("detail"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            parts.append(part)
    if all(p.get("type") == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def to_items(message: dict[str, Any] | ChatMessage) -> list[dict[str, Any]]:
    """A chat message as Agents SDK input items."""
    m = message if isinstance(message, dict) else message.model_dump(exclude_none=True)
    role = m.get("role")
    if role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": m.get("tool_call_id", ""),
                "output": text_of(m.get("content")),
            }
        ]
    items: list[dict[str, Any]] = []
    content = m.get("content")
    if content not in (None, "", []):
        if role == "assistant":
            items.append({"role": "assistant", "content": text_of(content)})
        elif isinstance(content, str):
            items.append({"role": role, "content": content})
        else:
            items.append({"role": role, "content": [_input_part(p) for p in content]})
    for call in m.get("tool_calls") or []:
        function = call.get("function", {})
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("id", ""),
                "name": function.get("name", ""),
                "arguments": function.get("arguments", "{}"),
            }
        )
    return items


def _input_part(part: dict[str, Any]) -> dict[str, Any]:
    if part.get("type") == "text":
        return {"type": "input_text", "text": part.get("text", "")}
    if part.get("type") == "image_url":
        image = part.get("image_url") or {}
        out = {
            "type": "input_image",
            "image_url": image.get("url", ""),
            "detail": image.get("detail", "auto"),
        }
        return out
    return part
