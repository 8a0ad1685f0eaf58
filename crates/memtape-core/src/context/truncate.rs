//! Qanot's tool result truncation: an oversized result keeps its head and tail, with a
//! marker in between saying how many characters were removed.

use crate::{Content, Message, Role};

/// Qanot's limit: tool results longer than this many characters are truncated.
pub const TOOL_RESULT_MAX_CHARS: usize = 8_000;
/// Qanot: the share of the limit kept from the beginning.
pub const TOOL_RESULT_HEAD: f64 = 0.70;
/// Qanot: the share of the limit kept from the end.
pub const TOOL_RESULT_TAIL: f64 = 0.20;

/// The head and tail of `text` with Qanot's marker `\n\n... [truncated N chars] ...\n\n`
/// between them, when `text` is longer than `max_chars` characters; `None` when it fits.
/// The head is `head` × `max_chars` characters and the tail `tail` × `max_chars`;
/// characters are Unicode scalar values, so a cut never splits one.
///
/// ```
/// use memtape_core::context::truncate_tool_result;
///
/// let text = "x".repeat(10_000);
/// let cut = truncate_tool_result(&text, 8_000, 0.7, 0.2).unwrap();
/// assert!(cut.starts_with(&"x".repeat(5_600)));
/// assert!(cut.contains("\n\n... [truncated 2800 chars] ...\n\n"));
/// assert!(truncate_tool_result("short", 8_000, 0.7, 0.2).is_none());
/// ```
pub fn truncate_tool_result(text: &str, max_chars: usize, head: f64, tail: f64) -> Option<String> {
    let total = text.chars().count();
    if total <= max_chars {
        return None;
    }
    let keep_head = ((max_chars as f64) * head.clamp(0.0, 1.0)) as usize;
    let keep_tail = ((max_chars as f64) * tail.clamp(0.0, 1.0)) as usize;
    let keep_tail = keep_tail.min(total - keep_head.min(total));
    let removed = total - keep_head - keep_tail;
    let byte_at = |chars: usize| {
        text.char_indices()
            .nth(chars)
            .map_or(text.len(), |(i, _)| i)
    };
    let head_end = byte_at(keep_head);
    let tail_start = byte_at(total - keep_tail);
    Some(format!(
        "{}\n\n... [truncated {removed} chars] ...\n\n{}",
        &text[..head_end],
        &text[tail_start..]
    ))
}

/// `message` with its text truncated by [`truncate_tool_result`] when it is a tool result;
/// the flag says whether anything was cut. Other messages come back as they are.
pub(crate) fn truncate_tool_message(
    mut message: Message,
    max_chars: usize,
    head: f64,
    tail: f64,
) -> (Message, bool) {
    if message.role != Role::Tool {
        return (message, false);
    }
    let mut cut = false;
    match &mut message.content {
        Some(Content::Text(text)) => {
            if let Some(short) = truncate_tool_result(text, max_chars, head, tail) {
                *text = short;
                cut = true;
            }
        }
        Some(Content::Parts(parts)) => {
            for part in parts {
                if let Some(text) = &mut part.text
                    && let Some(short) = truncate_tool_result(text, max_chars, head, tail)
                {
                    *text = short;
                    cut = true;
                }
            }
        }
        None => {}
    }
    (message, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qanot: "Tool results exceeding 8,000 characters are truncated … keeps 70% from the
    /// beginning and 20% from the end with a marker showing how many characters were
    /// removed."
    #[test]
    fn qanot_tool_results_over_8000_chars_keep_70_percent_head_and_20_percent_tail() {
        let text: String = (0..12_000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let cut = truncate_tool_result(
            &text,
            TOOL_RESULT_MAX_CHARS,
            TOOL_RESULT_HEAD,
            TOOL_RESULT_TAIL,
        )
        .unwrap();
        let marker = "\n\n... [truncated 4800 chars] ...\n\n";
        let (head, tail) = cut.split_once(marker).unwrap();
        assert_eq!(head, &text[..5_600]);
        assert_eq!(tail, &text[12_000 - 1_600..]);
        // Exactly at the limit nothing changes.
        let exact = "y".repeat(8_000);
        assert!(truncate_tool_result(&exact, 8_000, 0.7, 0.2).is_none());
    }

    #[test]
    fn truncation_counts_characters_not_bytes() {
        let text = "é".repeat(9_000);
        let cut = truncate_tool_result(&text, 8_000, 0.7, 0.2).unwrap();
        assert!(cut.starts_with(&"é".repeat(5_600)));
        assert!(cut.ends_with(&"é".repeat(1_600)));
        assert!(cut.contains("[truncated 1800 chars]"));
    }

    #[test]
    fn only_tool_results_are_truncated() {
        let long = "z".repeat(9_000);
        let (user, cut) = truncate_tool_message(Message::user(long.clone()), 8_000, 0.7, 0.2);
        assert!(!cut);
        assert_eq!(user.content_text(), long);
        let (tool, cut) = truncate_tool_message(Message::tool_result("c", long), 8_000, 0.7, 0.2);
        assert!(cut);
        assert!(tool.content_text().contains("[truncated 1800 chars]"));
    }
}
