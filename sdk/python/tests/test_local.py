"""`Memtape.local()`: the bundled binary on a free loopback port, private to its key, gone
when closed; what it stored stays in the data directory."""

from __future__ import annotations

import os
import subprocess
import sysconfig

import httpx
import pytest

import memtape


def test_a_local_server_is_private_and_stops_when_closed(tmp_path):
    with memtape.Memtape.local(tmp_path / "data", model="none") as m:
        assert m.base_url.startswith("http://127.0.0.1:")
        m.sessions.append("notes", role="user", content="kept after close")
        # Another program on the machine, without the key, is refused.
        answer = httpx.get(m.base_url + "/v1/sessions")
        assert answer.status_code == 401
        process = m._server.process
    assert process.poll() == 0, "stopped cleanly (SIGTERM: exit 0)"
    with pytest.raises(memtape.APIConnectionError):
        memtape.Memtape(m.base_url, m.api_key, max_retries=0).health()
    # What it stored is in the data directory: the CLI reads it.
    out = subprocess.run(
        [
            memtape.find_memtape_bin(),
            "--model",
            "none",
            "history",
            "notes",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "kept after close" in out.stdout


def test_a_server_that_cannot_start_says_why(tmp_path):
    with pytest.raises(memtape.MemtapeError) as e:
        memtape.Memtape.local(tmp_path / "data", model="no-such-model", startup_timeout=60)
    assert "memtape serve did not start" in str(e.value) and "no-such-model" in str(e.value)


def test_the_binary_is_the_one_this_package_installed():
    if os.environ.get("MEMTAPE_BIN"):
        pytest.skip("MEMTAPE_BIN chooses the binary in this run")
    found = memtape.find_memtape_bin()
    assert os.path.dirname(found) == sysconfig.get_path("scripts"), found
    # The package itself is the installed one, not the source folder.
    assert memtape.__file__.startswith(sysconfig.get_path("purelib")), memtape.__file__
    version = subprocess.run(["memtape", "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == f"memtape {memtape.__version__}"
    module = subprocess.run(
        [os.path.join(sysconfig.get_path("scripts"), "python"), "-m", "memtape", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert module.stdout == version.stdout
