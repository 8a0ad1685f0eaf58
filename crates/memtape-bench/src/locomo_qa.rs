//! LoCoMo question answering (`memtape bench locomo-qa`): each conversation ingested as
//! the retrieval benchmark does ([`crate::locomo`]), then for each category 1–4 question
//! the top K turns memtape retrieves are given to a model to answer from, and the model
//! judges the answer against the gold one (the LLM-as-a-judge "J" metric of mem0's paper:
//! CORRECT or WRONG, generous on wording and date formats). Reports accuracy overall and
//! per category, the same run's retrieval, the tokens spent and the latencies.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Instant;

use memtape::prompts::Template;
use memtape_llm::{ChatRequest, ChatResponse, Llm, Message, Usage};
use serde::Serialize;
use serde_json::Value;

use crate::locomo::{self, Conversation, Metrics, Turn};
use crate::{Error, peak_rss_mb, quantile};

/// The answer prompt: `{memories}` are the retrieved turns, one `[date] speaker: text` line
/// each, in conversation order; `{question}` the question.
pub const ANSWER_PROMPT: Template = Template {
    name: "locomo-qa-answer",
    default: include_str!("../prompts/locomo-qa-answer.md"),
    vars: &["memories", "question"],
};

/// The judge prompt: `{question}`, `{gold}` (the file's answer) and `{answer}` (the
/// model's). It asks for a sentence of reasoning, then `{"label": "CORRECT" | "WRONG"}`.
pub const JUDGE_PROMPT: Template = Template {
    name: "locomo-qa-judge",
    default: include_str!("../prompts/locomo-qa-judge.md"),
    vars: &["question", "gold", "answer"],
};

/// Sampling temperature of both calls: the answers and verdicts should repeat.
const TEMPERATURE: f32 = 0.0;

/// What to run.
#[derive(Clone)]
pub struct Config {
    /// How conversations are ingested and searched (as `memtape bench locomo`).
    pub retrieval: locomo::Config,
    /// How many retrieved turns the model answers from.
    pub top_k: usize,
    /// Stop after this many questions (in file order), if given.
    pub limit_questions: Option<usize>,
    /// The most tokens an answer or a verdict may have.
    pub max_tokens: Option<u32>,
}

/// How one question ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The judge said CORRECT.
    Correct,
    /// The judge said WRONG.
    Wrong,
    /// The judge's reply named no verdict (counted as wrong).
    Unparseable,
    /// The answer or judge call failed after the client's retries (counted as wrong).
    Failed,
}

/// The verdict a judge's reply gives: the `label` of the last JSON object that has one,
/// else the last of the words CORRECT, WRONG or INCORRECT (case-insensitive; after "not"
/// the verdict turns over); `None` when there is neither.
pub fn parse_verdict(reply: &str) -> Option<bool> {
    let label = |text: &str| match text.trim().trim_matches(|c: char| !c.is_alphabetic()) {
        t if t.eq_ignore_ascii_case("correct") => Some(true),
        t if t.eq_ignore_ascii_case("wrong") || t.eq_ignore_ascii_case("incorrect") => Some(false),
        _ => None,
    };
    // A JSON object with a label, from the last `{` back.
    for (at, _) in reply.rmatch_indices('{') {
        let tail = &reply[at..];
        let Some(end) = tail.find('}') else { continue };
        if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(&tail[..=end])
            && let Some(verdict) = o.get("label").and_then(Value::as_str).and_then(label)
        {
            return Some(verdict);
        }
    }
    let words: Vec<&str> = reply
        .split(|c: char| !c.is_alphabetic())
        .filter(|w| !w.is_empty())
        .collect();
    words.iter().enumerate().rev().find_map(|(i, w)| {
        let verdict = label(w)?;
        let negated = i > 0 && words[i - 1].eq_ignore_ascii_case("not");
        Some(verdict != negated)
    })
}

