//! The memory routes: the layered view of an agent's (or an agent and a user's) memory,
//! Bub's save, daily, recall and show, versions, diff, undo, forget, clear, prune and
//! MateClaw's file flags, as `memtape memory …` offers them. A write given `if_version`
//! is recorded only if the memory is still at that version (compare-and-append); when it
//! moved on, the answer is a 409 and nothing is recorded.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use chrono::NaiveDate;
use memtape::memory::{Change, Op, Recorded, check_path, diff};
use memtape::{DynStore, Engine, EntryId, Scope};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ErrorBody, Result};
use crate::extract::{ApiJson, ApiQuery};
use crate::state::{AppState, Caller, Role as KeyRole};
use crate::wire::{EntryWire, ReadParams, ScopeParams, as_of};

/// This module's routes.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/memory", get(view))
        .route("/v1/memory/save", post(save))
        .route("/v1/memory/daily", post(daily))
        .route("/v1/memory/recall", get(recall))
        .route("/v1/memory/search", get(search))
        .route("/v1/memory/show", get(show))
        .route("/v1/memory/file", get(file).put(write_file))
        .route("/v1/memory/blame", get(blame))
        .route("/v1/memory/versions", get(versions))
        .route("/v1/memory/diff", get(diff_versions))
        .route("/v1/memory/undo", post(undo))
        .route("/v1/memory/forget", post(forget))
        .route("/v1/memory/clear", post(clear))
        .route("/v1/memory/prune", post(prune))
        .route("/v1/memory/flags", put(flags))
        .route("/v1/memory/dropped", get(dropped))
        .route("/v1/memory/emergence", post(emergence))
        .route("/v1/memory/dropped/{id}/restore", post(restore_dropped))
}

/// One memory file.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryFileWire {
    /// Its text.
    pub content: String,
    /// Whether it is injected into the system prompt (MateClaw).
    pub enabled: bool,
    /// Its place among injected files (lower first).
    pub sort_order: i64,
    /// The memory version that last changed it.
    pub version: u64,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
}

/// The memory of an agent, or of an agent and a user with the agent's shared files under
/// it.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryWire {
    /// The version of the scope's own memory (0: never changed).
    pub version: u64,
    /// The files by path (MEMORY.md, memory/YYYY-MM-DD.md, memories/…).
    pub files: BTreeMap<String, MemoryFileWire>,
}

/// The layered memory view: the scope's own files, and for a user the agent's shared files
/// the user's memory does not override.
/// With `as_of`, as it was at that moment.
#[utoipa::path(get, path = "/v1/memory", tag = "memory", params(ReadParams),
    responses((status = 200, body = MemoryWire), (status = 400, body = ErrorBody)))]
pub async fn view(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ReadParams>,
) -> Result<Json<MemoryWire>> {
    caller.require(KeyRole::Read)?;
    let scope = caller.scope(p.agent(), p.user.as_deref())?;
    let moment = as_of(p.as_of.as_deref())?;
    let out = state
        .run(move |engine| {
            let view = engine.memory_as_of(&scope, moment.as_ref())?;
            let version = own_version(engine, &scope, moment.as_ref())?;
            Ok(MemoryWire {
                version,
                files: view
                    .files
                    .into_iter()
                    .map(|(path, f)| (path, MemoryFileWire::of(f)))
                    .collect(),
            })
        })
        .await?;
    Ok(Json(out))
}

impl MemoryFileWire {
    fn of(f: memtape::memory::MemoryFile) -> Self {
        MemoryFileWire {
            content: f.content,
            enabled: f.enabled,
            sort_order: f.sort_order,
            version: f.updated,
            updated_at: f.updated_at.to_rfc3339(),
        }
    }
}

/// The version of `scope`'s own memory, now or as of `moment`.
fn own_version(
    engine: &Engine<DynStore>,
    scope: &Scope,
    moment: Option<&memtape::AsOf>,
) -> Result<u64> {
    let (log, _) = engine.memory_log(scope)?;
    Ok(log.version_as_of(moment))
}

/// Which file to read (or blame), and when.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FileParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user, when the memory is one user's.
    pub user: Option<String>,
    /// The file (MEMORY.md, memory/2026-04-01.md, memories/notes.md).
    #[param(min_length = 1)]
    pub path: String,
    /// Read it as it was at this moment: an RFC 3339 time or an entry id (now when
    /// absent).
    #[param(min_length = 1)]
    pub as_of: Option<String>,
}

