//! Dify's `MemoryConfig` (seed 002): how an LLM node's memory is read — the role prefixes
//! that render history as text for completion models, the window that limits how many
//! turns are read, the template the current query is put into, and the mode (conversation
//! or node memory). Pure: the engine reads the thread, this module selects and renders.
//!
//! The rules follow Dify's own code (langgenius/dify, `api/`):
//! - `core/memory/token_buffer_memory.py`, `get_history_prompt_messages`: the message
//!   limit is `min(message_limit, 500)` when given and positive, else 500; a "message" is
//!   one row of Dify's message table, a query and its answer (one turn here). The newest
//!   message, created before the model answers, has no answer yet and is left out
//!   ("for newly created message, its answer is temporarily empty, we don't need to add it
//!   to memory").
//! - the same file, `get_history_prompt_text(human_prefix="Human", ai_prefix="Assistant")`:
//!   each user message becomes `"{human_prefix}: {content}"`, each assistant message
//!   `"{ai_prefix}: {content}"`, other roles are skipped, the lines are joined with `"\n"`;
//!   multi-part content is its text parts and `[image]` for each image, one per line,
//!   stripped.
//! - `core/prompt/prompt_transform.py`, `_get_history_messages_from_memory`: a prefix is
//!   passed only when non-empty (`if human_prefix:`), so an empty one falls back to the
//!   default; the window applies only when `window.enabled and window.size > 0`.
//! - `core/prompt/advanced_prompt_transform.py`: `if query and
//!   memory_config.query_prompt_template:` the query is rendered into the template with
//!   `prompt_inputs["#sys.query#"] = query` and `#context#` set ("" without context), by
//!   `core/prompt/utils/prompt_template_parser.py` (`WITH_VARIABLE_TMPL_REGEX`: values put
//!   in have their own `{{…}}` variables defused to `{…}`, a variable with no value stays as
//!   written, and `<|…|>` special tokens are removed from the result).
//! - `web/app/components/workflow/nodes/llm/default.ts`, `checkValid`: a query prompt
//!   template that does not include `{{#sys.query#}}` is refused (`sysQueryInUser`).
//!
//! Every field is optional, as the seed declares them (`role_prefix: RolePrefix | None =
//! None`, `window: MemoryWindowConfig | None = None`, `query_prompt_template: str | None =
//! None`, `mode: MemoryMode = MemoryMode.CONVERSATION`); Dify's current code requires
//! `window`, and the seed wins. No window reads as a disabled one.
//!
//! Where memtape is stricter than Dify, on purpose: a window size of 0 (Dify reads it as no
//! window) or over 500 (Dify silently caps it) and a prefix with a line break (it would
//! break the one-line `PREFIX: text` format and a completion model's stop words) are
//! refused by [`MemoryConfig::validate`], naming the field. The token limit is strict as
//! everywhere in memtape ([`crate::select_history`]); Dify keeps at least one message.
//! When `role_prefix` is unset the text uses Dify's defaults ("Human", "Assistant", the
//! defaults of `get_history_prompt_text` and of the LLM node's completion-model
//! `conversation_histories_role`); Dify's LLM node instead refuses a completion model
//! without prefixes (`MemoryRolePrefixRequiredError`). Dify's conversation memory holds
//! only queries and answers; memtape's may hold tool calls and results: as messages they
//! stay (whole groups, as history always keeps them), in the text only their answers show.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::{Content, Error, FileType, HistoryLimits, Message, Result, Role, TokenCounter};

/// The user prefix when none is set (Dify's `human_prefix` default).
pub const DEFAULT_USER_PREFIX: &str = "Human";

/// The assistant prefix when none is set (Dify's `ai_prefix` default).
pub const DEFAULT_ASSISTANT_PREFIX: &str = "Assistant";

/// The most messages (turns) Dify's memory ever reads: `min(message_limit, 500)`, and 500
/// without a window.
pub const MESSAGE_LIMIT_CAP: u64 = 500;

/// The placeholder of the current query in a query prompt template.
pub const SYS_QUERY: &str = "{{#sys.query#}}";

/// Dify's `MemoryConfig.RolePrefix`: the names history lines start with for a completion
/// model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolePrefix {
    /// Before the user's messages ("Human" when empty).
    pub user: String,
    /// Before the assistant's messages ("Assistant" when empty).
    pub assistant: String,
}

