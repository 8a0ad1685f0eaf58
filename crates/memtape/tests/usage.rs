//! Model calls recorded on the agent's tape and summed per model and purpose, on a real
//! SQLite store.
use memtape::events::{LLM_CALL, LlmCall};
use memtape::{Engine, Scope, UsageLine};
use serde_json::json;

fn call(model: &str, purpose: &str, tokens: (u64, u64), error: Option<&str>) -> LlmCall {
    LlmCall {
        model: model.into(),
        purpose: purpose.into(),
        session: Some("chat-1".into()),
        prompt_tokens: tokens.0,
        completion_tokens: tokens.1,
        attempts: 1,
        ms: 900,
        error: error.map(str::to_owned),
    }
}

#[test]
fn calls_are_summed_per_model_and_purpose_for_the_agent_whatever_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let session = Scope::agent("t", "a")
        .unwrap()
        .with_session("chat-1")
        .unwrap();
    let user_session = Scope::agent("t", "a")
        .unwrap()
        .with_user("u")
        .unwrap()
        .with_session("s")
        .unwrap();
    engine
        .record_llm_call(&session, call("smollm2", "consolidation", (1000, 80), None))
        .unwrap();
    engine
        .record_llm_call(
            &user_session,
            call("smollm2", "consolidation", (500, 20), Some("timeout")),
        )
        .unwrap();
    engine
        .record_llm_call(&session, call("smollm2", "extraction", (300, 40), None))
        .unwrap();
    // Another agent's calls are its own.
    let other = Scope::agent("t", "b").unwrap();
    engine
        .record_llm_call(&other, call("smollm2", "consolidation", (7, 7), None))
        .unwrap();

    let usage = engine.llm_usage(&session, None, None).unwrap();
    assert_eq!(
        usage,
        vec![
            UsageLine {
                model: "smollm2".into(),
                purpose: "consolidation".into(),
                calls: 2,
                failed: 1,
                prompt_tokens: 1500,
                completion_tokens: 100,
            },
            UsageLine {
                model: "smollm2".into(),
                purpose: "extraction".into(),
                calls: 1,
                failed: 0,
                prompt_tokens: 300,
                completion_tokens: 40,
            },
        ]
    );
    assert_eq!(engine.llm_usage(&other, None, None).unwrap()[0].calls, 1);
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    assert!(
        engine
            .llm_usage(&session, Some(later), None)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_malformed_call_event_is_refused_at_the_door() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let agent = Scope::agent("t", "a").unwrap();
    let err = engine
        .event(
            &agent,
            LLM_CALL,
            json!({"model": "m", "purpose": "p", "prompt_tokens": "many"}),
        )
        .unwrap_err();
    assert!(err.to_string().contains(LLM_CALL), "{err}");
    let err = engine
        .record_llm_call(&agent, call("", "consolidation", (1, 1), None))
        .unwrap_err();
    assert!(err.to_string().contains("model"), "{err}");
    assert!(engine.llm_usage(&agent, None, None).unwrap().is_empty());
}

#[test]
fn an_import_counts_memory_versions_not_the_other_events_of_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let agent = Scope::agent("t", "a").unwrap();
    let at = "2026-11-23T06:39:01Z";
    let line = |id: u64, name: &str, data: serde_json::Value| {
        json!({"id": id, "scope": {"tenant": "t", "agent": "a"}, "kind": "event",
               "created_at": at, "payload": {"name": name, "data": data}, "meta": {}})
        .to_string()
    };
    let text = [
        line(1, LLM_CALL, json!({"model": "m", "purpose": "consolidation"})),
        line(
            2,
            "memory.change",
            json!({"ops": [{"op": "write", "path": "MEMORY.md", "content": "- tea"}], "source": "test"}),
        ),
    ]
    .join("\n");
    let report = engine
        .import(memtape::Format::Memtape, &text, &agent, None)
        .unwrap();
    assert_eq!((report.entries, report.memory_versions), (2, 1));
    assert_eq!(engine.llm_usage(&agent, None, None).unwrap()[0].calls, 1);
}
