//! `POST /v1/erase` on a real server: admin keys only, confined to the key's tenant, bad
//! bodies refused before anything changes, the receipt naming the key, and after the
//! server stops no file of the data directory holds a byte of what was erased.
use crate::common::Server;
use memtape::Store as _;
use memtape_server::{KeyStore, Role};
use serde_json::{Value, json};

const SECRET: &str = "4111-1111-ZOË";

fn files_holding(dir: &std::path::Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            for e in std::fs::read_dir(&path).unwrap() {
                stack.push(e.unwrap().path());
            }
        } else if meta.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[test]
fn only_an_admin_key_erases_and_only_in_its_tenant() {
    let mut s = Server::start();
    let keys = KeyStore::open(s.dir.path());
    let (admin, admin_record) = keys.create("acme", Role::Admin).unwrap();
    let (writer, _) = keys.create("acme", Role::Write).unwrap();
    let (reader, _) = keys.create("acme", Role::Read).unwrap();
    let (other, _) = keys.create("zeta", Role::Admin).unwrap();
    let say = |key: &str, text: &str| {
        let (status, body) = s.call(
            "POST",
            "/v1/sessions/s1/messages?user=ann",
            Some(&json!({"role": "user", "content": text})),
            Some(key),
        );
        assert_eq!(status, 201, "{body}");
    };
    say(&writer, &format!("my card is {SECRET}"));
    say(&writer, "and I like kayaks");
    say(&other, &format!("zeta's own {SECRET}"));
    let erase = |key: &str, query: &str, body: Value| {
        s.call("POST", &format!("/v1/erase{query}"), Some(&body), Some(key))
    };
    let text = json!({"what": "text", "text": SECRET, "reason": "ticket 42"});
    for key in [&writer, &reader] {
        let (status, body) = erase(key, "?user=ann", text.clone());
        assert_eq!(status, 403, "{body}");
    }
    // Bad bodies: nothing changes.
    for (query, body, want) in [
        (
            "?user=ann",
            json!({"what": "text", "text": SECRET, "also": 1}),
            422,
        ),
        ("?user=ann", json!({"what": "text"}), 400),
        ("?user=ann", json!({"what": "text", "text": "41"}), 400),
        ("", json!({"what": "user"}), 400),
        ("?user=ann", json!({"what": "entries", "ids": []}), 400),
        (
            "?user=ann",
            json!({"what": "entries", "ids": [9007199254740992_u64]}),
            422,
        ),
        ("?user=ann", json!({"what": "everything"}), 422),
    ] {
        let (status, answer) = erase(&admin, query, body.clone());
        assert_eq!(status, want, "{body} → {answer}");
    }
    let (_, history) = s.call(
        "GET",
        "/v1/sessions/s1/history?user=ann",
        None,
        Some(&writer),
    );
    assert!(history.to_string().contains("4111"), "{history}");

    let (status, dry) = erase(
        &admin,
        "?user=ann",
        json!({"what": "text", "text": SECRET, "dry_run": true}),
    );
    assert_eq!(status, 200, "{dry}");
    assert_eq!(
        (dry["redacted"].as_u64(), dry["receipt"].is_null()),
        // The message, and the WAL's capture of it into the working state.
        (Some(2), true),
        "{dry}"
    );
    let (status, done) = erase(&admin, "?user=ann", text);
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["redacted"], 2, "{done}");
    assert!(done["receipt"].as_u64().is_some(), "{done}");
    let (_, history) = s.call(
        "GET",
        "/v1/sessions/s1/history?user=ann",
        None,
        Some(&writer),
    );
    assert!(
        history.to_string().contains("my card is [erased]"),
        "{history}"
    );
    let (_, hits) = s.call(
        "GET",
        "/v1/search?q=4111&mode=bm25&user=ann",
        None,
        Some(&reader),
    );
    assert_eq!(hits["hits"], json!([]), "{hits}");
    // Nothing erased is read back, the receipt included.
    let (_, entries) = s.call(
        "GET",
        "/v1/sessions/s1/entries?user=ann&limit=100",
        None,
        Some(&reader),
    );
    assert!(!entries.to_string().contains("4111"), "{entries}");
    // The redacted message carries the erasure's mark, naming the receipt.
    let marked: Vec<&Value> = entries["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["erased"]["how"] == "text")
        .collect();
    assert_eq!(marked.len(), 1, "{entries}");
    assert_eq!(marked[0]["erased"]["by"], done["receipt"], "{entries}");
    // Zeta's text, in another tenant, is untouched.
    let (_, zeta) = s.call(
        "GET",
        "/v1/search?q=4111&mode=bm25&user=ann",
        None,
        Some(&other),
    );
    assert!(zeta.to_string().contains("zeta's own 4111"), "{zeta}");

    // The whole user: history empty, the key named on the receipt.
    let (status, done) = erase(&admin, "?user=ann", json!({"what": "user"}));
    assert_eq!(status, 200, "{done}");
    // Both messages and what the WAL captured of them.
    assert!(done["entries"].as_u64().unwrap() >= 2, "{done}");
    let (_, history) = s.call(
        "GET",
        "/v1/sessions/s1/history?user=ann",
        None,
        Some(&writer),
    );
    assert_eq!(history["messages"], json!([]), "{history}");
    assert!(!history.to_string().contains("kayak"));
    s.stop();
    // Zeta's copy is the only one left on disk.
    let left = files_holding(s.dir.path(), "my card is 4111");
    assert_eq!(left, Vec::<String>::new());
    let tape = std::fs::read(s.dir.path().join("memtape.db")).unwrap();
    let needle = format!("key:{}", admin_record.id);
    assert!(
        tape.windows(needle.len()).any(|w| w == needle.as_bytes()),
        "the receipt names the key"
    );
}

