//! Facts in a markdown memory file, for lossless rewrites. A model that rewrites MEMORY.md
//! or PROFILE.md in full (nanobot's consolidation, MateClaw's extraction and emergence) can
//! leave facts out; [`dropped`] finds each one so it can be kept on the tape as a
//! `memory.dropped` event, [`carry_over`] keeps the lines another writer added while the
//! model was thinking, and [`restore`] puts a dropped fact back where it was.
//!
//! A fact is a line with words in it: headings, blank lines, fences and rules are
//! structure, not facts. Two lines state the same fact when their [normal forms](normal)
//! match, so a rewrite that only changes a bullet, case, spacing or a final full stop drops
//! nothing; a fact folded into a longer line ("likes tea" into "likes tea and coffee") is
//! kept too.

use serde::{Deserialize, Serialize};

/// One fact line of a memory file and the heading it sits under.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fact {
    /// The line as written (without its line break).
    pub text: String,
    /// The nearest heading above it (`## Preferences`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
}

/// Whether `line` is a heading.
fn is_heading(line: &str) -> bool {
    let t = line.trim_start();
    let hashes = t.chars().take_while(|c| *c == '#').count();
    (1..=6).contains(&hashes) && t[hashes..].starts_with(' ')
}

/// The fact lines of `content`, in order, with their sections.
pub fn facts(content: &str) -> Vec<Fact> {
    let mut section = None;
    let mut out = Vec::new();
    for line in content.lines() {
        if is_heading(line) {
            section = Some(line.trim().to_owned());
            continue;
        }
        if normal(line).is_empty() {
            continue;
        }
        out.push(Fact {
            text: line.trim_end().to_owned(),
            section: section.clone(),
        });
    }
    out
}

/// A line's normal form: list markers, emphasis, case, spacing and final punctuation
/// taken away. Empty for a line without a letter or digit (a rule, a fence, a lone bullet).
pub fn normal(line: &str) -> String {
    let mut t = line.trim();
    // A list marker: "-", "*", "+", "1." or "1)", and a task box.
    for marker in ["- ", "* ", "+ "] {
        if let Some(rest) = t.strip_prefix(marker) {
            t = rest.trim_start();
            break;
        }
    }
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 {
        let rest = &t[digits..];
        if let Some(rest) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            t = rest.trim_start();
        }
    }
    for box_ in ["[ ] ", "[x] ", "[X] "] {
        if let Some(rest) = t.strip_prefix(box_) {
            t = rest.trim_start();
        }
    }
    let words: Vec<String> = t
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| matches!(c, '*' | '_' | '`'))
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect();
    let joined = words.join(" ");
    let joined = joined.trim_end_matches(['.', ';', ',', '!']).to_owned();
    if joined.chars().any(char::is_alphanumeric) {
        joined
    } else {
        String::new()
    }
}

