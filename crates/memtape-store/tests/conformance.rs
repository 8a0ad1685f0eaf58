//! One behavioural suite for every Store implementation: the SQLite store, the in-memory
//! store and the PostgreSQL store must agree on ids, parent links, projections, filters
//! and atomicity. PostgreSQL runs on the cluster `MEMTAPE_TEST_DATABASE_URL` names (a
//! fresh database per check); without one these tests fail, saying how to start it.

#![allow(clippy::unwrap_used)] // Test helpers panic on failure by design.

use chrono::{DateTime, Duration, Utc};
use memtape_core::{
    Anchor, Entry, EntryId, Event, Filter, Kind, Message, NewEntry, Order, Payload, Scope,
    ToolCall, events,
};
use memtape_postgres::PostgresStore;
use memtape_postgres::testing::Scratch;
use memtape_store::{MemoryStore, Placement, SqliteStore, Store};
use serde_json::json;

fn t(secs: i64) -> DateTime<Utc> {
    DateTime::UNIX_EPOCH + Duration::seconds(1_700_000_000 + secs)
}

fn session(name: &str) -> Scope {
    Scope::agent("acme", "bot")
        .unwrap()
        .with_session(name)
        .unwrap()
}

fn msg(scope: &Scope, m: Message, at: i64) -> NewEntry {
    NewEntry::new(scope.clone(), Payload::Message(m), t(at))
}

fn event(scope: &Scope, name: &str, data: serde_json::Value) -> NewEntry {
    NewEntry::new(
        scope.clone(),
        Payload::Event(Event {
            name: name.into(),
            data,
        }),
        t(0),
    )
}

fn anchor(scope: &Scope, name: &str) -> NewEntry {
    NewEntry::new(
        scope.clone(),
        Payload::Anchor(Anchor {
            name: name.into(),
            state: None,
        }),
        t(0),
    )
}

/// Runs `check` against a fresh store of each kind.
fn each_store(check: impl Fn(&dyn Store)) {
    check(&MemoryStore::new());
    let dir = tempfile::tempdir().unwrap();
    check(&SqliteStore::create(dir.path()).unwrap());
    let db = Scratch::new();
    check(&PostgresStore::connect(db.url()).unwrap());
}

#[test]
fn ids_increase_and_messages_chain_to_their_scope_head() {
    each_store(|store| {
        let (s1, s2) = (session("s1"), session("s2"));
        let a = store
            .append(vec![msg(&s1, Message::user("hi"), 0)])
            .unwrap();
        let b = store
            .append(vec![msg(&s2, Message::user("other"), 1)])
            .unwrap();
        let c = store
            .append(vec![
                anchor(&s1, "phase/1"),
                msg(&s1, Message::assistant("hello"), 2),
            ])
            .unwrap();
        assert_eq!(
            [a[0].id, b[0].id, c[0].id, c[1].id],
            [EntryId(1), EntryId(2), EntryId(3), EntryId(4)]
        );
        assert_eq!(a[0].parent, None);
        assert_eq!(c[0].parent, None, "anchors are not part of threads");
        assert_eq!(
            c[1].parent,
            Some(a[0].id),
            "the head of s1, not of s2 and not the anchor"
        );

        let info = store.scope_info(&s1).unwrap().unwrap();
        assert_eq!(
            (info.entries, info.messages, info.head, info.last_id),
            (3, 2, Some(EntryId(4)), Some(EntryId(4)))
        );
        assert_eq!((info.first_at, info.last_at), (Some(t(0)), Some(t(2))));
        assert_eq!(store.last_id().unwrap(), EntryId(4));
    });
}

