//! The LoCoMo retrieval benchmark, exactly as ../shared/bench/PROTOCOL.md defines it: each
//! conversation in its own store, one document per dialog turn, category 1–4 questions as
//! queries, normalised evidence, recall/hit/NDCG/session-recall metrics and timings.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, NaiveDateTime, Utc};
use memtape::{
    Embedder, Engine, EntryId, Index, IndexConfig, Message, Mode, NewEntry, Payload, Scope,
    SearchFilter, SearchRequest,
};
use serde::Serialize;
use serde_json::Value;

use crate::{Error, peak_rss_mb, quantile};

/// How deep each ranking goes: enough for recall@20 and for session recall@5.
const DEPTH: usize = 50;

/// What to run.
#[derive(Clone)]
pub struct Config {
    /// Retrieval mode.
    pub mode: Mode,
    /// The embedding model (required for vector and hybrid modes).
    pub embedder: Option<Arc<dyn Embedder>>,
    /// Index settings (fusion, candidates).
    pub index: IndexConfig,
    /// The split's name in the report.
    pub split: String,
}

/// One dialog turn.
#[derive(Clone, Debug)]
pub(crate) struct Turn {
    pub(crate) dia_id: String,
    pub(crate) session: u32,
    pub(crate) speaker: String,
    pub(crate) text: String,
    pub(crate) at: DateTime<Utc>,
}

/// One question with its normalised evidence.
#[derive(Clone, Debug)]
pub(crate) struct Query {
    pub(crate) question: String,
    /// The gold answer (a number in the file is kept as its text); never reaches the
    /// retriever, only the LoCoMo QA judge.
    pub(crate) answer: String,
    pub(crate) category: u8,
    /// What the question tests, where the file says (BEAM's `ability`, such as
    /// "temporal_reasoning"); never reaches the retriever.
    pub(crate) ability: Option<String>,
    pub(crate) evidence: Vec<String>,
}

/// One conversation of the file.
#[derive(Clone, Debug)]
pub(crate) struct Conversation {
    pub(crate) id: String,
    pub(crate) turns: Vec<Turn>,
    pub(crate) queries: Vec<Query>,
}

/// One conversation ingested into a scratch store of its own.
pub(crate) struct Ingested {
    /// The engine over the scratch store, with its index.
    pub(crate) engine: Engine,
    /// The conversation's user scope.
    pub(crate) user: Scope,
    /// The dia_id of each entry.
    pub(crate) dia_ids: HashMap<EntryId, String>,
    /// Seconds the ingest took (appended, indexed and embedded).
    pub(crate) seconds: f64,
    /// The scratch directory, removed after the engine is dropped (fields drop in order).
    scratch: tempfile::TempDir,
}

/// The metrics of the protocol, averaged over queries.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Metrics {
    /// Recall at 1.
    #[serde(rename = "recall@1")]
    pub recall_1: f64,
    /// Recall at 5.
    #[serde(rename = "recall@5")]
    pub recall_5: f64,
    /// Recall at 10.
    #[serde(rename = "recall@10")]
    pub recall_10: f64,
    /// Recall at 20.
    #[serde(rename = "recall@20")]
    pub recall_20: f64,
    /// Whether any evidence is in the top 5.
    #[serde(rename = "hit@5")]
    pub hit_5: f64,
    /// NDCG at 10 with binary relevance.
    #[serde(rename = "ndcg@10")]
    pub ndcg_10: f64,
    /// Fraction of evidence sessions among the first 5 sessions of the ranking.
    #[serde(rename = "session_recall@5")]
    pub session_recall_5: f64,
    /// How many queries were averaged.
    #[serde(skip)]
    pub n: usize,
}

impl Metrics {
    pub(crate) fn add(&mut self, other: &Metrics) {
        self.recall_1 += other.recall_1;
        self.recall_5 += other.recall_5;
        self.recall_10 += other.recall_10;
        self.recall_20 += other.recall_20;
        self.hit_5 += other.hit_5;
        self.ndcg_10 += other.ndcg_10;
        self.session_recall_5 += other.session_recall_5;
        self.n += other.n;
    }