/// A store in a fresh directory whose tenant `acme` has, in agent `bot`, an exchange
/// written `days` days ago and one written now.
fn store_with_old_talk(days: i64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let then = chrono::Utc::now() - chrono::Duration::days(days);
    let old = memtape::Engine::init(dir.path())
        .unwrap()
        .with_clock(move || then);
    let session = memtape::Scope::agent("acme", "bot")
        .unwrap()
        .with_session("s1")
        .unwrap();
    for text in ["old question about herons", "old answer about herons"] {
        old.append(
            &session,
            memtape::Message::user(text),
            memtape::AppendOptions::default(),
        )
        .unwrap();
    }
    drop(old);
    let now = memtape::Engine::init(dir.path()).unwrap();
    now.append(
        &session,
        memtape::Message::user("new question about otters"),
        memtape::AppendOptions::default(),
    )
    .unwrap();
    dir
}

#[test]
fn retention_is_read_by_any_key_set_and_run_by_admins_and_confined_to_the_tenant() {
    let dir = store_with_old_talk(40);
    let mut s = Server::start_in(dir, memtape_server::Limits::default());
    let keys = KeyStore::open(s.dir.path());
    let (admin, admin_record) = keys.create("acme", Role::Admin).unwrap();
    let (writer, _) = keys.create("acme", Role::Write).unwrap();
    let (reader, _) = keys.create("acme", Role::Read).unwrap();
    let (zeta, _) = keys.create("zeta", Role::Admin).unwrap();
    let policy = json!({"messages_days": 30});

    let (status, shown) = s.call("GET", "/v1/retention?agent=bot", None, Some(&reader));
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["set"], Value::Null, "{shown}");
    for key in [&writer, &reader] {
        let (status, body) = s.call("PUT", "/v1/retention?agent=bot", Some(&policy), Some(key));
        assert_eq!(status, 403, "{body}");
        let (status, body) = s.call("POST", "/v1/retention/run", Some(&json!({})), Some(key));
        assert_eq!(status, 403, "{body}");
    }
    for (body, want) in [
        (json!({"messages_days": 0}), 400),
        (json!({"messages_days": -1}), 422),
        (json!({"messages_days": "30"}), 422),
        (json!({"messages_days": 30, "keep": true}), 422),
        (json!({"messages_days": 4294967296_u64}), 422),
    ] {
        let (status, answer) = s.call("PUT", "/v1/retention?agent=bot", Some(&body), Some(&admin));
        assert_eq!(status, want, "{body} → {answer}");
    }
    let (status, answer) = s.call(
        "PUT",
        "/v1/retention?agent=bot&user=ann",
        Some(&policy),
        Some(&admin),
    );
    assert_eq!(status, 400, "{answer}");
    let (status, set) = s.call(
        "PUT",
        "/v1/retention?agent=bot",
        Some(&policy),
        Some(&admin),
    );
    assert_eq!(status, 200, "{set}");
    assert_eq!(set["effective"]["messages_days"], 30, "{set}");
    // Another tenant's admin runs its own tenant: acme's entries stay.
    let (status, runs) = s.call("POST", "/v1/retention/run", Some(&json!({})), Some(&zeta));
    assert_eq!(status, 200, "{runs}");
    assert_eq!(runs, json!([]), "{runs}");
    let (status, dry) = s.call(
        "POST",
        "/v1/retention/run",
        Some(&json!({"dry_run": true})),
        Some(&admin),
    );
    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry[0]["entries"], 2, "{dry}");
    assert_eq!(dry[0]["receipt"], Value::Null, "{dry}");
    let (status, done) = s.call("POST", "/v1/retention/run", Some(&json!({})), Some(&admin));
    assert_eq!(status, 200, "{done}");
    assert_eq!(done[0]["agent"], "bot", "{done}");
    assert_eq!(done[0]["entries"], 2, "{done}");
    assert!(done[0]["receipt"].as_u64().is_some(), "{done}");
    let (_, history) = s.call(
        "GET",
        "/v1/sessions/s1/history?agent=bot",
        None,
        Some(&reader),
    );
    let text = history.to_string();
    assert!(
        !text.contains("herons") && text.contains("otters"),
        "{text}"
    );
    let (_, hits) = s.call(
        "GET",
        "/v1/search?q=herons&mode=bm25&agent=bot",
        None,
        Some(&reader),
    );
    assert_eq!(hits["hits"], json!([]), "{hits}");
    // A second run finds nothing more: no receipt.
    let (_, again) = s.call("POST", "/v1/retention/run", Some(&json!({})), Some(&admin));
    assert_eq!(again[0]["receipt"], Value::Null, "{again}");
    s.stop();
    assert_eq!(files_holding(s.dir.path(), "herons"), Vec::<String>::new());
    let tape = std::fs::read(s.dir.path().join("memtape.db")).unwrap();
    let needle = format!("key:{}", admin_record.id);
    assert!(tape.windows(needle.len()).any(|w| w == needle.as_bytes()));
}

