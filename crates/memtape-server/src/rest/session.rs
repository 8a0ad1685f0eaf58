//! Session routes beyond the messages: anchors (Bub's handoff), the consolidation pointer,
//! nanobot's `/new`, Bub's session start, a thread by its last entry, and the prompt an
//! agent would send its LLM (`context`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use memtape::summary::ExtractiveSummarizer;
use memtape::{
    Context, ContextConfig, ContextRequest, EntryId, MateClaw, Message, Policy, Qanot,
    TimePrecision, memory_scope,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

use super::{existing, session};
use crate::error::{ApiError, ErrorBody, Result};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::metrics::ModelUse;
use crate::state::{AppState, Caller, Role as KeyRole};
use crate::wire::{ChatMessage, EntryWire, ScopeParams};

/// This module's routes.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions/{session}/anchors", post(anchor))
        .route("/v1/sessions/{session}/consolidate", post(consolidate))
        .route("/v1/sessions/{session}/consolidation", post(consolidation))
        .route("/v1/sessions/{session}/extraction", post(extraction))
        .route("/v1/sessions/{session}/new", post(new_session))
        .route("/v1/sessions/{session}/start", post(start))
        .route("/v1/sessions/{session}/context", post(context))
        .route("/v1/entries/{id}/thread", get(thread))
}

/// An anchor to write.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnchorBody {
    /// Its name (`handoff`, `phase/2`, ...): 1 to 256 bytes of UTF-8, no control
    /// character (JSON Schema counts characters, hence the bound in characters).
    #[schema(min_length = 1, max_length = 256)]
    pub name: String,
    /// What it carries (Bub's handoff state), a JSON object.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub state: Option<Map<String, Value>>,
}

/// The entry a write made.
#[derive(Debug, Serialize, ToSchema)]
pub struct Written {
    /// Its id.
    pub id: u64,
}

/// Writes an anchor (Bub's handoff) in the session.
#[utoipa::path(post, path = "/v1/sessions/{session}/anchors", tag = "tape",
    params(("session" = String, Path, description = "The session key"), ScopeParams),
    request_body = AnchorBody,
    responses((status = 201, body = Written), (status = 400, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn anchor(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<AnchorBody>,
) -> Result<(StatusCode, Json<Written>)> {
    caller.require(KeyRole::Write)?;
    let scope = session(&caller, &p, &name)?;
    if body.name.trim().is_empty() {
        return Err(ApiError::bad_request("an anchor needs a name"));
    }
    let entry = state
        .run(move |engine| Ok(engine.anchor(&scope, &body.name, body.state)?))
        .await?;
    Ok((StatusCode::CREATED, Json(Written { id: entry.id.0 })))
}

/// How far the session is consolidated.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsolidateBody {
    /// The last consolidated entry (0 to consolidate nothing): it and everything before it
    /// leave the history.
    #[schema(maximum = 9007199254740991_u64)]
    pub through: u64,
}

/// Moves the session's consolidation pointer (itself an entry on the tape).
#[utoipa::path(post, path = "/v1/sessions/{session}/consolidate", tag = "tape",
    params(("session" = String, Path, description = "The session key"), ScopeParams),
    request_body = ConsolidateBody,
    responses((status = 201, body = Written), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn consolidate(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<ConsolidateBody>,
) -> Result<(StatusCode, Json<Written>)> {
    caller.require(KeyRole::Write)?;
    let scope = session(&caller, &p, &name)?;
    let through = EntryId::new(body.through)?;
    let entry = state
        .run(move |engine| {
            existing(engine, &scope, &name)?;
            Ok(engine.mark_consolidated(&scope, through)?)
        })
        .await?;
    Ok((StatusCode::CREATED, Json(Written { id: entry.id.0 })))
}

/// A consolidation to run with the server's model.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsolidationBody {
    /// Consolidate every unconsolidated message, not only those before the newest half
    /// window (what /new does before clearing).
    #[serde(default)]
    pub all: bool,
}

/// What a consolidation did.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConsolidationWire {
    /// The pointer after it (none: nothing was due, the pointer did not move).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub through: Option<u64>,
    /// The paragraph appended to HISTORY.md.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_entry: Option<String>,
    /// Whether MEMORY.md changed.
    pub memory_changed: bool,
    /// How many entries were consolidated.
    pub messages: usize,
    /// How many facts the rewrite of MEMORY.md left out (kept as `memory.dropped`).
    pub dropped: usize,
}