/// Dify's `MemoryConfig.WindowConfig` (the seed's `MemoryWindowConfig`): how many messages
/// (turns: a query and its answer) memory reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowConfig {
    /// Whether the window applies; when off, Dify's cap of 500 does.
    pub enabled: bool,
    /// How many turns, 1 to 500; `None` means the cap.
    #[serde(default)]
    pub size: Option<u64>,
}

/// The seed's name for [`WindowConfig`] (`window: MemoryWindowConfig | None`).
pub type MemoryWindowConfig = WindowConfig;

/// Which memory an LLM node reads (the seed's `MemoryMode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryMode {
    /// The conversation's history (Dify's `TokenBufferMemory`), the default.
    #[default]
    Conversation,
    /// The node's own history in the conversation (`NodeTokenBufferMemory`, Chatflow only).
    Node,
}

/// Dify's `MemoryConfig` as the seed gives it: `role_prefix`, `window`,
/// `query_prompt_template`, `mode`. Deserializes from the JSON of a Dify node's `memory`
/// block; fields it does not know are ignored, as pydantic does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryConfig {
    /// The prefixes of the history text for completion models.
    #[serde(default)]
    pub role_prefix: Option<RolePrefix>,
    /// The window on how many turns are read.
    #[serde(default)]
    pub window: Option<WindowConfig>,
    /// The template the current query is rendered into (must hold `{{#sys.query#}}`).
    #[serde(default)]
    pub query_prompt_template: Option<String>,
    /// Conversation or node memory.
    #[serde(default)]
    pub mode: MemoryMode,
}

/// A template variable, as Dify's `PromptTemplateParser` with variable templates finds
/// them: `{{name}}`, `{{#node.variable#}}`, `{{#histories#}}`, `{{#query#}}`,
/// `{{#context#}}`.
static VARIABLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\{\{([a-zA-Z_][a-zA-Z0-9_]{0,29}|#[a-zA-Z0-9_]{1,50}\.[a-zA-Z0-9_\.]{1,100}#|#histories#|#query#|#context#)\}\}",
    )
    .unwrap_or_else(|e| panic!("invalid template variable pattern: {e}"))
});

/// A special token (`<|endoftext|>` and the like), removed from every rendered prompt.
static SPECIAL_TOKEN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"<\|.*?\|>").unwrap_or_else(|e| panic!("invalid special token pattern: {e}"))
});

impl MemoryConfig {
    /// Checks the configuration, naming the field and the rule a bad value breaks: prefixes
    /// are one line each, a window holds 1 to [`MESSAGE_LIMIT_CAP`] turns, and a query
    /// template that is not empty contains [`SYS_QUERY`].
    pub fn validate(&self) -> Result<()> {
        let bad = |why: String| Err(Error::MemoryConfig(why));
        if let Some(prefix) = &self.role_prefix {
            for (field, value) in [("user", &prefix.user), ("assistant", &prefix.assistant)] {
                if value.contains(['\n', '\r']) {
                    return bad(format!(
                        "role_prefix.{field} {value:?} contains a line break: each history \
                         line is \"PREFIX: text\", so a prefix must be one line"
                    ));
                }
            }
        }
        if let Some(size) = self.window.and_then(|w| w.size) {
            if size == 0 {
                return bad(format!(
                    "window.size 0: a window keeps 1 to {MESSAGE_LIMIT_CAP} messages; \
                     disable the window to read up to {MESSAGE_LIMIT_CAP}"
                ));
            }
            if size > MESSAGE_LIMIT_CAP {
                return bad(format!(
                    "window.size {size} is over {MESSAGE_LIMIT_CAP}, the most messages Dify's \
                     memory reads (a window keeps 1 to {MESSAGE_LIMIT_CAP})"
                ));
            }
        }
        if let Some(template) = &self.query_prompt_template
            && !template.is_empty()
            && !template.contains(SYS_QUERY)
        {
            return bad(format!(
                "query_prompt_template {template:?} does not contain {SYS_QUERY}: the current \
                 query must be in it"
            ));
        }
        Ok(())
    }