/// One memory file, and the version of the memory it was read from.
#[derive(Debug, Serialize, ToSchema)]
pub struct FileWire {
    /// The file.
    pub path: String,
    /// The file itself.
    #[serde(flatten)]
    pub file: MemoryFileWire,
    /// The version of the scope's own memory then: what a write sends as `if_version`.
    pub memory_version: u64,
}

/// A memory file of the layered view, now or as it was at `as_of`.
#[utoipa::path(get, path = "/v1/memory/file", tag = "memory", params(FileParams),
    responses((status = 200, body = FileWire), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn file(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<FileParams>,
) -> Result<Json<FileWire>> {
    caller.require(KeyRole::Read)?;
    let scope = caller.scope(p.agent.as_deref().unwrap_or("default"), p.user.as_deref())?;
    let moment = as_of(p.as_of.as_deref())?;
    check_path(&p.path)?;
    let out = state
        .run(move |engine| {
            let mut view = engine.memory_as_of(&scope, moment.as_ref())?;
            let memory_version = own_version(engine, &scope, moment.as_ref())?;
            let file = view.files.remove(&p.path).ok_or_else(|| {
                ApiError::not_found(match &moment {
                    Some(m) => format!("{} did not exist as of {m}", p.path),
                    None => format!("there is no {}", p.path),
                })
            })?;
            Ok(FileWire {
                path: p.path,
                file: MemoryFileWire::of(file),
                memory_version,
            })
        })
        .await?;
    Ok(Json(out))
}

/// A memory file to write whole.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FileBody {
    /// The file (a .md path: MEMORY.md, memory/2026-04-01.md, memories/notes.md).
    pub path: String,
    /// Its new content.
    pub content: String,
    /// Record it only if the memory is still at this version (409 otherwise): the
    /// `memory_version` it was read at.
    #[serde(default)]
    pub if_version: Option<u64>,
}