/// The schedule: a server runs retention when a tick passes the schedule's time, and not
/// between. (Two servers on one store share its lock as they share emergence's; a second
/// run would find nothing more to expire, so this cannot tell which ran.)
#[test]
fn the_schedule_runs_retention_once_when_due() {
    let dir = store_with_old_talk(10);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let state = |path: &std::path::Path| {
        let engine = memtape::Engine::init(path).unwrap();
        let state = memtape_server::AppState::new(
            engine,
            KeyStore::open(path),
            memtape_server::Limits::default(),
            true,
        );
        state.set_retention_config(memtape::RetentionConfig {
            schedule: "0 0 * * *".into(),
            messages_days: Some(7),
            ..Default::default()
        });
        state
    };
    let (first, second) = (state(dir.path()), state(dir.path()));
    let session = memtape::Scope::agent("acme", "bot")
        .unwrap()
        .with_session("s1")
        .unwrap();
    let erased = || {
        memtape::Engine::open_read_only(dir.path())
            .unwrap()
            .store()
            .scan(&session, &memtape::Filter::default())
            .unwrap()
            .iter()
            .filter(|e| e.is_tombstone())
            .count()
    };
    let day = chrono::Utc::now().date_naive();
    let t = |h: u32, m: u32| day.and_hms_opt(h, m, 0).unwrap().and_utc();
    // 01:00 to 01:20: not due.
    runtime.block_on(first.run_due_retention(t(1, 0), t(1, 20)));
    assert_eq!(erased(), 0);
    // 23:50 to 00:10 (the next day): due.
    let next = |h: u32, m: u32| t(h, m) + chrono::Duration::days(1);
    runtime.block_on(second.run_due_retention(t(23, 50), next(0, 10)));
    assert_eq!(erased(), 2);
    runtime.block_on(first.run_due_retention(t(23, 50), next(0, 10)));
    assert_eq!(erased(), 2);
    drop((first, second));
}

