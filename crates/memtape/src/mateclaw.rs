//! MateClaw's memory service (seed 003): post-conversation extraction and emergence.
//!
//! **Extraction** reads the end of a conversation with PROFILE.md, MEMORY.md and today's
//! daily note, and the model answers in JSON whether anything is worth keeping: an entry
//! for the daily note, a new MEMORY.md, a new PROFILE.md. After a conversation it runs only
//! when every MateClaw pre-check passes (enabled, not started by a scheduled task, at least
//! 4 messages, a last user message of at least 10 characters), at most once per agent in
//! the cooldown (5 minutes), and never twice at once for one memory (a try-lock). A manual
//! run (`memtape memory extract`, REST, MCP) skips the cooldown and the content checks but
//! the 4-message floor; a run that is busy elsewhere is reported as skipped.
//!
//! **Emergence** merges the newest daily notes (7 by default: the 7 newest note files, as
//! MateClaw counts them, not 7 calendar days) into MEMORY.md.
//!
//! Both write through [`Engine::apply_edits`]: one version per run, lines added meanwhile
//! carried over, every fact a rewrite drops kept as `memory.dropped`. The cooldown is kept
//! on the tape (the agent's `llm.call` events), so it holds across processes and restarts.

use chrono::Duration;
use memtape_core::events::{BuiltinEvent, LLM_CALL};
use memtape_core::memory::paths;
use memtape_core::{EntryId, Filter, Kind, Order, Role, Scope};
use memtape_llm::{ChatRequest, ChatResponse, Llm, Message};
use memtape_store::{Store, StoreLock, Wait};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::prompts::{EMERGENCE_SYSTEM, EMERGENCE_USER, EXTRACTION_SYSTEM, EXTRACTION_USER};
use crate::rewrite::Edit;
use crate::settings::{EmergenceConfig, ExtractionConfig};
use crate::{Engine, Error, Result, check_memory_scope, memory_scope};

/// What started an extraction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger<'a> {
    /// A conversation turn completed; `source` says where it came from (`web`, `channel`,
    /// `cron`: MateClaw's `triggerSource`). Every pre-check and the cooldown apply.
    Conversation {
        /// Where the conversation came from.
        source: &'a str,
    },
    /// Someone asked for it (CLI, REST, MCP): only the 4-message floor and the lock apply.
    Manual,
}

/// MateClaw's trigger source (`triggerSource`): where a conversation came from. A
/// scheduled task's conversation (`cron`) is not analysed while
/// [`ExtractionConfig::skip_cron`] is on (no recursion).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// A person in a web client (the default).
    #[default]
    Web,
    /// A message channel (a chat app, a bot).
    Channel,
    /// A scheduled task.
    Cron,
}

impl Source {
    /// `web`, `channel` or `cron`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Web => "web",
            Source::Channel => "channel",
            Source::Cron => "cron",
        }
    }

    /// The conversation trigger of a conversation from this source.
    pub fn trigger(self) -> Trigger<'static> {
        Trigger::Conversation {
            source: self.as_str(),
        }
    }
}

impl std::str::FromStr for Source {
    type Err = Error;

    fn from_str(s: &str) -> Result<Source> {
        match s {
            "web" => Ok(Source::Web),
            "channel" => Ok(Source::Channel),
            "cron" => Ok(Source::Cron),
            other => Err(Error::Config(format!(
                "the trigger source is {other:?}; it must be web, channel or cron"
            ))),
        }
    }
}

/// What an extraction or emergence did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemoryRun {
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

impl MemoryRun {
    fn skipped(why: impl Into<String>) -> Self {
        MemoryRun {
            skipped: Some(why.into()),
            ..MemoryRun::default()
        }
    }
}

/// The JSON object in a model's text reply: the whole text, the text inside a code fence,
/// or the first `{…}` object in it (a model that adds prose around its JSON).
pub fn json_reply(text: &str) -> Option<Map<String, Value>> {
    let t = text.trim();
    let unfenced = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .map(|rest| rest.trim_end().strip_suffix("```").unwrap_or(rest))
        .unwrap_or(t)
        .trim();
    if let Ok(Value::Object(map)) = serde_json::from_str(unfenced) {
        return Some(map);
    }
    // The first object, read by serde_json up to its own end (prose after it is left).
    let start = t.find('{')?;
    match serde_json::Deserializer::from_str(&t[start..])
        .into_iter::<Value>()
        .next()
    {
        Some(Ok(Value::Object(map))) => Some(map),
        _ => None,
    }
}

