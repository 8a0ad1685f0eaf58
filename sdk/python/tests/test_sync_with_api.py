"""The client and the API agree: the committed models and methods are what the OpenAPI
document generates, the server this package installed serves that same document, and
every one of its operations is a method."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import httpx

import memtape
from memtape._resources import OPERATIONS

ROOT = pathlib.Path(__file__).resolve().parents[3]
SPEC = ROOT / "crates" / "memtape-server" / "openapi.json"


def test_the_committed_client_is_what_the_document_generates():
    run = subprocess.run(
        [sys.executable, str(ROOT / "sdk" / "python" / "scripts" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr


def test_the_installed_server_serves_the_document_the_client_was_generated_from(client):
    served = httpx.get(client.base_url + "/openapi.json").json()
    assert served == json.loads(SPEC.read_text())


def test_every_operation_is_a_method(client):
    served = httpx.get(client.base_url + "/openapi.json").json()
    operations = sorted(
        f"{method.upper()} {path}"
        for path, methods in served["paths"].items()
        for method in methods
        if method in ("get", "post", "put", "patch", "delete")
    )
    assert operations == OPERATIONS
    for resource in (
        "sessions",
        "memory",
        "memories",
        "workspace",
        "tools",
        "wal",
        "retention",
        "entries",
        "agents",
    ):
        assert hasattr(client, resource)
        assert hasattr(memtape.AsyncMemtape("http://x"), resource)


def test_the_package_version_is_the_binary_version():
    out = subprocess.run([memtape.find_memtape_bin(), "--version"], capture_output=True, text=True)
    assert out.stdout.split() == ["memtape", memtape.__version__]
