"""Every example runs as written (a fresh data directory, no embedding model, the scripted
model server for the agent example) and prints what it promises."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "sdk" / "python" / "examples"


def run(name: str, tmp_path, **env: str) -> str:
    environment = dict(os.environ, MEMTAPE_DATA_DIR=str(tmp_path / "data"), MEMTAPE_MODEL="none", **env)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, env=environment, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_quickstart(tmp_path):
    out = run("quickstart.py", tmp_path)
    assert "dark mode" in out and "Ada prefers dark mode." in out


def test_async_client(tmp_path):
    out = run("async_client.py", tmp_path)
    assert out.startswith("10 messages") and "roof" in out


def test_openai_agents_session(tmp_path, scripted):
    model = scripted([{"text": "Hello Ada."}, {"text": "Your name is Ada."}])
    out = run("openai_agents_session.py", tmp_path, OPENAI_BASE_URL=model.base_url, OPENAI_API_KEY="test")
    assert out.splitlines() == ["Hello Ada.", "Your name is Ada."]
    assert "My name is Ada." in [m.get("content") for m in model.bodies()[1]["messages"]]


def test_langchain_history(tmp_path):
    out = run("langchain_history.py", tmp_path)
    assert "blue flowerpot" in out.splitlines()[-1] and "langchain-demo" in out


def test_every_example_is_tested():
    tested = {"quickstart.py", "async_client.py", "openai_agents_session.py", "langchain_history.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested
