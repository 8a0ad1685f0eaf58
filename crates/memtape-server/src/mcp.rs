//! MCP: one rmcp server handler, [`Memtape`], behind both transports — stdio
//! ([`serve_stdio`], for `memtape mcp`) and streamable HTTP at `/mcp` ([`mcp_service`]).
//!
//! - Tools: the whole memory tool registry under host-safe names (`memory.save` is
//!   `memory_save`), run through the same REST handler as `POST /v1/tools/{name}`, and the
//!   tape tools `tape_append` (with the WAL on user messages), `tape_history`,
//!   `tape_search` (the REST handlers of the same routes) and `tape_context`. A refusal or
//!   bad input is a tool result flagged `isError`; an unknown tool or a server failure is an
//!   MCP error.
//! - Resources: the memory files of the caller's agent (and user) as
//!   `memtape://memory/<path>`, listed, read and subscribed to. After every tool call of a
//!   subscribed scope, the files are compared with what they were before the call, and each
//!   subscriber of a file that changed gets `notifications/resources/updated` (changes made
//!   outside MCP — REST, the CLI — are not noticed).
//! - A prompt, `memory_skill`, and the server's `instructions`: how and when to save,
//!   recall and search.
//!
//! Who calls: over stdio, the tenant, agent and user given on the command line; over HTTP,
//! the tenant and role of the [`Caller`] the authentication middleware put on the request,
//! and `agent`/`user` from the `/mcp` URL's query; an HTTP session stays with the tenant
//! that started it. A `read` key cannot call a tool that writes. The protocol versions offered are those with an `initialize` handshake (up to
//! 2025-11-25): sessions, and so resource subscriptions, exist there.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::request::Parts;
use memtape::{ContextConfig, ContextRequest, MateClaw, Message, Policy, Qanot, Scope};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, Implementation, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams, Prompt,
    PromptMessage, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceContents, Role as McpRole, ServerCapabilities,
    ServerConfig, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::rest;
use crate::state::{AppState, Caller, Role};
use crate::wire::{ChatMessage, ScopeParams};

mod hub;
pub(crate) mod limit;
mod tools;

use hub::{Hub, Sub};
pub use tools::tools;
use tools::{
    AppendInput, AsOfInput, BlameInput, ConsolidateInput, ContextInput, EmergeInput,
    EraseSessionInput, ExtractInput, FileInput, HistoryInput, MEMORY_AS_OF, MEMORY_BLAME,
    MEMORY_CONSOLIDATE, MEMORY_DROPPED, MEMORY_EMERGE, MEMORY_EXTRACT, MEMORY_RESTORE, NODE_ADD,
    NODE_CLEANUP, NODE_CLEAR, NODE_HISTORY, NodeAddInput, NodeCleanupInput, NodeHistoryInput,
    NodeRefInput, PolicyInput, RestoreInput, SearchInput, TAPE_APPEND, TAPE_CONTEXT,
    TAPE_ERASE_SESSION, TAPE_HISTORY, TAPE_SEARCH, is_tool,
};

/// What the `memory_skill` prompt adds for MCP (resources, the tape tools, the workspace
/// tools) to the memory skill every context carries ([`memtape::MEMORY_SKILL`]).
const MCP_SKILL: &str = include_str!("mcp/skill.md");

/// The memory skill, the `memory_skill` prompt: MCP's part, then the memory skill the
/// context builder puts in system prompts (one text: nanobot's skill and Bub's rule 7).
pub fn skill() -> String {
    format!("{}\n\n{}", MCP_SKILL.trim(), memtape::MEMORY_SKILL.trim())
}

/// The server's instructions, sent at initialization.
pub const INSTRUCTIONS: &str = "memtape is your long-term memory. Save a stable fact, \
preference or decision as soon as you learn it (edit MEMORY.md/PROFILE.md with the workspace \
tools, or rewrite MEMORY.md whole with memory_save); note what happened today with memory_daily; keep longer notes \
under /memories with the memory tool. Before answering about the past or the user, look it \
up: memory_show at the start of a task, memory_search for memory files (HISTORY.md, the log \
of earlier conversations, too: file=HISTORY.md searches it alone), tape_search for earlier \
messages. Append the conversation with tape_append so the user's corrections, names \
and preferences reach SESSION-STATE.md. The memory files are resources \
(memtape://memory/<path>); the memory_skill prompt says all of this in full.";