/// Writes a memory file whole (a new version; its flags kept). With `if_version`, only if
/// nothing changed the memory since it was read: a 409 otherwise, and nothing is written.
#[utoipa::path(put, path = "/v1/memory/file", tag = "memory", params(ScopeParams),
    request_body = FileBody,
    responses((status = 200, body = MaybeRecorded), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn write_file(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<FileBody>,
) -> Result<Json<MaybeRecorded>> {
    caller.require(KeyRole::Write)?;
    let scope = caller.scope(p.agent(), p.user.as_deref())?;
    check_path(&body.path)?;
    let out = state
        .run(move |engine| {
            let unchanged = engine
                .memory(&scope)?
                .content(&body.path)
                .is_some_and(|c| c == body.content);
            if unchanged {
                if let Some(v) = body.if_version {
                    let now = engine.memory_log(&scope)?.0.version();
                    if now != v {
                        return Err(ApiError::conflict(format!(
                            "the memory is at version {now}, not {v}: read it again and retry"
                        )));
                    }
                }
                return Ok(MaybeRecorded { recorded: None });
            }
            let change = Change::one(
                Op::Write {
                    path: body.path,
                    content: body.content,
                },
                "api",
            );
            let recorded = record(engine, &scope, body.if_version, change)?;
            Ok(MaybeRecorded {
                recorded: Some(VersionWire::of(&recorded)),
            })
        })
        .await?;
    Ok(Json(out))
}

/// One line of a blamed file.
#[derive(Debug, Serialize, ToSchema)]
pub struct BlameLineWire {
    /// Its number, from 1.
    pub line: usize,
    /// Its text.
    pub text: String,
    /// The memory version that wrote it.
    pub version: u64,
    /// The entry that records that version.
    pub id: u64,
    /// When (RFC 3339).
    pub at: String,
    /// What made it (`memory.save`, `wal`, `consolidation`, `api`, `sync`, …).
    pub source: String,
    /// The tape entries that caused it (a tool call, a captured message, a consolidated
    /// span's first and last message, a model call), those the caller may read.
    pub causes: Vec<EntryWire>,
}

/// A memory file, line by line, with where each line came from.
#[derive(Debug, Serialize, ToSchema)]
pub struct BlameWire {
    /// The file.
    pub path: String,
    /// The memory it was found in (`own`, or `agent` for a user reading the agent's
    /// shared file).
    pub memory: String,
    /// That memory's version at the moment asked about.
    pub version: u64,
    /// The lines, in order.
    pub lines: Vec<BlameLineWire>,
}

/// Blame, like `git blame`: each line of a memory file with the version that wrote it and
/// the conversation that caused that version.
#[utoipa::path(get, path = "/v1/memory/blame", tag = "memory", params(FileParams),
    responses((status = 200, body = BlameWire), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn blame(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<FileParams>,
) -> Result<Json<BlameWire>> {
    caller.require(KeyRole::Read)?;
    let scope = caller.scope(p.agent.as_deref().unwrap_or("default"), p.user.as_deref())?;
    let moment = as_of(p.as_of.as_deref())?;
    check_path(&p.path)?;
    let out = state
        .run(move |engine| {
            let blame = engine
                .blame(&scope, &p.path, moment.as_ref())?
                .ok_or_else(|| ApiError::not_found(format!("there is no {}", p.path)))?;
            let lines = blame
                .lines
                .iter()
                .map(|l| BlameLineWire {
                    line: l.line,
                    text: l.text.clone(),
                    version: l.origin.version,
                    id: l.origin.id.0,
                    at: l.origin.at.to_rfc3339(),
                    source: l.origin.change.source.clone(),
                    causes: l
                        .origin
                        .change
                        .caused_by
                        .iter()
                        .filter_map(|id| blame.causes.get(id))
                        .map(EntryWire::of)
                        .collect(),
                })
                .collect();
            Ok(BlameWire {
                path: blame.path,
                memory: if blame.memory == scope {
                    "own"
                } else {
                    "agent"
                }
                .to_owned(),
                version: blame.version,
                lines,
            })
        })
        .await?;
    Ok(Json(out))
}

/// A recorded memory version.
#[derive(Debug, Serialize, ToSchema)]
pub struct VersionWire {
    /// The memory's version after it.
    pub version: u64,
    /// The entry that records it.
    pub id: u64,
    /// When (RFC 3339).
    pub at: String,
    /// What made it (`memory.save`, `memory.daily`, `undo`, `sync`, …).
    pub source: String,
    /// The files it touched.
    pub paths: Vec<String>,
    /// Its ops: `{"op": "write"|"append"|"delete"|"rename"|"flags"|"forget"|"clear", …}`.
    #[schema(value_type = Vec<Object>)]
    pub ops: Vec<Value>,
    /// The erasure (its receipt's id) that took this version's content: it keeps its
    /// number and applies nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub erased_by: Option<u64>,
    /// Advice about what was saved: long-term memory over Bub's recommended 4 KB (it is
    /// saved all the same).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// The memory zone version written on the tape of the session named by `session` (a
    /// Bub session), when one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<u64>,
}

impl VersionWire {
    fn of(r: &Recorded) -> Self {
        VersionWire {
            warning: None,
            zone: None,
            erased_by: r.erased.map(|x| x.0),
            version: r.version,
            id: r.id.0,
            at: r.at.to_rfc3339(),
            source: r.change.source.clone(),
            paths: r.change.paths().into_iter().map(str::to_owned).collect(),
            ops: r
                .change
                .ops
                .iter()
                .map(|op| serde_json::to_value(op).unwrap_or(Value::Null))
                .collect(),
        }
    }
}

/// A change that may have recorded nothing (it changed nothing).
#[derive(Debug, Serialize, ToSchema)]
pub struct MaybeRecorded {
    /// The version recorded, if the memory changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded: Option<VersionWire>,
}

/// Records `change` in `scope`'s memory; with `if_version`, only while the memory is still
/// at that version (otherwise a 409 and nothing is recorded).
fn record(
    engine: &Engine<DynStore>,
    scope: &Scope,
    if_version: Option<u64>,
    change: Change,
) -> Result<Recorded> {
    let mut moved = None;
    let recorded = engine.change_memory_on_log(scope, |log, _| {
        if let Some(v) = if_version
            && log.version() != v
        {
            moved = Some(log.version());
            return Ok(None);
        }
        Ok(Some(change.clone()))
    })?;
    match (recorded, moved) {
        (Some(r), _) => Ok(r),
        (None, Some(now)) => Err(ApiError::conflict(format!(
            "the memory is at version {now}, not {}: read it again and retry",
            if_version.unwrap_or_default()
        ))),
        (None, None) => Err(ApiError::internal("the change was not recorded")),
    }
}

/// Long-term memory to save.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SaveBody {
    /// The new long-term memory (MEMORY.md, replaced whole).
    pub content: String,
    /// Record it only if the memory is still at this version (409 otherwise).
    #[serde(default)]
    pub if_version: Option<u64>,
}

/// Which memory a write changes, and the session it is made in.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user, when the memory is one user's.
    pub user: Option<String>,
    /// The session the change is made in, as an agent's tool call would be: a Bub
    /// session (`POST /v1/sessions/{session}/start`) gets the new memory zone on its tape.
    pub session: Option<String>,
}

