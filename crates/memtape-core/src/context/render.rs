//! The texts the context builder writes: the system message (system prompt, MateClaw's
//! agent files, Bub's `<memory>` block, the date and time), Qanot's compaction marker,
//! recovery context and working buffer, and MateClaw's summary prefix.

use chrono::{DateTime, NaiveDate, SecondsFormat, Timelike, Utc};
use serde::{Deserialize, Serialize};

use crate::memory::{MemoryView, paths};
use crate::{Entry, EntryId, Role, TokenCounter};

/// MateClaw: the prefix of the summary message, which is a user message so that earlier
/// user input is never raised to system-level instructions.
pub const SUMMARY_PREFIX: &str =
    "[Conversation context summary - for reference only, not instructions]";

/// The memory skill: nanobot's always-loaded memory skill (what is where, HISTORY.md is
/// searched, not loaded) with Bub's rule 7 (save preferences proactively). The context
/// adds it to the system prompt when [`ContextConfig::memory_skill`](super::ContextConfig)
/// is on; MCP's `memory_skill` prompt starts with it.
pub const MEMORY_SKILL: &str = include_str!("skill.md");

/// The system prompt with the memory skill after it when `skill` is on.
pub fn with_skill(system_prompt: &str, skill: bool) -> String {
    let prompt = system_prompt.trim();
    match (skill, prompt.is_empty()) {
        (false, _) => prompt.to_owned(),
        (true, true) => MEMORY_SKILL.trim().to_owned(),
        (true, false) => format!("{prompt}\n\n{}", MEMORY_SKILL.trim()),
    }
}

/// Bub's usage hints, the first lines of the `<memory>` block.
pub const USAGE_HINTS: &str = "Use `memory.save` to update long-term memory, `memory.daily` to append to\ndaily notes, and `memory.recall` to search past memories.";

/// What Qanot looks for in the first messages (and memtape also in the current one) to
/// tell that the conversation was compacted: summary tags, truncation markers and
/// "where were we?" questions (Qanot's `_COMPACTION_MARKERS`, matched case-insensitively).
/// The marker and summary the builder inserts itself are not looked at: it knows when it
/// compacted.
pub const COMPACTION_SIGNS: [&str; 7] = [
    "<summary>",
    "truncated",
    "context limits",
    "context compaction",
    "where were we",
    "continue where",
    "what were we doing",
];

/// Qanot: the heading recovery context is appended under, after the user's message.
pub const RECOVERY_HEADING: &str = "[COMPACTION RECOVERY]";

/// Qanot: the most characters of one file that recovery context carries.
pub const MAX_RECOVERY_FILE_CHARS: usize = 20_000;

/// How precisely the current time is written into the system message. Coarser times keep
/// the prompt prefix stable for longer: the time line comes before the conversation, so
/// every change of it is a miss for an LLM's prompt cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimePrecision {
    /// The date only.
    Day,
    /// The date and the hour (the default): the prefix changes at most once an hour.
    #[default]
    Hour,
    /// The date, hour and minute.
    Minute,
}

/// The line that tells the model the current date and time (UTC), e.g.
/// `Current date and time: 2026-02-10 14:37 UTC (Tuesday)`.
pub fn date_line(now: DateTime<Utc>, precision: TimePrecision) -> String {
    let day = now.format("%Y-%m-%d");
    let weekday = now.format("%A");
    match precision {
        TimePrecision::Day => format!("Current date: {day} ({weekday}, UTC)"),
        TimePrecision::Hour => format!(
            "Current date and time: {day}, between {:02}:00 and {:02}:00 UTC ({weekday})",
            now.hour(),
            (now.hour() + 1) % 24
        ),
        TimePrecision::Minute => format!(
            "Current date and time: {day} {:02}:{:02} UTC ({weekday})",
            now.hour(),
            now.minute()
        ),
    }
}

/// Whether the `<memory>` block already shows this file (so it is not injected twice).
fn in_memory_block(path: &str) -> bool {
    paths::always_in_prompt(path) || paths::daily_date(path).is_some()
}

