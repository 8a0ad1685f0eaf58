//! The memory lifecycle's settings: the `[lifecycle]` table of `memtape.toml`, with
//! nanobot's and MateClaw's defaults. Every key is optional; an unknown key, or a value
//! outside its range, is refused naming it.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// How the model keeps memory: when consolidation runs, and on what window.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LifecycleConfig {
    /// nanobot's `memory_window`: consolidation starts at this many unconsolidated
    /// messages and keeps the newest half (2 to 10000; default 100).
    pub memory_window: usize,
    /// Whether servers and `memtape chat` consolidate in the background when a model is
    /// configured (default true).
    pub consolidate: bool,
    /// The token budget of a consolidation's reply (default 2048).
    pub consolidation_max_tokens: u32,
    /// MateClaw's post-conversation extraction (`[lifecycle.extraction]`).
    pub extraction: ExtractionConfig,
    /// MateClaw's emergence (`[lifecycle.emergence]`).
    pub emergence: EmergenceConfig,
    /// Qanot's automatic daily note for every exchange (`[lifecycle.daily_notes]`).
    pub daily_notes: DailyNotesConfig,
    /// Whether the system text a context builds carries the memory skill (nanobot's
    /// always-loaded skill with Bub's rule 7: save preferences proactively) for agents
    /// served with memory tools (default true).
    pub memory_skill: bool,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        LifecycleConfig {
            memory_window: crate::MEMORY_WINDOW,
            consolidate: true,
            consolidation_max_tokens: crate::consolidate::CONSOLIDATION_MAX_TOKENS,
            extraction: ExtractionConfig::default(),
            emergence: EmergenceConfig::default(),
            daily_notes: DailyNotesConfig::default(),
            memory_skill: true,
        }
    }
}

/// Which automatic daily notes an agent's exchanges get.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DailyNotes {
    /// None.
    Off,
    /// Qanot's: `## [HH:MM:SS]`, the user's message and the reply, under the seed's
    /// heading `# Daily Notes -- YYYY-MM-DD` ([`Engine::note_exchange`](crate::Engine::note_exchange)).
    Qanot,
}

/// Qanot's automatic daily notes, per agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DailyNotesConfig {
    /// The notes of every agent: `qanot` or `off`. Unset, each front-end keeps its own
    /// default: `memtape chat` writes Qanot's notes, servers (REST, MCP) write none.
    pub format: Option<DailyNotes>,
    /// Per-agent choices, by agent name, over `format`.
    pub agents: std::collections::BTreeMap<String, DailyNotes>,
}

impl DailyNotesConfig {
    /// The notes `agent` gets; `default` when nothing is set for it.
    pub fn for_agent(&self, agent: &str, default: DailyNotes) -> DailyNotes {
        self.agents
            .get(agent)
            .copied()
            .or(self.format)
            .unwrap_or(default)
    }
}

/// MateClaw's post-conversation extraction, with its defaults.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExtractionConfig {
    /// Whether it runs after conversations (`autoSummarizeEnabled`, default true).
    pub enabled: bool,
    /// Skip conversations a scheduled task started (default true: no recursion).
    pub skip_cron: bool,
    /// A session needs this many messages (default 4).
    pub min_messages: usize,
    /// Its last user message needs this many characters (default 10).
    pub min_user_chars: usize,
    /// An agent is analysed at most once in this many minutes (default 5).
    pub cooldown_minutes: u32,
    /// The transcript holds the last this many user and assistant messages (default 30).
    pub transcript_messages: usize,
    /// Each message is cut to this many characters (default 2000).
    pub message_chars: usize,
    /// The reply's token budget (MateClaw's `summary-max-tokens`, default 1000).
    pub max_tokens: u32,
}

impl Default for ExtractionConfig {
    fn default() -> Self {
        ExtractionConfig {
            enabled: true,
            skip_cron: true,
            min_messages: 4,
            min_user_chars: 10,
            cooldown_minutes: 5,
            transcript_messages: 30,
            message_chars: 2000,
            max_tokens: 1000,
        }
    }
}

