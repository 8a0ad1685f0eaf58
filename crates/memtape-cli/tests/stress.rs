//! Several `memtape` processes on one data directory, as a CLI beside a server would be:
//! writers append and search for what they appended while another process rebuilds the
//! index. Every command succeeds and every acknowledged append is found, by its writer at
//! once and by anyone afterwards. The figures print with `--nocapture`.
use std::path::Path;
use std::process::{Command, Output};

const WRITERS: usize = 4;
const ROUNDS: usize = 8;
const REINDEXES: usize = 4;

fn memtape(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memtape"))
        .env("MEMTAPE_DATA_DIR", data)
        .env("MEMTAPE_MODEL", "none")
        .args(args)
        .output()
        .unwrap()
}

/// Runs `args`; a failure is recorded with its stderr.
fn run(data: &Path, args: &[&str], failures: &mut Vec<String>) -> Option<String> {
    let out = memtape(data, args);
    if out.status.success() {
        Some(String::from_utf8(out.stdout).unwrap())
    } else {
        failures.push(format!(
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
        None
    }
}

#[test]
fn processes_appending_searching_and_reindexing_on_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    assert!(memtape(&data, &["init"]).status.success());
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let data = data.clone();
            std::thread::spawn(move || {
                let (mut failures, mut searches) = (Vec::new(), 0);
                for round in 0..ROUNDS {
                    let word = format!("zebra{w}x{round}");
                    let text = format!("note {word} from writer {w}");
                    let args = [
                        "append",
                        "s",
                        "--role",
                        "user",
                        "--no-wal",
                        "--content",
                        &text,
                    ];
                    let session = format!("w{w}");
                    let mut args = args.to_vec();
                    args[1] = &session;
                    if run(&data, &args, &mut failures).is_none() {
                        continue;
                    }
                    searches += 1;
                    let found = run(
                        &data,
                        &["search", &word, "--mode", "bm25", "--json"],
                        &mut failures,
                    );
                    if let Some(found) = found
                        && !found.contains(&word)
                    {
                        failures.push(format!("{word} acknowledged but not found: {found}"));
                    }
                }
                (failures, searches)
            })
        })
        .collect();
    let reindexer = {
        let data = data.clone();
        std::thread::spawn(move || {
            let mut failures = Vec::new();
            for _ in 0..REINDEXES {
                run(&data, &["reindex"], &mut failures);
            }
            failures
        })
    };
    let mut failures = reindexer.join().unwrap();
    let mut searches = 0;
    for w in writers {
        let (f, n) = w.join().unwrap();
        failures.extend(f);
        searches += n;
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // Afterwards every acknowledged append is found by anyone.
    let all = run(
        &data,
        &[
            "search", "note", "--mode", "bm25", "--limit", "100", "--json",
        ],
        &mut failures,
    )
    .unwrap();
    let hits: serde_json::Value = serde_json::from_str(&all).unwrap();
    assert_eq!(hits.as_array().unwrap().len(), WRITERS * ROUNDS, "{all}");
    eprintln!(
        "{WRITERS} writers × {ROUNDS} appends, {searches} searches and {REINDEXES} reindexes side by side: 0 failed, {} entries found afterwards",
        WRITERS * ROUNDS
    );
}
