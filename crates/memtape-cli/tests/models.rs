//! `memtape models fetch` from scratch: the real command, run into an empty model cache with
//! HOME and the temporary directory pointing at fresh folders, must write nowhere but
//! memtape's own directory under HOME (`~/.local/share/memtape`, where the data directory
//! and the model cache are by default). ONNX Runtime's Python tooling, which prepares
//! MiniLM during the fetch, would otherwise leave a device id and an event store in
//! `~/.cache/Microsoft/DeveloperTools/.onnxruntime/` and a session file in the temporary
//! directory; pip would keep its cache in `~/.cache/pip`.
//!
//! Nothing here touches the network: pip takes every wheel from the folder that
//! `scripts/test-wheels` fills (scripts/test runs it), and the model hub is skipped with
//! its own `HF_HUB_OFFLINE`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The folder of wheels `scripts/test-wheels` filled: MEMTAPE_TEST_WHEELS, else its default.
fn wheels() -> PathBuf {
    let dir = std::env::var_os("MEMTAPE_TEST_WHEELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache"));
            cache.join("memtape").join("test-wheels")
        });
    let complete = std::fs::read_dir(&dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(".complete-"))
    });
    assert!(
        complete,
        "no wheels in {}: run scripts/test-wheels first (scripts/test does)",
        dir.display()
    );
    dir
}

/// Every file and folder under `dir`, relative to it, sorted.
fn everything_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            out.push(
                path.strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    out.sort();
    out
}

#[test]
#[cfg(target_os = "linux")]
fn a_fetch_from_scratch_writes_nothing_outside_memtapes_own_directories() {
    let wheels = wheels();
    let home = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut fetch = Command::new(env!("CARGO_BIN_EXE_memtape"));
    // pip runs `rustc --version` for its user agent, and rustup's `rustc` creates
    // ~/.rustup/settings.toml in a HOME where rustup was never set up. Under cargo it finds
    // its home through RUSTUP_HOME; run directly, the test points it at the real one, as
    // on the machine of a user who has rustup.
    if std::env::var_os("RUSTUP_HOME").is_none()
        && let Some(real) = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".rustup"))
        && real.is_dir()
    {
        fetch.env("RUSTUP_HOME", real);
    }
    let out = fetch
        .args(["--model", "minilm", "models", "fetch", "--verbose"])
        .current_dir(cwd.path())
        .env("HOME", home.path())
        .env("TMPDIR", tmp.path())
        .env("PIP_NO_INDEX", "1")
        .env("PIP_FIND_LINKS", &wheels)
        .env("HF_HUB_OFFLINE", "1")
        // memtape must turn ONNX Runtime's telemetry off itself.
        .env_remove("ORT_DISABLE_TELEMETRY")
        .env_remove("PIP_CACHE_DIR")
        .env_remove("PIP_NO_CACHE_DIR")
        .env_remove("PYTHONDONTWRITEBYTECODE")
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_STATE_HOME")
        .env_remove("MEMTAPE_MODELS")
        .env_remove("MEMTAPE_MODEL_DIR")
        .env_remove("MEMTAPE_DATA_DIR")
        .env_remove("MEMTAPE_MODEL")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "models fetch failed:\n{stderr}");
    let models = home.path().join(".local/share/memtape/models");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "minilm ready: {}\n",
            models.join("minilm-l6-v2-q8/model.onnx").display()
        )
    );
    // The model was prepared by ONNX Runtime's tooling here, not found ready.
    assert!(
        stderr.contains("fusing MiniLM's attention and quantizing its matrix products"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "verified sha256 4a64be748280a8a552a14b8034b86408969b5a9a8898b6d5aa34bead40ea1c95"
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains("model hub"),
        "the hub was tried:\n{stderr}"
    );

    let written = everything_under(home.path());
    let outside: Vec<&String> = written
        .iter()
        .filter(|p| {
            !matches!(
                p.as_str(),
                ".local" | ".local/share" | ".local/share/memtape"
            ) && !p.starts_with(".local/share/memtape/")
        })
        .collect();
    assert!(
        outside.is_empty(),
        "written under HOME outside memtape's directory: {outside:#?}\n{stderr}"
    );
    // The fetch's scratch folder (the Python tooling's HOME and temporary files) is gone.
    assert_eq!(
        everything_under(&models),
        [
            "minilm-l6-v2-q8",
            "minilm-l6-v2-q8/model.onnx",
            "minilm-l6-v2-q8/tokenizer.json",
            "onnxruntime-1.31.1",
            "onnxruntime-1.31.1/libonnxruntime.so.1.31.1",
        ]
    );
    assert_eq!(
        everything_under(tmp.path()),
        Vec::<String>::new(),
        "written in TMPDIR"
    );
    assert_eq!(
        everything_under(cwd.path()),
        Vec::<String>::new(),
        "written in the working directory"
    );
}