impl WriteParams {
    /// The memory's scope and the session the change is made in (a malformed name is a
    /// 400).
    fn scopes(&self, caller: &Caller) -> Result<(Scope, Option<Scope>)> {
        let scope = caller.scope(
            self.agent.as_deref().unwrap_or("default"),
            self.user.as_deref(),
        )?;
        let session = self
            .session
            .as_deref()
            .map(|s| scope.clone().with_session(s))
            .transpose()?;
        Ok((scope, session))
    }
}

/// The zone a change made in `session` writes on a Bub session's tape.
fn zone_after(engine: &Engine<DynStore>, session: Option<&Scope>) -> Result<Option<u64>> {
    match session {
        Some(s) => Ok(engine.memory_changed_in(s)?),
        None => Ok(None),
    }
}

/// Bub's `memory.save`: replaces long-term memory (MEMORY.md). Over Bub's recommended
/// 4 KB it is saved with a `warning`.
#[utoipa::path(post, path = "/v1/memory/save", tag = "memory", params(WriteParams),
    request_body = SaveBody,
    responses((status = 201, body = VersionWire), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn save(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<WriteParams>,
    ApiJson(body): ApiJson<SaveBody>,
) -> Result<(StatusCode, Json<VersionWire>)> {
    caller.require(KeyRole::Write)?;
    let (scope, session) = p.scopes(&caller)?;
    let warning = memtape::tools::long_term_warning(&body.content);
    let (r, zone) = state
        .run(move |engine| {
            let change = Change::one(
                Op::Write {
                    path: memtape::memory::paths::MEMORY.into(),
                    content: body.content,
                },
                "memory.save",
            );
            let r = record(engine, &scope, body.if_version, change)?;
            Ok((r, zone_after(engine, session.as_ref())?))
        })
        .await?;
    let mut wire = VersionWire::of(&r);
    wire.warning = warning;
    wire.zone = zone;
    Ok((StatusCode::CREATED, Json(wire)))
}

/// A daily note.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DailyBody {
    /// The note, appended to the day's file.
    pub content: String,
    /// The day (YYYY-MM-DD; default today).
    #[serde(default)]
    #[schema(format = Date)]
    pub date: Option<String>,
}

/// Bub's `memory.daily`: appends to the daily note (memory/YYYY-MM-DD.md).
#[utoipa::path(post, path = "/v1/memory/daily", tag = "memory", params(WriteParams),
    request_body = DailyBody,
    responses((status = 201, body = VersionWire), (status = 400, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn daily(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<WriteParams>,
    ApiJson(body): ApiJson<DailyBody>,
) -> Result<(StatusCode, Json<VersionWire>)> {
    caller.require(KeyRole::Write)?;
    let (scope, session) = p.scopes(&caller)?;
    let date = body
        .date
        .as_deref()
        .map(|d| {
            NaiveDate::parse_from_str(d, "%Y-%m-%d")
                .map_err(|_| ApiError::bad_request(format!("date {d:?} is not YYYY-MM-DD")))
        })
        .transpose()?;
    let (r, zone) = state
        .run(move |engine| {
            let r = engine.append_daily(&scope, &body.content, date)?;
            Ok((r, zone_after(engine, session.as_ref())?))
        })
        .await?;
    let mut wire = VersionWire::of(&r);
    wire.zone = zone;
    Ok((StatusCode::CREATED, Json(wire)))
}

/// What to recall.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RecallParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user.
    pub user: Option<String>,
    /// What to look for (default: everything of the window).
    pub query: Option<String>,
    /// How many days of daily notes (default 7).
    #[param(value_type = Option<i64>, minimum = 1, maximum = 4294967295_u64)]
    pub days: Option<u32>,
    /// Only this memory file (e.g. `HISTORY.md`, which is not in the prompt), or the files
    /// of a folder ending in `/`: its lines matching `query`, or without one its text.
    pub file: Option<String>,
}

/// What to search for in memory (Qanot's `memory_search`).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user.
    pub user: Option<String>,
    /// What to look for.
    pub query: String,
    /// At most this many lines (1 to 50, default 10).
    #[param(minimum = 1, maximum = 50)]
    pub limit: Option<usize>,
    /// Only this memory file (e.g. `HISTORY.md`), or the files of a folder ending in `/`,
    /// as grep would. Without it: MEMORY.md, the working state, the daily notes of the
    /// last 30 days, /memories and HISTORY.md.
    pub file: Option<String>,
}

