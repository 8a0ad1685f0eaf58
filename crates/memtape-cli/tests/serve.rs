//! `memtape serve` and `memtape keys` as a user runs them: the real binary, a real data
//! directory, a real HTTP client. Loopback without keys is single-tenant; any other address
//! needs a key; with keys every request carries one and the key decides tenant and role;
//! SIGTERM stops the server cleanly (exit 0, the store closed, every acknowledged write
//! kept).
use crate::common::Run;
use crate::common::serving::Serving;
use serde_json::json;
use std::time::{Duration, Instant};

#[test]
fn serve_on_loopback_then_stop_cleanly_on_sigterm() {
    let r = Run::new();
    let s = Serving::start(&r, &[]);
    let (status, body) = s.call(
        "POST",
        "/v1/sessions/chat/messages",
        Some(json!({"role": "user", "content": "I prefer green tea."})),
        None,
    );
    assert_eq!(status, 201, "{body}");
    let (code, rest) = s.terminate();
    assert_eq!(code, Some(0), "{rest}");
    assert!(rest.contains("memtape stopped"), "{rest}");
    // The store was closed cleanly and holds the acknowledged append.
    assert!(!r.dir.path().join("data/tape.db-wal").exists());
    let history = r.json(&["history", "chat", "--json"]);
    assert_eq!(history[0]["content"], "I prefer green tea.");
}

#[test]
fn beyond_loopback_needs_a_key() {
    let r = Run::new();
    let err = r.fails(&["--model", "none", "serve", "--addr", "0.0.0.0:0"]);
    assert!(err.contains("memtape keys create"), "{err}");
}

#[test]
fn keys_decide_tenant_and_role() {
    let r = Run::new();
    let write = r
        .ok(&["keys", "create", "--tenant", "acme"])
        .trim()
        .to_owned();
    let read = r
        .ok(&["keys", "create", "--tenant", "acme", "--role", "read"])
        .trim()
        .to_owned();
    let other = r
        .ok(&["keys", "create", "--tenant", "globex"])
        .trim()
        .to_owned();
    assert!(write.starts_with("mtk_"), "{write}");
    let listed = r.json(&["keys", "list", "--json"]);
    assert_eq!(listed.as_array().unwrap().len(), 3);
    assert!(
        !std::fs::read_to_string(r.dir.path().join("data/keys.json"))
            .unwrap()
            .contains(write.split('_').nth(2).unwrap()),
        "only hashes are stored"
    );
    let s = Serving::start(&r, &[]);
    let message = || Some(json!({"role": "user", "content": "acme's secret plan"}));
    assert_eq!(
        s.call("POST", "/v1/sessions/x/messages", message(), None).0,
        401
    );
    assert_eq!(
        s.call(
            "POST",
            "/v1/sessions/x/messages",
            message(),
            Some("mtk_nope_nope")
        )
        .0,
        401
    );
    assert_eq!(
        s.call("POST", "/v1/sessions/x/messages", message(), Some(&read))
            .0,
        403
    );
    assert_eq!(
        s.call("POST", "/v1/sessions/x/messages", message(), Some(&write))
            .0,
        201
    );
    let (status, history) = s.call("GET", "/v1/sessions/x/history", None, Some(&read));
    assert_eq!(status, 200);
    assert_eq!(history["messages"].as_array().unwrap().len(), 1);
    // Another tenant sees nothing of it, and is not told it exists.
    let (status, body) = s.call("GET", "/v1/sessions/x/history", None, Some(&other));
    assert_eq!(status, 404, "{body}");
    let (_, hits) = s.call("GET", "/v1/search?q=secret&mode=bm25", None, Some(&other));
    assert_eq!(hits["hits"], json!([]));
    // Revoked: the running server stops accepting it at once.
    let id = write.split('_').nth(1).unwrap();
    r.ok(&["keys", "revoke", id]);
    assert_eq!(s.call("GET", "/v1/sessions", None, Some(&write)).0, 401);
    assert_eq!(s.call("GET", "/v1/sessions", None, Some(&read)).0, 200);
    let (code, _) = s.terminate();
    assert_eq!(code, Some(0));
}

