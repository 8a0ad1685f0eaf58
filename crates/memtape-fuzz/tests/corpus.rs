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
