//! A scripted model server on loopback that speaks the real HTTP protocol: each
//! connection gets the next scripted answer, and the server records what it was sent.
//! memtape's tests talk to it through the real clients, so every failure a model server
//! can produce (a bad tool call, 429 then success, 500 forever, a hang, a context that is
//! too long, a stream cut mid-way) goes over the wire, as in production.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// One scripted answer: a status, extra headers and a body, or no answer at all.
pub enum Answer {
    /// An HTTP status, extra headers and a JSON body.
    Reply(u16, Vec<(&'static str, String)>, String),
    /// No answer: the connection stays open for 30 s (a hang past any timeout).
    Hang,
    /// `answer`, after waiting this long (a slow model).
    Delayed(Duration, Box<Answer>),
    /// A server-sent event stream: `events` are sent as they are, then, if `cut`, the
    /// connection closes early (the stream announces more bytes than it sends).
    Stream {
        /// The events, each sent as it is (`data: ...\n\n`).
        events: Vec<String>,
        /// Whether the connection closes before the announced length.
        cut: bool,
    },
}

/// The chunk of an OpenAI stream carrying `delta`.
pub fn delta(delta: Value) -> String {
    format!(
        "data: {}\n\n",
        serde_json::json!({"choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    )
}

/// What the server was sent: the request line, headers (lowercased names) and body.
pub struct Seen {
    /// `POST /v1/chat/completions HTTP/1.1`.
    pub line: String,
    /// The headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The JSON body (null when it was not JSON).
    pub body: Value,
}

/// A running scripted server.
pub struct Scripted {
    /// Its base URL, `http://127.0.0.1:PORT/v1`.
    pub base: String,
    /// Every request it was sent, in order.
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Scripted {
    /// Starts a server that answers the n-th request with `script[n]`, and every request
    /// after the script with a 500.
    ///
    /// # Panics
    /// When no loopback port can be bound (a test cannot run without one).
    pub fn start(script: Vec<Answer>) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let base = match listener.local_addr() {
            Ok(addr) => format!("http://{addr}/v1"),
            Err(e) => panic!("the listener has no address: {e}"),
        };
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let record = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                // A client that gives up mid-request is skipped; the next one is served.
                let Some(request) = read_request(&stream) else {
                    continue;
                };
                record
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(request);
                let answer = script
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .pop_front();
                std::thread::spawn(move || answer_with(stream, answer));
            }
        });
        Scripted { base, seen }
    }

    /// How many requests it was sent.
    pub fn requests(&self) -> usize {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// The JSON body of the n-th request.
    pub fn body(&self, n: usize) -> Option<Value> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(n)
            .map(|s| s.body.clone())
    }
}

/// Reads one HTTP request (line, headers, a body of content-length bytes).
fn read_request(stream: &std::net::TcpStream) -> Option<Seen> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_lowercase(), v.trim().to_owned()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map_or(Some(0), |(_, v)| v.parse().ok())?;
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Seen {
        line: line.trim_end().to_owned(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

/// Writes `answer` to `stream`.
fn answer_with(mut stream: std::net::TcpStream, answer: Option<Answer>) {
    match answer {
        Some(Answer::Delayed(wait, answer)) => {
            std::thread::sleep(wait);
            answer_with(stream, Some(*answer));
        }
        Some(Answer::Hang) => {
            // Keep the connection open without answering.
            std::thread::sleep(Duration::from_secs(30));
            drop(stream);
        }
        Some(Answer::Reply(status, extra, body)) => {
            let mut head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (k, v) in extra {
                head += &format!("{k}: {v}\r\n");
            }
            let _ = stream.write_all(format!("{head}\r\n{body}").as_bytes());
        }
        Some(Answer::Stream { events, cut }) => {
            let body: String = events.concat();
            let len = if cut { body.len() + 100 } else { body.len() };
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {len}\r\nconnection: close\r\n\r\n"
            );
            let _ = stream.write_all(head.as_bytes());
            for e in events {
                let _ = stream.write_all(e.as_bytes());
                let _ = stream.flush();
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        None => {
            let _ = stream
                .write_all(b"HTTP/1.1 500 X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    }
}

/// A 200 with `body` as JSON.
pub fn ok(body: Value) -> Answer {
    Answer::Reply(200, Vec::new(), body.to_string())
}

/// An OpenAI chat completion that calls `tool` with `arguments` (sent as they are: a JSON
/// string normally, but any value, to test what providers really send).
pub fn tool_call(tool: &str, arguments: Value) -> Answer {
    ok(serde_json::json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant",
                "content": null,
                "tool_calls": [{
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": tool, "arguments": arguments}
                }]
            },
            "finish_reason": "tool_calls"
        }],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
    }))
}

/// An OpenAI chat completion that answers `text` without calling a tool.
pub fn text(text: &str) -> Answer {
    ok(serde_json::json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
    }))
}

/// OpenAI's answer to a prompt that does not fit the model's context.
pub fn context_length_exceeded() -> Answer {
    Answer::Reply(
        400,
        Vec::new(),
        serde_json::json!({"error": {
            "message": "This model's maximum context length is 4096 tokens. However, you requested 9000 tokens.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded"
        }})
        .to_string(),
    )
}

/// An HTTP error status with an OpenAI-shaped error body.
pub fn status(code: u16, message: &str) -> Answer {
    Answer::Reply(
        code,
        Vec::new(),
        serde_json::json!({"error": {"message": message, "type": "server_error"}}).to_string(),
    )
}

/// An OpenAI stream that says `text` in a few pieces, then its usage and `[DONE]`.
pub fn stream_text(text: &str) -> Answer {
    let chars: Vec<char> = text.chars().collect();
    let mut events: Vec<String> = chars
        .chunks(8)
        .map(|piece| delta(serde_json::json!({"content": piece.iter().collect::<String>()})))
        .collect();
    events.push(finish("stop"));
    events.push("data: [DONE]\n\n".into());
    Answer::Stream { events, cut: false }
}

/// An OpenAI stream that calls `tool` with `arguments` (a JSON text), sent in two pieces.
pub fn stream_tool_call(tool: &str, arguments: &str) -> Answer {
    let half = arguments.len() / 2;
    let half = (0..=half)
        .rev()
        .find(|i| arguments.is_char_boundary(*i))
        .unwrap_or(0);
    let events = vec![
        delta(
            serde_json::json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": tool, "arguments": &arguments[..half]}}]}),
        ),
        delta(serde_json::json!({"tool_calls": [{"index": 0,
            "function": {"arguments": &arguments[half..]}}]})),
        finish("tool_calls"),
        "data: [DONE]\n\n".into(),
    ];
    Answer::Stream { events, cut: false }
}

/// The last chunk of an OpenAI stream: the finish reason and the usage.
fn finish(reason: &str) -> String {
    format!(
        "data: {}\n\n",
        serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}})
    )
}
