//! Memory files by path, through the same code the tools run ([`memtape::Engine::call_tool`]):
//! Anthropic's memory tool on `/memories/…` (view, create, str_replace, insert, delete,
//! rename) and MateClaw's workspace tools (list, read, write, edit). Paths travel in the
//! query or the body, never in the URL path, so no client or proxy normalizes them first.
//! A path the workspace rules refuse (traversal, absolute, control characters such as NUL,
//! percent-encoded dots or slashes, hidden or backup names) is a 400 naming the rule, and
//! nothing is stored; a missing file is a 404; a rename onto an existing file a 409.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ErrorBody, Result};
use crate::extract::{ApiJson, ApiQuery};
use crate::state::{AppState, Caller, Role as KeyRole};
use crate::wire::ScopeParams;

/// This module's routes.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/memories",
            get(view).put(create).patch(edit).delete(delete),
        )
        .route("/v1/memories/rename", post(rename))
        .route("/v1/workspace/files", get(list))
        .route(
            "/v1/workspace/file",
            get(read).put(write).patch(workspace_edit),
        )
}

/// What the tool answered, for people and models.
#[derive(Debug, Serialize, ToSchema)]
pub struct FileText {
    /// The text (a listing, a numbered file, or what was done).
    pub text: String,
}

/// A MateClaw tool's JSON answer (as MateClaw returns it: `agentId`, `filename`, …).
#[derive(Debug, Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
pub struct WorkspaceAnswer(pub Value);

/// A tool's refusal as an API error: a missing file is a 404, an existing destination a
/// 409, anything else (a path rule, an ambiguous edit) a 400. The text is the tool's.
fn refusal(text: &str) -> ApiError {
    let text = text.strip_prefix("Error: ").unwrap_or(text);
    if text.contains("does not exist") || text.contains("file not found") {
        ApiError::not_found(text)
    } else if text.contains("already exists") {
        ApiError::conflict(text)
    } else {
        ApiError::bad_request(text)
    }
}

/// Runs the tool `name` on the caller's memory (the agent's, or the user's).
async fn run_tool(
    state: &AppState,
    caller: &Caller,
    p: &ScopeParams,
    name: &'static str,
    input: Value,
) -> Result<String> {
    let scope = caller.scope(p.agent(), p.user.as_deref())?;
    let out = state
        .run(move |engine| Ok(engine.call_tool(&scope, name, &input)?))
        .await?;
    if out.is_error {
        return Err(refusal(&out.text));
    }
    Ok(out.text)
}

/// The JSON answer of a MateClaw tool.
fn answer(text: &str) -> Result<Json<WorkspaceAnswer>> {
    serde_json::from_str(text)
        .map(|v| Json(WorkspaceAnswer(v)))
        .map_err(|e| ApiError::internal(format!("the tool answered no JSON: {e}")))
}

/// What to view.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ViewParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user.
    pub user: Option<String>,
    /// A path under /memories (default `/memories`, the folder).
    #[param(pattern = "^/memories(/[^\\u0000-\\u001F\\u007F-\\u009F]*)?$")]
    pub path: Option<String>,
    /// The first line to show (from 1; with `end`).
    pub start: Option<i64>,
    /// The last line to show (-1: to the end).
    pub end: Option<i64>,
}

/// Anthropic `view`: a file with line numbers, or a folder listed two levels deep.
#[utoipa::path(get, path = "/v1/memories", tag = "files", params(ViewParams),
    responses((status = 200, body = FileText), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn view(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ViewParams>,
) -> Result<Json<FileText>> {
    caller.require(KeyRole::Read)?;
    let mut input = json!({"command": "view", "path": p.path.as_deref().unwrap_or("/memories")});
    match (p.start, p.end) {
        (None, None) => {}
        (Some(s), Some(e)) => input["view_range"] = json!([s, e]),
        _ => return Err(ApiError::bad_request("give start and end together")),
    }
    let scope = ScopeParams::new(p.agent, p.user);
    let text = run_tool(&state, &caller, &scope, "memory", input).await?;
    Ok(Json(FileText { text }))
}

/// A file to create.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    /// A path under /memories.
    #[schema(pattern = "^/memories/[^\\u0000-\\u001F\\u007F-\\u009F]+$")]
    pub path: String,
    /// The file's content.
    pub file_text: String,
}

