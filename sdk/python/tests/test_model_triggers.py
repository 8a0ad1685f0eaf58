"""The routes that run the model, from Python: a local server given a model (the
project's scripted OpenAI-compatible server, through `MEMTAPE_LLM_*`) consolidates a
session into memory, and runs extraction and emergence on demand."""

from __future__ import annotations

import json

import memtape


def reply(value: dict) -> dict:
    return {"text": json.dumps(value)}


def test_consolidation_extraction_and_emergence_run_the_model(tmp_path, scripted):
    model = scripted(
        [
            {
                "tool_call": {
                    "name": "save_memory",
                    "arguments": {
                        "history_entry": "[2026-03-10 14:30] Talked about kayaks.",
                        "memory_update": "# Memory\n- Ada likes kayaks\n",
                    },
                }
            },
            reply({"should_update": False, "reason": "nothing new"}),
            reply({"should_update": True, "memory_content": "# Memory\n- Kayaks\n", "reason": "recurs"}),
        ]
    )
    env = {"MEMTAPE_LLM_BASE_URL": model.base_url, "MEMTAPE_LLM_MODEL": "scripted"}
    with memtape.Memtape.local(tmp_path / "data", model="none", env=env) as m:
        m.sessions.append("s1", role="user", content="I bought a kayak.")
        m.sessions.append("s1", role="user", content="I paddle on Sundays.")
        done = m.sessions.consolidation("s1", all=True)
        assert done.memory_changed
        assert "Ada likes kayaks" in m.memory.show().text
        # User messages only: no exchange completes, so no extraction starts on its own.
        m.sessions.append(
            "s1",
            messages=[
                {"role": "user", "content": "On the lake by the old mill."},
                {"role": "user", "content": "Twice a month."},
            ],
        )
        extraction = m.sessions.extraction("s1")
        assert extraction.skipped is None and extraction.should_update is False
        assert extraction.reason == "nothing new"
        m.memory.daily("Paddled on the lake.")
        emergence = m.memory.emergence(days=7)
        assert emergence.should_update and emergence.reason == "recurs"
        assert "- Kayaks" in m.memory.show().text
    sent = model.bodies()
    assert len(sent) == 3
    assert any("kayak" in json.dumps(body["messages"]) for body in sent[:1])
