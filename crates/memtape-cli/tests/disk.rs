//! A full or a read-only disk: read commands (sessions, history, entries, thread, export)
//! keep working, so a backup can always be taken, and writes fail with an error naming the
//! cause. The disk is a real tmpfs mounted for the test (the test needs root, which this
//! project's machines and CI have; where mounting is not permitted it says so and stops).
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

fn memtape(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memtape"))
        .env("MEMTAPE_DATA_DIR", data)
        .env("HOME", data.parent().unwrap())
        .args(args)
        .output()
        .unwrap()
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