/// The prefix of a memory file's URI.
pub const URI_PREFIX: &str = "memtape://memory/";

/// The name of the prompt carrying the memory skill.
pub const SKILL_PROMPT: &str = "memory_skill";

/// The URI of the memory file `path`.
pub fn file_uri(path: &str) -> String {
    let mut out = String::from(URI_PREFIX);
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The memory file path of a `memtape://memory/` URI.
pub fn uri_path(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix(URI_PREFIX)?;
    let mut bytes = Vec::with_capacity(rest.len());
    let mut it = rest.bytes();
    while let Some(b) = it.next() {
        if b == b'%' {
            let hex = [it.next()?, it.next()?];
            let hex = std::str::from_utf8(&hex).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
        } else {
            bytes.push(b);
        }
    }
    String::from_utf8(bytes).ok().filter(|p| !p.is_empty())
}

/// Who a request is for: the caller (tenant and role), the agent and the user.
#[derive(Clone, Debug)]
struct Who {
    caller: Caller,
    agent: String,
    user: Option<String>,
}

impl Who {
    /// The agent (or agent-and-user) scope: where the memory is.
    fn memory(&self) -> Result<Scope, ApiError> {
        self.caller.scope(&self.agent, self.user.as_deref())
    }

    fn params(&self) -> ScopeParams {
        ScopeParams {
            agent: Some(self.agent.clone()),
            user: self.user.clone(),
        }
    }
}

/// The MCP server: one per stdio connection or HTTP session.
pub struct Memtape {
    state: AppState,
    hub: Arc<Hub>,
    /// Over stdio: who every request is for.
    fixed: Option<Who>,
    /// This connection or session, for its subscriptions.
    id: u64,
    /// Over HTTP: the tenant of the session's first request; a request of another tenant
    /// (another key that got hold of the session id) is refused.
    tenant: Mutex<Option<String>>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Memtape {
    fn new(state: AppState, hub: Arc<Hub>, fixed: Option<Who>) -> Self {
        Memtape {
            state,
            hub,
            fixed,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            tenant: Mutex::new(None),
        }
    }

    /// A server for one stdio connection, for `tenant`, `agent` and `user` (with every
    /// right: the local user owns the store).
    pub fn stdio(state: AppState, tenant: &str, agent: &str, user: Option<&str>) -> Self {
        let who = Who {
            caller: Caller {
                tenant: tenant.to_owned(),
                role: Role::Admin,
                key: None,
            },
            agent: agent.to_owned(),
            user: user.map(str::to_owned),
        };
        let hub = Hub::started(&state);
        Self::new(state, hub, Some(who))
    }

    /// Who `context`'s request is for.
    fn who(&self, context: &RequestContext<RoleServer>) -> Result<Who, ErrorData> {
        if let Some(who) = &self.fixed {
            return Ok(who.clone());
        }
        let parts = context
            .extensions
            .get::<Parts>()
            .ok_or_else(|| ErrorData::internal_error("no HTTP request for this call", None))?;
        let caller =
            parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
                ErrorData::internal_error("/mcp is not behind authentication", None)
            })?;
        {
            let mut tenant = self.tenant.lock().unwrap_or_else(|p| p.into_inner());
            match tenant.as_deref() {
                None => *tenant = Some(caller.tenant.clone()),
                Some(t) if t == caller.tenant => {}
                Some(_) => {
                    return Err(ErrorData::invalid_request(
                        "this MCP session was started with another key; start a new session",
                        None,
                    ));
                }
            }
        }
        let axum::extract::Query(params) =
            axum::extract::Query::<ScopeParams>::try_from_uri(&parts.uri)
                .map_err(|e| ErrorData::invalid_params(format!("/mcp query: {e}"), None))?;
        let who = Who {
            caller,
            agent: params.agent().to_owned(),
            user: params.user,
        };
        who.memory()
            .map_err(|e| ErrorData::invalid_params(e.message, None))?;
        Ok(who)
    }

    /// Runs the tool `name` for `who`.
    async fn run_tool(&self, who: &Who, name: &str, args: Value) -> Result<String, Refusal> {
        let state = State(self.state.clone());
        let caller = who.caller.clone();
        match name {
            TAPE_APPEND => {
                let mut request = args.clone();
                let input: AppendInput = input(name, args)?;
                let messages = input
                    .messages
                    .into_iter()
                    .map(|m| m.to_wire())
                    .collect::<Vec<_>>();
                let body = serde_json::from_value(json!({ "messages": messages }))
                    .map_err(|e| Refusal::Tool(format!("Error: invalid input for {name}: {e}")))?;
                let tenant = caller.tenant.clone();
                let params = rest::AppendParams {
                    agent: Some(who.agent.clone()),
                    user: who.user.clone(),
                    source: input.source.map(|s| s.source()),
                };
                let call = rest::append(
                    state,
                    caller,
                    ApiPath(input.session),
                    ApiQuery(params),
                    ApiJson(body),
                );
                let Some(key) = input.idempotency_key else {
                    let (_, Json(out)) = call.await?;
                    return to_text(&out);
                };
                // Run once per key: a retried call answers the first answer.
                memtape::requests::check_key(&key)
                    .map_err(|e| Refusal::Tool(format!("Error: {e}")))?;
                if let Some(fields) = request.as_object_mut() {
                    fields.remove("idempotency_key");
                }
                let print = crate::idempotency::fingerprint(&[
                    name.as_bytes(),
                    who.agent.as_bytes(),
                    who.user.as_deref().unwrap_or("").as_bytes(),
                    request.to_string().as_bytes(),
                ]);
                let run = async {
                    match call.await {
                        Ok((_, Json(out))) => match to_text(&out) {
                            Ok(text) => (200, text.into_bytes()),
                            Err(_) => (500, b"the answer could not be written".to_vec()),
                        },
                        Err(e) => (e.status.as_u16(), e.message.into_bytes()),
                    }
                };
                let (status, body) =
                    match crate::idempotency::once(&self.state, &tenant, &key, print, run).await? {
                        crate::idempotency::Outcome::Ran(s, b)
                        | crate::idempotency::Outcome::Replayed(s, b) => (s, b),
                    };
                let text = String::from_utf8_lossy(&body).into_owned();
                if status == 200 {
                    Ok(text)
                } else {
                    let status = axum::http::StatusCode::from_u16(status)
                        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
                    Err(ApiError::new(status, "refused", text).into())
                }
            }
            TAPE_HISTORY => {
                let input: HistoryInput = input(name, args)?;
                let params = rest::HistoryParams {
                    agent: Some(who.agent.clone()),
                    user: who.user.clone(),
                    max_messages: input.max_messages,
                    max_tokens: input.max_tokens,
                    view: None,
                    as_of: input.as_of,
                    attachments: input.attachments.map(|a| a.as_str().to_owned()),
                };
                let Json(out) =
                    rest::history(state, caller, ApiPath(input.session), ApiQuery(params)).await?;
                to_text(&out)
            }
            TAPE_SEARCH => {
                let input: SearchInput = input(name, args)?;
                let params = rest::SearchParams {
                    q: input.query,
                    agent: Some(who.agent.clone()),
                    user: who.user.clone(),
                    scope: input.scope.map(|s| s.as_str().to_owned()),
                    session: input.session,
                    kind: input.kind,
                    role: input.role.map(|r| r.as_str().to_owned()),
                    since: input.since,
                    until: input.until,
                    mode: input.mode.map(|m| m.as_str().to_owned()),
                    limit: input.limit,
                    as_of: input.as_of,
                };
                let out = rest::find(state, caller, ApiQuery(params)).await?;
                to_text(&out)
            }
            TAPE_ERASE_SESSION if self.state.mcp_erase_own_session() => {
                // An agent erases only its own sessions, with a key that may write to them.
                who.caller.require(Role::Write)?;
                let input: EraseSessionInput = input(name, args)?;
                let scope = who.memory()?;
                let options = memtape::EraseOptions {
                    by: format!("{} (mcp)", caller.who()),
                    reason: input.reason.unwrap_or_default(),
                    dry_run: false,
                    compact: false,
                };
                let dir = self.state.data_dir().map(std::path::Path::to_path_buf);
                let what = memtape::Erase::Session(input.session);
                let outcome = self
                    .state
                    .run(move |engine| Ok(engine.erase(&scope, what, options, dir.as_deref())?))
                    .await?;
                to_text(&json!({
                    "receipt": outcome.receipt.as_ref().map(|r| r.id.0),
                    "entries": outcome.entries,
                    "files": outcome.files_removed,
                }))
            }
            MEMORY_AS_OF => {
                let input: AsOfInput = input(name, args)?;
                match input.path {
                    Some(path) => {
                        let params = rest::FileParams {
                            agent: Some(who.agent.clone()),
                            user: who.user.clone(),
                            path,
                            as_of: Some(input.as_of),
                        };
                        let Json(out) = rest::file(state, caller, ApiQuery(params)).await?;
                        to_text(&out)
                    }
                    None => {
                        let params = crate::wire::ReadParams {
                            agent: Some(who.agent.clone()),
                            user: who.user.clone(),
                            as_of: Some(input.as_of),
                        };
                        let Json(out) = rest::view(state, caller, ApiQuery(params)).await?;
                        to_text(&out)
                    }
                }
            }
            MEMORY_BLAME => {
                let input: BlameInput = input(name, args)?;
                let params = rest::FileParams {
                    agent: Some(who.agent.clone()),
                    user: who.user.clone(),
                    path: input.path,
                    as_of: input.as_of,
                };
                let Json(out) = rest::blame(state, caller, ApiQuery(params)).await?;
                to_text(&out)
            }
            MEMORY_CONSOLIDATE => {
                // The role first, as the registry's tools do: a read key learns no more.
                who.caller.require(Role::Write)?;
                let input: ConsolidateInput = input(name, args)?;
                let body = rest::ConsolidationBody {
                    all: input.all.unwrap_or(false),
                };
                let call = rest::consolidation(
                    state,
                    caller,
                    ApiPath(input.session),
                    ApiQuery(who.params()),
                    ApiJson(body),
                );
                let Json(out) = call.await?;
                to_text(&out)
            }
            MEMORY_EXTRACT => {
                // The role first, as the registry's tools do: a read key learns no more.
                who.caller.require(Role::Write)?;
                let input: ExtractInput = input(name, args)?;
                let params = rest::ExtractionParams {
                    agent: Some(who.agent.clone()),
                    user: who.user.clone(),
                    source: input.source.map(|s| s.source()),
                };
                let call =
                    rest::extraction(state, caller, ApiPath(input.session), ApiQuery(params));
                let Json(out) = call.await?;
                to_text(&out)
            }
            MEMORY_EMERGE => {
                // The role first, as the registry's tools do: a read key learns no more.
                who.caller.require(Role::Write)?;
                let input: EmergeInput = input(name, args)?;
                let body = rest::EmergenceBody { days: input.days };
                let call = rest::emergence(state, caller, ApiQuery(who.params()), ApiJson(body));
                let Json(out) = call.await?;
                to_text(&out)
            }
            NODE_ADD => {
                // The role first, as the registry's tools do: a read key learns no more.
                who.caller.require(Role::Write)?;
                let input: NodeAddInput = input(name, args)?;
                let path = rest::NodePath {
                    session: input.session,
                    node: input.node,
                };
                let body = rest::NodeTurnBody {
                    message_id: input.message_id,
                    parent_message_id: input.parent_message_id,
                    user_content: input.user_content,
                    assistant_content: input.assistant_content,
                    user_files: input.user_files.iter().map(FileInput::to_wire).collect(),
                    assistant_files: input
                        .assistant_files
                        .iter()
                        .map(FileInput::to_wire)
                        .collect(),
                };
                let params = who.params();
                let call = rest::node_add(
                    state,
                    caller,
                    ApiPath(path),
                    ApiQuery(params),
                    ApiJson(body),
                );
                let (_, Json(out)) = call.await?;
                to_text(&out)
            }
            NODE_HISTORY => {
                let input: NodeHistoryInput = input(name, args)?;
                let path = rest::NodePath {
                    session: input.session,
                    node: input.node,
                };
                let params = rest::NodeHistoryParams {
                    agent: Some(who.agent.clone()),
                    user: who.user.clone(),
                    message_id: input.message_id,
                    parent_message_id: input.parent_message_id,
                    max_tokens: input.max_tokens,
                };
                let call = rest::node_history(state, caller, ApiPath(path), ApiQuery(params));
                let Json(out) = call.await?;
                to_text(&out)
            }
            NODE_CLEAR => {
                who.caller.require(Role::Write)?;
                let input: NodeRefInput = input(name, args)?;
                let path = rest::NodePath {
                    session: input.session,
                    node: input.node,
                };
                let params = who.params();
                let Json(out) =
                    rest::node_clear(state, caller, ApiPath(path), ApiQuery(params)).await?;
                to_text(&out)
            }
            NODE_CLEANUP => {
                let input: NodeCleanupInput = input(name, args)?;
                let body = rest::NodeCleanupBody {
                    older_than_days: input.older_than_days,
                    session: input.session,
                    dry_run: input.dry_run.unwrap_or(false),
                };
                let params = who.params();
                let call = rest::node_cleanup(state, caller, ApiQuery(params), ApiJson(body));
                let Json(out) = call.await?;
                to_text(&out)
            }
            MEMORY_DROPPED => {
                let Json(out) = rest::dropped(state, caller, ApiQuery(who.params())).await?;
                to_text(&out)
            }
            MEMORY_RESTORE => {
                // The role first, as the registry's tools do: a read key learns no more.
                who.caller.require(Role::Write)?;
                let input: RestoreInput = input(name, args)?;
                let call =
                    rest::restore_dropped(state, caller, ApiPath(input.id), ApiQuery(who.params()));
                let Json(out) = call.await?;
                to_text(&out)
            }
            TAPE_CONTEXT => {
                let input: ContextInput = input(name, args)?;
                let record = input.record.unwrap_or(true) && input.as_of.is_none();
                who.caller
                    .require(if record { Role::Write } else { Role::Read })?;
                let session = who
                    .memory()?
                    .with_session(&input.session)
                    .map_err(ApiError::from)?;
                if input.budget == 0 {
                    return Err(Refusal::Tool(
                        "Error: the token budget must be at least 1".into(),
                    ));
                }
                let policy = match input.policy.unwrap_or(PolicyInput::Mateclaw) {
                    PolicyInput::Mateclaw => Policy::MateClaw(MateClaw::default()),
                    PolicyInput::Qanot => Policy::Qanot(Qanot::default()),
                };
                let request = ContextRequest {
                    system_prompt: input.system.unwrap_or_default(),
                    message: input.message.map(Message::user),
                    config: ContextConfig {
                        memory_skill: input
                            .memory_skill
                            .unwrap_or_else(|| self.state.lifecycle().memory_skill),
                        reply_tokens: input
                            .reply_tokens
                            .unwrap_or(memtape::context::DEFAULT_REPLY_TOKENS),
                        ..ContextConfig::new(input.budget, policy)
                    },
                    emergency: false,
                    record: record && input.as_of.is_none(),
                    as_of: crate::wire::as_of(input.as_of.as_deref())?,
                };
                let rebuild =
                    crate::wire::attachments_format(input.attachments.map(|a| a.as_str()))?;
                let files = match rebuild {
                    Some(_) => Some(self.state.files_of(&who.caller.tenant)?),
                    None => None,
                };
                let config = self.state.attachments_config().clone();
                let state = self.state.clone();
                // A prompt of the past is built without the model.
                let llm = state
                    .model(crate::metrics::ModelUse::Compaction)
                    .ok()
                    .filter(|_| request.as_of.is_none());
                let call = async move {
                    state
                        .run(move |engine| {
                            let built = engine.context_using(&session, &request, llm.as_deref())?;
                            let messages = built
                                .messages
                                .iter()
                                .map(|m| ChatMessage::rebuilt(m, rebuild, files.as_ref(), &config))
                                .collect::<crate::error::Result<Vec<_>>>()?;
                            Ok((built, messages))
                        })
                        .await
                };
                let (built, messages) = call.await?;
                to_text(&json!({
                    "messages": messages,
                    "tokens": built.tokens,
                    "max_input_tokens": built.max_input_tokens,
                    "policy": built.policy,
                    "history_messages": built.history_messages,
                    "compacted": built.compacted,
                    "over_budget": built.over_budget,
                }))
            }
            _ => {
                let mut input = args;
                let session = match input.as_object_mut().and_then(|o| o.remove(tools::SESSION)) {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s),
                    Some(other) => {
                        return Err(Refusal::Tool(format!(
                            "Error: session must be a string, not {other}"
                        )));
                    }
                };
                let body = rest::ToolCallBody { input, session };
                let call = rest::call_tool(
                    state,
                    caller,
                    ApiPath(name.to_owned()),
                    ApiQuery(who.params()),
                    ApiJson(body),
                );
                let Json(out) = call.await?;
                if out.is_error {
                    Err(Refusal::Tool(out.text))
                } else {
                    Ok(out.text)
                }
            }
        }
    }
}

