//! The MCP tools: the registry's tools under their function names, the tape tools, their
//! input types and JSON schemas.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use rmcp::schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

pub(super) const TAPE_APPEND: &str = "tape_append";
pub(super) const TAPE_HISTORY: &str = "tape_history";
pub(super) const TAPE_SEARCH: &str = "tape_search";
pub(super) const TAPE_CONTEXT: &str = "tape_context";
pub(super) const MEMORY_CONSOLIDATE: &str = "memory_consolidate";
pub(super) const MEMORY_EXTRACT: &str = "memory_extract";
pub(super) const MEMORY_EMERGE: &str = "memory_emerge";
pub(super) const MEMORY_DROPPED: &str = "memory_dropped";
pub(super) const MEMORY_RESTORE: &str = "memory_restore";
pub(super) const MEMORY_AS_OF: &str = "memory_as_of";
pub(super) const MEMORY_BLAME: &str = "memory_blame";
pub(super) const NODE_ADD: &str = "node_add";
pub(super) const NODE_HISTORY: &str = "node_history";
pub(super) const NODE_CLEAR: &str = "node_clear";
pub(super) const NODE_CLEANUP: &str = "node_cleanup";
/// Offered only where the operator opted in ([`crate::AppState::set_mcp_erase_own_session`]).
pub(super) const TAPE_ERASE_SESSION: &str = "tape_erase_session";

/// The doc of every `as_of` field.
const AS_OF: &str = "As the tape stood at this moment: an RFC 3339 time \
    (2026-03-01T10:00:00Z) or an entry id.";

/// `memory_as_of`'s input.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct AsOfInput {
    /// The moment: an RFC 3339 time (2026-03-01T10:00:00Z) or an entry id.
    pub(super) as_of: String,
    /// One file (MEMORY.md, memories/notes.md, …); every file when absent.
    #[serde(default)]
    pub(super) path: Option<String>,
}

/// `memory_blame`'s input.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct BlameInput {
    /// The file (MEMORY.md, memories/notes.md, …).
    pub(super) path: String,
    /// Blame the file as it was at this moment (an RFC 3339 time or an entry id); now
    /// when absent.
    #[serde(default)]
    pub(super) as_of: Option<String>,
}

/// `tape_erase_session`'s input.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct EraseSessionInput {
    /// The session to erase (of this connection's agent and user).
    pub(super) session: String,
    /// Why, kept on the erasure's receipt (never the erased text).
    #[serde(default)]
    pub(super) reason: Option<String>,
}

/// `memory_consolidate`'s input.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct ConsolidateInput {
    /// The session to consolidate.
    pub(super) session: String,
    /// Every unconsolidated message, not only those before the newest half window.
    #[serde(default)]
    pub(super) all: Option<bool>,
}

/// `memory_extract`'s input.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct ExtractInput {
    /// The session to analyse.
    pub(super) session: String,
    /// Run as MateClaw's post-conversation trigger of a conversation from this source
    /// (`web`, `channel`, `cron`): every pre-check, the cooldown and `skip_cron` apply.
    /// Without it the run is manual (only the 4-message floor and the lock apply).
    #[serde(default)]
    pub(super) source: Option<SourceInput>,
}

/// `memory_emerge`'s input.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct EmergeInput {
    /// How many of the newest daily notes to read (default 7).
    #[serde(default)]
    #[schemars(range(min = 1, max = 366))]
    pub(super) days: Option<usize>,
}

/// `memory_restore`'s input.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct RestoreInput {
    /// The dropped fact's id (from memory_dropped).
    pub(super) id: u64,
}

/// A node of a conversation (of this connection's agent, Dify's app, and user).
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct NodeRefInput {
    /// The conversation (session key).
    pub(super) session: String,
    /// The workflow node's id.
    pub(super) node: String,
}