impl ConsolidationWire {
    fn of(c: &memtape::Consolidated) -> Self {
        ConsolidationWire {
            through: c.through.map(|t| t.0),
            history_entry: c.history_entry.clone(),
            memory_changed: c.memory_changed,
            messages: c.messages,
            dropped: c.dropped,
        }
    }
}

/// nanobot's consolidation, now, with the server's model: the messages before the newest
/// half window (all of them with `all`) go to HISTORY.md and MEMORY.md through the
/// `save_memory` tool call, and the pointer moves past them; a fact the rewrite of
/// MEMORY.md leaves out is kept as `memory.dropped`. Waits for a consolidation of the
/// session already running (in any process). On any failure of the model (502) nothing
/// changed. `/consolidate` moves the pointer by hand instead.
#[utoipa::path(post, path = "/v1/sessions/{session}/consolidation", tag = "lifecycle",
    params(("session" = String, Path, description = "The session key"), ScopeParams),
    request_body = ConsolidationBody,
    responses((status = 200, body = ConsolidationWire), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 502, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn consolidation(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<ConsolidationBody>,
) -> Result<Json<ConsolidationWire>> {
    caller.require(KeyRole::Write)?;
    let scope = session(&caller, &p, &name)?;
    let llm = state.model(ModelUse::Consolidation)?;
    let options = state.lifecycle().consolidation(body.all);
    let done = state
        .run(move |engine| {
            existing(engine, &scope, &name)?;
            Ok(engine.consolidate(&scope, llm.as_ref(), options)?)
        })
        .await?;
    Ok(Json(ConsolidationWire::of(&done)))
}

/// What an extraction or emergence did.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryRunWire {
    /// Why it did not run (nothing was sent to the model), if it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Whether the model said memory needed updating.
    pub should_update: bool,
    /// The model's reason.
    pub reason: String,
    /// The files that changed.
    pub changed: Vec<String>,
    /// How many facts its rewrites left out (kept as `memory.dropped`).
    pub dropped: usize,
}

impl MemoryRunWire {
    /// The wire form of `run`.
    pub fn of(run: memtape::MemoryRun) -> Self {
        MemoryRunWire {
            skipped: run.skipped,
            should_update: run.should_update,
            reason: run.reason,
            changed: run.changed,
            dropped: run.dropped,
        }
    }
}

/// Which session to analyse, and how the run was triggered.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ExtractionParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user, when the session is one user's.
    pub user: Option<String>,
    /// Run as MateClaw's post-conversation trigger of a conversation from this source
    /// (`web`, `channel` or `cron`): every pre-check, the cooldown and `skip_cron` apply
    /// (`skipped` says which stopped it). Without it the run is manual.
    #[param(value_type = Option<String>, pattern = "^(web|channel|cron)$")]
    pub source: Option<memtape::Source>,
}

/// MateClaw's extraction, now, with the server's model: the end of the conversation and
/// the memory files go to the model, and its JSON answer becomes one memory version (a
/// daily entry, MEMORY.md, PROFILE.md; dropped facts kept). The cooldown does not apply to
/// this call; the 4-message floor and the lock (`skipped` when busy) do, unless `source`
/// makes it the post-conversation trigger. 502 with nothing changed when the model fails
/// or answers badly; 503 without a model.
#[utoipa::path(post, path = "/v1/sessions/{session}/extraction", tag = "lifecycle",
    params(("session" = String, Path, description = "The session key"), ExtractionParams),
    responses((status = 200, body = MemoryRunWire), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 502, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn extraction(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(p): ApiQuery<ExtractionParams>,
) -> Result<Json<MemoryRunWire>> {
    caller.require(KeyRole::Write)?;
    let scope = session(&caller, &ScopeParams::new(p.agent, p.user), &name)?;
    let llm = state.model(ModelUse::Extraction)?;
    let config = state.lifecycle().extraction.clone();
    let trigger = p
        .source
        .map_or(memtape::Trigger::Manual, memtape::Source::trigger);
    let run = state
        .run(move |engine| {
            existing(engine, &scope, &name)?;
            Ok(engine.extract(&scope, llm.as_ref(), &config, trigger)?)
        })
        .await?;
    Ok(Json(MemoryRunWire::of(run)))
}

/// The options of `/new`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct NewParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user, when the session is one user's.
    pub user: Option<String>,
    /// Then remove the memory's daily notes older than this many days (default 30; 0
    /// keeps them all).
    pub retention_days: Option<u32>,
}

