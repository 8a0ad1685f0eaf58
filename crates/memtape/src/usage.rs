//! What language-model calls cost, per agent: each call memtape makes is an `llm.call`
//! event on the agent's own tape ([`Engine::record_llm_call`]), and [`Engine::llm_usage`]
//! sums them by model and purpose, over any period.

use chrono::{DateTime, Utc};
use memtape_core::events::{BuiltinEvent, LlmCall};
use memtape_core::{Filter, Kind, Payload, Scope};
use memtape_store::Store;

use crate::{Engine, Result};

/// The calls of one model for one purpose, summed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageLine {
    /// The model.
    pub model: String,
    /// What the calls were for.
    pub purpose: String,
    /// How many calls were made.
    pub calls: u64,
    /// How many of them failed.
    pub failed: u64,
    /// Prompt tokens, summed.
    pub prompt_tokens: u64,
    /// Reply tokens, summed.
    pub completion_tokens: u64,
}

impl<S: Store> Engine<S> {
    /// Records one model call on the tape of the agent `scope` belongs to (checked like
    /// any built-in event on the way in).
    pub fn record_llm_call(&self, scope: &Scope, call: LlmCall) -> Result<()> {
        let entry = self.append_payload(
            &scope.agent_scope(),
            BuiltinEvent::LlmCall(call).to_payload(),
        )?;
        // A memory change this call leads to names it as a cause.
        crate::tiers::note_cause(entry.id);
        Ok(())
    }

    /// The model calls recorded for the agent `scope` belongs to, from `since` (all when
    /// `None`) to `until`, summed by model and purpose (sorted by both).
    pub fn llm_usage(
        &self,
        scope: &Scope,
        since: Option<DateTime<Utc>>,
        until: Option<DateTime<Utc>>,
    ) -> Result<Vec<UsageLine>> {
        let filter = Filter {
            kinds: vec![Kind::Event],
            name: Some(memtape_core::events::LLM_CALL.to_owned()),
            since,
            until,
            ..Filter::default()
        };
        let mut lines: Vec<UsageLine> = Vec::new();
        for entry in self.store.scan(&scope.agent_scope(), &filter)? {
            let Payload::Event(event) = &entry.payload else {
                continue;
            };
            // Checked when written, so a failure here is a store written by other means.
            let Ok(Some(BuiltinEvent::LlmCall(call))) = BuiltinEvent::decode(event) else {
                continue;
            };
            let at = lines
                .iter()
                .position(|l| l.model == call.model && l.purpose == call.purpose)
                .unwrap_or_else(|| {
                    lines.push(UsageLine {
                        model: call.model.clone(),
                        purpose: call.purpose.clone(),
                        ..UsageLine::default()
                    });
                    lines.len() - 1
                });
            let line = &mut lines[at];
            line.calls += 1;
            line.failed += u64::from(call.error.is_some());
            line.prompt_tokens = line.prompt_tokens.saturating_add(call.prompt_tokens);
            line.completion_tokens = line
                .completion_tokens
                .saturating_add(call.completion_tokens);
        }
        lines.sort_by(|a, b| (&a.model, &a.purpose).cmp(&(&b.model, &b.purpose)));
        Ok(lines)
    }
}
