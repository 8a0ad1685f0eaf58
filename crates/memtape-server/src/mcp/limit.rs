//! At most [`Limits::mcp_sessions_per_key`](crate::Limits::mcp_sessions_per_key) MCP
//! sessions per API key (per tenant on a loopback server without keys): one key opening
//! sessions without end would hold the server's memory. A request that starts a session
//! (no `Mcp-Session-Id`) is refused with 429 when the key has that many open; the ones it
//! counts are those the session manager still holds (a closed session, or one idle past its
//! keep-alive, no longer counts), so a client that closes its sessions, or stops using
//! them, gets its room back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use crate::error::ApiError;
use crate::state::{AppState, Caller};

/// The MCP sessions each key opened, as far as the session manager still holds them.
#[derive(Default)]
pub struct Sessions {
    manager: OnceLock<Arc<LocalSessionManager>>,
    by_key: Mutex<HashMap<String, Vec<Arc<str>>>>,
}

impl Sessions {
    /// Counts against `manager`'s sessions (set once, when the MCP service is built).
    pub(crate) fn watch(&self, manager: Arc<LocalSessionManager>) {
        let _ = self.manager.set(manager);
    }

    /// The sessions of `key` the manager still holds (the others are forgotten here).
    async fn open(&self, key: &str) -> usize {
        let Some(manager) = self.manager.get() else {
            return 0;
        };
        let mine: Vec<Arc<str>> = self
            .by_key
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
            .unwrap_or_default();
        let live = manager.sessions.read().await;
        let still: Vec<Arc<str>> = mine
            .into_iter()
            .filter(|id| live.contains_key(id))
            .collect();
        drop(live);
        let count = still.len();
        let mut by_key = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        if still.is_empty() {
            by_key.remove(key);
        } else {
            by_key.insert(key.to_owned(), still);
        }
        count
    }

    fn started(&self, key: &str, id: Arc<str>) {
        self.by_key
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.to_owned())
            .or_default()
            .push(id);
    }
}

/// Middleware on `/mcp`, behind authentication: refuses a new session past the key's limit
/// and notes the sessions it starts.
pub async fn limit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let starts = request.method() == axum::http::Method::POST
        && !request.headers().contains_key("mcp-session-id");
    if !starts {
        return next.run(request).await;
    }
    let Some(caller) = request.extensions().get::<Caller>() else {
        return ApiError::internal("/mcp is not behind authentication").into_response();
    };
    // Counted by the key's hash (the one the key file keeps); by tenant without keys.
    let key = match request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
    {
        Some(header) => crate::keys::hash(header),
        None => format!("tenant {}", caller.tenant),
    };
    let sessions = state.mcp_sessions();
    let max = state.limits().mcp_sessions_per_key;
    if sessions.open(&key).await >= max {
        return ApiError::new(
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            "too_many_sessions",
            format!(
                "this key has {max} MCP sessions open (the limit): close one (DELETE /mcp with \
                 its Mcp-Session-Id) or let idle ones expire (5 minutes) before starting another"
            ),
        )
        .into_response();
    }
    let response = next.run(request).await;
    if let Some(id) = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    {
        sessions.started(&key, Arc::from(id));
    }
    response
}
