//! Qanot's WAL scanner (Write-Ahead Logging): before the agent answers, every user message is
//! scanned for corrections, names, preferences, decisions, specific values and explicit
//! "remember this" requests. Each hit becomes a timestamped line of `SESSION-STATE.md`, and
//! the durable ones (names, preferences, remember) are also copied to `MEMORY.md` unless the
//! fact is already there. This module is the pure part: the patterns, the scan, the line
//! formats and the duplicate check. No IO and no clock: the caller passes the time in.
//!
//! ```
//! use chrono::{TimeZone, Utc};
//! use memtape_core::wal::{self, Category};
//!
//! let hits = wal::scan("Hi there. My name is Sardor. Can you help me with Rust?");
//! assert_eq!(hits.len(), 1);
//! assert_eq!(hits[0].category, Category::ProperNoun);
//! assert_eq!(hits[0].text, "My name is Sardor.");
//! let at = Utc.with_ymd_and_hms(2025, 1, 15, 10, 30, 0).unwrap();
//! assert_eq!(
//!     wal::session_state_line(at, &hits[0]),
//!     "- [2025-01-15T10:30:00+00:00] **proper_noun**: My name is Sardor.\n"
//! );
//! ```
//!
//! # The patterns (`wal_patterns.json`)
//!
//! The patterns are data, compiled once on first use. The file is a JSON array of rules:
//!
//! ```json
//! [{"category": "preference", "lang": "en", "pattern": "(?i)\\bI\\s+prefer\\b",
//!   "exclude": "(?i)\\bdo\\s+I\\s+prefer\\b"}]
//! ```
//!
//! - `category`: one of the snake_case names of [`Category`].
//! - `lang`: `en` (English), `uz` (Uzbek, Latin script) or `any` (language-independent, such
//!   as dates and URLs). Informational: every rule runs on every message.
//! - `pattern`: a [`regex`] crate expression (no look-around, no back-references). Flags go
//!   inside the pattern: `(?i)` for case-insensitive, `(?s)` for `.` across newlines, and
//!   `(?i:…)` / `(?-i:…)` to scope them, so a rule can be case-insensitive on its trigger
//!   words and still demand a capital letter for a name (`(?i:call\s+me)\s+\p{Lu}`).
//! - `exclude` (optional): a second expression that vetoes a pattern match it overlaps (shares
//!   at least one character with). A veto written to match a whole sentence (`^.*\?$`)
//!   turns a rule off for questions; a short one (`I'm\s+not`) vetoes one occurrence and
//!   leaves other occurrences in the same sentence alive.
//!
//! Both expressions run on one sentence at a time, after typographic apostrophes
//! (`’ ‘ ʻ ʼ ´` and the backtick) have been replaced by ASCII `'`, so `I'm` in a pattern also
//! finds `I’m`, and `yo'q` finds `yoʻq`. A category matches a sentence when any of its rules
//! does. Durability is a property of the category ([`Category::is_durable`]), not of a rule.
//!
//! # What each category means
//!
//! The seed gives trigger phrases; these are the judgements the patterns and the labelled set
//! (`tests/data/wal-labelled.jsonl`) follow.
//!
//! - **correction**: the user corrects something said earlier: "actually" anywhere in a
//!   sentence ("The meeting is on Friday, actually.", "it's actually spelled Karimova"), but
//!   not "actually, never mind", not in a question unless it opens it ("Actually, could you
//!   make it formal?"), not the intensifier or praise ("this actually works", "that's actually
//!   a great idea"); "I meant" (not "I meant to ask"), "it's not X, it's Y", "not X but Y" (not
//!   "not only … but", not "do not know, but"), "I said X, not Y", "X, not Y" after "no / sorry
//!   / wait / my mistake", "that's wrong", "you misunderstood", "I was wrong", "scratch that".
//!   Uzbek: "aslida" anywhere (not in a question, not "aslida juda oddiy"), "yo'q, …" opening a
//!   sentence with the right version (not "yo'q, rahmat"; "Menda vaqt yo'q", "I have no time",
//!   is no correction), "aytmoqchi edim / demoqchi edim" (I meant), "X emas, Y", "to'g'ri
//!   emas", "to'g'rirog'i", "xato tushundingiz", "adashibman". "It's raining again" is not a
//!   correction (Qanot's scanner takes every "it's").
//! - **proper_noun**: the user tells a name: their own ("my name is", "I'm Sardor", "call me
//!   Bek", "everyone calls me Bek", "Name's Bekzod", "I go by"), or that of a person, pet or
//!   project of theirs ("my wife's name is", "my dog is called", "my manager is Aziz", "my
//!   brother Sherzod"). "I'm" counts only before a capitalised word that is not a common word,
//!   an -ing verb or a nationality ("I'm Not sure", "I'm English" are not names; "I'm tired" is
//!   not a name). A name given to the assistant counts ("your name is Jarvis", "I'll call you
//!   Jarvis"), and a greeting's "Hi, this is Malika." ("This is great" does not). Uzbek:
//!   "mening ismim", "ismim", "meni / seni X deb chaqiring", "Men Sardorman", a capitalised
//!   word closing the clause after "men" ("Men Sardor.", "Salom, men Aziz", "Men Jasur
//!   bo'laman"; not "Men Toshkentdanman", "Men Python dasturchisiman"), "sening isming Jarvis",
//!   "o'g'limning ismi Timur".
//! - **preference**: a first-person like or dislike: "I like / love / prefer / hate / don't
//!   like", "I'd rather", "my favourite", and standing instructions ("always answer in
//!   English", "never use bullet points", "from now on…", "I want you to always…", "keep it
//!   short", "don't use jargon"), "I'd love it if…", "I find X easier", "X is better for me".
//!   "I want" counts when a thing follows ("I want the output in JSON"); "I want to …" and "I
//!   want you to …" are requests, not preferences. Questions ("what do you prefer?", "do I like
//!   it?") and other people's tastes ("my boss likes…") do not count. Uzbek: "menga … yoqadi /
//!   yoqmaydi", "yoqtiraman", "afzal ko'raman", "xohlayman" (not "bilishni xohlayman"), "har
//!   doim …", "… har doim … bo'lsin".
//! - **decision**: a choice for the work at hand: "let's do / go with / use / stick with …",
//!   "we'll use / host", "we're going with", "we're moving the standup to…", "I've decided",
//!   "Final answer: …", "I'll go with", and a clause-initial imperative "use / go with / pick
//!   X", "go ahead with". Not "I use Vim" (a habit), not "how do I use", not "use your
//!   judgement" or "use whatever you think" (the choice is delegated), not questions ("should
//!   we go with…?"); "I'd go with X" counts. Uzbek: "foydalanamiz", "ishlatamiz", "tanlaymiz",
//!   "qaror qildik", "shunday qilamiz", the hortative "-aylik" ("Redisni ishlataylik", "sinab
//!   ko'raylik", "tanlaylik"; not "gaplashaylik", "o'ylab ko'raylik", let's talk / think it
//!   over), "keling / qani, … -amiz". "Keling!" (come in) and "qani?" (where is?) alone are not
//!   decisions.
//! - **specific_value**: a value worth keeping verbatim: calendar dates (ISO, yyyy/mm/dd,
//!   numeric, day and month name, Uzbek "15-iyun", "2025-yil"), times of day, URLs, domains,
//!   e-mail addresses, phone numbers, IP addresses and versions, numbers of four or more digits
//!   or with thousands separators, amounts with a magnitude word or a currency, and quantities
//!   with a unit (%, GB, ms, km, …), codes with four or more digits ("tezkor2024"), "Friday,
//!   the 14th". Small counts ("2 options", "top 10", "step 4") are not.
//! - **remember**: an explicit request to keep something: "remember this / that",
//!   clause-initial "remember, …", "don't forget", "keep in mind", "note that", "for future
//!   reference", "save this to memory"; Uzbek "eslab qol", "unutma", "yodda tut", "esda tut",
//!   "yodingda bo'lsin". A polite request counts ("Could you remember that I'm allergic to
//!   nuts?"); other questions do not ("do you remember when…?", "can you remember…?"), not "I
//!   don't remember", not reminiscing ("remember when we…"), not "I don't forget…", not
//!   "unutmadim" (I haven't forgotten).
//!
//! `tests/wal_qanot.rs` compares the scan with Qanot's own scanner (qanot 2.0.4) on the
//! messages of `tests/data/qanot-wal.jsonl` and lists every difference with its reason.