/// MateClaw's emergence: the newest daily notes merged into MEMORY.md on a schedule.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmergenceConfig {
    /// Whether `memtape serve` runs it on schedule (default true).
    pub enabled: bool,
    /// When, as a 5-field cron expression (minute hour day month weekday; default
    /// `0 2 * * *`, every day at 02:00).
    pub cron: String,
    /// The clock the schedule is read on: `utc` (default) or `local`.
    pub timezone: String,
    /// How many of the newest daily notes are read (default 7).
    pub days: usize,
    /// Per-agent schedules, by agent name: a cron expression, or `off`.
    pub agents: std::collections::BTreeMap<String, String>,
}

impl Default for EmergenceConfig {
    fn default() -> Self {
        EmergenceConfig {
            enabled: true,
            cron: "0 2 * * *".into(),
            timezone: "utc".into(),
            days: 7,
            agents: Default::default(),
        }
    }
}

/// A parsed emergence schedule.
#[derive(Clone, Debug)]
pub struct Schedule {
    cron: croner::Cron,
    local: bool,
}

impl Schedule {
    /// Parses a 5-field cron expression (MateClaw's form), read on UTC or local time.
    pub fn parse(expression: &str, local: bool) -> Result<Schedule> {
        let fields = expression.split_whitespace().count();
        if fields != 5 {
            return Err(Error::Config(format!(
                "the cron expression {expression:?} has {fields} fields; it must have 5 \
                 (minute hour day month weekday), like \"0 2 * * *\""
            )));
        }
        let cron = <croner::Cron as std::str::FromStr>::from_str(expression).map_err(|e| {
            Error::Config(format!(
                "the cron expression {expression:?} is not valid: {e}"
            ))
        })?;
        // An expression can be well formed and never fire ("0 0 30 2 *"): refused, or the
        // emergence it names would silently never run. Eight years hold every date a valid
        // expression can name (29 February included), and the calendar repeats, so the
        // years from 4990 are asked: croner gives up searching at 5000, which bounds the
        // time an expression that never fires takes to 10 years of search, not 3,000.
        let from = chrono::NaiveDate::from_ymd_opt(4990, 1, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|t| t.and_utc())
            .unwrap_or_default();
        let fires = cron
            .find_next_occurrence(&from, false)
            .is_ok_and(|t| t < from + chrono::Duration::days(8 * 366));
        if !fires {
            return Err(Error::Config(format!(
                "the cron expression {expression:?} never fires"
            )));
        }
        Ok(Schedule { cron, local })
    }

    /// The first time after `after` the schedule fires (a whole minute).
    pub fn next_after(
        &self,
        after: chrono::DateTime<chrono::Utc>,
    ) -> Option<chrono::DateTime<chrono::Utc>> {
        // The search runs on whole seconds from the second after `after`: with a fraction
        // left on, it would answer 02:00:00.7 for a moment at .7, which a scheduler whose
        // next tick falls at 02:00:00.3 would see as not yet due, then pass.
        let after = chrono::Timelike::with_nanosecond(&after, 0).unwrap_or(after);
        if self.local {
            let local = after.with_timezone(&chrono::Local);
            self.cron
                .find_next_occurrence(&local, false)
                .ok()
                .map(|t| t.with_timezone(&chrono::Utc))
        } else {
            self.cron.find_next_occurrence(&after, false).ok()
        }
    }
}

impl EmergenceConfig {
    /// The schedule of `agent` (its own, else the default), `None` when it is off.
    pub fn schedule(&self, agent: &str) -> Result<Option<Schedule>> {
        if !self.enabled {
            return Ok(None);
        }
        self.parse_schedule(agent)
    }

    /// [`EmergenceConfig::schedule`] whether emergence is on or off: `None` only for
    /// `off`, so a mistake shows before emergence is switched on.
    fn parse_schedule(&self, agent: &str) -> Result<Option<Schedule>> {
        let expression = self.agents.get(agent).unwrap_or(&self.cron);
        if expression.trim().eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        let local = match self.timezone.to_ascii_lowercase().as_str() {
            "utc" => false,
            "local" => true,
            other => {
                return Err(Error::Config(format!(
                    "emergence timezone is {other:?}; use utc or local"
                )));
            }
        };
        Schedule::parse(expression, local).map(Some)
    }
}

