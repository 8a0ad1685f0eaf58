//! memtape writes nowhere but its data and model directories: loading MiniLM and embedding
//! with ONNX Runtime must leave the home directory (and the XDG cache, config and data
//! folders) untouched. ONNX Runtime's telemetry would otherwise create
//! `~/.cache/Microsoft/DeveloperTools/.onnxruntime/` with a device id on every run.
//!
//! The embedding runs in a child process (this test binary, re-run) whose HOME and XDG
//! folders point at an empty temporary directory; the model files come from the real cache.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use memtape_embed::{EmbedConfig, Model, default_cache_dir, load, locate};

const CHILD: &str = "MEMTAPE_TEST_EMBED_CHILD";

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        }
        out.push(path);
    }
    out
}

#[test]
fn embedding_with_onnx_runtime_writes_nothing_outside_the_model_directory() {
    if let Some(cache) = std::env::var_os(CHILD) {
        let config = EmbedConfig::new(PathBuf::from(cache));
        let files = locate(Model::MiniLmInt8, &config).unwrap();
        let embedder = load(Model::MiniLmInt8, &files, &config).unwrap();
        let v = embedder.embed(&["a kayak on the lake"]).unwrap();
        assert_eq!(v[0].len(), 384);
        return;
    }
    let cache = std::env::var_os("MEMTAPE_MODELS")
        .map(PathBuf::from)
        .or_else(default_cache_dir)
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "embedding_with_onnx_runtime_writes_nothing_outside_the_model_directory",
            "--nocapture",
        ])
        .env(CHILD, &cache)
        .env("HOME", home.path())
        .env("XDG_CACHE_HOME", home.path().join("cache"))
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env_remove("ORT_DISABLE_TELEMETRY")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let written = files_under(home.path());
    assert!(
        written.is_empty(),
        "written outside the data directory: {written:#?}"
    );
}
