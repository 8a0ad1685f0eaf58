//! Differential test against the real nanobot (nanobot-ai 0.3.5). The sessions under
//! `tests/fixtures/refs/nanobot/` were written by nanobot's own `SessionManager`, with the
//! history nanobot's own `Session.get_history(max_messages)` gave for each, recorded by
//! `scripts/refs/nanobot_sessions.py` (re-run it when nanobot releases; no Python here).
//!
//! Each session is imported with memtape's nanobot import into a real SQLite store, and
//! memtape's history under the same limit is compared with nanobot's, message by message.
//! memtape follows the seed's five get_history steps (seed 000); nanobot 0.3.5 departs from
//! them in five ways, and every difference must be one of those departures (or two):
//!
//! - **incomplete group kept**: seed step 5 removes "assistant with tool_calls but missing
//!   results"; nanobot keeps the group (its context builder later back-fills a placeholder
//!   result).
//! - **cut at an orphan**: seed step 4 removes "orphaned tool results (tool_call_id without
//!   matching assistant tool_calls)"; nanobot instead drops everything up to the last orphan,
//!   so a mid-window orphan takes the user turn before it along and history can start with an
//!   assistant message.
//! - **assistant text rewritten**: the seed's steps select messages ("Messages are never
//!   modified or deleted"); nanobot rewrites assistant text on the way out ([`sanitize`]).
//! - **command turns left out**: the seed slices "from last_consolidated to end"; nanobot
//!   leaves out messages flagged `_command` (a slash command and its reply).
//! - **channel delivery kept before the user turn**: seed step 3 aligns "to a user turn (drop
//!   leading non-user messages)"; nanobot keeps an assistant message flagged
//!   `_channel_delivery` right before the first user turn.
//!
//! A difference is classified by replaying the seed's steps on the case itself with
//! departures switched on: its class is the smallest set of departures that reproduces
//! nanobot's recorded history exactly, each of which the case must show ([`evidence`]). A
//! difference no departure explains fails the test, and so does memtape departing from the
//! seed's steps anywhere.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use memtape::{Engine, Entry, Format, HistoryLimits, Scope, SqliteStore};
use serde_json::{Map, Value};

/// One recorded session: nanobot's file, byte for byte, and its histories.
struct Case {
    family: String,
    name: String,
    file: String,
    histories: Vec<(usize, Vec<Value>)>,
}

fn fixtures() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/refs/nanobot");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    paths.sort();
    let mut cases = Vec::new();
    for path in paths {
        let family = path.file_stem().unwrap().to_string_lossy().into_owned();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            let histories = v["histories"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| {
                    let max = usize::try_from(h["max_messages"].as_u64().unwrap()).unwrap();
                    (max, h["history"].as_array().unwrap().clone())
                })
                .collect();
            cases.push(Case {
                family: family.clone(),
                name: v["name"].as_str().unwrap().to_owned(),
                file: v["file"].as_str().unwrap().to_owned(),
                histories,
            });
        }
    }
    cases
}

/// A nanobot session file read plainly (not with memtape's parser): the metadata line and
/// the messages.
fn read_file(text: &str) -> (Map<String, Value>, Vec<Value>) {
    let mut head = Map::new();
    let mut messages = Vec::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["_type"] == "metadata" {
            head = v.as_object().unwrap().clone();
        } else {
            messages.push(v);
        }
    }
    (head, messages)
}

/// The consolidation pointer of a metadata line, read as nanobot reads it: `last_archived`
/// first, then the older `last_consolidated`.
fn pointer(head: &Map<String, Value>) -> usize {
    let n = ["last_archived", "last_consolidated"]
        .iter()
        .find_map(|k| head.get(*k).and_then(Value::as_u64))
        .unwrap_or(0);
    usize::try_from(n).unwrap()
}

/// The fields a model sees, as nanobot's get_history gives them: absent is null, and so is
/// an empty tool-call list.
fn view(m: &Value) -> Value {
    let mut out = Map::new();
    for key in [
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "name",
        "reasoning_content",
    ] {
        let v = match m.get(key) {
            Some(Value::Array(a)) if key == "tool_calls" && a.is_empty() => Value::Null,
            Some(v) => v.clone(),
            None => Value::Null,
        };
        out.insert(key.to_owned(), v);
    }
    Value::Object(out)
}