/// A program that starts its own server (the Python package's `Memtape.local()`) gives it a
/// key in `MEMTAPE_SERVE_KEY`: only requests carrying it are served, it acts as the default
/// tenant's admin, and nothing of it is stored. A short or odd key is refused at start.
#[test]
fn a_process_key_keeps_a_private_server_private_and_is_never_stored() {
    let r = Run::new();
    let key = "local_0123456789abcdefghijklmnopqrstuv";
    let s = Serving::start_env(&r, "none", &[], &[("MEMTAPE_SERVE_KEY", key)]);
    let message = || Some(json!({"role": "user", "content": "a private note"}));
    assert_eq!(
        s.call("POST", "/v1/sessions/p/messages", message(), None).0,
        401
    );
    assert_eq!(
        s.call(
            "POST",
            "/v1/sessions/p/messages",
            message(),
            Some("local_wrong")
        )
        .0,
        401
    );
    assert_eq!(
        s.call("POST", "/v1/sessions/p/messages", message(), Some(key))
            .0,
        201
    );
    let (code, _) = s.terminate();
    assert_eq!(code, Some(0));
    // The default tenant's data, readable by the CLI; no key file was written.
    let history = r.json(&["history", "p", "--json"]);
    assert_eq!(history[0]["content"], "a private note");
    assert!(!r.dir.path().join("data/keys.json").exists());
    let mut weak = std::process::Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(["--model", "none", "serve", "--addr", "127.0.0.1:0"])
        .env("MEMTAPE_DATA_DIR", r.dir.path().join("data"))
        .env("MEMTAPE_SERVE_KEY", "short")
        .output()
        .unwrap();
    assert!(!weak.status.success());
    let err = String::from_utf8(std::mem::take(&mut weak.stderr)).unwrap();
    assert!(
        err.contains("MEMTAPE_SERVE_KEY") && err.contains("32"),
        "{err}"
    );
}

#[test]
fn serve_listens_before_it_embeds_a_backlog_and_embeds_it_behind() {
    let r = Run::new();
    for i in 0..30 {
        let text = format!("note {i}: the harbour ferry leaves at dawn");
        r.ok(&[
            "--model",
            "none",
            "append",
            "chat",
            "--role",
            "user",
            "--content",
            &text,
        ]);
    }
    // Indexed without a model, so the server's index is built for WordLlama: the tenant's
    // shard when the first search needs it, text first, and the vectors behind.
    let s = Serving::start_with(&r, "wordllama", &[]);
    let search = |mode: &str| {
        let (status, body) = s.call(
            "GET",
            &format!("/v1/search?q=harbour+ferry&mode={mode}&limit=50"),
            None,
            None,
        );
        assert_eq!(status, 200, "{body}");
        body["hits"].as_array().unwrap().len()
    };
    assert_eq!(search("bm25"), 30, "BM25 finds the backlog at once");
    let deadline = Instant::now() + Duration::from_secs(60);
    while search("vector") < 30 {
        assert!(
            Instant::now() < deadline,
            "the background embedder never caught up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        s.banner
            .contains("a shard per tenant, loaded when first searched or written, within 1024 MiB"),
        "{}",
        s.banner
    );
    // `/metrics` counts the embedder's calls (serve hands the server its counts), and its
    // queue is empty once the backlog is embedded.
    let metrics = ureq::get(&format!("{}/metrics", s.base))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in:\n{metrics}"))
    };
    assert!(value("memtape_embedding_texts_total") >= 30.0, "{metrics}");
    assert!(value("memtape_embedding_calls_total{outcome=\"ok\"}") >= 1.0);
    assert_eq!(value("memtape_embedder_queue"), 0.0, "{metrics}");
    assert_eq!(value("memtape_index_lag_entries"), 0.0, "{metrics}");
    let (code, rest) = s.terminate();
    assert_eq!(code, Some(0), "{rest}");
}

