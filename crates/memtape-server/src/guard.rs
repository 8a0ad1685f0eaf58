//! What a web page must not be able to do to a memtape server: the middleware in front of
//! every route that stops cross-site writes (CSRF) and DNS rebinding.
//!
//! - **Host.** A page on another site can make the browser send requests to loopback under
//!   the site's own name (DNS rebinding: `evil.example` resolving to 127.0.0.1), and then
//!   read the answers as same-origin. So the `Host` header must name the server: a loopback
//!   name (`localhost`, a loopback address) or the address it listens on, or a name given
//!   with `--allow-host`. A server listening on every address (`0.0.0.0`) with keys and no
//!   `--allow-host` serves any name: every request there carries a key a page cannot know.
//! - **Content type.** A browser sends a cross-site `POST` without asking first (no CORS
//!   preflight) only with a "simple" content type (`text/plain`, a form, multipart). Every
//!   request with a body method (`POST`, `PUT`, `PATCH`) must say it is JSON (`application/
//!   json` or `+json`; JSON lines on the routes that stream them), even when it carries no
//!   body, so a browser must ask first, and memtape never answers a preflight with
//!   permission. `DELETE` always needs a preflight. The one form taken, an upload's
//!   `multipart/form-data` on `POST /v1/files`, must carry an `Authorization` header, which
//!   a page cannot add without asking first either.
//! - **Origin.** A write whose `Origin` is not the server's own (`http(s)://` and the
//!   `Host` it was sent to) is refused, unless `--allow-origin` names it (the memory
//!   browser is served from the server itself, so it is the server's own).
//!
//! Every answer also carries `X-Content-Type-Options: nosniff`, so no body is ever read
//! as another type than the one it is sent as.

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::http::header::{CONTENT_TYPE, HOST, ORIGIN};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

/// The sites the server answers besides its own names.
#[derive(Clone, Debug, Default)]
pub struct Sites {
    /// Host names (or addresses) requests may name in `Host`, besides loopback names and
    /// the listening address (`--allow-host`), lower case, without a port. Empty on a
    /// server listening on every address: then any name.
    pub hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`) whose pages may write (`--allow-origin`); `*`
    /// allows every origin.
    pub origins: Vec<String>,
    /// Whether any `Host` is served (a server listening on every address, with keys).
    pub any_host: bool,
}

/// The routes whose request bodies are JSON lines.
const JSON_LINES_ROUTES: &[&str] = &["/v1/import"];

/// JSON lines media types (the import route's).
const JSON_LINES_TYPES: &[&str] = &[
    "application/x-ndjson",
    "application/jsonl",
    "application/x-jsonlines",
];

/// Middleware: refuses requests a browser would send for another site, then adds
/// `nosniff` to the answer.
pub async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let mut response = match check(state.sites(), &request) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    };
    response.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}

fn check(sites: &Sites, request: &Request) -> Result<(), ApiError> {
    let host = request
        .headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
        .ok_or_else(|| ApiError::bad_request("the request has no Host header"))?;
    let name = host_name(host)
        .ok_or_else(|| ApiError::bad_request("the Host header is not a host name"))?;
    if !sites.any_host && !is_loopback_name(&name) && !sites.hosts.contains(&name) {
        return Err(ApiError::forbidden(format!(
            "this server does not answer to the name {name:?} (a page of another site \
             resolving to it?); start it with --allow-host {name} to serve that name"
        )));
    }
    let method = request.method();
    if [Method::POST, Method::PUT, Method::PATCH].contains(method) {
        let media = request
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|h| h.to_str().ok())
            .map(|t| {
                t.split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase()
            })
            .unwrap_or_default();
        let json = media == "application/json" || media.ends_with("+json");
        let lines = JSON_LINES_ROUTES.contains(&request.uri().path())
            && JSON_LINES_TYPES.contains(&media.as_str());
        // An upload is a form, which a page may send anywhere without asking: it is taken
        // only with an `Authorization` header, which no page can add without a preflight.
        let upload =
            request.uri().path() == crate::rest::UPLOAD_PATH && media == "multipart/form-data";
        if upload
            && !request
                .headers()
                .contains_key(axum::http::header::AUTHORIZATION)
        {
            return Err(ApiError::forbidden(
                "an upload (multipart/form-data) must carry an Authorization header (on a \
                 server without keys, any `Bearer` value): a page of another site cannot send \
                 one without asking first",
            ));
        }
        if !json && !lines && !upload {
            let wanted = if JSON_LINES_ROUTES.contains(&request.uri().path()) {
                "`Content-Type: application/x-ndjson` (or application/json)"
            } else {
                "`Content-Type: application/json`"
            };
            let got = if media.is_empty() {
                "none".to_owned()
            } else {
                format!("{media:?}")
            };
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!(
                    "a {method} must be sent as JSON: {wanted}, also without a body (got {got})"
                ),
            ));
        }
    }
    if !method.is_safe()
        && let Some(origin) = request.headers().get(ORIGIN)
    {
        let origin = origin
            .to_str()
            .unwrap_or("null")
            .trim()
            .to_ascii_lowercase();
        let origin = origin.trim_end_matches('/');
        let own = [format!("http://{host}"), format!("https://{host}")]
            .iter()
            .any(|o| o.eq_ignore_ascii_case(origin));
        let allowed = sites
            .origins
            .iter()
            .any(|o| o == "*" || o.trim_end_matches('/').eq_ignore_ascii_case(origin));
        if !own && !allowed {
            return Err(ApiError::forbidden(format!(
                "a page of {origin} may not write to this server (it is not the server's own \
                 origin); start it with --allow-origin {origin} to let it"
            )));
        }
    }
    Ok(())
}

/// The name of a `Host` header (`name`, `name:port`, `[v6]:port`), lower case, without
/// the port, the brackets or a trailing dot. `None` when it is not a valid authority.
pub fn host_name(host: &str) -> Option<String> {
    let authority: axum::http::uri::Authority = host.parse().ok()?;
    if authority.as_str().contains('@') {
        return None;
    }
    let name = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    (!name.is_empty()).then_some(name)
}

/// Whether `name` always means this machine: `localhost` (and names under it, which
/// browsers resolve to loopback themselves) or a loopback address.
fn is_loopback_name(name: &str) -> bool {
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names() {
        assert_eq!(host_name("127.0.0.1:7077").as_deref(), Some("127.0.0.1"));
        assert_eq!(host_name("[::1]:7077").as_deref(), Some("::1"));
        assert_eq!(host_name("LocalHost.").as_deref(), Some("localhost"));
        assert_eq!(
            host_name("evil.example:7077").as_deref(),
            Some("evil.example")
        );
        assert_eq!(host_name("user@127.0.0.1"), None);
        assert_eq!(host_name(""), None);
        assert!(is_loopback_name("127.0.0.2"));
        assert!(is_loopback_name("::1"));
        assert!(!is_loopback_name("evil.example"));
        assert!(!is_loopback_name("127.0.0.1.evil.example"));
    }
}
