"""The project README's Python snippet runs as written against a running server of its own
(the one `MEMTAPE_URL` names, as the README's first command's server would be at its
default), on a fresh store as a new user's is."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import memtape

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_the_readme_python_snippet_runs_as_written(tmp_path):
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- python -->\n```python\n(.*?)```\n<!-- /python -->", readme, re.S)
    assert block, "README.md has no python block between <!-- python --> markers"
    with memtape.Memtape.local(tmp_path / "data", model="none") as server:
        env = dict(os.environ, MEMTAPE_URL=server.base_url, MEMTAPE_API_KEY=server.api_key)
        done = subprocess.run(
            [sys.executable, "-c", block.group(1)], capture_output=True, text=True, env=env, cwd=tmp_path
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Hi, I am Ada. I prefer dark mode.\n"