impl Drop for Memtape {
    fn drop(&mut self) {
        self.hub.forget(self.id);
    }
}

/// Why a tool call did not succeed.
enum Refusal {
    /// The tool refused (bad input, nothing there, not allowed): the model is told.
    Tool(String),
    /// The server failed.
    Server(ApiError),
}

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Self {
        // A model that failed (502) or is not configured (503) is the tool's error to
        // show, as a refusal is: nothing changed, and the caller can act on it.
        if e.status.is_client_error()
            || e.status == axum::http::StatusCode::BAD_GATEWAY
            || e.status == axum::http::StatusCode::SERVICE_UNAVAILABLE
        {
            Refusal::Tool(format!("Error: {}", e.message))
        } else {
            Refusal::Server(e)
        }
    }
}

impl From<memtape::Error> for Refusal {
    fn from(e: memtape::Error) -> Self {
        ApiError::from(e).into()
    }
}

fn input<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, Refusal> {
    serde_json::from_value(args)
        .map_err(|e| Refusal::Tool(format!("Error: invalid input for {tool}: {e}")))
}

fn to_text(value: &impl serde::Serialize) -> Result<String, Refusal> {
    serde_json::to_string(value).map_err(|e| Refusal::Server(ApiError::internal(e.to_string())))
}

fn server_error(e: ApiError) -> ErrorData {
    ErrorData::internal_error(e.message, None)
}

