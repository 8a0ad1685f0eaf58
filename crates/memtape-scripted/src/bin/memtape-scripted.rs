//! `memtape-scripted SCRIPT.json [--record FILE]`: the scripted model server as a program,
//! for tests in other languages (the Python package's agent-framework tests). It prints
//! its base URL (`http://127.0.0.1:PORT/v1`) on the first line of stdout, answers the n-th
//! request with the n-th answer of the script, and (with `--record`) appends each request's
//! JSON body to FILE as one line, until it is killed.
//!
//! A script is a JSON array of answers: `{"text": "..."}` (a chat completion that says it),
//! `{"tool_call": {"name": "...", "arguments": {...}}}`, `{"stream_text": "..."}`,
//! `{"status": 503, "message": "..."}`, or `{"reply": {...}}` (any JSON body, status 200).

use std::io::Write;
use std::time::Duration;

use memtape_scripted::{Answer, Scripted};
use serde_json::Value;

fn main() {
    if let Err(e) = run() {
        eprintln!("memtape-scripted: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let script_path = args
        .next()
        .ok_or("usage: memtape-scripted SCRIPT.json [--record FILE]")?;
    let record = match (args.next().as_deref(), args.next()) {
        (Some("--record"), Some(file)) => Some(file),
        (None, _) => None,
        _ => return Err("usage: memtape-scripted SCRIPT.json [--record FILE]".into()),
    };
    let text = std::fs::read_to_string(&script_path).map_err(|e| format!("{script_path}: {e}"))?;
    let script: Vec<Value> =
        serde_json::from_str(&text).map_err(|e| format!("{script_path}: {e}"))?;
    let answers = script
        .iter()
        .enumerate()
        .map(|(i, a)| answer(a).map_err(|e| format!("{script_path}: answer {i}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let server = Scripted::start(answers);
    println!("{}", server.base);
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let mut written = 0;
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let Some(file) = &record else { continue };
        while written < server.requests() {
            let body = server.body(written).unwrap_or(Value::Null);
            let mut out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(file)
                .map_err(|e| format!("{file}: {e}"))?;
            writeln!(out, "{body}").map_err(|e| format!("{file}: {e}"))?;
            written += 1;
        }
    }
}

/// One answer of the script.
fn answer(a: &Value) -> Result<Answer, String> {
    let field = |name: &str| a.get(name);
    if let Some(text) = field("text").and_then(Value::as_str) {
        return Ok(memtape_scripted::text(text));
    }
    if let Some(text) = field("stream_text").and_then(Value::as_str) {
        return Ok(memtape_scripted::stream_text(text));
    }
    if let Some(call) = field("tool_call") {
        let name = call
            .get("name")
            .and_then(Value::as_str)
            .ok_or("a tool_call needs a name")?;
        let arguments = call.get("arguments").cloned().unwrap_or(Value::Null);
        // Providers send the arguments as a JSON text.
        let arguments = match arguments {
            Value::String(s) => Value::String(s),
            other => Value::String(other.to_string()),
        };
        return Ok(memtape_scripted::tool_call(name, arguments));
    }
    if let Some(status) = field("status").and_then(Value::as_u64) {
        let status = u16::try_from(status).map_err(|_| "status out of range")?;
        let message = field("message").and_then(Value::as_str).unwrap_or("");
        return Ok(memtape_scripted::status(status, message));
    }
    if let Some(body) = field("reply") {
        return Ok(memtape_scripted::ok(body.clone()));
    }
    Err(format!(
        "not an answer: {a} (give text, stream_text, tool_call, status or reply)"
    ))
}
