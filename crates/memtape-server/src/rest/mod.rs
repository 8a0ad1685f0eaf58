//! The REST API under `/v1`: resource-shaped, JSON in and out, every call confined to the
//! caller's tenant and run on the engine's blocking pool. Each module adds its routes to
//! [`routes`] and its operations to [`openapi`].

mod erase;
mod files;
pub(crate) mod mateclaw_compat;
mod memory;
mod node;
mod session;

pub(crate) use memory::{
    EmergenceBody, FileParams, blame, dropped, emergence, file, restore_dropped, view,
};
pub(crate) use node::{
    NodeCleanupBody, NodeHistoryParams, NodePath, NodeTurnBody, add as node_add,
    cleanup as node_cleanup, clear as node_clear, history as node_history,
};
pub(crate) use session::{ConsolidationBody, ExtractionParams, consolidation, extraction};
mod transfer;
mod uploads;
pub(crate) use transfer::is_length_limit;
pub(crate) use uploads::{MULTIPART_OVERHEAD, UPLOAD_PATH};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use memtape::{
    AnchorRange, EntryId, HistoryLimits, HistoryView, Kind, Mode, NewEntry, Payload, Role, Scope,
    SearchFilter, SearchRequest, TapeQuery,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, OpenApi, ToSchema};

use crate::error::{ApiError, ErrorBody, Result};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::state::{AppState, Caller, Role as KeyRole};
use crate::wire::{
    AppendBody, Appended, Captured, ChatMessage, EntryWire, ScopeParams, SessionWire,
};

/// Every `/v1` route (behind authentication, added by [`crate::app`]).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/agents", get(agents))
        .route("/v1/sessions", get(sessions))
        .route("/v1/sessions/{session}/messages", post(append))
        .route("/v1/sessions/{session}/history", get(history))
        .route("/v1/sessions/{session}/entries", get(entries))
        .route("/v1/search", get(search))
        .route("/v1/tools", get(tools))
        .route("/v1/tools/{name}", post(call_tool))
        .route("/v1/wal/scan", post(wal_scan))
        .merge(session::routes())
        .merge(memory::routes())
        .merge(node::routes())
        .merge(files::routes())
        .merge(transfer::routes())
        .merge(erase::routes())
        // MateClaw's own paths, outside `/v1` and the OpenAPI document.
        .merge(mateclaw_compat::routes())
        .merge(uploads::routes())
}

/// The operations of these routes, for the OpenAPI document.
#[derive(OpenApi)]
#[openapi(paths(
    agents,
    sessions,
    append,
    history,
    entries,
    search,
    tools,
    call_tool,
    wal_scan,
    session::anchor,
    session::consolidate,
    session::consolidation,
    session::extraction,
    session::new_session,
    session::start,
    session::context,
    session::thread,
    memory::view,
    memory::save,
    memory::daily,
    memory::recall,
    memory::search,
    memory::show,
    memory::file,
    memory::write_file,
    memory::blame,
    memory::versions,
    memory::diff_versions,
    memory::undo,
    memory::forget,
    memory::clear,
    memory::prune,
    memory::flags,
    memory::dropped,
    memory::restore_dropped,
    memory::emergence,
    node::add,
    node::history,
    node::clear,
    node::cleanup,
    node::export,
    node::import,
    files::view,
    files::create,
    files::edit,
    files::delete,
    files::rename,
    files::list,
    files::read,
    files::write,
    files::workspace_edit,
    transfer::export,
    transfer::import,
    erase::erase,
    erase::retention,
    erase::set_retention,
    erase::run_retention,
    uploads::upload,
    uploads::info
))]
struct Core;

/// The OpenAPI operations of every `/v1` route.
pub fn openapi() -> utoipa::openapi::OpenApi {
    Core::openapi()
}

/// The session `name` of the caller's tenant, agent and user.
fn session(caller: &Caller, p: &ScopeParams, name: &str) -> Result<Scope> {
    session_of(caller, p.agent.as_deref(), p.user.as_deref(), name)
}