fn views(messages: &[Value]) -> Vec<Value> {
    messages.iter().map(view).collect()
}

fn memtape_views(entries: &[Entry]) -> Vec<Value> {
    entries
        .iter()
        .map(|e| view(&serde_json::to_value(e.message().unwrap()).unwrap()))
        .collect()
}

fn call_ids(m: &Value) -> Vec<&str> {
    m["tool_calls"]
        .as_array()
        .map(|calls| calls.iter().filter_map(|c| c["id"].as_str()).collect())
        .unwrap_or_default()
}

fn result_id(m: &Value) -> Option<&str> {
    (m["role"] == "tool")
        .then(|| m["tool_call_id"].as_str())
        .flatten()
}

/// nanobot's departures from the seed, any of which may be switched on in [`seed_history`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Departures {
    /// Step 5 skipped: incomplete tool-call groups stay.
    incomplete_kept: bool,
    /// Step 4 replaced by nanobot's cut: everything up to the last orphan result goes.
    orphan_cut: bool,
    /// Assistant text rewritten on the way out ([`sanitize`]), and dropped if left blank.
    text_rewritten: bool,
    /// Messages flagged `_command` (a slash command and its reply) left out.
    commands_left_out: bool,
    /// Alignment keeps an assistant message flagged `_channel_delivery` right before the
    /// first user turn.
    delivery_kept: bool,
}

impl Departures {
    /// Every combination, the fewest departures first: a difference is put down to the
    /// smallest set that explains it.
    fn all() -> Vec<Departures> {
        let mut all: Vec<Departures> = (0u8..32)
            .map(|bits| Departures {
                incomplete_kept: bits & 1 != 0,
                orphan_cut: bits & 2 != 0,
                text_rewritten: bits & 4 != 0,
                commands_left_out: bits & 8 != 0,
                delivery_kept: bits & 16 != 0,
            })
            .collect();
        all.sort_by_key(|d| d.names().len());
        all
    }

    fn names(self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.incomplete_kept {
            names.push("incomplete group kept");
        }
        if self.orphan_cut {
            names.push("cut at an orphan");
        }
        if self.text_rewritten {
            names.push("assistant text rewritten");
        }
        if self.commands_left_out {
            names.push("command turns left out");
        }
        if self.delivery_kept {
            names.push("channel delivery kept before the user turn");
        }
        names
    }
}

/// Python's `str.splitlines` boundaries.
fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r' | '\u{b}' | '\u{c}' | '\u{85}' | '\u{2028}' | '\u{2029}'
    ) || matches!(c, '\u{1c}'..='\u{1e}')
}

/// Python's `str.isspace`, which `str.strip` trims.
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || matches!(c, '\u{1c}'..='\u{1f}')
}

/// nanobot 0.3.5's `_sanitize_assistant_replay_text`, applied to assistant text by its
/// get_history: a leading `[Message Time: …]` line goes, the text is split into lines
/// (Python's `splitlines`), `[image: /path]` breadcrumbs and `message(…)` /
/// `generate_image(…)` echo lines go, the lines are joined with `\n` and the whole is
/// stripped.
fn sanitize(text: &str) -> String {
    let mut text = text;
    if let Some(rest) = text.strip_prefix("[Message Time: ")
        && let Some(end) = rest.find(']')
        && end > 0
    {
        text = &rest[end + 1..];
        text = text.strip_prefix('\n').unwrap_or(text);
    }
    let mut lines: Vec<&str> = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let end = rest.find(is_line_break).unwrap_or(rest.len());
        lines.push(&rest[..end]);
        rest = &rest[end..];
        if let Some(r) = rest.strip_prefix("\r\n") {
            rest = r;
        } else if let Some(c) = rest.chars().next() {
            rest = &rest[c.len_utf8()..];
        }
    }
    let breadcrumb = |line: &str| {
        let line = line.trim_end_matches(is_python_space);
        ["[image: /", "[image: ~"].iter().any(|p| {
            line.strip_prefix(p)
                .and_then(|r| r.strip_suffix(']'))
                .is_some_and(|inner| !inner.is_empty() && !inner.contains(']'))
        })
    };
    let echo = |line: &str| {
        let line = line.trim_matches(is_python_space);
        ["message(", "generate_image("].iter().any(|p| {
            line.strip_prefix(p)
                .and_then(|r| r.strip_suffix(')'))
                .is_some_and(|inner| !inner.contains(')'))
        })
    };
    lines
        .into_iter()
        .filter(|l| !breadcrumb(l) && !echo(l))
        .collect::<Vec<_>>()
        .join("\n")
        .trim_matches(is_python_space)
        .to_owned()
}

