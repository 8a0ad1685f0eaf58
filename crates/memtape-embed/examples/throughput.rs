//! Measures load time and sentences/s of both embedders on ~1000 generated chat-memory-like
//! sentences (10–30 words): `cargo run --release -p memtape-embed --example throughput [threads]`.
//! Uses the cache `$MEMTAPE_MODELS` or the default one; run the `fetch` example first.

use std::path::PathBuf;
use std::time::Instant;

use memtape_embed::{EmbedConfig, Model, default_cache_dir, load, locate};

const WORDS: &[&str] = &[
    "I",
    "we",
    "she",
    "Caroline",
    "Melanie",
    "went",
    "to",
    "the",
    "support",
    "group",
    "yesterday",
    "and",
    "it",
    "was",
    "really",
    "inspiring",
    "my",
    "kids",
    "love",
    "painting",
    "camping",
    "by",
    "lake",
    "last",
    "weekend",
    "adoption",
    "agency",
    "career",
    "counseling",
    "mental",
    "health",
    "friends",
    "family",
    "pottery",
    "class",
    "made",
    "a",
    "bowl",
    "for",
    "birthday",
    "next",
    "month",
    "planning",
    "road",
    "trip",
    "beach",
    "sunset",
    "book",
    "about",
    "transgender",
    "stories",
    "thanks",
    "so",
    "much",
    "that",
    "sounds",
    "amazing",
    "how",
    "did",
    "you",
    "feel",
    "when",
    "your",
    "daughter",
    "started",
    "school",
    "concert",
    "violin",
];

fn sentences(n: usize) -> Vec<String> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |m: usize| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) as usize) % m
    };
    (0..n)
        .map(|_| {
            let len = 10 + next(21);
            let mut s = (0..len)
                .map(|_| WORDS[next(WORDS.len())])
                .collect::<Vec<_>>()
                .join(" ");
            s.push('.');
            s
        })
        .collect()
}

fn main() {
    let cache = std::env::var_os("MEMTAPE_MODELS")
        .map(PathBuf::from)
        .or_else(default_cache_dir)
        .expect("no data directory; set MEMTAPE_MODELS");
    let mut config = EmbedConfig::new(cache);
    if let Some(t) = std::env::args().nth(1) {
        config.threads = t.parse().expect("threads must be a number");
    }
    let texts = sentences(1000);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    for model in Model::ALL {
        let files = locate(model, &config).unwrap_or_else(|e| panic!("{e}"));
        let start = Instant::now();
        let embedder = load(model, &files, &config).unwrap_or_else(|e| panic!("{e}"));
        let loaded = start.elapsed();
        let start = Instant::now();
        let mut n = 0;
        for batch in refs.chunks(256) {
            n += embedder
                .embed(batch)
                .unwrap_or_else(|e| panic!("{e}"))
                .len();
        }
        let secs = start.elapsed().as_secs_f64();
        let pair = |a: &str, b: &str| {
            let v = embedder.embed(&[a, b]).unwrap_or_else(|e| panic!("{e}"));
            v[0].iter().zip(&v[1]).map(|(x, y)| x * y).sum::<f32>()
        };
        println!(
            "{}: load {:.0} ms, {n} sentences in {secs:.2} s = {:.0} sentences/s ({} threads); \
             cosines {:.4} / {:.4}",
            embedder.id(),
            loaded.as_secs_f64() * 1000.0,
            n as f64 / secs,
            config.threads,
            pair("The new movie is awesome", "The new movie is so great"),
            pair("A man is eating food.", "A man is eating a piece of bread."),
        );
    }
}