use std::ops::Range;
use std::sync::LazyLock;

use chrono::{DateTime, SecondsFormat, Utc};
use regex::Regex;
use serde::{Deserialize, Serialize};

/// The kinds of information the WAL scan captures (Qanot's categories).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// The user corrects something said earlier ("actually…", "no, I meant…").
    Correction,
    /// The user tells a name ("my name is…", "call me…").
    ProperNoun,
    /// A like, dislike or standing instruction ("I prefer…", "always answer in…").
    Preference,
    /// A choice for the work at hand ("let's go with…", "we'll use…").
    Decision,
    /// A value worth keeping verbatim: a date, URL, large number, amount.
    SpecificValue,
    /// An explicit request to keep something ("remember this", "don't forget").
    Remember,
}

impl Category {
    /// Every category, in a stable order (the order of Qanot's table).
    pub const ALL: [Category; 6] = [
        Category::Correction,
        Category::ProperNoun,
        Category::Preference,
        Category::Decision,
        Category::SpecificValue,
        Category::Remember,
    ];

    /// The category's snake_case name, as written in `SESSION-STATE.md`.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Correction => "correction",
            Category::ProperNoun => "proper_noun",
            Category::Preference => "preference",
            Category::Decision => "decision",
            Category::SpecificValue => "specific_value",
            Category::Remember => "remember",
        }
    }

    /// Whether matches of this category are durable facts, copied to `MEMORY.md` as well:
    /// proper_noun, preference and remember.
    pub fn is_durable(self) -> bool {
        matches!(
            self,
            Category::ProperNoun | Category::Preference | Category::Remember
        )
    }

    fn index(self) -> usize {
        match self {
            Category::Correction => 0,
            Category::ProperNoun => 1,
            Category::Preference => 2,
            Category::Decision => 3,
            Category::SpecificValue => 4,
            Category::Remember => 5,
        }
    }
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A category name that the WAL scanner does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown WAL category {0:?} (expected one of correction, proper_noun, preference, decision, specific_value, remember)"
)]
pub struct UnknownCategory(pub String);