/// The session `name` of the caller's tenant, of `agent` (default `default`) and `user`.
fn session_of(
    caller: &Caller,
    agent: Option<&str>,
    user: Option<&str>,
    name: &str,
) -> Result<Scope> {
    Ok(caller
        .scope(agent.unwrap_or("default"), user)?
        .with_session(name)?)
}

/// The service is up.
#[derive(Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: String,
}

/// Liveness: answers without touching the store.
#[utoipa::path(get, path = "/healthz", tag = "server", security(()), responses((status = 200, body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// The sessions of an agent.
#[derive(Serialize, ToSchema)]
pub struct Sessions {
    /// The sessions, oldest first.
    pub sessions: Vec<SessionWire>,
}

/// One agent of the tenant.
#[derive(Serialize, ToSchema)]
pub struct AgentWire {
    /// Its name.
    pub agent: String,
    /// The users it has memory or sessions for, sorted.
    pub users: Vec<String>,
    /// How many sessions it has (of every user).
    pub sessions: u64,
    /// How many entries it has in all (sessions, memory, events).
    pub entries: u64,
    /// When it last changed (RFC 3339).
    pub updated_at: Option<String>,
}

/// The tenant's agents.
#[derive(Serialize, ToSchema)]
pub struct Agents {
    /// The agents, by name.
    pub agents: Vec<AgentWire>,
}

/// Lists the tenant's agents, with their users and how much each holds.
#[utoipa::path(get, path = "/v1/agents", tag = "tape",
    responses((status = 200, body = Agents), (status = 400, body = ErrorBody)))]
pub async fn agents(State(state): State<AppState>, caller: Caller) -> Result<Json<Agents>> {
    caller.require(KeyRole::Read)?;
    let tenant = caller.tenant.clone();
    let scopes = state
        .run(move |engine| Ok(memtape::Store::scopes(engine.store(), &tenant)?))
        .await?;
    let mut agents: std::collections::BTreeMap<String, AgentWire> = Default::default();
    let mut latest: std::collections::HashMap<String, chrono::DateTime<chrono::Utc>> =
        Default::default();
    for info in scopes {
        let name = info.scope.agent_name().to_owned();
        if let Some(at) = info.last_at {
            let newest = latest.entry(name.clone()).or_insert(at);
            *newest = (*newest).max(at);
        }
        let agent = agents.entry(name.clone()).or_insert_with(|| AgentWire {
            agent: name,
            users: Vec::new(),
            sessions: 0,
            entries: 0,
            updated_at: None,
        });
        if let Some(user) = info.scope.user()
            && !agent.users.iter().any(|u| u == user)
        {
            agent.users.push(user.to_owned());
        }
        if info.scope.session().is_some() && info.scope.node().is_none() {
            agent.sessions += 1;
        }
        agent.entries += info.entries;
    }
    let agents = agents
        .into_values()
        .map(|mut a| {
            a.users.sort();
            a.updated_at = latest.get(&a.agent).map(|t| t.to_rfc3339());
            a
        })
        .collect();
    Ok(Json(Agents { agents }))
}

/// Lists the agent's sessions (of every user, or of `user`).
#[utoipa::path(get, path = "/v1/sessions", tag = "tape", params(ScopeParams),
    responses((status = 200, body = Sessions), (status = 400, body = ErrorBody)))]
pub async fn sessions(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
) -> Result<Json<Sessions>> {
    caller.require(KeyRole::Read)?;
    let tenant = caller.tenant.clone();
    // Builds (and so validates) the user as well: a malformed name is a 400 here too.
    let agent = caller
        .scope(p.agent(), p.user.as_deref())?
        .agent_name()
        .to_owned();
    let list = state
        .run(move |engine| Ok(engine.sessions(&tenant)?))
        .await?
        .into_iter()
        .filter(|s| s.info.scope.agent_name() == agent)
        .filter(|s| p.user.is_none() || s.info.scope.user() == p.user.as_deref())
        .map(|s| SessionWire::of(&s))
        .collect();
    Ok(Json(Sessions { sessions: list }))
}

