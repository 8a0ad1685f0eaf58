// memtape memory browser: the REST client. Every call goes to this server's public /v1 API,
// with the API key the user gave (kept in sessionStorage) as a bearer token.

const KEY = "memtape.key";

/** An error answer of the API: its status, its stable code and its message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export const key = {
  get: () => sessionStorage.getItem(KEY) || "",
  set: (k) => sessionStorage.setItem(KEY, k),
  clear: () => sessionStorage.removeItem(KEY),
};

/** Called with the error when an answer is 401 (the page shows its login form). */
let onUnauthorized = () => {};
export function whenUnauthorized(f) {
  onUnauthorized = f;
}

/** `path?query` with the empty values left out. */
export function url(path, query = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

/** Calls the API: `method` on `path` with `query` and a JSON `body`; the JSON answer. */
export async function call(method, path, query = {}, body = undefined) {
  const headers = { Accept: "application/json" };
  const k = key.get();
  if (k) headers.Authorization = `Bearer ${k}`;
  // Every write says it is JSON, with or without a body: the server refuses writes in the
  // content types a page of another site could send without asking first.
  if (body !== undefined || method !== "GET") headers["Content-Type"] = "application/json";
  let res;
  try {
    res = await fetch(url(path, query), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
  } catch (e) {
    throw new ApiError(0, "network", `the server did not answer (${e.message})`);
  }
  const text = await res.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : {};
  } catch {
    json = null;
  }
  if (!res.ok) {
    const detail = (json && json.error) || {};
    const err = new ApiError(res.status, detail.code || "http", detail.message || `HTTP ${res.status}`);
    if (res.status === 401) onUnauthorized(err);
    throw err;
  }
  return json || {};
}

export const get = (path, query) => call("GET", path, query);
export const post = (path, query, body) => call("POST", path, query, body);
export const put = (path, query, body) => call("PUT", path, query, body);