#[test]
fn explicit_parents_must_be_earlier_messages_of_the_same_scope() {
    each_store(|store| {
        let (s1, s2) = (session("s1"), session("s2"));
        let first = store.append(vec![msg(&s1, Message::user("q"), 0)]).unwrap()[0].id;
        store
            .append(vec![msg(&s1, Message::assistant("a1"), 1)])
            .unwrap();
        let other = store.append(vec![msg(&s2, Message::user("x"), 0)]).unwrap()[0].id;
        let ev = store.append(vec![anchor(&s1, "a")]).unwrap()[0].id;

        // A regenerated answer names the question it answers again.
        let mut regen = msg(&s1, Message::assistant("a2"), 2);
        regen.parent = Some(first);
        assert_eq!(store.append(vec![regen]).unwrap()[0].parent, Some(first));

        let refused = |parent: EntryId| {
            let mut bad = msg(&s1, Message::assistant("x"), 3);
            bad.parent = Some(parent);
            store.append(vec![bad]).unwrap_err().to_string()
        };
        for (parent, why) in [
            (other, "does not exist"),
            (ev, "not a message"),
            (EntryId(999), "does not exist"),
        ] {
            let err = refused(parent);
            assert!(err.contains(why), "{err}");
        }
        // Another scope's entry reads exactly like a missing one (issue 31, section 3):
        // the error names neither its scope nor anything else about it.
        assert_eq!(
            refused(other).replace(&other.to_string(), "N"),
            refused(EntryId(999)).replace("999", "N")
        );
        assert!(!refused(other).contains("s2"), "{}", refused(other));
    });
}

#[test]
fn a_failed_batch_appends_nothing() {
    each_store(|store| {
        let s = session("s");
        store
            .append(vec![msg(&s, Message::user("keep"), 0)])
            .unwrap();
        let bad_tool = Message {
            tool_call_id: None,
            ..Message::tool_result("c", "r")
        };
        let err = store
            .append(vec![
                msg(&s, Message::assistant("lost"), 1),
                msg(&s, bad_tool, 2),
            ])
            .unwrap_err();
        assert!(err.to_string().contains("tool_call_id"), "{err}");
        assert_eq!(store.last_id().unwrap(), EntryId(1));
        let info = store.scope_info(&s).unwrap().unwrap();
        assert_eq!((info.entries, info.head), (1, Some(EntryId(1))));
        // Nor does it leave the scopes it would have opened (a store may ready a batch's
        // scopes ahead of its entries).
        let fresh = session("never-opened");
        let bad_tool = Message {
            tool_call_id: None,
            ..Message::tool_result("c", "r")
        };
        store
            .append(vec![
                msg(&fresh, Message::user("lost"), 1),
                msg(&session("nor-this"), bad_tool, 2),
            ])
            .unwrap_err();
        assert_eq!(store.scope_info(&fresh).unwrap(), None);
        assert_eq!(store.scope_info(&session("nor-this")).unwrap(), None);
        assert_eq!(store.scopes("acme").unwrap().len(), 1);
        // The next append still gets the next id.
        assert_eq!(
            store
                .append(vec![msg(&s, Message::assistant("ok"), 3)])
                .unwrap()[0]
                .id,
            EntryId(2)
        );
    });
}

#[test]
fn memory_events_belong_to_memory_scopes() {
    each_store(|store| {
        let s = session("s");
        let agent = Scope::agent("acme", "bot").unwrap();
        let change = |scope: &Scope| {
            event(
                scope,
                "memory.change",
                json!({"ops": [{"op": "write", "path": "MEMORY.md", "content": "- x\n"}]}),
            )
        };
        let err = store.append(vec![change(&s)]).unwrap_err();
        assert!(err.to_string().contains("memory scope"), "{err}");
        let dropped = event(
            &s,
            "memory.dropped",
            json!({"path": "MEMORY.md", "text": "- x", "version": 1, "by": "test"}),
        );
        let err = store.append(vec![dropped]).unwrap_err();
        assert!(err.to_string().contains("memory scope"), "{err}");
        // A restore is held to the same rule.
        let mut stored = store.append(vec![change(&agent)]).unwrap();
        stored[0].id = EntryId(50);
        stored[0].scope = s.clone();
        let err = store.restore(stored).unwrap_err();
        assert!(err.to_string().contains("memory scope"), "{err}");
        assert_eq!(store.last_id().unwrap(), EntryId(1));
    });
}

