//! Dify's node memory over REST (`/v1/sessions/{session}/nodes/{node}/…`): add a turn, the
//! thread-aware history, clear, and the cleanup of idle node memories (`/v1/nodes/cleanup`).
//! A node lives inside a conversation (a session) of an app (the agent, `?agent=` as on
//! every route). A node's memory also goes out and in as Dify stores it
//! (`{"version": 1, "messages": [...]}`, `…/export`, `…/import`), losslessly. The same rules as `memtape node`: the library checks the ids, a node never
//! written has an empty history, and every path is confined to the caller's tenant.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use memtape::{DEFAULT_MAX_TOKEN_LIMIT, DEFAULT_NODE_IDLE_DAYS, NodeTurn, Scope, Store};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ErrorBody, Result};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::state::{AppState, Caller, Role as KeyRole};
use crate::wire::{ChatMessage, FileRefWire, ScopeParams};

/// This module's routes.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions/{session}/nodes/{node}/turns", post(add))
        .route("/v1/sessions/{session}/nodes/{node}/history", get(history))
        .route("/v1/sessions/{session}/nodes/{node}/clear", post(clear))
        .route("/v1/sessions/{session}/nodes/{node}/export", get(export))
        .route("/v1/sessions/{session}/nodes/{node}/import", post(import))
        .route("/v1/nodes/cleanup", post(cleanup))
}

/// A node of a conversation: the path of the node routes.
#[derive(Debug, Deserialize)]
pub struct NodePath {
    /// The conversation (the session key).
    pub session: String,
    /// The workflow node's id.
    pub node: String,
}

/// The app scope (Dify's app is memtape's agent) of the caller's tenant, with the user
/// when named.
fn app_scope(caller: &Caller, p: &ScopeParams) -> Result<Scope> {
    caller.scope(p.agent(), p.user.as_deref())
}

/// One dialogue turn for a node (the arguments of Dify's `add_messages`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeTurnBody {
    /// The Dify message this turn belongs to: 1 to 256 bytes, no control character.
    #[schema(min_length = 1, max_length = 256)]
    pub message_id: String,
    /// The Dify message it follows: none (or absent) for the first message of a thread,
    /// `00000000-0000-0000-0000-000000000000` for a message from before threads.
    #[serde(default)]
    pub parent_message_id: Option<String>,
    /// The user's input to the node.
    pub user_content: String,
    /// The node's answer.
    pub assistant_content: String,
    /// Files the user attached, by reference in Dify's shape (an upload or tool file must be
    /// the caller's tenant's, as on an append).
    #[serde(default)]
    pub user_files: Vec<FileRefWire>,
    /// Files the node produced (`belongs_to` defaults to `assistant` here).
    #[serde(default)]
    pub assistant_files: Vec<FileRefWire>,
}

impl NodeTurnBody {
    /// The turn's file references, checked for their shape (a 422 naming what is wrong)
    /// and, when there are any, for being the tenant's (`files`).
    fn files(
        &self,
        files: impl FnOnce() -> Result<memtape::FilesDir>,
    ) -> Result<(Vec<memtape::FileRef>, Vec<memtape::FileRef>)> {
        let refs = |list: &[FileRefWire], owner: memtape::FileOwner| {
            list.iter()
                .map(|f| {
                    let mut r = f.to_ref()?;
                    if f.belongs_to.is_none() {
                        r.belongs_to = owner;
                    }
                    Ok(r)
                })
                .collect::<Result<Vec<_>>>()
        };
        let user = refs(&self.user_files, memtape::FileOwner::User)?;
        let assistant = refs(&self.assistant_files, memtape::FileOwner::Assistant)?;
        if !user.is_empty() || !assistant.is_empty() {
            let dir = files()?;
            for list in [&user, &assistant] {
                dir.check_all(list)
                    .map_err(|e| ApiError::unprocessable(format!("files: {e}")))?;
            }
        }
        Ok((user, assistant))
    }
}