/// Issue 31, section 4: SIGTERM with `--grace 1` while a request waits on a model that
/// takes a minute: the server exits 0 within seconds, not when the model answers.
#[test]
fn sigterm_ends_the_server_after_its_grace_even_with_a_model_call_running() {
    use memtape_scripted::{Answer, Scripted};
    let model = Scripted::start(vec![Answer::Delayed(
        Duration::from_secs(60),
        Box::new(crate::common::model::save_memory("# Memory\n")),
    )]);
    let r = Run::new();
    std::fs::write(
        r.dir.path().join("data/memtape.toml"),
        format!(
            "[llm]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted\"\ntimeout = 120\nmax_retries = 0\n",
            model.base
        ),
    )
    .unwrap();
    crate::common::model::chat(&r, "s", 4);
    let s = Serving::start(&r, &["--grace", "1"]);
    let url = format!("{}/v1/sessions/s/consolidation", s.base);
    let waiting = std::thread::spawn(move || {
        // The answer never comes: the server stops first.
        let _ = ureq::post(&url).send_json(json!({"all": true}));
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while model.requests() == 0 {
        assert!(Instant::now() < deadline, "the model was never called");
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    let (code, _) = s.terminate();
    let took = started.elapsed();
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(10), "stopped after {took:?}");
    waiting.join().unwrap();
}

/// Issue 31, section 5: `memtape reindex` with another model is refused while a server
/// serves the data directory (its searches would all fail until it restarted), naming
/// why; with the server's own model it runs beside it, and once the server stops the new
/// model is taken.
#[test]
fn reindex_with_another_model_waits_for_the_server_to_stop() {
    let r = Run::new();
    r.ok(&[
        "append",
        "s",
        "--role",
        "user",
        "--content",
        "kayaks on the fjord",
    ]);
    let s = Serving::start(&r, &[]);
    let out = r.cmd(&["--model", "wordllama", "reindex"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("server is serving"), "{err}");
    r.ok(&["--model", "none", "reindex"]);
    let (status, hits) = s.call("GET", "/v1/search?q=kayaks&mode=bm25", None, None);
    assert_eq!(status, 200, "{hits}");
    assert_eq!(hits["hits"].as_array().map(Vec::len), Some(1), "{hits}");
    let (code, _) = s.terminate();
    assert_eq!(code, Some(0));
    r.ok(&["--model", "wordllama", "reindex"]);
}

/// Issue 36: a server's first search of a tenant whose shard it has not built (its index
/// folder is new; the tape already holds thousands of entries) waits at most
/// `--index-cold-wait`, answers from what the shard holds so far with `index_behind`
/// saying so, and the server builds the shard on in the background: later searches see
/// every entry, and say nothing.
#[test]
fn a_cold_tenants_first_search_is_bounded_and_the_shard_is_built_in_the_background() {
    let r = Run::new();
    let mut lines = String::new();
    for i in 0..4000 {
        let line = json!({"role": "user", "content": format!("kayak trip note {i}")});
        lines.push_str(&line.to_string());
        lines.push('\n');
    }
    let file = r.path("many.jsonl");
    std::fs::write(&file, lines).unwrap();
    r.ok(&[
        "--model",
        "none",
        "import",
        "--format",
        "nanobot",
        &file,
        "--session",
        "s",
    ]);
    // A new node: the tape is there, the index is not (import leaves indexing to the
    // first search; a node joining a database has none either).
    let index = r.dir.path().join("data/index");
    if index.exists() {
        std::fs::remove_dir_all(&index).unwrap();
    }
    let s = Serving::start(&r, &["--index-cold-wait", "0"]);
    let search = || {
        let (status, body) = s.call("GET", "/v1/search?q=kayak&limit=100", None, None);
        assert_eq!(status, 200, "{body}");
        body
    };
    let first = search();
    let behind = first["index_behind"]
        .as_str()
        .unwrap_or_else(|| panic!("{first}"));
    assert!(behind.contains("being built"), "{behind}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let body = search();
        if body["index_behind"].is_null() {
            assert_eq!(body["hits"].as_array().unwrap().len(), 100, "{body}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the shard was never built: {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, body) = s.call("GET", "/v1/search?q=note+3999&mode=bm25", None, None);
    assert_eq!(status, 200, "{body}");
    assert!(body["index_behind"].is_null(), "{body}");
    let (code, rest) = s.terminate();
    assert_eq!(code, Some(0), "{rest}");
}