impl ServerHandler for Memtape {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_resources_list_changed()
                .enable_prompts()
                .build(),
        )
        .with_server_info(
            Implementation::new("memtape", env!("CARGO_PKG_VERSION"))
                .with_description("Long-term memory for LLM agents"),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
        .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        // The scope is checked (and, over HTTP, the session bound to the key's tenant)
        // before anything else.
        self.who(&context)?;
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(
            &ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.who(&context)?;
        let mut all = tools();
        if self.state.mcp_erase_own_session() {
            all.push(tools::erase_session_tool());
        }
        Ok(ListToolsResult::with_all_items(all))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let who = self.who(&context)?;
        let erase = request.name == TAPE_ERASE_SESSION && self.state.mcp_erase_own_session();
        if !is_tool(&request.name) && !erase {
            return Err(ErrorData::invalid_params(
                format!("no tool {}", request.name),
                None,
            ));
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        let result = match self.run_tool(&who, &request.name, args).await {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(Refusal::Tool(text)) => CallToolResult::error(vec![ContentBlock::text(text)]),
            Err(Refusal::Server(e)) => return Err(server_error(e)),
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let who = self.who(&context)?;
        who.caller
            .require(Role::Read)
            .map_err(|e| ErrorData::invalid_request(e.message, None))?;
        let memory = who.memory().map_err(server_error)?;
        let files = memory_files(&self.state, &memory)
            .await
            .map_err(server_error)?;
        self.hub
            .listed(self.id, &memory, context.peer.clone(), &files);
        let resources = files
            .iter()
            .map(|(path, content)| {
                Resource::new(file_uri(path), path.clone())
                    .with_mime_type("text/markdown")
                    .with_size(content.len() as u64)
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let who = self.who(&context)?;
        who.caller
            .require(Role::Read)
            .map_err(|e| ErrorData::invalid_request(e.message, None))?;
        let not_found =
            || ErrorData::resource_not_found(format!("no memory file {}", request.uri), None);
        let path = uri_path(&request.uri).ok_or_else(not_found)?;
        let memory = who.memory().map_err(server_error)?;
        let mut files = memory_files(&self.state, &memory)
            .await
            .map_err(server_error)?;
        let content = files.remove(&path).ok_or_else(not_found)?;
        let contents =
            ResourceContents::text(content, request.uri.clone()).with_mime_type("text/markdown");
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    #[allow(deprecated)] // The handshake protocols' subscription (see the module's docs).
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let who = self.who(&context)?;
        who.caller
            .require(Role::Read)
            .map_err(|e| ErrorData::invalid_request(e.message, None))?;
        if uri_path(&request.uri).is_none() {
            return Err(ErrorData::invalid_params(
                format!(
                    "{} is not a memory file URI ({URI_PREFIX}<path>)",
                    request.uri
                ),
                None,
            ));
        }
        let memory = who.memory().map_err(server_error)?;
        let files = memory_files(&self.state, &memory)
            .await
            .map_err(server_error)?;
        self.hub.subscribe(
            Sub {
                session: self.id,
                memory,
                uri: request.uri,
                peer: context.peer.clone(),
            },
            files,
        );
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.who(&context)?;
        self.hub.unsubscribe(self.id, &request.uri);
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            SKILL_PROMPT,
            Some("How and when to save, recall and search memory with memtape's tools"),
            None,
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name != SKILL_PROMPT {
            return Err(ErrorData::invalid_params(
                format!("no prompt {} (there is {SKILL_PROMPT})", request.name),
                None,
            ));
        }
        let mut result =
            GetPromptResult::new(vec![PromptMessage::new_text(McpRole::User, skill())]);
        result.description = Some("memtape's memory skill".into());
        Ok(result.into())
    }
}

/// Serves MCP over `read` and `write` (the process's standard input and output, for
/// `memtape mcp`) for `tenant`, `agent` and `user` until the client closes the connection.
pub async fn serve_stdio<R, W>(
    state: AppState,
    scope: (&str, &str, Option<&str>),
    read: R,
    write: W,
) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (tenant, agent, user) = scope;
    let line_limit = state.limits().body_bytes;
    let server = Memtape::stdio(state, tenant, agent, user).who_check()?;
    // rmcp reads and writes through these pipes; the lines in between are checked here
    // (`relay`), so a line that is not JSON gets a JSON-RPC parse error instead of silence.
    let (rmcp_read, to_rmcp) = tokio::io::duplex(64 * 1024);
    let (from_rmcp, rmcp_write) = tokio::io::duplex(64 * 1024);
    let relay = tokio::spawn(relay(read, write, to_rmcp, from_rmcp, line_limit));
    server
        .serve((rmcp_read, rmcp_write))
        .await
        .map_err(std::io::Error::other)?
        .waiting()
        .await
        .map_err(std::io::Error::other)?;
    // rmcp has let go of its pipe: the relay writes what is left in it, then ends.
    relay.await.map_err(std::io::Error::other)??;
    Ok(())
}

/// The JSON-RPC answer to a line that is not JSON (`id` null, as the spec says when the
/// request's id cannot be read).
fn parse_error(why: &str) -> String {
    let mut line = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32700, "message": format!("Parse error: {why}")},
    })
    .to_string();
    line.push('\n');
    line
}