    /// How many turns memory reads: the window's size when it is enabled and positive,
    /// at most [`MESSAGE_LIMIT_CAP`]; the cap otherwise.
    pub fn message_limit(&self) -> usize {
        let limit = match self.window {
            Some(WindowConfig {
                enabled: true,
                size: Some(size),
            }) if size > 0 => size.min(MESSAGE_LIMIT_CAP),
            _ => MESSAGE_LIMIT_CAP,
        };
        usize::try_from(limit).unwrap_or(usize::MAX)
    }

    /// The user and assistant prefixes of the history text: the configured ones, each
    /// falling back to Dify's default when unset or empty.
    pub fn prefixes(&self) -> (&str, &str) {
        fn pick<'a>(value: Option<&'a str>, default: &'a str) -> &'a str {
            value.filter(|v| !v.is_empty()).unwrap_or(default)
        }
        let prefix = self.role_prefix.as_ref();
        (
            pick(prefix.map(|p| p.user.as_str()), DEFAULT_USER_PREFIX),
            pick(
                prefix.map(|p| p.assistant.as_str()),
                DEFAULT_ASSISTANT_PREFIX,
            ),
        )
    }

    /// Selects the history memory reads from `messages`, the unconsolidated messages of the
    /// current thread, oldest first; returns the indices kept, in order.
    ///
    /// A last user message with no answer after it is the query being answered and is left
    /// out (Dify's newly created message); the rest is limited to the last
    /// [`MemoryConfig::message_limit`] turns (a turn starts at a user message), then to
    /// `max_token_limit` tokens with memtape's history rules ([`crate::select_history`]:
    /// the oldest go first, history starts at a user message and never splits a tool call
    /// from its results).
    pub fn select(
        &self,
        messages: &[&Message],
        max_token_limit: usize,
        counter: &dyn TokenCounter,
    ) -> Vec<usize> {
        let mut end = messages.len();
        if messages.last().is_some_and(|m| m.role == Role::User) {
            end -= 1;
        }
        let turns = self.message_limit();
        let mut start = 0;
        let mut seen = 0;
        for (i, m) in messages[..end].iter().enumerate().rev() {
            if m.role == Role::User {
                seen += 1;
                if seen == turns {
                    start = i;
                    break;
                }
            }
        }
        let limits = HistoryLimits {
            max_messages: usize::MAX,
            max_tokens: Some(max_token_limit),
        };
        crate::select_history(&messages[start..end], &limits, counter)
            .into_iter()
            .map(|i| i + start)
            .collect()
    }

    /// Renders `messages` as Dify renders history for a completion model: one
    /// `"PREFIX: content"` line per user or assistant message (other roles, and assistant
    /// messages that only call tools, are skipped), joined with `"\n"`. A message with parts or attached files is its text and an
    /// `[image]` line per image, stripped of surrounding whitespace; other files are left
    /// out, as Dify leaves them.
    pub fn history_text(&self, messages: &[&Message]) -> String {
        let (user, assistant) = self.prefixes();
        let mut lines = Vec::new();
        for m in messages {
            let prefix = match m.role {
                Role::User => user,
                // Dify's history holds each message's answer text, never tool calls: an
                // assistant message that only calls tools has no line.
                Role::Assistant if !m.tool_calls.is_empty() && m.content_text().is_empty() => {
                    continue;
                }
                Role::Assistant => assistant,
                Role::System | Role::Tool => continue,
            };
            let multi_part = matches!(m.content, Some(Content::Parts(_))) || !m.files.is_empty();
            if !multi_part {
                lines.push(format!("{prefix}: {}", m.content_text()));
                continue;
            }
            let mut inner = String::new();
            match &m.content {
                Some(Content::Parts(parts)) => {
                    for part in parts {
                        if let Some(text) = &part.text {
                            inner.push_str(text);
                            inner.push('\n');
                        } else if part.kind == "image_url" {
                            inner.push_str("[image]\n");
                        }
                    }
                }
                Some(Content::Text(text)) => {
                    inner.push_str(text);
                    inner.push('\n');
                }
                None => inner.push('\n'),
            }
            for file in &m.files {
                if file.file_type == FileType::Image {
                    inner.push_str("[image]\n");
                }
            }
            lines.push(format!("{prefix}: {}", inner.trim()));
        }
        lines.join("\n")
    }

