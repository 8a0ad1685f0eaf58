//! MateClaw's own memory API (seed 003), so a MateClaw client works unchanged:
//! `POST /api/v1/memory/{agentId}/emergence` (daily notes merged into MEMORY.md) and
//! `POST /api/v1/memory/{agentId}/summarize/{conversationId}` (memory extraction for one
//! conversation), answering in MateClaw's envelope: `{"code": 200, "data": {"status":
//! "completed", ...}}` on success, `{"code": CODE, "msg": "..."}` on failure, with the same
//! code as the HTTP status.
//!
//! A compatibility layer, not part of the `/v1` API: these routes are left out of the
//! OpenAPI document and of the generated clients. They run the `/v1` operations
//! (`POST /v1/memory/emergence`, `POST /v1/sessions/{s}/extraction`) behind the same
//! authentication and the same cross-site guard (a write says it is JSON, also without a
//! body); MateClaw's `agentId` is memtape's agent and its `conversationId` a session of
//! that agent, in the caller's tenant. Every answer under `/api/` — the guard's, the
//! authentication's, an unknown route's — is put in the envelope by [`envelope`].

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::error::Result;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::rest::session::MemoryRunWire;
use crate::state::{AppState, Caller};
use crate::wire::ScopeParams;

/// The prefix of every route of this layer.
pub const PREFIX: &str = "/api/";

/// The largest error body read to rewrite it into the envelope (errors are short).
const MAX_ERROR_BYTES: usize = 64 * 1024;

/// This module's routes.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/memory/{agent_id}/emergence", post(emergence))
        .route(
            "/api/v1/memory/{agent_id}/summarize/{conversation_id}",
            post(summarize),
        )
}

/// MateClaw's success envelope around a run: `status` is `completed`, or `skipped` (with
/// the reason) when it did not run.
fn completed(run: MemoryRunWire) -> Json<Value> {
    let status = if run.skipped.is_some() {
        "skipped"
    } else {
        "completed"
    };
    let reason = run.skipped.unwrap_or(run.reason);
    Json(json!({
        "code": 200,
        "data": {
            "status": status,
            "shouldUpdate": run.should_update,
            "reason": reason,
            "changed": run.changed,
        }
    }))
}

/// `POST /api/v1/memory/{agentId}/emergence`: MateClaw's manual consolidation.
async fn emergence(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
) -> Result<Json<Value>> {
    let params = ScopeParams::new(Some(agent_id), None);
    let body = crate::rest::EmergenceBody::default();
    let Json(run) =
        crate::rest::emergence(State(state), caller, ApiQuery(params), ApiJson(body)).await?;
    Ok(completed(run))
}

/// `POST /api/v1/memory/{agentId}/summarize/{conversationId}`: MateClaw's manual memory
/// extraction for one conversation.
async fn summarize(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((agent_id, conversation_id)): ApiPath<(String, String)>,
) -> Result<Json<Value>> {
    // MateClaw's manual trigger: no conversation source, so no cooldown or skip rule.
    let params = crate::rest::ExtractionParams {
        agent: Some(agent_id),
        user: None,
        source: None,
    };
    let Json(run) = crate::rest::extraction(
        State(state),
        caller,
        ApiPath(conversation_id),
        ApiQuery(params),
    )
    .await?;
    Ok(completed(run))
}

/// Middleware in front of everything: an answer under [`PREFIX`] that is not a success is
/// rewritten into MateClaw's failure envelope, `{"code": STATUS, "msg": MESSAGE}`, keeping
/// its status and headers (a `Retry-After` stays). Other paths pass untouched.
pub async fn envelope(request: Request, next: Next) -> Response {
    if !request.uri().path().starts_with(PREFIX) {
        return next.run(request).await;
    }
    let response = next.run(request).await;
    let status = response.status();
    if status.is_success() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_ERROR_BYTES)
        .await
        .unwrap_or_default();
    let message = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| {
            status
                .canonical_reason()
                .unwrap_or("the request failed")
                .to_owned()
        });
    let text = json!({"code": status.as_u16(), "msg": message}).to_string();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(text))
}