/// A memory line that matched.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MemoryLineWire {
    /// The memory file.
    pub file: String,
    /// The 1-based line number.
    pub line: usize,
    /// The line's text.
    pub content: String,
}

/// A tool's text answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct TextWire {
    /// The text, as the model would be shown it.
    pub text: String,
}

/// Runs a reading tool; a refusal is a 400 with its text.
fn read_tool(
    engine: &Engine<DynStore>,
    scope: &Scope,
    name: &str,
    input: &Value,
) -> Result<TextWire> {
    read_tool_as_of(engine, scope, name, input, None)
}

/// [`read_tool`] on memory as it was at `moment`.
pub(super) fn read_tool_as_of(
    engine: &Engine<DynStore>,
    scope: &Scope,
    name: &str,
    input: &Value,
    moment: Option<&memtape::AsOf>,
) -> Result<TextWire> {
    let out = engine.call_tool_as_of(scope, name, input, moment)?;
    if out.is_error {
        let text = out.text.strip_prefix("Error: ").unwrap_or(&out.text);
        return Err(ApiError::bad_request(text));
    }
    Ok(TextWire { text: out.text })
}

/// Bub's `memory.recall`: long-term memory and recent daily notes, or the lines matching
/// `query`.
#[utoipa::path(get, path = "/v1/memory/recall", tag = "memory", params(RecallParams),
    responses((status = 200, body = TextWire), (status = 400, body = ErrorBody)))]
pub async fn recall(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<RecallParams>,
) -> Result<Json<TextWire>> {
    caller.require(KeyRole::Read)?;
    let scope = caller.scope(p.agent.as_deref().unwrap_or("default"), p.user.as_deref())?;
    if p.days == Some(0) {
        return Err(ApiError::bad_request("days must be at least 1"));
    }
    let mut input = json!({"query": p.query, "days": p.days.unwrap_or(7)});
    if let Some(file) = p.file {
        input["file"] = json!(file);
    }
    let out = state
        .run(move |engine| read_tool(engine, &scope, "memory.recall", &input))
        .await?;
    Ok(Json(out))
}

/// Qanot's `memory_search`: the lines of MEMORY.md, the working state, the daily notes of
/// the last 30 days, /memories and HISTORY.md (nanobot's event history, which is not in
/// the prompt) that match `query` best; with `file`, of that file only.
#[utoipa::path(get, path = "/v1/memory/search", tag = "memory", params(SearchParams),
    responses((status = 200, body = Vec<MemoryLineWire>), (status = 400, body = ErrorBody)))]
pub async fn search(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<SearchParams>,
) -> Result<Json<Vec<MemoryLineWire>>> {
    caller.require(KeyRole::Read)?;
    let scope = caller.scope(p.agent.as_deref().unwrap_or("default"), p.user.as_deref())?;
    if p.limit.is_some_and(|l| !(1..=50).contains(&l)) {
        return Err(ApiError::bad_request("limit must be from 1 to 50"));
    }
    let mut input = json!({"query": p.query, "limit": p.limit.unwrap_or(10)});
    if let Some(file) = p.file {
        input["file"] = json!(file);
    }
    let out = state
        .run(move |engine| read_tool(engine, &scope, "memory_search", &input))
        .await?;
    let lines = serde_json::from_str(&out.text)
        .map_err(|e| ApiError::internal(format!("memory_search answered {e}")))?;
    Ok(Json(lines))
}

/// Bub's `memory.show`: the memory as the model is shown it.
/// With `as_of`, as it was at that moment.
#[utoipa::path(get, path = "/v1/memory/show", tag = "memory", params(ReadParams),
    responses((status = 200, body = TextWire), (status = 400, body = ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ReadParams>,
) -> Result<Json<TextWire>> {
    caller.require(KeyRole::Read)?;
    let scope = caller.scope(p.agent(), p.user.as_deref())?;
    let moment = as_of(p.as_of.as_deref())?;
    let out = state
        .run(move |engine| {
            read_tool_as_of(engine, &scope, "memory.show", &json!({}), moment.as_ref())
        })
        .await?;
    Ok(Json(out))
}

/// Which versions to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct VersionsParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user.
    pub user: Option<String>,
    /// Only the versions that touched this file (or folder).
    #[param(min_length = 1)]
    pub path: Option<String>,
    /// With each version's ops (default true); false gives a light listing (a file with
    /// a thousand versions is a few tens of KB instead of every text it ever had).
    pub ops: Option<bool>,
}

