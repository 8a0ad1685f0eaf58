//! Scratch databases for tests: each [`Scratch`] is a new, empty database on the cluster
//! that `MEMTAPE_TEST_DATABASE_URL` names (`scripts/postgres start` starts a private one,
//! and `scripts/test` does so before the tests), dropped again when the test ends.
//!
//! A test that needs PostgreSQL and finds no cluster fails, saying how to start one: it is
//! never skipped.

use postgres::{Client, NoTls};

/// The variable naming the cluster tests create their databases on.
pub const URL_VAR: &str = "MEMTAPE_TEST_DATABASE_URL";

/// An empty database of its own, dropped (with any connection still open to it) when this
/// is dropped.
#[derive(Debug)]
pub struct Scratch {
    admin: String,
    name: String,
    url: String,
}

/// The cluster's address, or a panic that says how to get one.
pub fn admin_url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{URL_VAR} is not set: this test needs PostgreSQL. `scripts/test` starts a private \
             cluster for the tests; by hand: eval \"$(scripts/postgres start)\" && export {URL_VAR}"
        )
    })
}

/// `url` with its database name replaced by `db` (`postgres://user@host:port/db?options`).
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let after_scheme = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[after_scheme..]
        .find('/')
        .map_or(base.len(), |i| after_scheme + i);
    format!("{}/{db}{query}", &base[..host_end])
}

impl Scratch {
    /// Creates a new empty database, or panics naming what failed.
    pub fn new() -> Self {
        let admin = admin_url();
        let name = format!("memtape_test_{:016x}", fastrand::u64(..));
        let mut client = Client::connect(&admin, NoTls)
            .unwrap_or_else(|e| panic!("cannot reach the test cluster at {admin}: {e}"));
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
        let url = with_database(&admin, &name);
        Scratch { admin, name, url }
    }

    /// The database's address.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A connection to the database, for tests that look under the store.
    pub fn client(&self) -> Client {
        Client::connect(&self.url, NoTls)
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", self.url))
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Ok(mut client) = Client::connect(&self.admin, NoTls) {
            let _ = client.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}