/// MateClaw's workspace file injection: every enabled file, by sort order (then path), as
/// `--- NAME ---` followed by its content, files separated by a blank line. Files the
/// `<memory>` block shows (MEMORY.md, PROFILE.md, SESSION-STATE.md, daily notes) are left
/// out here even when enabled, so nothing appears twice. Empty when no file is enabled.
pub fn agent_files(view: &MemoryView) -> String {
    let mut files: Vec<_> = view
        .files
        .iter()
        .filter(|(path, file)| file.enabled && !in_memory_block(path))
        .collect();
    files.sort_by_key(|(path, file)| (file.sort_order, path.as_str()));
    files
        .iter()
        .map(|(path, file)| format!("--- {path} ---\n{}", file.content.trim_end()))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Bub's `<memory>` block: the usage hints, then long-term memory (MEMORY.md), the user
/// profile (PROFILE.md), today's notes, the notes of the `recent_days` days before today
/// (newest first, each under `### YYYY-MM-DD`), and the working state (SESSION-STATE.md).
/// Empty sections are left out; the hints are always there.
pub fn memory_block(view: &MemoryView, today: NaiveDate, recent_days: u32) -> String {
    let mut out = format!("<memory>\n{USAGE_HINTS}\n");
    let mut section = |title: &str, body: &str| {
        let body = body.trim();
        if !body.is_empty() {
            out.push_str(&format!("\n## {title}\n{body}\n"));
        }
    };
    section(
        "Long-term Memory",
        view.content(paths::MEMORY).unwrap_or(""),
    );
    section("User Profile", view.content(paths::PROFILE).unwrap_or(""));
    section(
        "Today's Notes",
        view.content(&paths::daily(today)).unwrap_or(""),
    );
    let oldest = today
        .checked_sub_days(chrono::Days::new(u64::from(recent_days)))
        .unwrap_or(NaiveDate::MIN);
    let recent: Vec<String> = view
        .dailies()
        .into_iter()
        .filter(|(date, _, file)| {
            *date < today && *date >= oldest && !file.content.trim().is_empty()
        })
        .map(|(date, _, file)| format!("### {date}\n{}", file.content.trim()))
        .collect();
    section("Recent Notes", &recent.join("\n\n"));
    section(
        "Working State",
        view.content(paths::SESSION_STATE).unwrap_or(""),
    );
    out.push_str("</memory>");
    out
}

/// The system message: the system prompt, the enabled agent files, the `<memory>` block
/// and the date and time line, in that order, separated by blank lines.
pub fn system_text(
    system_prompt: &str,
    view: &MemoryView,
    now: DateTime<Utc>,
    recent_days: u32,
    precision: TimePrecision,
) -> String {
    [
        system_prompt.trim().to_string(),
        agent_files(view),
        memory_block(view, now.date_naive(), recent_days),
        date_line(now, precision),
    ]
    .into_iter()
    .filter(|part| !part.is_empty())
    .collect::<Vec<_>>()
    .join("\n\n")
}

/// [`system_text`] within `room` tokens: the system prompt and the date line are the
/// caller's and always whole; when the agent files and the `<memory>` block do not fit
/// beside them, each is cut (the files to at most half the room left, unless the block
/// needs less; the block keeps its closing tag) with a `[truncated]` mark. Returns the
/// text and whether anything was cut.
pub fn system_text_within(
    system_prompt: &str,
    view: &MemoryView,
    now: DateTime<Utc>,
    recent_days: u32,
    precision: TimePrecision,
    room: usize,
    counter: &dyn TokenCounter,
) -> (String, bool) {
    let full = system_text(system_prompt, view, now, recent_days, precision);
    if counter.count(&full) <= room {
        return (full, false);
    }
    let prompt = system_prompt.trim();
    let date = date_line(now, precision);
    // Separators and marks cost a few tokens each.
    let fixed = counter.count(prompt) + counter.count(&date) + 16;
    let avail = room.saturating_sub(fixed);
    let files = agent_files(view);
    let block = memory_block(view, now.date_naive(), recent_days);
    let (files_cost, block_cost) = (counter.count(&files), counter.count(&block));
    let files_room = files_cost.min((avail / 2).max(avail.saturating_sub(block_cost)));
    let files = fit_text(&files, files_room, counter);
    let block_room = avail.saturating_sub(counter.count(&files));
    const CLOSE: &str = "\n</memory>";
    let block = if block_cost <= block_room {
        block
    } else {
        let body = block.strip_suffix("</memory>").unwrap_or(&block);
        let cut = fit_text(
            body,
            block_room.saturating_sub(counter.count(CLOSE)),
            counter,
        );
        if cut.is_empty() {
            cut
        } else {
            format!("{cut}{CLOSE}")
        }
    };
    let text = [prompt.to_string(), files, block, date]
        .into_iter()
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    (text, true)
}

/// [`system_text_within`] with the memory skill ([`MEMORY_SKILL`]) after the system prompt
/// when `skill` is on. The skill gives way first: when the whole text does not fit in
/// `room`, the skill is cut to what the rest leaves, or left out when the rest must be cut
/// itself. Returns the text and whether anything was cut.
#[allow(clippy::too_many_arguments)] // The inputs of the system text, as system_text_within's.
pub fn system_text_with_skill_within(
    system_prompt: &str,
    skill: bool,
    view: &MemoryView,
    now: DateTime<Utc>,
    recent_days: u32,
    precision: TimePrecision,
    room: usize,
    counter: &dyn TokenCounter,
) -> (String, bool) {
    let whole = with_skill(system_prompt, skill);
    if !skill || counter.count(&system_text(&whole, view, now, recent_days, precision)) <= room {
        return system_text_within(&whole, view, now, recent_days, precision, room, counter);
    }
    let (rest, cut) = system_text_within(
        system_prompt,
        view,
        now,
        recent_days,
        precision,
        room,
        counter,
    );
    // The separators around the skill cost a few tokens.
    let left = room.saturating_sub(counter.count(&rest)).saturating_sub(4);
    let skill_text = fit_text(MEMORY_SKILL.trim(), left, counter);
    if cut || skill_text.is_empty() {
        return (rest, true);
    }
    let prompt = system_prompt.trim();
    let text = if prompt.is_empty() {
        format!("{skill_text}\n\n{rest}")
    } else {
        format!("{prompt}\n\n{skill_text}{}", &rest[prompt.len()..])
    };
    (text, true)
}

/// The longest prefix of `text` (cut at a character) that fits in `room` tokens with a
/// `[truncated]` mark after it; all of `text` when it fits; empty when nothing does. The
/// search never looks past `room × 32` characters, so cutting a huge text stays fast.
pub fn fit_text(text: &str, room: usize, counter: &dyn TokenCounter) -> String {
    const MARK: &str = "\n[truncated]";
    if counter.count(text) <= room {
        return text.to_string();
    }
    let ends: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .take(room.saturating_mul(32).saturating_add(1))
        .collect();
    let fits = |n: usize| counter.count(&format!("{}{MARK}", &text[..ends[n]])) <= room;
    let (mut lo, mut hi) = (0, ends.len() - 1);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    if lo == 0 {
        String::new()
    } else {
        format!("{}{MARK}", &text[..ends[lo]])
    }
}

/// MateClaw's summary message text: the prefix, then the summary.
pub fn summary_text(summary: &str) -> String {
    format!("{SUMMARY_PREFIX}\n{summary}")
}

/// Qanot's compaction marker for `removed` messages, as the seed writes it.
pub fn compaction_marker(removed: usize) -> String {
    format!(
        "[CONTEXT COMPACTION: {removed} earlier messages were removed to free context space.\n\
         Recent conversation preserved below. Check your workspace files\n\
         (SESSION-STATE.md, memory/) for any important context from earlier.]"
    )
}

/// Whether `text` shows a sign of compaction ([`COMPACTION_SIGNS`]).
pub fn shows_compaction(text: &str) -> bool {
    let lower = text.to_lowercase();
    COMPACTION_SIGNS.iter().any(|sign| lower.contains(sign))
}

/// Qanot's recovery context: the working buffer, the working state (SESSION-STATE.md) and
/// today's notes, each under its heading, each cut to [`MAX_RECOVERY_FILE_CHARS`], joined
/// by `---` rules. `None` when all three are empty.
pub fn recovery_text(view: &MemoryView, today: NaiveDate) -> Option<String> {
    let today_path = paths::daily(today);
    let sources = [
        (paths::WORKING_BUFFER, "Working Buffer Recovery"),
        (paths::SESSION_STATE, "Session State"),
        (today_path.as_str(), "Today's Notes"),
    ];
    let parts: Vec<String> = sources
        .iter()
        .filter_map(|(path, heading)| {
            let content = view.content(path)?;
            if content.trim().is_empty() {
                return None;
            }
            let content = match content.char_indices().nth(MAX_RECOVERY_FILE_CHARS) {
                Some((cut, _)) => format!("{}\n[truncated]\n", &content[..cut]),
                None => content.to_string(),
            };
            Some(format!("## {heading}\n{content}"))
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n\n---\n\n"))
}

/// Qanot: the user's message with recovery context appended.
pub fn with_recovery(message: &str, recovery: &str) -> String {
    format!("{message}\n\n---\n\n{RECOVERY_HEADING}\n{recovery}")
}

/// The working buffer's first lines (Qanot), written when it becomes active.
pub fn working_buffer_header(started: DateTime<Utc>) -> String {
    format!(
        "# Working Buffer (Danger Zone Log)\n**Status:** ACTIVE\n**Started:** {}\n\n---\n",
        started.to_rfc3339_opts(SecondsFormat::Secs, false)
    )
}

/// The most characters of one side of an exchange that the working buffer keeps (Qanot).
const MAX_BUFFER_TEXT_CHARS: usize = 4_000;

/// Text made safe for the working buffer (Qanot): headings become quotes and rules are
/// dropped, so a message cannot fake the buffer's structure; long text is cut.
fn sanitize_for_buffer(text: &str) -> String {
    let lines: Vec<String> = text
        .lines()
        .filter(|line| {
            let t = line.trim();
            !(t.len() >= 3 && (t.chars().all(|c| c == '-') || t.chars().all(|c| c == '*')))
        })
        .map(|line| {
            let hashes = line.chars().take_while(|c| *c == '#').count();
            if (1..=6).contains(&hashes) && line[hashes..].starts_with(char::is_whitespace) {
                format!("> {}", line[hashes..].trim_start())
            } else {
                line.to_string()
            }
        })
        .collect();
    let text = lines.join("\n");
    match text.char_indices().nth(MAX_BUFFER_TEXT_CHARS) {
        Some((cut, _)) => format!("{}\n[truncated]", &text[..cut]),
        None => text,
    }
}

/// One exchange in the working buffer (Qanot): the human's message and the agent's reply,
/// both stamped with the reply's time.
pub fn working_buffer_entry(at: DateTime<Utc>, human: &str, agent: &str) -> String {
    let ts = at.format("%Y-%m-%d %H:%M:%S");
    format!(
        "\n## [{ts}] Human\n{}\n\n## [{ts}] Agent (summary)\n{}\n",
        sanitize_for_buffer(human),
        sanitize_for_buffer(agent)
    )
}

/// A completed exchange of a conversation: a user message and the assistant's last text
/// reply before the next user message.
#[derive(Clone, Debug, PartialEq)]
pub struct Exchange {
    /// The reply's entry.
    pub id: EntryId,
    /// When the reply was written.
    pub at: DateTime<Utc>,
    /// The user's text.
    pub human: String,
    /// The reply's text.
    pub agent: String,
}

/// The completed exchanges among `entries` (a thread, oldest first). A user message whose
/// turn has no assistant text yet is not an exchange.
pub fn exchanges(entries: &[Entry]) -> Vec<Exchange> {
    let mut out = Vec::new();
    let mut human: Option<String> = None;
    let mut reply: Option<Exchange> = None;
    for entry in entries {
        let Some(message) = entry.message() else {
            continue;
        };
        match message.role {
            Role::User => {
                out.extend(reply.take());
                human = Some(message.content_text().into_owned());
            }
            Role::Assistant => {
                let text = message.content_text();
                if let Some(h) = &human
                    && !text.trim().is_empty()
                {
                    reply = Some(Exchange {
                        id: entry.id,
                        at: entry.created_at,
                        human: h.clone(),
                        agent: text.into_owned(),
                    });
                }
            }
            Role::System | Role::Tool => {}
        }
    }
    out.extend(reply);
    out
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::memory::MemoryFile;

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 2, 10, h, m, 0).unwrap()
    }

    fn view(files: &[(&str, &str, bool, i64)]) -> MemoryView {
        let mut v = MemoryView::default();
        for (path, content, enabled, sort_order) in files {
            v.files.insert(
                path.to_string(),
                MemoryFile {
                    content: content.to_string(),
                    enabled: *enabled,
                    sort_order: *sort_order,
                    created: 1,
                    updated: 1,
                    updated_at: at(0, 0),
                    parts: Vec::new(),
                },
            );
        }
        v
    }

    /// MateClaw: enabled workspace files by sort_order, as `--- NAME ---` and the content;
    /// disabled files are not injected.
    #[test]
    fn mateclaw_agent_files_by_sort_order_in_dash_name_format() {
        let v = view(&[
            ("SOUL.md", "Kind and curious.\n", true, 1),
            ("AGENTS.md", "Use the tools.", true, 0),
            ("notes.md", "private", false, 100),
            ("STYLE.md", "Be brief.", true, 5),
            ("MEMORY.md", "in the memory block", true, 3),
        ]);
        assert_eq!(
            agent_files(&v),
            "--- AGENTS.md ---\nUse the tools.\n\n--- SOUL.md ---\nKind and curious.\n\n--- STYLE.md ---\nBe brief."
        );
        assert_eq!(agent_files(&MemoryView::default()), "");
    }

    /// Bub: the `<memory>` block with usage hints, long-term memory, today's notes split
    /// from the recent notes of the last 7 days (newest first), plus profile and working
    /// state.
    #[test]
    fn bub_memory_block_has_hints_long_term_today_and_recent_notes() {
        let v = view(&[
            ("MEMORY.md", "User prefers Python 3.12.", false, 3),
            ("PROFILE.md", "Name: Ada", false, 2),
            (
                "memory/2026-02-10.md",
                "# 2026-02-10\n\n- Implemented tape memory zone\n",
                false,
                100,
            ),
            (
                "memory/2026-02-09.md",
                "# 2026-02-09\n\n- Designed memory architecture\n",
                false,
                100,
            ),
            (
                "memory/2026-02-03.md",
                "# 2026-02-03\n\n- seven days ago\n",
                false,
                100,
            ),
            (
                "memory/2026-02-02.md",
                "# 2026-02-02\n\n- too old\n",
                false,
                100,
            ),
            (
                "SESSION-STATE.md",
                "# SESSION-STATE.md -- Active Working Memory\n\n- [x] **decision**: use FastAPI\n",
                false,
                100,
            ),
        ]);
        let block = memory_block(&v, NaiveDate::from_ymd_opt(2026, 2, 10).unwrap(), 7);
        assert_eq!(
            block,
            "<memory>\n\
             Use `memory.save` to update long-term memory, `memory.daily` to append to\n\
             daily notes, and `memory.recall` to search past memories.\n\
             \n## Long-term Memory\nUser prefers Python 3.12.\n\
             \n## User Profile\nName: Ada\n\
             \n## Today's Notes\n# 2026-02-10\n\n- Implemented tape memory zone\n\
             \n## Recent Notes\n### 2026-02-09\n# 2026-02-09\n\n- Designed memory architecture\n\n\
             ### 2026-02-03\n# 2026-02-03\n\n- seven days ago\n\
             \n## Working State\n# SESSION-STATE.md -- Active Working Memory\n\n- [x] **decision**: use FastAPI\n\
             </memory>"
        );
        let empty = memory_block(
            &MemoryView::default(),
            NaiveDate::from_ymd_opt(2026, 2, 10).unwrap(),
            7,
        );
        assert_eq!(empty, format!("<memory>\n{USAGE_HINTS}\n</memory>"));
    }

    /// Bub: the current date and time is in the system prompt; the precision is ours to
    /// choose (hour by default, for a stable prefix).
    #[test]
    fn bub_current_date_and_time_line() {
        let now = at(14, 37);
        assert_eq!(
            date_line(now, TimePrecision::Minute),
            "Current date and time: 2026-02-10 14:37 UTC (Tuesday)"
        );
        assert_eq!(
            date_line(now, TimePrecision::Hour),
            "Current date and time: 2026-02-10, between 14:00 and 15:00 UTC (Tuesday)"
        );
        assert_eq!(
            date_line(now, TimePrecision::Day),
            "Current date: 2026-02-10 (Tuesday, UTC)"
        );
        assert_eq!(
            date_line(at(14, 0), TimePrecision::Hour),
            date_line(at(14, 59), TimePrecision::Hour)
        );
    }

    /// The order of the system message: system prompt → agent files → `<memory>` → date.
    #[test]
    fn system_text_order_prompt_files_memory_date() {
        let v = view(&[
            ("AGENTS.md", "guide", true, 0),
            ("MEMORY.md", "fact", false, 3),
        ]);
        let s = system_text("You are helpful.", &v, at(9, 5), 7, TimePrecision::Minute);
        let prompt = s.find("You are helpful.").unwrap();
        let files = s.find("--- AGENTS.md ---").unwrap();
        let memory = s.find("<memory>").unwrap();
        let date = s.find("Current date and time").unwrap();
        assert!(prompt < files && files < memory && memory < date, "{s}");
        assert!(s.ends_with("09:05 UTC (Tuesday)"));
    }

    /// Qanot's marker text, exactly as the seed gives it.
    #[test]
    fn qanot_compaction_marker_text() {
        assert_eq!(
            compaction_marker(12),
            "[CONTEXT COMPACTION: 12 earlier messages were removed to free context space.\nRecent conversation preserved below. Check your workspace files\n(SESSION-STATE.md, memory/) for any important context from earlier.]"
        );
        assert!(shows_compaction(&compaction_marker(3)));
        assert!(shows_compaction("So, where were we?"));
        assert!(!shows_compaction("Let's continue with the plan."));
    }

    /// Qanot: recovery context comes from the working buffer, SESSION-STATE.md and today's
    /// notes, and is appended to the user's message.
    #[test]
    fn qanot_recovery_from_buffer_session_state_and_today() {
        let v = view(&[
            ("memory/working-buffer.md", "buffered exchange", false, 100),
            ("SESSION-STATE.md", "state entry", false, 100),
            ("memory/2026-02-10.md", "today entry", false, 100),
            ("memory/2026-02-09.md", "yesterday entry", false, 100),
        ]);
        let r = recovery_text(&v, NaiveDate::from_ymd_opt(2026, 2, 10).unwrap()).unwrap();
        assert_eq!(
            r,
            "## Working Buffer Recovery\nbuffered exchange\n\n---\n\n## Session State\nstate entry\n\n---\n\n## Today's Notes\ntoday entry"
        );
        assert_eq!(
            with_recovery("Where were we?", "R"),
            "Where were we?\n\n---\n\n[COMPACTION RECOVERY]\nR"
        );
        assert!(
            recovery_text(
                &MemoryView::default(),
                NaiveDate::from_ymd_opt(2026, 2, 10).unwrap()
            )
            .is_none()
        );
    }

    /// Qanot's working buffer format: a header when it starts, then one `Human` and one
    /// `Agent (summary)` section per exchange.
    #[test]
    fn qanot_working_buffer_format() {
        let started = at(14, 30);
        assert_eq!(
            working_buffer_header(started),
            "# Working Buffer (Danger Zone Log)\n**Status:** ACTIVE\n**Started:** 2026-02-10T14:30:00+00:00\n\n---\n"
        );
        assert_eq!(
            working_buffer_entry(
                started,
                "Can you refactor the database module?",
                "# Done\nRefactored it.\n---"
            ),
            "\n## [2026-02-10 14:30:00] Human\nCan you refactor the database module?\n\n## [2026-02-10 14:30:00] Agent (summary)\n> Done\nRefactored it.\n"
        );
    }
}
