//! The memory browser: a page at `/` (and its assets under `/ui/`) that reads and corrects
//! memory through the public `/v1` API only. Plain HTML, CSS and ES modules written by
//! hand, embedded in the binary: no build step, nothing fetched from elsewhere. The page
//! itself is public (not behind the API-key middleware); its API calls carry the key the
//! user gives it. Every answer has a strict Content-Security-Policy (no inline script, no
//! other origin) and an `ETag`, revalidated on each load (`Cache-Control: no-cache`).

use std::sync::OnceLock;

use axum::Router;
use axum::extract::Path;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH, REFERRER_POLICY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

/// The policy every answer of the page carries: its own origin only, no inline script or
/// style, no plugins, no framing.
pub(crate) const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// One embedded file: its name under `/ui/`, its content type and its text.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const JS: &str = "text/javascript; charset=utf-8";

/// The page and its assets (`index.html` is also served at `/`).
const ASSETS: &[Asset] = &[
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: include_str!("../ui/index.html"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../ui/app.css"),
    },
    Asset {
        name: "app.js",
        content_type: JS,
        body: include_str!("../ui/app.js"),
    },
    Asset {
        name: "api.js",
        content_type: JS,
        body: include_str!("../ui/api.js"),
    },
    Asset {
        name: "render.js",
        content_type: JS,
        body: include_str!("../ui/render.js"),
    },
    Asset {
        name: "memory.js",
        content_type: JS,
        body: include_str!("../ui/memory.js"),
    },
];

/// The routes of the page: `/`, `/ui/{file}` and an empty `/favicon.ico` (browsers ask for
/// it; the page has no images), outside authentication.
pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|headers: HeaderMap| async move { serve("index.html", &headers) }))
        .route(
            "/favicon.ico",
            get(|| async {
                let mut h = secure_headers("image/x-icon");
                h.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=86400"));
                (StatusCode::NO_CONTENT, h)
            }),
        )
        .route(
            "/ui/{file}",
            get(|Path(file): Path<String>, headers: HeaderMap| async move {
                serve(&file, &headers)
            }),
        )
}

/// The `ETag` of each asset (a hash of its text), computed once.
fn etags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let hash = Sha256::digest(a.body.as_bytes());
                let hex: String = hash[..12].iter().map(|b| format!("{b:02x}")).collect();
                format!("\"{hex}\"")
            })
            .collect()
    })
}

/// Answers with the asset `name`: 304 when the client's copy is current, 404 for another
/// name.
fn serve(name: &str, headers: &HeaderMap) -> Response {
    let Some(at) = ASSETS.iter().position(|a| a.name == name) else {
        return (
            StatusCode::NOT_FOUND,
            secure_headers("text/plain; charset=utf-8"),
            "no such file",
        )
            .into_response();
    };
    let asset = &ASSETS[at];
    let etag = &etags()[at];
    let mut out = secure_headers(asset.content_type);
    out.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(value) = HeaderValue::from_str(etag) {
        out.insert(ETAG, value);
    }
    let fresh = headers
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    if fresh {
        out.remove(CONTENT_TYPE);
        return (StatusCode::NOT_MODIFIED, out).into_response();
    }
    (StatusCode::OK, out, asset.body).into_response()
}

/// The content type and the headers every answer of the page carries.
fn secure_headers(content_type: &'static str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h
}
