"""Records Bub tapes written by Bub's own code (bub 0.5.1) and what Bub reads from them,
as fixtures for crates/memtape/tests/refs_bub.rs. No LLM is involved: `Tape.record_chat`,
`handoff` and `append_event` write the tapes through Bub's `FileTapeStore`, the way Bub's
agent loop does; each case then records Bub's context (`Tape.read_messages` with the
default `TapeContext`) and Bub's anchor queries on the file.

Run: `$(scripts/refs/setup) scripts/refs/bub_tapes.py` (rewrites the fixture; the output is
deterministic: a fixed clock, no randomness).

Bub 0.5.1 has no memory zones; the seed (001) writes a zone as
`handoff("memory/open", {"version": N})`, `append_event("memory.long_term" | "memory.daily",
...)`, `handoff("memory/seal", {"version": N})`, which these cases do with Bub's own API.
Each case also records the view the seed asks for (2.3: only message, tool_call and
tool_result entries; 7.4: memory is invisible to context selection): Bub's own selection over
those entries after the last anchor that is not a zone's.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import bub.tape as bub_tape
from bub.builtin.context import default_tape_context
from bub.errors import BubError, ErrorKind
from bub.store import AsyncTapeStoreAdapter, FileTapeStore, TapeQuery
from bub.tape import Tape, TapeContext, TapeEntry, build_messages

OUT = Path(__file__).resolve().parents[2] / "crates/memtape/tests/fixtures/refs/bub/cases.json"


class Clock(datetime):
    """Bub stamps entries with `datetime.now(UTC)`: one second per call from a fixed start."""

    tick = 0

    @classmethod
    def now(cls, tz=None):  # noqa: ANN001, ANN206
        cls.tick += 1
        return datetime(2026, 2, 10, 9, 0, 0, 123456, tzinfo=UTC) + timedelta(seconds=cls.tick)


bub_tape.datetime = Clock  # utc_now() reads the module's datetime at each call

ZONE_ANCHORS = {"memory/open", "memory/seal"}


def call(i: int, name: str, args: dict) -> dict:
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


async def zone(tape: Tape, version: int, long_term: str | None, dailies: list[tuple[str, str]]) -> None:
    await tape.handoff(name="memory/open", state={"version": version})
    if long_term is not None:
        await tape.append_event("memory.long_term", {"content": long_term, "updated_at": "2026-02-10T09:00:00+00:00"})
    for date, content in dailies:
        await tape.append_event(
            "memory.daily", {"date": date, "content": content, "updated_at": "2026-02-10T09:00:00+00:00"}
        )
    await tape.handoff(name="memory/seal", state={"version": version})


async def plain(tape: Tape) -> None:
    await tape.ensure_bootstrap_anchor()
    await tape.record_chat(
        run_id="r1",
        system_prompt="You are Bub.",
        new_messages=[{"role": "user", "content": "hello"}],
        response_text="Hi! How can I help?",
    )
    await tape.record_chat(
        run_id="r2",
        system_prompt=None,
        new_messages=[{"role": "user", "content": "Ünïcödé ✓ and \"quotes\" \\ back\nslash"}],
        response_text="noted",
    )


async def tools(tape: Tape) -> None:
    await tape.ensure_bootstrap_anchor()
    await tape.record_chat(
        run_id="r1",
        system_prompt="sys",
        new_messages=[{"role": "user", "content": "weather and time?"}],
        response_text="calling",
        tool_calls=[call(1, "weather", {"city": "Tashkent"}), call(2, "clock", {})],
        tool_results=[{"ok": True, "n": 1, "temp": 21.5, "tags": ["a", "ü"]}, "12:00"],
    )
    await tape.record_chat(
        run_id="r2",
        system_prompt=None,
        new_messages=[],
        response_text=None,
        tool_calls=[call(3, "lookup", {"q": "x"})],
        tool_results=[[1, 2.0, None, {"nested": {"deep": True}}]],
    )
    await tape.record_chat(
        run_id="r3",
        system_prompt=None,
        new_messages=[],
        response_text="",
        tool_calls=[call(4, "count", {})],
        tool_results=[42],
    )
    await tape.record_chat(
        run_id="r4",
        system_prompt=None,
        new_messages=[],
        response_text="Sunny, 21.5°C, noon.",
    )


async def anchors(tape: Tape) -> None:
    await tape.ensure_bootstrap_anchor()
    await tape.record_chat(run_id="r1", system_prompt=None, new_messages=[{"role": "user", "content": "one"}], response_text="1")
    await tape.handoff(name="phase/a", state={"summary": "first phase"})
    await tape.record_chat(run_id="r2", system_prompt=None, new_messages=[{"role": "user", "content": "two"}], response_text="2")
    await tape.handoff(name="phase/b")
    await tape.record_chat(run_id="r3", system_prompt=None, new_messages=[{"role": "user", "content": "three"}], response_text="3")
    await tape.handoff(name="phase/a", state={"summary": "again"})
    await tape.record_chat(run_id="r4", system_prompt=None, new_messages=[{"role": "user", "content": "four"}], response_text="4")


async def errors_and_hidden(tape: Tape) -> None:
    await tape.ensure_bootstrap_anchor()
    await tape.record_chat(
        run_id="r1",
        system_prompt="sys",
        new_messages=[{"role": "user", "content": "do it"}],
        response_text=None,
        error=BubError(ErrorKind.INVALID_INPUT, "bad things", {"why": "test"}),
    )
    await tape.store.append(tape.name, TapeEntry.message({"role": "user", "content": "hidden"}, context=False))
    await tape.append_event("note", {"x": 1}, context=False)
    await tape.record_chat(run_id="r2", system_prompt=None, new_messages=[{"role": "user", "content": "visible"}], response_text="ok")


async def seed_zones(tape: Tape) -> None:
    """Seed 001, 5.1 to 5.3: ensure() writes an empty zone, saves write new versions."""
    await tape.ensure_bootstrap_anchor()
    await zone(tape, 1, None, [])
    await tape.record_chat(run_id="r1", system_prompt=None, new_messages=[{"role": "user", "content": "hello"}], response_text="Hi!")
    await tape.record_chat(
        run_id="r2",
        system_prompt=None,
        new_messages=[{"role": "user", "content": "remember: I like Python"}],
        response_text=None,
        tool_calls=[call(1, "memory_save", {"content": "User likes Python"})],
        tool_results=["saved to long-term memory"],
    )
    await zone(tape, 2, "User likes Python", [])
    await tape.record_chat(run_id="r3", system_prompt=None, new_messages=[], response_text="Got it, I'll remember that!")
    await zone(
        tape,
        3,
        "User likes Python",
        [("2026-02-10", "# 2026-02-10\n\n- Implemented tape memory zone"), ("2026-02-09", "# 2026-02-09\n\n- Designed")],
    )
    await tape.record_chat(run_id="r4", system_prompt=None, new_messages=[{"role": "user", "content": "what do you know?"}], response_text="You like Python.")


async def zone_last(tape: Tape) -> None:
    """A save at the very end: the tape's last anchor is a zone's seal."""
    await tape.ensure_bootstrap_anchor()
    await tape.record_chat(run_id="r1", system_prompt=None, new_messages=[{"role": "user", "content": "call me Ada"}], response_text="Hi Ada")
    await zone(tape, 1, "User is Ada", [])


async def no_anchor(tape: Tape) -> None:
    await tape.record_chat(run_id="r1", system_prompt=None, new_messages=[{"role": "user", "content": "no anchor here"}], response_text="ok")


async def reset(tape: Tape) -> None:
    await tape.ensure_bootstrap_anchor()
    await tape.record_chat(run_id="r1", system_prompt=None, new_messages=[{"role": "user", "content": "before"}], response_text="b")
    await tape.reset()
    await tape.record_chat(run_id="r2", system_prompt=None, new_messages=[{"role": "user", "content": "after"}], response_text="a")


async def message_roles(tape: Tape) -> None:
    """Messages as callers hand them to record_chat: a system message, a named user."""
    await tape.ensure_bootstrap_anchor()
    await tape.record_chat(
        run_id="r1",
        system_prompt=None,
        new_messages=[
            {"role": "system", "content": "The user is on mobile."},
            {"role": "user", "content": "hi", "name": "ada"},
        ],
        response_text="hello Ada",
    )


CASES = [plain, tools, anchors, errors_and_hidden, seed_zones, zone_last, no_anchor, reset, message_roles]

QUERIES = [
    {"last_anchor": True},
    {"after_anchor": "session/start"},
    {"after_anchor": "phase/a"},
    {"after_anchor": "memory/seal"},
    {"after_anchor": "nope"},
    {"between": ["phase/a", "phase/b"]},
    {"between": ["session/start", "phase/b"]},
    {"between": ["phase/b", "phase/a"]},
    {"between": ["memory/open", "memory/seal"]},
    {"between": ["phase/b", "nope"]},
]


def entry_json(entry: TapeEntry) -> dict:
    return {"id": entry.id, "kind": entry.kind, "payload": entry.payload, "meta": entry.meta, "date": entry.date}


async def run_query(store: AsyncTapeStoreAdapter, name: str, q: dict) -> dict:
    query = TapeQuery(tape=name, store=store)
    if q.get("last_anchor"):
        query = query.last_anchor()
    elif "after_anchor" in q:
        query = query.after_anchor(q["after_anchor"])
    else:
        query = query.between_anchors(*q["between"])
    try:
        return {"ids": [e.id for e in await store.fetch_all(query)]}
    except BubError as e:
        return {"error": e.kind.value}


async def record(case, directory: Path) -> dict:
    store = AsyncTapeStoreAdapter(FileTapeStore(directory))
    tape = Tape(archive_path=directory / "archive", store=store, context=default_tape_context()).scoped(case.__name__)
    await case(tape)
    text = (directory / f"{case.__name__}.jsonl").read_text(encoding="utf-8")
    try:
        view: dict = {"messages": await tape.read_messages()}
    except BubError as e:
        view = {"error": e.kind.value}
    # The seed's view: Bub's own selection of the message, tool_call and tool_result
    # entries (2.3) after the last anchor that is not a zone's (7.4).
    entries = list(await store.fetch_all(TapeQuery(tape=tape.name, store=store)))
    start = 0
    for i, e in enumerate(entries):
        if e.kind == "anchor" and e.payload.get("name") not in ZONE_ANCHORS:
            start = i + 1
    visible = [
        e
        for e in entries[start:]
        if e.meta.get("context") is not False and e.kind in ("message", "tool_call", "tool_result")
    ]
    seed_view = build_messages(visible, default_tape_context())
    return {
        "name": case.__name__,
        "tape": text,
        "bub_view": view,
        "seed_view": seed_view,
        "queries": [{"query": q, **(await run_query(store, tape.name, q))} for q in QUERIES],
    }


async def main() -> None:
    cases = []
    for case in CASES:
        Clock.tick = 0
        with tempfile.TemporaryDirectory() as d:
            cases.append(await record(case, Path(d)))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"bub": "0.5.1", "cases": cases}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(cases)} cases -> {OUT}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
