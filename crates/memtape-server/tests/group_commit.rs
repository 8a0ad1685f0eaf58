//! Group commit under concurrency, on a real server: many clients append at once; every
//! acknowledged append is on the tape exactly once, each session keeps its order, and a
//! request that cannot be written fails alone while the requests sharing its transaction
//! are written.
use std::sync::Arc;

use crate::common::Server;
use serde_json::json;

#[test]
fn concurrent_appends_are_all_acknowledged_durable_and_in_order() {
    let s = Arc::new(Server::start());
    let clients = 32;
    let each = 40;
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                for i in 0..each {
                    let (status, body) = s.post(
                        &format!("/v1/sessions/client-{c}/messages"),
                        &json!({"role": "assistant", "content": format!("c{c} m{i}")}),
                    );
                    assert_eq!(status, 201, "{body}");
                    ids.push(body["ids"][0].as_u64().unwrap());
                }
                // A request the store refuses (a parent that does not exist) fails alone.
                let (status, body) = s.post(
                    &format!("/v1/sessions/client-{c}/messages"),
                    &json!({"role": "assistant", "content": "orphan", "parent": 9_000_000_000u64}),
                );
                assert_eq!(status, 400, "{body}");
                ids
            })
        })
        .collect();
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let acknowledged = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), acknowledged, "every id once");
    for c in 0..clients {
        let (_, history) = s.get(&format!("/v1/sessions/client-{c}/history"));
        let texts: Vec<String> = history["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap().to_owned())
            .filter(|t| t != "orphan")
            .collect();
        let want: Vec<String> = (0..each).map(|i| format!("c{c} m{i}")).collect();
        assert_eq!(texts, want, "client {c}'s messages, in order");
    }
}

/// Appends are acknowledged before they are indexed (the indexer runs in the background),
/// so this checks the promise that replaces indexing on the write path: a search finds
/// every append acknowledged before it, while other clients keep writing.
#[test]
fn a_search_finds_every_append_acknowledged_before_it_while_others_write() {
    let s = Arc::new(Server::start());
    let threads: Vec<_> = (0..6)
        .map(|c| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    let word = format!("zq{c}x{i}marker");
                    let (status, body) = s.post(
                        &format!("/v1/sessions/w{c}/messages"),
                        &json!({"role": "user", "content": format!("note {word} for later")}),
                    );
                    assert_eq!(status, 201, "{body}");
                    let id = body["ids"][0].as_u64().unwrap();
                    let (status, found) = s.get(&format!("/v1/search?q={word}&mode=bm25"));
                    assert_eq!(status, 200, "{found}");
                    let ids: Vec<u64> = found["hits"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|h| h["entry"]["id"].as_u64().unwrap())
                        .collect();
                    // Neighbour spreading may add the turn before it, below it.
                    assert_eq!(ids.first(), Some(&id), "{word}: {found}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// The index follows the tape without any search asking it to: the index file (opened
/// here as another process would) comes to cover every acknowledged append.
#[test]
fn the_background_indexer_catches_up_without_a_search() {
    let s = Server::start();
    let last = append_300(&s, |i| format!("message {i}"));
    let path = s.dir.path().join("index");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let index = memtape::Index::open(&path, None, memtape::IndexConfig::default()).unwrap();
        let status = index.shard_status("default").unwrap();
        let covered = status.map_or(0, |s| s.covered.0);
        if covered >= last {
            let documents = status.map_or(0, |s| s.documents);
            assert!(documents >= 300, "{documents} documents");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the index covers {covered} of {last} after 20 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A deterministic stand-in model: words hashed into 1,024 buckets, so texts sharing words
/// are close (real models are tested in memtape-embed and through the CLI).
struct Buckets;

impl memtape::Embedder for Buckets {
    fn id(&self) -> &str {
        "test-buckets-1024"
    }
    fn dim(&self) -> usize {
        1024
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, memtape::EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0f32; 1024];
                for w in t.split_whitespace() {
                    let h = w
                        .bytes()
                        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
                    v[(h % 1024) as usize] += 1.0;
                }
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
                v.iter().map(|x| x / n).collect()
            })
            .collect())
    }
}

/// With a model, an append is acknowledged before it is embedded: the embedding thread
/// embeds behind the writes and the indexer thread stores the vectors, so a vector search
/// comes to find every append, and the index file (opened as another process would)
/// comes to hold a vector for each.
#[test]
fn the_background_embedder_embeds_every_append() {
    let embedder: Arc<dyn memtape::Embedder> = Arc::new(Buckets);
    let s = Server::start_embedding(embedder.clone());
    // The last one shares no word with the others.
    let last = append_300(&s, |i| match i {
        299 => "zebra quokka narwhal".to_owned(),
        _ => format!("note {i} about the weather"),
    });
    wait_until_embedded(&s, &embedder, last);
    // The embedding thread runs under Linux's idle policy, so it never holds up a request
    // (other tests of this process may run servers with embedders of their own meanwhile).
    #[cfg(target_os = "linux")]
    {
        let policies = policies_of("memtape-embedde");
        assert!(
            !policies.is_empty() && policies.iter().all(|p| *p == SCHED_IDLE),
            "{policies:?}"
        );
    }
    // The last append, found by its vector alone.
    let (status, body) = s.get("/v1/search?q=quokka+narwhal+zebra&mode=vector&limit=1");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["hits"][0]["entry"]["id"].as_u64(),
        Some(last),
        "{body}"
    );
}

