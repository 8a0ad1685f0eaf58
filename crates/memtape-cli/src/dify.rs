//! Dify's `MemoryConfig` on the command line: the flags `memtape history` and `memtape
//! node history` take (a Dify node's `memory` block as JSON, or `--role-prefix`,
//! `--completion`, `--window`, `--query-template`, `--query`, `--var`), and how their
//! result prints: history as entries or, for a completion model, as "Human: …" text, then
//! the current query rendered into its template.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Context as _, Result, bail};
use clap::Args;
use memtape::{
    DEFAULT_MAX_TOKEN_LIMIT, DynStore, Engine, Entry, HistoryLimits, MemoryConfig, MemoryMode,
    Message, RolePrefix, Scope, WindowConfig,
};
use serde::Serialize;
use serde_json::Value;

use crate::output;

/// Dify's memory config: when any of these is given, history is read the way a Dify LLM
/// node with that memory reads it.
#[derive(Args, Clone, Debug, Default)]
pub struct DifyArgs {
    /// Read history as a Dify LLM node with this memory config does: the node's `memory`
    /// block as JSON (role_prefix, window, query_prompt_template, mode); the flags below
    /// override its fields. With any Dify flag, --max-tokens is Dify's 2000 unless given.
    #[arg(long, value_name = "JSON")]
    memory_config: Option<String>,
    /// Render history as text for a completion model, one "USER: …" / "ASSISTANT: …" line
    /// per message (Dify's role_prefix; an empty prefix means Dify's default).
    #[arg(long, num_args = 2, value_names = ["USER", "ASSISTANT"], allow_hyphen_values = true)]
    role_prefix: Option<Vec<String>>,
    /// Render history as text with Dify's default prefixes, Human and Assistant.
    #[arg(long)]
    completion: bool,
    /// Read only the last N turns, a query and its answer each (Dify's memory window,
    /// 1 to 500; without it Dify reads up to 500).
    #[arg(long, value_name = "N")]
    window: Option<u64>,
    /// The template the current query is rendered into (Dify's query_prompt_template); it
    /// must contain {{#sys.query#}}.
    #[arg(long, value_name = "TEMPLATE")]
    query_template: Option<String>,
    /// The query being answered: printed after the history (after a blank line), rendered
    /// into the query template. A last user message with no answer is this query, not
    /// history, and is left out of it.
    #[arg(long)]
    query: Option<String>,
    /// A value for a variable of the query template, NAME=VALUE, NAME as written between
    /// the braces (`#start.name#`, `#context#`, `name`); repeatable.
    #[arg(long = "var", value_name = "NAME=VALUE")]
    vars: Vec<String>,
}

/// The JSON `--json` prints under a Dify memory config.
#[derive(Serialize)]
struct DifyOut<'a> {
    /// The history, as OpenAI chat messages.
    messages: Vec<output::ChatMessage<'a>>,
    /// The history as a completion model gets it (with a role prefix or `--completion`).
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    /// The current query, rendered into the query template.
    #[serde(skip_serializing_if = "Option::is_none")]
    query: Option<String>,
}

impl DifyArgs {
    /// Whether any Dify flag was given.
    pub fn is_set(&self) -> bool {
        self.memory_config.is_some()
            || self.role_prefix.is_some()
            || self.completion
            || self.window.is_some()
            || self.query_template.is_some()
            || self.query.is_some()
            || !self.vars.is_empty()
    }

    /// The memory config the flags give, for a command that reads `mode` memory: the
    /// JSON's mode when it names one, else `mode`.
    pub fn config(&self, mode: MemoryMode) -> Result<MemoryConfig> {
        let mut config = match &self.memory_config {
            Some(json) => {
                let value: Value = serde_json::from_str(json)
                    .with_context(|| format!("--memory-config {json:?} is not JSON"))?;
                let names_mode = value.get("mode").is_some();
                let mut config: MemoryConfig = serde_json::from_value(value)
                    .with_context(|| format!("--memory-config {json:?}: not a Dify memory config (role_prefix {{user, assistant}}, window {{enabled, size}}, query_prompt_template, mode conversation|node)"))?;
                if !names_mode {
                    config.mode = mode;
                }
                config
            }
            None => MemoryConfig {
                mode,
                ..MemoryConfig::default()
            },
        };
        if let Some(prefix) = &self.role_prefix {
            let [user, assistant] = prefix.as_slice() else {
                bail!("--role-prefix takes two values, USER and ASSISTANT");
            };
            config.role_prefix = Some(RolePrefix {
                user: user.clone(),
                assistant: assistant.clone(),
            });
        } else if self.completion && config.role_prefix.is_none() {
            config.role_prefix = Some(RolePrefix::default());
        }
        if let Some(size) = self.window {
            config.window = Some(WindowConfig {
                enabled: true,
                size: Some(size),
            });
        }
        if let Some(template) = &self.query_template {
            config.query_prompt_template = Some(template.clone());
        }
        config.validate()?;
        Ok(config)
    }

    /// The template's variable values from `--var`.
    fn inputs(&self) -> Result<BTreeMap<String, String>> {
        self.vars
            .iter()
            .map(|v| match v.split_once('=') {
                Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
                _ => bail!("--var {v:?}: expected NAME=VALUE, e.g. --var '#start.name#=Ada'"),
            })
            .collect()
    }

    /// Prints `history` read under `config`: the completion text when the config has a
    /// role prefix, else one line per entry; then the rendered query. `--json` prints
    /// `{"messages", "text", "query"}`.
    pub fn print(
        &self,
        config: &MemoryConfig,
        history: &[&Entry],
        json: bool,
        out: &mut impl Write,
    ) -> Result<()> {
        let messages: Vec<&Message> = history.iter().filter_map(|e| e.message()).collect();
        let text = config
            .role_prefix
            .is_some()
            .then(|| config.history_text(&messages));
        let query = match &self.query {
            Some(q) => Some(config.render_query(q, &self.inputs()?)),
            None => None,
        };
        if json {
            let wire = DifyOut {
                messages: messages
                    .iter()
                    .map(|m| output::ChatMessage::of(m))
                    .collect(),
                text,
                query,
            };
            return output::json(out, &wire);
        }
        match text {
            Some(text) if !text.is_empty() => writeln!(out, "{text}")?,
            Some(_) => {}
            None => {
                for e in history {
                    writeln!(out, "{}", output::entry_line(e))?;
                }
            }
        }
        if let Some(query) = query {
            writeln!(out)?;
            writeln!(out, "{query}")?;
        }
        Ok(())
    }
}

/// `memtape history SESSION` with Dify flags: the conversation memory a Dify LLM node
/// reads, within `--max-tokens` (Dify's default 2000).
pub fn history(
    engine: &Engine<DynStore>,
    scope: &Scope,
    dify: &DifyArgs,
    max_messages: usize,
    max_tokens: Option<usize>,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    if max_messages != HistoryLimits::default().max_messages {
        bail!(
            "--max-messages does not apply to Dify memory, which counts turns (a query and its \
             answer): use --window N (1 to 500)"
        );
    }
    let config = dify.config(MemoryMode::Conversation)?;
    let history = engine.dify_history(
        scope,
        &config,
        max_tokens.unwrap_or(DEFAULT_MAX_TOKEN_LIMIT),
    )?;
    let refs: Vec<&Entry> = history.iter().collect();
    dify.print(&config, &refs, json, out)
}
