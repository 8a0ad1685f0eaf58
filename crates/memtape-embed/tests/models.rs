//! Tests of both embedders on the real model files in the cache.
//!
//! The cache is `$MEMTAPE_MODELS` if set, else `<data dir>/memtape/models`. These tests never
//! download: when the files are missing they fail and say how to fetch them
//! (`memtape models fetch`, which .ci/run runs).
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::OnceLock;

use memtape_embed::{
    EmbedConfig, Embedder, Error, Model, ModelFiles, OrtMiniLm, WordLlama, default_cache_dir, load,
    locate,
};

fn config() -> EmbedConfig {
    let cache = std::env::var_os("MEMTAPE_MODELS")
        .map(PathBuf::from)
        .or_else(default_cache_dir)
        .expect("no data directory on this system; set MEMTAPE_MODELS to the model cache");
    EmbedConfig::new(cache)
}

fn files(model: Model) -> ModelFiles {
    locate(model, &config()).unwrap_or_else(|e| {
        panic!(
            "{e}\nThese tests need the real model files. Fetch them with \
             `memtape models fetch` (set MEMTAPE_MODELS to use another cache)."
        )
    })
}

fn minilm() -> &'static OrtMiniLm {
    static MODEL: OnceLock<OrtMiniLm> = OnceLock::new();
    MODEL.get_or_init(|| OrtMiniLm::new(&files(Model::MiniLmInt8), 2).unwrap())
}

fn wordllama() -> &'static WordLlama {
    static MODEL: OnceLock<WordLlama> = OnceLock::new();
    MODEL.get_or_init(|| WordLlama::new(&files(Model::WordLlama)).unwrap())
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn cosine(e: &dyn Embedder, a: &str, b: &str) -> f32 {
    let v = e.embed(&[a, b]).unwrap();
    dot(&v[0], &v[1])
}

fn assert_unit(vectors: &[Vec<f32>], dim: usize) {
    for v in vectors {
        assert_eq!(v.len(), dim);
        let norm = dot(v, v).sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }
}

/// Reference cosines of the prepared (dynamically quantized) model, each text run alone,
/// computed independently with ONNX Runtime's Python API and the `tokenizers` package on the
/// same files; and of the float model (sentence-transformers), which quantization may move
/// by a little.
#[test]
fn minilm_matches_reference_cosines() {
    let m = minilm();
    assert_eq!(m.id(), "minilm-l6-v2-q8");
    assert_eq!(m.dim(), 384);
    let food = cosine(
        m,
        "A man is eating food.",
        "A man is eating a piece of bread.",
    );
    let movie = cosine(m, "The new movie is awesome", "The new movie is so great");
    // Within the quantization's reach of the float model, on every CPU.
    assert!((food - 0.7553).abs() < 0.03, "cosine {food}");
    assert!((movie - 0.8939).abs() < 0.03, "cosine {movie}");
    // The reference values of the prepared model were computed on a CPU with VNNI (int8
    // dot products). On one without (AVX2 alone: an AMD EPYC host on 2026-11-27) ONNX
    // Runtime's int8 products take other kernels and the cosines move: food 0.7477 through
    // memtape, 0.7666 through ONNX Runtime's Python API with its default session settings,
    // against 0.7756. Why memtape's session and Python's differ there is not yet known (an
    // open question for the next embedding work); the exact check applies where the
    // reference was made.
    if has_vnni() {
        assert!((food - 0.7756).abs() < 0.002, "cosine {food}");
        assert!((movie - 0.8849).abs() < 0.002, "cosine {movie}");
    }
}

/// Whether this CPU has VNNI, the int8 dot-product instructions.
fn has_vnni() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|info| {
        info.split_whitespace()
            .any(|flag| flag == "avx512_vnni" || flag == "avx_vnni")
    })
}