impl LifecycleConfig {
    /// Checks every value's range.
    pub fn validate(&self) -> Result<()> {
        if !(2..=10_000).contains(&self.memory_window) {
            return Err(Error::Config(format!(
                "memory_window is {}; it must be from 2 to 10000",
                self.memory_window
            )));
        }
        let x = &self.extraction;
        for (name, value, range) in [
            ("extraction.min_messages", x.min_messages, 1..=10_000),
            ("extraction.min_user_chars", x.min_user_chars, 0..=100_000),
            (
                "extraction.transcript_messages",
                x.transcript_messages,
                1..=1000,
            ),
            ("extraction.message_chars", x.message_chars, 1..=100_000),
            ("emergence.days", self.emergence.days, 1..=366),
        ] {
            if !range.contains(&value) {
                return Err(Error::Config(format!(
                    "{name} is {value}; it must be from {} to {}",
                    range.start(),
                    range.end()
                )));
            }
        }
        if !(1..=100_000).contains(&self.consolidation_max_tokens) {
            return Err(Error::Config(format!(
                "consolidation_max_tokens is {}; it must be from 1 to 100000",
                self.consolidation_max_tokens
            )));
        }
        if !(1..=100_000).contains(&x.max_tokens) {
            return Err(Error::Config(format!(
                "extraction.max_tokens is {}; it must be from 1 to 100000",
                x.max_tokens
            )));
        }
        if x.cooldown_minutes > 10_080 {
            return Err(Error::Config(format!(
                "extraction.cooldown_minutes is {}; at most a week (10080)",
                x.cooldown_minutes
            )));
        }
        // Checked when emergence is off too: a mistake should show before it is switched on.
        self.emergence.parse_schedule("")?;
        for (agent, expression) in &self.emergence.agents {
            self.emergence.parse_schedule(agent).map_err(|e| {
                Error::Config(format!("emergence.agents.{agent} ({expression}): {e}"))
            })?;
        }
        Ok(())
    }

