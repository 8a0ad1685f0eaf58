"""The clients: `Memtape` (sync) and `AsyncMemtape` over the REST API, and their `local()`
constructors, which start a private server from the bundled binary."""

from __future__ import annotations

import os
from typing import Any

import httpx

from ._base import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, _AsyncBase, _SyncBase
from ._local import STARTUP_TIMEOUT, LocalServer
from ._resources import AsyncOperations, Operations


class Memtape(Operations, _SyncBase):
    """A memtape server's API.

    The URL and key come from the arguments, else `MEMTAPE_URL` (default
    `http://127.0.0.1:7077`) and `MEMTAPE_API_KEY`. `agent` and `user` are the scope every
    call uses unless it names another. Writes carry an idempotency key, so they are retried
    (on a broken connection, 408, 429, 502-504) without storing twice.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        agent: str | None = None,
        user: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        http_client: httpx.Client | None = None,
    ) -> None:
        super().__init__(
            base_url,
            api_key,
            agent=agent,
            user=user,
            timeout=timeout,
            max_retries=max_retries,
            http_client=http_client,
        )
        self._resources()
        self._server: LocalServer | None = None

    @classmethod
    def local(
        cls,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        model: str | None = None,
        agent: str | None = None,
        user: str | None = None,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        startup_timeout: float = STARTUP_TIMEOUT,
        **kwargs: Any,
    ) -> Memtape:
        """A client of its own server: the bundled `memtape serve` on a free loopback port
        with a key only this process knows, stopped by `close()` (or leaving the `with`).
        `data_dir` defaults to memtape's (`~/.local/share/memtape`); `model` to the
        binary's (`minilm`: run `memtape models fetch` once, or pass `"wordllama"` or
        `"none"`). `args` are more `memtape serve` options; `env` more environment
        variables for it (`MEMTAPE_LLM_*` to give it a model)."""
        server = LocalServer(data_dir, model=model, args=args, env=env, startup_timeout=startup_timeout)
        return _owning(server, lambda: cls(server.url, server.key, agent=agent, user=user, **kwargs))

    def close(self) -> None:
        """Closes the connections, and stops the server `local()` started."""
        super().close()
        if self._server is not None:
            self._server.stop()

    def __enter__(self) -> Memtape:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncMemtape(AsyncOperations, _AsyncBase):
    """[`Memtape`][memtape.Memtape] with `async` methods (httpx.AsyncClient)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        agent: str | None = None,
        user: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(
            base_url,
            api_key,
            agent=agent,
            user=user,
            timeout=timeout,
            max_retries=max_retries,
            http_client=http_client,
        )
        self._resources()
        self._server: LocalServer | None = None

    @classmethod
    def local(
        cls,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        model: str | None = None,
        agent: str | None = None,
        user: str | None = None,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        startup_timeout: float = STARTUP_TIMEOUT,
        **kwargs: Any,
    ) -> AsyncMemtape:
        """[`Memtape.local`][memtape.Memtape.local], for the async client. Starting the
        server blocks (briefly) like any process start."""
        server = LocalServer(data_dir, model=model, args=args, env=env, startup_timeout=startup_timeout)
        return _owning(server, lambda: cls(server.url, server.key, agent=agent, user=user, **kwargs))

    async def close(self) -> None:
        """Closes the connections, and stops the server `local()` started."""
        await super().close()
        if self._server is not None:
            self._server.stop()

    async def __aenter__(self) -> AsyncMemtape:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _owning(server: LocalServer, make: Any) -> Any:
    """The client `make()` builds for `server`, owning it: a client that cannot be built
    stops the server it would have owned."""
    try:
        client = make()
    except BaseException:
        server.stop()
        raise
    client._server = server
    return client


Client = Memtape
"""The sync client under its plain name."""

AsyncClient = AsyncMemtape
"""The async client under its plain name."""