/// Whether a message carries nanobot flag `key` (Python truthiness).
fn flag(m: &Value, key: &str) -> bool {
    match m.get(key) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// Seed steps 1-3: the messages after the pointer, trimmed to `max_messages` from the tail,
/// aligned to a user turn (when the window holds one).
fn window(unconsolidated: &[Value], max_messages: usize, d: Departures) -> Vec<&Value> {
    let start = unconsolidated.len().saturating_sub(max_messages);
    let mut keep: Vec<&Value> = unconsolidated[start..].iter().collect();
    if let Some(mut first_user) = keep.iter().position(|m| m["role"] == "user") {
        if d.delivery_kept && first_user > 0 && flag(keep[first_user - 1], "_channel_delivery") {
            first_user -= 1;
        }
        keep.drain(..first_user);
    }
    keep
}

/// The seed's get_history (seed 000, "History Retrieval") on `unconsolidated`, the messages
/// after the pointer, with the departures `d`; returns the messages kept, as a model sees
/// them. Written from the seed's text, independently of memtape's `select_history`.
fn seed_history(unconsolidated: &[Value], max_messages: usize, d: Departures) -> Vec<Value> {
    let mut keep = window(unconsolidated, max_messages, d);
    if d.orphan_cut {
        // nanobot's find_legal_message_start: resume after the last result whose call was
        // not declared since the previous cut.
        let (mut declared, mut cut) = (HashSet::new(), 0);
        for (pos, m) in keep.iter().enumerate() {
            declared.extend(call_ids(m));
            if let Some(id) = result_id(m)
                && !declared.contains(id)
            {
                cut = pos + 1;
                declared.clear();
            }
        }
        keep.drain(..cut);
    }
    loop {
        let before = keep.len();
        // 4. Remove orphaned tool results.
        let mut declared = HashSet::new();
        keep.retain(|m| {
            declared.extend(call_ids(m));
            result_id(m).is_none_or(|id| declared.contains(id))
        });
        // 5. Remove incomplete tool-call groups (repeated: that may orphan results).
        if !d.incomplete_kept {
            let kept = keep.clone();
            keep = kept
                .iter()
                .enumerate()
                .filter(|(pos, m)| {
                    call_ids(m).iter().all(|id| {
                        kept[pos + 1..]
                            .iter()
                            .any(|later| result_id(later) == Some(*id))
                    })
                })
                .map(|(_, m)| *m)
                .collect();
        }
        if keep.len() == before {
            break;
        }
    }
    if d.commands_left_out {
        keep.retain(|m| !flag(m, "_command"));
    }
    let mut out = views(&keep.into_iter().cloned().collect::<Vec<_>>());
    if d.text_rewritten {
        out.retain_mut(|m| {
            if m["role"] != "assistant" {
                return true;
            }
            let Some(text) = m["content"].as_str() else {
                return true;
            };
            let text = sanitize(text);
            let blank = text.trim_matches(is_python_space).is_empty();
            m["content"] = Value::String(text);
            !blank || !m["tool_calls"].is_null() || !m["reasoning_content"].is_null()
        });
    }
    out
}

/// The case shows each departure of `d`: for a kept incomplete group, nanobot's history
/// holds a call without a later result; for the cut, the window (after alignment) holds an
/// orphan result after its first message, and nanobot's history starts after it; for the
/// rewrite, the window holds assistant text that nanobot's sanitizer changes; for commands,
/// the window holds a command turn; for a delivery, the window starts with one.
fn evidence(d: Departures, window: &[&Value], nanobot: &[Value]) -> bool {
    let incomplete = nanobot.iter().enumerate().any(|(pos, m)| {
        call_ids(m)
            .iter()
            .any(|id| !nanobot[pos + 1..].iter().any(|r| result_id(r) == Some(*id)))
    });
    let mut declared = HashSet::new();
    let last_orphan = window
        .iter()
        .enumerate()
        .filter(|(_, m)| {
            declared.extend(call_ids(m));
            result_id(m).is_some_and(|id| !declared.contains(id))
        })
        .map(|(pos, _)| pos)
        .last();
    let cut = last_orphan.is_some_and(|pos| pos > 0 && nanobot.len() < window.len() - pos);
    let rewritten = window.iter().any(|m| {
        m["role"] == "assistant"
            && m["content"]
                .as_str()
                .is_some_and(|text| sanitize(text) != text)
    });
    let command = window.iter().any(|m| flag(m, "_command"));
    let delivery = window.first().is_some_and(|m| flag(m, "_channel_delivery"));
    (!d.incomplete_kept || incomplete)
        && (!d.orphan_cut || cut)
        && (!d.text_rewritten || rewritten)
        && (!d.commands_left_out || command)
        && (!d.delivery_kept || delivery)
}

#[test]
fn memtape_history_matches_nanobot_where_nanobot_follows_the_seed() {
    let cases = fixtures();
    assert!(cases.len() >= 150, "only {} recorded sessions", cases.len());
    let dir = tempfile::tempdir().unwrap();
    let engine: Engine<SqliteStore> = Engine::init(dir.path()).unwrap();
    let base = Scope::agent("default", "default").unwrap();

    // Histories and sessions per explanation (the empty set: equal).
    let mut histories: BTreeMap<Departures, usize> = BTreeMap::new();
    let mut sessions: BTreeMap<Vec<&str>, usize> = BTreeMap::new();
    let mut single: BTreeMap<&str, usize> = BTreeMap::new();
    let mut unexplained = Vec::new();
    let mut comparisons = 0;
    for case in &cases {
        let report = engine
            .import(Format::Nanobot, &case.file, &base, None)
            .unwrap_or_else(|e| panic!("{}: memtape refused nanobot's file: {e}", case.name));
        let scope = &report.sessions[0];
        let (head, messages) = read_file(&case.file);
        let pointer = pointer(&head);
        let unconsolidated = &messages[pointer..];
        let mut seen: Vec<&str> = Vec::new();
        for (max, recorded) in &case.histories {
            comparisons += 1;
            let limits = HistoryLimits {
                max_messages: *max,
                max_tokens: None,
            };
            let memtape = memtape_views(&engine.history(scope, &limits).unwrap());
            let nanobot = views(recorded);
            assert_eq!(
                memtape,
                seed_history(unconsolidated, *max, Departures::default()),
                "{} (max {max}): memtape departs from the seed's steps",
                case.name
            );
            let explained = Departures::all().into_iter().find(|&d| {
                seed_history(unconsolidated, *max, d) == nanobot
                    && evidence(d, &window(unconsolidated, *max, d), &nanobot)
            });
            match explained {
                Some(d) => {
                    *histories.entry(d).or_default() += 1;
                    for name in d.names() {
                        *single.entry(name).or_default() += 1;
                        if !seen.contains(&name) {
                            seen.push(name);
                        }
                    }
                }
                None => unexplained.push(format!(
                    "{}/{} (max {max}):\n  nanobot: {nanobot:?}\n  memtape: {memtape:?}",
                    case.family, case.name
                )),
            }
        }
        seen.sort_unstable();
        *sessions.entry(seen).or_default() += 1;
    }
    let equal = histories.get(&Departures::default()).copied().unwrap_or(0);
    println!(
        "nanobot 0.3.5: {} sessions, {comparisons} histories (session and max_messages) \
         compared: {equal} equal, {} differ, {} unexplained",
        cases.len(),
        comparisons - equal - unexplained.len(),
        unexplained.len()
    );
    for (d, n) in &histories {
        if *d != Departures::default() {
            println!("  {n:4} histories differ by: {}", d.names().join(" + "));
        }
    }
    for (name, n) in &single {
        println!("  {n:4} histories show: {name}");
    }
    for (names, n) in &sessions {
        let what = if names.is_empty() {
            "equal under every limit".to_owned()
        } else {
            format!("differ by: {}", names.join(" + "))
        };
        println!("  {n:4} sessions {what}");
    }
    assert!(
        unexplained.is_empty(),
        "differences that fit no documented departure:\n{}",
        unexplained.join("\n")
    );
    // The recorded cases cover every departure, and agreement on most histories.
    assert!(equal > comparisons / 2, "{equal} of {comparisons}");
    assert_eq!(single.len(), 5, "{single:?}");
}

/// Where nanobot has no tool calls to clean up, it and memtape agree on every limit.
#[test]
fn plain_sessions_match_nanobot_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let engine: Engine<SqliteStore> = Engine::init(dir.path()).unwrap();
    let base = Scope::agent("default", "default").unwrap();
    let plain: Vec<Case> = fixtures()
        .into_iter()
        .filter(|c| c.family == "plain" || c.family == "tools")
        .collect();
    assert!(plain.len() > 40);
    for case in &plain {
        let report = engine
            .import(Format::Nanobot, &case.file, &base, None)
            .unwrap();
        for (max, recorded) in &case.histories {
            let limits = HistoryLimits {
                max_messages: *max,
                max_tokens: None,
            };
            let memtape = memtape_views(&engine.history(&report.sessions[0], &limits).unwrap());
            assert_eq!(memtape, views(recorded), "{} (max {max})", case.name);
        }
    }
}

