//! Tidy checks over the source tree: memtape-core does no IO (the same rule clippy's
//! `disallowed-methods` enforces through `crates/memtape-core/clippy.toml`, checked here
//! as text so it holds even where clippy is not run), every source file opens with a `//!`
//! line, and ARCHITECTURE.md's code map names every source file of the workspace.
//!
//! This test reads files, which is what memtape-core itself may not do; it is a test of the
//! tree, not part of the crate.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::unwrap_used
)]

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Every `.rs` file under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The workspace's crates' source folders (`crates/*/src`).
fn source_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(workspace().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn memtape_core_cannot_do_io() {
    const FORBIDDEN: [&str; 10] = [
        "std::fs",
        "std::net",
        "std::process",
        "std::env",
        "Utc::now",
        "Local::now",
        "SystemTime",
        "Instant::now",
        "tokio",
        "reqwest",
    ];
    let src = workspace().join("crates/memtape-core/src");
    let mut found = Vec::new();
    for file in rust_files(&src) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for word in FORBIDDEN {
                if code.contains(word) {
                    found.push(format!("{}:{}: {word}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "memtape-core does no IO and reads no clock:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_source_file_says_what_it_is_for() {
    let mut missing = Vec::new();
    for dir in source_dirs() {
        let tests = dir.with_file_name("tests");
        let mut files = rust_files(&dir);
        if tests.is_dir() {
            files.extend(rust_files(&tests));
        }
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            if !text.trim_start().starts_with("//!") {
                missing.push(file.display().to_string());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "these files do not open with a //! line:\n{}",
        missing.join("\n")
    );
}

#[test]
fn architecture_code_map_names_every_source_file() {
    let architecture = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    let start = architecture.find("## Code map").unwrap();
    let end = architecture[start + 1..]
        .find("\n## ")
        .map_or(architecture.len(), |i| start + 1 + i);
    let map = &architecture[start..end];
    let mut missing = Vec::new();
    for dir in source_dirs() {
        for file in rust_files(&dir) {
            let relative = file
                .strip_prefix(&dir)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            // A folder's mod.rs is named by the folder.
            let named = if name == "mod.rs" {
                let folder = relative.trim_end_matches("mod.rs");
                map.contains(&format!("`{folder}`"))
            } else {
                map.contains(&format!("`{relative}`"))
                    || map.contains(&format!("{relative}`"))
                    || map.contains(&format!("`{name}`"))
            };
            if !named {
                missing.push(
                    file.strip_prefix(workspace())
                        .unwrap()
                        .display()
                        .to_string(),
                );
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map does not name:\n{}",
        missing.join("\n")
    );
}
