"""A private `memtape serve` for one client: started on a free loopback port with a key only
this process knows, stopped when the client closes (or the interpreter exits)."""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
import threading
import weakref
from typing import IO

from ._binary import find_memtape_bin
from ._errors import MemtapeError

STARTUP_TIMEOUT = 120.0
"""Seconds the server may take to listen (a first start may load and check the model)."""


class LocalServer:
    """A `memtape serve` child process: its URL, its key, and how to stop it."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        model: str | None = None,
        binary: str | None = None,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        self.key = "local_" + secrets.token_urlsafe(32)
        command = [binary or find_memtape_bin()]
        if model is not None:
            command += ["--model", model]
        command += ["serve", "--addr", "127.0.0.1:0", *args]
        if data_dir is not None:
            os.makedirs(data_dir, exist_ok=True)
            command += ["--data-dir", os.fspath(data_dir)]
        env = dict(os.environ, **(env or {}), MEMTAPE_SERVE_KEY=self.key)
        self._log: IO[bytes] = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log, env=env
        )
        self.url = self._wait_for_address(startup_timeout)
        # What the server prints after its banner (only "memtape stopped") is read and
        # dropped, so its pipe never fills.
        threading.Thread(target=self._drain, daemon=True).start()
        self._finalizer = weakref.finalize(self, _stop, self.process, self._log)

    def _wait_for_address(self, timeout: float) -> str:
        found: list[str] = []

        def read() -> None:
            assert self.process.stdout is not None
            for raw in self.process.stdout:
                line = raw.decode("utf-8", "replace")
                address = next((w for w in line.split() if w.startswith("http://")), None)
                if address:
                    found.append(address.rstrip("/"))
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        if found:
            return found[0]
        _stop(self.process, None)
        self._log.seek(0)
        said = self._log.read().decode("utf-8", "replace").strip()
        self._log.close()
        # What it said, its last lines (an error and its hint).
        why = "\n".join(said.splitlines()[-12:]) if said else f"no address within {timeout:.0f} s"
        raise MemtapeError(f"memtape serve did not start: {why}")

    def _drain(self) -> None:
        stdout = self.process.stdout
        if stdout is not None:
            for _ in stdout:
                pass

    def stop(self) -> None:
        """Stops the server (SIGTERM: requests in flight finish, the store closes cleanly)."""
        self._finalizer()


def _stop(process: subprocess.Popen[bytes], log: IO[bytes] | None) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if log is not None:
        log.close()