/// The versions of the memory.
#[derive(Debug, Serialize, ToSchema)]
pub struct Versions {
    /// The versions, oldest first.
    pub versions: Vec<VersionWire>,
}

/// The versions of the scope's own memory, or of one file.
#[utoipa::path(get, path = "/v1/memory/versions", tag = "memory", params(VersionsParams),
    responses((status = 200, body = Versions), (status = 400, body = ErrorBody)))]
pub async fn versions(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<VersionsParams>,
) -> Result<Json<Versions>> {
    caller.require(KeyRole::Read)?;
    let scope = caller.scope(p.agent.as_deref().unwrap_or("default"), p.user.as_deref())?;
    let path = p.path.map(|path| check_path(&path)).transpose()?;
    let out = state
        .run(move |engine| {
            let (log, _) = engine.memory_log(&scope)?;
            let with_ops = p.ops.unwrap_or(true);
            Ok(Versions {
                versions: log
                    .versions(path.as_deref())
                    .into_iter()
                    .map(|r| {
                        let mut v = VersionWire::of(r);
                        if !with_ops {
                            v.ops.clear();
                        }
                        v
                    })
                    .collect(),
            })
        })
        .await?;
    Ok(Json(out))
}

/// Which versions to compare.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DiffParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user.
    pub user: Option<String>,
    /// The older version.
    pub from: u64,
    /// The newer version.
    pub to: u64,
}

/// A unified diff.
#[derive(Debug, Serialize, ToSchema)]
pub struct DiffWire {
    /// What changed between the two versions, as a unified diff.
    pub diff: String,
}

/// What changed between two versions of the memory.
#[utoipa::path(get, path = "/v1/memory/diff", tag = "memory", params(DiffParams),
    responses((status = 200, body = DiffWire), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn diff_versions(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<DiffParams>,
) -> Result<Json<DiffWire>> {
    caller.require(KeyRole::Read)?;
    let scope = caller.scope(p.agent.as_deref().unwrap_or("default"), p.user.as_deref())?;
    let (from, to) = (p.from, p.to);
    let out = state
        .run(move |engine| {
            let (log, _) = engine.memory_log(&scope)?;
            for v in [from, to] {
                if v > log.version() {
                    return Err(ApiError::not_found(format!(
                        "there is no version {v}: the memory has {} version(s)",
                        log.version()
                    )));
                }
            }
            Ok(DiffWire {
                diff: diff(&log.view_at(from), &log.view_at(to)),
            })
        })
        .await?;
    Ok(Json(out))
}

/// The version to return to.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UndoBody {
    /// The version.
    pub version: u64,
}

/// Brings the memory back to how it was at a version, recorded as a new version (none
/// when it already is).
#[utoipa::path(post, path = "/v1/memory/undo", tag = "memory", params(ScopeParams),
    request_body = UndoBody,
    responses((status = 200, body = MaybeRecorded), (status = 400, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn undo(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<UndoBody>,
) -> Result<Json<MaybeRecorded>> {
    caller.require(KeyRole::Write)?;
    let scope = caller.scope(p.agent(), p.user.as_deref())?;
    let r = state
        .run(move |engine| Ok(engine.undo_memory(&scope, body.version)?))
        .await?;
    Ok(Json(MaybeRecorded {
        recorded: r.as_ref().map(VersionWire::of),
    }))
}

/// The changes to forget.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetBody {
    /// The entry ids of the changes (as `versions` lists them).
    pub ids: Vec<u64>,
}

/// Bub's `memory.forget`: leaves the given changes out of the memory, as if never made.
#[utoipa::path(post, path = "/v1/memory/forget", tag = "memory", params(ScopeParams),
    request_body = ForgetBody,
    responses((status = 201, body = VersionWire), (status = 400, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn forget(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<ForgetBody>,
) -> Result<(StatusCode, Json<VersionWire>)> {
    caller.require(KeyRole::Write)?;
    let scope = caller.scope(p.agent(), p.user.as_deref())?;
    if body.ids.is_empty() {
        return Err(ApiError::bad_request("name at least one change to forget"));
    }
    let ids = body
        .ids
        .iter()
        .map(|&id| EntryId::new(id))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let r = state
        .run(move |engine| Ok(engine.forget_memory(&scope, &ids)?))
        .await?;
    Ok((StatusCode::CREATED, Json(VersionWire::of(&r))))
}

/// Bub's `memory.clear`: every file goes (earlier versions stay and can be restored).
#[utoipa::path(post, path = "/v1/memory/clear", tag = "memory", params(WriteParams),
    responses((status = 200, body = MaybeRecorded), (status = 400, body = ErrorBody)))]
pub async fn clear(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<WriteParams>,
) -> Result<Json<MaybeRecorded>> {
    caller.require(KeyRole::Write)?;
    let (scope, session) = p.scopes(&caller)?;
    let (r, zone) = state
        .run(move |engine| {
            let r = engine.clear_memory(&scope)?;
            Ok((r, zone_after(engine, session.as_ref())?))
        })
        .await?;
    Ok(Json(MaybeRecorded {
        recorded: r.as_ref().map(|r| VersionWire {
            zone,
            ..VersionWire::of(r)
        }),
    }))
}

/// How many days of daily notes to keep.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PruneBody {
    /// Keep this many days (default 30).
    #[serde(default)]
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 4294967295_u64)]
    pub days: Option<u32>,
}

