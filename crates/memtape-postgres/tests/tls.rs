//! TLS to PostgreSQL against real servers. A private cluster of this test's own, started by
//! `scripts/postgres` with `MEMTAPE_PG_TLS=only` (a self-signed CA, a certificate for
//! localhost and 127.0.0.1, TCP connections without TLS refused by the server): each mode
//! that should connect appends and reads back through the store, waits for writes and takes
//! a lock (the pool's, the listener's and a lock's connections), encrypted; CAs made here
//! that did not sign the server's certificate are refused under verify-ca, verify-full, and
//! require or prefer given a root file; a host name the certificate does not hold is
//! refused by verify-full and accepted by verify-ca; `sslmode=disable` is refused by the
//! server; the cluster's Unix socket connects unencrypted under any mode, as libpq does. The
//! tests' usual cluster, without TLS (`MEMTAPE_TEST_DATABASE_URL`), is refused under
//! require and the verify modes and reached unencrypted under prefer. An unknown mode and
//! a missing root file are errors naming them.
//!
//! Like the other tests of this crate, these need PostgreSQL's server (`scripts/postgres`
//! installs it as root when missing) and the usual cluster, and fail, never skip, without
//! them.

#![allow(clippy::unwrap_used)] // Test helpers panic on failure by design.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use chrono::Utc;
use memtape_core::{Filter, Message, NewEntry, Payload, Scope};
use memtape_postgres::PostgresStore;
use memtape_postgres::testing::Scratch;
use memtape_store::{Store, Wait};

/// The TLS-only cluster, stopped and removed when the last test holding it lets go.
struct Cluster {
    dir: String,
    port: u16,
    /// The CA that signed the server's certificate.
    ca: PathBuf,
    /// Another self-signed CA, which signed nothing the server has, under the right CA's
    /// name: its signature does not check out.
    impostor_ca: PathBuf,
    /// A self-signed CA of another name: not the issuer at all.
    other_ca: PathBuf,
    _files: tempfile::TempDir,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/postgres")
}

impl Cluster {
    fn start() -> Self {
        let out = Command::new(script())
            .arg("start")
            .env("MEMTAPE_PG_TLS", "only")
            .env("MEMTAPE_PG_FSYNC", "off")
            .output()
            .expect("scripts/postgres runs");
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "scripts/postgres start (MEMTAPE_PG_TLS=only) failed: {}{said}",
            String::from_utf8_lossy(&out.stderr)
        );
        let var = |name: &str| {
            said.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("scripts/postgres printed no {name}: {said}"))
                .to_owned()
        };
        let url = var("MEMTAPE_TEST_DATABASE_URL");
        let port = url
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split('/').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no port in {url}"));
        let files = tempfile::tempdir().unwrap();
        let impostor_ca = self_signed_ca(files.path(), "impostor", "memtape test CA");
        let other_ca = self_signed_ca(files.path(), "other", "another CA");
        Cluster {
            dir: var("MEMTAPE_PG_DIR"),
            port,
            ca: PathBuf::from(var("MEMTAPE_PG_CA")),
            impostor_ca,
            other_ca,
            _files: files,
        }
    }

    /// The admin address at `host` with these query options.
    fn url(&self, host: &str, options: &str) -> String {
        format!(
            "postgres://postgres@{host}:{}/postgres?{options}",
            self.port
        )
    }
}

/// A new self-signed CA named `cn`, made with openssl in `dir`; returns its certificate.
fn self_signed_ca(dir: &Path, file: &str, cn: &str) -> PathBuf {
    let cert = dir.join(format!("{file}.crt"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-new", "-newkey", "ec", "-nodes", "-days", "1",
        ])
        .args(["-pkeyopt", "ec_paramgen_curve:prime256v1"])
        .arg("-subj")
        .arg(format!("/CN={cn}"))
        .arg("-keyout")
        .arg(dir.join(format!("{file}.key")))
        .arg("-out")
        .arg(&cert)
        .args(["-addext", "basicConstraints=critical,CA:TRUE"])
        .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        .output()
        .expect("openssl runs");
    assert!(made.status.success(), "{made:?}");
    cert
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(&self.dir).status();
    }
}

/// The cluster, started by the first test that needs it while no other holds it.
fn cluster() -> Arc<Cluster> {
    static SHARED: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(c) = shared.upgrade() {
        return c;
    }
    let c = Arc::new(Cluster::start());
    *shared = Arc::downgrade(&c);
    c
}

/// A percent-encoded path for a URL query (the temporary paths hold no `&` or `%`, but
/// encoding them proves the decoding on the way).
fn encoded(path: &Path) -> String {
    path.display().to_string().replace('/', "%2F")
}