/// `node_add`'s input: one turn (Dify's `add_messages`).
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct NodeAddInput {
    /// The conversation (session key).
    pub(super) session: String,
    /// The workflow node's id.
    pub(super) node: String,
    /// The Dify message this turn belongs to.
    pub(super) message_id: String,
    /// The Dify message it follows (absent: it starts a thread).
    #[serde(default)]
    pub(super) parent_message_id: Option<String>,
    /// The user's input to the node.
    pub(super) user_content: String,
    /// The node's answer.
    pub(super) assistant_content: String,
    /// Files the user attached, by reference in Dify's shape (as `tape_append`'s `files`).
    #[serde(default)]
    pub(super) user_files: Vec<FileInput>,
    /// Files the node produced (`belongs_to` defaults to `assistant` here).
    #[serde(default)]
    pub(super) assistant_files: Vec<FileInput>,
}

/// `node_history`'s input.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct NodeHistoryInput {
    /// The conversation (session key).
    pub(super) session: String,
    /// The workflow node's id.
    pub(super) node: String,
    /// The Dify message the node is about to answer.
    pub(super) message_id: String,
    /// That message's parent (absent: it starts a thread).
    #[serde(default)]
    pub(super) parent_message_id: Option<String>,
    /// At most this many tokens (cl100k; default 2000).
    #[serde(default)]
    pub(super) max_tokens: Option<usize>,
}

/// `node_cleanup`'s input.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct NodeCleanupInput {
    /// Clear node memories last written more than this many days ago (at least 1; default
    /// 30).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub(super) older_than_days: Option<u32>,
    /// Only the nodes of this conversation (session key).
    #[serde(default)]
    pub(super) session: Option<String>,
    /// Report what would be cleared; write nothing.
    #[serde(default)]
    pub(super) dry_run: Option<bool>,
}

/// `memory_dropped`'s input: nothing.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct NoInput {}

/// `tape_append`'s input.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct AppendInput {
    /// The session (conversation) to append to.
    pub(super) session: String,
    /// The messages, in order (one transaction).
    pub(super) messages: Vec<MessageInput>,
    /// Run this append once: called again with the same key (within 24 hours), it answers
    /// the first answer and stores nothing (a UUID, say: 1 to 255 printable ASCII
    /// characters).
    #[serde(default)]
    pub(super) idempotency_key: Option<String>,
    /// Where the conversation came from (MateClaw's trigger source): `web` (default),
    /// `channel` or `cron` (a scheduled task's exchange is not analysed after it).
    #[serde(default)]
    pub(super) source: Option<SourceInput>,
}

/// MateClaw's trigger source.
#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "lowercase")]
pub(super) enum SourceInput {
    /// A person in a web client.
    Web,
    /// A message channel.
    Channel,
    /// A scheduled task.
    Cron,
}

impl SourceInput {
    pub(super) fn source(self) -> memtape::Source {
        match self {
            SourceInput::Web => memtape::Source::Web,
            SourceInput::Channel => memtape::Source::Channel,
            SourceInput::Cron => memtape::Source::Cron,
        }
    }
}

/// A chat message (OpenAI's shape).
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct MessageInput {
    /// Who speaks.
    pub(super) role: MessageRole,
    /// The text (none for an assistant message that only calls tools).
    #[serde(default)]
    pub(super) content: Option<String>,
    /// A participant or tool name.
    #[serde(default)]
    pub(super) name: Option<String>,
    /// The tools an assistant message calls.
    #[serde(default)]
    pub(super) tool_calls: Vec<ToolCallInput>,
    /// For a tool result: the id of the call it answers.
    #[serde(default)]
    pub(super) tool_call_id: Option<String>,
    /// Files attached by reference, in Dify's shape: `{"type": "image", "transfer_method":
    /// "local_file", "upload_file_id": "...", "belongs_to": "user"}` (an upload of this
    /// tenant), `remote_url` with `url` (http or https), `tool_file` with `tool_file_id`.
    #[serde(default)]
    pub(super) files: Vec<FileInput>,
}

