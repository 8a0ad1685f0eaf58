//! SIGKILL under load: `memtape serve` is killed at a random moment while clients append
//! (user messages the WAL captures, alternating with the assistant's replies, each sent with
//! an `Idempotency-Key`); after a restart, each client sends again the one request it had no
//! answer for, with the same key. Then: every append that was acknowledged is on the tape
//! and searchable (the index caught up), its capture is in SESSION-STATE.md, and no message
//! is on the tape twice. 3 trials in the suite; `MEMTAPE_SERVE_CRASH_TRIALS=N` for more (the
//! figures of a 200-trial run are in docs/benchmarks.md).
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::Run;
use crate::common::serving::Serving;
use serde_json::{Value, json};

/// Sends `body` with `key`; the status and answer, or `None` when the server is gone.
fn send(base: &str, session: &str, body: &Value, key: &str) -> Option<(u16, Value)> {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .new_agent();
    let mut response = agent
        .post(&format!("{base}/v1/sessions/{session}/messages"))
        .header("Idempotency-Key", key)
        .send_json(body)
        .ok()?;
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().ok()?;
    Some((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
}

/// Every entry of `session`, as the server lists them.
fn entries(s: &Serving, session: &str) -> Vec<Value> {
    let (status, body) = s.call(
        "GET",
        &format!("/v1/sessions/{session}/entries?limit=1000"),
        None,
        None,
    );
    if status == 404 {
        return Vec::new();
    }
    assert_eq!(status, 200, "{body}");
    body["entries"].as_array().cloned().unwrap_or_default()
}

#[test]
fn every_acknowledged_append_survives_sigkill() {
    let trials: usize = std::env::var("MEMTAPE_SERVE_CRASH_TRIALS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(3);
    let r = Run::new();
    let (mut total, mut retried, mut duplicated) = (0, 0, 0);
    for trial in 0..trials {
        let s = Arc::new(Serving::start(&r, &[]));
        let acked: Arc<Mutex<Vec<(u64, String, String)>>> = Arc::default();
        let clients: Vec<_> = (0..8)
            .map(|c| {
                let (base, acked) = (s.base.clone(), acked.clone());
                std::thread::spawn(move || {
                    let session = format!("crash-{trial}-{c}");
                    for i in 0u64.. {
                        let marker = format!("t{trial}c{c}m{i}marker");
                        let body = if i.is_multiple_of(2) {
                            json!({"role": "user", "content": format!("my order {} ships Friday {marker}", 1_000_000 + i)})
                        } else {
                            json!({"role": "assistant", "content": marker.clone()})
                        };
                        match send(&base, &session, &body, &marker) {
                            Some((201, answer)) => {
                                let id = answer["ids"][0].as_u64().unwrap();
                                acked.lock().unwrap().push((id, session.clone(), marker));
                            }
                            Some((status, answer)) => {
                                panic!("{status} {answer}")
                            }
                            // The server is gone: this request has no answer.
                            None => return Some((session, body, marker)),
                        }
                    }
                    None::<(String, Value, String)>
                })
            })
            .collect();
        // Once the load is going (a few appends answered), a moment more, then the kill.
        let started = std::time::Instant::now();
        while acked.lock().unwrap().len() < 8 && started.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(50 + 97 * (trial as u64 % 5)));
        s.kill();
        let unanswered: Vec<_> = clients
            .into_iter()
            .filter_map(|c| c.join().unwrap())
            .collect();
        let mut acked = std::mem::take(&mut *acked.lock().unwrap());
        assert!(!acked.is_empty(), "trial {trial}: the load never got going");
        // The server is dead; reap it.
        let killed = Arc::try_unwrap(s).ok().unwrap();
        assert_eq!(killed.terminate_killed(), None, "killed by a signal");
        // Restart, and send each unanswered request again with its key: it is stored once
        // (now, or it was before the kill), or reported as cut off (409), never twice.
        let s = Serving::start(&r, &[]);
        for (session, body, marker) in &unanswered {
            let (status, answer) = send(&s.base, session, body, marker).unwrap();
            assert!(status == 201 || status == 409, "{status} {answer}");
            if status == 201 {
                retried += 1;
                let id = answer["ids"][0].as_u64().unwrap();
                acked.push((id, session.clone(), marker.clone()));
            }
        }
        total += acked.len();
        let mut by_session: HashMap<String, Vec<Value>> = HashMap::new();
        for c in 0..8 {
            let session = format!("crash-{trial}-{c}");
            let listed = entries(&s, &session);
            by_session.insert(session, listed);
        }
        // No message is on the tape twice.
        let mut seen: HashMap<String, usize> = HashMap::new();
        for entry in by_session.values().flatten() {
            let text = entry["payload"]["content"].as_str().unwrap_or_default();
            let marker = text.split_whitespace().last().unwrap_or_default();
            *seen.entry(marker.to_owned()).or_default() += 1;
        }
        duplicated += seen.values().filter(|n| **n > 1).count();
        // Every acknowledged append is there.
        let (_, memory) = s.call("GET", "/v1/memory", None, None);
        let state = memory["files"]["SESSION-STATE.md"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        for (id, session, marker) in &acked {
            assert!(
                by_session[session]
                    .iter()
                    .any(|e| e["id"].as_u64() == Some(*id)),
                "trial {trial}: acknowledged append {id} is missing"
            );
            let user = marker
                .rsplit_once('m')
                .and_then(|(_, n)| n.trim_end_matches("marker").parse::<u64>().ok())
                .is_some_and(|i| i.is_multiple_of(2));
            if user {
                assert!(
                    state.contains(marker.as_str()),
                    "trial {trial}: the capture of {marker} is missing"
                );
            }
        }
        let (_, _, last) = acked.last().unwrap().clone();
        let (_, hits) = s.call("GET", &format!("/v1/search?q={last}&mode=bm25"), None, None);
        assert!(
            hits["hits"][0]["entry"]["payload"]["content"]
                .as_str()
                .is_some_and(|t| t.contains(&last)),
            "trial {trial}: the index caught up: {hits}"
        );
        let (code, _) = s.terminate();
        assert_eq!(code, Some(0));
    }
    println!(
        "{trials} SIGKILL trials: {total} acknowledged appends ({retried} of them on a retry \
         after the restart), 0 lost, {duplicated} duplicated"
    );
    assert_eq!(duplicated, 0, "messages stored twice");
}