/// The entries a turn wrote.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeAdded {
    /// The user's and the assistant's entry ids.
    pub ids: Vec<u64>,
}

/// Adds a turn to a node's memory (Dify's `add_messages` then `flush`), in one transaction.
#[utoipa::path(post, path = "/v1/sessions/{session}/nodes/{node}/turns", tag = "node",
    params(
        ("session" = String, Path, description = "The conversation (session key)"),
        ("node" = String, Path, description = "The workflow node's id"),
        ScopeParams),
    request_body = NodeTurnBody,
    responses((status = 201, body = NodeAdded), (status = 400, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn add(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(path): ApiPath<NodePath>,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<NodeTurnBody>,
) -> Result<(StatusCode, Json<NodeAdded>)> {
    caller.require(KeyRole::Write)?;
    let app = app_scope(&caller, &p)?;
    let (user_files, assistant_files) = body.files(|| state.files_of(&caller.tenant))?;
    let written = state
        .run(move |engine| {
            let mut memory = engine.node_memory(&app, Some(&path.session), &path.node)?;
            memory.add_messages(NodeTurn {
                message_id: body.message_id,
                parent_message_id: body.parent_message_id,
                user_content: body.user_content,
                user_files,
                assistant_content: body.assistant_content,
                assistant_files,
            })?;
            Ok(memory.flush()?)
        })
        .await?;
    let ids = written.iter().map(|e| e.id.0).collect();
    Ok((StatusCode::CREATED, Json(NodeAdded { ids })))
}

/// Which history to read.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct NodeHistoryParams {
    /// The app (agent; default `default`).
    pub agent: Option<String>,
    /// The user, when the conversation is one user's.
    pub user: Option<String>,
    /// The Dify message the node is about to answer.
    #[param(min_length = 1, max_length = 256)]
    pub message_id: String,
    /// That message's parent (absent: it starts a thread).
    pub parent_message_id: Option<String>,
    /// At most this many tokens (cl100k; default 2000, Dify's `max_token_limit`).
    pub max_tokens: Option<usize>,
}

/// A message of a node's history.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeMessageWire {
    /// Its entry id.
    pub id: u64,
    /// The Dify message its turn belongs to.
    pub message_id: String,
    /// The Dify message that turn was added after.
    pub parent_message_id: Option<String>,
    /// `user` or `assistant`.
    #[schema(value_type = crate::wire::names::RoleName)]
    pub role: String,
    /// The text (or, as appends keep it, OpenAI content parts).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<crate::wire::ContentSchema>)]
    pub content: Option<serde_json::Value>,
    /// Files attached by reference (Dify's shape).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileRefWire>,
}

/// A node's history.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeHistory {
    /// The thread's messages, oldest first; empty for a node that never ran.
    pub messages: Vec<NodeMessageWire>,
}

/// The node's history before it answers `message_id`: the thread that message continues
/// (Dify's `extract_thread_messages`), within `max_tokens`. A node that never ran has an
/// empty history.
#[utoipa::path(get, path = "/v1/sessions/{session}/nodes/{node}/history", tag = "node",
    params(
        ("session" = String, Path, description = "The conversation (session key)"),
        ("node" = String, Path, description = "The workflow node's id"),
        NodeHistoryParams),
    responses((status = 200, body = NodeHistory), (status = 400, body = ErrorBody)))]
