//! `GET /metrics`: the server's metrics in Prometheus' text format (version 0.0.4), from
//! the `metrics` crate's handles and `metrics-exporter-prometheus`'s recorder, one recorder
//! per server (never the process-wide one: two servers in one process count apart).
//!
//! Labels are bounded and name no one: a request is labelled with its route's template
//! (`/v1/sessions/{session}/messages`, never the path it was sent to), its method and its
//! status; a model call with what it was for. No tenant, user, session, id or query text
//! ever becomes a label.
//!
//! Access: without a key on a server that listens on loopback only; elsewhere an admin key
//! (the role of whole-store operations), with the API's usual 401 and 403.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ::metrics::{Counter, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString};
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::{HeaderMap, Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use memtape::{EmbedError, Embedder};
use memtape_llm::{ChatRequest, ChatResponse, Llm};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};
use serde::Deserialize;

use crate::error::{ApiError, Result};
use crate::state::{AppState, Role};

/// The path the metrics are served at (outside `/v1` and the OpenAPI document: it is not
/// JSON, and Prometheus' scrapers expect it there).
pub const METRICS_PATH: &str = "/metrics";

/// The media type of Prometheus' text format.
pub const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The route label of a request no route matched.
const UNMATCHED: &str = "unmatched";

const REQUESTS: &str = "memtape_http_requests_total";
const REQUEST_SECONDS: &str = "memtape_http_request_duration_seconds";
const APPENDS: &str = "memtape_appends_total";
const BATCH_SIZE: &str = "memtape_append_batch_size";
const WRITTEN: &str = "memtape_tape_entries_written_total";
const INDEX_LAG: &str = "memtape_index_lag_entries";
const VECTOR_LAG: &str = "memtape_index_vector_lag_entries";
const EMBEDDER_QUEUE: &str = "memtape_embedder_queue";
const EMBED_CALLS: &str = "memtape_embedding_calls_total";
const EMBED_TEXTS: &str = "memtape_embedding_texts_total";
const MODEL_CALLS: &str = "memtape_model_calls_total";
const MODEL_TOKENS: &str = "memtape_model_tokens_total";
const RESIDENT: &str = "process_resident_memory_bytes";
const SHARDS_LOADED: &str = "memtape_index_shards_loaded";
const SHARD_BYTES: &str = "memtape_index_shard_memory_bytes";
const SHARD_LOADS: &str = "memtape_index_shard_loads_total";
const SHARD_EVICTIONS: &str = "memtape_index_shard_evictions_total";