    pub(crate) fn mean(mut self) -> Metrics {
        let n = self.n.max(1) as f64;
        for v in [
            &mut self.recall_1,
            &mut self.recall_5,
            &mut self.recall_10,
            &mut self.recall_20,
            &mut self.hit_5,
            &mut self.ndcg_10,
            &mut self.session_recall_5,
        ] {
            *v /= n;
        }
        self
    }
}

/// The metrics overall and by category.
#[derive(Debug, Serialize)]
pub struct AllMetrics {
    /// Over every query.
    pub overall: Metrics,
    /// Per question category ("1" to "4").
    pub by_category: BTreeMap<String, Metrics>,
    /// Per ability, for files whose questions name one (BEAM's `ability`); absent
    /// otherwise.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub by_ability: BTreeMap<String, Metrics>,
}

/// Timings of the run.
#[derive(Debug, Serialize)]
pub struct Timing {
    /// Seconds to ingest every conversation (turns appended, indexed and embedded).
    pub ingest_s_total: f64,
    /// Per-query latency, median, ms.
    pub query_ms_p50: f64,
    /// Per-query latency, 95th percentile, ms.
    pub query_ms_p95: f64,
    /// Peak resident memory of the process, MB.
    pub peak_rss_mb: f64,
    /// Threads available to the process.
    pub threads: usize,
}

/// The report, in the protocol's JSON shape.
#[derive(Debug, Serialize)]
pub struct Report {
    /// "memtape".
    pub system: String,
    /// memtape's version.
    pub version: String,
    /// The split's name.
    pub split: String,
    /// Queries measured.
    pub n_queries: usize,
    /// The metrics.
    pub metrics: AllMetrics,
    /// The timings.
    pub timing: Timing,
    /// The settings that produced these numbers.
    pub settings: Value,
}

impl Report {
    /// The one-line summary for stderr.
    pub fn summary(&self) -> String {
        let o = &self.metrics.overall;
        let mut out = format!(
            "locomo {}: {} queries, R@5 {:.3} R@10 {:.3} NDCG@10 {:.3} sessR@5 {:.3} | ingest {:.1}s, query p50 {:.1}ms p95 {:.1}ms, peak RSS {:.0} MB ({})",
            self.split,
            self.n_queries,
            o.recall_5,
            o.recall_10,
            o.ndcg_10,
            o.session_recall_5,
            self.timing.ingest_s_total,
            self.timing.query_ms_p50,
            self.timing.query_ms_p95,
            self.timing.peak_rss_mb,
            self.settings["mode"].as_str().unwrap_or("?"),
        );
        for (ability, m) in &self.metrics.by_ability {
            out.push_str(&format!(
                "\n  {ability}: {} queries, R@5 {:.3} R@10 {:.3} NDCG@10 {:.3}",
                m.n, m.recall_5, m.recall_10, m.ndcg_10
            ));
        }
        out
    }
}

fn bad(why: impl Into<String>) -> Error {
    Error::Data(why.into())
}

/// LoCoMo writes session times as "1:56 pm on 8 May, 2023".
fn parse_date(text: &str) -> Option<DateTime<Utc>> {
    let text = text.trim().to_ascii_uppercase();
    NaiveDateTime::parse_from_str(&text, "%I:%M %p ON %d %B, %Y")
        .ok()
        .map(|t| t.and_utc())
}

/// The evidence normalisation of the protocol: split on `;`, `,` and whitespace, keep
/// `D<session>:<turn>` tokens, strip leading zeros of the turn, drop unknown ids.
fn normalise_evidence(raw: &[Value], known: &HashSet<&str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in raw.iter().filter_map(Value::as_str) {
        for token in item.split(|c: char| c == ';' || c == ',' || c.is_whitespace()) {
            let Some((s, t)) = token.strip_prefix('D').and_then(|r| r.split_once(':')) else {
                continue;
            };
            let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
            if !digits(s) || !digits(t) {
                continue;
            }
            let turn = t.trim_start_matches('0');
            let id = format!("D{s}:{}", if turn.is_empty() { "0" } else { turn });
            if known.contains(id.as_str()) && !out.contains(&id) {
                out.push(id);
            }
        }
    }
    out
}

