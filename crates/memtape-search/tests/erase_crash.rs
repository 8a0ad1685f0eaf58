//! Erasure under SIGKILL: a child process erases sessions one after another (the store's
//! steps: the receipt, then the rewrites [`STEP`] entries at a time, then the end; then
//! the index's catch-up that applies the receipt) and acknowledges each on stdout; the
//! parent kills it at a random moment and reopens both files. An erasure killed between
//! its receipt and its end is still under way: no follower of the tape may pass its
//! receipt, and the next opener finishes it. After that, each session is erased wholly
//! (every entry a tombstone of one receipt, which names them all) or not at all, every
//! acknowledged erasure is there, the database is sound, and after a catch-up the index
//! finds nothing erased and everything else. The child is this test binary re-run on the
//! `erase_child` entry.
//!
//! The suite runs 6 trials; `MEMTAPE_CRASH_TRIALS=100` runs more (`cargo test -p
//! memtape-search --test erase_crash -- --nocapture` prints the totals).

#![allow(clippy::unwrap_used)] // Test helpers panic on failure by design.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chrono::Utc;
use memtape_core::erasure::Selector;
use memtape_core::events::BuiltinEvent;
use memtape_core::{Filter, Message, NewEntry, Payload, Scope};
use memtape_search::{Index, IndexConfig, Mode, SearchFilter, SearchRequest};
use memtape_store::erase::{STEP, StepStore};
use memtape_store::{EraseMode, EraseRequest, EraseTarget, SqliteStore, Store};

const DIR_VAR: &str = "MEMTAPE_ERASE_CRASH_DIR";
const TRIALS_VAR: &str = "MEMTAPE_CRASH_TRIALS";
const SESSIONS: usize = 10;
/// Enough for an erasure of three steps, so kills land between them.
const MESSAGES: usize = 2 * STEP + 100;

fn trials() -> u32 {
    match std::env::var(TRIALS_VAR) {
        Ok(n) => n
            .parse()
            .unwrap_or_else(|_| panic!("{TRIALS_VAR}={n:?} is not a whole number")),
        Err(_) => 6,
    }
}

fn session(k: usize) -> Scope {
    Scope::agent("acme", "bot")
        .unwrap()
        .with_user("ann")
        .unwrap()
        .with_session(format!("s{k}"))
        .unwrap()
}

/// The word only session `k` holds.
fn word(k: usize) -> String {
    format!("zq{}x", "abcdefghijklmnopqrstuvwx".chars().nth(k).unwrap())
}

fn open_index(dir: &Path) -> Index {
    Index::open(&dir.join("index"), None, IndexConfig::plain()).unwrap()
}

