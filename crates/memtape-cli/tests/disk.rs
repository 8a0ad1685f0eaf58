//! A full or a read-only disk: read commands (sessions, history, entries, thread, export)
//! keep working, so a backup can always be taken, and writes fail with an error naming the
//! cause; a consolidation on a read-only disk, or one whose disk fills while its model
//! thinks, fails and changes nothing. The disk is a real tmpfs mounted for the test (the
//! test needs root, which this project's machines and CI have; where mounting is not
//! permitted it says so and stops).
use crate::common;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::model::wait_for_call;
use memtape::Store;
use memtape_scripted::{Answer, Scripted, tool_call};
use serde_json::{Value, json};

/// A small tmpfs mounted on a temporary folder, unmounted when dropped.
struct Disk {
    mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl Disk {
    fn mount(size: &str) -> Option<Disk> {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mount)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Disk { mount, _dir: dir })
    }

    fn remount_read_only(&self) {
        let status = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.mount)
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn fill(&self) {
        let mut filler = std::fs::File::create(self.mount.join("filler")).unwrap();
        let chunk = vec![7u8; 64 * 1024];
        while filler.write_all(&chunk).is_ok() {}
        // Whatever is left is smaller than a chunk: take it byte by byte.
        while filler.write_all(&[7]).is_ok() {}
        let _ = filler.sync_all();
    }

    /// Fills the disk, then gives `room` bytes back.
    fn fill_leaving(&self, room: u64) {
        self.fill();
        let filler = std::fs::OpenOptions::new()
            .write(true)
            .open(self.mount.join("filler"))
            .unwrap();
        let len = filler.metadata().unwrap().len();
        filler.set_len(len - room).unwrap();
    }

    /// Frees what [`Disk::fill`] took.
    fn free(&self) {
        std::fs::remove_file(self.mount.join("filler")).unwrap();
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

fn command(data: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_memtape"));
    command
        .envs(common::no_model_settings())
        .env_remove("MEMTAPE_MODEL")
        .env("MEMTAPE_DATA_DIR", data)
        .env("HOME", data.parent().unwrap())
        .args(args);
    command
}

fn memtape(data: &Path, args: &[&str]) -> Output {
    command(data, args).output().unwrap()
}

fn ok(data: &Path, args: &[&str]) -> String {
    let out = memtape(data, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every read a user needs to see their data or take a backup.
fn reads_work(data: &Path) {
    assert!(ok(data, &["sessions"]).contains("s1"));
    assert!(ok(data, &["history", "s1"]).contains("a kayak on the lake"));
    assert!(ok(data, &["entries", "s1"]).contains("the second message"));
    assert!(ok(data, &["thread", "2"]).contains("the second message"));
    let backup = ok(data, &["export", "--format", "memtape"]);
    assert_eq!(backup.lines().count(), 4, "{backup}");
    assert_eq!(ok(data, &["export", "--all"]), backup);
    assert!(ok(data, &["memory", "show"]).contains("memories/notes.md"));
    assert!(ok(data, &["files", "read", "/memories/notes.md"]).contains("likes green tea"));
    assert!(ok(data, &["files", "view", "/memories"]).contains("notes.md"));
}

#[test]
fn a_full_or_read_only_disk_blocks_reads() {
    let Some(disk) = Disk::mount("4m") else {
        eprintln!("skipped: this machine does not allow mounting a tmpfs (the test needs root)");
        return;
    };
    let data = disk.mount.join("data");
    ok(&data, &["init"]);
    for text in ["a kayak on the lake", "the second message", "and a third"] {
        ok(
            &data,
            &[
                "append",
                "s1",
                "--role",
                "user",
                "--no-wal",
                "--content",
                text,
            ],
        );
    }

    ok(
        &data,
        &["files", "create", "/memories/notes.md", "likes green tea"],
    );

    disk.fill();
    reads_work(&data);
    append_fails_naming(&data, "the disk is full");

    disk.remount_read_only();
    reads_work(&data);
    append_fails_naming(&data, "read-only");
}

/// An append fails, and its error names `cause`.
fn append_fails_naming(data: &Path, cause: &str) {
    let args = [
        "append",
        "s1",
        "--role",
        "user",
        "--no-wal",
        "--content",
        "no room",
    ];
    let out = memtape(data, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(cause), "{err}");
}

/// A store on `disk` (in its folder `name`) with a MEMORY.md and four messages in session
/// s1, whose memtape.toml points at `server`.
fn lifecycle_store(disk: &Disk, name: &str, server: &Scripted) -> PathBuf {
    let data = disk.mount.join(name);
    ok(&data, &["init"]);
    ok(
        &data,
        &["memory", "save", "# Memory\n- Ada lives in Oslo\n"],
    );
    for i in 0..4 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let text = format!("message {i} about the kayak trip");
        ok(
            &data,
            &[
                "append",
                "s1",
                "--role",
                role,
                "--no-wal",
                "--content",
                &text,
            ],
        );
    }
    let toml = format!(
        "[llm]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted\"\ntimeout = 10\nmax_retries = 0\n",
        server.base
    );
    std::fs::write(data.join("memtape.toml"), toml).unwrap();
    data
}

/// The model's save_memory call with `memory` as the new MEMORY.md.
fn save_memory(memory: &str) -> Answer {
    tool_call(
        "save_memory",
        json!({"history_entry": "[2026-03-10 14:30] Planned a kayak trip.", "memory_update": memory}),
    )
}

/// Session s1's consolidation pointer (`last_consolidated` of `memtape sessions --json`).
fn pointer(data: &Path) -> u64 {
    let sessions: Value = serde_json::from_str(&ok(data, &["sessions", "--json"])).unwrap();
    sessions[0]["last_consolidated"].as_u64().unwrap()
}

/// How many messages `memtape history s1` still shows (those after the pointer).
fn history_len(data: &Path) -> usize {
    let history: Value = serde_json::from_str(&ok(data, &["history", "s1", "--json"])).unwrap();
    history.as_array().unwrap().len()
}

/// The memory files as `memtape memory show --json` has them.
fn memory_files(data: &Path) -> Value {
    let memory: Value = serde_json::from_str(&ok(data, &["memory", "show", "--json"])).unwrap();
    memory["files"].clone()
}

/// The consolidation commands on a read-only disk, on three stores: one as the last write
/// left it (no `memtape.db-wal`/`-shm`), one a read command ran on since (they are left
/// behind), one that also took the consolidation lock once (its `locks/` file is there).
/// Each command fails before the model is called, with an error naming the read-only
/// filesystem and the store's folder (the first store with the store's own diagnosis),
/// `/new` too (the session is not cleared); each store then reads as before (backup,
/// pointer, history, memory) and passes SQLite's integrity check. Opened read-only (how
/// every reading command opens it), the store refuses the cross-process consolidation lock
/// by name at once, waiting or not, and a consolidation through it fails the same way
/// without calling the model.
#[test]
fn a_consolidation_on_a_read_only_disk_fails_naming_it_and_changes_nothing() {
    let Some(disk) = Disk::mount("8m") else {
        eprintln!("skipped: this machine does not allow mounting a tmpfs (the test needs root)");
        return;
    };
    let server = Scripted::start(vec![save_memory("# Memory\n- Plans a kayak trip\n")]);
    let clean = lifecycle_store(&disk, "clean", &server);
    let read = lifecycle_store(&disk, "read", &server);
    let used = lifecycle_store(&disk, "used", &server);
    // Four messages are inside the window: this takes the lock and finds nothing to do.
    let done: Value = serde_json::from_str(&ok(&used, &["memory", "consolidate", "s1"])).unwrap();
    assert_eq!(done["through"], Value::Null);
    assert!(!read.join("locks").exists());
    assert_eq!(std::fs::read_dir(used.join("locks")).unwrap().count(), 1);
    let stores = [&clean, &read, &used];
    let before: Vec<(String, Value)> = stores
        .iter()
        .map(|d| (ok(d, &["export", "--all"]), memory_files(d)))
        .collect();
    // A command that opens the store for writing (and writes nothing) removes what the
    // reads left.
    ok(&clean, &["init"]);
    assert!(!clean.join("memtape.db-shm").exists());
    assert!(read.join("memtape.db-shm").exists());
    disk.remount_read_only();

    for data in stores {
        for args in [
            &["memory", "consolidate", "s1", "--all"][..],
            &["memory", "consolidate", "s1"],
            &["new", "s1"],
        ] {
            let out = memtape(data, args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success(),
                "{args:?} succeeded on a read-only disk"
            );
            assert!(out.stdout.is_empty(), "{args:?}");
            assert!(err.to_lowercase().contains("read-only"), "{args:?}: {err}");
            assert!(err.contains(&data.display().to_string()), "{args:?}: {err}");
            if data == &clean {
                assert!(
                    err.contains("the filesystem is read-only") && err.contains("reads still work"),
                    "{args:?}: {err}"
                );
            }
        }
    }
    assert_eq!(server.requests(), 0, "the model was called");
    for (data, (backup, files)) in stores.into_iter().zip(&before) {
        assert_eq!(&ok(data, &["export", "--all"]), backup);
        assert_eq!(pointer(data), 0);
        assert_eq!(history_len(data), 4);
        assert_eq!(&memory_files(data), files);
    }

    let store = memtape::SqliteStore::open_read_only(&used).unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
    for wait in [memtape::Wait::Try, memtape::Wait::Block] {
        let err = store
            .lock("default", "consolidation", wait)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("is open read-only"), "{wait:?}: {err}");
    }
    let engine = memtape::Engine::open_read_only(&used).unwrap();
    let session = memtape::Scope::agent("default", "default")
        .unwrap()
        .with_session("s1")
        .unwrap();
    let llm = memtape_llm::OpenAi::new(&server.base, "scripted").unwrap();
    let options = memtape::ConsolidateOptions {
        archive_all: true,
        ..memtape::ConsolidateOptions::default()
    };
    let err = engine
        .consolidate(&session, &llm, options)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("is open read-only"), "{err}");
    assert!(engine.try_lock_consolidation(&session).is_err());
    assert_eq!(server.requests(), 0, "the model was called");
    drop(engine);
    assert_eq!(ok(&used, &["export", "--all"]), before[2].0);
}