/// Every metric's name, kind and help line.
const DESCRIBED: [(&str, Kind, &str); 17] = [
    (
        REQUESTS,
        Kind::Counter,
        "HTTP requests answered, by route template, method and status",
    ),
    (
        REQUEST_SECONDS,
        Kind::Histogram,
        "Seconds from a request's arrival to its response's head (a streamed body's rest is not counted), by route template and method",
    ),
    (
        APPENDS,
        Kind::Counter,
        "Entries appended through group commit (the append routes), once committed",
    ),
    (
        BATCH_SIZE,
        Kind::Histogram,
        "Entries per group-commit transaction of the appender",
    ),
    (
        WRITTEN,
        Kind::Counter,
        "Entries this process wrote to the tape by any route (messages, memory changes, events)",
    ),
    (
        INDEX_LAG,
        Kind::Gauge,
        "Tape ids the search index has not covered yet (the tape's last id minus the index's covered mark), at scrape time",
    ),
    (
        VECTOR_LAG,
        Kind::Gauge,
        "Tape ids the index covers as text whose vectors are not stored yet (covered mark minus embedded mark); 0 without an embedder",
    ),
    (
        EMBEDDER_QUEUE,
        Kind::Gauge,
        "What the background embedder still has to embed, in tape ids (the vector lag: the same span)",
    ),
    (
        EMBED_CALLS,
        Kind::Counter,
        "Calls to the embedding model (background batches and search queries), by outcome",
    ),
    (
        EMBED_TEXTS,
        Kind::Counter,
        "Texts sent to the embedding model",
    ),
    (
        MODEL_CALLS,
        Kind::Counter,
        "Calls to the language model (after its retries), by what they were for and outcome",
    ),
    (
        MODEL_TOKENS,
        Kind::Counter,
        "Tokens the language model's provider counted, by what the call was for and direction (prompt or completion)",
    ),
    (
        RESIDENT,
        Kind::Gauge,
        "Resident memory of the server's process, in bytes (Linux)",
    ),
    (
        SHARDS_LOADED,
        Kind::Gauge,
        "Search index shards (one per tenant) in memory",
    ),
    (
        SHARD_BYTES,
        Kind::Gauge,
        "Estimated memory of the search index shards in memory, in bytes (what --index-memory bounds)",
    ),
    (
        SHARD_LOADS,
        Kind::Counter,
        "Search index shards loaded into memory since the server started",
    ),
    (
        SHARD_EVICTIONS,
        Kind::Counter,
        "Search index shards evicted to stay within --index-memory since the server started",
    ),
];

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Request latency buckets, seconds: from a cached read to a model call's minute.
const SECONDS_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Batch size buckets, entries: up to the appender's cap of 4096.
const BATCH_BUCKETS: [f64; 11] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0, 4096.0,
];

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// One server's metrics: the recorder its handles count into, and the handle that renders
/// them.
pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    embedding: std::sync::OnceLock<Arc<EmbedCounts>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// A recorder of its own, every metric described, the histograms' buckets set.
    pub fn new() -> Self {
        let builder = PrometheusBuilder::new();
        let builder = builder
            .set_buckets_for_metric(Matcher::Full(REQUEST_SECONDS.into()), &SECONDS_BUCKETS)
            .and_then(|b| {
                b.set_buckets_for_metric(Matcher::Full(BATCH_SIZE.into()), &BATCH_BUCKETS)
            })
            .unwrap_or_else(|_| PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        for (name, kind, help) in DESCRIBED {
            let (name, help) = (KeyName::from_const_str(name), SharedString::const_str(help));
            match kind {
                Kind::Counter => recorder.describe_counter(name, None, help),
                Kind::Gauge => recorder.describe_gauge(name, None, help),
                Kind::Histogram => recorder.describe_histogram(name, None, help),
            }
        }
        let metrics = Metrics {
            recorder,
            handle,
            embedding: std::sync::OnceLock::new(),
        };
        // Shown from the start, at 0, so a dashboard has a series before the first append.
        metrics.counter(APPENDS, Vec::new()).absolute(0);
        metrics.counter(WRITTEN, Vec::new()).absolute(0);
        metrics
    }

    fn counter(&self, name: &'static str, labels: Vec<Label>) -> Counter {
        self.recorder
            .register_counter(&Key::from_parts(name, labels), &METADATA)
    }

    fn histogram(&self, name: &'static str, labels: Vec<Label>) -> Histogram {
        self.recorder
            .register_histogram(&Key::from_parts(name, labels), &METADATA)
    }

    fn gauge(&self, name: &'static str, value: f64) {
        self.recorder
            .register_gauge(&Key::from_name(name), &METADATA)
            .set(value);
    }

    /// Counts one answered request.
    fn request(&self, route: &str, method: &Method, status: u16, took: Duration) {
        let route = SharedString::from(route.to_owned());
        let method = SharedString::const_str(method_label(method));
        self.counter(
            REQUESTS,
            vec![
                Label::new("route", route.clone()),
                Label::new("method", method.clone()),
                Label::new("status", status.to_string()),
            ],
        )
        .increment(1);
        self.histogram(
            REQUEST_SECONDS,
            vec![Label::new("route", route), Label::new("method", method)],
        )
        .record(took.as_secs_f64());
    }

    /// The handles the appender counts its commits with.
    pub(crate) fn appends(&self) -> AppendMetrics {
        AppendMetrics {
            entries: self.counter(APPENDS, Vec::new()),
            batch: self.histogram(BATCH_SIZE, Vec::new()),
        }
    }

    /// The handle the write hook counts every entry written with.
    pub(crate) fn written(&self) -> Counter {
        self.counter(WRITTEN, Vec::new())
    }

    /// `llm`, counting its calls and tokens as `kind`.
    pub(crate) fn count_model(&self, llm: Arc<dyn Llm>, kind: ModelUse) -> Arc<dyn Llm> {
        let labels = |more: Vec<Label>| {
            let mut labels = vec![Label::new("kind", kind.as_str())];
            labels.extend(more);
            labels
        };
        Arc::new(CountedLlm {
            inner: llm,
            ok: self.counter(MODEL_CALLS, labels(vec![Label::new("outcome", "ok")])),
            failed: self.counter(MODEL_CALLS, labels(vec![Label::new("outcome", "error")])),
            prompt: self.counter(
                MODEL_TOKENS,
                labels(vec![Label::new("direction", "prompt")]),
            ),
            completion: self.counter(
                MODEL_TOKENS,
                labels(vec![Label::new("direction", "completion")]),
            ),
        })
    }

    /// Reports the calls `counts` has counted ([`count_embedder`]) from now on.
    pub(crate) fn set_embed_counts(&self, counts: Arc<EmbedCounts>) {
        let _ = self.embedding.set(counts);
    }

    /// Runs the exporter's upkeep: folds the histograms' samples into their buckets, so
    /// a server nobody scrapes does not keep every sample.
    pub(crate) fn upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// The text exposition, with the gauges of `now` set first.
    fn render(&self, now: &Snapshot) -> String {
        self.gauge(INDEX_LAG, now.index_lag as f64);
        self.gauge(VECTOR_LAG, now.vector_lag as f64);
        self.gauge(EMBEDDER_QUEUE, now.vector_lag as f64);
        self.gauge(SHARDS_LOADED, now.shards.loaded as f64);
        self.gauge(SHARD_BYTES, now.shards.bytes as f64);
        self.counter(SHARD_LOADS, Vec::new())
            .absolute(now.shards.loads);
        self.counter(SHARD_EVICTIONS, Vec::new())
            .absolute(now.shards.evictions);
        if let Some(bytes) = resident_bytes() {
            self.gauge(RESIDENT, bytes as f64);
        }
        if let Some(counts) = self.embedding.get() {
            let ok = counts.calls.load(Ordering::Relaxed);
            let failed = counts.failed.load(Ordering::Relaxed);
            self.counter(EMBED_CALLS, vec![Label::new("outcome", "ok")])
                .absolute(ok);
            self.counter(EMBED_CALLS, vec![Label::new("outcome", "error")])
                .absolute(failed);
            self.counter(EMBED_TEXTS, Vec::new())
                .absolute(counts.texts.load(Ordering::Relaxed));
        }
        self.handle.render()
    }
}

