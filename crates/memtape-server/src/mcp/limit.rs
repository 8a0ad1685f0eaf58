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

/// The MCP sessions each key opened, as far as the session manager still holds them, and
/// the sessions being started.
#[derive(Default)]
pub struct Sessions {
    manager: OnceLock<Arc<LocalSessionManager>>,
    by_key: Mutex<HashMap<String, Opened>>,
}

/// One key's sessions: those started, and how many requests are starting one now.
#[derive(Default)]
struct Opened {
    ids: Vec<Arc<str>>,
    starting: usize,
}

impl Sessions {
    /// Counts against `manager`'s sessions (set once, when the MCP service is built).
    pub(crate) fn watch(&self, manager: Arc<LocalSessionManager>) {
        let _ = self.manager.set(manager);
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, Opened>> {
        self.by_key.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Room for one more session of `key` under `max`, taken at once (so requests starting
    /// sessions together never pass the limit between them): the key's sessions the
    /// manager no longer holds are forgotten first. `None` when there is no room.
    async fn reserve(self: &Arc<Self>, key: &str, max: usize) -> Option<Reservation> {
        let known: Vec<Arc<str>> = self
            .keys()
            .get(key)
            .map(|o| o.ids.clone())
            .unwrap_or_default();
        let gone: Vec<Arc<str>> = match self.manager.get() {
            Some(manager) => {
                let live = manager.sessions.read().await;
                known
                    .into_iter()
                    .filter(|id| !live.contains_key(id))
                    .collect()
            }
            None => Vec::new(),
        };
        let mut keys = self.keys();
        let opened = keys.entry(key.to_owned()).or_default();
        // Only those seen gone: a session started meanwhile stays.
        opened.ids.retain(|id| !gone.contains(id));
        if opened.ids.len() + opened.starting >= max {
            if opened.ids.is_empty() && opened.starting == 0 {
                keys.remove(key);
            }
            return None;
        }
        opened.starting += 1;
        Some(Reservation {
            sessions: Arc::clone(self),
            key: key.to_owned(),
        })
    }
}

/// Room taken for a session being started; given back when dropped (the request ended,
/// or was dropped), as the session itself if one was started.
struct Reservation {
    sessions: Arc<Sessions>,
    key: String,
}

impl Reservation {
    fn started(self, id: Arc<str>) {
        self.sessions
            .keys()
            .entry(self.key.clone())
            .or_default()
            .ids
            .push(id);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut keys = self.sessions.keys();
        if let Some(opened) = keys.get_mut(&self.key) {
            opened.starting = opened.starting.saturating_sub(1);
            if opened.ids.is_empty() && opened.starting == 0 {
                keys.remove(&self.key);
            }
        }
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
    let max = state.limits().mcp_sessions_per_key;
    let Some(reservation) = state.mcp_sessions().reserve(&key, max).await else {
        return ApiError::new(
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            "too_many_sessions",
            format!(
                "this key has {max} MCP sessions open (the limit): close one (DELETE /mcp with \
                 its Mcp-Session-Id) or let idle ones expire (5 minutes) before starting another"
            ),
        )
        .into_response();
    };
    let response = next.run(request).await;
    if let Some(id) = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    {
        reservation.started(Arc::from(id));
    }
    response
}