/// A non-empty text field of a reply (fields that are not text are ignored, as MateClaw
/// ignores them).
fn text_field(map: &Map<String, Value>, name: &str) -> Option<String> {
    map.get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .map(str::to_owned)
}

/// The model's JSON answer, or an error naming what came instead. A field too large for a
/// memory file, or holding a NUL, is refused.
fn parse_reply(reply: &ChatResponse) -> Result<Map<String, Value>> {
    let map = json_reply(&reply.content).ok_or_else(|| {
        let said: String = reply.content.chars().take(200).collect();
        Error::Model(format!("the reply is not a JSON object: {said:?}"))
    })?;
    for (name, value) in &map {
        if let Value::String(s) = value {
            if s.len() > memtape_core::memory::MAX_FILE_BYTES {
                return Err(Error::Model(format!(
                    "{name} is {} bytes, more than a memory file holds",
                    s.len()
                )));
            }
            if s.contains('\0') {
                return Err(Error::Model(format!("{name} contains a NUL byte")));
            }
        }
    }
    Ok(map)
}

/// The name of a memory's lock, shared by extraction and emergence (both rewrite
/// MEMORY.md).
fn memory_lock(memory: &Scope) -> String {
    format!("memory {memory}")
}

impl<S: Store> Engine<S> {
    /// Takes the memory lock of `memory` (extraction and emergence), across processes.
    fn lock_memory(&self, memory: &Scope, wait: Wait) -> Result<Option<StoreLock>> {
        Ok(self
            .store
            .lock(memory.tenant(), &memory_lock(memory), wait)?)
    }

    /// When the agent of `scope` last had an extraction call, if within `window`.
    fn recent_extraction(&self, scope: &Scope, window: Duration) -> Result<bool> {
        let filter = Filter {
            kinds: vec![Kind::Event],
            name: Some(LLM_CALL.into()),
            since: Some(self.now() - window),
            order: Order::Desc,
            ..Filter::default()
        };
        Ok(self
            .store
            .scan(&scope.agent_scope(), &filter)?
            .iter()
            .any(|e| {
                matches!(
                    BuiltinEvent::from_payload(&e.payload),
                    Ok(Some(BuiltinEvent::LlmCall(c))) if c.purpose == "extraction"
                )
            }))
    }