fn scope() -> Scope {
    Scope::agent("t", "bot").unwrap().with_session("s").unwrap()
}

/// Appends through `store`, reads it back, waits for writes (the listener's connection)
/// and takes a lock (a connection of its own): every kind of connection the store opens.
fn round_trip(store: &PostgresStore, text: &str) {
    let s = scope();
    store
        .append(vec![NewEntry::new(
            s.clone(),
            Payload::Message(Message::user(text)),
            Utc::now(),
        )])
        .unwrap();
    let entries = store.scan(&s, &Filter::default()).unwrap();
    let m = entries.last().unwrap().payload.as_message().unwrap();
    assert_eq!(m.content.as_ref().unwrap().text(), text);
    store.wait_for_writes(Duration::from_millis(10)).unwrap();
    let lock = store.lock("t", "tls", Wait::Try).unwrap();
    assert!(lock.is_some(), "the lock is free");
}

/// Whether the connection `client` has is encrypted, as the server sees it.
fn encrypted(client: &mut postgres::Client) -> bool {
    client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .unwrap()
        .get(0)
}

#[test]
fn verify_full_with_the_right_ca_stores_and_reads_back() {
    let c = cluster();
    for host in ["127.0.0.1", "localhost"] {
        let db = Scratch::on(&c.url(
            host,
            &format!("sslmode=verify-full&sslrootcert={}", encoded(&c.ca)),
        ));
        let store = PostgresStore::connect(db.url()).unwrap();
        round_trip(&store, &format!("through TLS to {host}"));
        assert!(encrypted(&mut db.client()));
        assert!(
            store.address().ends_with("?sslmode=verify-full"),
            "{}",
            store.address()
        );
    }
}

#[test]
fn verify_ca_and_require_work_and_prefer_encrypts() {
    let c = cluster();
    let ca = encoded(&c.ca);
    for options in [
        format!("sslmode=verify-ca&sslrootcert={ca}"),
        "sslmode=require".to_owned(),
        format!("sslmode=require&sslrootcert={ca}"),
        "sslmode=prefer".to_owned(),
        // No sslmode is prefer, the client's default and libpq's.
        "application_name=memtape-tls-test".to_owned(),
    ] {
        let db = Scratch::on(&c.url("127.0.0.1", &options));
        let store = PostgresStore::connect(db.url()).unwrap();
        round_trip(&store, &options);
        assert!(encrypted(&mut db.client()), "{options}");
    }
}

/// Under verify-ca and verify-full, and under require or prefer given a root file (libpq
/// checks the chain then too), a CA that did not sign the server's certificate is refused:
/// one of another name (not the issuer) and one under the right CA's name with another key
/// (the signature fails).
#[test]
fn a_wrong_ca_is_refused_under_verify_ca_verify_full_and_require_with_a_root() {
    let c = cluster();
    for (ca, why) in [
        (&c.other_ca, "UnknownIssuer"),
        (&c.impostor_ca, "BadSignature"),
    ] {
        for mode in ["verify-ca", "verify-full", "require", "prefer"] {
            let url = c.url(
                "127.0.0.1",
                &format!("sslmode={mode}&sslrootcert={}", encoded(ca)),
            );
            let err = PostgresStore::connect(&url).unwrap_err().to_string();
            assert!(
                err.contains("the server's certificate was refused"),
                "{mode}: {err}"
            );
            assert!(err.contains(&format!("sslmode={mode}")), "{mode}: {err}");
            assert!(
                err.contains(&ca.display().to_string()),
                "names the roots it checked against: {err}"
            );
            assert!(err.contains(why), "{mode}: {err}");
        }
    }
}

#[test]
fn the_platform_roots_do_not_hold_a_self_signed_ca() {
    let c = cluster();
    for mode in ["verify-ca", "verify-full"] {
        let err = PostgresStore::connect(&c.url("127.0.0.1", &format!("sslmode={mode}")))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("the server's certificate was refused")
                && err.contains("the platform's root certificates"),
            "{mode}: {err}"
        );
    }
}