/// A file reference (Dify's shape).
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct FileInput {
    /// `image`, `document`, `audio`, `video` or `custom`.
    #[serde(rename = "type")]
    pub(super) file_type: String,
    /// `local_file`, `remote_url` or `tool_file`.
    pub(super) transfer_method: String,
    /// The upload's id (`local_file`).
    #[serde(default)]
    pub(super) upload_file_id: Option<String>,
    /// The URL (`remote_url`).
    #[serde(default)]
    pub(super) url: Option<String>,
    /// The tool file's id (`tool_file`).
    #[serde(default)]
    pub(super) tool_file_id: Option<String>,
    /// `user` (the default) or `assistant`.
    #[serde(default)]
    pub(super) belongs_to: Option<String>,
}

impl FileInput {
    /// The REST body's form of this reference (checked there).
    pub(super) fn to_wire(&self) -> crate::wire::FileRefWire {
        crate::wire::FileRefWire {
            file_type: self.file_type.clone(),
            transfer_method: self.transfer_method.clone(),
            upload_file_id: self.upload_file_id.clone(),
            url: self.url.clone(),
            tool_file_id: self.tool_file_id.clone(),
            belongs_to: self.belongs_to.clone(),
        }
    }
}

impl MessageInput {
    pub(super) fn to_wire(&self) -> Value {
        let mut o = serde_json::Map::new();
        o.insert("role".into(), json!(self.role.as_str()));
        o.insert("content".into(), json!(self.content));
        if let Some(n) = &self.name {
            o.insert("name".into(), json!(n));
        }
        if !self.tool_calls.is_empty() {
            let calls: Vec<Value> = self
                .tool_calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments}})
                })
                .collect();
            o.insert("tool_calls".into(), Value::Array(calls));
        }
        if let Some(id) = &self.tool_call_id {
            o.insert("tool_call_id".into(), json!(id));
        }
        if !self.files.is_empty() {
            let files: Vec<Value> = self
                .files
                .iter()
                .map(|f| serde_json::to_value(f.to_wire()).unwrap_or(Value::Null))
                .collect();
            o.insert("files".into(), Value::Array(files));
        }
        Value::Object(o)
    }
}

/// A tool call made by the assistant.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct ToolCallInput {
    /// The call's id.
    pub(super) id: String,
    /// Always `function` (OpenAI's shape; may be left out).
    #[serde(default, rename = "type")]
    #[allow(dead_code)] // Read to refuse another type; it has one value.
    pub(super) kind: Option<ToolCallKind>,
    /// The function called.
    pub(super) function: FunctionInput,
}

/// A tool call's type: only `function`.
#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "lowercase")]
pub(super) enum ToolCallKind {
    /// A function call.
    Function,
}

/// The function of a tool call.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct FunctionInput {
    /// Its name.
    pub(super) name: String,
    /// Its arguments, JSON-encoded.
    pub(super) arguments: String,
}

/// A message's role.
#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "lowercase")]
pub(super) enum MessageRole {
    /// A system message.
    System,
    /// The user.
    User,
    /// The assistant.
    Assistant,
    /// A tool result.
    Tool,
}

impl MessageRole {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            MessageRole::System => "system",
            MessageRole::User => "user",
            MessageRole::Assistant => "assistant",
            MessageRole::Tool => "tool",
        }
    }
}

/// `tape_history`'s input.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct HistoryInput {
    /// The session.
    pub(super) session: String,
    /// At most this many messages (default 500).
    #[serde(default)]
    pub(super) max_messages: Option<usize>,
    /// At most this many tokens (cl100k).
    #[serde(default)]
    pub(super) max_tokens: Option<usize>,
    /// The history as it was at this moment (an RFC 3339 time or an entry id).
    #[serde(default)]
    #[schemars(description = AS_OF)]
    pub(super) as_of: Option<String>,
    /// How attached files come back: `refs` (Dify's references, the default), `parts` or
    /// `openai` (OpenAI content parts, uploads as base64 data), `anthropic` (Anthropic
    /// content blocks).
    #[serde(default)]
    pub(super) attachments: Option<AttachmentsInput>,
}

