//! SIGKILL under load: `memtape serve` is killed at a random moment while clients append;
//! after a restart, every append that was acknowledged is on the tape and searchable (the
//! index catches up). 3 trials in the suite; `MEMTAPE_SERVE_CRASH_TRIALS=N` for more.
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::Run;
use crate::common::serving::Serving;
use serde_json::json;

#[test]
fn every_acknowledged_append_survives_sigkill() {
    let trials: usize = std::env::var("MEMTAPE_SERVE_CRASH_TRIALS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(3);
    let r = Run::new();
    let mut total = 0;
    for trial in 0..trials {
        let s = Arc::new(Serving::start(&r, &[]));
        let acked: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
        let clients: Vec<_> = (0..8)
            .map(|c| {
                let (s, acked) = (s.clone(), acked.clone());
                std::thread::spawn(move || {
                    for i in 0.. {
                        let word = format!("t{trial}c{c}m{i}marker");
                        let Ok((201, body)) = s.try_call(
                            "POST",
                            &format!("/v1/sessions/crash-{c}/messages"),
                            Some(json!({"role": "assistant", "content": word})),
                            None,
                        ) else {
                            return; // the server is gone: this one was not acknowledged
                        };
                        let id = body["ids"][0].as_u64().unwrap();
                        acked.lock().unwrap().push((id, word));
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(150 + 97 * (trial as u64 % 5)));
        let pid = s.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-KILL", &pid])
                .status()
                .unwrap()
                .success()
        );
        for c in clients {
            c.join().unwrap();
        }
        let acked = std::mem::take(&mut *acked.lock().unwrap());
        assert!(!acked.is_empty(), "trial {trial}: the load never got going");
        total += acked.len();
        // The server is dead; reap it.
        let killed = Arc::try_unwrap(s).ok().unwrap();
        assert_eq!(killed.terminate_killed(), None, "killed by a signal");
        // Restart: every acknowledged append is there, and searchable.
        let s = Serving::start(&r, &[]);
        for (id, word) in &acked {
            let client = &word[word.find('c').unwrap() + 1..word.find('m').unwrap()];
            let path = format!(
                "/v1/sessions/crash-{client}/entries?after={}&limit=1",
                id - 1
            );
            let (_, entries) = s.call("GET", &path, None, None);
            assert_eq!(
                entries["entries"][0]["id"].as_u64(),
                Some(*id),
                "trial {trial}: acknowledged append {id} is missing"
            );
        }
        let (_, last) = acked.last().unwrap().clone();
        let (_, hits) = s.call("GET", &format!("/v1/search?q={last}&mode=bm25"), None, None);
        assert_eq!(
            hits["hits"][0]["entry"]["payload"]["content"], last,
            "trial {trial}: the index caught up"
        );
        let (code, _) = s.terminate();
        assert_eq!(code, Some(0));
    }
    println!("{trials} SIGKILL trials: {total} acknowledged appends, all on the tape");
}