/// A method as a label: the standard ones by name, any other as `other` (an extension
/// method is any token a client sends: unbounded).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// The process's resident memory, from `/proc/self/statm` (Linux; `None` elsewhere).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // The page size is 4 KiB on every Linux memtape is built for (x86-64, and arm64's
    // default kernels).
    Some(pages * 4096)
}

/// The appender's handles: entries committed and entries per transaction.
#[derive(Clone)]
pub(crate) struct AppendMetrics {
    entries: Counter,
    batch: Histogram,
}

impl AppendMetrics {
    /// Counts one committed transaction of `entries` entries.
    pub(crate) fn committed(&self, entries: usize) {
        self.entries.increment(entries as u64);
        self.batch.record(entries as f64);
    }
}

/// What a model call was for: the `kind` label of its metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelUse {
    /// A session's consolidation (in the background, by `POST …/consolidate`, or before a
    /// new session).
    Consolidation,
    /// The post-conversation extraction.
    Extraction,
    /// An agent's emergence.
    Emergence,
    /// A compaction summary while a prompt is built.
    Compaction,
}

impl ModelUse {
    fn as_str(self) -> &'static str {
        match self {
            ModelUse::Consolidation => "consolidation",
            ModelUse::Extraction => "extraction",
            ModelUse::Emergence => "emergence",
            ModelUse::Compaction => "compaction",
        }
    }
}

/// A model whose calls and tokens are counted.
struct CountedLlm {
    inner: Arc<dyn Llm>,
    ok: Counter,
    failed: Counter,
    prompt: Counter,
    completion: Counter,
}

