//! `GET /metrics` on a real server: Prometheus' text format (every sample's family has
//! its HELP and TYPE lines), requests counted by route template and never by the path sent
//! (no session name in a label), appends and group-commit batch sizes under 64 concurrent
//! clients, the index lag back at 0 once the indexer has caught up, model calls and
//! tokens, embedding calls, 64 clients scraping while others append, and who may read it
//! (no key on loopback; beyond it an admin key: none 401, read or write 403).
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::common::Server;
use memtape_server::{KeyStore, Limits, Role};
use serde_json::{Value, json};

/// One scrape, parsed.
#[derive(Debug)]
struct Exposition {
    text: String,
    help: HashMap<String, String>,
    types: HashMap<String, String>,
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Exposition {
    /// Parses Prometheus' text format (version 0.0.4), checking as it goes that each
    /// sample's family was typed before it and that every typed family has a help line.
    fn parse(text: &str) -> Self {
        let mut help = HashMap::new();
        let mut types = HashMap::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if line.trim().is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, said) = rest.split_once(' ').unwrap();
                assert!(
                    help.insert(name.to_owned(), said.to_owned()).is_none(),
                    "{line}"
                );
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(
                    ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                    "{line}"
                );
                assert!(
                    types.insert(name.to_owned(), kind.to_owned()).is_none(),
                    "{line}"
                );
                continue;
            }
            assert!(!line.starts_with('#'), "an unknown comment: {line}");
            let (name, labels, value) = sample(line);
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    let base = name.strip_suffix(suffix)?;
                    (types.get(base).map(String::as_str) == Some("histogram")).then_some(base)
                })
                .unwrap_or(&name)
                .to_owned();
            assert!(
                types.contains_key(&family),
                "{name} has no TYPE line before it"
            );
            samples.push((name, labels, value));
        }
        for name in types.keys() {
            assert!(help.contains_key(name), "{name} has no HELP line");
        }
        Exposition {
            text: text.to_owned(),
            help,
            types,
            samples,
        }
    }

    /// The sum of the samples named `name` whose labels include `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|(_, v)| v).sum()
    }

    /// The one sample named `name` with exactly `labels`, if any.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<f64> = self
            .matching(name, labels)
            .filter(|(l, _)| l.len() == labels.len())
            .map(|(_, v)| v)
            .collect();
        assert!(found.len() <= 1, "{name} {labels:?}: {found:?}");
        found.first().copied()
    }

    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = (&'a BTreeMap<String, String>, f64)> + 'a {
        self.samples
            .iter()
            .filter(move |(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, l, v)| (l, *v))
    }
}

/// One sample line: its name, labels and value.
fn sample(line: &str) -> (String, BTreeMap<String, String>, f64) {
    let mut labels = BTreeMap::new();
    let (name, rest) = match line.find('{') {
        Some(open) => {
            let mut chars = line[open + 1..].char_indices();
            let mut key = String::new();
            let end = loop {
                let (i, c) = chars.next().unwrap_or_else(|| panic!("unclosed: {line}"));
                match c {
                    '}' => break open + 1 + i,
                    ',' | ' ' => {}
                    '=' => {
                        assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{line}");
                        let mut value = String::new();
                        loop {
                            match chars.next().map(|(_, c)| c) {
                                Some('"') => break,
                                Some('\\') => match chars.next().map(|(_, c)| c) {
                                    Some('n') => value.push('\n'),
                                    Some(c @ ('\\' | '"')) => value.push(c),
                                    other => panic!("bad escape {other:?}: {line}"),
                                },
                                Some(c) => value.push(c),
                                None => panic!("unclosed value: {line}"),
                            }
                        }
                        assert!(
                            labels.insert(std::mem::take(&mut key), value).is_none(),
                            "{line}"
                        );
                    }
                    c => key.push(c),
                }
            };
            (&line[..open], &line[end + 1..])
        }
        None => line.split_once(' ').unwrap(),
    };
    assert!(
        name.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
        "{line}"
    );
    let value = rest.trim().split(' ').next().unwrap();
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().unwrap_or_else(|_| panic!("{line}")),
    };
    (name.to_owned(), labels, value)
}

