//! Scratch databases for tests: each [`Scratch`] is a new, empty database on the cluster
//! that `MEMTAPE_TEST_DATABASE_URL` names (`scripts/postgres start` starts a private one,
//! and `scripts/test` does so before the tests), dropped again when the test ends.
//!
//! A test that needs PostgreSQL and finds no cluster fails, saying how to start one: it is
//! never skipped.

use postgres::Client;

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

impl Scratch {
    /// Creates a new empty database, or panics naming what failed.
    pub fn new() -> Self {
        Self::on(&admin_url())
    }

    /// Creates a new empty database on the cluster `admin` reaches (its `sslmode` and
    /// `sslrootcert` carry over to the new database's address), or panics naming what
    /// failed.
    pub fn on(admin: &str) -> Self {
        let admin = admin.to_owned();
        let name = format!("memtape_test_{:016x}", fastrand::u64(..));
        let url = crate::create_database(&admin, &name)
            .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
        Scratch { admin, name, url }
    }

    /// The database's address.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A connection to the database (see [`client`]).
    pub fn client(&self) -> Client {
        client(&self.url)
    }
}

/// A connection to the database at `url`, for tests that look under the store: through the
/// store's TLS connector (the address's `sslmode` and `sslrootcert` hold), named
/// `memtape-test` in `pg_stat_activity` (not `memtape`, the store's own name, which tests
/// count). Panics naming the database (never its password) when it cannot connect.
pub fn client(url: &str) -> Client {
    crate::conn::Target::parse(url, false)
        .and_then(|t| t.named("memtape-test").open())
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", crate::shown(url)))
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = crate::drop_database(&self.admin, &self.name);
    }
}
