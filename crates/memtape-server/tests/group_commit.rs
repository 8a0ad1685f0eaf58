//! Group commit under concurrency, on a real server: many clients append at once; every
//! acknowledged append is on the tape exactly once, each session keeps its order, and a
//! request that cannot be written fails alone while the requests sharing its transaction
//! are written.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::Server;
use serde_json::json;

#[test]
fn concurrent_appends_are_all_acknowledged_durable_and_in_order() {
    let s = Arc::new(Server::start());
    let clients = 32;
    let each = 40;
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                for i in 0..each {
                    let (status, body) = s.post(
                        &format!("/v1/sessions/client-{c}/messages"),
                        &json!({"role": "assistant", "content": format!("c{c} m{i}")}),
                    );
                    assert_eq!(status, 201, "{body}");
                    ids.push(body["ids"][0].as_u64().unwrap());
                }
                // A request the store refuses (a parent that does not exist) fails alone.
                let (status, body) = s.post(
                    &format!("/v1/sessions/client-{c}/messages"),
                    &json!({"role": "assistant", "content": "orphan", "parent": 9_000_000_000u64}),
                );
                assert_eq!(status, 400, "{body}");
                ids
            })
        })
        .collect();
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let acknowledged = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), acknowledged, "every id once");
    for c in 0..clients {
        let (_, history) = s.get(&format!("/v1/sessions/client-{c}/history"));
        let texts: Vec<String> = history["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap().to_owned())
            .filter(|t| t != "orphan")
            .collect();
        let want: Vec<String> = (0..each).map(|i| format!("c{c} m{i}")).collect();
        assert_eq!(texts, want, "client {c}'s messages, in order");
    }
}