#[test]
fn a_host_name_the_certificate_does_not_hold_fails_verify_full_only() {
    let c = cluster();
    // TCP goes to hostaddr; the certificate is checked against host, a name it lacks.
    let kv = |mode: &str, db: &str| {
        format!(
            "host=not-in-the-certificate.invalid hostaddr=127.0.0.1 port={} user=postgres \
             dbname={db} sslmode={mode} sslrootcert='{}'",
            c.port,
            c.ca.display()
        )
    };
    let db = Scratch::on(&c.url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={}", encoded(&c.ca)),
    ));
    let err = PostgresStore::connect(&kv("verify-full", db.name()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("the server's certificate was refused") && err.contains("not valid for name"),
        "{err}"
    );
    assert!(
        err.contains("postgres://postgres@not-in-the-certificate.invalid:"),
        "{err}"
    );
    let store = PostgresStore::connect(&kv("verify-ca", db.name())).unwrap();
    round_trip(&store, "the chain is checked, the name is not");
    // And the same name with the wrong CA is refused under verify-ca too.
    let wrong = kv("verify-ca", db.name()).replace(
        &c.ca.display().to_string(),
        &c.other_ca.display().to_string(),
    );
    let err = PostgresStore::connect(&wrong).unwrap_err().to_string();
    assert!(err.contains("UnknownIssuer"), "{err}");
}

/// `err` and its causes, as the CLI prints them.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

/// Against a server without TLS (the tests' usual cluster), require and the verify modes
/// are refused, never quietly unencrypted; prefer, the default, connects without TLS.
#[test]
fn a_server_without_tls_is_refused_under_require_and_the_verify_modes() {
    let c = cluster();
    let plain = memtape_postgres::testing::admin_url();
    let with = |options: &str| {
        format!(
            "{plain}{}{options}",
            if plain.contains('?') { '&' } else { '?' }
        )
    };
    for options in [
        "sslmode=require".to_owned(),
        format!("sslmode=verify-ca&sslrootcert={}", encoded(&c.ca)),
        format!("sslmode=verify-full&sslrootcert={}", encoded(&c.ca)),
    ] {
        let err = PostgresStore::connect(&with(&options)).unwrap_err();
        let text = chain(&err);
        assert!(
            text.contains("server does not support TLS"),
            "{options}: {text}"
        );
    }
    let db = Scratch::on(&with("sslmode=prefer"));
    let store = PostgresStore::connect(db.url()).unwrap();
    round_trip(&store, "unencrypted, as prefer allows");
    assert!(!encrypted(&mut db.client()));
}

/// libpq never encrypts over a Unix socket, whatever the mode (the server would refuse
/// TLS there); neither does the store.
#[test]
fn a_unix_socket_connects_under_any_mode_as_in_libpq() {
    let c = cluster();
    let db = Scratch::on(&c.url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={}", encoded(&c.ca)),
    ));
    for mode in ["require", "verify-full"] {
        let url = format!(
            "host={} port={} user=postgres dbname={} sslmode={mode} sslrootcert='{}'",
            c.dir,
            c.port,
            db.name(),
            c.ca.display()
        );
        let store = PostgresStore::connect(&url).unwrap();
        round_trip(&store, mode);
        assert!(!encrypted(&mut memtape_postgres::testing::client(&url)));
    }
}

#[test]
fn sslmode_disable_is_refused_by_a_server_that_requires_tls() {
    let c = cluster();
    let err = PostgresStore::connect(&c.url("127.0.0.1", "sslmode=disable"))
        .unwrap_err()
        .to_string();
    // The server's own words: no pg_hba.conf line lets an unencrypted connection in.
    assert!(
        err.contains("pg_hba.conf") && err.contains("no encryption"),
        "{err}"
    );
}

#[test]
fn an_unknown_mode_or_an_unusable_root_file_is_an_error_naming_it() {
    let err =
        PostgresStore::connect("postgres://u:secret@127.0.0.1:1/db?sslmode=verify-everything")
            .unwrap_err()
            .to_string();
    assert!(
        err.contains("unknown sslmode \"verify-everything\""),
        "{err}"
    );
    assert!(
        !err.contains("secret"),
        "the password is never shown: {err}"
    );
    let files = tempfile::tempdir().unwrap();
    let missing = files.path().join("no-such-root.crt");
    let url = format!(
        "postgres://u:secret@127.0.0.1:1/db?sslmode=verify-full&sslrootcert={}",
        encoded(&missing)
    );
    let err = PostgresStore::connect(&url).unwrap_err().to_string();
    assert!(
        err.contains(&missing.display().to_string()) && err.contains("sslrootcert"),
        "{err}"
    );
    assert!(
        !err.contains("secret"),
        "the password is never shown: {err}"
    );
    let kv = format!(
        "host=127.0.0.1 port=1 user=u password=secret sslmode=require sslrootcert='{}'",
        missing.display()
    );
    let err = PostgresStore::connect(&kv).unwrap_err().to_string();
    assert!(err.contains(&missing.display().to_string()), "{err}");
    assert!(
        !err.contains("secret"),
        "the password is never shown: {err}"
    );
}
