//! Server-sent events as both providers stream them: `data:` lines (several join with a
//! newline) make one event, a blank line ends it; comments (`:`), `event:`, `id:` and
//! `retry:` lines are skipped. An `error:` line (older llama.cpp servers sent errors so,
//! which standard parsers drop) is handed on as an event of its own, wrapped as
//! `{"error": …}`. An event still open when the stream ends is handed on too (a final
//! `[DONE]` without its blank line).

use std::io::BufRead;

use crate::error::Result;
use crate::http::broken;

/// Reads events from `reader` and hands each event's data to `event`, until it returns
/// `true` (the reply is complete) or the stream ends. Returns whether `event` said the
/// reply was complete.
pub(crate) fn read(
    reader: &mut dyn BufRead,
    mut event: impl FnMut(&str) -> Result<bool>,
) -> Result<bool> {
    let mut data = String::new();
    let mut open = false;
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).map_err(|e| broken(&e))?;
        let text = line.trim_end_matches(['\r', '\n']);
        if n == 0 || text.is_empty() {
            if open && event(&data)? {
                return Ok(true);
            }
            data.clear();
            open = false;
            if n == 0 {
                return Ok(false);
            }
            continue;
        }
        if let Some(rest) = text.strip_prefix("data:") {
            if open {
                data.push('\n');
            }
            data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
            open = true;
        } else if let Some(rest) = text.strip_prefix("error:") {
            let rest = rest.trim();
            if event(&format!("{{\"error\": {rest}}}"))? {
                return Ok(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn events(text: &str) -> (Vec<String>, bool) {
        let mut out = Vec::new();
        let done = read(&mut text.as_bytes(), |d| {
            out.push(d.to_owned());
            Ok(d == "[DONE]")
        })
        .unwrap();
        (out, done)
    }

    #[test]
    fn data_lines_comments_crlf_and_a_last_event_without_its_blank_line() {
        let (got, done) = events(
            ": keep-alive\r\nevent: message_start\r\ndata: {\"a\":1}\r\n\r\ndata: x\ndata: y\n\ndata: [DONE]",
        );
        assert_eq!(got, ["{\"a\":1}", "x\ny", "[DONE]"]);
        assert!(done);
        let (got, done) = events("data: {\"a\":1}\n\n");
        assert_eq!((got.len(), done), (1, false), "no end marker");
    }

    #[test]
    fn an_error_line_is_an_event() {
        let (got, _) = events("error: {\"message\":\"boom\"}\n\n");
        assert_eq!(got, ["{\"error\": {\"message\":\"boom\"}}"]);
    }

    proptest::proptest! {
        /// Any bytes read as a stream give events or a typed error, never a panic.
        #[test]
        fn any_stream_is_read_or_refused(text in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = read(&mut text.as_slice(), |_| Ok(false));
        }
    }
}