/// Accuracy and retrieval over a set of questions.
#[derive(Clone, Debug, Default, Serialize)]
pub struct QaMetrics {
    /// The judge's accuracy: correct / questions (unparseable and failed count as wrong).
    #[serde(rename = "J")]
    pub j: f64,
    /// Questions asked.
    pub n: usize,
    /// Judged CORRECT.
    pub correct: usize,
    /// Judged WRONG.
    pub wrong: usize,
    /// Verdicts that named neither label.
    pub unparseable: usize,
    /// Questions whose answer or judge call failed.
    pub failed: usize,
    /// The share of the question's evidence among the K turns the model was given.
    #[serde(rename = "recall@k")]
    pub recall_k: f64,
    /// The retrieval benchmark's metrics for the same rankings.
    pub retrieval: Metrics,
}

impl QaMetrics {
    fn add(&mut self, outcome: Outcome, recall_k: f64, retrieval: &Metrics) {
        self.n += 1;
        match outcome {
            Outcome::Correct => self.correct += 1,
            Outcome::Wrong => self.wrong += 1,
            Outcome::Unparseable => self.unparseable += 1,
            Outcome::Failed => self.failed += 1,
        }
        self.recall_k += recall_k;
        self.retrieval.add(retrieval);
    }

    fn mean(mut self) -> QaMetrics {
        let n = self.n.max(1) as f64;
        self.j = self.correct as f64 / n;
        self.recall_k /= n;
        self.retrieval = self.retrieval.mean();
        self
    }
}

/// The metrics overall and by category.
#[derive(Debug, Serialize)]
pub struct AllQaMetrics {
    /// Over every question.
    pub overall: QaMetrics,
    /// Per question category ("1" to "4").
    pub by_category: BTreeMap<String, QaMetrics>,
}

/// Tokens one kind of call spent, as the provider counted them.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Spent {
    /// Calls that returned a reply.
    pub calls: usize,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Replies that carried no usage (their tokens are missing from the sums).
    pub calls_without_usage: usize,
}

impl Spent {
    fn add(&mut self, usage: Option<Usage>) {
        self.calls += 1;
        match usage {
            Some(u) => {
                self.prompt_tokens += u.prompt_tokens;
                self.completion_tokens += u.completion_tokens;
            }
            None => self.calls_without_usage += 1,
        }
    }
}

/// Tokens spent answering and judging.
#[derive(Debug, Default, Serialize)]
pub struct Tokens {
    /// The answer calls.
    pub answer: Spent,
    /// The judge calls.
    pub judge: Spent,
}

/// Timings of the run.
#[derive(Debug, Serialize)]
pub struct Timing {
    /// Seconds to ingest the conversations asked about.
    pub ingest_s_total: f64,
    /// Search latency, median, ms.
    pub retrieve_ms_p50: f64,
    /// Search latency, 95th percentile, ms.
    pub retrieve_ms_p95: f64,
    /// Answer call latency (successful calls, retries included), median, ms.
    pub answer_ms_p50: f64,
    /// Answer call latency, 95th percentile, ms.
    pub answer_ms_p95: f64,
    /// Judge call latency (successful calls, retries included), median, ms.
    pub judge_ms_p50: f64,
    /// Judge call latency, 95th percentile, ms.
    pub judge_ms_p95: f64,
    /// Seconds the whole run took.
    pub total_s: f64,
    /// Peak resident memory of the process, MB.
    pub peak_rss_mb: f64,
    /// Threads available to the process.
    pub threads: usize,
}

/// What happened to one question (written by `--answers`).
#[derive(Debug, Serialize)]
pub struct Record {
    /// The conversation's sample_id.
    pub conversation: String,
    /// The question's category.
    pub category: u8,
    /// The question.
    pub question: String,
    /// The gold answer.
    pub gold: String,
    /// The dia_ids the model was given, best first.
    pub retrieved: Vec<String>,
    /// The model's answer, when the call succeeded.
    pub answer: Option<String>,
    /// The judge's reply, when the call succeeded.
    pub judge: Option<String>,
    /// How it ended.
    pub outcome: Outcome,
    /// Why the call failed, when it did.
    pub error: Option<String>,
}