    /// The current query as the model gets it: rendered into `query_prompt_template` when
    /// there is one and the query is not empty, else the query as it is.
    ///
    /// `{{#sys.query#}}` takes the query; other variables take their values from `inputs`,
    /// keyed as written between the braces (`name`, `#node.variable#`); `{{#context#}}`
    /// is empty unless `inputs` gives it; a variable without a value stays as written.
    /// See [`render_template`].
    pub fn render_query(&self, query: &str, inputs: &BTreeMap<String, String>) -> String {
        match self.query_prompt_template.as_deref() {
            Some(template) if !template.is_empty() && !query.is_empty() => {
                let mut values = inputs.clone();
                values.insert("#sys.query#".to_owned(), query.to_owned());
                values.entry("#context#".to_owned()).or_default();
                render_template(template, &values)
            }
            _ => query.to_owned(),
        }
    }
}

/// Renders a Dify prompt template (`PromptTemplateParser.format` with variable templates):
/// each `{{variable}}` with a value in `values` is replaced by it, its own `{{…}}`
/// variables defused to `{…}` so a value cannot inject one; a variable without a value stays
/// as written; then every `<|…|>` special token is removed.
pub fn render_template(template: &str, values: &BTreeMap<String, String>) -> String {
    let rendered = VARIABLE.replace_all(template, |caps: &regex::Captures<'_>| {
        match values.get(&caps[1]) {
            Some(value) => VARIABLE.replace_all(value, "{${1}}").into_owned(),
            None => caps[0].to_owned(),
        }
    });
    SPECIAL_TOKEN.replace_all(&rendered, "").into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ContentPart, FileOwner, FileRef, FileSource, ToolCall};

    /// One token per word: easy to reason about.
    struct Words;
    impl TokenCounter for Words {
        fn count(&self, text: &str) -> usize {
            text.split_whitespace().count()
        }
    }

    fn config(json: serde_json::Value) -> MemoryConfig {
        serde_json::from_value(json).unwrap_or_else(|e| panic!("bad config: {e}"))
    }

    fn refs(messages: &[Message]) -> Vec<&Message> {
        messages.iter().collect()
    }

    fn image() -> FileRef {
        FileRef {
            file_type: FileType::Image,
            source: FileSource::RemoteUrl {
                url: "https://example.com/cat.png".into(),
            },
            belongs_to: FileOwner::User,
        }
    }

    /// A conversation of `n` turns, "q0"/"a0" … .
    fn turns(n: usize) -> Vec<Message> {
        (0..n)
            .flat_map(|i| {
                [
                    Message::user(format!("q{i}")),
                    Message::assistant(format!("a{i}")),
                ]
            })
            .collect()
    }

    /// A Dify node's `memory` block, as its JSON holds it, reads into the typed config.
    #[test]
    fn dify_memory_block_deserializes() {
        let c = config(serde_json::json!({
            "role_prefix": {"user": "User", "assistant": "Bot"},
            "window": {"enabled": true, "size": 10},
            "query_prompt_template": "{{#sys.query#}}",
            "mode": "node",
            "unknown": "ignored, as pydantic ignores it"
        }));
        assert_eq!(c.mode, MemoryMode::Node);
        assert_eq!(
            c.window,
            Some(WindowConfig {
                enabled: true,
                size: Some(10)
            })
        );
        assert_eq!(c.prefixes(), ("User", "Bot"));
        // Seed: every field optional; mode defaults to conversation.
        assert_eq!(config(serde_json::json!({})), MemoryConfig::default());
        assert_eq!(MemoryConfig::default().mode, MemoryMode::Conversation);
    }

    /// token_buffer_memory.py, get_history_prompt_text: `f"{role}: {m.content}"` per user
    /// or assistant message, `"\n".join(string_messages)`; other roles `continue`. Dify's
    /// history is queries and answers (`Message.query`, `Message.answer`): a tool-calling
    /// step with no text has no line.
    #[test]
    fn dify_history_text_joins_prefixed_lines() {
        let messages = vec![
            Message::text(Role::System, "be brief"),
            Message::user("Hi, I'm Ada."),
            Message::assistant("Hello Ada!"),
            Message::assistant_tool_calls(vec![ToolCall::function("c1", "f", "{}")]),
            Message::tool_result("c1", "ok"),
            Message::user("  spaced  "),
        ];
        let c = config(serde_json::json!({"role_prefix": {"user": "User", "assistant": "AI"}}));
        assert_eq!(
            c.history_text(&refs(&messages)),
            "User: Hi, I'm Ada.\nAI: Hello Ada!\nUser:   spaced  "
        );
    }

    /// Defaults `human_prefix="Human"`, `ai_prefix="Assistant"`; prompt_transform.py passes a
    /// prefix only `if human_prefix:`, so an empty one falls back to the default too.
    #[test]
    fn dify_default_prefixes_when_unset_or_empty() {
        let messages = turns(1);
        let unset = MemoryConfig::default();
        assert_eq!(
            unset.history_text(&refs(&messages)),
            "Human: q0\nAssistant: a0"
        );
        let empty = config(serde_json::json!({"role_prefix": {"user": "", "assistant": "Bot"}}));
        assert_eq!(empty.history_text(&refs(&messages)), "Human: q0\nBot: a0");
    }

    /// get_history_prompt_text, list content: `inner_msg += f"{content.data}\n"` for text,
    /// `"[image]\n"` for images, then `f"{role}: {inner_msg.strip()}"`; a message with
    /// files is list content (the query's text first, then the files).
    #[test]
    fn dify_history_text_marks_images() {
        let mut with_file = Message::user("What is this?");
        with_file.files.push(image());
        let mut with_document = Message::user("Summarize");
        with_document.files.push(FileRef {
            file_type: FileType::Document,
            ..image()
        });
        let parts = Message {
            content: Some(Content::Parts(vec![
                ContentPart {
                    kind: "text".into(),
                    text: Some(" look ".into()),
                    extra: Default::default(),
                },
                ContentPart {
                    kind: "image_url".into(),
                    text: None,
                    extra: Default::default(),
                },
            ])),
            ..Message::user("")
        };
        let messages = [with_file, with_document, parts];
        assert_eq!(
            MemoryConfig::default().history_text(&refs(&messages)),
            "Human: What is this?\n[image]\nHuman: Summarize\nHuman: look \n[image]"
        );
    }

    /// token_buffer_memory.py: `if message_limit and message_limit > 0: message_limit =
    /// min(message_limit, 500) else: message_limit = 500`, counted in messages (a query and
    /// its answer each); prompt_transform.py applies the window only `if
    /// memory_config.window.enabled`.
    #[test]
    fn dify_window_keeps_the_last_turns() {
        let messages = turns(4);
        let window = |enabled: bool, size: serde_json::Value| {
            config(serde_json::json!({"window": {"enabled": enabled, "size": size}}))
        };
        let kept = |c: &MemoryConfig| c.select(&refs(&messages), usize::MAX, &Words);
        assert_eq!(kept(&window(true, 2.into())), [4, 5, 6, 7]);
        assert_eq!(kept(&window(true, 1.into())), [6, 7]);
        assert_eq!(kept(&window(true, 9.into())), (0..8).collect::<Vec<_>>());
        // A disabled window reads up to the cap.
        assert_eq!(kept(&window(false, 1.into())), (0..8).collect::<Vec<_>>());
        assert_eq!(window(false, 1.into()).message_limit(), 500);
        assert_eq!(window(true, serde_json::Value::Null).message_limit(), 500);
        assert_eq!(MemoryConfig::default().message_limit(), 500);
        let long = turns(600);
        let all = MemoryConfig::default().select(&refs(&long), usize::MAX, &Words);
        assert_eq!(all.len(), 1000, "500 turns of two messages");
        assert_eq!(all[0], 200);
    }

    /// token_buffer_memory.py: "for newly created message, its answer is temporarily empty,
    /// we don't need to add it to memory" — the query being answered is not history.
    #[test]
    fn dify_the_query_being_answered_is_not_history() {
        let mut messages = turns(2);
        messages.push(Message::user("the current query"));
        let c = config(serde_json::json!({"window": {"enabled": true, "size": 1}}));
        assert_eq!(c.select(&refs(&messages), usize::MAX, &Words), [2, 3]);
        // The token limit still drops the oldest first (Words: 3 overhead + role + word = 5).
        assert_eq!(
            MemoryConfig::default().select(&refs(&messages), 10, &Words),
            [2, 3]
        );
    }

    /// advanced_prompt_transform.py: `prompt_inputs["#sys.query#"] = query`, `#context#`
    /// set ("" without context), `query = parser.format(prompt_inputs)`; the parser defuses
    /// variables inside values (`remove_template_variables`) and drops `<|…|>` tokens.
    #[test]
    fn dify_query_prompt_template_renders_the_query() {
        let c = config(serde_json::json!({
            "query_prompt_template": "Context: {{#context#}}\nName: {{#start.name#}} ({{unset}})\nQ: {{#sys.query#}}<|endoftext|>"
        }));
        let inputs: BTreeMap<String, String> =
            [("#start.name#".to_owned(), "Ada".to_owned())].into();
        assert_eq!(
            c.render_query("Why {{#sys.query#}}?", &inputs),
            "Context: \nName: Ada ({{unset}})\nQ: Why {#sys.query#}?"
        );
        // `if query and memory_config.query_prompt_template:` — otherwise the query as is.
        assert_eq!(c.render_query("", &inputs), "");
        let empty = config(serde_json::json!({"query_prompt_template": ""}));
        assert_eq!(empty.render_query("<|x|> q", &inputs), "<|x|> q");
        assert_eq!(MemoryConfig::default().render_query("q", &inputs), "q");
    }

    proptest::proptest! {
        /// Any query goes in whole where the placeholder was, once, with the text around
        /// it untouched; a value never brings a variable of its own (defused to `{…}`).
        #[test]
        fn dify_query_lands_where_the_placeholder_is(
            before in "[^{}<|]{0,30}",
            after in "[^{}<|]{0,30}",
            query in "[a-zA-Z0-9 ?.]{1,40}",
            injected in "[a-z_]{1,10}",
        ) {
            let c = MemoryConfig {
                query_prompt_template: Some(format!("{before}{SYS_QUERY}{after}")),
                ..MemoryConfig::default()
            };
            proptest::prop_assert!(c.validate().is_ok());
            let inputs = BTreeMap::new();
            proptest::prop_assert_eq!(c.render_query(&query, &inputs), format!("{before}{query}{after}"));
            let sneaky = format!("{query}{{{{{injected}}}}}");
            proptest::prop_assert_eq!(
                c.render_query(&sneaky, &inputs),
                format!("{before}{query}{{{injected}}}{after}")
            );
        }
    }

    /// default.ts checkValid: a template without `{{#sys.query#}}` is refused
    /// (sysQueryInUser); memtape also refuses windows Dify would ignore or cap and prefixes
    /// that break the line format, naming the field.
    #[test]
    fn dify_bad_configs_are_refused_naming_the_field() {
        let err = |json| config(json).validate().unwrap_err().to_string();
        let e = err(serde_json::json!({"query_prompt_template": "Q: {{query}}"}));
        assert!(
            e.contains("query_prompt_template") && e.contains("{{#sys.query#}}"),
            "{e}"
        );
        let e = err(serde_json::json!({"window": {"enabled": true, "size": 0}}));
        assert!(e.contains("window.size 0"), "{e}");
        let e = err(serde_json::json!({"window": {"enabled": true, "size": 501}}));
        assert!(e.contains("window.size 501") && e.contains("500"), "{e}");
        let e = err(serde_json::json!({"role_prefix": {"user": "Hu\nman", "assistant": "AI"}}));
        assert!(
            e.contains("role_prefix.user") && e.contains("line break"),
            "{e}"
        );
        let e = err(serde_json::json!({"role_prefix": {"user": "H", "assistant": "A\r"}}));
        assert!(e.contains("role_prefix.assistant"), "{e}");
        assert!(e.starts_with("invalid Dify memory config:"), "{e}");
        for ok in [
            serde_json::json!({}),
            serde_json::json!({"window": {"enabled": true, "size": 500}, "query_prompt_template": "x {{#sys.query#}}"}),
            serde_json::json!({"query_prompt_template": ""}),
        ] {
            assert!(config(ok.clone()).validate().is_ok(), "{ok}");
        }
    }
}
