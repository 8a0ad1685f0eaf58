"""Fixtures: a real `memtape serve` (the binary this package installed, started by
`Memtape.local`) in a temporary data directory, and the project's scripted model server
(`memtape-scripted`, speaking the OpenAI-compatible protocol on loopback)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import uuid

import pytest

import memtape

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("memtape-data")


@pytest.fixture(scope="session")
def client(data_dir: pathlib.Path):
    with memtape.Memtape.local(data_dir, model="none") as m:
        yield m


@pytest.fixture
def session() -> str:
    """A fresh session key per test."""
    return "s-" + uuid.uuid4().hex[:12]


class Scripted:
    """A running `memtape-scripted`: its base URL and the bodies it was sent."""

    def __init__(self, answers: list[dict], tmp: pathlib.Path) -> None:
        binary = os.environ.get("MEMTAPE_SCRIPTED_BIN", str(ROOT / "target" / "debug" / "memtape-scripted"))
        if not os.path.exists(binary):
            pytest.fail(
                f"{binary}: build it with `cargo build -p memtape-scripted` (or set MEMTAPE_SCRIPTED_BIN)"
            )
        script = tmp / f"script-{uuid.uuid4().hex[:8]}.json"
        script.write_text(json.dumps(answers))
        self.record = tmp / f"{script.stem}.jsonl"
        self.process = subprocess.Popen(
            [binary, str(script), "--record", str(self.record)], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        self.base_url = self.process.stdout.readline().strip()
        assert self.base_url.startswith("http://127.0.0.1:"), self.base_url

    def bodies(self) -> list[dict]:
        """The JSON bodies sent so far, in order."""
        import time

        time.sleep(0.1)  # the recorder writes every 20 ms
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def scripted(tmp_path: pathlib.Path):
    """Starts scripted model servers: `scripted([{"text": "..."}, ...])`."""
    started: list[Scripted] = []

    def start(answers: list[dict]) -> Scripted:
        s = Scripted(answers, tmp_path)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
