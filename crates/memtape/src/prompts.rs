//! Prompt templates as files (seed: MateClaw keeps its prompts in files, not in code).
//! memtape ships a default for each template (in `crates/memtape/prompts/`), and an agent
//! overrides one by writing `prompts/<name>.md` to its own memory workspace (with `memtape
//! files create`, the memory tools, or a markdown edit picked up by sync): the file's text
//! is used instead, for every user of that agent.
//!
//! A template names its variables in braces (`{memory}`); each [`Template`] lists the
//! variables it takes, and only those are replaced, so other braces (a JSON example in the
//! prompt) are left as they are.

use memtape_core::Scope;
use memtape_core::memory::MemoryView;
use memtape_store::Store;

use crate::{Engine, Result};

/// A prompt template: its name, the text memtape ships, and the variables it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Template {
    /// The name; an agent's override is the file `prompts/<name>.md`.
    pub name: &'static str,
    /// The text used when the agent has no override.
    pub default: &'static str,
    /// The variables it takes, each written `{name}` in the text.
    pub vars: &'static [&'static str],
}

impl Template {
    /// Where an agent's override lives in its memory workspace.
    pub fn path(&self) -> String {
        format!("prompts/{}.md", self.name)
    }

    /// The SHA-256 of the text memtape ships, in lowercase hex: which version of the
    /// template produced a result.
    pub fn sha256(&self) -> String {
        crate::workspace::sha256(self.default)
    }

    /// `text` with each of this template's variables replaced by its value in `values`
    /// (a missing value counts as empty), in one pass: a value that itself contains
    /// `{memory}` (a user wrote it) is not replaced again.
    pub fn render(&self, text: &str, values: &[(&str, &str)]) -> String {
        let text = text.trim_end();
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find('{') {
            out.push_str(&rest[..at]);
            let tail = &rest[at..];
            let var = self.vars.iter().find(|var| {
                tail.len() > var.len() + 1
                    && tail[1..].starts_with(**var)
                    && tail[1 + var.len()..].starts_with('}')
            });
            match var {
                Some(var) => {
                    let value = values
                        .iter()
                        .find(|(name, _)| name == var)
                        .map_or("", |(_, v)| *v);
                    out.push_str(value);
                    rest = &tail[var.len() + 2..];
                }
                None => {
                    out.push('{');
                    rest = &tail[1..];
                }
            }
        }
        out.push_str(rest);
        out
    }
}

/// nanobot's consolidation, the system message.
pub const CONSOLIDATION_SYSTEM: Template = Template {
    name: "consolidation-system",
    default: include_str!("../prompts/consolidation-system.md"),
    vars: &[],
};

/// nanobot's consolidation, the user message: `{memory}` is MEMORY.md now (or `(empty)`),
/// `{conversation}` the messages to consolidate, one `[time] ROLE: text` line each.
pub const CONSOLIDATION_USER: Template = Template {
    name: "consolidation-user",
    default: include_str!("../prompts/consolidation-user.md"),
    vars: &["memory", "conversation"],
};

/// MateClaw's post-conversation extraction, the system message (the JSON reply it asks
/// for: `should_update`, `daily_entry`, `memory_update`, `profile_update`, `reason`).
pub const EXTRACTION_SYSTEM: Template = Template {
    name: "extraction-system",
    default: include_str!("../prompts/extraction-system.md"),
    vars: &[],
};

/// MateClaw's extraction, the user message: `{today}` (YYYY-MM-DD), `{profile}`,
/// `{memory}`, `{daily_filename}` and `{daily}` (PROFILE.md, MEMORY.md and today's note as
/// they are), `{transcript}` (the last user and assistant messages, `User: …` and
/// `Assistant: …`).
pub const EXTRACTION_USER: Template = Template {
    name: "extraction-user",
    default: include_str!("../prompts/extraction-user.md"),
    vars: &[
        "today",
        "profile",
        "memory",
        "daily_filename",
        "daily",
        "transcript",
    ],
};

/// MateClaw's emergence (daily notes into MEMORY.md), the system message (the JSON reply
/// it asks for: `should_update`, `memory_content`, `reason`).
pub const EMERGENCE_SYSTEM: Template = Template {
    name: "emergence-system",
    default: include_str!("../prompts/emergence-system.md"),
    vars: &[],
};

/// MateClaw's emergence, the user message: `{memory}` (MEMORY.md), `{day_range}` (how many
/// notes), `{daily_notes}` (each note under `### memory/YYYY-MM-DD.md`, newest first).
pub const EMERGENCE_USER: Template = Template {
    name: "emergence-user",
    default: include_str!("../prompts/emergence-user.md"),
    vars: &["memory", "day_range", "daily_notes"],
};

/// MateClaw's context summary (compaction), the system message.
pub const SUMMARY_SYSTEM: Template = Template {
    name: "context-summary-system",
    default: include_str!("../prompts/context-summary-system.md"),
    vars: &[],
};

/// MateClaw's context summary, the user message: `{conversation}` (the older messages,
/// `User: …` / `Assistant: …` / `System: …`, each cut at 2000 characters, after the
/// summary so far when there is one).
pub const SUMMARY_USER: Template = Template {
    name: "context-summary-user",
    default: include_str!("../prompts/context-summary-user.md"),
    vars: &["conversation"],
};

/// Every template memtape ships.
pub const TEMPLATES: &[Template] = &[
    SUMMARY_SYSTEM,
    SUMMARY_USER,
    CONSOLIDATION_SYSTEM,
    CONSOLIDATION_USER,
    EXTRACTION_SYSTEM,
    EXTRACTION_USER,
    EMERGENCE_SYSTEM,
    EMERGENCE_USER,
];

/// The text of `template` for an agent whose memory is `agent_memory`: its override when
/// it has a non-empty one, else the default.
pub fn template_text<'v>(agent_memory: &'v MemoryView, template: &Template) -> &'v str {
    agent_memory
        .content(&template.path())
        .filter(|t| !t.trim().is_empty())
        .unwrap_or(template.default)
}

impl<S: Store> Engine<S> {
    /// `template` rendered with `values`, as the agent `scope` belongs to has it (its
    /// override in `prompts/`, or memtape's default).
    pub fn prompt(
        &self,
        scope: &Scope,
        template: &Template,
        values: &[(&str, &str)],
    ) -> Result<String> {
        let agent = self.memory(&scope.agent_scope())?;
        Ok(template.render(template_text(&agent, template), values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_declared_variables_are_replaced() {
        let t = Template {
            name: "t",
            default: "",
            vars: &["memory"],
        };
        assert_eq!(
            t.render(
                "{memory} and {\"json\": 1} {other} {memory\n",
                &[("memory", "M")]
            ),
            "M and {\"json\": 1} {other} {memory"
        );
        // One pass: a value holding a variable's name is not substituted again.
        let two = Template {
            name: "t",
            default: "",
            vars: &["a", "b"],
        };
        assert_eq!(two.render("{a}|{b}", &[("a", "{b}"), ("b", "B")]), "{b}|B");
    }

    #[test]
    fn every_shipped_template_uses_exactly_its_variables() {
        for t in TEMPLATES {
            for var in t.vars {
                assert!(
                    t.default.contains(&format!("{{{var}}}")),
                    "{} lacks {var}",
                    t.name
                );
            }
            assert!(!t.default.trim().is_empty(), "{} is empty", t.name);
        }
    }
}
