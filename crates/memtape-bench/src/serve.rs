//! `memtape bench serve`: load on a running memtape server over loopback HTTP. Two kinds
//! of run, each for a fixed time: saturation (a closed loop: N clients, each sending its
//! next request when the last one is answered, mixing appends, searches and context builds)
//! and a fixed offered rate (an open loop: requests start on a schedule whether or not
//! earlier ones are done, and each latency is measured from its scheduled start, so a
//! stalled server shows as latency instead of hiding as fewer requests). Reported per
//! operation: throughput, p50/p95/p99 latency and errors; the caller adds the server's peak
//! memory and checks that every acknowledged append is on the tape.
//!
//! The text is synthetic but shaped like conversation: each message strings stop words
//! and eight content words drawn by Zipf's law from a 50,000-word vocabulary, so a few
//! words are common and most are rare, and a search for two content words matches a small
//! part of the store, as in a real one. (A store where every message holds every query
//! word is BM25's worst case: each search scores the whole store.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use crate::quantile;

/// The operations the load mixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// `POST /v1/sessions/{s}/messages`, one message.
    Append,
    /// `GET /v1/search` (BM25 and, with a model, vectors).
    Search,
    /// `POST /v1/sessions/{s}/context`.
    Context,
}

const OPS: [Op; 3] = [Op::Append, Op::Search, Op::Context];

/// Where the server is.
#[derive(Clone, Debug)]
pub struct Target {
    /// Its base URL, e.g. `http://127.0.0.1:7077`.
    pub url: String,
    /// An API key, when the server has keys.
    pub key: Option<String>,
    /// How many sessions the appends and context builds spread over.
    pub sessions: usize,
    /// Whether the appends are user messages that the WAL captures (each names a number,
    /// [`wal_message`]) instead of assistant messages it passes over.
    pub wal: bool,
    /// With `wal`: every other append is the assistant's reply instead (a conversation's
    /// mix).
    pub replies: bool,
}

/// One operation's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OpReport {
    /// Requests answered with success.
    pub ok: usize,
    /// Requests that failed (a non-2xx status or no answer).
    pub errors: usize,
    /// Successful requests per second.
    pub per_second: f64,
    /// Latency percentiles, ms.
    pub p50_ms: f64,
    /// 95th percentile, ms.
    pub p95_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
}

/// One run's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunReport {
    /// `saturation, N clients` or `fixed rate`.
    pub name: String,
    /// How long it ran, s.
    pub seconds: f64,
    /// Per operation.
    pub append: OpReport,
    /// Per operation.
    pub search: OpReport,
    /// Per operation.
    pub context: OpReport,
    /// The ids of every acknowledged append (for the durability check).
    #[serde(skip)]
    pub acknowledged: Vec<u64>,
}

#[derive(Default)]
struct Samples {
    latencies: Vec<Vec<f64>>,
    errors: Vec<usize>,
    acknowledged: Vec<u64>,
}

impl Samples {
    fn new() -> Self {
        Samples {
            latencies: vec![Vec::new(); OPS.len()],
            errors: vec![0; OPS.len()],
            acknowledged: Vec::new(),
        }
    }
}

/// Content words in the vocabulary.
const VOCABULARY: f64 = 50_000.0;
/// The Zipf rank of the commonest content word: the ranks above it are stop words and the
/// like, which queries drop.
const FIRST_RANK: f64 = 100.0;
const SYLLABLES: [&str; 18] = [
    "ka", "lo", "mi", "ne", "ru", "ta", "shi", "vo", "de", "pa", "zu", "ge", "bo", "fi", "ya",
    "tor", "len", "mar",
];
const STOP: [&str; 12] = [
    "the", "a", "i", "it", "is", "to", "and", "of", "in", "we", "that", "was",
];

