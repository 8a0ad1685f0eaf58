"""The whole API through the sync client against the real server: sessions, messages with
tool calls and content parts, history, entries and anchors, search, context, memory and its
versions, memory files, workspace files, tools, the WAL, import and export, erasure,
retention, agents; errors as exceptions with the server's code and message."""

from __future__ import annotations

import json

import pytest

import memtape
from memtape import types


def test_messages_with_tool_calls_and_parts_round_trip(client, session):
    appended = client.sessions.append(session, role="user", content="What's the weather in Oslo?")
    assert isinstance(appended, types.Appended) and len(appended.ids) == 1
    call = types.ToolCallWire(
        id="call_1", type="function", function={"name": "weather", "arguments": '{"city": "Oslo"}'}
    )
    client.sessions.append(
        session,
        messages=[
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "4 degrees, rain"},
            {"role": "assistant", "content": [{"type": "text", "text": "It is 4 degrees and raining."}]},
        ],
    )
    history = client.sessions.history(session)
    assert [m.role for m in history.messages] == ["user", "assistant", "tool", "assistant"]
    assert history.messages[1].tool_calls[0].function.name == "weather"
    assert history.messages[2].tool_call_id == "call_1"
    entries = client.sessions.entries(session)
    assert [e.kind for e in entries.entries] == ["message", "tool_call", "tool_result", "message"]
    thread = client.entries.thread(entries.entries[-1].id)
    assert len(thread.entries) == 4
    sessions = client.sessions.list()
    assert session in [s.session for s in sessions.sessions]


def test_attachments_as_content_parts_round_trip(client, session):
    image = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    parts = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": image, "detail": "low"}},
    ]
    client.sessions.append(session, role="user", content=parts)
    message = client.sessions.history(session).messages[0]
    sent = [p.model_dump(exclude_none=True) for p in message.content]
    assert sent == parts
    assert client.search("picture", session=session).hits


def test_an_upload_goes_on_a_message_by_reference_and_comes_back_as_parts(client, session):
    upload = client.files.upload(b"\x89PNG\r\n\x1a\nkitten", filename="cat.png", media_type="image/png")
    assert upload.media_type == "image/png"
    assert client.files.get(upload.id) == upload
    reference = upload.reference.model_dump(exclude_none=True)
    client.sessions.append(session, role="user", content="look", files=[reference])
    refs = client.sessions.history(session).messages[0]
    assert [f.model_dump(exclude_none=True) for f in refs.files] == [reference]
    parts = client.sessions.history(session, attachments="parts").messages[0]
    image = parts.content[1].model_dump(exclude_none=True)
    assert image == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgpraXR0ZW4=", "detail": "low"},
    }
    with pytest.raises(memtape.UnprocessableEntityError):
        client.files.upload(b"just text", media_type="image/png")


def test_search_finds_what_was_appended_and_scores_it(client, session):
    client.sessions.append(session, role="user", content="My sister's violin recital is on Friday.")
    hits = client.search("violin recital", session=session, limit=3)
    assert hits.hits and "violin" in hits.hits[0].entry.payload["content"]
    assert isinstance(hits.hits[0].score, float)


def test_anchors_context_and_consolidation_pointer(client, session):
    first = client.sessions.append(session, role="user", content="Plan the trip to Lisbon.")
    client.sessions.append(session, role="assistant", content="Flights booked for May.")
    anchor = client.sessions.anchor(session, "phase/2", state={"done": ["flights"]})
    client.sessions.append(session, role="user", content="Now the hotel.")
    after = client.sessions.entries(session, from_last_anchor=True)
    assert [e.payload["content"] for e in after.entries] == ["Now the hotel."]
    assert anchor.id < after.entries[0].id
    context = client.sessions.context(session, budget=4000, system="You are helpful.", dry_run=True)
    assert context.messages[0].role == "system" and context.tokens <= 4000
    client.sessions.consolidate(session, first.ids[0])
    history = client.sessions.history(session)
    assert "Plan the trip to Lisbon." not in [m.content for m in history.messages]


def test_new_and_start(client, session):
    client.sessions.append(session, role="user", content="hello")
    new = client.sessions.new(session)
    assert new.archived == 1
    assert client.sessions.history(session).messages == []
    started = client.sessions.start("bub-" + session)
    assert started.bootstrap is not None


def test_memory_versions_diff_undo_blame_and_as_of(client):
    scope = {"agent": "memory-test"}
    v1 = client.memory.save("# Memory\n\n- Ada prefers dark mode.\n", **scope)
    v2 = client.memory.save("# Memory\n\n- Ada prefers light mode.\n", **scope)
    assert v2.version > v1.version
    assert "light mode" in client.memory.show(**scope).text
    assert "dark mode" in client.memory.show(as_of=str(v1.id), **scope).text
    diff = client.memory.diff(v1.version, v2.version, **scope)
    assert "-- Ada prefers dark mode." in diff.diff or "dark mode" in diff.diff
    versions = client.memory.versions(**scope)
    assert [v.version for v in versions.versions][-2:] == [v1.version, v2.version]
    blame = client.memory.blame("MEMORY.md", **scope)
    assert any("light mode" in line.text for line in blame.lines)
    undone = client.memory.undo(v1.version, **scope)
    assert undone.recorded is not None
    assert "dark mode" in client.memory.show(**scope).text
    daily = client.memory.daily("Walked to the harbour.", **scope)
    assert daily.version > v2.version
    view = client.memory.view(**scope)
    assert "MEMORY.md" in view.files and any(p.startswith("memory/") for p in view.files)
    read = client.memory.read_file("MEMORY.md", **scope)
    written = client.memory.write_file(
        "MEMORY.md", read.content + "- Likes tea.\n", if_version=read.memory_version, **scope
    )
    assert written.recorded is not None
    assert "Likes tea" in client.memory.recall(query="tea", **scope).text or client.memory.show(**scope).text


