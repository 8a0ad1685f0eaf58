#!/usr/bin/env python3
"""Records nanobot sessions and nanobot's own history of them, for memtape's differential test.

Drives the real nanobot (nanobot-ai, pinned in scripts/refs/setup) through its own code, with
no LLM: each case builds a `Session` with nanobot's `SessionManager` and `Session.add_message`,
saves it with nanobot's own JSONL store, loads it back with a fresh `SessionManager`, and
asks nanobot's `Session.get_history(max_messages=N)` for one or more limits. The session file
exactly as nanobot wrote it and nanobot's histories are written as fixtures under
crates/memtape/tests/fixtures/refs/nanobot/ (JSON Lines, one case a line, keys sorted), which
crates/memtape/tests/refs_nanobot.rs reads; the test needs no Python. One file per family:
plain chats (metadata, unicode), complete tool-call groups, incomplete ones, orphan results
(at the start, mid-window), the consolidation pointer at every place of one session (set,
and moved by nanobot's own summary checkpoint),
assistant text nanobot rewrites, nanobot's own message flags, and random mixes.

Everything is deterministic (fixed times, fixed ids, a fixed pseudo-random sequence), so
re-running the generator reproduces the fixtures byte for byte; re-run it when nanobot
releases:

    python=$(scripts/refs/setup)
    "$python" scripts/refs/nanobot_sessions.py [--memtape target/debug/memtape]

With --memtape, each recorded session is also imported and exported again by that memtape
binary, and nanobot's SessionManager must load memtape's export and give the same history as
it gave for its own file, with the same messages, pointer and metadata (checked at recording
time only; nothing of it is recorded).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

from nanobot.session.manager import SessionManager

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/memtape/tests/fixtures/refs/nanobot"
BASE_TIME = datetime(2026, 3, 10, 14, 30, 0)
BIG = 500  # the seed's default max_messages


class Case:
    """One session being built: its messages, pointer, metadata and the limits to ask for."""

    def __init__(self, family: str, name: str, key: str | None = None) -> None:
        self.family = family
        self.name = name
        self.key = key or f"telegram:{name}"
        self.messages: list[dict[str, Any]] = []
        self.pointer = 0
        self.metadata: dict[str, Any] = {}
        self.limits: list[int] | None = None
        # Where nanobot's own summary checkpoint moves the pointer (0.3.5's consolidation),
        # instead of setting `pointer`.
        self.checkpoint: int | None = None
        # Write the pointer only as `last_archived` (0.3.5 writes `last_consolidated` beside
        # it for older releases, for now).
        self.only_last_archived = False
        self._calls = 0

    # Messages, as nanobot's agent loop stores them (`build_assistant_message`: content "" with
    # tool calls; tool results carry tool_call_id and name).

    def _add(self, role: str, content: Any, **extra: Any) -> dict[str, Any]:
        i = len(self.messages)
        # Whole seconds on some messages, microseconds on others: nanobot writes both forms.
        micro = 0 if i % 3 == 0 else (i * 137_911) % 1_000_000
        at = BASE_TIME + timedelta(seconds=7 * i, microseconds=micro)
        msg = {"role": role, "content": content, "timestamp": at.isoformat(), **extra}
        self.messages.append(msg)
        return msg

    def user(self, text: Any, **extra: Any) -> Case:
        self._add("user", text, **extra)
        return self

    def assistant(self, text: str, **extra: Any) -> Case:
        self._add("assistant", text, **extra)
        return self

    def system(self, text: str) -> Case:
        self._add("system", text)
        return self

    def calls(self, *names: str, content: str = "") -> list[str]:
        """An assistant message calling `names`; returns the call ids."""
        ids = []
        tool_calls = []
        for name in names:
            self._calls += 1
            call_id = f"call_{self.name}_{self._calls}"
            ids.append(call_id)
            tool_calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": ARGUMENTS.get(name, "{}")},
                }
            )
        self._add("assistant", content, tool_calls=tool_calls)
        return ids

    def result(self, call_id: str, text: str, name: str = "exec") -> Case:
        self._add("tool", text, tool_call_id=call_id, name=name)
        return self

    def group(self, *names: str, content: str = "") -> Case:
        """A complete tool-call group: the call and one result per call, in order."""
        ids = self.calls(*names, content=content)
        for call_id, name in zip(ids, names):
            self.result(call_id, f"{name} → ok ({call_id[-1]})", name)
        return self


ARGUMENTS = {
    "exec": json.dumps({"command": "ls -la"}),
    "read_file": json.dumps({"path": "notes/日記.md"}, ensure_ascii=False),
    "web_search": json.dumps({"query": "Ташкент погода", "count": 3}, ensure_ascii=False),
    "write_file": json.dumps({"path": "a.txt", "content": "line 1\nline \"2\""}),
}


def chat(case: Case, turns: int, start_with: str = "user") -> Case:
    """`turns` messages alternating user and assistant."""
    role = start_with
    for i in range(turns):
        if role == "user":
            case.user(f"{case.name} u{i}")
            role = "assistant"
        else:
            case.assistant(f"{case.name} a{i}")
            role = "user"
    return case


def default_limits(n: int) -> list[int]:
    """A window smaller than the session, one about half, one of exactly the session and
    the seed's default (larger than every session here)."""
    return sorted({x for x in (1, 2, 3, n // 2, n - 1, n, BIG) if x > 0})


# The cases, by family. Each family is one fixture file.


def plain() -> list[Case]:
    out = []
    out.append(Case("plain", "empty"))
    for n in range(1, 11):
        out.append(chat(Case("plain", f"chat{n}"), n))
    for n in range(1, 6):
        out.append(chat(Case("plain", f"proactive{n}"), n, start_with="assistant"))
    c = Case("plain", "users_in_a_row").user("one").user("two").user("three")
    out.append(c.assistant("answer to all three").user("four"))
    c = Case("plain", "assistants_in_a_row").user("hi").assistant("first")
    out.append(c.assistant("second").assistant("third").user("ok").assistant("fine"))
    out.append(Case("plain", "assistant_only").assistant("reminder 1").assistant("reminder 2"))
    c = Case("plain", "system_mid").user("hi").assistant("hello").system("Memory updated.")
    out.append(c.user("and now?").assistant("now this"))
    out.append(Case("plain", "system_first").system("You are nanobot.").user("q").assistant("a"))
    c = Case("plain", "reasoning").user("why is the sky blue?")
    c.assistant("Rayleigh scattering.", reasoning_content="short wavelengths scatter more")
    out.append(c.user("thanks").assistant("any time", reasoning_content=""))
    c = Case("plain", "parts").user([{"type": "text", "text": "what is in this file?"}])
    out.append(c.assistant("a list").user([{"type": "text", "text": "и ещё"}]).assistant("ok"))
    unicode_texts = [
        "héllo wörld — “quotes” and ‘ticks’",
        "日本語のテキスト、漢字とかな",
        "emoji 🧠📼 and a family 👩‍👩‍👧 and flags 🇺🇿",
        "שלום עולם مرحبا بالعالم (right to left)",
        "line\nbreaks\r\nand\ttabs and a \\ backslash",
        "combining: e\u0301 a\u0308 and zero width\u200bjoiner",
        "separators \u2028 line and \u2029 paragraph",
        "Men Karimova, Toshkentda yashayman",
        'json-looking {"role": "tool"} text',
        "nul-free control \u0007 bell and \u001b escape",
    ]
    for i in range(0, len(unicode_texts), 2):
        c = Case("plain", f"unicode{i // 2}", key=f"cli:ünï-{i // 2}")
        c.user(unicode_texts[i]).assistant(unicode_texts[i + 1])
        out.append(c.user(f"{unicode_texts[i]} ?").assistant(f"{unicode_texts[i + 1]} !"))
    for i, meta in enumerate(
        [
            {"lang": "en"},
            {"title": "Планы на выходные", "title_user_edited": True},
            {"nested": {"list": [1, 2.5, None, True], "empty": {}}, "n": -3},
            {"ключ": "значение", "emoji 🔑": "🗝"},
        ]
    ):
        c = chat(Case("plain", f"metadata{i}"), 4)
        c.metadata = meta
        out.append(c)
    return out


def tools() -> list[Case]:
    out = []
    c = Case("tools", "one_call").user("list files")
    out.append(c.group("exec").assistant("here they are"))
    c = Case("tools", "two_calls").user("read and search")
    out.append(c.group("read_file", "web_search").assistant("done"))
    c = Case("tools", "three_calls_reversed").user("do three things")
    ids = c.calls("exec", "read_file", "write_file")
    for call_id, name in reversed(list(zip(ids, ["exec", "read_file", "write_file"]))):
        c.result(call_id, f"{name} finished", name)
    out.append(c.assistant("all three done"))
    c = Case("tools", "two_rounds").user("first look, then write")
    out.append(c.group("read_file").group("write_file").assistant("written"))
    c = Case("tools", "call_with_text").user("check the weather")
    out.append(c.group("web_search", content="Let me check.").assistant("Sunny, 24°C"))
    out.append(Case("tools", "ends_on_result").user("run it").group("exec"))
    c = Case("tools", "many_turns")
    for i in range(4):
        c.user(f"task {i}").group("exec").assistant(f"task {i} done")
    out.append(c)
    c = Case("tools", "unicode_result").user("прочитай заметки")
    ids = c.calls("read_file")
    c.result(ids[0], "# 日記\n- 🧠 remember: Ada likes tea\n- \u2028 odd separator", "read_file")
    out.append(c.assistant("Ada likes tea."))
    c = Case("tools", "json_result").user("status?")
    ids = c.calls("exec")
    out.append(c.result(ids[0], '{"ok": true, "n": 1}').assistant("ok"))
    c = Case("tools", "late_result").user("start the job")
    ids = c.calls("exec")
    c.assistant("It is running; I'll report back.")
    out.append(c.result(ids[0], "job finished").user("so?").assistant("finished"))
    c = Case("tools", "duplicate_result").user("twice")
    ids = c.calls("exec")
    c.result(ids[0], "first").result(ids[0], "second")
    out.append(c.assistant("got two"))
    c = Case("tools", "group_then_chat")
    c.user("a").group("exec").assistant("b")
    out.append(chat(c, 4))
    c = Case("tools", "chat_then_group")
    chat(c, 4).user("now a tool").group("read_file", "exec")
    out.append(c.assistant("there"))
    c = Case("tools", "no_user_group").assistant("proactive check").group("exec")
    out.append(c.assistant("all good"))
    return out


def incomplete() -> list[Case]:
    out = []
    c = Case("incomplete", "turn_in_progress").user("do it")
    c.calls("exec")
    out.append(c)
    c = Case("incomplete", "one_of_two").user("both please")
    ids = c.calls("exec", "read_file")
    out.append(c.result(ids[0], "exec ok"))
    c = Case("incomplete", "one_of_two_then_chat").user("both please")
    ids = c.calls("exec", "read_file")
    c.result(ids[1], "file read", "read_file").assistant("partial answer")
    out.append(c.user("next").assistant("sure"))
    c = Case("incomplete", "interrupted").user("run")
    c.calls("exec")
    out.append(c.user("stop, never mind").assistant("stopped"))
    c = Case("incomplete", "complete_then_incomplete").user("go")
    c.group("read_file")
    c.calls("write_file")
    out.append(c.assistant("could not write").user("ok").assistant("bye"))
    c = Case("incomplete", "incomplete_then_complete").user("go")
    c.calls("exec", content="trying")
    c.user("again").group("exec")
    out.append(c.assistant("worked the second time"))
    c = Case("incomplete", "nested").user("chain")
    ids = c.calls("read_file")
    c.result(ids[0], "read", "read_file")
    c.calls("exec", "write_file")
    out.append(c.assistant("gave up").user("fine").assistant("."))
    c = Case("incomplete", "three_missing_one").user("three")
    ids = c.calls("exec", "read_file", "web_search")
    c.result(ids[0], "e").result(ids[2], "w", "web_search")
    out.append(c.assistant("two of three").user("and the third?").assistant("lost"))
    c = Case("incomplete", "no_user").assistant("checking").group("exec")
    c.calls("read_file")
    out.append(c)
    c = Case("incomplete", "two_open_turns").user("first")
    c.calls("exec")
    c.user("second")
    c.calls("read_file")
    out.append(c.user("third").assistant("here"))
    for k in range(3):
        c = Case("incomplete", f"long{k}")
        chat(c, 2 + 2 * k).user("tool time")
        ids = c.calls("exec", "web_search")
        c.result(ids[k % 2], "one result", ["exec", "web_search"][k % 2])
        out.append(chat(c, 3, start_with="assistant"))
    return out


def orphans() -> list[Case]:
    out = []
    # At the start: the pointer (or the window) split a call from its result.
    c = Case("orphans", "start_no_user").user("run")
    ids = c.calls("exec")
    c.result(ids[0], "out").assistant("done")
    c.pointer = 2
    out.append(c)
    c = Case("orphans", "start_then_user").user("run")
    ids = c.calls("exec")
    c.result(ids[0], "out").assistant("done").user("more").assistant("sure")
    c.pointer = 2
    out.append(c)
    c = Case("orphans", "start_two_results").user("two")
    ids = c.calls("exec", "read_file")
    c.result(ids[0], "e").result(ids[1], "r", "read_file").assistant("both")
    c.pointer = 2
    out.append(c)
    c = Case("orphans", "start_then_group").user("two")
    ids = c.calls("exec")
    c.result(ids[0], "e").group("read_file").assistant("both")
    c.pointer = 2
    out.append(c)
    c = Case("orphans", "start_then_stray").user("x")
    ids = c.calls("exec")
    c.result(ids[0], "e").assistant("a").result("call_gone_1", "stray").assistant("b")
    c.pointer = 2
    out.append(c)
    c = Case("orphans", "start_by_window")
    chat(c, 3).group("exec").assistant("end")
    c.limits = [1, 2, 3, 4]
    out.append(c)
    # Mid-window: a result whose call is nowhere before it.
    c = Case("orphans", "mid_stray").user("q").assistant("a").result("call_gone_2", "stray")
    out.append(c.user("q2").assistant("a2"))
    c = Case("orphans", "mid_after_group").user("q").group("exec")
    out.append(c.result("call_gone_3", "stray").assistant("a"))
    c = Case("orphans", "mid_right_after_user").user("q").result("call_gone_4", "stray")
    out.append(c.assistant("a").user("q2").assistant("a2"))
    out.append(Case("orphans", "mid_last").user("q").assistant("a").result("call_gone_5", "x"))
    c = Case("orphans", "mid_before_call").user("q")
    c.result("call_orphans_mid_before_call_1", "too early")
    c.calls("exec")
    out.append(c.result("call_orphans_mid_before_call_1", "in time").assistant("a"))
    c = Case("orphans", "mid_two_strays").user("q").result("call_gone_6", "s1").assistant("a")
    out.append(c.user("q2").result("call_gone_7", "s2").assistant("a2").user("q3"))
    c = Case("orphans", "mid_then_group").user("q").assistant("a").result("call_gone_8", "s")
    out.append(c.group("exec").assistant("b"))
    c = Case("orphans", "mid_group_spans").user("q")
    ids = c.calls("exec", "read_file")
    c.result(ids[0], "e").result("call_gone_9", "s").result(ids[1], "r", "read_file")
    out.append(c.assistant("done"))
    c = Case("orphans", "mid_and_incomplete").user("q")
    c.calls("exec")
    out.append(c.result("call_gone_10", "s").assistant("a").user("q2").assistant("a2"))
    c = Case("orphans", "mid_no_user").assistant("a").result("call_gone_11", "s")
    out.append(c.assistant("b"))
    # A late result whose call went behind the pointer, after a newer user turn.
    c = Case("orphans", "late_after_pointer").user("start")
    ids = c.calls("exec")
    c.user("still there?").result(ids[0], "finished late").assistant("yes")
    c.pointer = 2
    out.append(c)
    # The window cut the call off, leaving its result after the window's user.
    c = Case("orphans", "window_cut_call").user("u0")
    ids = c.calls("exec")
    c.user("u1").result(ids[0], "late").assistant("a")
    c.limits = [2, 3, 4, BIG]
    out.append(c)
    return out


def consolidation() -> list[Case]:
    """One session, its pointer at every place; and a few with the pointer at the end."""
    out = []
    template = Case("consolidation", "t")
    template.user("hello").assistant("hi")
    template.user("look it up").group("web_search", content="Searching.")
    template.assistant("found it").user("read two files")
    ids = template.calls("read_file", "exec")
    template.result(ids[0], "file", "read_file").result(ids[1], "exec")
    template.assistant("both read").user("thanks")
    template.calls("exec")
    template.user("and?").assistant("the call never came back")
    n = len(template.messages)
    for p in range(n + 1):
        c = Case("consolidation", f"pointer{p:02}")
        c.messages = json.loads(json.dumps(template.messages))
        c.pointer = p
        c.metadata = {"pointer_at": p}
        c.limits = sorted({x for x in (2, 5, BIG)})
        out.append(c)
    c = chat(Case("consolidation", "all_consolidated"), 6)
    c.pointer = 6
    out.append(c)
    # nanobot 0.3.5 moves the pointer with a summary checkpoint: a hidden continuation user
    # message inserted at the boundary, which history then starts with.
    for at in (0, 3, 5, 8, n):
        c = Case("consolidation", f"checkpoint{at:02}")
        c.messages = json.loads(json.dumps(template.messages))
        c.checkpoint = at
        c.limits = [2, 5, BIG]
        out.append(c)
    return out


def rewrite() -> list[Case]:
    """Assistant text nanobot's get_history rewrites (`_sanitize_assistant_replay_text`),
    and the same text from the user, which it keeps."""
    texts = {
        "crlf": "first line\r\nsecond line",
        "separators": "one\u2028two\u2029three",
        "form_feed": "page one\fpage two",
        "trailing_newline": "an answer with a trailing newline\n",
        "indented": "  an indented answer",
        "message_time": "[Message Time: 2026-03-10 14:30]\nreplied at a time",
        "breadcrumb": "here is the picture\n[image: /tmp/cat.png]",
        "echo": 'sent it\nmessage("hello")',
        "echo_only": 'message("hello")',
    }
    out = []
    for name, text in texts.items():
        c = Case("rewrite", name).user("hi").assistant(text)
        out.append(c.user(text).assistant("plain"))
    c = Case("rewrite", "echo_only_with_reasoning").user("say hi")
    out.append(c.assistant('message("hi")', reasoning_content="send it").user("ok"))
    c = Case("rewrite", "with_incomplete_group").user("look")
    c.calls("exec", content="Let me look.\r\n")
    out.append(c.user("well?").assistant("nothing came back\n"))
    return out


def beyond() -> list[Case]:
    """Flags nanobot 0.3.5 puts on messages that its get_history reads and the seed does not
    know: `_command` (a slash command and its reply, stored but never replayed) and
    `_channel_delivery` (an assistant message delivered on its own, kept before the user
    turn that answers it); and the pointer under its new name alone."""
    out = []
    c = Case("beyond", "command_mid").user("hi").assistant("hello")
    c.user("/status", _command=True).assistant("model: x, 42 tokens", _command=True)
    out.append(c.user("thanks").assistant("any time"))
    c = Case("beyond", "command_first").user("/help", _command=True)
    out.append(c.assistant("/new, /status, /help", _command=True).user("q").assistant("a"))
    c = Case("beyond", "command_last").user("q").assistant("a").user("/status", _command=True)
    out.append(c.assistant("all fine", _command=True))
    c = Case("beyond", "command_only").user("/status", _command=True)
    out.append(c.assistant("all fine", _command=True))
    c = Case("beyond", "delivery_first").assistant("Reminder: standup in 5", _channel_delivery=True)
    out.append(c.user("thanks, joining").assistant("have fun"))
    c = Case("beyond", "delivery_mid").user("q").assistant("a")
    c.assistant("Reminder: standup in 5", _channel_delivery=True)
    out.append(c.user("joining").assistant("ok"))
    c = Case("beyond", "delivery_then_assistant").user("q").assistant("a")
    c.assistant("Reminder", _channel_delivery=True).assistant("another note")
    out.append(c.user("seen").assistant("ok"))
    c = chat(Case("beyond", "pointer_last_archived_only"), 6)
    c.pointer = 3
    c.only_last_archived = True
    out.append(c)
    c = Case("beyond", "delivery_and_command").user("q").assistant("a")
    c.assistant("Reminder", _channel_delivery=True)
    c.user("/status", _command=True).assistant("fine", _command=True)
    out.append(c.user("thanks").assistant("ok"))
    return out


class Lcg:
    """A fixed pseudo-random sequence (Python's `random` may change between versions)."""

    def __init__(self, seed: int) -> None:
        self.state = seed

    def next(self, bound: int) -> int:
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) % 2**64
        return (self.state >> 33) % bound


def mixed(count: int = 56) -> list[Case]:
    """Random sessions like memtape's history property test: users, assistants, tool calls,
    results for calls made so far, strays, at a random pointer, under random limits."""
    rng = Lcg(15)
    out = []
    for k in range(count):
        c = Case("mixed", f"mixed{k:02}")
        issued: list[tuple[str, str]] = []
        for step in range(4 + rng.next(14)):
            r = rng.next(14)
            if r < 4:
                c.user(f"u{step} of {k}")
            elif r < 7:
                c.assistant(f"a{step} of {k}")
            elif r < 9:
                names = ["exec", "read_file", "web_search"][: 1 + rng.next(3)]
                issued.extend(zip(c.calls(*names), names))
            elif r < 13 and issued:
                call_id, name = issued[rng.next(len(issued))]
                c.result(call_id, f"r{step}", name)
            else:
                c.result(f"call_stray_{k}_{step}", "stray")
        c.pointer = rng.next(len(c.messages) // 2 + 1)
        rest = len(c.messages) - c.pointer
        c.limits = sorted({1 + rng.next(max(rest, 1)), 1 + rng.next(max(rest, 1)), BIG})
        out.append(c)
    return out


FAMILIES = {
    "plain": plain,
    "tools": tools,
    "incomplete": incomplete,
    "orphans": orphans,
    "consolidation": consolidation,
    "rewrite": rewrite,
    "beyond": beyond,
    "mixed": mixed,
}


def record(case: Case, workspace: Path, root: Path) -> dict[str, Any]:
    """Saves `case` with nanobot's own store, loads it back and asks nanobot for history."""
    writer = SessionManager(workspace, sessions_root=root)
    session = writer.get_or_create(case.key)
    for msg in case.messages:
        fields = {k: v for k, v in msg.items() if k not in ("role", "content")}
        session.add_message(msg["role"], msg["content"], **fields)
    session.metadata = case.metadata
    session.last_consolidated = case.pointer
    if case.checkpoint is not None:
        session.commit_summary_checkpoint(
            "Ada asked for a search and two files; the exec call never came back.",
            insert_at=case.checkpoint,
            last_active=BASE_TIME,
        )
        # The marker's time is the clock's: fix it (between its neighbours), like every other
        # time here.
        at = BASE_TIME + timedelta(seconds=max(7 * case.checkpoint - 3, 0))
        session.messages[case.checkpoint]["timestamp"] = at.isoformat()
        case.pointer = session.last_consolidated
        case.messages = session.messages
    session.created_at = BASE_TIME
    last = case.messages[-1]["timestamp"] if case.messages else BASE_TIME.isoformat()
    session.updated_at = datetime.fromisoformat(last)
    writer.save(session)
    path = writer._get_session_path(case.key)
    text = path.read_text(encoding="utf-8")
    if case.only_last_archived:
        head, rest = text.split("\n", 1)
        fields = json.loads(head)
        del fields["last_consolidated"]
        text = json.dumps(fields, ensure_ascii=False) + "\n" + rest
        path.write_text(text, encoding="utf-8")

    reader = SessionManager(workspace, sessions_root=root)
    loaded = reader.read_session_snapshot(case.key)
    assert loaded is not None and loaded.messages == session.messages, case.name
    assert loaded.last_consolidated == case.pointer, case.name
    limits = case.limits or default_limits(len(case.messages) - case.pointer)
    histories = [
        {"max_messages": n, "history": loaded.get_history(max_messages=n)} for n in limits
    ]
    return {"name": case.name, "file": text, "histories": histories}


def timed(message: dict[str, Any]) -> dict[str, Any]:
    """A message with its timestamp parsed, so equal instants written differently compare
    equal (memtape always writes microseconds)."""
    return {**message, "timestamp": datetime.fromisoformat(message["timestamp"])}


def check_memtape(memtape: str, cases: list[dict[str, Any]], workspace: Path) -> tuple[int, int]:
    """Imports and exports each case with memtape; nanobot must load the export as the same
    session and give the same history as from its own file. Returns (histories compared,
    equal); a session read differently counts none of its histories as equal."""
    compared = equal = 0
    for case in cases:
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "data"
            src = Path(tmp) / "in.jsonl"
            src.write_text(case["file"], encoding="utf-8")
            # Lines end at "\n" only (str.splitlines would also split at U+2028 in a text).
            lines = case["file"].removesuffix("\n").split("\n")
            key = json.loads(lines[0])["key"]
            base = ["--data-dir", str(data), "-q"]
            subprocess.run([memtape, "init", *base], check=True, capture_output=True)
            subprocess.run(
                [memtape, "import", "--format", "nanobot", str(src), *base],
                check=True,
                capture_output=True,
            )
            exported = subprocess.run(
                [memtape, "export", "--format", "nanobot", key, *base],
                check=True,
                capture_output=True,
                text=True,
                encoding="utf-8",
            ).stdout
            root = Path(tmp) / "sessions"
            manager = SessionManager(workspace, sessions_root=root)
            path = manager._get_session_path(key)
            path.write_text(exported, encoding="utf-8")
            loaded = SessionManager(workspace, sessions_root=root).read_session_snapshot(key)
            if loaded is None:
                print(f"nanobot could not load memtape's export of {case['name']}")
                continue
            head, *messages = [json.loads(line) for line in lines]
            pointer = head.get("last_archived", head.get("last_consolidated"))
            same = (
                loaded.metadata == head["metadata"]
                and loaded.last_consolidated == pointer
                and [timed(m) for m in loaded.messages] == [timed(m) for m in messages]
            )
            if not same:
                print(f"{case['name']}: nanobot reads memtape's export as another session")
            for h in case["histories"]:
                compared += 1
                got = loaded.get_history(max_messages=h["max_messages"])
                if same and got == h["history"]:
                    equal += 1
                else:
                    print(f"{case['name']} (max {h['max_messages']}): nanobot reads memtape's "
                          f"export differently:\n  own:     {h['history']}\n  memtape: {got}")
    return compared, equal


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memtape", help="a memtape binary: check nanobot loads its exports")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    all_cases = []
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "workspace"
        root = Path(tmp) / "sessions"
        for family, build in FAMILIES.items():
            cases = [record(c, workspace, root) for c in build()]
            lines = [
                json.dumps(c, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
                for c in cases
            ]
            (OUT / f"{family}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
            all_cases.extend(cases)
        # One store holds every case in the test: names (and so session keys) are unique.
        names = [c["name"] for c in all_cases]
        assert len(set(names)) == len(names), "duplicate case names"
        histories = sum(len(c["histories"]) for c in all_cases)
        print(
            f"nanobot-ai {version('nanobot-ai')}: {len(all_cases)} sessions, {histories} "
            f"histories recorded in {OUT.relative_to(ROOT)}"
        )
        if args.memtape:
            compared, equal = check_memtape(args.memtape, all_cases, workspace)
            print(f"nanobot read memtape's exports: {equal} of {compared} histories equal")
            if equal != compared:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
