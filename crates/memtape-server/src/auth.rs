//! Authentication: with any key configured, every API request needs `Authorization: Bearer
//! KEY`, and the key decides the tenant and the role. Without keys the server is
//! single-tenant (`default`) and only serves on loopback (`memtape serve` refuses another
//! address; a server whose last key was revoked while it listens elsewhere refuses every
//! request rather than open up).

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::{AppState, Caller, Role};

/// The tenant of a server without keys.
pub const DEFAULT_TENANT: &str = "default";

/// Middleware: finds the caller and puts it in the request's extensions.
pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    match caller(&state, req.headers().get(AUTHORIZATION)) {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}

pub(crate) fn caller(
    state: &AppState,
    header: Option<&axum::http::HeaderValue>,
) -> Result<Caller, ApiError> {
    let enabled = state.keys().enabled().map_err(key_file_error)?;
    if !enabled {
        if !state.loopback() {
            return Err(ApiError::unauthorized(
                "this server has no API keys and listens beyond loopback; create one with \
                 `memtape keys create --tenant T`",
            ));
        }
        return Ok(Caller {
            tenant: DEFAULT_TENANT.to_owned(),
            role: Role::Admin,
            key: None,
        });
    }
    let Some(header) = header else {
        return Err(ApiError::unauthorized(
            "this server needs an API key: send `Authorization: Bearer KEY`",
        ));
    };
    // The scheme is case-insensitive (RFC 9110, 11.1).
    let key = header
        .to_str()
        .ok()
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, key)| key.trim())
        .ok_or_else(|| ApiError::unauthorized("the Authorization header must be `Bearer KEY`"))?;
    state
        .keys()
        .verify(key)
        .map_err(key_file_error)?
        .ok_or_else(|| ApiError::unauthorized("this API key is not valid (unknown or revoked)"))
}

/// A key file that cannot be read: its path and the reason go to the server's log, and the
/// client (who may not be authenticated yet) learns only that the server cannot check keys.
fn key_file_error(e: impl std::fmt::Display) -> ApiError {
    tracing::error!("the API key file cannot be read: {e}");
    ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "this server cannot check API keys now (its key file cannot be read); its operator \
         finds why in the server's log",
    )
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::internal("no caller: the route is not behind authentication"))
    }
}
