// The errors the client throws: MemtapeError and below it APIError (the server answered
// with an error: its status, and the `code` and `message` of its ErrorBody), one subclass
// per status a caller may want to catch, and the errors of requests that got no answer.

import type { ErrorBody, ErrorDetail } from './types.js';

/** Every error this client throws. */
export class MemtapeError extends Error {
  override name = 'MemtapeError';
}

/**
 * The server answered with an error status. `status` is the HTTP status; `code` and
 * `message` are the server's (`{"error": {"code", "message"}}`): `code` is stable
 * (`bad_request`, `unauthorized`, `forbidden`, `not_found`, `conflict`, `unprocessable`,
 * `no_model`, ...), `message` is for people.
 */
export class APIError extends MemtapeError {
  override name = 'APIError';
  /** The HTTP status. */
  readonly status: number;
  /** The server's stable error code; undefined when the body was not an ErrorBody. */
  readonly code: string | undefined;
  /** The response's headers. */
  readonly headers: Headers;
  /** The error body, parsed (undefined when it was not JSON). */
  readonly body: unknown;

  constructor(status: number, body: unknown, text: string, headers: Headers) {
    const detail = errorDetail(body);
    super(detail?.message ?? (text.trim() || `HTTP ${status}`));
    this.status = status;
    this.code = detail?.code;
    this.headers = headers;
    this.body = body;
  }

  /** The error for a status: the subclass that names it, or APIError. */
  static from(status: number, body: unknown, text: string, headers: Headers): APIError {
    const Class = BY_STATUS[status] ?? (status >= 500 ? InternalServerError : APIError);
    return new Class(status, body, text, headers);
  }
}

/** 400: the request is wrong (a bad parameter, a body that is not valid). */
export class BadRequestError extends APIError {
  override name = 'BadRequestError';
}
/** 401: no API key, or one that is not valid. */
export class AuthenticationError extends APIError {
  override name = 'AuthenticationError';
}
/** 403: the key may not do this (a write key asking for an admin's route, ...). */
export class PermissionDeniedError extends APIError {
  override name = 'PermissionDeniedError';
}
/** 404: nothing there, or nothing this caller may see. */
export class NotFoundError extends APIError {
  override name = 'NotFoundError';
}
/** 409: the state changed under the request (`if_version`), or the same write is still running. */
export class ConflictError extends APIError {
  override name = 'ConflictError';
}
/** 413: the body is larger than the server takes. */
export class PayloadTooLargeError extends APIError {
  override name = 'PayloadTooLargeError';
}
/** 422: JSON of the wrong shape, or an idempotency key reused for another request. */
export class UnprocessableEntityError extends APIError {
  override name = 'UnprocessableEntityError';
}
/** 429: too many requests. */
export class RateLimitError extends APIError {
  override name = 'RateLimitError';
}
/** 5xx: the server, its disk or its model failed (503 `no_model`: no model is configured). */
export class InternalServerError extends APIError {
  override name = 'InternalServerError';
}

const BY_STATUS: Record<number, typeof APIError> = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  422: UnprocessableEntityError,
  429: RateLimitError,
};

/** No answer: the server could not be reached, or the connection broke. */
export class APIConnectionError extends MemtapeError {
  override name = 'APIConnectionError';
  constructor(message = 'Connection error.', options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** No answer within the timeout. */
export class APIConnectionTimeoutError extends APIConnectionError {
  override name = 'APIConnectionTimeoutError';
  constructor(message = 'Request timed out.') {
    super(message);
  }
}

/** The caller's AbortSignal aborted the request. */
export class APIUserAbortError extends MemtapeError {
  override name = 'APIUserAbortError';
  constructor(message = 'Request was aborted.') {
    super(message);
  }
}

function errorDetail(body: unknown): ErrorDetail | undefined {
  const error = (body as Partial<ErrorBody> | null | undefined)?.error;
  if (error && typeof error === 'object' && typeof error.message === 'string' && typeof error.code === 'string') {
    return error;
  }
  return undefined;
}