/// Reads a file in LoCoMo's format.
pub(crate) fn load(path: &Path) -> Result<Vec<Conversation>, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
    let samples: Vec<Value> = serde_json::from_str(&text).map_err(|e| {
        bad(format!(
            "{} is not a JSON list of LoCoMo samples: {e}",
            path.display()
        ))
    })?;
    let mut out = Vec::new();
    for (i, sample) in samples.iter().enumerate() {
        let id = sample["sample_id"]
            .as_str()
            .map_or_else(|| format!("sample-{i}"), str::to_owned);
        let conv = sample["conversation"]
            .as_object()
            .ok_or_else(|| bad(format!("{id}: no conversation object")))?;
        let mut sessions: Vec<u32> = conv
            .keys()
            .filter_map(|k| k.strip_prefix("session_")?.parse().ok())
            .collect();
        sessions.sort_unstable();
        let mut turns = Vec::new();
        for n in sessions {
            let Some(list) = conv[&format!("session_{n}")].as_array() else {
                continue;
            };
            let date = conv
                .get(&format!("session_{n}_date_time"))
                .and_then(Value::as_str);
            // Undated sessions keep their order: one day apart from the epoch.
            let at = date
                .and_then(parse_date)
                .unwrap_or_else(|| DateTime::UNIX_EPOCH + chrono::Duration::days(n.into()));
            for turn in list {
                let field = |k: &str| turn[k].as_str().map(str::to_owned);
                let (Some(dia_id), Some(speaker), Some(mut text)) =
                    (field("dia_id"), field("speaker"), field("text"))
                else {
                    return Err(bad(format!(
                        "{id} session {n}: a turn lacks dia_id, speaker or text"
                    )));
                };
                if let Some(caption) = turn["blip_caption"].as_str() {
                    text.push_str(&format!(" [image: {caption}]"));
                }
                turns.push(Turn {
                    dia_id,
                    session: n,
                    speaker,
                    text,
                    at,
                });
            }
        }
        let known: HashSet<&str> = turns.iter().map(|t| t.dia_id.as_str()).collect();
        let mut queries = Vec::new();
        for qa in sample["qa"].as_array().map_or(&[][..], Vec::as_slice) {
            let Some(category) = qa["category"].as_u64().filter(|c| (1..=4).contains(c)) else {
                continue;
            };
            let evidence = normalise_evidence(
                qa["evidence"].as_array().map_or(&[][..], Vec::as_slice),
                &known,
            );
            let Some(question) = qa["question"].as_str() else {
                continue;
            };
            if !evidence.is_empty() {
                queries.push(Query {
                    question: question.to_owned(),
                    answer: match &qa["answer"] {
                        Value::String(s) => s.clone(),
                        Value::Null => String::new(),
                        other => other.to_string(),
                    },
                    category: category as u8,
                    ability: qa["ability"]
                        .as_str()
                        .filter(|a| !a.trim().is_empty())
                        .map(str::to_owned),
                    evidence,
                });
            }
        }
        out.push(Conversation { id, turns, queries });
    }
    Ok(out)
}

/// The session number of a dia_id ("D12:3" → 12).
fn session_of(dia_id: &str) -> Option<u32> {
    dia_id.strip_prefix('D')?.split_once(':')?.0.parse().ok()
}

/// The protocol's metrics for one ranking.
pub(crate) fn score(ranking: &[String], evidence: &[String]) -> Metrics {
    let relevant = |d: &String| evidence.contains(d);
    let recall = |k: usize| {
        ranking.iter().take(k).filter(|d| relevant(d)).count() as f64 / evidence.len() as f64
    };
    let dcg: f64 = ranking
        .iter()
        .take(10)
        .enumerate()
        .filter(|(_, d)| relevant(d))
        .map(|(i, _)| 1.0 / ((i + 2) as f64).log2())
        .sum();
    let ideal: f64 = (0..evidence.len().min(10))
        .map(|i| 1.0 / ((i + 2) as f64).log2())
        .sum();
    let mut sessions: Vec<u32> = Vec::new();
    for s in ranking.iter().filter_map(|d| session_of(d)) {
        if !sessions.contains(&s) {
            sessions.push(s);
        }
    }
    sessions.truncate(5);
    let wanted: HashSet<u32> = evidence.iter().filter_map(|d| session_of(d)).collect();
    let covered = wanted.iter().filter(|s| sessions.contains(s)).count();
    Metrics {
        recall_1: recall(1),
        recall_5: recall(5),
        recall_10: recall(10),
        recall_20: recall(20),
        hit_5: f64::from(u8::from(ranking.iter().take(5).any(relevant))),
        ndcg_10: if ideal > 0.0 { dcg / ideal } else { 0.0 },
        session_recall_5: covered as f64 / wanted.len().max(1) as f64,
        n: 1,
    }
}

