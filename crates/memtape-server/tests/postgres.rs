//! Servers sharing one PostgreSQL database: the emergence schedule runs on one of them
//! only (the holder of the scheduler's advisory lock), and passes to another when it
//! stops. The model is a scripted OpenAI-compatible server on loopback, which counts the
//! calls it gets.
use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use memtape::{Engine, LifecycleConfig, Scope};
use memtape_llm::{OpenAi, RetryPolicy};
use memtape_postgres::PostgresStore;
use memtape_postgres::testing::Scratch;
use memtape_scripted::{Scripted, text};
use memtape_server::{AppState, KeyStore, Limits, ModelSetup};
use serde_json::json;

fn model(server: &Scripted) -> ModelSetup {
    let llm = OpenAi::new(&server.base, "scripted")
        .unwrap()
        .timeout(Duration::from_secs(5))
        .retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        });
    let mut lifecycle = LifecycleConfig::default();
    lifecycle.extraction.enabled = false;
    ModelSetup {
        llm: Arc::new(llm),
        lifecycle,
    }
}

fn server(url: &str, dir: &tempfile::TempDir, model_server: &Scripted) -> AppState {
    let engine = Engine::with_store(PostgresStore::connect(url).unwrap());
    AppState::with_model(
        engine,
        KeyStore::open(dir.path()),
        Limits::default(),
        true,
        Some(model(model_server)),
    )
}

#[test]
fn one_server_runs_the_emergence_schedule_and_another_takes_over_when_it_stops() {
    let db = Scratch::new();
    let answer = || text(&json!({"should_update": false, "reason": "nothing new"}).to_string());
    let model_server = Scripted::start(vec![answer(), answer(), answer(), answer()]);
    let seed = Engine::with_store(PostgresStore::connect(db.url()).unwrap());
    let memory = Scope::agent("default", "default").unwrap();
    seed.append_daily(&memory, "- Ada went kayaking", None)
        .unwrap();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = server(db.url(), &dir_a, &model_server);
    let b = server(db.url(), &dir_b, &model_server);
    // A window with the default schedule's 02:00 in it.
    let after = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
    let until = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(a.run_due_emergences(after, until));
    assert_eq!(model_server.requests(), 1, "A runs the schedule");
    runtime.block_on(b.run_due_emergences(after, until));
    assert_eq!(model_server.requests(), 1, "B leaves it to A");
    runtime.block_on(a.run_due_emergences(after, until));
    assert_eq!(model_server.requests(), 2, "A keeps it");
    // A stops: B takes the schedule over at its next tick.
    drop(a);
    runtime.block_on(b.run_due_emergences(after, until));
    assert_eq!(model_server.requests(), 3, "B took over");
    drop(b);
}
