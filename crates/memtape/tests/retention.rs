//! Retention through the engine on a real SQLite file and index: policies from
//! `memtape.toml` and from the tape, field by field; each kind expiring at its cutoff;
//! memory never expiring; "only after consolidated"; one receipt per agent per run and
//! none when nothing expired; and a policy that no ordinary append or import can write.
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, TimeZone, Utc};
use memtape::erasure::Selector;
use memtape::events::{BuiltinEvent, RETENTION_POLICY};
use memtape::{
    AppendOptions, Engine, Entry, Event, Filter, Format, Index, IndexConfig, Kind, Message, Mode,
    NewEntry, Payload, Retention, RetentionConfig, Scope, SearchFilter, SearchRequest, Store,
    TenantRetention, ToolCall,
};

/// An engine whose clock reads `day` days after 2026-01-01.
fn open(dir: &std::path::Path, day: &Arc<AtomicI64>) -> Engine {
    let index = Index::open(&dir.join("index"), None, IndexConfig::plain()).unwrap();
    let clock = Arc::clone(day);
    Engine::init(dir)
        .unwrap()
        .with_clock(move || at(clock.load(Ordering::SeqCst)))
        .with_index(index)
        .unwrap()
}

fn at(day: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 9, 0, 0).unwrap() + chrono::Duration::days(day)
}

fn session(agent: &str) -> Scope {
    Scope::agent("t", agent).unwrap().with_session("s").unwrap()
}

fn say(e: &Engine, scope: &Scope, message: Message) -> Entry {
    e.append(scope, message, AppendOptions::default()).unwrap()
}

/// One exchange with a tool call in `scope`: user, tool call, tool result, answer.
fn exchange(e: &Engine, scope: &Scope, tag: &str) -> Vec<Entry> {
    vec![
        say(e, scope, Message::user(format!("question {tag}"))),
        say(
            e,
            scope,
            Message::assistant_tool_calls(vec![ToolCall::function("c1", "look", "{}")]),
        ),
        say(
            e,
            scope,
            Message::tool_result("c1", format!("result {tag}")),
        ),
        say(e, scope, Message::assistant(format!("answer {tag}"))),
    ]
}

fn receipts(e: &Engine, agent: &str) -> Vec<memtape::erasure::Erased> {
    let filter = Filter {
        kinds: vec![Kind::Event],
        ..Default::default()
    };
    e.store()
        .scan(&Scope::agent("t", agent).unwrap(), &filter)
        .unwrap()
        .into_iter()
        .filter_map(|entry| match BuiltinEvent::from_payload(&entry.payload) {
            Ok(Some(BuiltinEvent::Erased(r))) => Some(r),
            _ => None,
        })
        .collect()
}

/// Whether a BM25 search for `text` finds entry `id`.
fn finds(e: &Engine, text: &str, id: memtape::EntryId) -> bool {
    let request = SearchRequest::new(text, SearchFilter::tenant("t")).mode(Mode::Bm25);
    e.search(&request).unwrap().iter().any(|h| h.entry.id == id)
}

#[test]
fn each_kind_expires_at_its_cutoff_memory_stays_and_each_run_leaves_one_receipt() {
    let dir = tempfile::tempdir().unwrap();
    let day = Arc::new(AtomicI64::new(0));
    let e = open(dir.path(), &day);
    let s = session("a");
    let old = exchange(&e, &s, "zanzibar");
    e.save_long_term(
        &Scope::agent("t", "a").unwrap(),
        "the user lives in Zanzibar",
    )
    .unwrap();
    day.store(10, Ordering::SeqCst);
    let recent = exchange(&e, &s, "yokohama");
    let config = RetentionConfig {
        messages_days: Some(30),
        tool_results_days: Some(5),
        ..Default::default()
    };

    // Day 12: the old tool result (12 days) goes; everything else is within 30 days, and
    // the newer result (2 days) within 5.
    day.store(12, Ordering::SeqCst);
    let dry = e.run_retention(None, &config, "cli", true, None).unwrap();
    assert_eq!(dry.len(), 1);
    assert_eq!(dry[0].outcome.ids, vec![old[2].id]);
    assert!(receipts(&e, "a").is_empty(), "a dry run writes nothing");
    let runs = e.run_retention(None, &config, "cli", false, None).unwrap();
    assert_eq!(runs[0].outcome.ids, vec![old[2].id]);
    let got = e.store().get("t", old[2].id).unwrap().unwrap();
    assert!(got.is_tombstone());
    assert_eq!(got.kind(), Kind::ToolResult, "a tombstone keeps its kind");
    assert!(!finds(&e, "result zanzibar", old[2].id));
    assert!(finds(&e, "question zanzibar", old[0].id));

    // Day 41: the old exchange is over 30 days; the recent one (31 days) too; memory stays.
    day.store(39, Ordering::SeqCst);
    let runs = e.run_retention(None, &config, "cli", false, None).unwrap();
    let expected = [old[0].id, old[1].id, old[3].id, recent[2].id];
    assert_eq!(
        runs[0].outcome.ids, expected,
        "the day-10 messages are 29 days old"
    );
    day.store(41, Ordering::SeqCst);
    let runs = e.run_retention(None, &config, "cli", false, None).unwrap();
    let expected = [recent[0].id, recent[1].id, recent[3].id];
    assert_eq!(runs[0].outcome.ids, expected);
    let memory = e.memory(&Scope::agent("t", "a").unwrap()).unwrap();
    let long_term = memory.content(memtape::memory::paths::MEMORY).unwrap();
    assert!(long_term.contains("Zanzibar"), "memory is never expired");

    // Nothing left to expire: no receipt.
    let runs = e.run_retention(None, &config, "cli", false, None).unwrap();
    assert!(runs[0].outcome.receipt.is_none());
    let all = receipts(&e, "a");
    assert_eq!(all.len(), 3, "one receipt per run that expired something");
    assert_eq!(
        all[0].selector,
        Selector::Retention {
            messages_days: Some(30),
            tool_results_days: Some(5),
            only_consolidated: false,
        }
    );
    assert_eq!(all[1].entries, 4);
    // The thread keeps its structure: every entry still there, in order, as tombstones.
    let left = e.store().scan(&s, &Filter::default()).unwrap();
    assert_eq!(left.len(), 8);
    assert!(left.iter().all(Entry::is_tombstone));
    assert!(e.history(&s, &Default::default()).unwrap().is_empty());
}