/// Ingests `conv` into a scratch store of its own, as the protocol says.
pub(crate) fn ingest(conv: &Conversation, config: &Config) -> Result<Ingested, Error> {
    let scratch = tempfile::tempdir()?;
    let index = Index::open(
        &scratch.path().join("index"),
        config.embedder.clone(),
        config.index,
    )
    .map_err(memtape::Error::from)?;
    let engine = Engine::init(scratch.path())?.with_index(index)?;
    // The conversation is a user of the agent; each LoCoMo session is a session.
    let user = Scope::agent("locomo", "bench")
        .and_then(|s| s.with_user(conv.id.as_str()))
        .map_err(memtape::Error::from)?;
    let started = Instant::now();
    let mut dia_ids: HashMap<EntryId, String> = HashMap::new();
    // The conversation is imported in one append (one transaction), each LoCoMo
    // session in its own session scope; the write hook then indexes it in batches.
    let mut entries = Vec::with_capacity(conv.turns.len());
    for t in &conv.turns {
        let session = user
            .clone()
            .with_session(format!("session_{}", t.session))
            .map_err(memtape::Error::from)?;
        let mut m = Message::user(t.text.clone());
        m.name = Some(t.speaker.clone());
        entries.push(NewEntry::new(session, Payload::Message(m), t.at));
    }
    for (entry, turn) in engine.append_entries(entries)?.iter().zip(&conv.turns) {
        dia_ids.insert(entry.id, turn.dia_id.clone());
    }
    Ok(Ingested {
        engine,
        user,
        dia_ids,
        seconds: started.elapsed().as_secs_f64(),
        scratch,
    })
}

impl Ingested {
    /// The dia_ids `question` ranks, best first, `DEPTH` deep, and the search's latency
    /// in ms.
    pub(crate) fn rank(&self, question: &str, mode: Mode) -> Result<(Vec<String>, f64), Error> {
        let (ranked, ms) = self.rank_scored(question, mode)?;
        Ok((ranked.into_iter().map(|(id, _)| id).collect(), ms))
    }

    /// A ranking from `index`, another view of this conversation's index file, with each
    /// dia_id's score, and the search's latency in ms.
    fn rank_with(
        &self,
        index: &Index,
        question: &str,
        mode: Mode,
    ) -> Result<(Vec<(String, f32)>, f64), Error> {
        let request = SearchRequest {
            text: question.to_owned(),
            filter: SearchFilter::within(&self.user),
            limit: DEPTH,
            mode,
            exact: false,
        };
        let started = Instant::now();
        let hits = index.search(&request).map_err(memtape::Error::from)?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let ranking = hits
            .iter()
            .filter_map(|h| Some((self.dia_ids.get(&h.id)?.clone(), h.score)))
            .collect();
        Ok((ranking, ms))
    }

    /// [`Ingested::rank`] with each dia_id's score.
    fn rank_scored(&self, question: &str, mode: Mode) -> Result<(Vec<(String, f32)>, f64), Error> {
        let request = SearchRequest {
            text: question.to_owned(),
            filter: SearchFilter::within(&self.user),
            limit: DEPTH,
            mode,
            exact: false,
        };
        let started = Instant::now();
        let hits = self.engine.search(&request)?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let ranking = hits
            .iter()
            .filter_map(|h| Some((self.dia_ids.get(&h.entry.id)?.clone(), h.score)))
            .collect();
        Ok((ranking, ms))
    }
}

