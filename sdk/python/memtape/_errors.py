"""The exceptions the client raises: one per failure the caller may handle differently."""

from __future__ import annotations

import httpx


class MemtapeError(Exception):
    """Anything the client raises."""


class APIConnectionError(MemtapeError):
    """The server could not be reached, or the connection broke before an answer."""

    def __init__(self, message: str, *, request: httpx.Request | None = None) -> None:
        super().__init__(message)
        self.request = request


class APITimeoutError(APIConnectionError):
    """The server did not answer within the timeout."""


class APIStatusError(MemtapeError):
    """The server answered with an error: `status_code`, and the server's `code` and `message`."""

    def __init__(self, status_code: int, code: str, message: str, *, response: httpx.Response) -> None:
        super().__init__(f"{status_code} {code}: {message}")
        self.status_code = status_code
        self.code = code
        self.message = message
        self.response = response


class BadRequestError(APIStatusError):
    """400: the request is malformed."""


class AuthenticationError(APIStatusError):
    """401: no key, or a key that is not valid."""


class PermissionDeniedError(APIStatusError):
    """403: the key may not do this."""


class NotFoundError(APIStatusError):
    """404: no such session, file, entry or version (or not the caller's)."""


class ConflictError(APIStatusError):
    """409: the memory changed since it was read, or a request with this key still runs."""


class PayloadTooLargeError(APIStatusError):
    """413: the body is larger than the server takes."""


class UnprocessableEntityError(APIStatusError):
    """422: the request is well-formed but its values are not valid."""


class RateLimitError(APIStatusError):
    """429: too many requests."""


class InternalServerError(APIStatusError):
    """5xx: the server (or the model behind it) failed."""


_BY_STATUS = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def status_error(response: httpx.Response) -> APIStatusError:
    """The exception for an error answer, with the server's code and message when it sent them."""
    code, message = "http_" + str(response.status_code), response.text.strip()
    try:
        body = response.json()
        code, message = body["error"]["code"], body["error"]["message"]
    except (ValueError, KeyError, TypeError):
        pass
    if response.status_code >= 500:
        cls = InternalServerError
    else:
        cls = _BY_STATUS.get(response.status_code, APIStatusError)
    return cls(response.status_code, code, message or response.reason_phrase, response=response)