#[test]
fn the_consolidation_pointer_is_an_event_projected_onto_the_scope() {
    each_store(|store| {
        let (s, other) = (session("s"), session("o"));
        let ids: Vec<EntryId> = store
            .append(
                (0..4)
                    .map(|i| msg(&s, Message::user(format!("m{i}")), i))
                    .collect(),
            )
            .unwrap()
            .iter()
            .map(|e| e.id)
            .collect();
        let foreign = store
            .append(vec![msg(&other, Message::user("x"), 0)])
            .unwrap()[0]
            .id;
        store
            .append(vec![event(
                &s,
                events::SESSION_CONSOLIDATED,
                json!({"through": ids[1].0}),
            )])
            .unwrap();
        assert_eq!(
            store.scope_info(&s).unwrap().unwrap().last_consolidated,
            ids[1]
        );

        for (data, why) in [
            // Another scope's entry and one that exists nowhere read alike.
            (
                json!({"through": foreign.0}),
                "no entry of this scope has that id",
            ),
            (
                json!({"through": 999}),
                "no entry of this scope has that id",
            ),
            (json!({"nope": 1}), "session.consolidated: bad data"),
        ] {
            let err = store
                .append(vec![event(&s, events::SESSION_CONSOLIDATED, data)])
                .unwrap_err();
            assert!(err.to_string().contains(why), "{err}");
        }
        assert_eq!(
            store.scope_info(&s).unwrap().unwrap().last_consolidated,
            ids[1]
        );
    });
}

