//! `memtape search`, `reindex` and the model setup, driven through the real binary with
//! the real MiniLM model that the project's own setup (`memtape models fetch`, run by
//! .ci/run) put in the model cache. Nothing here touches the network.

use std::path::PathBuf;
use std::process::Command;

use crate::common::Run;
use serde_json::Value;

/// Where `memtape models fetch` put the model files: MEMTAPE_MODELS, else the default cache.
fn models() -> PathBuf {
    let dir = std::env::var_os("MEMTAPE_MODELS")
        .map(PathBuf::from)
        .or_else(memtape_embed::default_cache_dir)
        .unwrap();
    assert!(
        dir.join("minilm-l6-v2-q8").join("model.onnx").exists(),
        "no MiniLM model in {}: run `memtape models fetch` first (.ci/run does)",
        dir.display()
    );
    dir
}

/// The search tests' additions to the shared harness.
trait Search {
    fn say(&self, session: &str, role: &str, text: &str);
    fn texts(&self, args: &[&str]) -> Vec<String>;
}

impl Search for Run {
    fn say(&self, session: &str, role: &str, text: &str) {
        self.ok(&["append", session, "--role", role, "--content", text]);
    }

    /// The texts of the hits, best first.
    fn texts(&self, args: &[&str]) -> Vec<String> {
        let mut all = vec!["search"];
        all.extend_from_slice(args);
        all.push("--json");
        let hits: Value = serde_json::from_str(&self.ok(&all)).unwrap();
        hits.as_array()
            .unwrap()
            .iter()
            .map(|h| {
                h["entry"]["payload"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    }
}

fn chat(run: &Run) {
    models();
    run.say(
        "home",
        "user",
        "I adopted a golden retriever puppy last week",
    );
    run.say(
        "home",
        "assistant",
        "Congratulations! What is the puppy called?",
    );
    run.say(
        "home",
        "user",
        "My car broke down on the highway this morning",
    );
    run.say(
        "travel",
        "user",
        "We are planning a trip to Kyoto in the spring",
    );
    run.say(
        "travel",
        "assistant",
        "Cherry blossom season in Kyoto is beautiful",
    );
}

#[test]
fn the_real_model_finds_meaning_that_shares_no_words() {
    let run = Run::new();
    chat(&run);
    // No hit shares a word with these queries: only the embedding can find them.
    let mut dog = run.texts(&["my dog", "--mode", "vector", "--limit", "2"]);
    dog.sort();
    assert_eq!(
        dog,
        [
            "Congratulations! What is the puppy called?",
            "I adopted a golden retriever puppy last week"
        ]
    );
    let trip = run.texts(&["holiday in Japan", "--mode", "vector", "--limit", "2"]);
    assert!(trip.iter().all(|t| t.contains("Kyoto")), "{trip:?}");
    let bm25 = run.texts(&["holiday in Japan", "--mode", "bm25"]);
    assert!(bm25.is_empty(), "BM25 alone finds nothing: {bm25:?}");
    // Hybrid (the default) keeps the semantic match on top.
    let hybrid = run.texts(&["vehicle trouble"]);
    assert_eq!(hybrid[0], "My car broke down on the highway this morning");
}

#[test]
fn filters_narrow_by_session_kind_role_and_time() {
    let run = Run::new();
    chat(&run);
    let travel = run.texts(&["spring", "--session", "travel"]);
    assert!(travel.iter().all(|t| t.contains("Kyoto")), "{travel:?}");
    let assistant = run.texts(&["puppy", "--role", "assistant", "--mode", "bm25"]);
    assert_eq!(assistant, ["Congratulations! What is the puppy called?"]);
    assert!(run.texts(&["puppy", "--kind", "tool_result"]).is_empty());
    assert!(run.texts(&["puppy", "--since", "2999-01-01"]).is_empty());
    assert!(run.texts(&["puppy", "--agent", "someone-else"]).is_empty());
    let err = run.fails(&["search", "puppy", "--kind", "memo"]);
    assert!(err.contains("memo"), "{err}");
    let err = run.fails(&["search", "puppy", "--scope", "user"]);
    assert!(err.contains("--user"), "{err}");
}

#[test]
fn reindex_switches_models_and_a_mismatch_is_named() {
    let run = Run::new();
    chat(&run);
    // Indexed without vectors first.
    assert_eq!(run.texts(&["kyoto", "--model", "none"]).len(), 2);
    let err = run.fails(&["search", "kyoto"]);
    assert!(err.contains("memtape reindex"), "{err}");
    let out = run.ok(&["reindex"]);
    assert!(
        out.starts_with("indexed 5 entries through #5 with minilm-l6-v2-q8"),
        "{out}"
    );
    let trip = run.texts(&["holiday in Japan", "--mode", "vector", "--limit", "2"]);
    assert!(trip.iter().all(|t| t.contains("Kyoto")), "{trip:?}");
}

#[test]
fn a_missing_model_says_how_to_get_it() {
    let run = Run::new();
    run.ok(&["init"]);
    let out = Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(["search", "anything"])
        .env("MEMTAPE_DATA_DIR", run.dir.path().join("data"))
        .env_remove("MEMTAPE_MODEL_DIR")
        .env_remove("MEMTAPE_MODEL")
        .env("MEMTAPE_MODELS", run.dir.path().join("empty-cache"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("memtape models fetch"), "{err}");
    assert!(err.contains("--model none"), "{err}");
}

/// A hit's score is the same whatever `--limit` asks for: the lists fused and boosted do
/// not depend on it. The store is searched through the one-bit scan (`--exact-limit 1`),
/// whose candidates once grew with the limit: a hit missed by the scan at `--limit 2`
/// lost its vector share, and the same hit scored differently at `--limit 5`.
#[test]
fn a_hits_score_does_not_depend_on_the_limit() {
    models();
    let run = Run::new();
    // A thousand messages of words drawn at random (a fixed seed), so the one-bit codes
    // are an approximation that the number of candidates it keeps matters to.
    let words: Vec<&str> = "ada bo tea lake kite bread violin map lamp garden market \
        school train river cake paint sold lost found borrowed fixed baked music dog cat \
        book rain snow summer winter city beach mountain coffee letter phone bike car \
        museum concert friend sister brother mother father job office doctor"
        .split_whitespace()
        .collect();
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut lines = String::new();
    for i in 0..1000 {
        let text: Vec<&str> = (0..8)
            .map(|_| words[(next() % words.len() as u64) as usize])
            .collect();
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let line = serde_json::json!({"role": role, "content": text.join(" ")});
        lines.push_str(&line.to_string());
        lines.push('\n');
    }
    let file = run.path("many.jsonl");
    std::fs::write(&file, lines).unwrap();
    run.ok(&["import", "--format", "nanobot", &file, "--session", "s"]);
    let scores = |query: &str, limit: usize| -> Vec<(u64, f64)> {
        let out = run.ok(&[
            "search",
            query,
            "--limit",
            &limit.to_string(),
            "--exact-limit",
            "1",
            "--json",
        ]);
        let hits: Value = serde_json::from_str(&out).unwrap();
        hits.as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h["entry"]["id"].as_u64().unwrap(),
                    h["score"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    for query in [
        "who repaired the lamp near the water",
        "bread baked by the lake",
        "a letter from my sister about the concert",
        "the doctor said coffee",
    ] {
        let wide = scores(query, 10);
        for limit in [1, 2, 5] {
            let narrow = scores(query, limit);
            assert_eq!(narrow.len(), limit, "{query}");
            assert_eq!(
                narrow[..],
                wide[..limit],
                "{query}: --limit {limit} against 10"
            );
        }
    }
}