/// The report, in `memtape bench locomo`'s JSON shape, with the tokens spent.
#[derive(Debug, Serialize)]
pub struct Report {
    /// "memtape".
    pub system: String,
    /// memtape's version.
    pub version: String,
    /// The split's name.
    pub split: String,
    /// Questions asked.
    pub n_queries: usize,
    /// Accuracy and retrieval.
    pub metrics: AllQaMetrics,
    /// Tokens spent.
    pub tokens: Tokens,
    /// The timings.
    pub timing: Timing,
    /// The settings that produced these numbers.
    pub settings: Value,
    /// Every question, in order (not in the JSON report).
    #[serde(skip)]
    pub questions: Vec<Record>,
}

impl Report {
    /// The one-line summary for stderr.
    pub fn summary(&self) -> String {
        let o = &self.metrics.overall;
        let by: Vec<String> = self
            .metrics
            .by_category
            .iter()
            .map(|(c, m)| format!("{c}: {:.3}", m.j))
            .collect();
        let t = &self.tokens;
        format!(
            "locomo-qa {}: {} questions, J {:.3} ({}), recall@{} {:.3}, {} failed, {} unparseable | tokens: answer {}+{}, judge {}+{} | retrieve p50 {:.1}ms, answer p50 {:.0}ms p95 {:.0}ms, judge p50 {:.0}ms p95 {:.0}ms ({}, {})",
            self.split,
            self.n_queries,
            o.j,
            by.join(", "),
            self.settings["top_k"],
            o.recall_k,
            o.failed,
            o.unparseable,
            t.answer.prompt_tokens,
            t.answer.completion_tokens,
            t.judge.prompt_tokens,
            t.judge.completion_tokens,
            self.timing.retrieve_ms_p50,
            self.timing.answer_ms_p50,
            self.timing.answer_ms_p95,
            self.timing.judge_ms_p50,
            self.timing.judge_ms_p95,
            self.settings["model"].as_str().unwrap_or("?"),
            self.settings["mode"].as_str().unwrap_or("?"),
        )
    }
}

/// A retrieved turn as the model reads it: `[8 May 2023, 1:56 pm] Caroline: text`.
fn format_turn(t: &Turn) -> String {
    format!(
        "[{}] {}: {}",
        t.at.format("%-d %B %Y, %-I:%M %P"),
        t.speaker,
        t.text
    )
}

/// One call of `llm` with `prompt` as the user message; the reply and the call's ms.
fn ask(
    llm: &dyn Llm,
    prompt: String,
    max_tokens: Option<u32>,
) -> Result<(ChatResponse, f64), memtape_llm::Error> {
    let mut request = ChatRequest::new(vec![Message::user(prompt)]);
    request.max_tokens = max_tokens;
    request.temperature = Some(TEMPERATURE);
    let started = Instant::now();
    let reply = llm.chat(&request)?;
    Ok((reply, started.elapsed().as_secs_f64() * 1000.0))
}

