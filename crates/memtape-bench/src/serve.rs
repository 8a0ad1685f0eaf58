//! `memtape bench serve`: load on a running memtape server over loopback HTTP. Two kinds
//! of run, each for a fixed time: saturation (a closed loop: N clients, each sending its
//! next request when the last one is answered, mixing appends, searches and context builds)
//! and a fixed offered rate (an open loop: requests start on a schedule whether or not
//! earlier ones are done, and each latency is measured from its scheduled start, so a
//! stalled server shows as latency instead of hiding as fewer requests). Reported per
//! operation: throughput, p50/p95/p99 latency and errors; the caller adds the server's peak
//! memory and checks that every acknowledged append is on the tape.

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

fn index(op: Op) -> usize {
    OPS.iter().position(|o| *o == op).unwrap_or(0)
}

/// One client: an HTTP agent and the requests it makes.
struct Client {
    agent: ureq::Agent,
    target: Target,
}

impl Client {
    fn new(target: &Target) -> Self {
        Client {
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(30)))
                .build()
                .new_agent(),
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
                r.send_json(json!({
                    "role": "assistant",
                    "content": format!("load message {n}: the weather in Tashkent is sunny, about {} degrees", n % 40),
                }))
            }
            Op::Search => {
                let words = ["weather", "Tashkent", "sunny", "degrees", "message"];
                let q = words[n % words.len()];
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
/// started on schedule by `workers` threads per operation (enough to keep the schedule
/// while some requests are slow); latency counts from the scheduled start.
pub fn fixed_rate(target: &Target, rates: [f64; 3], seconds: f64, workers: usize) -> RunReport {
    let all = Arc::new(Mutex::new(Samples::new()));
    let start = Instant::now() + Duration::from_millis(200);
    let mut threads = Vec::new();
    for (i, op) in OPS.into_iter().enumerate() {
        let rate = rates[i];
        if rate <= 0.0 {
            continue;
        }
        let total = (rate * seconds) as usize;
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
