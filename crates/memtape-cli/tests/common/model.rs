//! A scripted model for the lifecycle tests: a run's memtape.toml pointing at it, a
//! conversation to consolidate, and the `save_memory` answer.

use memtape_scripted::{Answer, Scripted, tool_call};
use serde_json::json;

use super::Run;

/// Points the run's data directory at `server` through memtape.toml.
pub fn configure(r: &Run, server: &Scripted) {
    let toml = format!(
        "[llm]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted\"\ntimeout = 5\nmax_retries = 0\n",
        server.base
    );
    std::fs::write(r.dir.path().join("data/memtape.toml"), toml).unwrap();
}

/// `n` alternating user and assistant messages in `session`.
pub fn chat(r: &Run, session: &str, n: usize) {
    for i in 0..n {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        r.ok(&[
            "append",
            session,
            "--role",
            role,
            "--content",
            &format!("message {i} about the kayak trip"),
            "--no-wal",
        ]);
    }
}

/// The model's `save_memory` call with `memory` as the new MEMORY.md.
pub fn save_memory(memory: &str) -> Answer {
    tool_call(
        "save_memory",
        json!({"history_entry": "[2026-03-10 14:30] Planned a kayak trip.", "memory_update": memory}),
    )
}

/// Waits (10 s at most) until `child` has sent `server` a request, failing if it ends
/// first: the process is then inside its model call.
pub fn wait_for_call(server: &Scripted, child: &mut std::process::Child) {
    let started = std::time::Instant::now();
    while server.requests() == 0 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "the process never called the model"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the process ended before calling the model"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