impl std::str::FromStr for Category {
    type Err = UnknownCategory;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Category::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownCategory(s.to_owned()))
    }
}

/// One hit of the scan: a category and the sentence of the message that triggered it.
///
/// Serialises as `{"category": "proper_noun", "text": "My name is Sardor."}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalMatch {
    /// What kind of information the sentence carries.
    pub category: Category,
    /// The sentence (trimmed) that triggered the match, not the whole message.
    pub text: String,
}

/// The pattern file, compiled into the binary.
const PATTERNS_JSON: &str = include_str!("wal_patterns.json");

/// One rule of `wal_patterns.json` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    category: Category,
    lang: String,
    pattern: String,
    #[serde(default)]
    exclude: Option<String>,
}

/// One compiled rule.
struct Rule {
    category: Category,
    pattern: Regex,
    exclude: Option<Regex>,
}

impl Rule {
    /// The start of the first match in `sentence` that no exclude match overlaps.
    fn first_match(&self, sentence: &str) -> Option<usize> {
        let mut vetoes: Option<Vec<Range<usize>>> = None;
        for m in self.pattern.find_iter(sentence) {
            let Some(exclude) = &self.exclude else {
                return Some(m.start());
            };
            let vetoes = vetoes
                .get_or_insert_with(|| exclude.find_iter(sentence).map(|e| e.range()).collect());
            let vetoed = vetoes.iter().any(|e| overlaps(e, &m.range()));
            if !vetoed {
                return Some(m.start());
            }
        }
        None
    }
}

/// Whether two byte ranges share a character. An empty range overlaps a range it lies in.
fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    if a.is_empty() {
        return b.start <= a.start && a.start < b.end.max(b.start + 1);
    }
    if b.is_empty() {
        return overlaps(b, a);
    }
    a.start < b.end && b.start < a.end
}

/// Parses and compiles the pattern file.
fn compile(json: &str) -> Result<Vec<Rule>, String> {
    let specs: Vec<RuleSpec> =
        serde_json::from_str(json).map_err(|e| format!("wal_patterns.json: {e}"))?;
    specs
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            if !matches!(spec.lang.as_str(), "en" | "uz" | "any") {
                return Err(format!("rule {i}: unknown lang {:?}", spec.lang));
            }
            let pattern =
                Regex::new(&spec.pattern).map_err(|e| format!("rule {i} pattern: {e}"))?;
            let exclude = spec
                .exclude
                .as_deref()
                .map(Regex::new)
                .transpose()
                .map_err(|e| format!("rule {i} exclude: {e}"))?;
            Ok(Rule {
                category: spec.category,
                pattern,
                exclude,
            })
        })
        .collect()
}

static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    // The file is part of the source and a test compiles it: a failure here is a build bug.
    compile(PATTERNS_JSON).unwrap_or_else(|e| panic!("invalid built-in WAL patterns: {e}"))
});