/// A deterministic pseudo-random number from `n` and `salt` (splitmix64).
fn mix(n: u64, salt: u64) -> u64 {
    let mut z = n.wrapping_add(salt.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A content word drawn by Zipf's law (frequency ∝ 1 / rank) over ranks 100 to 50,100:
/// the commonest is in about one draw in 600, as a common content word is in English.
fn word(n: u64, salt: u64) -> String {
    let u = (mix(n, salt) >> 11) as f64 / (1u64 << 53) as f64;
    let span = (VOCABULARY + FIRST_RANK) / FIRST_RANK;
    let mut r = (FIRST_RANK * span.powf(u) - FIRST_RANK) as u64;
    let mut w = String::new();
    for _ in 0..4 {
        w.push_str(SYLLABLES[(r % SYLLABLES.len() as u64) as usize]);
        r /= SYLLABLES.len() as u64;
    }
    w
}

/// Message `n`: eight content words with stop words between them.
fn message(n: u64) -> String {
    (0..8)
        .map(|i| format!("{} {}", STOP[(mix(n, 100 + i) % 12) as usize], word(n, i)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// User message `n` of a WAL load: a specific value the WAL captures (an order number of at
/// least seven digits made from `n`, which no other request of the run uses) among content
/// words.
pub fn wal_message(n: u64) -> String {
    format!(
        "my order {} ships Friday, {} {} {}",
        1_000_000 + n,
        word(n, 0),
        word(n, 1),
        word(n, 2)
    )
}

/// Search `n`: two content words, drawn like the messages'.
fn query(n: u64) -> String {
    format!("{} {}", word(n, 1_000), word(n, 1_001))
}

fn index(op: Op) -> usize {
    OPS.iter().position(|o| *o == op).unwrap_or(0)
}

/// An HTTP client for loading a server: statuses are answers, not errors, and each phase
/// of a request (connect, send, wait for the answer, read it) has 30 s.
///
/// Not one timeout for the whole call: with one, ureq resolves the host on a thread of its
/// own, so it can give up on a slow resolver, and spawns that thread for every request: at
/// thousands of requests a second the load generator took a third of this machine's CPU,
/// most of it spawning threads, from the server it measures (half that now). Without a
/// deadline on resolving, an address such as `127.0.0.1:7077` is parsed in place.
pub fn http_agent() -> ureq::Agent {
    let phase = Some(Duration::from_secs(30));
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(phase)
        .timeout_send_request(phase)
        .timeout_send_body(phase)
        .timeout_recv_response(phase)
        .timeout_recv_body(phase)
        .build()
        .new_agent()
}

/// One client: an HTTP agent and the requests it makes.
struct Client {
    agent: ureq::Agent,
    target: Target,
}

impl Client {
    fn new(target: &Target) -> Self {
        Client {
            agent: http_agent(),
            target: target.clone(),
        }
    }

    /// Sends one `op`; returns the new entry id for an append, `Err` on failure.
    fn send(&self, op: Op, n: usize) -> Result<Option<u64>, String> {
        let session = format!("load-{}", n % self.target.sessions.max(1));
        let auth = self.target.key.as_ref().map(|k| format!("Bearer {k}"));
        let url = |path: &str| format!("{}{path}", self.target.url);
        let result = match op {
            Op::Append => {
                let mut r = self
                    .agent
                    .post(&url(&format!("/v1/sessions/{session}/messages")));
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                let user = self.target.wal && (!self.target.replies || n.is_multiple_of(2));
                r.send_json(if user {
                    json!({"role": "user", "content": wal_message(n as u64)})
                } else {
                    json!({"role": "assistant", "content": message(n as u64)})
                })
            }
            Op::Search => {
                let q = query(n as u64).replace(' ', "+");
                let mut r = self.agent.get(&url(&format!("/v1/search?q={q}&limit=10")));
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            Op::Context => {
                let mut r = self
                    .agent
                    .post(&url(&format!("/v1/sessions/{session}/context")));
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.send_json(
                    json!({"budget": 4000, "message": "what is the weather?", "dry_run": true}),
                )
            }
        };
        let mut response = result.map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| e.to_string())?;
        if !(200..300).contains(&status) {
            return Err(format!("{status}: {text}"));
        }
        if op == Op::Append {
            let body: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
            return Ok(body["ids"][0].as_u64());
        }
        Ok(None)
    }
}

fn report(name: String, seconds: f64, samples: Samples) -> RunReport {
    let mut samples = samples;
    let mut ops: Vec<OpReport> = Vec::new();
    for i in 0..OPS.len() {
        let lat = &mut samples.latencies[i];
        ops.push(OpReport {
            ok: lat.len(),
            errors: samples.errors[i],
            per_second: lat.len() as f64 / seconds.max(1e-9),
            p50_ms: quantile(lat, 0.50),
            p95_ms: quantile(lat, 0.95),
            p99_ms: quantile(lat, 0.99),
        });
    }
    RunReport {
        name,
        seconds,
        append: ops[0].clone(),
        search: ops[1].clone(),
        context: ops[2].clone(),
        acknowledged: samples.acknowledged,
    }
}

/// Saturation: `clients` clients in a closed loop for `seconds`, each request an append,
/// a search or a context build in the ratio `mix` (weights per operation).
pub fn saturation(target: &Target, clients: usize, seconds: f64, mix: [usize; 3]) -> RunReport {
    let stop = Arc::new(AtomicBool::new(false));
    let all = Arc::new(Mutex::new(Samples::new()));
    let start = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let (stop, all, target) = (stop.clone(), all.clone(), target.clone());
            std::thread::spawn(move || {
                let client = Client::new(&target);
                let mut mine = Samples::new();
                let total: usize = mix.iter().sum::<usize>().max(1);
                let mut n = c * 1_000_003;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let mut pick = n % total;
                    let op = OPS
                        .iter()
                        .zip(mix)
                        .find(|(_, w)| {
                            if pick < *w {
                                true
                            } else {
                                pick -= w;
                                false
                            }
                        })
                        .map_or(Op::Append, |(o, _)| *o);
                    let t = Instant::now();
                    match client.send(op, n) {
                        Ok(id) => {
                            mine.latencies[index(op)].push(t.elapsed().as_secs_f64() * 1e3);
                            mine.acknowledged.extend(id);
                        }
                        Err(_) => mine.errors[index(op)] += 1,
                    }
                }
                let mut all = all.lock().unwrap_or_else(|p| p.into_inner());
                for i in 0..OPS.len() {
                    all.latencies[i].append(&mut mine.latencies[i]);
                    all.errors[i] += mine.errors[i];
                }
                all.acknowledged.append(&mut mine.acknowledged);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let samples = std::mem::take(&mut *all.lock().unwrap_or_else(|p| p.into_inner()));
    report(format!("saturation, {clients} clients"), elapsed, samples)
}

/// A fixed offered rate for `seconds`: `rates` requests per second of each operation,
/// started on schedule; latency counts from the scheduled start. Each operation gets one
/// sending thread per 10 requests a second (at least 4), so the loop stays open while
/// requests take under 100 ms; a server slower than that shows as missed schedule.
pub fn fixed_rate(target: &Target, rates: [f64; 3], seconds: f64) -> RunReport {
    let all = Arc::new(Mutex::new(Samples::new()));
    let start = Instant::now() + Duration::from_millis(200);
    let mut threads = Vec::new();
    for (i, op) in OPS.into_iter().enumerate() {
        let rate = rates[i];
        if rate <= 0.0 {
            continue;
        }
        let total = (rate * seconds) as usize;
        let workers = ((rate / 10.0).ceil() as usize).clamp(4, 1_000);
        for w in 0..workers {
            let (all, target) = (all.clone(), target.clone());
            threads.push(std::thread::spawn(move || {
                let client = Client::new(&target);
                let mut mine = Samples::new();
                // Worker w sends requests w, w + workers, ... of this operation's schedule.
                let mut k = w;
                while k < total {
                    let due = start + Duration::from_secs_f64(k as f64 / rate);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    match client.send(op, k) {
                        Ok(id) => {
                            mine.latencies[i].push(due.elapsed().as_secs_f64() * 1e3);
                            mine.acknowledged.extend(id);
                        }
                        Err(_) => mine.errors[i] += 1,
                    }
                    k += workers;
                }
                let mut all = all.lock().unwrap_or_else(|p| p.into_inner());
                all.latencies[i].append(&mut mine.latencies[i]);
                all.errors[i] += mine.errors[i];
                all.acknowledged.append(&mut mine.acknowledged);
            }));
        }
    }
    for t in threads {
        let _ = t.join();
    }
    let elapsed = start.elapsed().as_secs_f64().max(seconds);
    let samples = std::mem::take(&mut *all.lock().unwrap_or_else(|p| p.into_inner()));
    report(
        format!(
            "fixed rate: {} appends/s, {} searches/s, {} context builds/s",
            rates[0], rates[1], rates[2]
        ),
        elapsed,
        samples,
    )
}
