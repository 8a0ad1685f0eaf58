//! memtape on PostgreSQL, through the real binary: `--database` and `MEMTAPE_DATABASE_URL`,
//! `memtape migrate` both ways with byte-identical exports, and two `memtape serve`
//! processes on one database, one killed with SIGKILL under load, the survivor holding and
//! finding every acknowledged append; two servers each serving its own tenant, one taking
//! over the other's after a kill. Each test gets a database of its own on the cluster
//! that MEMTAPE_TEST_DATABASE_URL names (scripts/test starts one; without it these fail).

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::Run;
use crate::common::serving::Serving;
use memtape_postgres::testing::Scratch;
use serde_json::json;

/// Fills the store of `r` (whatever `extra` points it at) with a bit of everything: two
/// tenants, sessions, a tool call and its result, an anchor, memory saves and an edit, text
/// with a NUL and non-Latin scripts.
fn fill(r: &Run, extra: &[&str]) {
    let run = |args: &[&str]| {
        let all: Vec<&str> = args.iter().chain(extra).copied().collect();
        r.ok(&all);
    };
    run(&[
        "append",
        "s1",
        "--role",
        "user",
        "--content",
        "I live in Lisbon; 私はリスボンに住んでいます",
    ]);
    run(&[
        "append",
        "s1",
        "--role",
        "assistant",
        "--content",
        "",
        "--tool-calls",
        r#"[{"id":"c1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Lisbon\"}"}}]"#,
    ]);
    run(&[
        "append",
        "s1",
        "--role",
        "tool",
        "--tool-call-id",
        "c1",
        "--content",
        "sunny\u{1}",
    ]);
    run(&["anchor", "s1", "phase/1"]);
    run(&[
        "append",
        "s2",
        "--role",
        "user",
        "--content",
        "other tenant",
        "--tenant",
        "acme",
    ]);
    run(&["memory", "save", "Ada likes tea"]);
    run(&[
        "memory",
        "save",
        "Ada's cat is called Miso",
        "--user",
        "ada",
    ]);
    run(&["files", "write", "notes.md", "# Notes\n- first"]);
}