pub async fn history(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(path): ApiPath<NodePath>,
    ApiQuery(p): ApiQuery<NodeHistoryParams>,
) -> Result<Json<NodeHistory>> {
    caller.require(KeyRole::Read)?;
    let app = caller.scope(p.agent.as_deref().unwrap_or("default"), p.user.as_deref())?;
    let max_tokens = p.max_tokens.unwrap_or(DEFAULT_MAX_TOKEN_LIMIT);
    let history = state
        .run(move |engine| {
            let memory = engine.node_memory(&app, Some(&path.session), &path.node)?;
            Ok(memory.get_history(&p.message_id, p.parent_message_id.as_deref(), max_tokens)?)
        })
        .await?;
    let messages = history
        .iter()
        .filter_map(|m| {
            // The message's own fields, listed (a `flatten` of the chat shape, which refuses
            // fields it does not know, would document these three as not allowed).
            let message = ChatMessage::of(m.entry.message()?);
            Some(NodeMessageWire {
                id: m.entry.id.0,
                message_id: m.message_id.clone(),
                parent_message_id: m.parent_message_id.clone(),
                role: message.role,
                content: message.content,
                files: message.files,
            })
        })
        .collect();
    Ok(Json(NodeHistory { messages }))
}

/// What a clear did.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeCleared {
    /// The `node/clear` anchor written; absent when the node had never been written (there
    /// was nothing to clear, and nothing was written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anchor: Option<u64>,
}

/// Empties a node's memory (Dify's `clear`): a `node/clear` anchor, after which the node's
/// history is empty; its turns stay on the tape. A node never written is left alone.
#[utoipa::path(post, path = "/v1/sessions/{session}/nodes/{node}/clear", tag = "node",
    params(
        ("session" = String, Path, description = "The conversation (session key)"),
        ("node" = String, Path, description = "The workflow node's id"),
        ScopeParams),
    responses((status = 200, body = NodeCleared), (status = 400, body = ErrorBody)))]
pub async fn clear(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(path): ApiPath<NodePath>,
    ApiQuery(p): ApiQuery<ScopeParams>,
) -> Result<Json<NodeCleared>> {
    caller.require(KeyRole::Write)?;
    let app = app_scope(&caller, &p)?;
    let anchor = state
        .run(move |engine| {
            let mut memory = engine.node_memory(&app, Some(&path.session), &path.node)?;
            if engine.store().scope_info(memory.scope())?.is_none() {
                return Ok(None);
            }
            Ok(Some(memory.clear()?.id.0))
        })
        .await?;
    Ok(Json(NodeCleared { anchor }))
}

/// Which idle node memories to clear.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeCleanupBody {
    /// Clear node memories last written more than this many days ago (at least 1; default
    /// 30).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 4294967295_u64)]
    pub older_than_days: Option<u32>,
    /// Only the nodes of this conversation (session key).
    #[serde(default)]
    pub session: Option<String>,
    /// Report what would be cleared; write nothing (a read key is enough then).
    #[serde(default)]
    pub dry_run: bool,
}

/// A node memory the cleanup cleared (or would clear).
#[derive(Debug, Serialize, ToSchema)]
pub struct IdleNodeWire {
    /// Its conversation (session key).
    pub session: String,
    /// Its node.
    pub node: String,
    /// The user, when the conversation is one user's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// When it was last written (RFC 3339).
    pub last_active: String,
    /// The `node/clear` anchor written (absent in a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleared_by: Option<u64>,
}

/// What the cleanup found and did.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeCleanupWire {
    /// Node memories last written before this time (RFC 3339) were idle.
    pub cutoff: String,
    /// Whether nothing was written.
    pub dry_run: bool,
    /// The idle node memories, cleared unless this was a dry run.
    pub cleared: Vec<IdleNodeWire>,
    /// How many node memories were written since the cutoff (kept).
    pub active: usize,
    /// How many were already empty.
    pub empty: usize,
}