/// What `/new` did.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewWire {
    /// How many unconsolidated messages were archived.
    pub archived: usize,
    /// The memory version holding their summary in HISTORY.md (none when there was
    /// nothing worth keeping).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_version: Option<u64>,
    /// The `session/new` anchor the conversation starts again after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boundary: Option<u64>,
    /// How many old daily notes were removed.
    pub pruned: usize,
    /// What the model's consolidation did, when the server has a model (it archives
    /// through `save_memory` then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consolidation: Option<ConsolidationWire>,
}

/// nanobot's `/new`: archives the session's unconsolidated messages (with the server's
/// model through `save_memory` when it has one, else to HISTORY.md with the extractive
/// summarizer), then clears the session (every entry stays on the tape), then prunes old
/// daily notes, as `memtape new` does. If archiving fails (502 for a model failure),
/// nothing is cleared.
#[utoipa::path(post, path = "/v1/sessions/{session}/new", tag = "lifecycle",
    params(("session" = String, Path, description = "The session key"), NewParams),
    responses((status = 200, body = NewWire), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 502, body = ErrorBody)))]
pub async fn new_session(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(p): ApiQuery<NewParams>,
) -> Result<Json<NewWire>> {
    caller.require(KeyRole::Write)?;
    let scope_params = ScopeParams::new(p.agent.clone(), p.user.clone());
    let scope = session(&caller, &scope_params, &name)?;
    let days = p.retention_days.unwrap_or(memtape::DEFAULT_RETENTION_DAYS);
    let llm = state.model(ModelUse::Consolidation).ok();
    let options = state.lifecycle().consolidation(true);
    let out = state
        .run(move |engine| {
            existing(engine, &scope, &name)?;
            let new = match &llm {
                Some(llm) => engine.new_session_with_model(&scope, llm.as_ref(), options)?,
                None => engine.new_session(&scope, &ExtractiveSummarizer::default())?,
            };
            let pruned = if days > 0 {
                engine.prune_daily(&memory_scope(&scope)?, days)?
            } else {
                0
            };
            Ok(NewWire {
                archived: new.archived,
                history_version: new.history.map(|h| h.version),
                boundary: new.boundary.map(|b| b.id.0),
                pruned,
                consolidation: new.consolidated.as_ref().map(ConsolidationWire::of),
            })
        })
        .await?;
    Ok(Json(out))
}

/// What a session start wrote.
#[derive(Debug, Serialize, ToSchema)]
pub struct Started {
    /// The `session/start` anchor, when the session had no anchor yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<u64>,
    /// The memory zone's version, when one was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<u64>,
}

/// Bub's session start: the `session/start` anchor when the session has none, Bub's
/// history view, and the memory zone on the session's tape.
#[utoipa::path(post, path = "/v1/sessions/{session}/start", tag = "lifecycle",
    params(("session" = String, Path, description = "The session key"), ScopeParams),
    responses((status = 200, body = Started), (status = 400, body = ErrorBody)))]
pub async fn start(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(p): ApiQuery<ScopeParams>,
) -> Result<Json<Started>> {
    caller.require(KeyRole::Write)?;
    let scope = session(&caller, &p, &name)?;
    let started = state
        .run(move |engine| Ok(engine.start_session(&scope)?))
        .await?;
    Ok(Json(Started {
        bootstrap: started.bootstrap.map(|id| id.0),
        zone: started.zone,
    }))
}

/// A thread.
#[derive(Debug, Serialize, ToSchema)]
pub struct Thread {
    /// Its entries, root first.
    pub entries: Vec<EntryWire>,
}

