"""Between memtape's chat messages (OpenAI's chat shape, as the tape keeps them) and what
the frameworks hand over: the pieces both integrations share."""

from __future__ import annotations

import json
from typing import Any

from .._models import EntryWire


def text_of(content: Any) -> str:
    """The text of a message's content: a string as it is, parts' text joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") in ("text", "input_text", "output_text")
        )
    return json.dumps(content)


def entry_text(entry: EntryWire) -> str:
    """What an entry says, for a retriever: a message's text (a tool call's name and
    arguments), an event's or anchor's name and data."""
    payload = entry.payload or {}
    if "role" in payload:
        text = text_of(payload.get("content"))
        for call in payload.get("tool_calls") or []:
            function = call.get("function", {})
            text += f"\n{function.get('name', '')}({function.get('arguments', '')})"
        return text.strip()
    name = payload.get("name", entry.kind)
    data = payload.get("data", payload.get("state"))
    return f"{name} {json.dumps(data)}" if data is not None else str(name)


def entry_metadata(entry: EntryWire, score: float | None = None) -> dict[str, Any]:
    """The metadata a retrieved document carries: where on the tape it is."""
    meta: dict[str, Any] = {
        "id": entry.id,
        "kind": entry.kind,
        "agent": entry.agent,
        "user": entry.user,
        "session": entry.session,
        "created_at": entry.created_at,
    }
    role = (entry.payload or {}).get("role")
    if role:
        meta["role"] = role
    if score is not None:
        meta["score"] = score
    return meta