/// Runs the benchmark on the LoCoMo-format file at `data`. With `rankings`, also writes
/// each query's ranking there, one JSON line per query (conversation, category, question,
/// evidence, and the ranked dia_ids with their scores), to study rankings offline.
pub fn run(data: &Path, config: &Config, rankings: Option<&Path>) -> Result<Report, Error> {
    let mut reports = sweep(data, config, &[], rankings)?;
    Ok(reports.remove(0))
}

/// What one configuration of a run has gathered so far.
#[derive(Default)]
struct Tally {
    overall: Metrics,
    by_category: BTreeMap<String, Metrics>,
    by_ability: BTreeMap<String, Metrics>,
    latencies: Vec<f64>,
    rankings: Option<(PathBuf, std::io::BufWriter<std::fs::File>)>,
}

fn unwritable(path: &Path, e: std::io::Error) -> Error {
    Error::Data(format!("writing the rankings to {}: {e}", path.display()))
}

impl Tally {
    fn new(rankings: Option<PathBuf>) -> Result<Tally, Error> {
        let rankings = match rankings {
            Some(path) => {
                let file = std::fs::File::create(&path).map_err(|e| unwritable(&path, e))?;
                Some((path, std::io::BufWriter::new(file)))
            }
            None => None,
        };
        Ok(Tally {
            rankings,
            ..Tally::default()
        })
    }

    fn add(
        &mut self,
        conv: &Conversation,
        q: &Query,
        scored: Vec<(String, f32)>,
        ms: f64,
    ) -> Result<(), Error> {
        self.latencies.push(ms);
        if let Some((path, out)) = self.rankings.as_mut() {
            let line = serde_json::json!({
                "conversation": conv.id,
                "category": q.category,
                "ability": q.ability,
                "question": q.question,
                "evidence": q.evidence,
                "ranking": scored,
            });
            writeln!(out, "{line}").map_err(|e| unwritable(path, e))?;
        }
        let ranking: Vec<String> = scored.into_iter().map(|(id, _)| id).collect();
        let m = score(&ranking, &q.evidence);
        self.overall.add(&m);
        self.by_category
            .entry(q.category.to_string())
            .or_default()
            .add(&m);
        if let Some(ability) = &q.ability {
            self.by_ability.entry(ability.clone()).or_default().add(&m);
        }
        Ok(())
    }

    fn report(
        mut self,
        config: &Config,
        conversations: usize,
        ingest_s: f64,
    ) -> Result<Report, Error> {
        if let Some((path, out)) = self.rankings.as_mut() {
            out.flush().map_err(|e| unwritable(path, e))?;
        }
        let n_queries = self.overall.n;
        Ok(Report {
            system: "memtape".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            split: config.split.clone(),
            n_queries,
            metrics: AllMetrics {
                overall: self.overall.mean(),
                by_category: self
                    .by_category
                    .into_iter()
                    .map(|(k, v)| (k, v.mean()))
                    .collect(),
                by_ability: self
                    .by_ability
                    .into_iter()
                    .map(|(k, v)| (k, v.mean()))
                    .collect(),
            },
            timing: Timing {
                ingest_s_total: ingest_s,
                query_ms_p50: quantile(&mut self.latencies.clone(), 0.5),
                query_ms_p95: quantile(&mut self.latencies, 0.95),
                peak_rss_mb: peak_rss_mb(),
                threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            },
            settings: settings(config, conversations),
        })
    }
}