/// Where appended messages go, and where their conversation came from.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AppendParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user, when the session is one user's.
    pub user: Option<String>,
    /// Where the conversation came from (MateClaw's trigger source): `web` (default),
    /// `channel` or `cron`. A scheduled task's exchange (`cron`) is not analysed by the
    /// post-conversation extraction while `skip_cron` is on.
    #[param(value_type = Option<String>, pattern = "^(web|channel|cron)$")]
    pub source: Option<memtape::Source>,
}

/// Appends one message or several (`{"messages": [...]}`, one transaction). A user
/// message is scanned by the WAL first, as the CLI does.
#[utoipa::path(post, path = "/v1/sessions/{session}/messages", tag = "tape",
    params(("session" = String, Path, description = "The session key"), AppendParams),
    request_body = AppendBody,
    responses((status = 201, body = Appended), (status = 400, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn append(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(p): ApiQuery<AppendParams>,
    ApiJson(body): ApiJson<AppendBody>,
) -> Result<(StatusCode, Json<Appended>)> {
    caller.require(KeyRole::Write)?;
    let scope = session_of(&caller, p.agent.as_deref(), p.user.as_deref(), &name)?;
    let items = match body {
        AppendBody::Many(many) => many.messages,
        AppendBody::One(m) => vec![*m],
    };
    if items.is_empty() {
        return Err(ApiError::bad_request("no messages to append"));
    }
    let mut messages = Vec::with_capacity(items.len());
    for item in &items {
        let message = item.message().to_message()?;
        messages.push((message, item.parent.map(EntryId::new).transpose()?));
    }
    // Every upload and tool file named must be the caller's tenant's.
    if messages.iter().any(|(m, _)| !m.files.is_empty()) {
        let files = state.files_of(&caller.tenant)?;
        for (m, _) in &messages {
            files
                .check_all(&m.files)
                .map_err(|e| ApiError::unprocessable(format!("files: {e}")))?;
        }
    }
    let now = state.engine().now();
    let entries = messages
        .into_iter()
        .map(|(m, parent)| {
            let mut entry = NewEntry::new(scope.clone(), Payload::Message(m), now);
            entry.parent = parent;
            entry
        })
        .collect();
    // Qanot's WAL: each user message is scanned before anyone answers it (by the writer,
    // with the captures of the other requests written meanwhile); what it captures names
    // the message as its cause. A capture that fails is not answered as a failed append (a
    // client retrying would store the messages twice): it is retried from the tape.
    let (stored, results) = state.append_captured(entries).await?;
    let captured = results
        .into_iter()
        .flatten()
        .flat_map(|c| c.matches)
        .map(|hit| Captured {
            category: hit.category.to_string(),
            text: hit.text,
        })
        .collect();
    let replied = stored.last().and_then(|e| e.message()).is_some_and(|m| {
        m.role == Role::Assistant && m.tool_calls.is_empty() && !m.content_text().trim().is_empty()
    });
    state.note_exchange(&stored).await;
    state.after_append(&scope, replied, p.source.unwrap_or_default());
    let appended = Appended {
        ids: stored.iter().map(|e| e.id.0).collect(),
        captured,
    };
    Ok((StatusCode::CREATED, Json(appended)))
}

/// Which history to read.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct HistoryParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user, when the session is one user's.
    pub user: Option<String>,
    /// At most this many messages (default 500).
    pub max_messages: Option<usize>,
    /// At most this many tokens (cl100k).
    pub max_tokens: Option<usize>,
    /// `thread` (memtape's) or `bub` (Bub's); default: the session's own.
    #[param(value_type = Option<crate::wire::names::ViewName>)]
    pub view: Option<String>,
    /// The history as it was at this moment: an RFC 3339 time or an entry id (now when
    /// absent).
    #[param(min_length = 1)]
    pub as_of: Option<String>,
    /// How attached files come back: `refs` (the default: Dify's references in `files`),
    /// `parts` or `openai` (rebuilt into OpenAI content parts, uploads as base64 data), or
    /// `anthropic` (Anthropic content blocks). Rebuilding follows the server's
    /// `[attachments]` settings (which file types, the image detail).
    #[param(value_type = Option<crate::wire::names::AttachmentsName>)]
    pub attachments: Option<String>,
}

/// A history: OpenAI chat messages.
#[derive(Serialize, ToSchema)]
pub struct History {
    /// The messages, oldest first.
    pub messages: Vec<ChatMessage>,
}

/// The history a model would get for the session.
#[utoipa::path(get, path = "/v1/sessions/{session}/history", tag = "tape",
    params(("session" = String, Path, description = "The session key"), HistoryParams),
    responses((status = 200, body = History), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn history(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(p): ApiQuery<HistoryParams>,
) -> Result<Json<History>> {
    caller.require(KeyRole::Read)?;
    let scope = session_of(&caller, p.agent.as_deref(), p.user.as_deref(), &name)?;
    let view = match p.view.as_deref() {
        None => None,
        Some("thread") => Some(HistoryView::Thread),
        Some("bub") => Some(HistoryView::Bub),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "view {other:?}: expected thread or bub"
            )));
        }
    };
    let limits = HistoryLimits {
        max_messages: p.max_messages.unwrap_or(500),
        max_tokens: p.max_tokens,
    };
    let moment = crate::wire::as_of(p.as_of.as_deref())?;
    let rebuild = crate::wire::attachments_format(p.attachments.as_deref())?;
    let files = match rebuild {
        Some(_) => Some(state.files_of(&caller.tenant)?),
        None => None,
    };
    let config = state.attachments_config().clone();
    let messages = state
        .run(move |engine| {
            existing(engine, &scope, &name)?;
            let view = match view {
                Some(v) => v,
                None => engine.history_view_as_of(&scope, moment.as_ref())?,
            };
            let history = engine.history_in_as_of(&scope, &limits, view, moment.as_ref())?;
            history
                .iter()
                .filter_map(|e| e.message())
                .map(|m| ChatMessage::rebuilt(m, rebuild, files.as_ref(), &config))
                .collect::<Result<Vec<_>>>()
        })
        .await?;
    Ok(Json(History { messages }))
}