def test_memory_files_under_memories(client):
    scope = {"agent": "files-test"}
    client.memories.create("/memories/notes.md", "line one\nline two\n", **scope)
    assert "line two" in client.memories.view(path="/memories/notes.md", **scope).text
    client.memories.edit(
        path="/memories/notes.md", command="str_replace", old_str="line two", new_str="line 2", **scope
    )
    client.memories.edit(
        path="/memories/notes.md", command="insert", insert_line=0, insert_text="first", **scope
    )
    text = client.memories.view(path="/memories/notes.md", **scope).text
    assert "line 2" in text and "first" in text
    client.memories.rename("/memories/notes.md", "/memories/renamed.md", **scope)
    with pytest.raises(memtape.APIStatusError):
        client.memories.view(path="/memories/notes.md", **scope)
    client.memories.delete("/memories/renamed.md", **scope)
    assert "renamed.md" not in client.memories.view(path="/memories", **scope).text


def test_workspace_files(client):
    scope = {"agent": "workspace-test"}
    client.workspace.write("notes/plan.md", "step one", **scope)
    client.workspace.edit("notes/plan.md", "one", "two", **scope)
    assert "step two" in json.dumps(client.workspace.read("notes/plan.md", **scope))
    assert "plan.md" in json.dumps(client.workspace.list(**scope))


def test_tools_and_the_wal(client, session):
    tools = client.tools.list()
    names = [t.name for t in tools.tools]
    assert "memory_search" in names or names
    result = client.tools.call(names[0], {}, session=session)
    assert isinstance(result, types.ToolResult)
    scan = client.wal.scan("Actually, my name is Grace and I prefer tea.")
    assert scan.matches


def test_import_and_export_round_trip(client, session):
    client.sessions.append(session, role="user", content="export me")
    exported = client.export(session=session, format="nanobot")
    assert "export me" in exported
    imported = client.import_(exported, session=session + "-copy", format="nanobot")
    assert imported.entries >= 1
    assert client.sessions.history(session + "-copy").messages[-1].content == "export me"


def test_erasure_dry_run_then_real(client, session):
    client.sessions.append(session, role="user", content="my card number is 4111 1111")
    dry = client.erase("session", session=session, dry_run=True)
    assert dry.dry_run and dry.entries == 1 and dry.receipt is None
    done = client.erase("session", session=session, reason="test")
    assert done.receipt is not None and done.entries == 1
    messages = client.sessions.entries(session, kind="message").entries
    assert messages and all(e.erased is not None and e.erased.by == done.receipt for e in messages)
    assert client.search("4111", session=session).hits == []


def test_retention_agents_and_health(client):
    scope = {"agent": "retention-test"}
    set_ = client.retention.set(messages_days=30, **scope)
    assert set_.effective.messages_days == 30
    assert client.retention.get(**scope).set.messages_days == 30
    runs = client.retention.run(dry_run=True)
    assert isinstance(runs, list)
    assert client.health().status == "ok"
    assert (
        any(a.agent == "retention-test" for a in client.agents.list().agents) or client.agents.list().agents
    )


def test_flags_forget_prune_clear_and_dropped(client):
    scope = {"agent": "flags-test"}
    client.memory.save("# Memory\n\n- one\n", **scope)
    client.memory.daily("a note", **scope)
    pruned = client.memory.prune(days=3650, **scope)
    assert isinstance(pruned, types.Pruned)
    cleared = client.memory.clear(**scope)
    assert cleared.recorded is not None
    assert isinstance(client.memory.dropped(**scope), types.DroppedList)


def test_errors_carry_the_servers_code_and_message(client):
    with pytest.raises(memtape.NotFoundError) as e:
        client.sessions.history("no-such-session")
    assert e.value.status_code == 404 and e.value.code == "not_found" and e.value.message
    with pytest.raises(memtape.BadRequestError) as e:
        client.sessions.append("bad", role="user", content="x", parent=2**53 - 1)
    assert "does not exist" in e.value.message
    # A key used again for another request.
    client.sessions.append("bad", role="user", content="x", idempotency_key="k-" + "1" * 30)
    with pytest.raises(memtape.UnprocessableEntityError) as e:
        client.sessions.append("bad", role="user", content="y", idempotency_key="k-" + "1" * 30)
    assert e.value.code == "unprocessable" and "Idempotency-Key" in e.value.message
    # A write against a version that is no longer the latest.
    client.memory.save("# Memory\n", agent="conflict-test")
    with pytest.raises(memtape.ConflictError):
        client.memory.save("# Memory\n\n- other\n", if_version=0, agent="conflict-test")
    with pytest.raises(memtape.BadRequestError) as e:
        client.sessions.append("bad", role="user", content="x", parent=2**53)
    assert "2^53 - 1" in e.value.message
    with pytest.raises(memtape.BadRequestError):
        client.sessions.append("bad", messages=[])


def test_model_routes_without_a_model_say_so(client, session):
    client.sessions.append(session, role="user", content="hello")
    with pytest.raises(memtape.InternalServerError) as e:
        client.sessions.extraction(session)
    assert e.value.status_code == 503 and e.value.code == "no_model"
    assert "MEMTAPE_LLM_MODEL" in e.value.message
