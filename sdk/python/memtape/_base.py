"""The transport under both clients: the server's URL and key, scope defaults, JSON in and
typed values out, errors as exceptions, and retries only where a retry cannot store twice."""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from typing import Any

import httpx
import pydantic
import pydantic_core

from ._errors import APIConnectionError, APITimeoutError, status_error
from ._version import __version__

DEFAULT_URL = "http://127.0.0.1:7077"
"""Where the client looks for a server when neither `base_url` nor `MEMTAPE_URL` says."""

DEFAULT_TIMEOUT = 60.0
"""Seconds a request may take (the server's own limit is 30 s; model calls take longer)."""

DEFAULT_MAX_RETRIES = 2
"""Retries after the first attempt, for requests a retry cannot run twice."""

# Answers worth another attempt: the server was busy, restarting, or a proxy lost it.
_RETRY_STATUS = {408, 429, 502, 503, 504}

_NO_BODY = object()

_ADAPTERS: dict[Any, pydantic.TypeAdapter] = {}


def _adapter(cast: Any) -> pydantic.TypeAdapter:
    adapter = _ADAPTERS.get(cast)
    if adapter is None:
        adapter = _ADAPTERS[cast] = pydantic.TypeAdapter(cast)
    return adapter


def _jsonable(value: dict[str, Any]) -> dict[str, Any]:
    """A body's fields that were given (None leaves a field to the server's default)."""
    return pydantic_core.to_jsonable_python(
        {k: v for k, v in value.items() if v is not None}, by_alias=True, exclude_none=True
    )


class _Base:
    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        agent: str | None = None,
        user: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
    ) -> None:
        self.base_url = (base_url or os.environ.get("MEMTAPE_URL") or DEFAULT_URL).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("MEMTAPE_API_KEY")
        self.agent = agent
        """The agent every call is for unless it names another (the server's default: `default`)."""
        self.user = user
        """The user every call is for unless it names another."""
        self.timeout = timeout
        self.max_retries = max_retries

    def _scope(self, agent: str | None, user: str | None) -> dict[str, str]:
        scope = {"agent": agent or self.agent, "user": user or self.user}
        return {k: v for k, v in scope.items() if v is not None}

    def _headers(self) -> dict[str, str]:
        headers = {"user-agent": f"memtape-python/{__version__}", "accept": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return headers

    def _build(
        self,
        method: str,
        query: dict[str, Any],
        json: Any,
        content: str | bytes | None,
        idempotency_key: str | None,
        keyed: bool,
        upload: tuple[str, bytes, str] | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """The arguments of the request, and whether it may be retried: a read may, and a
        write the server keeps an idempotency record of (one key for all its attempts)."""
        headers = self._headers()
        kwargs: dict[str, Any] = {
            "params": {k: _query_value(v) for k, v in query.items() if v is not None},
            "headers": headers,
        }
        write = method not in ("GET", "HEAD")
        if upload is not None:
            # A form (httpx writes its boundary); the server takes one only with an
            # Authorization header, which any value satisfies on a server without keys.
            headers.setdefault("authorization", "Bearer local")
            kwargs["files"] = {"file": upload}
        elif content is not None:
            headers["content-type"] = "application/x-ndjson"
            kwargs["content"] = content
        elif write:
            # Every write is JSON, also without a body: the server refuses other writes, as
            # a web page of another site could send them.
            headers["content-type"] = "application/json"
            if json is not _NO_BODY and json is not None:
                kwargs["content"] = pydantic_core.to_json(_jsonable(json))
        if write and keyed:
            headers["idempotency-key"] = idempotency_key or str(uuid.uuid4())
        return kwargs, not write or keyed

    def _should_retry(
        self, attempt: int, response: httpx.Response | None, write: bool, retryable: bool
    ) -> bool:
        if not retryable or attempt >= self.max_retries:
            return False
        if response is None:
            return True
        if response.status_code in _RETRY_STATUS:
            # A server without a model stays without one: asking again cannot help.
            return not (response.status_code == 503 and _code(response) == "no_model")
        # A retried write whose first attempt still runs on the server: wait for it.
        return write and attempt > 0 and response.status_code == 409

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        if response is not None:
            try:
                return min(float(response.headers.get("retry-after", "")), 60.0)
            except ValueError:
                pass
        return min(0.5 * 2**attempt, 8.0) * (1 - 0.25 * random.random())

    def _parse(self, response: httpx.Response, cast: Any) -> Any:
        if response.status_code >= 400:
            raise status_error(response)
        if cast is str:
            return response.text
        return _adapter(cast).validate_python(response.json())


def _code(response: httpx.Response) -> str | None:
    """The error code of an error answer, if it has the API's error body."""
    try:
        return response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def _query_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _connection_error(e: httpx.TransportError, url: str) -> APIConnectionError:
    if isinstance(e, httpx.TimeoutException):
        return APITimeoutError(f"{url}: no answer within the timeout ({e})", request=e.request)
    return APIConnectionError(f"{url}: cannot reach the memtape server ({e})", request=e.request)


class _SyncBase(_Base):
    """The synchronous transport (httpx.Client)."""

    def __init__(self, *args: Any, http_client: httpx.Client | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._http = http_client or httpx.Client(timeout=self.timeout)

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any],
        cast: Any,
        json: Any = _NO_BODY,
        content: str | bytes | None = None,
        idempotency_key: str | None = None,
        keyed: bool = False,
        timeout: float | None = None,
        upload: tuple[str, bytes, str] | None = None,
    ) -> Any:
        kwargs, retryable = self._build(method, query, json, content, idempotency_key, keyed, upload)
        url = self.base_url + path
        write = method not in ("GET", "HEAD")
        attempt = 0
        while True:
            response = None
            try:
                response = self._http.request(method, url, timeout=timeout or self.timeout, **kwargs)
            except httpx.TransportError as e:
                if not self._should_retry(attempt, None, write, retryable):
                    raise _connection_error(e, self.base_url) from e
            if response is not None and not self._should_retry(attempt, response, write, retryable):
                return self._parse(response, cast)
            time.sleep(self._delay(attempt, response))
            attempt += 1

    def close(self) -> None:
        """Closes the connections."""
        self._http.close()


class _AsyncBase(_Base):
    """The asynchronous transport (httpx.AsyncClient)."""

    def __init__(self, *args: Any, http_client: httpx.AsyncClient | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._http = http_client or httpx.AsyncClient(timeout=self.timeout)

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any],
        cast: Any,
        json: Any = _NO_BODY,
        content: str | bytes | None = None,
        idempotency_key: str | None = None,
        keyed: bool = False,
        timeout: float | None = None,
        upload: tuple[str, bytes, str] | None = None,
    ) -> Any:
        kwargs, retryable = self._build(method, query, json, content, idempotency_key, keyed, upload)
        url = self.base_url + path
        write = method not in ("GET", "HEAD")
        attempt = 0
        while True:
            response = None
            try:
                response = await self._http.request(method, url, timeout=timeout or self.timeout, **kwargs)
            except httpx.TransportError as e:
                if not self._should_retry(attempt, None, write, retryable):
                    raise _connection_error(e, self.base_url) from e
            if response is not None and not self._should_retry(attempt, response, write, retryable):
                return self._parse(response, cast)
            await asyncio.sleep(self._delay(attempt, response))
            attempt += 1

    async def close(self) -> None:
        """Closes the connections."""
        await self._http.aclose()