/// Refuses a session with no entries as not found (the same for another tenant's).
fn existing(engine: &memtape::Engine<memtape::DynStore>, scope: &Scope, name: &str) -> Result<()> {
    use memtape::Store;
    if engine.store().scope_info(scope)?.is_none() {
        return Err(ApiError::not_found(format!("no session {name}")));
    }
    Ok(())
}

/// Which entries to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EntriesParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user, when the session is one user's.
    pub user: Option<String>,
    /// Only entries after the last anchor with this name.
    pub after_anchor: Option<String>,
    /// Only entries after the last anchor.
    pub from_last_anchor: Option<bool>,
    /// Only entries after the last anchor named so ...
    pub between_start: Option<String>,
    /// ... up to the first anchor named so after it.
    pub between_end: Option<String>,
    /// Only entries of this kind.
    #[param(value_type = Option<crate::wire::names::KindName>)]
    pub kind: Option<String>,
    /// Only entries with a greater id (the cursor of the previous page).
    pub after: Option<u64>,
    /// Only entries with a smaller id: the page just before this id (the `prev` cursor of
    /// the page after it), to read backwards.
    pub before: Option<u64>,
    /// At most this many (default 100, at most 1000).
    pub limit: Option<usize>,
}

/// A page of entries.
#[derive(Serialize, ToSchema)]
pub struct Entries {
    /// The entries, in tape order.
    pub entries: Vec<EntryWire>,
    /// The cursor for the next page (`after=`), when there may be more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
    /// With `before=`: the cursor for the page before this one (`before=`), when there may
    /// be more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prev: Option<u64>,
}

