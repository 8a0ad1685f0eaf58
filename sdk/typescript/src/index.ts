// memtape's TypeScript client: `Memtape`, its errors, and the API's types (generated from
// the server's OpenAPI document).

export {
  Memtape,
  Memtape as default,
  ROUTES,
  DEFAULT_BASE_URL,
  DEFAULT_MAX_RETRIES,
  DEFAULT_TIMEOUT,
  AgentsResource,
  MemoriesResource,
  MemoryResource,
  RetentionResource,
  SessionsResource,
  ToolsResource,
  WalResource,
  WorkspaceResource,
} from './client.js';
export type { Answer, ClientOptions, Params, RequestOptions, Scope } from './client.js';
export {
  APIConnectionError,
  APIConnectionTimeoutError,
  APIError,
  APIUserAbortError,
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
} from './errors.js';
export { operations } from './operations.js';
export type { OperationInfo, OperationKey, Operations } from './operations.js';
// The API's types; the module has nothing else (`export *` rather than `export type *`,
// which TypeScript before 5.0 cannot read in the declarations).
export * from './types.js';
export { VERSION } from './version.js';
