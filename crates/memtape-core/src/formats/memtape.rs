//! memtape's own JSONL format: one [`Entry`] per line, every field kept.

use crate::formats::{bad, json_lines};
use crate::{Entry, Result};

/// Parses a memtape JSONL file. Ids must increase line by line and parents must point back.
pub fn parse(text: &str) -> Result<Vec<Entry>> {
    let mut out: Vec<Entry> = Vec::new();
    for item in json_lines(text) {
        let (line, value) = item?;
        let entry: Entry = serde_json::from_value(value).map_err(|e| bad(line, e.to_string()))?;
        if let Some(prev) = out.last()
            && entry.id <= prev.id
        {
            return Err(bad(
                line,
                format!("id {} does not follow id {}", entry.id, prev.id),
            ));
        }
        if let Some(p) = entry.parent
            && p >= entry.id
        {
            return Err(bad(
                line,
                format!("parent {p} is not before entry {}", entry.id),
            ));
        }
        out.push(entry);
    }
    Ok(out)
}

/// One entry as a line (without the newline).
pub fn line(entry: &Entry) -> String {
    // An Entry serializes to plain JSON data; this cannot fail.
    serde_json::to_string(entry).unwrap_or_default()
}