/// Anthropic `create`: creates or replaces a file.
#[utoipa::path(put, path = "/v1/memories", tag = "files", params(ScopeParams),
    request_body = CreateBody,
    responses((status = 201, body = FileText), (status = 400, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<(StatusCode, Json<FileText>)> {
    caller.require(KeyRole::Write)?;
    let input = json!({"command": "create", "path": body.path, "file_text": body.file_text});
    let text = run_tool(&state, &caller, &p, "memory", input).await?;
    Ok((StatusCode::CREATED, Json(FileText { text })))
}

/// An edit of a file under /memories.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
pub enum EditBody {
    /// Replaces the one occurrence of `old_str` with `new_str`.
    StrReplace {
        /// A path under /memories.
        #[schema(pattern = "^/memories/[^\\u0000-\\u001F\\u007F-\\u009F]+$")]
        path: String,
        /// The exact text to replace.
        old_str: String,
        /// What replaces it.
        #[serde(default)]
        new_str: String,
    },
    /// Inserts `insert_text` after line `insert_line` (0: before the first line).
    Insert {
        /// A path under /memories.
        #[schema(pattern = "^/memories/[^\\u0000-\\u001F\\u007F-\\u009F]+$")]
        path: String,
        /// The line after which to insert.
        insert_line: i64,
        /// The text.
        insert_text: String,
    },
}

/// Anthropic `str_replace` and `insert` (`{"command": …}`).
#[utoipa::path(patch, path = "/v1/memories", tag = "files", params(ScopeParams),
    request_body = EditBody,
    responses((status = 200, body = FileText), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn edit(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<EditBody>,
) -> Result<Json<FileText>> {
    caller.require(KeyRole::Write)?;
    let input = match body {
        EditBody::StrReplace {
            path,
            old_str,
            new_str,
        } => {
            json!({"command": "str_replace", "path": path, "old_str": old_str, "new_str": new_str})
        }
        EditBody::Insert {
            path,
            insert_line,
            insert_text,
        } => json!({"command": "insert", "path": path, "insert_line": insert_line,
                    "insert_text": insert_text}),
    };
    let text = run_tool(&state, &caller, &p, "memory", input).await?;
    Ok(Json(FileText { text }))
}

/// Which file or folder under /memories to delete.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PathParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user.
    pub user: Option<String>,
    /// The path.
    #[param(pattern = "^/memories(/[^\\u0000-\\u001F\\u007F-\\u009F]*)?$")]
    pub path: String,
}

/// Anthropic `delete`: removes a file or folder (its versions stay).
#[utoipa::path(delete, path = "/v1/memories", tag = "files", params(PathParams),
    responses((status = 200, body = FileText), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<PathParams>,
) -> Result<Json<FileText>> {
    caller.require(KeyRole::Write)?;
    let input = json!({"command": "delete", "path": p.path});
    let scope = ScopeParams::new(p.agent, p.user);
    let text = run_tool(&state, &caller, &scope, "memory", input).await?;
    Ok(Json(FileText { text }))
}

/// A rename.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameBody {
    /// The current path under /memories.
    #[schema(pattern = "^/memories/[^\\u0000-\\u001F\\u007F-\\u009F]+$")]
    pub old_path: String,
    /// The new path under /memories.
    #[schema(pattern = "^/memories/[^\\u0000-\\u001F\\u007F-\\u009F]+$")]
    pub new_path: String,
}

/// Anthropic `rename`: moves a file or folder.
#[utoipa::path(post, path = "/v1/memories/rename", tag = "files", params(ScopeParams),
    request_body = RenameBody,
    responses((status = 200, body = FileText), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn rename(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<RenameBody>,
) -> Result<Json<FileText>> {
    caller.require(KeyRole::Write)?;
    let input = json!({"command": "rename", "old_path": body.old_path, "new_path": body.new_path});
    let text = run_tool(&state, &caller, &p, "memory", input).await?;
    Ok(Json(FileText { text }))
}

/// A MateClaw path: `/memories/x.md` is the workspace file `memories/x.md`.
fn workspace_path(path: &str) -> String {
    match path.strip_prefix("/memories/") {
        Some(rest) => format!("memories/{rest}"),
        None => path.to_owned(),
    }
}

/// Which workspace files to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user.
    pub user: Option<String>,
    /// Only paths starting with this.
    pub prefix: Option<String>,
}

/// MateClaw `list_workspace_memory_files`: the workspace's .md files with their flags.
#[utoipa::path(get, path = "/v1/workspace/files", tag = "files", params(ListParams),
    responses((status = 200, body = WorkspaceAnswer), (status = 400, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ListParams>,
) -> Result<Json<WorkspaceAnswer>> {
    caller.require(KeyRole::Read)?;
    let input = json!({"filenamePrefix": p.prefix.as_deref().map(workspace_path)});
    let scope = ScopeParams::new(p.agent, p.user);
    answer(
        &run_tool(
            &state,
            &caller,
            &scope,
            "list_workspace_memory_files",
            input,
        )
        .await?,
    )
}

/// Which workspace file to read.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FileParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user.
    pub user: Option<String>,
    /// A .md path (MEMORY.md, memory/2026-04-01.md, /memories/notes.md).
    #[param(pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+\\.md$")]
    pub path: String,
}

/// MateClaw `read_workspace_memory_file`: a file's content, size, flag and update time.
#[utoipa::path(get, path = "/v1/workspace/file", tag = "files", params(FileParams),
    responses((status = 200, body = WorkspaceAnswer), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn read(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<FileParams>,
) -> Result<Json<WorkspaceAnswer>> {
    caller.require(KeyRole::Read)?;
    let input = json!({"filename": workspace_path(&p.path)});
    let scope = ScopeParams::new(p.agent, p.user);
    answer(&run_tool(&state, &caller, &scope, "read_workspace_memory_file", input).await?)
}

/// A whole file to write.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteBody {
    /// A .md path (MEMORY.md, memory/2026-04-01.md, /memories/notes.md).
    #[schema(pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+\\.md$")]
    pub path: String,
    /// The file's content.
    pub content: String,
}

/// MateClaw `write_workspace_memory_file`: creates or overwrites a file (keeping its flags).
#[utoipa::path(put, path = "/v1/workspace/file", tag = "files", params(ScopeParams),
    request_body = WriteBody,
    responses((status = 200, body = WorkspaceAnswer), (status = 400, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn write(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<WriteBody>,
) -> Result<Json<WorkspaceAnswer>> {
    caller.require(KeyRole::Write)?;
    let input = json!({"filename": workspace_path(&body.path), "content": body.content});
    answer(&run_tool(&state, &caller, &p, "write_workspace_memory_file", input).await?)
}

/// An edit of a workspace file.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceEditBody {
    /// A .md path.
    #[schema(pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+\\.md$")]
    pub path: String,
    /// The exact text to replace.
    pub old_text: String,
    /// What replaces it.
    pub new_text: String,
    /// Replace every occurrence (default: the text must occur once).
    #[serde(default)]
    pub replace_all: bool,
}

/// MateClaw `edit_workspace_memory_file`: replaces text in a file.
#[utoipa::path(patch, path = "/v1/workspace/file", tag = "files", params(ScopeParams),
    request_body = WorkspaceEditBody,
    responses((status = 200, body = WorkspaceAnswer), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn workspace_edit(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ScopeParams>,
    ApiJson(body): ApiJson<WorkspaceEditBody>,
) -> Result<Json<WorkspaceAnswer>> {
    caller.require(KeyRole::Write)?;
    let input = json!({"filename": workspace_path(&body.path), "oldText": body.old_text,
                       "newText": body.new_text, "replaceAll": body.replace_all});
    answer(&run_tool(&state, &caller, &p, "edit_workspace_memory_file", input).await?)
}