/// The thread that ends at an entry, root first (Dify's extract_thread_messages). An entry
/// of another agent, user or tenant is not found, exactly like one that does not exist.
#[utoipa::path(get, path = "/v1/entries/{id}/thread", tag = "tape",
    params(("id" = u64, Path, maximum = 9007199254740991_u64, description = "The thread's last entry"), ScopeParams),
    responses((status = 200, body = Thread), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn thread(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<u64>,
    ApiQuery(p): ApiQuery<ScopeParams>,
) -> Result<Json<Thread>> {
    caller.require(KeyRole::Read)?;
    let scope = caller.scope(p.agent(), p.user.as_deref())?;
    let leaf = EntryId::new(id)?;
    let entries = state
        .run(move |engine| Ok(engine.thread(&scope, leaf)?))
        .await?;
    Ok(Json(Thread {
        entries: entries.iter().map(EntryWire::of).collect(),
    }))
}

/// A compaction policy.
#[derive(Clone, Copy, Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PolicyWire {
    /// MateClaw: summarize all but the most recent pairs.
    #[default]
    Mateclaw,
    /// Qanot: keep the first and last messages, summarize the middle.
    Qanot,
}

/// How precisely the current time is written into the system message.
#[derive(Clone, Copy, Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PrecisionWire {
    /// The date only.
    Day,
    /// The date and hour.
    #[default]
    Hour,
    /// The date, hour and minute.
    Minute,
}

/// What prompt to build.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextBody {
    /// The token budget: the most tokens the prompt may have (default 128000).
    #[serde(default)]
    #[schema(minimum = 1)]
    pub budget: Option<usize>,
    /// The compaction policy (default `mateclaw`).
    #[serde(default)]
    pub policy: PolicyWire,
    /// The agent's system prompt.
    #[serde(default)]
    pub system: String,
    /// The user message being answered, when it is not on the tape (default: the user
    /// message that ends the session, which must then exist).
    #[serde(default)]
    pub message: Option<String>,
    /// Build for a retry after the model refused the prompt as too long: keep only the
    /// last messages, summarize nothing.
    #[serde(default)]
    pub emergency: bool,
    /// Record nothing on the tape (no new compaction, no working buffer).
    #[serde(default)]
    pub dry_run: bool,
    /// How precisely the current time is written (default `hour`).
    #[serde(default)]
    pub time_precision: PrecisionWire,
    /// Build the prompt as the tape stood at this moment: an RFC 3339 time or an entry id
    /// (as a string or a number). Nothing is recorded then.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub as_of: Option<memtape::AsOf>,
    /// How attached files come back: `refs` (Dify's references in `files`, the default),
    /// `parts` or `openai` (OpenAI content parts), `anthropic` (Anthropic content blocks),
    /// by the server's `[attachments]` settings.
    #[serde(default)]
    #[schema(value_type = Option<crate::wire::names::AttachmentsName>)]
    pub attachments: Option<String>,
    /// Whether the memory skill (nanobot's always-loaded memory skill, Bub's rule 7: save
    /// preferences proactively) follows the system prompt (default: the server's
    /// `[lifecycle] memory_skill`, on).
    #[serde(default)]
    pub memory_skill: Option<bool>,
    /// The reply the model may write after this prompt, in tokens (default 1024): Qanot's
    /// compaction looks at the next turn, this prompt and its reply.
    #[serde(default)]
    pub reply_tokens: Option<usize>,
}

/// The compaction in effect.
#[derive(Debug, Serialize, ToSchema)]
pub struct CompactionWire {
    /// `mateclaw` or `qanot`.
    pub policy: String,
    /// The last entry it covers.
    pub through: u64,
}

/// A built prompt and what happened while building it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ContextWire {
    /// The messages to send, system message first (OpenAI chat messages).
    pub messages: Vec<ChatMessage>,
    /// The prompt's tokens.
    pub tokens: usize,
    /// The budget it was built for.
    pub max_input_tokens: usize,
    /// The policy.
    pub policy: String,
    /// How many of the messages come from the session's tape.
    pub history_messages: usize,
    /// The compaction in effect, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction: Option<CompactionWire>,
    /// Whether this build made a new compaction.
    pub compacted: bool,
    /// Whether the summary was reused from a recent compaction of the same span.
    pub summary_cached: bool,
    /// Why the summarizer failed, when it did (the messages were then kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_error: Option<String>,
    /// Whether this was an emergency build.
    pub emergency: bool,
    /// Conversation messages dropped to fit the budget.
    pub trimmed: usize,
    /// Tool results cut to their head and tail.
    pub truncated_tool_results: usize,
    /// Qanot: the prompt was past the working buffer threshold.
    pub working_buffer: bool,
    /// Qanot: recovery context was appended to the current message.
    pub recovery: bool,
    /// Tokens before the last message (the stable prefix).
    pub stable_prefix_tokens: usize,
    /// Whether agent files or the memory block were cut to keep the budget.
    pub memory_truncated: bool,
    /// Whether the prompt is still over budget.
    pub over_budget: bool,
}