/// Sends an erasure with an `Idempotency-Key`; the status and answer.
fn erase_keyed(s: &Server, body: &Value, idempotency: &str) -> (u16, Value) {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut response = agent
        .post(&s.url("/v1/erase?user=ann"))
        .header("Idempotency-Key", idempotency)
        .send_json(body)
        .unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap())
}

/// 64 clients at once: 32 append to their own sessions while 32 erase (a session each, or
/// a word everywhere in the agent); every erasure answers with its own receipt, every
/// acknowledged append that no erasure took is there, nothing erased is found, and an
/// erasure sent again with its Idempotency-Key does not run again.
#[test]
fn sixty_four_clients_append_and_erase_at_once() {
    let s = Server::start();
    // What the erasers take: 16 sessions of ann, and 16 words spread through bob's.
    for i in 0..16 {
        let (status, body) = s.call(
            "POST",
            &format!("/v1/sessions/doomed{i}/messages?user=ann"),
            Some(&json!({"role": "user", "content": format!("doomed text {i} of ann")})),
            None,
        );
        assert_eq!(status, 201, "{body}");
        let (status, body) = s.call(
            "POST",
            "/v1/sessions/words/messages?user=bob",
            Some(&json!({"role": "user", "content": format!("the word zq{i}secret is said")})),
            None,
        );
        assert_eq!(status, 201, "{body}");
    }
    let appended = std::sync::Mutex::new(Vec::new());
    let receipts = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for c in 0..64 {
            let (s, appended, receipts) = (&s, &appended, &receipts);
            scope.spawn(move || {
                if c < 32 {
                    for n in 0..5 {
                        let text = format!("kept c{c}n{n} words");
                        let (status, body) = s.call(
                            "POST",
                            &format!("/v1/sessions/live{c}/messages?user=carol"),
                            Some(&json!({"role": "user", "content": text})),
                            None,
                        );
                        assert_eq!(status, 201, "{body}");
                        appended.lock().unwrap().push((c, text));
                    }
                } else {
                    let i = c - 32;
                    let body = if i < 16 {
                        json!({"what": "session", "session": format!("doomed{i}")})
                    } else {
                        json!({"what": "text", "text": format!("zq{}secret", i - 16)})
                    };
                    let query = if i < 16 { "?user=ann" } else { "?user=bob" };
                    let (status, done) =
                        s.call("POST", &format!("/v1/erase{query}"), Some(&body), None);
                    assert_eq!(status, 200, "{body} → {done}");
                    receipts
                        .lock()
                        .unwrap()
                        .push(done["receipt"].as_u64().unwrap());
                }
            });
        }
    });
    let mut receipts = receipts.into_inner().unwrap();
    receipts.sort_unstable();
    receipts.dedup();
    assert_eq!(receipts.len(), 32, "each erasure its own receipt");
    for (c, text) in appended.into_inner().unwrap() {
        let (_, history) = s.call(
            "GET",
            &format!("/v1/sessions/live{c}/history?user=carol"),
            None,
            None,
        );
        assert!(history.to_string().contains(&text), "{text}: {history}");
    }
    for i in 0..16 {
        let (_, history) = s.call(
            "GET",
            &format!("/v1/sessions/doomed{i}/history?user=ann"),
            None,
            None,
        );
        assert_eq!(history["messages"], json!([]), "{history}");
    }
    let (_, words) = s.call("GET", "/v1/sessions/words/history?user=bob", None, None);
    assert!(!words.to_string().contains("secret"), "{words}");
    assert_eq!(words["messages"].as_array().unwrap().len(), 16, "{words}");
    let (_, hits) = s.call("GET", "/v1/search?q=doomed&mode=bm25&user=ann", None, None);
    assert_eq!(hits["hits"], json!([]), "{hits}");

    // A retried erasure does not run twice: the retry is told why.
    let body = json!({"what": "text", "text": "kept c0n0"});
    let (status, first) = erase_keyed(&s, &body, "erase-once");
    assert_eq!(status, 200, "{first}");
    let (status, again) = erase_keyed(&s, &body, "erase-once");
    assert_eq!(status, 422, "{again}");
    assert!(
        again
            .to_string()
            .contains(&format!("erasure #{}", first["receipt"])),
        "{again}"
    );
}