/// `memtape memory consolidate` on a read-only disk gets the store's own diagnosis, as
/// `memtape append` does ("cannot write the store at …: the filesystem is read-only …;
/// reads still work, so `memtape export` can take a backup"), with the system's words once,
/// also after a read command left `memtape.db-wal` and `memtape.db-shm` behind (a read-only
/// connection cannot remove them). With those files SQLite used to open the store "for
/// writing" on the read-only disk without complaint, falling back to reading, and the
/// consolidation failed later on creating its lock folder with the raw error printed twice.
#[test]
fn a_consolidation_on_a_read_only_disk_gets_the_stores_diagnosis() {
    let Some(disk) = Disk::mount("8m") else {
        eprintln!("skipped: this machine does not allow mounting a tmpfs (the test needs root)");
        return;
    };
    let server = Scripted::start(Vec::new());
    let data = lifecycle_store(&disk, "data", &server);
    ok(&data, &["sessions"]);
    assert!(data.join("memtape.db-shm").exists());
    disk.remount_read_only();
    let out = memtape(&data, &["memory", "consolidate", "s1", "--all"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("the filesystem is read-only"), "{err}");
    assert!(err.contains("reads still work"), "{err}");
    assert!(err.matches("os error 30").count() <= 1, "{err}");
}

/// A MEMORY.md of about 240 KB (a memory file holds at most 256 KiB): a rewrite that needs
/// far more room than a model call's record.
fn big_memory() -> String {
    let mut text = String::from("# Memory\n- Ada lives in Oslo\n");
    let mut i = 0;
    while text.len() < 240_000 {
        text.push_str(&format!(
            "- Fact {i}: the kayak trip needs item number {i} packed in the blue dry bag\n"
        ));
        i += 1;
    }
    text
}

/// The disk fills while the model thinks: the consolidation has opened the store, taken its
/// lock and sent its request; then the disk is filled but for 128 KiB, room for the model
/// call's record (`llm.call`, which is written first) but not for the ~240 KB MEMORY.md
/// version, HISTORY.md entry and pointer move that `apply_edits` writes in one transaction.
/// The command fails naming the full disk; the pointer, the history, MEMORY.md and
/// HISTORY.md are as before, and the only new entry on the tape is the model call. After
/// freeing space, a rerun consolidates and moves the pointer.
#[test]
fn a_disk_that_fills_while_the_model_thinks_fails_the_consolidation_and_changes_nothing() {
    let Some(disk) = Disk::mount("8m") else {
        eprintln!("skipped: this machine does not allow mounting a tmpfs (the test needs root)");
        return;
    };
    let big = big_memory();
    let server = Scripted::start(vec![
        Answer::Delayed(Duration::from_secs(2), Box::new(save_memory(&big))),
        save_memory(&big),
    ]);
    let data = lifecycle_store(&disk, "data", &server);
    let backup = ok(&data, &["export", "--all"]);
    let files = memory_files(&data);
    assert!(files.get("HISTORY.md").is_none());

    let mut child = command(&data, &["memory", "consolidate", "s1", "--all"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_call(&server, &mut child);
    disk.fill_leaving(128 * 1024);
    assert!(
        child.try_wait().unwrap().is_none(),
        "the model answered before the disk was full"
    );
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it consolidated on a full disk");
    assert!(out.stdout.is_empty());
    assert!(err.contains("full"), "{err}");

    // Nothing of the consolidation landed; the model call before it did.
    assert_eq!(pointer(&data), 0);
    assert_eq!(history_len(&data), 4);
    assert_eq!(memory_files(&data), files);
    let after = ok(&data, &["export", "--all"]);
    let new: Vec<Value> = after
        .strip_prefix(backup.as_str())
        .unwrap_or_else(|| panic!("the tape changed:\n{backup}\n---\n{after}"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(new.len(), 1, "{new:?}");
    assert_eq!(new[0]["payload"]["name"], "llm.call");
    assert_eq!(new[0]["payload"]["data"]["purpose"], "consolidation");

    disk.free();
    assert_eq!(memory_files(&data), files);
    let done: Value =
        serde_json::from_str(&ok(&data, &["memory", "consolidate", "s1", "--all"])).unwrap();
    assert_eq!(done["messages"], 4);
    assert_eq!(done["memory_changed"], true);
    assert_eq!(pointer(&data), done["through"].as_u64().unwrap());
    assert_eq!(history_len(&data), 0);
    let files = memory_files(&data);
    assert_eq!(files["MEMORY.md"]["content"], big.as_str());
    assert!(
        files["HISTORY.md"]["content"]
            .as_str()
            .unwrap()
            .contains("Planned a kayak trip")
    );
    assert_eq!(server.requests(), 2);
}

/// An erasure that the disk stops after its receipt (a full disk, mid-way through its
/// rewrites) fails naming the cause, leaves the erasure under way (no follower passes
/// it), and the next command that opens the store for writing once there is room
/// finishes it: every entry the receipt names is erased, and no file holds a byte of the
/// text.
#[test]
fn an_erasure_the_disk_stops_is_finished_by_the_next_command_once_there_is_room() {
    use crate::erase::{SECRET, holding};
    let Some(disk) = Disk::mount("24m") else {
        eprintln!("skipped: this machine does not allow mounting a tmpfs (the test needs root)");
        return;
    };
    let data = disk.mount.join("data");
    ok(&data, &["init"]);
    let session = memtape::Scope::agent("default", "default")
        .unwrap()
        .with_user("ann")
        .unwrap()
        .with_session("s1")
        .unwrap();
    {
        let store = memtape::SqliteStore::open(&data).unwrap();
        let entries = (0..1500)
            .map(|i| {
                let text = format!("{SECRET} line {i} {}", "lorem ipsum ".repeat(20));
                memtape::NewEntry::new(
                    session.clone(),
                    memtape::Payload::Message(memtape::Message::user(text)),
                    chrono::Utc::now(),
                )
            })
            .collect();
        store.append(entries).unwrap();
    }
    // Room for the receipt's step, not for every step of rewrites.
    disk.fill_leaving(160 * 1024);
    let out = memtape(&data, &["--user", "ann", "erase", "user"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the erasure fit: make the room smaller"
    );
    assert!(err.contains("the disk is full"), "{err}");
    let under_way = {
        let store = memtape::SqliteStore::open_read_only(&data).unwrap();
        let under_way = store.erasures_under_way().unwrap();
        assert_eq!(under_way.len(), 1, "stopped after its receipt: {err}");
        assert!(store.last_id().unwrap() < under_way[0], "followers wait");
        let read = store.scan(&session, &memtape::Filter::default()).unwrap();
        let erased = read.iter().filter(|e| e.erased.is_some()).count();
        assert!(erased < read.len(), "stopped before its last step");
        under_way[0]
    };
    disk.free();
    // Any command that writes finishes it first (a dry run counts what is left: nothing).
    let dry = ok(&data, &["--user", "ann", "erase", "user", "--dry-run"]);
    let dry: Value = serde_json::from_str(&dry).unwrap();
    assert_eq!(dry["entries"], 0, "{dry}");
    let store = memtape::SqliteStore::open_read_only(&data).unwrap();
    assert!(store.erasures_under_way().unwrap().is_empty());
    let read = store.scan(&session, &memtape::Filter::default()).unwrap();
    assert_eq!(read.len(), 1500);
    assert!(
        read.iter()
            .all(|e| e.is_tombstone() && e.erased.unwrap().by == under_way)
    );
    drop(store);
    assert_eq!(holding(&data, SECRET), Vec::<String>::new());
}