/// Carries lines from `input` to rmcp (`to_rmcp`) and rmcp's lines to `output`, whole
/// lines each way. A line that is not JSON, or is longer than `limit` bytes, is not passed
/// on: `output` gets a parse error for it.
async fn relay<R, W>(
    input: R,
    mut output: W,
    mut to_rmcp: tokio::io::DuplexStream,
    from_rmcp: tokio::io::DuplexStream,
    limit: usize,
) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let (errors, mut error_lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    let reader = tokio::spawn(async move {
        let mut input = BufReader::new(input);
        loop {
            let mut line = Vec::new();
            let n = (&mut input)
                .take(limit as u64 + 1)
                .read_until(b'\n', &mut line)
                .await?;
            if n == 0 {
                return Ok::<(), std::io::Error>(());
            }
            if !line.ends_with(b"\n") && line.len() > limit {
                // Skip the rest of the line.
                let mut rest = Vec::new();
                input.read_until(b'\n', &mut rest).await?;
                let _ = errors.send(parse_error(&format!("a line over {limit} bytes")));
                continue;
            }
            let text = String::from_utf8_lossy(&line);
            if text.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(text.trim()) {
                Ok(_) => {
                    let mut line = line;
                    if !line.ends_with(b"\n") {
                        line.push(b'\n');
                    }
                    to_rmcp.write_all(&line).await?;
                }
                Err(e) => {
                    let _ = errors.send(parse_error(&e.to_string()));
                }
            }
        }
    });
    let mut from_rmcp = BufReader::new(from_rmcp).lines();
    loop {
        tokio::select! {
            line = from_rmcp.next_line() => match line? {
                Some(mut line) => {
                    line.push('\n');
                    output.write_all(line.as_bytes()).await?;
                    output.flush().await?;
                }
                None => break,
            },
            Some(line) = error_lines.recv() => {
                output.write_all(line.as_bytes()).await?;
                output.flush().await?;
            }
        }
    }
    // rmcp has ended (its input closed, or it stopped). The parse errors the reader had
    // already found are answered too: `select!` may have seen rmcp's end before them.
    reader.abort();
    let _ = reader.await;
    while let Ok(line) = error_lines.try_recv() {
        output.write_all(line.as_bytes()).await?;
    }
    output.flush().await?;
    Ok(())
}