#[test]
fn scans_filter_by_kind_name_ids_time_order_and_limit() {
    each_store(|store| {
        let s = session("s");
        let call = Message::assistant_tool_calls(vec![ToolCall::function("c1", "f", "{}")]);
        store
            .append(vec![
                msg(&s, Message::user("u0"), 0),
                anchor(&s, "phase/1"),
                msg(&s, call, 10),
                msg(&s, Message::tool_result("c1", "r"), 11),
                anchor(&s, "phase/2"),
                msg(&s, Message::assistant("a"), 20),
            ])
            .unwrap();
        let ids = |f: Filter| {
            store
                .scan(&s, &f)
                .unwrap()
                .iter()
                .map(|e| e.id.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(Filter::default()), [1, 2, 3, 4, 5, 6]);
        assert_eq!(
            ids(Filter {
                kinds: vec![Kind::Anchor],
                ..Default::default()
            }),
            [2, 5]
        );
        assert_eq!(
            ids(Filter {
                kinds: vec![Kind::ToolCall, Kind::ToolResult],
                ..Default::default()
            }),
            [3, 4]
        );
        assert_eq!(
            ids(Filter {
                name: Some("phase/2".into()),
                ..Default::default()
            }),
            [5]
        );
        assert_eq!(
            ids(Filter {
                after: Some(EntryId(2)),
                before: Some(EntryId(5)),
                ..Default::default()
            }),
            [3, 4]
        );
        assert_eq!(
            ids(Filter {
                since: Some(t(10)),
                until: Some(t(20)),
                ..Default::default()
            }),
            [3, 4]
        );
        assert_eq!(
            ids(Filter {
                order: Order::Desc,
                limit: Some(2),
                ..Default::default()
            }),
            [6, 5]
        );
        assert!(
            store
                .scan(&session("none"), &Filter::default())
                .unwrap()
                .is_empty()
        );
    });
}

#[test]
fn tenants_never_see_each_other() {
    each_store(|store| {
        let mine = session("s");
        let theirs = Scope::agent("globex", "bot")
            .unwrap()
            .with_session("s")
            .unwrap();
        let a = store
            .append(vec![msg(&mine, Message::user("mine"), 0)])
            .unwrap()[0]
            .id;
        store
            .append(vec![msg(&theirs, Message::user("theirs"), 0)])
            .unwrap();
        assert!(store.get("acme", a).unwrap().is_some());
        assert!(store.get("globex", a).unwrap().is_none());
        assert_eq!(store.scopes("acme").unwrap().len(), 1);
        assert_eq!(store.scopes("globex").unwrap()[0].scope, theirs);
        assert_eq!(store.tenants().unwrap(), ["acme", "globex"]);
        // The same session name under another tenant has its own head.
        let next = store
            .append(vec![msg(&theirs, Message::assistant("x"), 1)])
            .unwrap();
        assert_eq!(next[0].parent, Some(EntryId(2)));
    });
}

#[test]
fn restore_keeps_ids_after_the_last_one_and_renumbers_otherwise() {
    each_store(|store| {
        let s = session("s");
        store
            .append(vec![msg(&s, Message::user("existing"), 0)])
            .unwrap();
        let source = MemoryStore::new();
        source
            .append(vec![
                msg(&s, Message::user("q"), 0),
                msg(&s, Message::assistant("a"), 1),
            ])
            .unwrap();
        source
            .append(vec![event(
                &s,
                events::SESSION_CONSOLIDATED,
                json!({"through": 1}),
            )])
            .unwrap();
        let exported = source.scan(&s, &Filter::default()).unwrap();

        // Ids 1..3 collide with the store's entry 1: renumbered to 2..4, links followed.
        assert_eq!(
            store.restore(exported.clone()).unwrap().placement,
            Placement::Renumbered
        );
        let got = store
            .scan(
                &s,
                &Filter {
                    after: Some(EntryId(1)),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(got.iter().map(|e| e.id.0).collect::<Vec<_>>(), [2, 3, 4]);
        assert_eq!(got[1].parent, Some(EntryId(2)));
        assert_eq!(
            store.scope_info(&s).unwrap().unwrap().last_consolidated,
            EntryId(2)
        );

        // Ids past the last one are kept as they are.
        let later: Vec<_> = exported
            .into_iter()
            .map(|mut e| {
                e.scope = session("t");
                e.id = EntryId(e.id.0 + 10);
                e.parent = e.parent.map(|p| EntryId(p.0 + 10));
                if let Payload::Event(ev) = &mut e.payload {
                    ev.data = json!({"through": 11});
                }
                e
            })
            .collect();
        assert_eq!(store.restore(later).unwrap().placement, Placement::KeptIds);
        assert_eq!(store.last_id().unwrap(), EntryId(13));
        assert_eq!(
            store.get("acme", EntryId(12)).unwrap().unwrap().parent,
            Some(EntryId(11))
        );
    });
}

#[test]
fn entries_after_pages_through_the_whole_tape_in_id_order() {
    each_store(|store| {
        let a = session("a");
        let other = Scope::agent("globex", "bot").unwrap();
        store
            .append(vec![
                msg(&a, Message::user("one"), 0),
                event(
                    &other,
                    "memory.long_term",
                    serde_json::json!({"content": "x"}),
                ),
                msg(&a, Message::assistant("two"), 1),
            ])
            .unwrap();
        store.append(vec![anchor(&a, "handoff")]).unwrap();
        let ids = |after: u64, limit: usize| -> Vec<u64> {
            let page = store.entries_after(EntryId(after), limit).unwrap();
            page.iter().map(|e| e.id.0).collect()
        };
        assert_eq!(ids(0, 10), [1, 2, 3, 4]);
        assert_eq!(ids(1, 2), [2, 3]);
        assert_eq!(ids(4, 10), Vec::<u64>::new());
        let crossed = store.entries_after(EntryId(1), 1).unwrap();
        assert_eq!(crossed[0].scope, other, "projections follow every tenant");
    });
}

#[test]
fn entries_after_in_pages_through_one_tenants_entries_in_id_order() {
    each_store(|store| {
        let a = session("a");
        let other = Scope::agent("globex", "bot").unwrap();
        let mut batch = Vec::new();
        for i in 0..30 {
            batch.push(if i % 3 == 0 {
                event(&other, "memory.long_term", serde_json::json!({"n": i}))
            } else {
                msg(&a, Message::user(format!("m{i}")), i)
            });
        }
        store.append(batch).unwrap();
        let all = store.entries_after(EntryId(0), usize::MAX).unwrap();
        for tenant in ["acme", "globex", "nobody"] {
            let want: Vec<u64> = all
                .iter()
                .filter(|e| e.scope.tenant() == tenant)
                .map(|e| e.id.0)
                .collect();
            // Paged three at a time from each position, it is the whole tape's order.
            for start in [0, 1, 5, 29, 30, u64::MAX >> 12] {
                let mut got = Vec::new();
                let mut after = EntryId(start);
                loop {
                    let page = store.entries_after_in(tenant, after, 3).unwrap();
                    assert!(page.len() <= 3);
                    assert!(page.iter().all(|e| e.scope.tenant() == tenant));
                    let Some(last) = page.last() else { break };
                    after = last.id;
                    got.extend(page.iter().map(|e| e.id.0));
                }
                let want: Vec<u64> = want.iter().copied().filter(|id| *id > start).collect();
                assert_eq!(got, want, "{tenant} after {start}");
            }
        }
        assert_eq!(
            store
                .entries_after_in("acme", EntryId(0), usize::MAX)
                .unwrap(),
            all.iter()
                .filter(|e| e.scope.tenant() == "acme")
                .cloned()
                .collect::<Vec<_>>(),
            "the same entries, byte for byte"
        );
    });
}

#[test]
fn get_many_keeps_the_order_asked_and_skips_other_tenants() {
    each_store(|store| {
        let a = session("a");
        let other = Scope::agent("globex", "bot")
            .unwrap()
            .with_session("s")
            .unwrap();
        store
            .append(vec![
                msg(&a, Message::user("one"), 0),
                msg(&a, Message::user("two"), 0),
            ])
            .unwrap();
        store
            .append(vec![msg(&other, Message::user("theirs"), 0)])
            .unwrap();
        let got = store
            .get_many("acme", &[EntryId(2), EntryId(3), EntryId(9), EntryId(1)])
            .unwrap();
        let ids: Vec<u64> = got.iter().map(|e| e.id.0).collect();
        assert_eq!(ids, [2, 1]);
    });
}

#[test]
fn compare_and_append_refuses_a_write_based_on_a_stale_read() {
    each_store(|store| {
        let memory = Scope::agent("acme", "bot").unwrap();
        let e = |text: &str| event(&memory, "memory.note", json!({"note": text}));
        // An empty scope: the precondition is "no entry yet".
        let first = store.append(vec![e("a").if_last(EntryId(0))]).unwrap();
        // Two writers read `first`; the second to write loses and writes nothing.
        let winner = store.append(vec![e("b").if_last(first[0].id)]).unwrap();
        let err = store
            .append(vec![e("c").if_last(first[0].id)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("conflict"), "{err}");
        // The precondition holds within a batch too: the second entry sees the first.
        store
            .append(vec![
                e("d").if_last(winner[0].id),
                e("e").if_last(winner[0].id),
            ])
            .unwrap_err();
        let all = store.scan(&memory, &Filter::default()).unwrap();
        assert_eq!(all.len(), 2, "neither failed write left anything");
        // Other scopes are unaffected by this scope's latest entry.
        store
            .append(vec![
                msg(&session("s"), Message::user("hi"), 0).if_last(EntryId(0)),
            ])
            .unwrap();
    });
}

#[test]
fn ids_at_the_integer_edges_read_as_missing_never_as_errors() {
    each_store(|store| {
        let a = session("a");
        store
            .append(vec![msg(&a, Message::user("one"), 0)])
            .unwrap();
        for edge in [0, EntryId::MAX.0, i64::MAX as u64, u64::MAX] {
            let id = EntryId(edge);
            assert_eq!(store.get("acme", id).unwrap(), None, "get {edge}");
            assert!(store.get_many("acme", &[id]).unwrap().is_empty());
            let later = Filter {
                after: Some(id),
                ..Filter::default()
            };
            let expect = usize::from(edge == 0);
            assert_eq!(
                store.scan(&a, &later).unwrap().len(),
                expect,
                "after {edge}"
            );
            assert_eq!(store.entries_after(id, 10).unwrap().len(), expect);
            let earlier = Filter {
                before: Some(id),
                ..Filter::default()
            };
            assert_eq!(
                store.scan(&a, &earlier).unwrap().len(),
                1 - expect,
                "before {edge}"
            );
            assert!(store.vectors_of("m@1", &[("acme", id)]).unwrap().is_empty());
        }
        // Kept vectors asked for beside ids at the edges, close together (one scan of the
        // range) and far apart (one lookup each): only what exists comes back.
        let first = store.entries_after(EntryId(0), 1).unwrap()[0].id;
        store.put_vectors("m@1", &[vector(first, 1)]).unwrap();
        let top = EntryId(u64::MAX);
        for wanted in [
            vec![("acme", EntryId(u64::MAX - 1)), ("acme", top)],
            vec![("acme", EntryId(i64::MAX as u64)), ("acme", top)],
            vec![("acme", first), ("acme", top), ("acme", EntryId(0))],
        ] {
            let got = store.vectors_of("m@1", &wanted).unwrap();
            let expect = if wanted[0].1 == first {
                vec![(first, vec![1; 388])]
            } else {
                Vec::new()
            };
            assert_eq!(got, expect, "{wanted:?}");
        }
        let huge_limit = Filter {
            limit: Some(usize::MAX),
            ..Filter::default()
        };
        assert_eq!(store.scan(&a, &huge_limit).unwrap().len(), 1);
        assert_eq!(
            store.entries_after(EntryId(0), usize::MAX).unwrap().len(),
            1
        );
    });
}

/// Issue 31, section 4: idempotency keys. The first claim of a key wins; while its request
/// runs the key is busy; once answered, the answer comes back; a released key is free
/// again; keys are per tenant and forgotten after 24 hours.
#[test]
fn idempotency_keys_are_claimed_once_answered_and_forgotten() {
    use memtape_store::Claim;
    each_store(|store| {
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert_eq!(
            store.claim_request("t", "k1", "fp", now).unwrap(),
            Claim::Claimed
        );
        assert_eq!(
            store.claim_request("t", "k1", "fp", now).unwrap(),
            Claim::Running {
                fingerprint: "fp".into()
            }
        );
        // Another tenant's key of the same name is its own.
        assert_eq!(
            store.claim_request("u", "k1", "other", now).unwrap(),
            Claim::Claimed
        );
        store
            .finish_request("t", "k1", 201, b"{\"ids\":[1]}")
            .unwrap();
        // A release after the answer changes nothing.
        store.release_request("t", "k1").unwrap();
        assert_eq!(
            store.claim_request("t", "k1", "fp2", now).unwrap(),
            Claim::Answered {
                fingerprint: "fp".into(),
                status: 201,
                body: b"{\"ids\":[1]}".to_vec()
            }
        );
        store.release_request("u", "k1").unwrap();
        assert_eq!(
            store.claim_request("u", "k1", "again", now).unwrap(),
            Claim::Claimed
        );
        // A day later the key is forgotten.
        let later = now + chrono::TimeDelta::hours(25);
        assert_eq!(
            store.claim_request("t", "k1", "fp", later).unwrap(),
            Claim::Claimed
        );
        for bad in ["", "a b", "é"] {
            assert!(store.claim_request("t", bad, "fp", now).is_err(), "{bad:?}");
        }
    });
}

/// Issue 31: entries made from others as stored (the WAL's captures, which name their
/// messages' ids) are appended in the same transaction: all of them, or none.
#[test]
fn entries_made_from_an_append_commit_with_it_or_not_at_all() {
    each_store(|store| {
        let memory = Scope::agent("acme", "bot").unwrap();
        let s = session("s");
        let notes = |stored: &[Entry]| -> Vec<NewEntry> {
            stored
                .iter()
                .map(|m| event(&memory, "memory.note", json!({"of": m.id.0.to_string()})))
                .collect()
        };
        let (stored, made) = store
            .append_then(
                vec![
                    msg(&s, Message::user("one"), 0),
                    msg(&s, Message::user("two"), 1),
                ],
                &mut |stored| notes(stored),
            )
            .unwrap();
        assert_eq!(stored.len(), 2);
        let of: Vec<String> = made
            .iter()
            .map(|e| match &e.payload {
                Payload::Event(ev) => ev.data["of"].as_str().unwrap().to_owned(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(of, [stored[0].id.0.to_string(), stored[1].id.0.to_string()]);
        assert!(made[0].id > stored[1].id);
        // A made entry whose precondition fails: neither it nor the message is stored.
        let before = store.last_id().unwrap();
        let err = store
            .append_then(vec![msg(&s, Message::user("three"), 2)], &mut |_| {
                vec![event(&memory, "memory.note", json!({})).if_last(stored[0].id)]
            })
            .unwrap_err()
            .to_string();
        assert!(err.contains("conflict"), "{err}");
        assert_eq!(store.last_id().unwrap(), before);
        assert_eq!(store.scan(&s, &Filter::default()).unwrap().len(), 2);
        assert_eq!(store.scan(&memory, &Filter::default()).unwrap().len(), 2);
    });
}

fn vector(id: EntryId, byte: u8) -> memtape_store::NewVector {
    memtape_store::NewVector {
        id,
        erased_by: None,
        bytes: vec![byte; 388],
    }
}

#[test]
fn vectors_are_kept_once_per_entry_and_embedder_and_read_within_the_tenant() {
    each_store(|store| {
        let ours = session("s1");
        let theirs = Scope::agent("zeta", "bot")
            .unwrap()
            .with_session("s1")
            .unwrap();
        let a = store
            .append(vec![
                msg(&ours, Message::user("one"), 0),
                msg(&ours, Message::assistant("two"), 1),
            ])
            .unwrap();
        let z = store
            .append(vec![msg(&theirs, Message::user("zeta's"), 2)])
            .unwrap();
        let (a1, a2, z1) = (a[0].id, a[1].id, z[0].id);
        // Asked in any order, answered in id order; nothing before a put.
        assert!(store.vectors("acme", "m@1", &[a2, a1]).unwrap().is_empty());
        store
            .put_vectors("m@1", &[vector(a2, 2), vector(a1, 1), vector(z1, 9)])
            .unwrap();
        assert_eq!(
            store.vectors("acme", "m@1", &[a2, a1]).unwrap(),
            vec![(a1, vec![1; 388]), (a2, vec![2; 388])]
        );
        // Another tenant's entry is not read through this tenant, nor this one's through it.
        assert!(store.vectors("acme", "m@1", &[z1]).unwrap().is_empty());
        assert_eq!(store.vectors("zeta", "m@1", &[a1, z1]).unwrap().len(), 1);
        // Another embedder has its own; the first vector of an entry stays.
        assert!(store.vectors("acme", "m@2", &[a1]).unwrap().is_empty());
        store.put_vectors("m@1", &[vector(a1, 7)]).unwrap();
        store.put_vectors("m@2", &[vector(a1, 5)]).unwrap();
        assert_eq!(
            store.vectors("acme", "m@1", &[a1]).unwrap(),
            vec![(a1, vec![1; 388])]
        );
        assert_eq!(
            store.vectors("acme", "m@2", &[a1]).unwrap(),
            vec![(a1, vec![5; 388])]
        );
        // An id not on the tape is refused, naming it, and nothing of its batch is kept.
        let err = store
            .put_vectors("m@3", &[vector(a1, 3), vector(EntryId(z1.0 + 1000), 3)])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("entry {} is not on the tape", z1.0 + 1000)),
            "{err}"
        );
        assert!(store.vectors("acme", "m@3", &[a1]).unwrap().is_empty());
        // Limits, named.
        for (embedder, v, says) in [
            ("", vector(a1, 1), "embedder id"),
            ("m@1", vector(EntryId(0), 1), "entry id 0"),
            (
                "m@1",
                memtape_store::NewVector {
                    bytes: Vec::new(),
                    ..vector(a1, 1)
                },
                "is 0 bytes",
            ),
        ] {
            let err = store.put_vectors(embedder, &[v]).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
        // Read for several tenants at once, each id only with its own tenant.
        assert_eq!(
            store
                .vectors_of(
                    "m@1",
                    &[("zeta", z1), ("acme", a2), ("acme", a1), ("acme", a2)]
                )
                .unwrap(),
            vec![(a1, vec![1; 388]), (a2, vec![2; 388]), (z1, vec![9; 388])]
        );
        assert_eq!(
            store
                .vectors_of("m@1", &[("acme", z1), ("zeta", a1), ("nobody", a2)])
                .unwrap(),
            Vec::new(),
            "no id is read through another tenant"
        );
        assert!(store.vectors_of("m@1", &[]).unwrap().is_empty());
        assert!(store.vectors_of("m@9", &[("acme", a1)]).unwrap().is_empty());
        // Ids asked far apart (a tenant's own entries on a long tape) are read as ids
        // close together are (a page of the tape), with the same tenant check.
        let filler: Vec<_> = (0..300)
            .map(|i| msg(&theirs, Message::user("filler"), 3 + i))
            .collect();
        store.append(filler).unwrap();
        let far = store
            .append(vec![msg(&ours, Message::user("far"), 400)])
            .unwrap()[0]
            .id;
        store.put_vectors("m@1", &[vector(far, 4)]).unwrap();
        assert_eq!(
            store
                .vectors_of("m@1", &[("acme", far), ("zeta", a2), ("acme", a1)])
                .unwrap(),
            vec![(a1, vec![1; 388]), (far, vec![4; 388])]
        );
        assert_eq!(
            store
                .vectors_of("m@1", &[("zeta", far), ("zeta", z1), ("nobody", a1)])
                .unwrap(),
            vec![(z1, vec![9; 388])]
        );
        // The tape is untouched by all of this.
        assert_eq!(store.get("acme", a1).unwrap().unwrap(), a[0]);
    });
}

#[test]
fn previous_messages_finds_each_scopes_last_message_before_an_id() {
    each_store(|store| {
        let (s1, s2) = (session("s1"), session("s2"));
        let theirs = Scope::agent("zeta", "bot")
            .unwrap()
            .with_session("s1")
            .unwrap();
        let first = store
            .append(vec![
                msg(&s1, Message::user("one"), 0),
                event(&s1, "memory.long_term", serde_json::json!({"n": 1})),
                msg(&s2, Message::user("elsewhere"), 1),
                msg(&theirs, Message::user("zeta's"), 2),
                msg(&s1, Message::assistant("two"), 3),
            ])
            .unwrap();
        let ids: Vec<EntryId> = first.iter().map(|e| e.id).collect();
        let end = EntryId(ids[4].0 + 1);
        let got = store
            .previous_messages(&[
                (s1.clone(), end),
                (s1.clone(), ids[4]),
                (s1.clone(), ids[0]),
                (s2.clone(), end),
                (theirs.clone(), end),
                (session("never"), end),
                (s1.clone(), EntryId(u64::MAX >> 1)),
            ])
            .unwrap();
        let got: Vec<Option<EntryId>> = got.iter().map(|e| e.as_ref().map(|e| e.id)).collect();
        assert_eq!(
            got,
            [
                Some(ids[4]),
                // Not the event between: only conversational entries.
                Some(ids[0]),
                None,
                Some(ids[2]),
                Some(ids[3]),
                None,
                Some(ids[4]),
            ]
        );
        // The entry is whole, with its own scope.
        let found = store.previous_messages(&[(theirs.clone(), end)]).unwrap();
        assert_eq!(found[0].as_ref(), Some(&first[3]));
        assert!(store.previous_messages(&[]).unwrap().is_empty());
    });
}
