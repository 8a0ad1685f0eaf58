//! `POST /v1/erase`: erasure for an admin key, within its tenant (a user, a session,
//! entries or a piece of text, as `memtape erase`). Read and write keys cannot erase, and
//! no MCP tool does: an agent must not erase a user's history because a prompt told it to.

use axum::extract::State;
use axum::routing::post;
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
    Router::new().route("/v1/erase", post(erase))
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
        dry_run: body.dry_run,
    }))
}