impl Memtape {
    /// Refuses a fixed scope that is not valid (a bad tenant, agent or user name).
    fn who_check(self) -> std::io::Result<Self> {
        if let Some(who) = &self.fixed {
            who.memory()
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.message))?;
        }
        Ok(self)
    }
}

/// The streamable HTTP MCP service for `/mcp`: one [`Memtape`] per MCP session, all
/// sharing one subscription hub. Mount it behind the authentication middleware (the caller
/// comes from the request's extensions) and the cross-site guard ([`crate::guard`]: the
/// `Host` it may name, JSON only, the page's origin).
///
/// A connected host keeps a stream open (server-to-client messages), which a graceful
/// shutdown would wait for: use [`mcp_service_until`] to end the sessions at shutdown.
pub fn mcp_service(state: AppState) -> StreamableHttpService<Memtape, LocalSessionManager> {
    let config = config(&state);
    build(state, config)
}

/// [`mcp_service`] whose sessions (and their open streams) end when `stop` completes, so
/// a graceful shutdown does not wait for connected hosts. Call it on a tokio runtime.
pub fn mcp_service_until(
    state: AppState,
    stop: impl Future<Output = ()> + Send + 'static,
) -> StreamableHttpService<Memtape, LocalSessionManager> {
    let config = config(&state);
    let token = config.cancellation_token.clone();
    tokio::spawn(async move {
        stop.await;
        token.cancel();
    });
    build(state, config)
}

fn config(state: &AppState) -> StreamableHttpServerConfig {
    // The `Host` header is checked in front of every route, `/mcp` included, by the same
    // rule ([`crate::guard`]): loopback names, the listening address, `--allow-host`.
    StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(state.limits().body_bytes)
        .disable_allowed_hosts()
}

fn build(
    state: AppState,
    config: StreamableHttpServerConfig,
) -> StreamableHttpService<Memtape, LocalSessionManager> {
    let hub = Hub::started(&state);
    let manager = Arc::new(LocalSessionManager::default());
    state.mcp_sessions().watch(Arc::clone(&manager));
    StreamableHttpService::new(
        move || Ok(Memtape::new(state.clone(), hub.clone(), None)),
        manager,
        config,
    )
}

/// The memory files of `scope`, path to content.
async fn memory_files(
    state: &AppState,
    scope: &Scope,
) -> Result<BTreeMap<String, String>, ApiError> {
    let scope = scope.clone();
    state
        .run(move |engine| {
            Ok(engine
                .memory(&scope)?
                .files
                .into_iter()
                .map(|(p, f)| (p, f.content))
                .collect())
        })
        .await
}
