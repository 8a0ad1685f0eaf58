//! Crash safety: a child process appends and acknowledges each append on stdout; the
//! parent kills it with SIGKILL at random moments, reopens the store and checks that every
//! acknowledged append is there, in order, that batches are all-or-nothing, and that the
//! database is sound. The child is this test binary re-run on the `crash_child` entry.
//!
//! The suite runs 30 trials; `MEMTAPE_CRASH_TRIALS=1000` runs more (`cargo test -p
//! memtape-store --test crash -- --nocapture` prints the totals).

#![allow(clippy::unwrap_used)] // Test helpers panic on failure by design.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chrono::Utc;
use memtape_core::{Filter, Message, NewEntry, Payload, Scope};
use memtape_store::{SqliteStore, Store};

const DIR_VAR: &str = "MEMTAPE_CRASH_DIR";
const TRIAL_VAR: &str = "MEMTAPE_CRASH_TRIAL";
const TRIALS_VAR: &str = "MEMTAPE_CRASH_TRIALS";
const DEFAULT_TRIALS: u32 = 30;

/// How many kills to run: `MEMTAPE_CRASH_TRIALS`, or 30.
fn trials() -> u32 {
    match std::env::var(TRIALS_VAR) {
        Ok(n) => n
            .parse()
            .unwrap_or_else(|_| panic!("{TRIALS_VAR}={n:?} is not a whole number")),
        Err(_) => DEFAULT_TRIALS,
    }
}

fn scope() -> Scope {
    Scope::agent("t", "a")
        .unwrap()
        .with_session("crash")
        .unwrap()
}

/// Not a test: the child process's body, run only by `sigkill_at_random_moments`.
#[test]
#[ignore = "the child process of the crash test; run by sigkill_at_random_moments"]
fn crash_child() {
    let dir = std::env::var(DIR_VAR).expect("run by the crash test");
    let trial: u32 = std::env::var(TRIAL_VAR).unwrap().parse().unwrap();
    let store = SqliteStore::create(std::path::Path::new(&dir)).unwrap();
    let mut out = std::io::stdout().lock();
    for batch in 0u32.. {
        let size = batch % 3 + 1;
        let entries = (0..size)
            .map(|j| {
                let text = format!("t{trial}-b{batch}-{j}/{size}");
                NewEntry::new(scope(), Payload::Message(Message::user(text)), Utc::now())
            })
            .collect();
        store.append(entries).unwrap();
        writeln!(out, "ACK t{trial}-b{batch}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn sigkill_at_random_moments() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = fastrand::Rng::with_seed(0x6d74_6170);
    let mut total_acked = 0;
    let (trials, mut torn_tails) = (trials(), 0);
    for trial in 0..trials {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_VAR, dir.path())
            .env(TRIAL_VAR, trial.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| l.split_once("ACK ").map(|(_, ack)| ack.to_owned()))
                .collect::<Vec<_>>()
        });
        let wait = Duration::from_millis(rng.u64(5..120));
        let start = Instant::now();
        while start.elapsed() < wait {
            std::thread::sleep(Duration::from_millis(1));
        }
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        let acked = reader.join().unwrap();
        total_acked += acked.len();
        let mut wal = dir.path().join(SqliteStore::FILE_NAME).into_os_string();
        wal.push("-wal");
        torn_tails += usize::from(std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0));

        let store = SqliteStore::open(dir.path()).unwrap();
        assert_eq!(store.integrity_check().unwrap(), "ok", "trial {trial}");
        let texts: Vec<String> = store
            .scan(&scope(), &Filter::default())
            .unwrap()
            .iter()
            .map(|e| e.message().unwrap().content_text().into_owned())
            .filter(|t| t.starts_with(&format!("t{trial}-")))
            .collect();
        // Stored: whole batches 0, 1, 2, ... in order, each entry of a batch present.
        let mut expected = Vec::new();
        let mut batch = 0u32;
        while expected.len() < texts.len() {
            let size = batch % 3 + 1;
            expected.extend((0..size).map(|j| format!("t{trial}-b{batch}-{j}/{size}")));
            batch += 1;
        }
        assert_eq!(
            texts, expected,
            "trial {trial}: entries out of order or a batch torn"
        );
        // Every acknowledged batch is stored (libtest may print its own text before the
        // first acknowledgement on the same line, hence split_once above).
        assert!(
            acked.len() as u32 <= batch,
            "trial {trial}: acked {} batches, stored {batch}",
            acked.len()
        );
        for (i, ack) in acked.iter().enumerate() {
            assert_eq!(ack, &format!("t{trial}-b{i}"));
        }
    }
    eprintln!(
        "{trials} kills ({torn_tails} left a write-ahead log to recover), {total_acked} acknowledged batches checked, all stored, no batch torn"
    );
    assert!(
        total_acked > 0,
        "no append was ever acknowledged: the child never ran"
    );
}
