//! Idempotent writes: a write sent with an `Idempotency-Key` header (Stripe's design, the
//! IETF draft's header) is run once per key and tenant; sent again with the same key and
//! the same request, it is answered with the first answer (and `Idempotent-Replayed:
//! true`) and stores nothing. The key is claimed in the store before the write runs
//! ([`memtape::Store::claim_request`]), so a retry that arrives while the first is still
//! running is told so (409), and a key reused for another request is refused (422). Keys
//! are remembered for 24 hours. The same holds for MCP tool calls that carry an
//! `idempotency_key` argument and for the CLI's `--idempotency-key`.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use memtape::Claim;
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::state::{AppState, Caller};

/// The header.
pub const HEADER: &str = "idempotency-key";

/// The header a replayed answer carries.
pub const REPLAYED: &str = "idempotent-replayed";

/// The largest answer remembered whole; a larger one is remembered as its status with an
/// empty body (no write route answers that much).
const MAX_REMEMBERED: usize = 1024 * 1024;

/// A request's fingerprint: what it asks, so a key sent again with another request is
/// told apart from a retry.
pub fn fingerprint(parts: &[&[u8]]) -> String {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    hash.finalize()
        .iter()
        .fold(String::with_capacity(64), |mut hex, b| {
            use std::fmt::Write;
            let _ = write!(hex, "{b:02x}");
            hex
        })
}

/// What became of a write run under a key.
pub enum Outcome {
    /// It ran now: its status and body.
    Ran(u16, Vec<u8>),
    /// It had run before: the first answer.
    Replayed(u16, Vec<u8>),
}

/// Runs `write` once for `key` of `tenant` and a request with `fingerprint`: claims the
/// key, runs the write and records its answer; a key already answered gives the first
/// answer back without running anything. A write that answers 503 or 429 (nothing done;
/// try again) lets the key go.
pub async fn once<F>(
    state: &AppState,
    tenant: &str,
    key: &str,
    fingerprint: String,
    write: F,
) -> Result<Outcome, ApiError>
where
    F: Future<Output = (u16, Vec<u8>)>,
{
    let (t, k) = (tenant.to_owned(), key.to_owned());
    let claim = state
        .run(move |engine| {
            Ok(engine
                .store()
                .claim_request(&t, &k, &fingerprint, engine.now())
                .map(|c| (c, fingerprint))?)
        })
        .await?;
    let (claim, fingerprint) = claim;
    let mismatch = || {
        ApiError::unprocessable(
            "this Idempotency-Key was used for another request in the last 24 hours: send a \
             new key for a new request",
        )
    };
    match claim {
        Claim::Claimed => {}
        Claim::Running { fingerprint: first } if first == fingerprint => {
            return Err(ApiError::conflict(
                "a request with this Idempotency-Key is still running (or its server stopped \
                 before it answered): try again later, or check what was stored and send a \
                 new key",
            ));
        }
        Claim::Answered {
            fingerprint: first,
            status,
            body,
        } if first == fingerprint => return Ok(Outcome::Replayed(status, body)),
        // An erasure scrubbed the record (its request or answer may have held what was
        // erased): the request ran once, and its answer cannot be given again.
        Claim::Running { fingerprint: first }
        | Claim::Answered {
            fingerprint: first, ..
        } if first.starts_with("erased:") => {
            return Err(ApiError::unprocessable(format!(
                "the request with this Idempotency-Key ran, and its record was then wiped by \
                 erasure #{} (it could have held erased content): it is not run again and \
                 its answer cannot be replayed; check what is stored, and send a new key for \
                 a new request",
                &first["erased:".len()..]
            )));
        }
        Claim::Running { .. } | Claim::Answered { .. } => return Err(mismatch()),
    }
    let (status, body) = write.await;
    let (t, k) = (tenant.to_owned(), key.to_owned());
    let keep = if body.len() <= MAX_REMEMBERED {
        body.clone()
    } else {
        Vec::new()
    };
    let retry = status == 503 || status == 429;
    let recorded = state
        .run(move |engine| {
            let store = engine.store();
            if retry {
                store.release_request(&t, &k)?;
            } else {
                store.finish_request(&t, &k, status, &keep)?;
            }
            Ok(())
        })
        .await;
    if let Err(e) = recorded {
        // The write is done and answered; only its replay is lost (a retry gets 409).
        tracing::warn!(error = %e.message, "could not record the answer of an idempotent request");
    }
    Ok(Outcome::Ran(status, body))
}

/// Middleware on the `/v1` routes, behind authentication: runs a write that carries an
/// `Idempotency-Key` once ([`once`]).
pub async fn remember(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if request.method().is_safe() {
        return next.run(request).await;
    }
    let Some(key) = request.headers().get(HEADER) else {
        return next.run(request).await;
    };
    let Some(key) = key.to_str().ok().map(str::to_owned) else {
        return ApiError::bad_request("the Idempotency-Key header is not printable ASCII")
            .into_response();
    };
    if let Err(e) = memtape::requests::check_key(&key) {
        return ApiError::bad_request(e.to_string()).into_response();
    }
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return ApiError::internal("no caller: idempotency runs behind authentication")
            .into_response();
    };
    let (parts, body) = request.into_parts();
    // The body was read whole by the request deadline already.
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            return ApiError::bad_request(format!("could not read the body: {e}")).into_response();
        }
    };
    let target = parts
        .uri
        .path_and_query()
        .map_or("", axum::http::uri::PathAndQuery::as_str);
    let print = fingerprint(&[parts.method.as_str().as_bytes(), target.as_bytes(), &body]);
    let request = Request::from_parts(parts, Body::from(body));
    let write = async move {
        let response = next.run(request).await;
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .map(|b| b.to_vec())
            .unwrap_or_default();
        (status, body)
    };
    match once(&state, &caller.tenant, &key, print, write).await {
        Ok(Outcome::Ran(status, body)) => answer(status, body, false),
        Ok(Outcome::Replayed(status, body)) => answer(status, body, true),
        Err(e) => e.into_response(),
    }
}

/// A JSON answer with `status` and `body`, marked as replayed or not.
fn answer(status: u16, body: Vec<u8>, replayed: bool) -> Response {
    let mut response = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response();
    if replayed {
        response
            .headers_mut()
            .insert(REPLAYED, HeaderValue::from_static("true"));
    }
    response
}