/// Replaces typographic apostrophes with ASCII `'`, so patterns need only one spelling.
fn normalize_apostrophes(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\u{2019}' | '\u{2018}' | '\u{02BB}' | '\u{02BC}' | '\u{00B4}' | '`' => '\'',
            c => c,
        })
        .collect()
}

/// Words after which a single period does not end a sentence.
const ABBREVIATIONS: [&str; 11] = [
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "e.g", "i.e",
];

/// Splits a message into trimmed, non-empty sentences: at line breaks, and after `.`, `!`,
/// `?` or `…` (with any closing quotes or brackets) followed by whitespace or the end of the
/// line. A period after a title or "e.g." does not split; periods inside tokens (`3.5`,
/// `example.com`) never do.
fn sentences(message: &str) -> Vec<&str> {
    const TERMINATORS: [char; 4] = ['.', '!', '?', '…'];
    const CLOSERS: [char; 8] = ['"', '\'', ')', ']', '\u{201D}', '\u{2019}', '»', '*'];
    let mut out = Vec::new();
    for line in message.lines() {
        let mut start = 0;
        let mut chars = line.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if !TERMINATORS.contains(&c) {
                continue;
            }
            let mut end = i + c.len_utf8();
            let mut run = 1;
            while let Some(&(j, d)) = chars.peek() {
                if TERMINATORS.contains(&d) || CLOSERS.contains(&d) {
                    end = j + d.len_utf8();
                    run += usize::from(TERMINATORS.contains(&d));
                    chars.next();
                } else {
                    break;
                }
            }
            let at_boundary = chars.peek().is_none_or(|&(_, d)| d.is_whitespace());
            if !at_boundary {
                continue;
            }
            if c == '.' && run == 1 {
                let word = line[start..i]
                    .rsplit(char::is_whitespace)
                    .next()
                    .unwrap_or_default()
                    .to_lowercase();
                if ABBREVIATIONS.contains(&word.as_str()) {
                    continue;
                }
            }
            out.push(line[start..end].trim());
            start = end;
        }
        out.push(line[start..].trim());
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Scans a user message: every category that matches, at most once per sentence, in order of
/// appearance (sentence by sentence; within a sentence by where the first trigger starts).
/// Each match carries the sentence that triggered it. Empty when nothing matches.
pub fn scan(message: &str) -> Vec<WalMatch> {
    let rules = &*RULES;
    let mut out = Vec::new();
    for sentence in sentences(message) {
        let normalized = normalize_apostrophes(sentence);
        let mut first: [Option<usize>; 6] = [None; 6];
        for rule in rules {
            if let Some(pos) = rule.first_match(&normalized) {
                let slot = &mut first[rule.category.index()];
                *slot = Some(slot.map_or(pos, |p| p.min(pos)));
            }
        }
        let mut hits: Vec<(usize, Category)> = Category::ALL
            .into_iter()
            .filter_map(|c| first[c.index()].map(|pos| (pos, c)))
            .collect();
        hits.sort();
        out.extend(hits.into_iter().map(|(_, category)| WalMatch {
            category,
            text: sentence.to_owned(),
        }));
    }
    out
}

/// Collapses every run of whitespace (line breaks included) to one space, and trims.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The line a match adds to `SESSION-STATE.md`, in Qanot's format:
/// `- [2025-01-15T10:30:00+00:00] **proper_noun**: My name is Sardor\n` (RFC 3339, seconds,
/// `+00:00`). The text is kept on one line.
pub fn session_state_line(at: DateTime<Utc>, m: &WalMatch) -> String {
    format!(
        "- [{}] **{}**: {}\n",
        at.to_rfc3339_opts(SecondsFormat::Secs, false),
        m.category.as_str(),
        one_line(&m.text)
    )
}

/// The bullet a durable match appends to `MEMORY.md`: `- I prefer dark mode\n` — the text
/// on one line, without trailing `.`, `!`, `,`, `;`, `:` or `…`.
pub fn long_term_line(m: &WalMatch) -> String {
    let text = one_line(&m.text);
    let text = text.trim_end_matches(['.', '!', ',', ';', ':', '…', ' ']);
    format!("- {text}\n")
}

/// A fact in comparable form: apostrophes unified, lower case, single spaces, without
/// surrounding emphasis or quotes and without trailing punctuation.
fn normalize_fact(s: &str) -> String {
    let s = one_line(&normalize_apostrophes(s)).to_lowercase();
    // Emphasis, quotes and trailing punctuation in any order (`"x".` and `"x."` alike).
    let wrapper =
        |c: char| c.is_whitespace() || matches!(c, '*' | '_' | '"' | '\u{201C}' | '\u{201D}');
    let trailing = |c: char| wrapper(c) || matches!(c, '.' | '!' | '?' | ',' | ';' | ':' | '…');
    s.trim_start_matches(wrapper)
        .trim_end_matches(trailing)
        .to_owned()
}

/// Markdown around a fact on one line of a memory file: quote and list markers, a checkbox,
/// a `[timestamp]` and a `**category**:` label (the `SESSION-STATE.md` line format).
static LINE_MARKUP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\s*(?:>\s*)*(?:[-*+]\s+|\d+[.)]\s+)?(?:\[[ xX]\]\s+)?(?:\[[^\]]*\]\s*)?(?:\*\*[a-z_]+\*\*\s*:\s*)?")
        .unwrap_or_else(|e| panic!("invalid line markup pattern: {e}"))
});

/// A list marker at the start of a line: what [`long_term_line`] puts before a fact.
static LIST_MARKER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\s*(?:[-*+]\s+|\d+[.)]\s+)?")
        .unwrap_or_else(|e| panic!("invalid list marker pattern: {e}"))
});

/// Whether `existing` (the current `MEMORY.md`) already holds the fact `text`, so it must not
/// be written again. A line holds the fact when, after its list marker, timestamp and
/// category label are removed, the line or one of its sentences equals the fact, compared
/// case-insensitively with whitespace collapsed and trailing punctuation ignored:
/// "I prefer dark mode." is already in "- i prefer  dark mode", but not in "- I prefer dark
/// mode in the editor". An empty fact counts as present (there is nothing to add).
pub fn is_duplicate(existing: &str, text: &str) -> bool {
    let needle = normalize_fact(text);
    if needle.is_empty() {
        return true;
    }
    existing.lines().any(|line| {
        // The line with all its markup removed, and with only its list marker removed (a
        // fact may itself start with something like a `[timestamp]`).
        let bodies = [LINE_MARKUP.replace(line, ""), LIST_MARKER.replace(line, "")];
        bodies.iter().any(|body| {
            normalize_fact(body) == needle
                || sentences(body)
                    .into_iter()
                    .any(|s| normalize_fact(s) == needle)
        })
    })
}

/// Per-category precision, recall and support of [`scan`] over a labelled set of messages
/// (micro over messages: a message counts once per category, however many sentences match).
/// Returns one row per category in [`Category::ALL`] order: `(category, precision, recall,
/// support)`, where support is the number of messages labelled with the category. A ratio
/// with a zero denominator is 1.0 (no prediction means no wrong prediction; no labelled
/// message means nothing missed).
pub fn metrics(set: &[(String, Vec<Category>)]) -> Vec<(Category, f64, f64, usize)> {
    let mut tp = [0usize; 6];
    let mut fp = [0usize; 6];
    let mut fn_ = [0usize; 6];
    let mut support = [0usize; 6];
    for (text, labels) in set {
        let mut predicted = [false; 6];
        for m in scan(text) {
            predicted[m.category.index()] = true;
        }
        let mut gold = [false; 6];
        for c in labels {
            gold[c.index()] = true;
        }
        for i in 0..6 {
            support[i] += usize::from(gold[i]);
            match (predicted[i], gold[i]) {
                (true, true) => tp[i] += 1,
                (true, false) => fp[i] += 1,
                (false, true) => fn_[i] += 1,
                (false, false) => {}
            }
        }
    }
    let ratio = |n: usize, d: usize| if d == 0 { 1.0 } else { n as f64 / d as f64 };
    Category::ALL
        .into_iter()
        .map(|c| {
            let i = c.index();
            (
                c,
                ratio(tp[i], tp[i] + fp[i]),
                ratio(tp[i], tp[i] + fn_[i]),
                support[i],
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_patterns_compile() {
        let rules = compile(PATTERNS_JSON).expect("patterns compile");
        for c in Category::ALL {
            assert!(rules.iter().any(|r| r.category == c), "no rule for {c}");
        }
    }

    #[test]
    fn sentences_split_at_terminators_and_lines_only() {
        assert_eq!(
            sentences("Hi! My name is Dr. Karimov. See example.com/a.b?x=1 or 3.5\nnext line…"),
            vec![
                "Hi!",
                "My name is Dr. Karimov.",
                "See example.com/a.b?x=1 or 3.5",
                "next line…"
            ]
        );
        assert_eq!(
            sentences("Really?! \"Yes.\" Ok"),
            vec!["Really?!", "\"Yes.\"", "Ok"]
        );
        assert!(sentences(" \n\n ").is_empty());
    }

    #[test]
    fn overlap_rules() {
        assert!(overlaps(&(0..5), &(4..9)));
        assert!(!overlaps(&(0..5), &(5..9)));
        assert!(overlaps(&(3..3), &(0..5)));
        assert!(!overlaps(&(5..5), &(0..5)));
    }
}