/// The normal form of a whole text, for "is this fact still in there" checks.
fn normal_text(content: &str) -> String {
    content
        .lines()
        .map(normal)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether the fact `normal_line` is stated in `text` (a [`normal_text`]): as a line of
/// its own, or as whole words within a longer one ("likes tea" is in "likes tea daily",
/// not in "dislikes teapots").
fn stated_in(normal_line: &str, text: &str) -> bool {
    text.match_indices(normal_line).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + normal_line.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// The facts of `old` that `new` no longer states, each once, in the order of `old`, as a
/// `memory.dropped` event holds them (a control character becomes a space, a line past
/// 16 KiB is cut).
pub fn dropped(old: &str, new: &str) -> Vec<Fact> {
    let new_text = normal_text(new);
    let mut seen = std::collections::HashSet::new();
    facts(old)
        .into_iter()
        .filter(|f| !stated_in(&normal(&f.text), &new_text))
        .map(recordable)
        .filter(|f| seen.insert(normal(&f.text)))
        .collect()
}

/// `fact` as a `memory.dropped` event can hold it: one line of text of bounded size. A
/// control character but a tab (a form feed, an escape sequence's ESC) becomes a space,
/// and a line longer than the event's limit (16 KiB) keeps what fits of it from its first
/// letter or digit on; any other fact is unchanged. Without this a rewrite that left such
/// a line out could never be recorded.
fn recordable(fact: Fact) -> Fact {
    let clean = |t: &str| -> String {
        let t: String = t
            .chars()
            .map(|c| if c.is_control() && c != '\t' { ' ' } else { c })
            .collect();
        let t = t.trim_end();
        if t.len() <= crate::events::DROPPED_TEXT_MAX {
            return t.to_owned();
        }
        let t = t
            .find(char::is_alphanumeric)
            .map_or(t.trim_start(), |i| &t[i..]);
        let mut end = crate::events::DROPPED_TEXT_MAX.min(t.len());
        while !t.is_char_boundary(end) {
            end -= 1;
        }
        t[..end].trim_end().to_owned()
    };
    Fact {
        text: clean(&fact.text),
        section: fact.section.as_deref().map(clean),
    }
}

/// Whether `content` states `fact` (after normalisation).
pub fn states(content: &str, fact: &str) -> bool {
    let n = normal(fact);
    !n.is_empty() && stated_in(&n, &normal_text(content))
}

/// `rewrite` (made by a model from `seen`) with the fact lines that `current` gained since
/// `seen` added at its end, unless the rewrite already states them: a line another writer
/// added while the model was working is not lost, nor recorded as dropped.
pub fn carry_over(seen: &str, current: &str, rewrite: &str) -> String {
    let seen_text = normal_text(seen);
    let mut out = rewrite.to_owned();
    // `normal_text(&out)`, kept up to date as lines are added rather than made again for
    // each line of `current` (which made a large file quadratic).
    let mut out_text = normal_text(rewrite);
    for fact in facts(current) {
        let n = normal(&fact.text);
        if stated_in(&n, &seen_text) || stated_in(&n, &out_text) {
            continue;
        }
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&fact.text);
        out.push('\n');
        if !n.is_empty() {
            if !out_text.is_empty() {
                out_text.push('\n');
            }
            out_text.push_str(&n);
        }
    }
    out
}

/// `content` with `fact` back in it: at the end of its section when the file still has that
/// heading, else at the end of the file. Unchanged when the file already states it.
pub fn restore(content: &str, fact: &Fact) -> String {
    if states(content, &fact.text) {
        return content.to_owned();
    }
    let line = format!("{}\n", fact.text.trim_end());
    let lines: Vec<&str> = content.split_inclusive('\n').collect();
    if let Some(section) = &fact.section
        && let Some(start) = lines.iter().position(|l| l.trim() == section)
    {
        // The section runs to the next heading; the fact goes after its last non-blank line.
        let end = lines[start + 1..]
            .iter()
            .position(|l| is_heading(l))
            .map_or(lines.len(), |i| start + 1 + i);
        let at = (start + 1..end)
            .rev()
            .find(|&i| !lines[i].trim().is_empty())
            .map_or(start + 1, |i| i + 1);
        let mut out = String::with_capacity(content.len() + line.len() + 1);
        for l in &lines[..at] {
            out.push_str(l);
        }
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&line);
        for l in &lines[at..] {
            out.push_str(l);
        }
        return out;
    }
    let mut out = content.to_owned();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&line);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "# Memory\n\n## Preferences\n- Likes green tea.\n- Uses **vim**\n\n## Work\n- Works at Acme\n---\n";

    #[test]
    fn a_rewrite_that_only_restyles_drops_nothing() {
        let new = "# Memory\n\n## Preferences\n* likes green tea\n* Uses vim.\n## Work\n1. works at  acme\n";
        assert_eq!(dropped(OLD, new), Vec::<Fact>::new());
    }

    #[test]
    fn a_fact_left_out_is_dropped_with_its_section() {
        let new = "# Memory\n\n## Preferences\n- Likes green tea and oolong\n";
        let gone = dropped(OLD, new);
        let texts: Vec<_> = gone.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(texts, ["- Uses **vim**", "- Works at Acme"]);
        assert_eq!(gone[1].section.as_deref(), Some("## Work"));
    }

    #[test]
    fn structure_is_not_a_fact() {
        assert_eq!(facts("# T\n\n---\n```\n- \n* **\n"), Vec::<Fact>::new());
        assert_eq!(normal("  - [x] Done it. "), "done it");
        assert_eq!(normal("12) Twelve"), "twelve");
    }

    #[test]
    fn restore_puts_a_fact_back_in_its_section() {
        let now = "# Memory\n\n## Work\n- Lives in Oslo\n\n## Hobbies\n- Chess\n";
        let fact = Fact {
            text: "- Works at Acme".into(),
            section: Some("## Work".into()),
        };
        let back = restore(now, &fact);
        assert_eq!(
            back,
            "# Memory\n\n## Work\n- Lives in Oslo\n- Works at Acme\n\n## Hobbies\n- Chess\n"
        );
        assert_eq!(
            restore(&back, &fact),
            back,
            "restoring twice changes nothing"
        );
        assert!(!states("- Dislikes teapots", "likes tea"));
        assert!(states("- Likes tea, daily", "likes tea"));
        let homeless = Fact {
            text: "- Has a cat".into(),
            section: Some("## Pets".into()),
        };
        assert_eq!(restore("x", &homeless), "x\n- Has a cat\n");
    }

    #[test]
    fn every_dropped_fact_can_be_recorded() {
        let long = format!("- {}end", "word ".repeat(4000));
        let old = format!("## Pets\x1b\n- likes\x0ctea\n- ansi \x1b[31mred\x1b[0m\n{long}\n");
        let gone = dropped(&old, "- other\n");
        let texts: Vec<_> = gone.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(texts[..2], ["- likes tea", "- ansi  [31mred [0m"]);
        assert_eq!(gone[0].section.as_deref(), Some("## Pets"));
        assert!(gone[2].text.starts_with("word word") && gone[2].text.len() <= 16 * 1024);
        for fact in &gone {
            let event = crate::events::Dropped {
                path: "MEMORY.md".into(),
                text: fact.text.clone(),
                section: fact.section.clone(),
                version: 1,
                by: "test".into(),
            };
            event.validate().unwrap();
            assert!(states(&restore("- other\n", fact), &fact.text));
        }
    }

    #[test]
    fn carry_over_keeps_lines_added_meanwhile() {
        let seen = "- a fact\n";
        let current = "- a fact\n- added by the WAL\n";
        let rewrite = "- A fact.\n- something new";
        assert_eq!(
            carry_over(seen, current, rewrite),
            "- A fact.\n- something new\n- added by the WAL\n"
        );
        assert_eq!(carry_over(seen, current, current), current);
    }
}
