//! PostgreSQL on a full disk: a private cluster on a small tmpfs, filled up; an append then
//! fails with the server's own words (no space), stores nothing of its batch, loses nothing
//! acknowledged before, and once space is freed the same store appends again. The cluster
//! is started by `scripts/postgres` and the disk is mounted for the test (root is needed,
//! which this project's machines and CI have; where mounting is not permitted the test says
//! so and stops).

#![allow(clippy::unwrap_used)] // Test helpers panic on failure by design.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use chrono::Utc;
use memtape_core::{Filter, Message, NewEntry, Payload, Scope};
use memtape_postgres::PostgresStore;
use memtape_store::Store;

/// A tmpfs mounted on a temporary folder, holding a PostgreSQL cluster started by
/// `scripts/postgres`; the cluster is stopped and the disk unmounted when dropped.
struct Cluster {
    mount: PathBuf,
    dir: PathBuf,
    url: String,
    _tmp: tempfile::TempDir,
}

impl Cluster {
    fn start(size: &str) -> Option<Cluster> {
        let tmp = tempfile::tempdir().unwrap();
        let mount = tmp.path().join("disk");
        std::fs::create_dir(&mount).unwrap();
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0777"),
                "tmpfs",
            ])
            .arg(&mount)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            return None;
        }
        let dir = mount.join("pg");
        let out = Command::new(script())
            .args(["start"])
            .arg(&dir)
            .env("MEMTAPE_PG_FSYNC", "off")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let url = stdout
            .lines()
            .find_map(|l| l.strip_prefix("MEMTAPE_TEST_DATABASE_URL="))
            .map(str::to_owned);
        let cluster = Cluster {
            mount,
            dir,
            url: url.clone().unwrap_or_default(),
            _tmp: tmp,
        };
        assert!(
            out.status.success() && url.is_some(),
            "scripts/postgres start failed: {}{}",
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        Some(cluster)
    }

    /// Fills the disk: a ballast file takes every byte left.
    fn fill(&self) {
        let mut ballast = std::fs::File::create(self.ballast()).unwrap();
        let chunk = vec![7u8; 64 * 1024];
        while ballast.write_all(&chunk).is_ok() {}
        while ballast.write_all(&[7]).is_ok() {}
        let _ = ballast.sync_all();
    }

    fn free(&self) {
        std::fs::remove_file(self.ballast()).unwrap();
    }

    fn ballast(&self) -> PathBuf {
        self.mount.join("ballast")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(&self.dir).status();
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/postgres")
}

fn batch(scope: &Scope, tag: &str, n: usize) -> Vec<NewEntry> {
    // About 1 KiB each, so a batch needs pages the table does not have yet.
    let filler = "lorem ipsum dolor sit amet ".repeat(40);
    (0..n)
        .map(|i| {
            NewEntry::new(
                scope.clone(),
                Payload::Message(Message::user(format!("{tag} {i} {filler}"))),
                Utc::now(),
            )
        })
        .collect()
}

/// The error and every cause under it, as one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[test]
fn a_full_disk_fails_the_append_loses_nothing_and_recovers_when_freed() {
    let Some(cluster) = Cluster::start("160m") else {
        eprintln!("skipping: mounting a tmpfs is not permitted here (the test needs root)");
        return;
    };
    let store = PostgresStore::connect(&cluster.url).unwrap();
    let scope = Scope::agent("acme", "bot")
        .unwrap()
        .with_session("s")
        .unwrap();
    let before = store.append(batch(&scope, "before", 200)).unwrap();
    assert_eq!(before.len(), 200);

    cluster.fill();
    let refused = store.append(batch(&scope, "full", 4000)).unwrap_err();
    let said = chain(&refused);
    assert!(
        said.contains("No space left on device") || said.contains("could not extend"),
        "the error should carry the server's reason: {said}"
    );
    // Nothing of the refused batch, and everything acknowledged before it.
    let all = store.scan(&scope, &Filter::default()).unwrap();
    assert_eq!(all.len(), 200, "the refused batch left entries behind");
    assert_eq!(
        all.iter().map(|e| e.id).collect::<Vec<_>>(),
        before.iter().map(|e| e.id).collect::<Vec<_>>()
    );
    // Reads keep working on a full disk.
    assert_eq!(
        store
            .entries_after(memtape_core::EntryId(0), 10)
            .unwrap()
            .len(),
        10
    );

    cluster.free();
    let after = store.append(batch(&scope, "after", 4000)).unwrap();
    assert_eq!(after.len(), 4000);
    assert!(after[0].id > before[199].id);
    let all = store.scan(&scope, &Filter::default()).unwrap();
    assert_eq!(all.len(), 4200);
    assert!(all.iter().all(|e| {
        let text = e.payload.search_text().unwrap();
        !text.starts_with("full ")
    }));
    drop(store);
}