/// A session's tape entries: Bub's anchor slices, a kind, paged by id.
#[utoipa::path(get, path = "/v1/sessions/{session}/entries", tag = "tape",
    params(("session" = String, Path, description = "The session key"), EntriesParams),
    responses((status = 200, body = Entries), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn entries(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(p): ApiQuery<EntriesParams>,
) -> Result<Json<Entries>> {
    caller.require(KeyRole::Read)?;
    let scope = session_of(&caller, p.agent.as_deref(), p.user.as_deref(), &name)?;
    let range = match (
        &p.after_anchor,
        p.from_last_anchor,
        &p.between_start,
        &p.between_end,
    ) {
        (None, None | Some(false), None, None) => AnchorRange::All,
        (Some(a), None | Some(false), None, None) => AnchorRange::After(a.clone()),
        (None, Some(true), None, None) => AnchorRange::FromLast,
        (None, None | Some(false), Some(s), Some(e)) => AnchorRange::Between(s.clone(), e.clone()),
        _ => {
            return Err(ApiError::bad_request(
                "use one of after_anchor, from_last_anchor, or between_start with between_end",
            ));
        }
    };
    let kinds = match p.kind.as_deref() {
        None => Vec::new(),
        Some(k) => vec![k.parse::<Kind>()?],
    };
    let limit = p.limit.unwrap_or(100);
    if limit == 0 || limit > 1000 {
        return Err(ApiError::bad_request("limit must be 1 to 1000"));
    }
    let after = p.after.map(EntryId::new).transpose()?;
    let before = p.before.map(EntryId::new).transpose()?;
    let backwards = before.is_some();
    // One more than a page, read in the store: whether there is more is known without
    // reading the rest of the tape.
    let found = state
        .run(move |engine| {
            existing(engine, &scope, &name)?;
            let query = TapeQuery {
                range,
                kinds,
                after,
                before,
                limit: Some(limit + 1),
                last: backwards,
                ..TapeQuery::default()
            };
            Ok(engine.query(&scope, &query)?)
        })
        .await?;
    let more = found.len() > limit;
    let page = if backwards {
        &found[found.len().saturating_sub(limit)..]
    } else {
        &found[..found.len().min(limit)]
    };
    let entries: Vec<EntryWire> = page.iter().map(EntryWire::of).collect();
    let (next, prev) = if backwards {
        (None, more.then(|| entries.first().map(|e| e.id)).flatten())
    } else {
        (more.then(|| entries.last().map(|e| e.id)).flatten(), None)
    };
    Ok(Json(Entries {
        entries,
        next,
        prev,
    }))
}

/// What to search.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// The query.
    pub q: String,
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user.
    pub user: Option<String>,
    /// `agent` (default: the agent's entries), `user` (one user's) or `tenant`.
    #[param(value_type = Option<crate::wire::names::ScopeName>)]
    pub scope: Option<String>,
    /// Only this session.
    pub session: Option<String>,
    /// Only this kind.
    #[param(value_type = Option<crate::wire::names::KindName>)]
    pub kind: Option<String>,
    /// Only messages with this role.
    #[param(value_type = Option<crate::wire::names::RoleName>)]
    pub role: Option<String>,
    /// Only entries from this time on (RFC 3339).
    pub since: Option<String>,
    /// Only entries before this time.
    pub until: Option<String>,
    /// `hybrid`, `bm25` or `vector` (default: hybrid when the server has an embedding
    /// model, else bm25).
    #[param(value_type = Option<crate::wire::names::ModeName>)]
    pub mode: Option<String>,
    /// At most this many hits (default 10, at most 100).
    pub limit: Option<usize>,
    /// Search what existed at this moment: an RFC 3339 time or an entry id (everything
    /// when absent).
    #[param(min_length = 1)]
    pub as_of: Option<String>,
}

/// One search hit.
#[derive(Serialize, ToSchema)]
pub struct HitWire {
    /// The entry found.
    pub entry: EntryWire,
    /// Its score (comparable within one search).
    pub score: f32,
}

/// Search results.
#[derive(Serialize, ToSchema)]
pub struct Hits {
    /// The hits, best first.
    pub hits: Vec<HitWire>,
    /// Set when the index could not catch up with the tape before this search (a full
    /// disk): the hits miss the latest entries, and this says why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_behind: Option<String>,
}

/// Searches the tape: BM25 and embeddings over messages, tool calls, memory.
#[utoipa::path(get, path = "/v1/search", tag = "retrieval", params(SearchParams),
    responses((status = 200, body = Hits), (status = 400, body = ErrorBody)))]