    /// MateClaw's extraction for `session` (see the module): the model reads the end of the
    /// conversation and the memory files, and its JSON answer becomes one memory version
    /// of the session's memory (a daily entry, MEMORY.md, PROFILE.md). A run that does not
    /// happen says why in `skipped`; a model that fails or answers badly is an error, and
    /// nothing was written.
    pub fn extract(
        &self,
        session: &Scope,
        llm: &dyn Llm,
        config: &ExtractionConfig,
        trigger: Trigger<'_>,
    ) -> Result<MemoryRun> {
        crate::consolidate::check_session(session)?;
        if let Trigger::Conversation { source } = trigger {
            if !config.enabled {
                return Ok(MemoryRun::skipped("extraction is disabled"));
            }
            if config.skip_cron && source == "cron" {
                return Ok(MemoryRun::skipped("a scheduled task's conversation"));
            }
        }
        let Some(info) = self.store.scope_info(session)? else {
            return Ok(MemoryRun::skipped("the session is empty"));
        };
        if (info.messages as usize) < config.min_messages {
            return Ok(MemoryRun::skipped(format!(
                "{} messages, fewer than {}",
                info.messages, config.min_messages
            )));
        }
        let thread = match info.head {
            Some(head) => self.walk(
                session,
                head,
                EntryId(0),
                config.transcript_messages.saturating_mul(4),
            )?,
            None => Vec::new(),
        };
        let spoken: Vec<(Role, String)> = thread
            .iter()
            .filter_map(|e| e.message())
            .filter(|m| matches!(m.role, Role::User | Role::Assistant))
            .map(|m| (m.role, m.content_text().into_owned()))
            .filter(|(_, t)| !t.trim().is_empty())
            .collect();
        if let Trigger::Conversation { .. } = trigger {
            let last_user = spoken.iter().rev().find(|(r, _)| *r == Role::User);
            if let Some((_, text)) = last_user
                && text.chars().count() < config.min_user_chars
            {
                return Ok(MemoryRun::skipped(format!(
                    "the last user message is shorter than {} characters",
                    config.min_user_chars
                )));
            }
            if config.cooldown_minutes > 0
                && self.recent_extraction(
                    session,
                    Duration::minutes(i64::from(config.cooldown_minutes)),
                )?
            {
                return Ok(MemoryRun::skipped(format!(
                    "the agent was analysed less than {} minutes ago",
                    config.cooldown_minutes
                )));
            }
        }
        let memory = memory_scope(session)?;
        let Some(_lock) = self.lock_memory(&memory, Wait::Try)? else {
            return Ok(MemoryRun::skipped("this memory is being updated elsewhere"));
        };
        let from = spoken.len().saturating_sub(config.transcript_messages);
        let transcript: Vec<String> = spoken[from..]
            .iter()
            .map(|(role, text)| {
                let label = if *role == Role::User {
                    "User"
                } else {
                    "Assistant"
                };
                let text = if text.chars().count() > config.message_chars {
                    let cut: String = text.chars().take(config.message_chars).collect();
                    format!("{cut}... [truncated]")
                } else {
                    text.clone()
                };
                format!("{label}: {text}")
            })
            .collect();
        let transcript = transcript.join("\n\n");
        if transcript.trim().is_empty() {
            return Ok(MemoryRun::skipped("nothing said to analyse"));
        }
        let view = self.memory(&memory)?;
        let today = self.now().date_naive();
        let daily_path = paths::daily(today);
        let file = |p: &str| view.content(p).unwrap_or_default().to_owned();
        let (profile, long_term, daily) =
            (file(paths::PROFILE), file(paths::MEMORY), file(&daily_path));
        let today_text = today.format("%Y-%m-%d").to_string();
        let system = self.prompt(session, &EXTRACTION_SYSTEM, &[])?;
        let user = self.prompt(
            session,
            &EXTRACTION_USER,
            &[
                ("today", &today_text),
                ("profile", &profile),
                ("memory", &long_term),
                ("daily_filename", &daily_path),
                ("daily", &daily),
                ("transcript", &transcript),
            ],
        )?;
        let mut request = ChatRequest::new(vec![Message::system(system), Message::user(user)]);
        request.max_tokens = Some(config.max_tokens);
        // What it writes names the exchange it read and the model call as its causes.
        let exchange: Vec<EntryId> = thread
            .iter()
            .rev()
            .filter(|e| {
                e.message()
                    .is_some_and(|m| matches!(m.role, Role::User | Role::Assistant))
            })
            .take(2)
            .map(|e| e.id)
            .collect();
        crate::tiers::caused_by(exchange.into_iter().rev(), || {
            let reply = self.call_llm(llm, session, "extraction", &request, parse_reply)?;
            let mut run = MemoryRun {
                should_update: reply.get("should_update").and_then(Value::as_bool) == Some(true),
                reason: text_field(&reply, "reason").unwrap_or_default(),
                ..MemoryRun::default()
            };
            if !run.should_update {
                return Ok(run);
            }
            let mut edits = Vec::new();
            if let Some(entry) = text_field(&reply, "daily_entry") {
                edits.push(Edit::Note {
                    path: daily_path.clone(),
                    entry,
                    heading: paths::daily_heading(today),
                });
            }
            for (field, path, seen) in [
                ("memory_update", paths::MEMORY, long_term),
                ("profile_update", paths::PROFILE, profile),
            ] {
                if let Some(new) = text_field(&reply, field) {
                    edits.push(Edit::Rewrite {
                        path: path.into(),
                        seen,
                        new,
                    });
                }
            }
            let source = format!("extraction from {session}");
            let applied = self.apply_edits(&memory, &edits, "extraction", &source, &[])?;
            run.changed = applied.changed;
            run.dropped = applied.dropped;
            Ok(run)
        })
    }