/// What a prune removed.
#[derive(Debug, Serialize, ToSchema)]
pub struct Pruned {
    /// How many daily notes went.
    pub removed: usize,
}

/// Removes daily notes older than the retention period.
#[utoipa::path(post, path = "/v1/memory/prune", tag = "memory", params(ScopeParams),
    request_body = PruneBody,
    responses((status = 200, body = Pruned), (status = 400, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn prune(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<PruneBody>,
) -> Result<Json<Pruned>> {
    caller.require(KeyRole::Write)?;
    let scope = caller.scope(p.agent(), p.user.as_deref())?;
    let days = body.days.unwrap_or(memtape::DEFAULT_RETENTION_DAYS);
    let removed = state
        .run(move |engine| Ok(engine.prune_daily(&scope, days)?))
        .await?;
    Ok(Json(Pruned { removed }))
}

/// A file's MateClaw flags to set.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FlagsBody {
    /// The file (`AGENTS.md`, `memories/notes.md`, or `/memories/notes.md`).
    #[schema(pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+\\.md$")]
    pub path: String,
    /// Whether it is injected into the system prompt (MEMORY.md, PROFILE.md and
    /// SESSION-STATE.md are in every prompt: they cannot be disabled).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Its place among injected files (lower first).
    #[serde(default)]
    pub sort_order: Option<i64>,
    /// Record it only if the memory is still at this version (409 otherwise).
    #[serde(default)]
    pub if_version: Option<u64>,
}

/// Sets a memory file's flags (MateClaw's enabled and sort order).
#[utoipa::path(put, path = "/v1/memory/flags", tag = "memory", params(ScopeParams),
    request_body = FlagsBody,
    responses((status = 200, body = VersionWire), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn flags(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<FlagsBody>,
) -> Result<Json<VersionWire>> {
    caller.require(KeyRole::Write)?;
    let scope = caller.scope(p.agent(), p.user.as_deref())?;
    if body.enabled.is_none() && body.sort_order.is_none() {
        return Err(ApiError::bad_request(
            "give enabled, sort_order or both to change",
        ));
    }
    let path = match body.path.strip_prefix("/memories/") {
        Some(rest) => format!("memories/{rest}"),
        None => body.path.clone(),
    };
    let path = check_path(&path)?;
    if body.enabled == Some(false) && memtape::memory::paths::always_in_prompt(&path) {
        return Err(ApiError::bad_request(format!(
            "{path} is in every prompt (the <memory> block shows it), so it cannot be \
             disabled; to keep something out of the prompt, move it to another file"
        )));
    }
    let r = state
        .run(move |engine| {
            // Flags are set on the scope's own files (a user's file overrides the agent's).
            if !engine
                .memory_log(&scope)?
                .0
                .view()
                .files
                .contains_key(&path)
            {
                return Err(ApiError::not_found(format!("no memory file {path}")));
            }
            let change = Change::one(
                Op::Flags {
                    path,
                    enabled: body.enabled,
                    sort_order: body.sort_order,
                },
                "flags",
            );
            record(engine, &scope, body.if_version, change)
        })
        .await?;
    Ok(Json(VersionWire::of(&r)))
}

/// A fact a model's rewrite of a memory file left out.
#[derive(Debug, Serialize, ToSchema)]
pub struct DroppedWire {
    /// The `memory.dropped` entry (what restore takes).
    pub id: u64,
    /// When it was dropped (RFC 3339).
    pub at: String,
    /// The file it was in.
    pub path: String,
    /// The line as it was.
    pub text: String,
    /// The heading it sat under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
    /// The memory version whose rewrite dropped it.
    pub version: u64,
    /// What rewrote the file (`consolidation`, `extraction`, `emergence`).
    pub by: String,
    /// Whether the file states it again now.
    pub present: bool,
}

/// The dropped facts.
#[derive(Debug, Serialize, ToSchema)]
pub struct DroppedList {
    /// Newest first.
    pub dropped: Vec<DroppedWire>,
}

/// The facts that model rewrites of MEMORY.md or PROFILE.md left out (lossless rewrites),
/// newest first: each stays on the tape and in search, and can be restored.
#[utoipa::path(get, path = "/v1/memory/dropped", tag = "memory", params(ScopeParams),
    responses((status = 200, body = DroppedList), (status = 400, body = ErrorBody)))]