pub async fn search(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<SearchParams>,
) -> Result<axum::response::Response> {
    let hits = find(State(state), caller, ApiQuery(p)).await?;
    let behind = hits.index_behind.is_some();
    let mut response = axum::response::IntoResponse::into_response(Json(hits));
    if behind {
        response.headers_mut().insert(
            "x-memtape-index-behind",
            axum::http::HeaderValue::from_static("true"),
        );
    }
    Ok(response)
}

/// The search of [`search`] (and MCP's `tape_search`).
pub async fn find(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<SearchParams>,
) -> Result<Hits> {
    caller.require(KeyRole::Read)?;
    let agent = p.agent.as_deref().unwrap_or("default");
    let agent_scope = caller.scope(agent, p.user.as_deref())?;
    let mut filter = match p.scope.as_deref().unwrap_or("agent") {
        "agent" => SearchFilter::within(&caller.scope(agent, None)?),
        "user" => {
            if p.user.is_none() {
                return Err(ApiError::bad_request("scope=user needs user="));
            }
            SearchFilter::within(&agent_scope)
        }
        "tenant" => SearchFilter::tenant(caller.tenant.clone()),
        other => {
            return Err(ApiError::bad_request(format!(
                "scope {other:?}: expected agent, user or tenant"
            )));
        }
    };
    if p.scope.as_deref() != Some("tenant") {
        filter.user = p.user.clone().or(filter.user);
    }
    if let Some(name) = &p.session {
        // A name the store could never hold is a mistake to report, not an empty result.
        agent_scope.clone().with_session(name)?;
    }
    filter.session = p.session.clone();
    if let Some(k) = &p.kind {
        filter.kinds = vec![k.parse::<Kind>()?];
    }
    if let Some(r) = &p.role {
        let role: Role = serde_json::from_value(Value::String(r.clone())).map_err(|_| {
            ApiError::bad_request(format!(
                "role {r:?}: expected user, assistant, system or tool"
            ))
        })?;
        filter.roles = vec![role];
    }
    let time = |t: &Option<String>, name: &str| -> Result<_> {
        t.as_deref()
            .map(|s| {
                memtape::parse_time(s)
                    .ok_or_else(|| ApiError::bad_request(format!("{name} {s:?} is not a time")))
            })
            .transpose()
    };
    filter.since = time(&p.since, "since")?;
    filter.until = time(&p.until, "until")?;
    filter.as_of = crate::wire::as_of(p.as_of.as_deref())?;
    let mode = match p.mode.as_deref() {
        None => None,
        Some("hybrid") => Some(Mode::Hybrid),
        Some("bm25") => Some(Mode::Bm25),
        Some("vector") => Some(Mode::Vector),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "mode {other:?}: expected hybrid, bm25 or vector"
            )));
        }
    };
    let limit = p.limit.unwrap_or(10);
    if limit == 0 || limit > 100 {
        return Err(ApiError::bad_request("limit must be 1 to 100"));
    }
    let text = p.q.clone();
    let hits = state
        .run(move |engine| {
            // Hybrid when the server has an embedding model, else BM25; vectors without a
            // model is the request's mistake, not the server's.
            let has_model = engine.index().is_some_and(|i| i.embedder().is_some());
            let mode = match mode {
                None if has_model => Mode::Hybrid,
                None | Some(Mode::Bm25) => Mode::Bm25,
                Some(m) if has_model => m,
                Some(_) => {
                    return Err(ApiError::bad_request(
                        "this server has no embedding model: use mode=bm25",
                    ));
                }
            };
            let request = SearchRequest::new(text, filter).limit(limit).mode(mode);
            Ok(engine.search_behind(&request)?)
        })
        .await?;
    let (hits, index_behind) = hits;
    Ok(Hits {
        hits: hits
            .iter()
            .map(|h| HitWire {
                entry: EntryWire::of(&h.entry),
                score: h.score,
            })
            .collect(),
        index_behind,
    })
}

/// A tool of the registry.
#[derive(Serialize, ToSchema)]
pub struct ToolWire {
    /// Its name as its seed spells it (`memory.save`, `memory`, ...).
    pub name: String,
    /// What it does.
    pub description: String,
    /// The JSON schema of its input.
    #[schema(value_type = Object)]
    pub input_schema: Value,
}