/// Not a test: the child process's body, run only by `sigkill_while_erasing`.
#[test]
#[ignore = "the child process of the erasure crash test; run by sigkill_while_erasing"]
fn erase_child() {
    let dir = std::env::var(DIR_VAR).expect("run by the crash test");
    let dir = Path::new(&dir);
    let store = SqliteStore::open(&dir.join("tape")).unwrap();
    let index = open_index(dir);
    let mut out = std::io::stdout().lock();
    for k in 0..SESSIONS {
        store
            .erase(&EraseRequest {
                target: EraseTarget::Within(session(k)),
                mode: EraseMode::Whole,
                receipt_scope: session(k),
                selector: Selector::Session {
                    session: format!("s{k}"),
                },
                by: "cli".into(),
                reason: String::new(),
                at: Utc::now(),
                dry_run: false,
            })
            .unwrap();
        index.catch_up(&store).unwrap();
        writeln!(out, "ACK s{k}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn sigkill_while_erasing() {
    let exe = std::env::current_exe().unwrap();
    let mut rng = fastrand::Rng::with_seed(0x6572_6173);
    let (trials, mut erased_total, mut acked_total, mut finished_total) = (trials(), 0, 0, 0);
    for trial in 0..trials {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
            for k in 0..SESSIONS {
                let entries = (0..MESSAGES)
                    .map(|i| {
                        let text = format!("{} message {i} {}", word(k), "lorem ".repeat(i % 30));
                        NewEntry::new(
                            session(k),
                            Payload::Message(Message::user(text)),
                            Utc::now(),
                        )
                    })
                    .collect();
                store.append(entries).unwrap();
            }
            open_index(dir.path()).catch_up(&store).unwrap();
        }
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "erase_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_VAR, dir.path())
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
        let wait = Duration::from_millis(rng.u64(20..400));
        let start = Instant::now();
        while start.elapsed() < wait {
            std::thread::sleep(Duration::from_millis(1));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let acked = reader.join().unwrap();
        acked_total += acked.len();

        let store = SqliteStore::open(&dir.path().join("tape")).unwrap();
        assert_eq!(store.integrity_check().unwrap(), "ok", "trial {trial}");
        // An erasure the kill left under way holds followers before its receipt until it
        // is finished; then they go on.
        let pending = store.pending_erasures().unwrap();
        assert!(pending.len() <= 1, "trial {trial}: one erasure at a time");
        if let Some(p) = pending.first() {
            assert!(store.last_id().unwrap() < p.receipt, "trial {trial}");
            let after = store.entries_after(memtape_core::EntryId(p.receipt.0 - 1), 10);
            assert!(
                after.unwrap().is_empty(),
                "trial {trial}: a follower passed it"
            );
        }
        let finished = store.finish_erasures().unwrap();
        assert_eq!(finished.len(), pending.len(), "trial {trial}");
        assert!(
            store.pending_erasures().unwrap().is_empty(),
            "trial {trial}"
        );
        finished_total += finished.len();
        let mut erased = Vec::new();
        for k in 0..SESSIONS {
            let entries = store.scan(&session(k), &Filter::default()).unwrap();
            let messages: Vec<_> = entries.iter().filter(|e| e.message().is_some()).collect();
            assert_eq!(
                messages.len(),
                MESSAGES,
                "trial {trial} s{k}: no entry goes"
            );
            let receipts: Vec<_> = entries
                .iter()
                .filter_map(|e| match BuiltinEvent::from_payload(&e.payload) {
                    Ok(Some(BuiltinEvent::Erased(r))) => Some((e.id, r)),
                    _ => None,
                })
                .collect();
            let tombstones = messages.iter().filter(|e| e.is_tombstone()).count();
            match receipts.as_slice() {
                [] => assert_eq!(
                    tombstones, 0,
                    "trial {trial} s{k}: erased without a receipt"
                ),
                [(id, receipt)] => {
                    assert_eq!(tombstones, MESSAGES, "trial {trial} s{k}: a torn erasure");
                    assert!(messages.iter().all(|e| e.erased.unwrap().by == *id));
                    assert_eq!(receipt.entries, MESSAGES as u64);
                    let named: Vec<_> = receipt.each_id().collect();
                    assert_eq!(named, messages.iter().map(|e| e.id).collect::<Vec<_>>());
                    erased.push(k);
                }
                more => panic!("trial {trial} s{k}: {} receipts", more.len()),
            }
        }
        // Sessions are erased in order, and every acknowledged one is.
        assert_eq!(
            erased,
            (0..erased.len()).collect::<Vec<_>>(),
            "trial {trial}"
        );
        assert!(
            acked.len() <= erased.len(),
            "trial {trial}: acked {acked:?}, erased {erased:?}"
        );
        erased_total += erased.len();
        // The index, caught up after the crash, finds none of the erased and all the rest.
        let index = open_index(dir.path());
        index.catch_up(&store).unwrap();
        for k in 0..SESSIONS {
            let hits = index
                .search(&SearchRequest::new(word(k), SearchFilter::tenant("acme")).mode(Mode::Bm25))
                .unwrap();
            assert_eq!(
                hits.is_empty(),
                erased.contains(&k),
                "trial {trial}: s{k} has {} hits (erased: {})",
                hits.len(),
                erased.contains(&k)
            );
        }
    }
    eprintln!(
        "{trials} kills, {acked_total} acknowledged erasures, {erased_total} sessions erased \
         ({finished_total} of them finished after the kill), none torn, the index consistent after each"
    );
    assert!(
        acked_total > 0,
        "no erasure was ever acknowledged: the child never ran"
    );
}