impl ContextWire {
    fn of(c: &Context) -> Self {
        ContextWire {
            messages: c.messages.iter().map(ChatMessage::of).collect(),
            tokens: c.tokens,
            max_input_tokens: c.max_input_tokens,
            policy: c.policy.to_owned(),
            history_messages: c.history_messages,
            compaction: c.compaction.as_ref().map(|k| CompactionWire {
                policy: k.policy().to_owned(),
                through: k.through().0,
            }),
            compacted: c.compacted,
            summary_cached: c.summary_cached,
            summary_error: c.summary_error.clone(),
            emergency: c.emergency,
            trimmed: c.trimmed,
            truncated_tool_results: c.truncated_tool_results,
            working_buffer: c.working_buffer,
            recovery: c.recovery,
            stable_prefix_tokens: c.stable_prefix_tokens,
            memory_truncated: c.memory_truncated,
            over_budget: c.over_budget,
        }
    }
}

/// Builds the prompt for the session within a token budget: system prompt, agent files,
/// memory, compaction, history, the current message. Records a new compaction on the
/// tape unless `dry_run`. Needs a `write` key unless `dry_run`.
#[utoipa::path(post, path = "/v1/sessions/{session}/context", tag = "retrieval",
    params(("session" = String, Path, description = "The session key"), ScopeParams),
    request_body = ContextBody,
    responses((status = 200, body = ContextWire), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn context(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<ContextBody>,
) -> Result<Json<ContextWire>> {
    caller.require(if body.dry_run || body.as_of.is_some() {
        KeyRole::Read
    } else {
        KeyRole::Write
    })?;
    let scope = session(&caller, &p, &name)?;
    let budget = body
        .budget
        .unwrap_or(memtape::context::DEFAULT_MAX_INPUT_TOKENS);
    if budget == 0 {
        return Err(ApiError::bad_request(
            "budget must be a whole number of at least 1",
        ));
    }
    let policy = match body.policy {
        PolicyWire::Mateclaw => Policy::MateClaw(MateClaw::default()),
        PolicyWire::Qanot => Policy::Qanot(Qanot::default()),
    };
    let time_precision = match body.time_precision {
        PrecisionWire::Day => TimePrecision::Day,
        PrecisionWire::Hour => TimePrecision::Hour,
        PrecisionWire::Minute => TimePrecision::Minute,
    };
    let has_message = body.message.is_some();
    let rebuild = crate::wire::attachments_format(body.attachments.as_deref())?;
    let files = match rebuild {
        Some(_) => Some(state.files_of(&caller.tenant)?),
        None => None,
    };
    let attachments = state.attachments_config().clone();
    let request = ContextRequest {
        system_prompt: body.system,
        message: body.message.map(Message::user),
        config: ContextConfig {
            time_precision,
            memory_skill: body
                .memory_skill
                .unwrap_or_else(|| state.lifecycle().memory_skill),
            reply_tokens: body
                .reply_tokens
                .unwrap_or(memtape::context::DEFAULT_REPLY_TOKENS),
            ..ContextConfig::new(budget, policy)
        },
        emergency: body.emergency,
        record: !body.dry_run,
        as_of: body.as_of,
    };
    // A prompt of the past is built without the model: nothing is summarized anew by it.
    let llm = state
        .model(ModelUse::Compaction)
        .ok()
        .filter(|_| request.as_of.is_none());
    let built = state
        .run(move |engine| {
            // With a message the prompt can open a session that has nothing on its tape
            // yet; without, a session that does not exist is a typo, not an empty prompt.
            if !has_message {
                existing(engine, &scope, &name)?;
            }
            // With a model, a compaction summary is the model's (MateClaw).
            let built = engine.context_using(&scope, &request, llm.as_deref())?;
            let mut wire = ContextWire::of(&built);
            if rebuild.is_some() {
                wire.messages = built
                    .messages
                    .iter()
                    .map(|m| ChatMessage::rebuilt(m, rebuild, files.as_ref(), &attachments))
                    .collect::<Result<Vec<_>>>()?;
            }
            Ok(wire)
        })
        .await?;
    Ok(Json(built))
}
