"""memtape: long-term memory for LLM agents. A client of the memtape server's REST API
(`Memtape`, `AsyncMemtape`), a private server from the bundled binary (`Memtape.local()`),
and the `memtape` command itself, installed with this package."""

from . import _models as types
from ._binary import find_memtape_bin
from ._client import AsyncClient, AsyncMemtape, Client, Memtape
from ._errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InternalServerError,
    MemtapeError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    UnprocessableEntityError,
)
from ._version import __version__

__all__ = [
    "APIConnectionError",
    "APIStatusError",
    "APITimeoutError",
    "AsyncClient",
    "AsyncMemtape",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "InternalServerError",
    "Memtape",
    "MemtapeError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitError",
    "UnprocessableEntityError",
    "__version__",
    "find_memtape_bin",
    "types",
]