#[test]
fn a_policy_on_the_tape_wins_field_by_field_and_only_consolidated_waits_for_the_pointer() {
    let dir = tempfile::tempdir().unwrap();
    let day = Arc::new(AtomicI64::new(0));
    let e = open(dir.path(), &day);
    let s = session("b");
    let first = exchange(&e, &s, "one");
    let second = exchange(&e, &s, "two");
    // The consolidation pointer passes the first exchange only.
    e.append_entries(vec![NewEntry::new(
        s.clone(),
        BuiltinEvent::consolidated(first[3].id).to_payload(),
        at(0),
    )])
    .unwrap();
    // An agent nobody set a policy for, under a tenant policy of 1 day.
    let other = session("c");
    let theirs = exchange(&e, &other, "three");

    let mut config = RetentionConfig {
        messages_days: Some(365),
        ..Default::default()
    };
    config.tenants.insert(
        "t".into(),
        TenantRetention {
            messages_days: Some(1),
            ..Default::default()
        },
    );
    let b = Scope::agent("t", "b").unwrap();
    assert_eq!(
        e.retention(&b, &config).unwrap().effective.messages_days,
        Some(1)
    );
    let set = e
        .set_retention(
            &b,
            Retention {
                only_consolidated: Some(true),
                ..Default::default()
            },
            &config,
        )
        .unwrap();
    assert_eq!(
        set.effective,
        Retention {
            messages_days: Some(1),
            tool_results_days: None,
            only_consolidated: Some(true),
        },
        "the tape's policy sets one field and inherits the rest"
    );

    day.store(5, Ordering::SeqCst);
    let runs = e
        .run_retention(Some("t"), &config, "schedule", false, None)
        .unwrap();
    let by_agent = |name: &str| {
        runs.iter()
            .find(|r| r.policy.scope.agent_name() == name)
            .unwrap()
            .outcome
            .ids
            .clone()
    };
    let ids = |entries: &[Entry]| entries.iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(by_agent("b"), ids(&first), "unconsolidated entries wait");
    assert_eq!(by_agent("c"), ids(&theirs));
    for entry in &second {
        assert!(
            !e.store()
                .get("t", entry.id)
                .unwrap()
                .unwrap()
                .is_tombstone()
        );
    }

    // A policy is not an ordinary event: neither an append nor an import writes one.
    let forged = NewEntry::new(
        Scope::agent("t", "b").unwrap(),
        Payload::Event(Event {
            name: RETENTION_POLICY.into(),
            data: serde_json::json!({"messages_days": 1}),
        }),
        at(5),
    );
    let err = e.append_entries(vec![forged]).unwrap_err().to_string();
    assert!(err.contains("retention.policy"), "{err}");
    let mut exported = Vec::new();
    e.export(Format::Memtape, &b, &mut exported).unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let other_engine = open(fresh.path(), &day);
    let err = other_engine
        .import(
            Format::Memtape,
            std::str::from_utf8(&exported).unwrap(),
            &Scope::agent("t", "b").unwrap(),
            None,
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("retention policy"), "{err}");
}

#[test]
fn bad_policies_are_refused_naming_where() {
    let mut config = RetentionConfig::default();
    config.tenants.insert(
        "acme".into(),
        TenantRetention {
            agents: [(
                "bot".to_owned(),
                Retention {
                    tool_results_days: Some(0),
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        },
    );
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("retention.tenants.acme.agents.bot"), "{err}");
    assert!(err.contains("tool_results_days"), "{err}");
    let config = RetentionConfig {
        schedule: "every day".into(),
        ..Default::default()
    };
    assert!(
        config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("schedule")
    );
    let off = RetentionConfig {
        schedule: "off".into(),
        ..Default::default()
    };
    assert!(off.schedule().unwrap().is_none());
}
