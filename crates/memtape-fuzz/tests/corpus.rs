//! Replays every saved fuzz input as an ordinary test: the hand-written seeds
//! (`fuzz/seeds/<target>/`) and the corpus the fuzzer kept (`fuzz/corpus/<target>/`,
//! minimized before it is committed). An input that once broke an invariant stays here.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut files = Vec::new();
    for folder in ["seeds", "corpus"] {
        let dir = root.join(folder).join(target);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            files.extend(entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()));
        }
    }
    files.sort();
    files
}

#[test]
fn every_saved_input_keeps_every_invariant() {
    let mut total = 0;
    for (name, target) in memtape_fuzz::TARGETS {
        let files = inputs(name);
        assert!(!files.is_empty(), "no seeds for the fuzz target {name}");
        for file in &files {
            // A fuzzer running beside the test may drop a corpus file it has reduced.
            let data = match std::fs::read(file) {
                Ok(data) => data,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => panic!("{}: {e}", file.display()),
            };
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(
                outcome.is_ok(),
                "{name}: {} breaks an invariant",
                file.display()
            );
        }
        total += files.len();
    }
    eprintln!("{total} saved fuzz inputs replayed");
}

/// Every target the replay knows is one cargo-fuzz runs (a `[[bin]]` of `fuzz/Cargo.toml`
/// with its wrapper in `fuzz/fuzz_targets/`), and the other way round: a target added to
/// one list and not the other would either never be fuzzed or never be replayed.
#[test]
fn every_target_is_fuzzed_and_replayed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let mut bins: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.trim().strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|name| *name != "memtape-fuzz-targets")
        .collect();
    bins.sort_unstable();
    let mut names: Vec<&str> = memtape_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    assert_eq!(
        bins, names,
        "fuzz/Cargo.toml's targets differ from memtape_fuzz::TARGETS"
    );
    for name in names {
        let wrapper = root.join("fuzz_targets").join(format!("{name}.rs"));
        let source = std::fs::read_to_string(&wrapper)
            .unwrap_or_else(|e| panic!("{}: {e}", wrapper.display()));
        assert!(
            source.contains(&format!("memtape_fuzz::{name}(data)")),
            "{} does not call memtape_fuzz::{name}",
            wrapper.display()
        );
    }
}