/// memtape's nanobot export of each imported session carries nanobot's messages, pointer,
/// key and metadata, and memtape reads it back to the same history under every limit.
#[test]
fn nanobot_export_reads_back_to_the_same_history() {
    let dir = tempfile::tempdir().unwrap();
    let engine: Engine<SqliteStore> = Engine::init(dir.path()).unwrap();
    let base = Scope::agent("default", "default").unwrap();
    for case in fixtures() {
        let report = engine
            .import(Format::Nanobot, &case.file, &base, None)
            .unwrap();
        let scope = &report.sessions[0];
        let mut out = Vec::new();
        engine.export(Format::Nanobot, scope, &mut out).unwrap();
        let exported = String::from_utf8(out).unwrap();

        let (head, messages) = read_file(&case.file);
        let (again_head, again) = read_file(&exported);
        for key in ["key", "metadata"] {
            assert_eq!(again_head[key], head[key], "{}: {key}", case.name);
        }
        assert_eq!(
            pointer(&again_head),
            pointer(&head),
            "{}: pointer",
            case.name
        );
        assert_eq!(
            again_head["last_archived"], again_head["last_consolidated"],
            "{}: the pointer under both names, as nanobot writes it",
            case.name
        );
        assert_eq!(views(&again), views(&messages), "{}", case.name);
        for (m, a) in messages.iter().zip(&again) {
            let time = |v: &Value| {
                chrono::NaiveDateTime::parse_from_str(v["timestamp"].as_str().unwrap(), "%FT%T%.f")
                    .unwrap()
            };
            assert_eq!(time(a), time(m), "{}: timestamp", case.name);
        }

        let copy = format!("roundtrip:{}", case.name);
        let again = engine
            .import(Format::Nanobot, &exported, &base, Some(&copy))
            .unwrap();
        for (max, _) in &case.histories {
            let limits = HistoryLimits {
                max_messages: *max,
                max_tokens: None,
            };
            assert_eq!(
                memtape_views(&engine.history(&again.sessions[0], &limits).unwrap()),
                memtape_views(&engine.history(scope, &limits).unwrap()),
                "{} (max {max})",
                case.name
            );
        }
    }
}