pub async fn dropped(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
) -> Result<Json<DroppedList>> {
    let scope = caller.scope(p.agent(), p.user.as_deref())?;
    let list = state
        .run(move |engine| Ok(engine.dropped_facts(&scope)?))
        .await?;
    Ok(Json(DroppedList {
        dropped: list
            .into_iter()
            .map(|d| DroppedWire {
                id: d.id.0,
                at: d.at.to_rfc3339(),
                path: d.fact.path,
                text: d.fact.text,
                section: d.fact.section,
                version: d.fact.version,
                by: d.fact.by,
                present: d.present,
            })
            .collect(),
    }))
}

/// Puts a dropped fact back into its file (in its old section when the file still has
/// it), as a new version; none when the file states it already.
#[utoipa::path(post, path = "/v1/memory/dropped/{id}/restore", tag = "memory",
    params(("id" = u64, Path, maximum = 9007199254740991_u64, description = "The dropped fact's id"), ScopeParams),
    responses((status = 200, body = MaybeRecorded), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn restore_dropped(
    State(state): State<AppState>,
    caller: Caller,
    crate::extract::ApiPath(id): crate::extract::ApiPath<u64>,
    ApiQuery(p): ApiQuery<ScopeParams>,
) -> Result<Json<MaybeRecorded>> {
    caller.require(KeyRole::Write)?;
    let scope = caller.scope(p.agent(), p.user.as_deref())?;
    let id = EntryId::new(id)?;
    let r = state
        .run(move |engine| Ok(engine.restore_dropped(&scope, id)?))
        .await?;
    Ok(Json(MaybeRecorded {
        recorded: r.as_ref().map(VersionWire::of),
    }))
}

/// An emergence to run.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmergenceBody {
    /// How many of the newest daily notes to read (default: the server's setting, 7).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 366)]
    pub days: Option<usize>,
}

/// MateClaw's emergence, now, with the server's model: the newest daily notes merged into
/// MEMORY.md (dropped facts kept; the notes never change). Waits for an extraction or
/// emergence of this memory running elsewhere. 502 with nothing changed when the model
/// fails or answers badly; 503 without a model.
#[utoipa::path(post, path = "/v1/memory/emergence", tag = "lifecycle", params(ScopeParams),
    request_body = EmergenceBody,
    responses((status = 200, body = crate::rest::session::MemoryRunWire),
        (status = 400, body = ErrorBody), (status = 502, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn emergence(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<EmergenceBody>,
) -> Result<Json<crate::rest::session::MemoryRunWire>> {
    caller.require(KeyRole::Write)?;
    let scope = caller.scope(p.agent(), p.user.as_deref())?;
    if body.days.is_some_and(|d| !(1..=366).contains(&d)) {
        return Err(ApiError::bad_request("days must be from 1 to 366"));
    }
    let llm = state.model(crate::metrics::ModelUse::Emergence)?;
    let config = state.lifecycle().emergence.clone();
    let run = state
        .run(move |engine| {
            Ok(engine.emerge(
                &scope,
                llm.as_ref(),
                &config,
                body.days,
                memtape::Wait::Block,
            )?)
        })
        .await?;
    Ok(Json(crate::rest::session::MemoryRunWire::of(run)))
}