impl CountedLlm {
    fn count(&self, reply: &memtape_llm::Result<ChatResponse>) {
        match reply {
            Ok(reply) => {
                self.ok.increment(1);
                if let Some(usage) = reply.usage {
                    self.prompt.increment(usage.prompt_tokens);
                    self.completion.increment(usage.completion_tokens);
                }
            }
            Err(_) => self.failed.increment(1),
        }
    }
}

impl Llm for CountedLlm {
    fn model(&self) -> &str {
        self.inner.model()
    }

    fn chat(&self, request: &ChatRequest) -> memtape_llm::Result<ChatResponse> {
        let reply = self.inner.chat(request);
        self.count(&reply);
        reply
    }

    fn chat_stream(
        &self,
        request: &ChatRequest,
        on_text: &mut dyn FnMut(&str),
    ) -> memtape_llm::Result<ChatResponse> {
        let reply = self.inner.chat_stream(request, on_text);
        self.count(&reply);
        reply
    }
}

/// The calls an embedder made, counted by [`count_embedder`].
#[derive(Debug, Default)]
pub struct EmbedCounts {
    calls: AtomicU64,
    failed: AtomicU64,
    texts: AtomicU64,
}

/// `embedder`, counting its calls and texts; hand the counts to the server with
/// [`AppState::set_embed_counts`] and `/metrics` reports them. The embedder is given to
/// the index before the server exists (`memtape serve` opens the index first), so it is
/// wrapped here rather than by the server.
pub fn count_embedder(embedder: Arc<dyn Embedder>) -> (Arc<dyn Embedder>, Arc<EmbedCounts>) {
    let counts = Arc::new(EmbedCounts::default());
    let counted = CountedEmbedder {
        inner: embedder,
        counts: counts.clone(),
    };
    (Arc::new(counted), counts)
}

struct CountedEmbedder {
    inner: Arc<dyn Embedder>,
    counts: Arc<EmbedCounts>,
}

impl Embedder for CountedEmbedder {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn dim(&self) -> usize {
        self.inner.dim()
    }

    fn embed(&self, texts: &[&str]) -> std::result::Result<Vec<Vec<f32>>, EmbedError> {
        let vectors = self.inner.embed(texts);
        let counter = if vectors.is_ok() {
            &self.counts.calls
        } else {
            &self.counts.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.counts
            .texts
            .fetch_add(texts.len() as u64, Ordering::Relaxed);
        vectors
    }

    fn min_similarity(&self) -> f32 {
        self.inner.min_similarity()
    }
}

/// What the gauges say at a scrape.
struct Snapshot {
    index_lag: u64,
    vector_lag: u64,
    shards: memtape::ShardStats,
}

/// Middleware: counts every request by its route's template, method and status, and times
/// it. Added with `Router::layer`, so the matched route is known here.
pub(crate) async fn count_requests(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED.to_owned(), |p| p.as_str().to_owned());
    let method = request.method().clone();
    let response = next.run(request).await;
    state.metrics().request(
        &route,
        &method,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// `/metrics` takes no query parameter.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoParams {}

/// `GET /metrics`: the text exposition. Needs no key on a server listening on loopback
/// only, an admin key elsewhere.
pub(crate) async fn serve_metrics(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response> {
    if !state.loopback() {
        crate::auth::caller(&state, headers.get(AUTHORIZATION))?.require(Role::Admin)?;
    }
    // After the key: a client without one learns nothing, not even about parameters.
    axum::extract::Query::<NoParams>::try_from_uri(&uri)
        .map_err(|e| ApiError::bad_request(e.body_text()))?;
    let now = state
        .run(|engine| {
            let last = engine.store().last_id()?;
            let (covered, embedded) = engine.index().map_or((last, last), |index| {
                let covered = index.covered();
                let embedded = if index.embedder().is_some() {
                    index.embedded()
                } else {
                    covered
                };
                (covered, embedded)
            });
            Ok(Snapshot {
                index_lag: last.0.saturating_sub(covered.0),
                vector_lag: covered.0.saturating_sub(embedded.0),
                shards: engine.index().map(|i| i.shard_stats()).unwrap_or_default(),
            })
        })
        .await?;
    let text = state.metrics().render(&now);
    Ok(([(CONTENT_TYPE, CONTENT_TYPE_TEXT)], text).into_response())
}
