//! `POST /v1/erase`: erasure for an admin key, within its tenant (a user, a session,
//! entries or a piece of text, as `memtape erase`). Read and write keys cannot erase, and
//! no MCP tool does: an agent must not erase a user's history because a prompt told it to.
//! `/v1/retention`: an agent's retention policy (read by any key, set by an admin key), and
//! a run of the tenant's policies now (admin), through the same erasure.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use memtape::{EntryId, Erase, EraseOptions};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{ApiError, ErrorBody, Result};
use crate::extract::{ApiJson, ApiQuery};
use crate::state::{AppState, Caller, Role as KeyRole};
use crate::wire::ScopeParams;

/// This module's routes.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/erase", post(erase))
        .route("/v1/retention", get(retention).put(set_retention))
        .route("/v1/retention/run", post(run_retention))
}

/// What an erasure takes.
#[derive(Clone, Copy, Debug, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EraseWhat {
    /// Everything of `user` (the query's) in the tenant, in every agent.
    User,
    /// One session (`session`) of the agent (and user).
    Session,
    /// Entries by id (`ids`), where they lie in the agent (and user).
    Entries,
    /// Every occurrence of `text` in the agent (and user), replaced by `[erased]`.
    Text,
}

/// An erasure.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EraseBody {
    /// What to erase.
    pub what: EraseWhat,
    /// For `session`: the session.
    #[serde(default)]
    pub session: Option<String>,
    /// For `entries`: the ids.
    #[serde(default)]
    #[schema(value_type = Option<Vec<u64>>)]
    pub ids: Option<Vec<EntryId>>,
    /// For `text`: the text (4 to 65,536 bytes).
    #[serde(default)]
    pub text: Option<String>,
    /// Why, kept on the receipt (at most 4,096 bytes; never the erased text).
    #[serde(default)]
    pub reason: String,
    /// Count what would be erased and change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Afterwards, rewrite the store's files so nothing freed is left in them (PostgreSQL:
    /// `VACUUM FULL`, which blocks every read and write of the database while it runs;
    /// SQLite needs nothing).
    #[serde(default)]
    pub compact: bool,
}

/// What an erasure did (or, in a dry run, would do).
#[derive(Debug, Serialize, ToSchema)]
pub struct ErasedWire {
    /// The `tape.erased` receipt's id (none in a dry run).
    #[schema(value_type = Option<u64>)]
    pub receipt: Option<EntryId>,
    /// Entries that became tombstones.
    pub entries: u64,
    /// Entries whose text was redacted.
    pub redacted: u64,
    /// The entries changed.
    #[schema(value_type = Vec<u64>)]
    pub ids: Vec<EntryId>,
    /// Whether the store's write-ahead log was truncated (false: a reader held it; the
    /// next checkpoint finishes).
    pub wiped: bool,
    /// Attached files removed from the files folder.
    pub files: u64,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

/// Erases a user, a session, entries or a piece of text: each entry keeps its id, kind,
/// time and place in its thread and loses its content (or the text), in the tape, the
/// search index and the workspace, with a `tape.erased` receipt that holds none of it.
/// Admin keys only.
#[utoipa::path(post, path = "/v1/erase", tag = "erasure", params(ScopeParams),
    request_body = EraseBody,
    responses((status = 200, body = ErasedWire), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn erase(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<EraseBody>,
) -> Result<Json<ErasedWire>> {
    caller.require(KeyRole::Admin)?;
    let scope = caller.scope(p.agent(), p.user.as_deref())?;
    let missing = |field: &str| ApiError::bad_request(format!("erasing {field}s needs {field}"));
    let what = match body.what {
        EraseWhat::User => match &p.user {
            Some(user) => Erase::User(user.clone()),
            None => {
                return Err(ApiError::bad_request(
                    "erasing a user needs user= in the query",
                ));
            }
        },
        EraseWhat::Session => Erase::Session(body.session.ok_or_else(|| missing("session"))?),
        EraseWhat::Entries => match body.ids {
            Some(ids) if !ids.is_empty() => Erase::Entries(ids),
            _ => return Err(ApiError::bad_request("erasing entries needs ids")),
        },
        EraseWhat::Text => Erase::Text(body.text.ok_or_else(|| missing("text"))?),
    };
    let options = EraseOptions {
        by: caller.who(),
        reason: body.reason,
        dry_run: body.dry_run,
        compact: body.compact,
    };
    let dir = state.data_dir().map(std::path::Path::to_path_buf);
    let outcome = state
        .run(move |engine| Ok(engine.erase(&scope, what, options, dir.as_deref())?))
        .await?;
    Ok(Json(ErasedWire {
        receipt: outcome.receipt.as_ref().map(|r| r.id),
        entries: outcome.entries,
        redacted: outcome.redacted,
        ids: outcome.ids,
        wiped: outcome.wiped,
        files: outcome.files_removed,
        dry_run: body.dry_run,
    }))
}

/// A retention policy: each field unset inherits (an agent's from its tenant's and the
/// default in memtape.toml), and unset everywhere keeps entries until erased.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetentionWire {
    /// Days the raw conversation (messages, tool calls and results) is kept (1 to 36,500).
    #[serde(default)]
    pub messages_days: Option<u32>,
    /// Days tool results are kept, when shorter (1 to 36,500).
    #[serde(default)]
    pub tool_results_days: Option<u32>,
    /// Expire only what consolidation has absorbed into memory (default false).
    #[serde(default)]
    pub only_consolidated: Option<bool>,
}

impl From<memtape::Retention> for RetentionWire {
    fn from(r: memtape::Retention) -> Self {
        RetentionWire {
            messages_days: r.messages_days,
            tool_results_days: r.tool_results_days,
            only_consolidated: r.only_consolidated,
        }
    }
}

impl From<RetentionWire> for memtape::Retention {
    fn from(r: RetentionWire) -> Self {
        memtape::Retention {
            messages_days: r.messages_days,
            tool_results_days: r.tool_results_days,
            only_consolidated: r.only_consolidated,
        }
    }
}

/// An agent's retention policy and where it came from.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentRetentionWire {
    /// The agent.
    pub agent: String,
    /// The policy in effect: the one set here over memtape.toml's, field by field.
    pub effective: RetentionWire,
    /// The policy an admin set with `PUT /v1/retention` (none: never set).
    pub set: Option<RetentionWire>,
    /// The policy memtape.toml gives the agent.
    pub config: RetentionWire,
}