/// The tool registry.
#[derive(Serialize, ToSchema)]
pub struct Tools {
    /// Every tool.
    pub tools: Vec<ToolWire>,
}

/// The memory tools (Bub's, Anthropic's memory tool, MateClaw's, Qanot's memory_search)
/// with their JSON schemas.
#[utoipa::path(get, path = "/v1/tools", tag = "tools", responses((status = 200, body = Tools)))]
pub async fn tools(caller: Caller) -> Result<Json<Tools>> {
    caller.require(KeyRole::Read)?;
    Ok(Json(Tools {
        tools: memtape::tools::registry()
            .into_iter()
            .map(|t| ToolWire {
                name: t.name.to_owned(),
                description: t.description.to_owned(),
                input_schema: t.input_schema,
            })
            .collect(),
    }))
}

/// A tool call.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallBody {
    /// The tool's input.
    #[schema(value_type = Object)]
    pub input: Value,
    /// The session it is called in (its memory is the agent's, or the user's).
    pub session: Option<String>,
}

/// What a tool answered.
#[derive(Serialize, ToSchema)]
pub struct ToolResult {
    /// The result text.
    pub text: String,
    /// Whether the tool refused the call (the text says why; nothing changed).
    pub is_error: bool,
}

/// Calls a tool on the agent's (or user's) memory: the same code path as MCP.
#[utoipa::path(post, path = "/v1/tools/{name}", tag = "tools",
    params(("name" = String, Path, description = "The tool"), ScopeParams),
    request_body = ToolCallBody,
    responses((status = 200, body = ToolResult), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn call_tool(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<ToolCallBody>,
) -> Result<Json<ToolResult>> {
    let Some(spec) = memtape::tools::find(&name) else {
        return Err(ApiError::not_found(format!("no tool {name}")));
    };
    if !body.input.is_object() {
        return Err(ApiError::unprocessable(
            "input: a tool's input is a JSON object",
        ));
    }
    caller.require(if reads_only_call(spec.name, &body.input) {
        KeyRole::Read
    } else {
        KeyRole::Write
    })?;
    let mut scope = caller.scope(p.agent(), p.user.as_deref())?;
    if let Some(s) = &body.session {
        scope = scope.with_session(s)?;
    }
    let out = state
        .run(move |engine| Ok(engine.call_tool(&scope, &name, &body.input)?))
        .await?;
    Ok(Json(ToolResult {
        text: out.text,
        is_error: out.is_error,
    }))
}

/// Whether the tool only reads memory (a `read` key may call it; MCP shows it as the
/// tool's read-only hint).
pub(crate) fn reads_only(name: &str) -> bool {
    matches!(
        name,
        "memory.recall"
            | "memory.show"
            | "memory_search"
            | "list_workspace_memory_files"
            | "read_workspace_memory_file"
    )
}

/// Whether this call only reads: a tool that only reads, or the memory tool's `view` (a
/// `read` key may look at the files it may not change).
pub(crate) fn reads_only_call(name: &str, input: &Value) -> bool {
    reads_only(name)
        || (name == "memory" && input.get("command").and_then(Value::as_str) == Some("view"))
}

/// A message to scan.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WalScanBody {
    /// The user message.
    pub text: String,
}

/// What the WAL scanner finds in a message.
#[derive(Serialize, ToSchema)]
pub struct WalScan {
    /// Every match, in order.
    pub matches: Vec<Captured>,
}

/// Qanot's WAL scanner on a message, recording nothing.
#[utoipa::path(post, path = "/v1/wal/scan", tag = "memory", request_body = WalScanBody,
    responses((status = 200, body = WalScan), (status = 400, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn wal_scan(
    caller: Caller,
    ApiJson(body): ApiJson<WalScanBody>,
) -> Result<Json<WalScan>> {
    caller.require(KeyRole::Read)?;
    Ok(Json(WalScan {
        matches: memtape::wal::scan(&body.text)
            .into_iter()
            .map(|m| Captured {
                category: m.category.to_string(),
                text: m.text,
            })
            .collect(),
    }))
}