/// A text's vector depends on the text alone: the same in any batch, on any worker.
#[test]
fn minilm_batches_keep_order_and_match_single_texts() {
    let m = minilm();
    // Lengths vary a lot, so texts are handed out out of order to both workers.
    let texts: Vec<String> = (0..70)
        .map(|i| {
            let words = ["memory", "tape", "agent", "recall", "event"];
            (0..(i % 23) + 1)
                .map(|j| words[(i + j) % words.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let batch = m.embed(&refs).unwrap();
    assert_eq!(batch.len(), refs.len());
    assert_unit(&batch, 384);
    for i in [0, 7, 22, 45, 69] {
        let single = m.embed(&[refs[i]]).unwrap();
        assert_eq!(single[0], batch[i], "text {i}: batch and single differ");
    }
}

#[test]
fn minilm_handles_empty_and_long_input() {
    let m = minilm();
    assert!(m.embed(&[]).unwrap().is_empty());
    let long = "the agent remembered every word of the conversation ".repeat(100);
    let v = m.embed(&["", &long, "short"]).unwrap();
    assert_unit(&v, 384);
}

#[test]
fn minilm_ranks_related_above_unrelated() {
    let m = minilm();
    let related = cosine(
        m,
        "I adopted a puppy last week.",
        "We got a new dog recently.",
    );
    let unrelated = cosine(
        m,
        "I adopted a puppy last week.",
        "The quarterly tax filing is due.",
    );
    assert!(related > unrelated + 0.2, "{related} vs {unrelated}");
}

#[test]
fn wordllama_ranks_related_above_unrelated() {
    let w = wordllama();
    assert_eq!(w.id(), "wordllama-l2-256");
    assert_eq!(w.dim(), 256);
    let pairs = [
        (
            "I adopted a puppy last week.",
            "We got a new dog recently.",
            "The quarterly tax filing is due.",
        ),
        (
            "Caroline went to the LGBTQ support group yesterday.",
            "Caroline attended a support group meeting.",
            "Melanie painted a sunrise over the lake.",
        ),
        (
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "The girl is carrying a baby.",
        ),
    ];
    for (a, related, unrelated) in pairs {
        let v = w.embed(&[a, related, unrelated]).unwrap();
        assert_unit(&v, 256);
        let (r, u) = (dot(&v[0], &v[1]), dot(&v[0], &v[2]));
        assert!(r > u, "{a:?}: related {r} <= unrelated {u}");
    }
}

#[test]
fn wordllama_edge_cases() {
    let w = wordllama();
    assert!(w.embed(&[]).unwrap().is_empty());
    let v = w.embed(&["", "hello"]).unwrap();
    assert!(
        v[0].iter().all(|&x| x == 0.0),
        "empty text gives the zero vector"
    );
    assert_unit(&v[1..], 256);
    // Same text alone or in a batch: same vector.
    let alone = w.embed(&["hello"]).unwrap();
    assert_eq!(alone[0], v[1]);
}

#[test]
fn load_builds_both_models_and_checks_the_files() {
    let config = config();
    let wl = load(Model::WordLlama, &files(Model::WordLlama), &config).unwrap();
    assert_eq!(wl.id(), "wordllama-l2-256");
    let mini = load(Model::MiniLmInt8, &files(Model::MiniLmInt8), &config).unwrap();
    assert_eq!(mini.dim(), 384);
    let wrong = load(Model::MiniLmInt8, &files(Model::WordLlama), &config);
    assert!(matches!(wrong, Err(Error::WrongFiles { .. })));
}

/// Each model's floor separates unrelated queries from related ones on a short billing chat
/// (the chat a query about physics used to match).
#[test]
fn each_models_floor_separates_unrelated_from_related_texts() {
    let chat = [
        "Why was I charged twice this month?",
        "The second charge is a pending authorization; it will drop off in three days.",
        "Can I get a refund for the annual plan instead?",
        "Yes, I have issued a refund of 120 dollars to your card.",
        "Thanks! Please also send the invoice for March.",
    ];
    let unrelated = [
        "quantum chromodynamics",
        "nothingmatches",
        "recipe for banana bread",
        "who won the football match",
        "weather tomorrow in Paris",
    ];
    let models: [(&dyn Embedder, &str); 2] =
        [(minilm(), "money back"), (wordllama(), "money back")];
    for (model, related) in models {
        let floor = model.min_similarity();
        assert!(floor > 0.0, "{} has no floor", model.id());
        for query in unrelated {
            for text in chat {
                let c = cosine(model, query, text);
                assert!(c < floor, "{}: {query:?} vs {text:?} = {c}", model.id());
            }
        }
        let best = chat
            .iter()
            .map(|text| cosine(model, related, text))
            .fold(f32::MIN, f32::max);
        assert!(best > floor, "{}: {related:?} best {best}", model.id());
    }
}
