//! JSONL interchange formats: memtape's own (lossless), nanobot session files and Bub tapes.
//! Parsing is all-or-nothing: the first bad line is reported with its number and reason,
//! and the caller imports nothing from that file.

use chrono::{DateTime, NaiveDateTime, Utc};
use serde_json::Value;

use crate::{Error, Meta, Payload, Result};

pub mod bub;
pub mod dify_node;
pub mod memtape;
pub mod nanobot;

/// A supported JSONL format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// memtape's own entry-per-line format.
    Memtape,
    /// A nanobot session file (`sessions/{key}.jsonl`).
    Nanobot,
    /// A Bub / republic tape (`TapeEntry` per line).
    Bub,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "memtape" => Ok(Format::Memtape),
            "nanobot" => Ok(Format::Nanobot),
            "bub" => Ok(Format::Bub),
            other => Err(format!(
                "unknown format {other:?} (expected memtape, nanobot or bub)"
            )),
        }
    }
}

/// How many of a file's first lines [`Format::detect`] reads.
const DETECT_LINES: usize = 20;

impl Format {
    /// The format's name, as `--format` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Memtape => "memtape",
            Format::Nanobot => "nanobot",
            Format::Bub => "bub",
        }
    }

    /// The format of a JSONL file, told by the shape of its first lines (at most 20): a
    /// memtape entry has `id`, `scope`, `kind`, `created_at` and `payload`; a Bub tape
    /// entry has a string `kind` and an object `payload` but no `scope`; a nanobot line is
    /// its metadata line (`"_type": "metadata"`) or a message (`role`, and neither `kind`
    /// nor `payload`). `Ok(None)` for a file with no lines; an error says which line fits
    /// no format, or fits another format than the lines before it.
    pub fn detect(text: &str) -> std::result::Result<Option<Format>, String> {
        let mut found: Option<(Format, usize)> = None;
        for (line, raw) in raw_lines(text).take(DETECT_LINES) {
            let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(raw) else {
                return Err(format!("line {line} is not a JSON object"));
            };
            let has = |key: &str| obj.contains_key(key);
            let format = if ["id", "scope", "kind", "created_at", "payload"]
                .iter()
                .all(|k| has(k))
            {
                Format::Memtape
            } else if obj.get("kind").is_some_and(Value::is_string)
                && obj.get("payload").is_some_and(Value::is_object)
                && !has("scope")
            {
                Format::Bub
            } else if obj.get("_type").and_then(Value::as_str) == Some("metadata")
                || (has("role") && !has("kind") && !has("payload"))
            {
                Format::Nanobot
            } else {
                return Err(format!(
                    "line {line} is neither a memtape entry (id, scope, kind, created_at, \
                     payload), a Bub tape entry (kind, payload) nor a nanobot line (role, or \
                     \"_type\": \"metadata\")"
                ));
            };
            match found {
                None => found = Some((format, line)),
                Some((first, at)) if first != format => {
                    return Err(format!(
                        "line {at} reads as {} but line {line} as {}",
                        first.name(),
                        format.name()
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(found.map(|(format, _)| format))
    }
}

/// One entry read from a foreign format, before it has a scope or an id.
#[derive(Clone, Debug, PartialEq)]
pub struct Imported {
    /// What it carries.
    pub payload: Payload,
    /// Metadata carried over from the source line.
    pub meta: Meta,
    /// When it was written, as the source says (or the import time when it says nothing).
    pub created_at: DateTime<Utc>,
}

/// Yields `(line number, line)` for each non-blank line. A UTF-8 byte order mark at the
/// start of the file is skipped (editors on Windows write one).
pub(crate) fn raw_lines(text: &str) -> impl Iterator<Item = (usize, &str)> + '_ {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| (i + 1, line))
}

/// Yields `(line number, parsed JSON)` for each non-blank line, or the first bad line.
pub(crate) fn json_lines(text: &str) -> impl Iterator<Item = Result<(usize, Value)>> + '_ {
    raw_lines(text).map(|(line, raw)| {
        serde_json::from_str(raw)
            .map(|v| (line, v))
            .map_err(|e| bad(line, format!("not valid JSON: {e}")))
    })
}

/// The error for line `line`.
pub(crate) fn bad(line: usize, reason: impl Into<String>) -> Error {
    Error::BadLine {
        line,
        reason: reason.into(),
    }
}

/// Reads a timestamp: RFC 3339, or a naive ISO 8601 time (Python's `isoformat()`), taken as UTC.
pub fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc));
    }
    [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
    .map(|t| t.and_utc())
}

/// Reads the optional timestamp field `key` of a line's object.
pub(crate) fn time_field(
    line: usize,
    obj: &serde_json::Map<String, Value>,
    key: &str,
) -> Result<Option<DateTime<Utc>>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse_time(s)
            .map(Some)
            .ok_or_else(|| bad(line, format!("{key} {s:?} is not a timestamp"))),
        Some(other) => Err(bad(line, format!("{key} must be a string, not {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_utf8_bom_rejects_a_jsonl_file() {
        let lines: Vec<_> = json_lines("\u{feff}{\"a\": 1}\n{\"b\": 2}\n")
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0], (1, serde_json::json!({"a": 1})));
        // Only at the start: a BOM inside a line is still not JSON.
        assert!(json_lines("{}\n\u{feff}{}").nth(1).unwrap().is_err());
    }

    #[test]
    fn the_format_is_told_by_the_lines() {
        let memtape = r#"{"id": 1, "scope": "t/a", "kind": "message", "created_at": "2026-01-01T00:00:00Z", "payload": {}}"#;
        let bub = r#"{"id": 1, "kind": "message", "payload": {"role": "user"}, "meta": {}, "date": "2026-01-01"}"#;
        let meta = r#"{"_type": "metadata", "key": "cli:1"}"#;
        let message = r#"{"role": "user", "content": "hi"}"#;
        let detect = |lines: &[&str]| Format::detect(&lines.join("\n"));
        assert_eq!(detect(&[memtape, memtape]), Ok(Some(Format::Memtape)));
        assert_eq!(detect(&[bub]), Ok(Some(Format::Bub)));
        assert_eq!(detect(&[meta, message]), Ok(Some(Format::Nanobot)));
        assert_eq!(detect(&[message]), Ok(Some(Format::Nanobot)));
        assert_eq!(detect(&["", "  "]), Ok(None));
        assert_eq!(Format::detect("\u{feff}"), Ok(None));
        let err = detect(&[message, bub]).unwrap_err();
        assert!(
            err.contains("line 1 reads as nanobot but line 2 as bub"),
            "{err}"
        );
        let err = detect(&["[1, 2]"]).unwrap_err();
        assert!(err.contains("line 1 is not a JSON object"), "{err}");
        let err = detect(&[message, "", "# notes"]).unwrap_err();
        assert!(err.contains("line 3 is not a JSON object"), "{err}");
        let err = detect(&[r#"{"text": "hello"}"#]).unwrap_err();
        assert!(err.contains("line 1 is neither"), "{err}");
    }

    #[test]
    fn python_isoformat_is_read_as_utc() {
        let t = parse_time("2026-03-10T14:30:00.123456").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-03-10T14:30:00.123456+00:00");
        assert!(parse_time("2026-03-10T14:30:00+08:00").is_some());
        assert!(parse_time("yesterday").is_none());
    }
}