/// How attached files come back.
#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "lowercase")]
pub(super) enum AttachmentsInput {
    /// Dify's references.
    Refs,
    /// OpenAI content parts.
    Parts,
    /// OpenAI content parts.
    Openai,
    /// Anthropic content blocks.
    Anthropic,
}

impl AttachmentsInput {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            AttachmentsInput::Refs => "refs",
            AttachmentsInput::Parts => "parts",
            AttachmentsInput::Openai => "openai",
            AttachmentsInput::Anthropic => "anthropic",
        }
    }
}

/// `tape_search`'s input.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct SearchInput {
    /// What to look for: a few distinctive words.
    pub(super) query: String,
    /// At most this many hits (default 10, at most 100).
    #[serde(default)]
    pub(super) limit: Option<usize>,
    /// `hybrid` (default), `bm25` (words) or `vector` (meaning).
    #[serde(default)]
    pub(super) mode: Option<SearchMode>,
    /// Only this session.
    #[serde(default)]
    pub(super) session: Option<String>,
    /// Only entries of this kind (`message`, `tool_call`, `tool_result`, `system`,
    /// `anchor`, `event`).
    #[serde(default)]
    pub(super) kind: Option<String>,
    /// Only messages with this role.
    #[serde(default)]
    pub(super) role: Option<MessageRole>,
    /// How wide: the agent (default), the user's sessions, or the whole tenant.
    #[serde(default)]
    pub(super) scope: Option<SearchScope>,
    /// Only entries from this time on (RFC 3339 or a date).
    #[serde(default)]
    pub(super) since: Option<String>,
    /// Only entries before this time.
    #[serde(default)]
    pub(super) until: Option<String>,
    /// Search only what existed at this moment (an RFC 3339 time or an entry id).
    #[serde(default)]
    #[schemars(description = AS_OF)]
    pub(super) as_of: Option<String>,
}

/// How a search ranks.
#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "lowercase")]
pub(super) enum SearchMode {
    /// BM25 and embeddings, fused.
    Hybrid,
    /// Words only.
    Bm25,
    /// Embeddings only.
    Vector,
}

impl SearchMode {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            SearchMode::Hybrid => "hybrid",
            SearchMode::Bm25 => "bm25",
            SearchMode::Vector => "vector",
        }
    }
}

/// How wide a search looks.
#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "lowercase")]
pub(super) enum SearchScope {
    /// Every session of the agent.
    Agent,
    /// The user's sessions.
    User,
    /// Every agent of the tenant.
    Tenant,
}

impl SearchScope {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            SearchScope::Agent => "agent",
            SearchScope::User => "user",
            SearchScope::Tenant => "tenant",
        }
    }
}

/// `tape_context`'s input.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub(super) struct ContextInput {
    /// The session.
    pub(super) session: String,
    /// The token budget: the most tokens the prompt may have.
    pub(super) budget: usize,
    /// How older messages are compacted: `mateclaw` (default) or `qanot`.
    #[serde(default)]
    pub(super) policy: Option<PolicyInput>,
    /// The agent's system prompt.
    #[serde(default)]
    pub(super) system: Option<String>,
    /// The message being answered, when it is not on the tape yet.
    #[serde(default)]
    pub(super) message: Option<String>,
    /// Record a new compaction on the tape (default true; false needs only a read key).
    #[serde(default)]
    pub(super) record: Option<bool>,
    /// The prompt as it would have been built at this moment (an RFC 3339 time or an
    /// entry id); nothing is recorded then.
    #[serde(default)]
    #[schemars(description = AS_OF)]
    pub(super) as_of: Option<String>,
    /// How attached files come back: `refs` (Dify's references, the default), `parts` or
    /// `openai` (OpenAI content parts), `anthropic` (Anthropic content blocks).
    #[serde(default)]
    pub(super) attachments: Option<AttachmentsInput>,
    /// Whether the memory skill (how and when to save and search memory) follows the
    /// system prompt (default: the server's setting, on).
    #[serde(default)]
    pub(super) memory_skill: Option<bool>,
    /// The reply the model may write after this prompt, in tokens (default 1024): Qanot's
    /// compaction looks at the next turn, this prompt and its reply.
    #[serde(default)]
    pub(super) reply_tokens: Option<usize>,
}

