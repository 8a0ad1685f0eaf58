//! A scripted model server on loopback that speaks the real HTTP protocol: each
//! connection gets the next scripted answer, and the server records what it was sent.
#![allow(dead_code)] // Not every test file uses every part.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use memtape_llm::RetryPolicy;
use serde_json::Value;

/// One scripted answer: a status, extra headers and a body, or no answer at all.
pub enum Answer {
    Reply(u16, Vec<(&'static str, String)>, String),
    Hang,
    /// A server-sent event stream: `events` are sent as they are, then, if `cut`, the
    /// connection closes early (the stream announces more bytes than it sends).
    Stream {
        events: Vec<String>,
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
    pub line: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

pub struct Scripted {
    pub base: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Scripted {
    pub fn start(script: Vec<Answer>) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let record = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let mut headers = Vec::new();
                loop {
                    let mut h = String::new();
                    reader.read_line(&mut h).unwrap();
                    let h = h.trim_end();
                    if h.is_empty() {
                        break;
                    }
                    let (k, v) = h.split_once(':').unwrap();
                    headers.push((k.trim().to_lowercase(), v.trim().to_owned()));
                }
                let len: usize = headers
                    .iter()
                    .find(|(k, _)| k == "content-length")
                    .map_or(0, |(_, v)| v.parse().unwrap());
                let mut body = vec![0; len];
                reader.read_exact(&mut body).unwrap();
                record.lock().unwrap().push(Seen {
                    line: line.trim_end().to_owned(),
                    headers,
                    body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                });
                let answer = script.lock().unwrap().pop_front();
                match answer {
                    Some(Answer::Hang) => {
                        // Keep the connection open without answering.
                        std::thread::spawn(move || {
                            std::thread::sleep(Duration::from_secs(30));
                            drop(stream);
                        });
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
                        let _ = stream.write_all(
                            b"HTTP/1.1 500 X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        );
                    }
                }
            }
        });
        Scripted { base, seen }
    }

    pub fn requests(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

pub fn ok(body: Value) -> Answer {
    Answer::Reply(200, Vec::new(), body.to_string())
}

pub fn fast_retries(n: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries: n,
        base: Duration::from_millis(1),
        cap: Duration::from_millis(5),
        ..RetryPolicy::default()
    }
}