    /// The options a consolidation runs with.
    pub fn consolidation(&self, archive_all: bool) -> crate::ConsolidateOptions {
        crate::ConsolidateOptions {
            window: self.memory_window,
            archive_all,
            max_tokens: self.consolidation_max_tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_field_cron_expressions_only() {
        let s = Schedule::parse("0 2 * * *", false).unwrap();
        let t = chrono::DateTime::parse_from_rfc3339("2026-03-10T01:59:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(
            s.next_after(t).unwrap().to_rfc3339(),
            "2026-03-10T02:00:00+00:00"
        );
        assert_eq!(
            s.next_after(s.next_after(t).unwrap()).unwrap().to_rfc3339(),
            "2026-03-11T02:00:00+00:00"
        );
        // Whatever fraction of a second the moment has (a scheduler's ticks have one).
        for (at, next) in [
            (
                "2026-03-10T01:59:59.999999999Z",
                "2026-03-10T02:00:00+00:00",
            ),
            ("2026-03-10T02:00:00.3Z", "2026-03-11T02:00:00+00:00"),
        ] {
            let at = chrono::DateTime::parse_from_rfc3339(at).unwrap();
            assert_eq!(s.next_after(at.to_utc()).unwrap().to_rfc3339(), next);
        }
        for bad in [
            "0 0 2 * * *",
            "0 2 * *",
            "61 2 * * *",
            "x y z a b",
            "",
            "0 0 30 2 *",
            "0 0 31 4 *",
        ] {
            assert!(Schedule::parse(bad, false).is_err(), "{bad}");
        }
        let never = Schedule::parse("0 0 30 2 *", false).unwrap_err();
        assert!(never.to_string().contains("never fires"), "{never}");
        // Once in four years is a schedule.
        let leap = Schedule::parse("0 0 29 2 *", false).unwrap();
        assert_eq!(
            leap.next_after(t).unwrap().to_rfc3339(),
            "2028-02-29T00:00:00+00:00"
        );
    }

    #[test]
    fn daily_notes_are_chosen_per_agent_over_the_front_ends_default() {
        let mut c = DailyNotesConfig::default();
        assert_eq!(c.for_agent("a", DailyNotes::Qanot), DailyNotes::Qanot);
        assert_eq!(c.for_agent("a", DailyNotes::Off), DailyNotes::Off);
        c.format = Some(DailyNotes::Qanot);
        c.agents.insert("quiet".into(), DailyNotes::Off);
        assert_eq!(c.for_agent("a", DailyNotes::Off), DailyNotes::Qanot);
        assert_eq!(c.for_agent("quiet", DailyNotes::Qanot), DailyNotes::Off);
        let parsed: LifecycleConfig = serde_json::from_value(serde_json::json!({
            "daily_notes": {"format": "off"}, "memory_skill": false
        }))
        .unwrap();
        assert_eq!(parsed.daily_notes.format, Some(DailyNotes::Off));
        assert!(!parsed.memory_skill && LifecycleConfig::default().memory_skill);
        let bad = serde_json::from_value::<LifecycleConfig>(
            serde_json::json!({"daily_notes": {"format": "bub"}}),
        )
        .unwrap_err();
        assert!(bad.to_string().contains("qanot"), "{bad}");
    }

    #[test]
    fn ranges_are_checked_by_name() {
        let mut c = LifecycleConfig::default();
        c.validate().unwrap();
        c.emergence
            .agents
            .insert("night-owl".into(), "0 25 * * *".into());
        assert!(c.validate().unwrap_err().to_string().contains("night-owl"));
        c.emergence.agents.insert("night-owl".into(), "off".into());
        c.validate().unwrap();
        assert!(c.emergence.schedule("night-owl").unwrap().is_none());
        // Emergence switched off is still checked, so a mistake shows before it is on.
        c.emergence.enabled = false;
        c.emergence.timezone = "mars".into();
        assert!(c.validate().unwrap_err().to_string().contains("mars"));
        c.emergence.timezone = "utc".into();
        c.extraction.min_messages = 0;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("min_messages")
        );
    }
}

/// Dify's `file_upload_config` for rebuilding a message's file references into a model's
/// content parts (history and context with `attachments=parts`): the `[attachments]` table
/// of `memtape.toml`. The references on the tape are never changed by it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AttachmentsConfig {
    /// The file types rebuilt (Dify's `allowed_file_types`; default `image` and
    /// `document`): a file of another type is left out of the parts, as Dify leaves it out.
    pub allowed_file_types: Vec<memtape_core::FileType>,
    /// The detail images are sent with (Dify's `image_config.detail`, default `low`).
    pub image_detail: ImageDetail,
}

impl Default for AttachmentsConfig {
    fn default() -> Self {
        AttachmentsConfig {
            allowed_file_types: vec![
                memtape_core::FileType::Image,
                memtape_core::FileType::Document,
            ],
            image_detail: ImageDetail::Low,
        }
    }
}

impl AttachmentsConfig {
    /// Refuses a file of a type Dify's `allowed_file_types` leaves out, naming it.
    pub fn allows(&self, file_type: memtape_core::FileType) -> Result<()> {
        if self.allowed_file_types.contains(&file_type) {
            return Ok(());
        }
        let name = |t: &memtape_core::FileType| {
            serde_json::to_value(t)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        };
        let allowed: Vec<String> = self.allowed_file_types.iter().map(name).collect();
        Err(Error::Config(format!(
            "a file of type {} is not allowed ([attachments] allowed_file_types: {})",
            name(&file_type),
            allowed.join(", ")
        )))
    }
}

/// How much of an image the model looks at (OpenAI's `detail`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageDetail {
    /// Low detail (Dify's default).
    #[default]
    Low,
    /// High detail.
    High,
}

impl ImageDetail {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageDetail::Low => "low",
            ImageDetail::High => "high",
        }
    }
}