/// Runs the benchmark on the LoCoMo-format file at `data`, asking `llm`; `progress` is
/// told each question as it starts. Until one call has succeeded, a failed call ends the
/// run ([`Error::Llm`]: the provider is not answering); after, it fails that question only.
pub fn run(
    data: &Path,
    config: &Config,
    llm: &dyn Llm,
    progress: &mut dyn FnMut(&str),
) -> Result<Report, Error> {
    let run_started = Instant::now();
    let conversations = locomo::load(data)?;
    let available: usize = conversations.iter().map(|c| c.queries.len()).sum();
    let total = config
        .limit_questions
        .map_or(available, |n| n.min(available));
    let mut overall = QaMetrics::default();
    let mut by_category: BTreeMap<String, QaMetrics> = BTreeMap::new();
    let mut tokens = Tokens::default();
    let (mut retrieve_ms, mut answer_ms, mut judge_ms) = (Vec::new(), Vec::new(), Vec::new());
    let mut records = Vec::new();
    let mut ingest_s = 0.0;
    let mut ingested_conversations = 0;
    let mut answered_once = false;
    'conversations: for conv in &conversations {
        if records.len() >= total {
            break;
        }
        let ingested = locomo::ingest(conv, &config.retrieval)?;
        ingest_s += ingested.seconds;
        ingested_conversations += 1;
        let position: HashMap<&str, usize> = conv
            .turns
            .iter()
            .enumerate()
            .map(|(i, t)| (t.dia_id.as_str(), i))
            .collect();
        for q in &conv.queries {
            if records.len() >= total {
                break 'conversations;
            }
            progress(&format!(
                "question {}/{total} ({})",
                records.len() + 1,
                conv.id
            ));
            let (ranking, ms) = ingested.rank(&q.question, config.retrieval.mode)?;
            retrieve_ms.push(ms);
            let retrieval = locomo::score(&ranking, &q.evidence);
            let top: Vec<String> = ranking.into_iter().take(config.top_k).collect();
            let found = q.evidence.iter().filter(|e| top.contains(e)).count();
            let recall_k = found as f64 / q.evidence.len().max(1) as f64;
            let mut record = Record {
                conversation: conv.id.clone(),
                category: q.category,
                question: q.question.clone(),
                gold: q.answer.clone(),
                retrieved: top,
                answer: None,
                judge: None,
                outcome: Outcome::Failed,
                error: None,
            };
            let prompt = answer_prompt(conv, &position, &record.retrieved, &q.question);
            match ask(llm, prompt, config.max_tokens) {
                Ok((reply, ms)) => {
                    answered_once = true;
                    tokens.answer.add(reply.usage);
                    answer_ms.push(ms);
                    record.answer = Some(reply.content.trim().to_owned());
                }
                Err(e) if !answered_once => return Err(Error::Llm(e)),
                Err(e) => record.error = Some(format!("answer: {e}")),
            }
            if let Some(answer) = &record.answer {
                let prompt = JUDGE_PROMPT.render(
                    JUDGE_PROMPT.default,
                    &[
                        ("question", &q.question),
                        ("gold", &q.answer),
                        ("answer", answer),
                    ],
                );
                match ask(llm, prompt, config.max_tokens) {
                    Ok((reply, ms)) => {
                        tokens.judge.add(reply.usage);
                        judge_ms.push(ms);
                        record.outcome = match parse_verdict(&reply.content) {
                            Some(true) => Outcome::Correct,
                            Some(false) => Outcome::Wrong,
                            None => Outcome::Unparseable,
                        };
                        record.judge = Some(reply.content);
                    }
                    Err(e) => record.error = Some(format!("judge: {e}")),
                }
            }
            overall.add(record.outcome, recall_k, &retrieval);
            by_category.entry(q.category.to_string()).or_default().add(
                record.outcome,
                recall_k,
                &retrieval,
            );
            records.push(record);
        }
    }
    let mut settings = locomo::settings(&config.retrieval, ingested_conversations);
    if let Value::Object(s) = &mut settings {
        for (k, v) in [
            ("model", Value::from(llm.model())),
            ("top_k", config.top_k.into()),
            ("limit_questions", config.limit_questions.into()),
            ("max_tokens", config.max_tokens.into()),
            ("temperature", f64::from(TEMPERATURE).into()),
            ("answer_prompt_sha256", ANSWER_PROMPT.sha256().into()),
            ("judge_prompt_sha256", JUDGE_PROMPT.sha256().into()),
            (
                "questions",
                "categories 1-4 with evidence in the conversation, as bench locomo (5, adversarial, excluded)".into(),
            ),
            (
                "context",
                "the top-k turns, in conversation order, one \"[session date] speaker: text\" line each".into(),
            ),
            (
                "judge",
                "the same model, CORRECT or WRONG against the gold answer; J = correct / questions".into(),
            ),
        ] {
            s.insert(k.into(), v);
        }
    }
    Ok(Report {
        system: "memtape".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        split: config.retrieval.split.clone(),
        n_queries: records.len(),
        metrics: AllQaMetrics {
            overall: overall.mean(),
            by_category: by_category
                .into_iter()
                .map(|(k, v)| (k, v.mean()))
                .collect(),
        },
        tokens,
        timing: Timing {
            ingest_s_total: ingest_s,
            retrieve_ms_p50: quantile(&mut retrieve_ms, 0.5),
            retrieve_ms_p95: quantile(&mut retrieve_ms, 0.95),
            answer_ms_p50: quantile(&mut answer_ms, 0.5),
            answer_ms_p95: quantile(&mut answer_ms, 0.95),
            judge_ms_p50: quantile(&mut judge_ms, 0.5),
            judge_ms_p95: quantile(&mut judge_ms, 0.95),
            total_s: run_started.elapsed().as_secs_f64(),
            peak_rss_mb: peak_rss_mb(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        },
        settings,
        questions: records,
    })
}