    /// MateClaw's emergence for the memory `scope` (an agent, or an agent and a user): its
    /// newest `days` daily notes (the config's 7 when `None`) merged into MEMORY.md by the
    /// model. With [`Wait::Try`] a run busy elsewhere is skipped; with [`Wait::Block`] it
    /// waits. Daily notes are never changed.
    pub fn emerge(
        &self,
        scope: &Scope,
        llm: &dyn Llm,
        config: &EmergenceConfig,
        days: Option<usize>,
        wait: Wait,
    ) -> Result<MemoryRun> {
        check_memory_scope(scope)?;
        let days = days.unwrap_or(config.days);
        if days == 0 {
            return Err(Error::Config(
                "emergence needs at least one daily note (days ≥ 1)".into(),
            ));
        }
        let Some(_lock) = self.lock_memory(scope, wait)? else {
            return Ok(MemoryRun::skipped("this memory is being updated elsewhere"));
        };
        let view = self.memory(scope)?;
        let mut notes = String::new();
        let mut count = 0;
        for (_, path, file) in view.dailies().into_iter().take(days) {
            if file.content.trim().is_empty() {
                continue;
            }
            count += 1;
            notes.push_str(&format!("### {path}\n{}\n\n", file.content.trim()));
        }
        if count == 0 {
            return Ok(MemoryRun::skipped("no daily notes to merge"));
        }
        let long_term = view.content(paths::MEMORY).unwrap_or_default().to_owned();
        let system = self.prompt(scope, &EMERGENCE_SYSTEM, &[])?;
        let user = self.prompt(
            scope,
            &EMERGENCE_USER,
            &[
                ("memory", &long_term),
                ("day_range", &days.to_string()),
                ("daily_notes", notes.trim()),
            ],
        )?;
        let request = ChatRequest::new(vec![Message::system(system), Message::user(user)]);
        // What it writes names the model call as its cause.
        crate::tiers::caused_by([], || {
            let reply = self.call_llm(llm, scope, "emergence", &request, parse_reply)?;
            let mut run = MemoryRun {
                should_update: reply.get("should_update").and_then(Value::as_bool) == Some(true),
                reason: text_field(&reply, "reason").unwrap_or_default(),
                ..MemoryRun::default()
            };
            let content = text_field(&reply, "memory_content");
            if let (true, Some(new)) = (run.should_update, content) {
                let edit = Edit::Rewrite {
                    path: paths::MEMORY.into(),
                    seen: long_term,
                    new,
                };
                let source = format!("emergence of {count} daily notes");
                let applied = self.apply_edits(scope, &[edit], "emergence", &source, &[])?;
                run.changed = applied.changed;
                run.dropped = applied.dropped;
            }
            Ok(run)
        })
    }
}

impl<S: Store> Engine<S> {
    /// The memories (each agent's, and each agent-and-user's, of every tenant) whose
    /// emergence schedule fires after `after` and at or before `until`: what a server's
    /// scheduler runs [`Engine::emerge`] on. An agent whose schedule is off is left out.
    pub fn due_emergences(
        &self,
        config: &EmergenceConfig,
        after: chrono::DateTime<chrono::Utc>,
        until: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<Scope>> {
        let fires_for = |agent: &str| -> Result<bool> {
            Ok(config
                .schedule(agent)?
                .and_then(|s| s.next_after(after))
                .is_some_and(|next| next <= until))
        };
        // Most ticks nothing fires: then the store is not read at all.
        let mut any = fires_for("")?;
        for agent in config.agents.keys() {
            any = any || fires_for(agent)?;
        }
        if !any {
            return Ok(Vec::new());
        }
        let mut due = Vec::new();
        let mut fires: std::collections::HashMap<String, bool> = Default::default();
        for tenant in self.store.tenants()? {
            for info in self.store.scopes(&tenant)? {
                let scope = info.scope;
                if scope.session().is_some() {
                    continue;
                }
                let agent = scope.agent_name().to_owned();
                let fire = match fires.get(&agent) {
                    Some(f) => *f,
                    None => {
                        let f = fires_for(&agent)?;
                        fires.insert(agent, f);
                        f
                    }
                };
                if fire {
                    due.push(scope);
                }
            }
        }
        Ok(due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_found_fenced_bare_or_in_prose() {
        let want = Some(
            serde_json::json!({"should_update": true})
                .as_object()
                .unwrap()
                .clone(),
        );
        for text in [
            "{\"should_update\": true}",
            "```json\n{\"should_update\": true}\n```",
            "```\n{\"should_update\": true}```",
            "Sure! Here it is: {\"should_update\": true} Hope it helps.",
        ] {
            assert_eq!(json_reply(text), want, "{text}");
        }
        assert_eq!(json_reply("x {\"a\": \"}{\\\"\"} y").unwrap()["a"], "}{\"");
        for bad in ["", "no json", "[1, 2]", "{\"a\": ", "}{"] {
            assert_eq!(json_reply(bad), None, "{bad}");
        }
    }
}