/// The embedder gives way to requests: while one is in flight (here a request whose body
/// never finishes arriving) it embeds only a short batch a second, and once the server is
/// quiet it catches up with the rest.
#[test]
fn the_background_embedder_gives_way_while_a_request_is_in_flight() {
    use std::io::Write;
    let embedder: Arc<dyn memtape::Embedder> = Arc::new(Buckets);
    let s = Server::start_embedding(embedder.clone());
    let mut slow = std::net::TcpStream::connect(s.addr).unwrap();
    write!(
        slow,
        "POST /v1/sessions/slow/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
    )
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let started = std::time::Instant::now();
    let last = append_300(&s, |i| format!("note {i} about the tide"));
    std::thread::sleep(std::time::Duration::from_secs(2));
    let embedded = embedded_in(&s, &embedder);
    // At most one short batch (16 entries) per second of patience, and one more under way.
    let seconds = started.elapsed().as_secs() + 1;
    assert!(
        embedded <= 16 * seconds,
        "{embedded} of {last} entries embedded in {seconds} s with a request in flight"
    );
    drop(slow);
    wait_until_embedded(&s, &embedder, last);
}

/// Appends 300 assistant messages with the texts `text` gives, over 7 sessions; returns
/// the last one's id.
fn append_300(s: &Server, text: impl Fn(usize) -> String) -> u64 {
    let mut last = 0;
    for i in 0..300 {
        let (status, body) = s.post(
            &format!("/v1/sessions/s{}/messages", i % 7),
            &json!({"role": "assistant", "content": text(i)}),
        );
        assert_eq!(status, 201, "{body}");
        last = body["ids"][0].as_u64().unwrap();
    }
    last
}

/// The server's index file, opened as another process would.
fn open_index(s: &Server, embedder: &Arc<dyn memtape::Embedder>) -> memtape::Index {
    memtape::Index::open(
        &s.dir.path().join("index"),
        Some(embedder.clone()),
        memtape::IndexConfig::default(),
    )
    .unwrap()
}

/// How far the server's shard of the default tenant has its vectors, as its file says.
fn embedded_in(s: &Server, embedder: &Arc<dyn memtape::Embedder>) -> u64 {
    open_index(s, embedder)
        .shard_status("default")
        .unwrap()
        .map_or(0, |status| status.embedded.0)
}

/// Waits (30 s at most) until the server's index holds vectors through entry `last`.
fn wait_until_embedded(s: &Server, embedder: &Arc<dyn memtape::Embedder>, last: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let embedded = embedded_in(s, embedder);
        if embedded >= last {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{embedded} of {last} embedded after 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Linux's idle scheduling policy.
#[cfg(target_os = "linux")]
const SCHED_IDLE: u32 = 5;

/// The scheduling policies of this process's threads named `name` (as the kernel shortens
/// it, to 15 bytes).
#[cfg(target_os = "linux")]
fn policies_of(name: &str) -> Vec<u32> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| {
            let stat = std::fs::read_to_string(task.unwrap().path().join("stat")).ok()?;
            // "pid (comm) state ...": the policy is field 41, the 39th after the name.
            let (head, rest) = stat.rsplit_once(") ")?;
            let comm = head.split_once(" (")?.1;
            (comm == name).then(|| rest.split_whitespace().nth(38)?.parse().ok())?
        })
        .collect()
}
