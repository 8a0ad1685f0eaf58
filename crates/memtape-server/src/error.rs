//! The server's one error type and its JSON form: `{"error": {"code", "message"}}` with the
//! status a client can act on. Bad input is always a 4xx; a 5xx means the server or its
//! disk failed. Messages about another tenant's resources are the same as for resources
//! that do not exist, so an error never tells whether something exists elsewhere.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The result type of this crate.
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

/// An error as the API reports it.
#[derive(Debug, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable machine-readable code (`bad_request`, `not_found`, `conflict`, ...).
    pub code: &'static str,
    /// What is wrong, for people.
    pub message: String,
}

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable code: `bad_request`, `unauthorized`, `forbidden`, `not_found`, `conflict`,
    /// `payload_too_large`, `unprocessable`, `unavailable`, `internal`.
    pub code: String,
    /// What is wrong.
    pub message: String,
}

impl ApiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400: the request is wrong.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 401: no key, or a key that is not valid.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403: the key may not do this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 404: nothing there (or nothing this caller may see).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 409: the state changed under the request (compare-and-append, sync).
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 422: valid JSON of the wrong shape.
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "unprocessable", message)
    }

    /// 500: the server failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code, "{}", self.message);
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
            },
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<memtape::Error> for ApiError {
    fn from(e: memtape::Error) -> Self {
        use memtape::Error as E;
        use memtape_store::Error as S;
        let message = e.to_string();
        match &e {
            E::Invalid(_) | E::NotAMessage(..) | E::NeedSession(_) | E::Tool(_) | E::Config(_) => {
                Self::bad_request(message)
            }
            E::NoEntry(_) | E::NoAnchor(..) => Self::not_found(message),
            E::SessionNotEmpty(..) => Self::conflict(message),
            E::OutsideScope { .. } => Self::forbidden(message),
            E::NoIndex => Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message),
            E::Search(memtape::SearchError::QueryTooLong { .. }) => {
                Self::new(StatusCode::BAD_REQUEST, "query_too_long", message)
            }
            // Nothing was written; the client may try again.
            E::Contended(_) => Self::new(StatusCode::SERVICE_UNAVAILABLE, "busy", message),
            // The model or its server failed: nothing was written.
            E::Llm(_) | E::Model(_) => Self::new(StatusCode::BAD_GATEWAY, "model_failed", message),
            E::Store(s) => match s {
                S::Invalid(_) | S::BadParent { .. } | S::BadPointer { .. } => {
                    Self::bad_request(message)
                }
                S::Conflict { .. } => Self::conflict(message),
                S::Unwritable { .. } | S::ReadOnly(_) | S::IdsExhausted(_) => {
                    Self::new(StatusCode::INSUFFICIENT_STORAGE, "unavailable", message)
                }
                // The database server failed or is out of reach: the client may retry.
                // Its address and words go to the log, not to the client.
                S::Database { .. } => {
                    tracing::warn!("database error: {message}");
                    Self::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "unavailable",
                        "the database did not answer; try again".to_owned(),
                    )
                }
                _ => Self::internal(message),
            },
            _ => Self::internal(message),
        }
    }
}

impl From<memtape_core::Error> for ApiError {
    fn from(e: memtape_core::Error) -> Self {
        ApiError::bad_request(e.to_string())
    }
}

impl From<memtape_store::Error> for ApiError {
    fn from(e: memtape_store::Error) -> Self {
        memtape::Error::from(e).into()
    }
}
