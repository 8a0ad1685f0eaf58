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

    /// `text` with each of this template's variables replaced by its value in `values`
    /// (a missing value counts as empty).
    pub fn render(&self, text: &str, values: &[(&str, &str)]) -> String {
        let mut out = text.trim_end().to_owned();
        for var in self.vars {
            let value = values
                .iter()
                .find(|(name, _)| name == var)
                .map_or("", |(_, v)| *v);
            out = out.replace(&format!("{{{var}}}"), value);
        }
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

/// Every template memtape ships.
pub const TEMPLATES: &[Template] = &[CONSOLIDATION_SYSTEM, CONSOLIDATION_USER];

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
            t.render("{memory} and {\"json\": 1} {other}\n", &[("memory", "M")]),
            "M and {\"json\": 1} {other}"
        );
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