/// [`run`] under `config` and then under each of `variants` (ranking settings that leave
/// what is indexed alone: weights, fusion, BM25's parameters), ingesting each
/// conversation once; one report each, `config`'s first. A variant searches the same index
/// file opened again with its settings; its latencies leave out reading the entries back.
/// Rankings go to `rankings` for `config` and to `rankings` with `.1`, `.2`, … appended
/// for the variants.
pub fn sweep(
    data: &Path,
    config: &Config,
    variants: &[IndexConfig],
    rankings: Option<&Path>,
) -> Result<Vec<Report>, Error> {
    let conversations = load(data)?;
    let ranking_file = |i: usize| {
        rankings.map(|path| match i {
            0 => path.to_owned(),
            i => {
                let mut name = path.as_os_str().to_owned();
                name.push(format!(".{i}"));
                PathBuf::from(name)
            }
        })
    };
    let mut tallies = (0..=variants.len())
        .map(|i| Tally::new(ranking_file(i)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ingest_s = 0.0;
    for conv in &conversations {
        let ingested = ingest(conv, config)?;
        ingest_s += ingested.seconds;
        for q in &conv.queries {
            let (scored, ms) = ingested.rank_scored(&q.question, config.mode)?;
            tallies[0].add(conv, q, scored, ms)?;
        }
        for (variant, tally) in variants.iter().zip(&mut tallies[1..]) {
            let index = Index::open(
                &ingested.scratch.path().join("index"),
                config.embedder.clone(),
                *variant,
            )
            .map_err(memtape::Error::from)?;
            for q in &conv.queries {
                let (scored, ms) = ingested.rank_with(&index, &q.question, config.mode)?;
                tally.add(conv, q, scored, ms)?;
            }
        }
    }
    let configs = std::iter::once(config.clone()).chain(variants.iter().map(|v| Config {
        index: *v,
        ..config.clone()
    }));
    tallies
        .into_iter()
        .zip(configs)
        .map(|(tally, config)| tally.report(&config, conversations.len(), ingest_s))
        .collect()
}

/// The retrieval settings of a run over `conversations` conversations, for its report.
pub(crate) fn settings(config: &Config, conversations: usize) -> Value {
    let embedder = config
        .embedder
        .as_ref()
        .map_or("none".to_owned(), |e| e.id().to_owned());
    let fusion = format!("{:?}", config.index.fusion);
    serde_json::json!({
        "mode": config.mode.as_str(),
        "embedder": embedder,
        "fusion": fusion,
        "candidates": config.index.candidates,
        "context_weight": config.index.context_weight,
        "bm25_k1": config.index.bm25_k1,
        "bm25_b": config.index.bm25_b,
        "embed_context": config.index.embed_context,
        "neighbour_weight": config.index.neighbour_weight,
        "scope_weight": config.index.scope_weight,
        "time_weight": config.index.time_weight,
        "speaker_weight": config.index.speaker_weight,
        "when_weight": config.index.when_weight,
        "update_weight": config.index.update_weight,
        "opener_weight": config.index.opener_weight,
        "neighbour_length": config.index.neighbour_length,
        "document": "one turn: \"{speaker}: {text}\" (+ image caption), timestamped with its session date; each LoCoMo session a memtape session, the conversation a user",
        "conversations": conversations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_is_normalised_as_the_protocol_says() {
        let known: HashSet<&str> = ["D30:5", "D1:3", "D2:10"].into();
        let raw = vec![
            Value::from("D30:05; D1:3,D2:10 D9:9"),
            Value::from("D1:3"),
            Value::from("x"),
        ];
        assert_eq!(normalise_evidence(&raw, &known), ["D30:5", "D1:3", "D2:10"]);
    }

    #[test]
    fn metrics_follow_the_definitions() {
        let ranking: Vec<String> = ["D1:1", "D2:1", "D1:2", "D3:1", "D4:1", "D5:1", "D6:1"]
            .map(String::from)
            .into();
        let m = score(&ranking, &["D1:2".into(), "D6:1".into()]);
        assert_eq!(m.recall_1, 0.0);
        assert_eq!(m.recall_5, 0.5);
        assert_eq!(m.recall_10, 1.0);
        assert_eq!(m.hit_5, 1.0);
        let ndcg = (1.0 / 4f64.log2() + 1.0 / 8f64.log2()) / (1.0 + 1.0 / 3f64.log2());
        assert!((m.ndcg_10 - ndcg).abs() < 1e-12);
        // Sessions in rank order: 1, 2, 3, 4, 5 (6 is the sixth): session 1 of {1, 6}.
        assert_eq!(m.session_recall_5, 0.5);
    }

    #[test]
    fn locomo_dates_parse() {
        let at = parse_date("1:56 pm on 8 May, 2023").unwrap();
        assert_eq!(at.to_rfc3339(), "2023-05-08T13:56:00+00:00");
        assert!(parse_date("11:01 am on 17 December, 2022").is_some());
    }
}