/// A compaction policy.
#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "lowercase")]
pub(super) enum PolicyInput {
    /// MateClaw: summarize all but the most recent pairs.
    Mateclaw,
    /// Qanot: keep the first and last messages, summarize the middle.
    Qanot,
}

/// The argument every registry tool takes besides its own: the session it is called in.
pub(super) const SESSION: &str = "session";

/// Every tool: the registry's under their function names, then the tape tools.
pub fn tools() -> Vec<Tool> {
    let mut out: Vec<Tool> = memtape::tools::registry()
        .into_iter()
        .map(|spec| {
            let mut schema = match &spec.input_schema {
                Value::Object(o) => o.clone(),
                _ => JsonObject::new(),
            };
            // Which session the call is made in: what `session` is to `POST /v1/tools`.
            if let Some(Value::Object(properties)) = schema.get_mut("properties") {
                properties.insert(
                    SESSION.to_owned(),
                    json!({
                        "type": "string",
                        "description": "The session the call is made in (optional). In a \
                            session with Bub's view, a change of memory also writes the \
                            session's memory zone on its tape."
                    }),
                );
            }
            // The same rule `POST /v1/tools/{name}` enforces; for hosts it is a hint.
            let read_only = crate::rest::reads_only(spec.name);
            Tool::new(spec.function_name(), spec.description, Arc::new(schema))
                .with_annotations(annotations(read_only))
        })
        .collect();
    let tape: [(&str, &str, Arc<JsonObject>, bool); 15] = [
        (
            TAPE_APPEND,
            "Append messages to a session of the tape (one transaction); the user's messages \
             are scanned first, and corrections, names, preferences, decisions, exact values \
             and 'remember ...' go to SESSION-STATE.md (and durable ones to MEMORY.md). \
             Returns the new entry ids and what was captured.",
            schema::<AppendInput>(),
            false,
        ),
        (
            TAPE_HISTORY,
            "The history a model would get for a session: its recent messages (those not yet \
             consolidated), as OpenAI chat messages, within max_messages and max_tokens.",
            schema::<HistoryInput>(),
            true,
        ),
        (
            TAPE_SEARCH,
            "Search everything on the tape (messages, tool calls and results, memory changes) \
             by words and meaning; filters by session, kind, role and time. Returns the \
             entries found, best first, with scores.",
            schema::<SearchInput>(),
            true,
        ),
        (
            TAPE_CONTEXT,
            "The prompt for a session within a token budget: the system message (system \
             prompt, agent files, memory), the compaction summary in effect, the history and \
             the current message. A new compaction is recorded unless record is false.",
            schema::<ContextInput>(),
            false,
        ),
        (
            MEMORY_CONSOLIDATE,
            "Consolidate a session now with the server's model (nanobot): the older messages \
             become a HISTORY.md entry and an updated MEMORY.md, and leave the history. A fact \
             the model leaves out of MEMORY.md is kept (memory_dropped). Needs a model on the \
             server; on failure nothing changes.",
            schema::<ConsolidateInput>(),
            false,
        ),
        (
            MEMORY_EXTRACT,
            "Analyse the end of a session now with the server's model (MateClaw) and save what \
             is worth keeping: a daily-note entry, MEMORY.md, PROFILE.md. Needs a model on the \
             server; on failure nothing changes.",
            schema::<ExtractInput>(),
            false,
        ),
        (
            MEMORY_EMERGE,
            "Merge the newest daily notes into MEMORY.md now with the server's model \
             (MateClaw's emergence); the notes are kept as they are.",
            schema::<EmergeInput>(),
            false,
        ),
        (
            MEMORY_DROPPED,
            "The facts that model rewrites of MEMORY.md or PROFILE.md left out, newest first, \
             each with its id and whether the file has it again.",
            schema::<NoInput>(),
            true,
        ),
        (
            MEMORY_RESTORE,
            "Put a dropped fact (its id from memory_dropped) back into its file.",
            schema::<RestoreInput>(),
            false,
        ),
        (
            MEMORY_AS_OF,
            "Memory as it was at a moment (time travel): every file with its content, or one \
             file, as of an RFC 3339 time or an entry id.",
            schema::<AsOfInput>(),
            true,
        ),
        (
            MEMORY_BLAME,
            "Where each line of a memory file came from, like git blame: the version that \
             wrote it, what made it, and the conversation entries (tool call, message, \
             consolidated span, model call) that caused it.",
            schema::<BlameInput>(),
            true,
        ),
        (
            NODE_ADD,
            "Add a turn to a workflow node's memory (Dify's node memory): the node's input and \
             answer under the Dify message they belong to and its parent. Returns the two \
             entry ids.",
            schema::<NodeAddInput>(),
            false,
        ),
        (
            NODE_HISTORY,
            "A workflow node's history before it answers message_id: the thread that message \
             continues (regenerated answers left out), within max_tokens. Empty for a node \
             that never ran.",
            schema::<NodeHistoryInput>(),
            true,
        ),
        (
            NODE_CLEAR,
            "Empty a workflow node's memory (its turns stay on the tape); a node never \
             written is left alone.",
            schema::<NodeRefInput>(),
            false,
        ),
        (
            NODE_CLEANUP,
            "Clear every node memory not written for more than older_than_days days (Dify's \
             cleanup task); with dry_run, only report them.",
            schema::<NodeCleanupInput>(),
            false,
        ),
    ];
    for (name, description, schema, read_only) in tape {
        out.push(Tool::new(name, description, schema).with_annotations(annotations(read_only)));
    }
    out
}