fn export_all(r: &Run, extra: &[&str]) -> Vec<u8> {
    let mut args = vec!["export", "--all"];
    args.extend(extra);
    let out = r.cmd(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn migrate_copies_the_tape_both_ways_and_every_export_is_identical() {
    let db = Scratch::new();
    let url = db.url();
    let r = Run::new();
    fill(&r, &[]);
    let original = export_all(&r, &[]);
    assert!(original.len() > 500);

    let said = r.ok(&["migrate", "--to", url]);
    assert!(said.contains("copied"), "{said}");
    // The database now answers every read the SQLite store did.
    let on_pg = export_all(&r, &["--database", url]);
    assert_eq!(
        on_pg, original,
        "the export from PostgreSQL is byte-identical"
    );
    let history = r.ok(&["history", "s1", "--database", url]);
    assert!(history.contains("Lisbon"), "{history}");

    // Into an empty data directory, back from PostgreSQL.
    let back = Run::new_empty();
    back.ok(&["migrate", "--from", url]);
    assert_eq!(export_all(&back, &[]), original, "and back to SQLite");

    // A store that already has entries is never written into.
    let refused = r.fails(&["migrate", "--to", url]);
    assert!(refused.contains("already holds entries"), "{refused}");
    assert_eq!(export_all(&r, &["--database", url]), original);
    let refused = back.fails(&["migrate", "--from", url]);
    assert!(refused.contains("already holds entries"), "{refused}");

    // Writes through MEMTAPE_DATABASE_URL land in PostgreSQL, not in the data directory.
    let out = Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args([
            "append",
            "s1",
            "--role",
            "user",
            "--content",
            "I moved to Porto",
        ])
        .env("MEMTAPE_DATA_DIR", r.dir.path().join("data"))
        .env("MEMTAPE_DATABASE_URL", url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        export_all(&r, &[]),
        original,
        "the SQLite store is left alone"
    );
    let hits = r.ok(&["search", "--model", "none", "Porto", "--database", url]);
    assert!(hits.contains("I moved to Porto"), "{hits}");
}

#[test]
fn a_database_that_is_not_postgres_or_not_reachable_is_a_clear_error() {
    let r = Run::new();
    let err = r.fails(&["history", "s1", "--database", "mysql://u:pw@host/db"]);
    assert!(err.contains("not a PostgreSQL address"), "{err}");
    assert!(!err.contains("pw"), "no password in messages: {err}");
    let err = r.fails(&[
        "history",
        "s1",
        "--database",
        "postgres://u:hunter2@127.0.0.1:1/db",
    ]);
    assert!(err.contains("postgres://u@127.0.0.1:1/db"), "{err}");
    assert!(!err.contains("hunter2"), "no password in messages: {err}");
    let err = r.fails(&["migrate", "--to", "postgres://u:hunter2@127.0.0.1:1/db"]);
    assert!(!err.contains("hunter2"), "{err}");
}

/// Waits until `s` finds `word` (BM25) in the sessions of the default agent, up to `limit`.
fn found(s: &Serving, word: &str) -> bool {
    let (status, body) = s.call("GET", &format!("/v1/search?q={word}&limit=3"), None, None);
    assert_eq!(status, 200, "{body}");
    body["hits"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["entry"]["payload"]["content"].as_str() == Some(word))
}

#[test]
fn two_servers_on_one_database_and_the_survivor_of_a_sigkill_keeps_every_acknowledged_append() {
    let db = Scratch::new();
    let url = db.url().to_owned();
    let (ra, rb) = (Run::new_empty(), Run::new_empty());
    let a = Arc::new(Serving::start(&ra, &["--database", &url]));
    let b = Arc::new(Serving::start(&rb, &["--database", &url]));
    assert!(a.banner.contains("postgres://"), "{}", a.banner);

    // What one server acknowledges, the other finds at once.
    let (status, _) = a.call(
        "POST",
        "/v1/sessions/warm/messages",
        Some(json!({"role": "user", "content": "crosswordalpha"})),
        None,
    );
    assert_eq!(status, 201);
    assert!(found(&b, "crosswordalpha"));

    // Clients write through both; A is killed mid-load.
    let acked: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    let stop_b = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..6)
        .map(|c| {
            let server = if c % 2 == 0 { a.clone() } else { b.clone() };
            let (acked, stop_b) = (acked.clone(), stop_b.clone());
            std::thread::spawn(move || {
                for i in 0.. {
                    if c % 2 == 1 && stop_b.load(std::sync::atomic::Ordering::SeqCst) {
                        return;
                    }
                    let word = format!("c{c}m{i}marker");
                    let Ok((201, body)) = server.try_call(
                        "POST",
                        &format!("/v1/sessions/load-{c}/messages"),
                        Some(json!({"role": "assistant", "content": word})),
                        None,
                    ) else {
                        return; // the server is gone: not acknowledged
                    };
                    acked
                        .lock()
                        .unwrap()
                        .push((body["ids"][0].as_u64().unwrap(), word));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(400));
    a.kill();
    // B goes on a little after A died.
    std::thread::sleep(Duration::from_millis(200));
    stop_b.store(true, std::sync::atomic::Ordering::SeqCst);
    for c in clients {
        c.join().unwrap();
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    let through_a = acked
        .iter()
        .filter(|(_, w)| w[1..2].parse::<u32>().unwrap() % 2 == 0)
        .count();
    assert!(
        through_a > 0 && through_a < acked.len(),
        "both servers took writes"
    );
    let killed = Arc::try_unwrap(a).ok().unwrap();
    assert_eq!(killed.terminate_killed(), None, "killed by a signal");

    // Every acknowledged append is on the tape and found by search on the survivor.
    for (id, word) in &acked {
        let c = &word[1..word.find('m').unwrap()];
        let path = format!("/v1/sessions/load-{c}/entries?after={}&limit=1", id - 1);
        let (_, entries) = b.call("GET", &path, None, None);
        assert_eq!(
            entries["entries"][0]["id"].as_u64(),
            Some(*id),
            "acknowledged append {id} ({word}) is missing"
        );
    }
    for (_, word) in acked.iter().step_by(7) {
        assert!(found(&b, word), "{word} is not found on the survivor");
    }
    // The tape has no holes and no id twice: the ids acknowledged are all distinct.
    let mut ids: Vec<u64> = acked.iter().map(|(id, _)| *id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), acked.len());

    // A write by the CLI beside the server, on the same database, is found too.
    rb.ok(&[
        "append",
        "late",
        "--role",
        "user",
        "--content",
        "crosswordomega",
        "--database",
        &url,
    ]);
    assert!(found(&b, "crosswordomega"));
    let b = Arc::try_unwrap(b).ok().unwrap();
    let (code, _) = b.terminate();
    assert_eq!(code, Some(0));
}

/// Issue 36: two servers on one database, each serving its own tenant (as a load balancer
/// hashing on the tenant sends them), hold only that tenant's shard; when one is killed,
/// the other answers its tenant at once, loading the shard cold from the tape and the
/// vectors the first server kept in the database, without its model embedding a document.
#[test]
fn two_servers_serve_their_own_tenants_and_one_takes_over_the_others_after_a_kill() {
    let db = Scratch::new();
    let url = db.url().to_owned();
    let (ra, rb) = (Run::new_empty(), Run::new_empty());
    let acme = ra
        .ok(&["keys", "create", "--tenant", "acme"])
        .trim()
        .to_owned();
    let globex = ra
        .ok(&["keys", "create", "--tenant", "globex"])
        .trim()
        .to_owned();
    // Every node has the same keys (keys.json is per node).
    std::fs::create_dir_all(rb.dir.path().join("data")).unwrap();
    std::fs::copy(
        ra.dir.path().join("data/keys.json"),
        rb.dir.path().join("data/keys.json"),
    )
    .unwrap();
    let a = Serving::start_with(&ra, "wordllama", &["--database", &url]);
    let b = Serving::start_with(&rb, "wordllama", &["--database", &url]);
    let write = |s: &Serving, key: &str, text: &str| {
        let (status, body) = s.call(
            "POST",
            "/v1/sessions/notes/messages",
            Some(json!({"role": "user", "content": text})),
            Some(key),
        );
        assert_eq!(status, 201, "{body}");
    };
    for i in 0..20 {
        write(&a, &acme, &format!("acme harbour ferry note {i}"));
        write(&b, &globex, &format!("globex mountain train note {i}"));
    }
    let search = |s: &Serving, key: &str, q: &str| -> usize {
        let (status, body) = s.call(
            "GET",
            &format!("/v1/search?q={q}&limit=50"),
            None,
            Some(key),
        );
        assert_eq!(status, 200, "{body}");
        body["hits"].as_array().unwrap().len()
    };
    assert_eq!(search(&a, &acme, "harbour+ferry"), 20);
    assert_eq!(search(&b, &globex, "mountain+train"), 20);
    // Each server holds its own tenant's shard only, and has embedded its own entries.
    let deadline = Instant::now() + Duration::from_secs(60);
    while a.metric("memtape_embedder_queue") > 0.0 || b.metric("memtape_embedder_queue") > 0.0 {
        assert!(Instant::now() < deadline, "the embedders never caught up");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(a.metric("memtape_index_shards_loaded"), 1.0);
    assert_eq!(b.metric("memtape_index_shards_loaded"), 1.0);

    // A dies; its tenant's requests go to B, which has never loaded acme's shard.
    a.kill();
    assert_eq!(a.terminate_killed(), None);
    let texts = b.metric("memtape_embedding_texts_total");
    let (status, body) = b.call(
        "GET",
        "/v1/search?q=harbour+ferry&mode=vector&limit=50",
        None,
        Some(&acme),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["hits"].as_array().unwrap().len(), 20, "{body}");
    assert_eq!(
        b.metric("memtape_embedding_texts_total") - texts,
        1.0,
        "B's model embedded the query and no document: the vectors came from the database"
    );
    assert_eq!(b.metric("memtape_index_shards_loaded"), 2.0);
    // Nothing of one tenant reaches the other.
    assert_eq!(search(&b, &globex, "harbour+ferry&mode=bm25"), 0);
    assert_eq!(search(&b, &acme, "mountain+train&mode=bm25"), 0);
    let (code, _) = b.terminate();
    assert_eq!(code, Some(0));
}

/// An erasure through one server on PostgreSQL: the other server, following the tape,
/// applies the receipt to its own index and stops finding the text within a second.
#[test]
fn a_second_server_stops_finding_erased_text_within_a_second() {
    let db = Scratch::new();
    let url = db.url().to_owned();
    let (ra, rb) = (Run::new_empty(), Run::new_empty());
    let a = Serving::start(&ra, &["--database", &url]);
    let b = Serving::start(&rb, &["--database", &url]);
    let say = |text: &str| {
        let (status, body) = a.call(
            "POST",
            "/v1/sessions/s1/messages",
            Some(json!({"role": "user", "content": text})),
            None,
        );
        assert_eq!(status, 201, "{body}");
    };
    say("zebrafishsecret");
    say("kept words about otters");
    assert!(found(&b, "zebrafishsecret"));
    let (status, done) = a.call(
        "POST",
        "/v1/erase",
        Some(json!({"what": "text", "text": "zebrafishsecret"})),
        None,
    );
    assert_eq!(status, 200, "{done}");
    let erased_at = std::time::Instant::now();
    let hits = |s: &Serving, q: &str| {
        let (status, body) = s.call("GET", &format!("/v1/search?q={q}&mode=bm25"), None, None);
        assert_eq!(status, 200, "{body}");
        body["hits"].as_array().unwrap().len()
    };
    while hits(&b, "zebrafishsecret") > 0 {
        assert!(
            erased_at.elapsed() < Duration::from_secs(1),
            "B still finds the erased text after a second"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(hits(&b, "otters") > 0, "the rest stays findable");
    // B's history reads the redacted message too.
    let (_, history) = b.call("GET", "/v1/sessions/s1/history", None, None);
    assert!(!history.to_string().contains("zebrafish"), "{history}");
    assert!(history.to_string().contains("[erased]"), "{history}");
}