/// Clears every node memory of the app not written for more than `older_than_days` days
/// (the seed's cleanup task for old node memory). Idempotent: an empty node memory is
/// skipped.
#[utoipa::path(post, path = "/v1/nodes/cleanup", tag = "node",
    params(ScopeParams),
    request_body = NodeCleanupBody,
    responses((status = 200, body = NodeCleanupWire), (status = 400, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn cleanup(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<NodeCleanupBody>,
) -> Result<Json<NodeCleanupWire>> {
    caller.require(if body.dry_run {
        KeyRole::Read
    } else {
        KeyRole::Write
    })?;
    let mut within = app_scope(&caller, &p)?;
    if let Some(c) = &body.session {
        within = within.with_session(c.clone())?;
    }
    let days = body.older_than_days.unwrap_or(DEFAULT_NODE_IDLE_DAYS);
    let dry_run = body.dry_run;
    let report = state
        .run(move |engine| Ok(engine.cleanup_node_memory(&within, days, dry_run)?))
        .await?;
    Ok(Json(NodeCleanupWire {
        cutoff: report.cutoff.to_rfc3339(),
        dry_run: report.dry_run,
        cleared: report
            .cleared
            .iter()
            .map(|n| IdleNodeWire {
                session: n.scope.session().unwrap_or_default().to_owned(),
                node: n.scope.node().unwrap_or_default().to_owned(),
                user: n.scope.user().map(str::to_owned),
                last_active: n.last_active.to_rfc3339(),
                cleared_by: n.cleared_by.map(|id| id.0),
            })
            .collect(),
        active: report.active,
        empty: report.empty,
    }))
}

/// A node's memory as Dify stores it (`node_memory/{app_id}/{conversation_id}/{node_id}.json`,
/// seed 002).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DifyNodeFile {
    /// Always 1.
    #[schema(minimum = 1, maximum = 1)]
    pub version: u64,
    /// The messages, in turns: a user message, then the node's answer (`message_id`,
    /// `parent_message_id`, `role`, `content`, `files`, `token_count`, `created_at`).
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<serde_json::Value>,
}

/// The node's memory in Dify's stored form: its turns since it was last cleared, every
/// thread. A node never written has no messages. What an import took in comes back the same.
#[utoipa::path(get, path = "/v1/sessions/{session}/nodes/{node}/export", tag = "node",
    params(
        ("session" = String, Path, description = "The conversation (session key)"),
        ("node" = String, Path, description = "The workflow node's id"),
        ScopeParams),
    responses((status = 200, body = DifyNodeFile), (status = 400, body = ErrorBody)))]
pub async fn export(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(path): ApiPath<NodePath>,
    ApiQuery(p): ApiQuery<ScopeParams>,
) -> Result<Json<serde_json::Value>> {
    caller.require(KeyRole::Read)?;
    let app = app_scope(&caller, &p)?;
    let file = state
        .run(move |engine| Ok(engine.export_node_memory(&app, &path.session, &path.node)?))
        .await?;
    Ok(Json(memtape::dify_node::render(&file)))
}

/// What an import wrote.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeImported {
    /// How many entries (three a turn: the `node.turn` event and the two messages).
    pub entries: usize,
}

/// Imports a node's memory in Dify's stored form into a node that has none, in one
/// transaction. A file that breaks a rule (another version, an unknown field, a message
/// out of turn) is refused naming it; a node that already has entries is a 409. Nothing is
/// written then.
#[utoipa::path(post, path = "/v1/sessions/{session}/nodes/{node}/import", tag = "node",
    params(
        ("session" = String, Path, description = "The conversation (session key)"),
        ("node" = String, Path, description = "The workflow node's id"),
        ScopeParams),
    request_body = DifyNodeFile,
    responses((status = 201, body = NodeImported), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn import(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(path): ApiPath<NodePath>,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<serde_json::Value>,
) -> Result<(StatusCode, Json<NodeImported>)> {
    caller.require(KeyRole::Write)?;
    let app = app_scope(&caller, &p)?;
    let file = memtape::dify_node::parse(&body.to_string())?;
    let report = state
        .run(move |engine| {
            Ok(engine.import_node_memory(vec![(app, path.session, path.node, file)])?)
        })
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(NodeImported {
            entries: report.entries,
        }),
    ))
}