/// The JSON schema (2020-12) of a tool's input, with every subschema inline: hosts that
/// do not follow `$ref` still see each field.
fn schema<T: JsonSchema>() -> Arc<JsonObject> {
    let schema = rmcp::schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<T>();
    match serde_json::to_value(schema) {
        Ok(Value::Object(o)) => Arc::new(o),
        _ => Arc::new(JsonObject::new()),
    }
}

/// `tape_erase_session`, for servers whose operator opted in: erasure is never offered to
/// an agent by default (a prompt must not be able to make it erase a user's history).
pub fn erase_session_tool() -> Tool {
    Tool::new(
        TAPE_ERASE_SESSION,
        "Erase one of your own sessions for real: every entry keeps its place and loses its \
         content, in the tape, the search index and attached files, with a receipt that \
         holds none of it. It cannot be undone. Use it only when the user asks to delete \
         this conversation.",
        schema::<EraseSessionInput>(),
    )
    .with_annotations(
        ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(true)
            .open_world(false),
    )
}

fn annotations(read_only: bool) -> ToolAnnotations {
    ToolAnnotations::new()
        .read_only(read_only)
        .destructive(false)
        .open_world(false)
}

pub(super) fn is_tool(name: &str) -> bool {
    matches!(
        name,
        TAPE_APPEND
            | TAPE_HISTORY
            | TAPE_SEARCH
            | TAPE_CONTEXT
            | MEMORY_CONSOLIDATE
            | MEMORY_EXTRACT
            | MEMORY_EMERGE
            | MEMORY_DROPPED
            | MEMORY_RESTORE
            | MEMORY_AS_OF
            | MEMORY_BLAME
            | NODE_ADD
            | NODE_HISTORY
            | NODE_CLEAR
            | NODE_CLEANUP
    ) || memtape::tools::find(name).is_some()
}