impl From<memtape::AgentRetention> for AgentRetentionWire {
    fn from(r: memtape::AgentRetention) -> Self {
        AgentRetentionWire {
            agent: r.scope.agent_name().to_owned(),
            effective: r.effective.into(),
            set: r.set.map(Into::into),
            config: r.config.into(),
        }
    }
}

/// The agent's retention policy (any key of the tenant may read it).
#[utoipa::path(get, path = "/v1/retention", tag = "erasure", params(ScopeParams),
    responses((status = 200, body = AgentRetentionWire), (status = 400, body = ErrorBody)))]
pub async fn retention(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
) -> Result<Json<AgentRetentionWire>> {
    caller.require(KeyRole::Read)?;
    let scope = caller.scope(p.agent(), None)?;
    let config = state.retention_config().clone();
    let policy = state
        .run(move |engine| Ok(engine.retention(&scope, &config)?))
        .await?;
    Ok(Json(policy.into()))
}

/// Sets the agent's retention policy (admin keys only), over memtape.toml's field by field;
/// it is recorded on the agent's tape. The next run (scheduled, or `POST
/// /v1/retention/run`) applies it.
#[utoipa::path(put, path = "/v1/retention", tag = "erasure", params(ScopeParams),
    request_body = RetentionWire,
    responses((status = 200, body = AgentRetentionWire), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_retention(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<RetentionWire>,
) -> Result<Json<AgentRetentionWire>> {
    caller.require(KeyRole::Admin)?;
    if p.user.is_some() {
        return Err(ApiError::bad_request(
            "a retention policy covers a whole agent: leave user= out",
        ));
    }
    let scope = caller.scope(p.agent(), None)?;
    let config = state.retention_config().clone();
    let policy = state
        .run(move |engine| Ok(engine.set_retention(&scope, body.into(), &config)?))
        .await?;
    Ok(Json(policy.into()))
}

/// A retention run to make now.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetentionRunBody {
    /// Count what would expire and change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// One agent's part of a retention run.
#[derive(Debug, Serialize, ToSchema)]
pub struct RetentionRunWire {
    /// The agent.
    pub agent: String,
    /// The policy applied.
    pub policy: RetentionWire,
    /// The `tape.erased` receipt's id (none: nothing expired, or a dry run).
    #[schema(value_type = Option<u64>)]
    pub receipt: Option<EntryId>,
    /// Entries that expired (or would).
    pub entries: u64,
    /// Whether the store's write-ahead log was truncated.
    pub wiped: bool,
    /// Attached files removed from the files folder.
    pub files: u64,
}

/// Runs the tenant's retention now (admin keys only): each agent whose policy expires
/// anything loses its raw conversation older than the policy keeps, as one erasure with
/// one receipt per agent.
#[utoipa::path(post, path = "/v1/retention/run", tag = "erasure",
    request_body = RetentionRunBody,
    responses((status = 200, body = Vec<RetentionRunWire>), (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn run_retention(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<RetentionRunBody>,
) -> Result<Json<Vec<RetentionRunWire>>> {
    caller.require(KeyRole::Admin)?;
    let tenant = caller.scope("default", None)?.tenant().to_owned();
    let config = state.retention_config().clone();
    let by = caller.who();
    let dir = state.data_dir().map(std::path::Path::to_path_buf);
    let runs = state
        .run(move |engine| {
            Ok(engine.run_retention(Some(&tenant), &config, &by, body.dry_run, dir.as_deref())?)
        })
        .await?;
    Ok(Json(
        runs.into_iter()
            .map(|r| RetentionRunWire {
                agent: r.policy.scope.agent_name().to_owned(),
                policy: r.policy.effective.into(),
                receipt: r.outcome.receipt.as_ref().map(|e| e.id),
                entries: r.outcome.entries,
                wiped: r.outcome.wiped,
                files: r.outcome.files_removed,
            })
            .collect(),
    ))
}