/// The answer prompt for `question` from the turns `retrieved` (dia_ids) of `conv`, put
/// back in conversation order.
fn answer_prompt(
    conv: &Conversation,
    position: &HashMap<&str, usize>,
    retrieved: &[String],
    question: &str,
) -> String {
    let mut turns: Vec<usize> = retrieved
        .iter()
        .filter_map(|d| position.get(d.as_str()).copied())
        .collect();
    turns.sort_unstable();
    let memories = if turns.is_empty() {
        "(nothing was found)".to_owned()
    } else {
        turns
            .iter()
            .map(|&i| format_turn(&conv.turns[i]))
            .collect::<Vec<_>>()
            .join("\n")
    };
    ANSWER_PROMPT.render(
        ANSWER_PROMPT.default,
        &[("memories", &memories), ("question", question)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_parse_from_what_judges_write() {
        for (reply, verdict) in [
            (r#"{"label": "CORRECT"}"#, Some(true)),
            (r#"{"label": "WRONG"}"#, Some(false)),
            (
                "The answer names the same city.\n```json\n{\"label\": \"correct\"}\n```",
                Some(true),
            ),
            // The JSON label wins over words in the reasoning.
            (
                "It is not correct to say so, but the gist is there. {\"label\": \"CORRECT\"}",
                Some(true),
            ),
            ("The dates match. CORRECT", Some(true)),
            ("Label: WRONG.", Some(false)),
            ("INCORRECT", Some(false)),
            ("The generated answer is not correct.", Some(false)),
            ("Not wrong", Some(true)),
            // The last verdict word counts.
            (
                "At first it seems correct, but the year differs: WRONG",
                Some(false),
            ),
            (r#"{"label": "maybe"}"#, None),
            ("I cannot tell.", None),
            ("", None),
        ] {
            assert_eq!(parse_verdict(reply), verdict, "{reply:?}");
        }
    }

    #[test]
    fn templates_name_their_variables() {
        for (t, vars) in [
            (ANSWER_PROMPT, &["{memories}", "{question}"][..]),
            (JUDGE_PROMPT, &["{question}", "{gold}", "{answer}"][..]),
        ] {
            for v in vars {
                assert!(t.default.contains(v), "{} lacks {v}", t.name);
            }
        }
        let judge = JUDGE_PROMPT.render(
            JUDGE_PROMPT.default,
            &[("question", "Q?"), ("gold", "G"), ("answer", "A")],
        );
        // The JSON example's braces are left as they are.
        assert!(judge.contains(r#"{"label": "CORRECT"}"#), "{judge}");
        assert!(judge.contains("Gold answer: G"), "{judge}");
    }
}
