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
    /// A stable code: `bad_request`, `query_too_long`, `unauthorized`, `forbidden`,
    /// `refused`, `not_found`, `conflict`, `payload_too_large`, `unsupported_media_type`,
    /// `unprocessable`, `too_many_sessions`, `timeout`, `busy` (nothing was written; try
    /// again), `unavailable`, `no_model` (the route needs a model the server has not got),
    /// `model_failed`, `internal`.
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

/// How long the same server error is logged once: a failure every request meets (a broken
/// index) fills the log with one line per interval, not per request.
const REPEATED_ERRORS: std::time::Duration = std::time::Duration::from_secs(10);

/// The last server error logged, when, and how many times it came again since.
static LAST_ERROR: std::sync::Mutex<Option<(String, std::time::Instant, u64)>> =
    std::sync::Mutex::new(None);

/// Logs a server error, unless the same one was logged less than [`REPEATED_ERRORS`] ago
/// (then it is counted, and the count goes with its next line).
fn log_server_error(code: &str, message: &str) {
    let mut last = LAST_ERROR
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = std::time::Instant::now();
    match last.as_mut() {
        Some((m, at, repeats)) if m == message && now.duration_since(*at) < REPEATED_ERRORS => {
            *repeats += 1;
        }
        Some((m, _, repeats)) if m == message => {
            tracing::error!(code, repeated_since_last_logged = *repeats, "{message}");
            *last = Some((message.to_owned(), now, 0));
        }
        other => {
            if let Some((m, _, repeats)) = other
                && *repeats > 0
            {
                tracing::error!(repeated_since_last_logged = *repeats, "{m}");
            }
            tracing::error!(code, "{message}");
            *last = Some((message.to_owned(), now, 0));
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            log_server_error(self.code, &self.message);
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
            // The store's state refuses it: a session with entries, a file holding what an
            // erasure took (retrying the same file cannot succeed).
            E::SessionNotEmpty(..) | E::Erased { .. } => Self::conflict(message),
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
            // Every other failure is the server's own (a file it cannot write, a search
            // index that failed).
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Counts the events logged while it is the subscriber.
    struct Count(Arc<AtomicUsize>);

    impl tracing::Subscriber for Count {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, _: &tracing::Event<'_>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// Issue 31, section 5: a server error every request meets is logged once per
    /// interval, not once per request (a broken index wrote 23.7 MB of log in 50 s).
    #[test]
    fn a_repeated_server_error_is_logged_once_per_interval() {
        let logged = Arc::new(AtomicUsize::new(0));
        tracing::subscriber::with_default(Count(logged.clone()), || {
            for _ in 0..1000 {
                let _ = ApiError::internal("search index: broken for this test").into_response();
            }
            let _ = ApiError::internal("another failure for this test").into_response();
        });
        // The first, then (when another comes) how many times it came again, then the other.
        assert_eq!(logged.load(Ordering::Relaxed), 3);
    }
}