/// `GET /metrics` (with `key`): the status, the content type and the body.
fn scrape_raw(s: &Server, path: &str, key: Option<&str>) -> (u16, String, String) {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .new_agent();
    let mut request = agent.get(&s.url(path));
    if let Some(key) = key {
        request = request.header("Authorization", &format!("Bearer {key}"));
    }
    let mut response = request.call().unwrap();
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, kind, response.body_mut().read_to_string().unwrap())
}

/// A scrape that must succeed, parsed.
fn scrape(s: &Server) -> Exposition {
    let (status, kind, text) = scrape_raw(s, "/metrics", None);
    assert_eq!(status, 200, "{text}");
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    Exposition::parse(&text)
}

fn append(s: &Server, session: &str, text: &str) {
    let (status, body) = s.post(
        &format!("/v1/sessions/{session}/messages"),
        &json!({"role": "assistant", "content": text}),
    );
    assert_eq!(status, 201, "{body}");
}

const APPEND_ROUTE: &str = "/v1/sessions/{session}/messages";

#[test]
fn requests_appends_and_group_commits_are_counted_by_route_template() {
    let s = Arc::new(Server::start());
    let clients = 64;
    let start = Arc::new(Barrier::new(clients));
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let (s, start) = (s.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                append(
                    &s,
                    &format!("ghost-session-{c}"),
                    &format!("kayak note {c}"),
                );
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let (status, body) = s.get("/v1/search?q=kayak");
    assert_eq!(status, 200, "{body}");
    assert_eq!(s.get("/v1/sessions/no-such-session-77/history").0, 404);
    assert_eq!(s.get("/no/such/route/42").0, 404);

    let m = scrape(&s);
    for (name, kind) in [
        ("memtape_http_requests_total", "counter"),
        ("memtape_http_request_duration_seconds", "histogram"),
        ("memtape_appends_total", "counter"),
        ("memtape_append_batch_size", "histogram"),
        ("memtape_tape_entries_written_total", "counter"),
        ("memtape_index_lag_entries", "gauge"),
        ("memtape_index_vector_lag_entries", "gauge"),
        ("memtape_embedder_queue", "gauge"),
        ("memtape_index_shards_loaded", "gauge"),
        ("memtape_index_shard_memory_bytes", "gauge"),
        ("memtape_index_shard_loads_total", "counter"),
        ("memtape_index_shard_evictions_total", "counter"),
    ] {
        assert_eq!(m.types.get(name).map(String::as_str), Some(kind), "{name}");
        assert!(!m.help[name].is_empty(), "{name}");
    }
    // One tenant was written and searched: its shard, and only it, is in memory.
    assert_eq!(m.value("memtape_index_shards_loaded", &[]), Some(1.0));
    assert_eq!(m.value("memtape_index_shard_loads_total", &[]), Some(1.0));
    assert_eq!(
        m.value("memtape_index_shard_evictions_total", &[]),
        Some(0.0)
    );
    assert!(m.value("memtape_index_shard_memory_bytes", &[]).unwrap() > 0.0);
    // Each append counted once, under its route's template.
    let appended = [
        ("route", APPEND_ROUTE),
        ("method", "POST"),
        ("status", "201"),
    ];
    assert_eq!(
        m.value("memtape_http_requests_total", &appended),
        Some(64.0)
    );
    let timed = [("route", APPEND_ROUTE), ("method", "POST")];
    assert_eq!(
        m.value("memtape_http_request_duration_seconds_count", &timed),
        Some(64.0)
    );
    let inf = [("route", APPEND_ROUTE), ("method", "POST"), ("le", "+Inf")];
    assert_eq!(
        m.value("memtape_http_request_duration_seconds_bucket", &inf),
        Some(64.0)
    );
    assert!(
        m.value("memtape_http_request_duration_seconds_sum", &timed)
            .unwrap()
            > 0.0
    );
    let search = [
        ("route", "/v1/search"),
        ("method", "GET"),
        ("status", "200"),
    ];
    assert_eq!(m.value("memtape_http_requests_total", &search), Some(1.0));
    let missing = [
        ("route", "/v1/sessions/{session}/history"),
        ("method", "GET"),
        ("status", "404"),
    ];
    assert_eq!(m.value("memtape_http_requests_total", &missing), Some(1.0));
    let unmatched = [("route", "unmatched"), ("method", "GET"), ("status", "404")];
    assert_eq!(
        m.value("memtape_http_requests_total", &unmatched),
        Some(1.0)
    );
    // No path as it was sent, no session name, in any label.
    for leaked in [
        "ghost-session",
        "no-such-session",
        "/no/such/route",
        "kayak",
    ] {
        assert!(!m.text.contains(leaked), "{leaked} is in the metrics");
    }
    // 64 entries appended, in transactions of which the histogram saw every one.
    assert_eq!(m.value("memtape_appends_total", &[]), Some(64.0));
    assert!(m.value("memtape_tape_entries_written_total", &[]).unwrap() >= 64.0);
    assert_eq!(m.value("memtape_append_batch_size_sum", &[]), Some(64.0));
    let batches = m.value("memtape_append_batch_size_count", &[]).unwrap();
    assert!((1.0..=64.0).contains(&batches), "{batches} batches");
    assert_eq!(
        m.value("memtape_append_batch_size_bucket", &[("le", "+Inf")]),
        Some(batches)
    );
    // Buckets are cumulative.
    let mut last = 0.0;
    for (_, labels, v) in m
        .samples
        .iter()
        .filter(|(n, _, _)| n == "memtape_append_batch_size_bucket")
    {
        assert!(*v >= last, "{labels:?}: {v} after {last}");
        last = *v;
    }
    #[cfg(target_os = "linux")]
    assert!(m.value("process_resident_memory_bytes", &[]).unwrap() > 1e6);
    // The indexer catches up in the background: the lag comes back to 0, and without an
    // embedder nothing waits for vectors.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = scrape(&s);
        let lag = m.value("memtape_index_lag_entries", &[]).unwrap();
        assert_eq!(m.value("memtape_index_vector_lag_entries", &[]), Some(0.0));
        assert_eq!(m.value("memtape_embedder_queue", &[]), Some(0.0));
        if lag == 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "the index lags {lag} after 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The scrapes are requests too.
    let m = scrape(&s);
    let scrapes = [("route", "/metrics"), ("method", "GET"), ("status", "200")];
    assert!(m.value("memtape_http_requests_total", &scrapes).unwrap() >= 2.0);
}

/// 64 clients scraping while 64 others append: every scrape is whole and well formed, and
/// every append is counted once.
#[test]
fn sixty_four_clients_scrape_while_others_append() {
    let s = Arc::new(Server::start());
    let clients = 64;
    let start = Arc::new(Barrier::new(clients * 2));
    let mut threads = Vec::new();
    for c in 0..clients {
        let (server, barrier) = (s.clone(), start.clone());
        threads.push(std::thread::spawn(move || {
            barrier.wait();
            append(&server, &format!("s{}", c % 8), &format!("message {c}"));
        }));
        let (server, barrier) = (s.clone(), start.clone());
        threads.push(std::thread::spawn(move || {
            barrier.wait();
            let m = scrape(&server);
            let appended = m.value("memtape_appends_total", &[]).unwrap();
            assert!((0.0..=64.0).contains(&appended), "{appended}");
            assert!(m.types.contains_key("memtape_index_lag_entries"));
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    let m = scrape(&s);
    assert_eq!(m.value("memtape_appends_total", &[]), Some(64.0));
    assert_eq!(m.value("memtape_append_batch_size_sum", &[]), Some(64.0));
    let scrapes = [("route", "/metrics"), ("method", "GET"), ("status", "200")];
    assert!(m.value("memtape_http_requests_total", &scrapes).unwrap() >= 64.0);
    let appended = [
        ("route", APPEND_ROUTE),
        ("method", "POST"),
        ("status", "201"),
    ];
    assert_eq!(
        m.value("memtape_http_requests_total", &appended),
        Some(64.0)
    );
}

/// The error code of an error answer.
fn code(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    v["error"]["code"].as_str().unwrap_or_default().to_owned()
}

/// No key on a server listening on loopback only (with keys or without); beyond loopback,
/// an admin key: without one 401, with a read or write key 403, in the API's error shape.
/// Like every route, an unknown query parameter is a 400 naming it.
#[test]
fn metrics_need_no_key_on_loopback_and_an_admin_key_elsewhere() {
    let s = Server::start();
    let keys = KeyStore::open(s.dir.path());
    let (writer, _) = keys.create("acme", Role::Write).unwrap();
    // On loopback the API needs the key now, the metrics do not.
    assert_eq!(s.get("/v1/agents").0, 401);
    assert_eq!(scrape_raw(&s, "/metrics", None).0, 200);
    assert_eq!(scrape_raw(&s, "/metrics", Some(&writer)).0, 200);
    let (status, _, body) = scrape_raw(&s, "/metrics?zz_not_a_param=1", None);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("zz_not_a_param"), "{body}");
    drop(s);

    // Beyond loopback (the state is told so; the socket is still 127.0.0.1's).
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyStore::open(dir.path());
    let (reader, _) = keys.create("acme", Role::Read).unwrap();
    let (writer, _) = keys.create("acme", Role::Write).unwrap();
    let (admin, _) = keys.create("globex", Role::Admin).unwrap();
    let s = Server::start_full(dir, Limits::default(), None, None, false, |_| {});
    let (status, _, body) = scrape_raw(&s, "/metrics", None);
    assert_eq!(
        (status, code(&body).as_str()),
        (401, "unauthorized"),
        "{body}"
    );
    let (status, _, body) = scrape_raw(&s, "/metrics", Some("mtk_nope_nothing"));
    assert_eq!(
        (status, code(&body).as_str()),
        (401, "unauthorized"),
        "{body}"
    );
    for key in [&reader, &writer] {
        let (status, _, body) = scrape_raw(&s, "/metrics", Some(key));
        assert_eq!((status, code(&body).as_str()), (403, "forbidden"), "{body}");
    }
    let (status, kind, body) = scrape_raw(&s, "/metrics", Some(&admin));
    assert_eq!(status, 200, "{body}");
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    let m = Exposition::parse(&body);
    // The refused scrapes were counted, by status; no key or tenant name is a label.
    let refused = [("route", "/metrics"), ("method", "GET"), ("status", "403")];
    assert_eq!(m.value("memtape_http_requests_total", &refused), Some(2.0));
    for leaked in ["acme", "globex", "mtk_"] {
        assert!(!m.text.contains(leaked), "{leaked} is in the metrics");
    }
    drop(s);

    // Beyond loopback without keys the server serves no one, the metrics included.
    let s = Server::start_full(
        tempfile::tempdir().unwrap(),
        Limits::default(),
        None,
        None,
        false,
        |_| {},
    );
    let (status, _, body) = scrape_raw(&s, "/metrics", None);
    assert_eq!(
        (status, code(&body).as_str()),
        (401, "unauthorized"),
        "{body}"
    );
}

/// A stand-in embedding model: letters counted into 8 buckets.
struct Letters;

impl memtape::Embedder for Letters {
    fn id(&self) -> &str {
        "test-letters-8"
    }
    fn dim(&self) -> usize {
        8
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, memtape::EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = [0.01f32; 8];
                for b in t.bytes() {
                    v[usize::from(b % 8)] += 1.0;
                }
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter().map(|x| x / n).collect()
            })
            .collect())
    }
}

/// Model calls are counted by what they were for, with the tokens the provider counted;
/// the embedder's calls and texts too, and the vector lag comes back to 0.
#[test]
fn model_calls_tokens_and_embeddings_are_counted() {
    use memtape_scripted::{Scripted, text, tool_call};
    let model_server = Scripted::start(vec![
        // 50 prompt and 10 completion tokens; not a consolidation (502).
        text("no tools"),
        // 120 and 30.
        tool_call(
            "save_memory",
            json!({"history_entry": "[2026-03-10 14:30] Talked about kayaks.", "memory_update": "# Memory\n- Likes kayaks\n"}),
        ),
    ]);
    let llm = memtape_llm::OpenAi::new(&model_server.base, "scripted")
        .unwrap()
        .timeout(Duration::from_secs(5))
        .retry(memtape_llm::RetryPolicy {
            max_retries: 0,
            ..memtape_llm::RetryPolicy::default()
        });
    let mut lifecycle = memtape::LifecycleConfig {
        memory_window: 100,
        ..memtape::LifecycleConfig::default()
    };
    lifecycle.extraction.enabled = false;
    let model = memtape_server::ModelSetup {
        llm: Arc::new(llm),
        lifecycle,
    };
    let (embedder, counts) = memtape_server::count_embedder(Arc::new(Letters));
    let s = Server::start_full(
        tempfile::tempdir().unwrap(),
        Limits::default(),
        Some(embedder),
        Some(model),
        true,
        move |state| state.set_embed_counts(counts),
    );
    for i in 0..4 {
        append(&s, "s1", &format!("kayak message {i}"));
    }
    let consolidate = json!({"all": true});
    let path = "/v1/sessions/s1/consolidation";
    assert_eq!(s.post(path, &consolidate).0, 502);
    let (status, body) = s.post(path, &consolidate);
    assert_eq!(status, 200, "{body}");
    let m = scrape(&s);
    let kind = ("kind", "consolidation");
    assert_eq!(
        m.value("memtape_model_calls_total", &[kind, ("outcome", "ok")]),
        Some(2.0)
    );
    assert_eq!(
        m.value(
            "memtape_model_tokens_total",
            &[kind, ("direction", "prompt")]
        ),
        Some(170.0)
    );
    assert_eq!(
        m.value(
            "memtape_model_tokens_total",
            &[kind, ("direction", "completion")]
        ),
        Some(40.0)
    );
    assert_eq!(
        m.sum("memtape_model_calls_total", &[("kind", "extraction")]),
        0.0
    );
    // The background embedder catches up: the vector lag (its queue) comes back to 0,
    // having embedded every message.
    let deadline = Instant::now() + Duration::from_secs(20);
    let m = loop {
        let m = scrape(&s);
        let lag = m.value("memtape_index_lag_entries", &[]).unwrap();
        let vectors = m.value("memtape_index_vector_lag_entries", &[]).unwrap();
        assert_eq!(m.value("memtape_embedder_queue", &[]), Some(vectors));
        if lag == 0.0 && vectors == 0.0 {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "the index lags {lag}, its vectors {vectors}, after 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let calls = m
        .value("memtape_embedding_calls_total", &[("outcome", "ok")])
        .unwrap();
    assert!(calls >= 1.0, "{calls}");
    assert!(m.value("memtape_embedding_texts_total", &[]).unwrap() >= 4.0);
    // A vector search embeds its query: one more call.
    let (status, body) = s.get("/v1/search?q=paddles+and+rivers&mode=vector");
    assert_eq!(status, 200, "{body}");
    let m = scrape(&s);
    let after = m
        .value("memtape_embedding_calls_total", &[("outcome", "ok")])
        .unwrap();
    assert!(after > calls, "{after} calls after {calls}");
}
