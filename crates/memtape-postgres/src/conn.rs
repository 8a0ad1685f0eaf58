//! Connections to the database: how they are opened (through the TLS connector that
//! `sslmode` asks for, with durable commits, optionally read-only), the statements each one
//! has prepared, a small pool of idle ones, and how a client error becomes the store's error
//! naming the database (never its password).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use memtape_store::Error;
use postgres::types::ToSql;
use postgres::{Client, Config, NoTls, Row, Statement};

use crate::Result;
use crate::tls::{self, Tls};

/// How many connections one store opens at most for its reads and writes (its locks and
/// its listener have a connection each besides).
pub const MAX_OPEN: usize = 32;

/// How long opening a connection may take before it is an error.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a store's database is, and how to reach it.
#[derive(Clone)]
pub(crate) struct Target {
    config: Config,
    /// How connections are encrypted and the server's certificate checked.
    tls: Tls,
    /// The address as shown in messages: `postgres://user@host:port/db`, no password
    /// (with `?sslmode=…` when the address names one).
    address: String,
    read_only: bool,
}

impl Target {
    /// Reads a `postgres://` URL or a libpq `key=value` string, `sslmode` and
    /// `sslrootcert` included; an unknown mode or a root certificate file that cannot be
    /// used is an error naming it.
    pub(crate) fn parse(url: &str, read_only: bool) -> Result<Self> {
        let unreadable = |source: Box<dyn std::error::Error + Send + Sync>| Error::Database {
            store: "the --database address".to_owned(),
            source,
        };
        let split = tls::split(url).map_err(|why| unreadable(why.into()))?;
        let mut config: Config = split.rest.parse().map_err(|e| unreadable(Box::new(e)))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("memtape");
        }
        let address = redacted(&config, split.mode.as_deref());
        let tls = Tls::new(split.mode.as_deref(), split.root_cert.as_deref()).map_err(|why| {
            Error::Database {
                store: address.clone(),
                source: why.into(),
            }
        })?;
        // Over a Unix socket nothing is encrypted whatever the mode, as in libpq (the
        // server answers no to TLS there, which the client would take as a refusal).
        let unix_only = config.get_hostaddrs().is_empty()
            && !config.get_hosts().is_empty()
            && config
                .get_hosts()
                .iter()
                .all(|h| !matches!(h, postgres::config::Host::Tcp(_)));
        config.ssl_mode(if unix_only {
            postgres::config::SslMode::Disable
        } else {
            tls.ssl_mode
        });
        Ok(Target {
            config,
            tls,
            address,
            read_only,
        })
    }

    pub(crate) fn address(&self) -> &str {
        &self.address
    }

    pub(crate) fn read_only(&self) -> bool {
        self.read_only
    }

    /// The same target, its connections named `name` in `pg_stat_activity` (not
    /// memtape's own name, which tests count).
    #[cfg(feature = "testing")]
    pub(crate) fn named(mut self, name: &str) -> Self {
        self.config.application_name(name);
        self
    }

    /// The store's error for a failure of the client or the server. When the server said
    /// why, its own words are the source: the client's error alone reads "db error", and a
    /// log that prints the error's text would not show the reason.
    ///
    /// A server certificate this side refused is said so, with the mode and the roots it
    /// was checked against.
    pub(crate) fn err(&self, source: postgres::Error) -> Error {
        if let Some(refused) = tls::refused_certificate(&source) {
            return self.fail(format!(
                "the server's certificate was refused ({}): {refused}",
                self.tls.described()
            ));
        }
        let source: Box<dyn std::error::Error + Send + Sync> = match source.as_db_error() {
            Some(said) => Box::new(said.clone()),
            None => Box::new(source),
        };
        Error::Database {
            store: self.address.clone(),
            source,
        }
    }

    /// The store's error for something wrong that the server did not say.
    pub(crate) fn fail(&self, why: impl Into<String>) -> Error {
        Error::Database {
            store: self.address.clone(),
            source: why.into().into(),
        }
    }

    /// Opens a new connection. Every commit on it waits for the server's disk
    /// (`synchronous_commit = on`, whatever the server's default), so an append that
    /// returns is durable; a read-only store's connections cannot write at all.
    pub(crate) fn connect(&self) -> Result<Client> {
        let mut client = self.open()?;
        let mut setup = String::from(
            "SET synchronous_commit = on; SET client_min_messages = warning; SET TIME ZONE 'UTC';",
        );
        if self.read_only {
            setup.push_str(" SET default_transaction_read_only = on;");
        }
        client.batch_execute(&setup).map_err(|e| self.err(e))?;
        Ok(client)
    }

    /// Opens a new connection as the server's defaults set it up, through the TLS
    /// connector (every connection memtape opens comes through here).
    pub(crate) fn open(&self) -> Result<Client> {
        match &self.tls.connector {
            Some(tls) => self.config.connect(tls.clone()),
            None => self.config.connect(NoTls),
        }
        .map_err(|e| self.err(e))
    }
}

/// How `url` is shown in messages, never with its password: `postgres://user@host:port/db`
/// (and `?sslmode=…` when it names one) when it parses as a database address, else the
/// text with any `user:password@` cut to `user@`.
pub fn shown(url: &str) -> String {
    if let Ok(split) = tls::split(url)
        && let Ok(config) = split.rest.parse::<Config>()
    {
        return redacted(&config, split.mode.as_deref());
    }
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let user = url[scheme + 3..at].split(':').next().unwrap_or("");
            format!("{}{user}@{}", &url[..scheme + 3], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// `postgres://user@host:port/db` for `config` (`?sslmode=…` after it when `sslmode` was
/// given): what messages show, without the password.
fn redacted(config: &Config, sslmode: Option<&str>) -> String {
    use postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().map_or(String::new(), |u| format!("{u}@"));
    let db = config.get_dbname().unwrap_or("");
    let mode = sslmode.map_or(String::new(), |m| format!("?sslmode={m}"));
    format!("postgres://{user}{host}:{port}/{db}{mode}")
}

/// One open connection and the statements it has prepared (one round trip saved on every
/// later use of the same SQL).
pub(crate) struct Conn {
    pub(crate) client: Client,
    statements: HashMap<String, Statement>,
}

impl Conn {
    pub(crate) fn new(client: Client) -> Self {
        Conn {
            client,
            statements: HashMap::new(),
        }
    }

    fn statement(&mut self, target: &Target, sql: &str) -> Result<Statement> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql).map_err(|e| target.err(e))?;
        self.statements.insert(sql.to_owned(), s.clone());
        Ok(s)
    }

    /// Runs `sql` (prepared once per connection) and returns its rows.
    pub(crate) fn query(
        &mut self,
        target: &Target,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let s = self.statement(target, sql)?;
        self.client.query(&s, params).map_err(|e| target.err(e))
    }

    /// Runs `sql` and returns its one row, if any.
    pub(crate) fn query_opt(
        &mut self,
        target: &Target,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>> {
        let s = self.statement(target, sql)?;
        self.client.query_opt(&s, params).map_err(|e| target.err(e))
    }

    /// Runs `sql` and returns its one row.
    pub(crate) fn query_one(
        &mut self,
        target: &Target,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row> {
        let s = self.statement(target, sql)?;
        self.client.query_one(&s, params).map_err(|e| target.err(e))
    }

    /// Runs `sql` and returns how many rows it touched.
    pub(crate) fn execute(
        &mut self,
        target: &Target,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64> {
        let s = self.statement(target, sql)?;
        self.client.execute(&s, params).map_err(|e| target.err(e))
    }
}

/// The connections of one store: at most [`MAX_OPEN`] open at once (idle or in use), so
/// a busy server cannot exhaust the database's connection slots; a caller who finds them
/// all in use waits for one to come back. No caller holds one connection while it asks
/// for another, so the wait always ends.
#[derive(Default)]
pub(crate) struct Pool {
    state: Mutex<PoolState>,
    freed: Condvar,
}

#[derive(Default)]
struct PoolState {
    idle: Vec<Conn>,
    /// Connections open, idle or in use.
    open: usize,
}

impl Pool {
    fn state(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An idle connection, or a new one when fewer than [`MAX_OPEN`] are open; else waits.
    pub(crate) fn take(&self, target: &Target) -> Result<Conn> {
        let mut state = self.state();
        loop {
            if let Some(c) = state.idle.pop() {
                if c.client.is_closed() {
                    state.open -= 1;
                    drop(state);
                    drop(c);
                    state = self.state();
                    continue;
                }
                return Ok(c);
            }
            if state.open < MAX_OPEN {
                state.open += 1;
                drop(state);
                return match target.connect() {
                    Ok(client) => Ok(Conn::new(client)),
                    Err(e) => {
                        self.release_slot();
                        Err(e)
                    }
                };
            }
            state = self
                .freed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn release_slot(&self) {
        self.state().open -= 1;
        self.freed.notify_one();
    }

    /// Gives back a connection that is outside any transaction; a closed one is let go.
    pub(crate) fn give(&self, conn: Conn) {
        if conn.client.is_closed() {
            self.discard(conn);
            return;
        }
        self.state().idle.push(conn);
        self.freed.notify_one();
    }

    /// Lets a connection go (closed, or in no state to be used again).
    pub(crate) fn discard(&self, conn: Conn) {
        drop(conn);
        self.release_slot();
    }

    /// Takes every idle connection out, to close them.
    pub(crate) fn drain(&self) -> Vec<Conn> {
        let mut state = self.state();
        let idle = std::mem::take(&mut state.idle);
        state.open -= idle.len();
        idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_shown_names_the_mode_and_never_the_password() {
        for (url, expected) in [
            (
                "postgres://u:se%40cret@h:6543/db?sslmode=verify-full&sslrootcert=%2Fca.pem",
                "postgres://u@h:6543/db?sslmode=verify-full",
            ),
            (
                "postgresql://u:secret@h/db?sslrootcert=/ca.pem&sslmode=require&connect_timeout=2",
                "postgres://u@h:5432/db?sslmode=require",
            ),
            (
                "host=h user=u password='se cret' dbname=db sslmode=verify-ca sslrootcert=/ca.pem",
                "postgres://u@h:5432/db?sslmode=verify-ca",
            ),
            ("postgres://u:secret@h/db", "postgres://u@h:5432/db"),
            // An unknown mode is shown as written; the error that follows names it.
            (
                "postgres://u:secret@h/db?sslmode=bogus",
                "postgres://u@h:5432/db?sslmode=bogus",
            ),
        ] {
            assert_eq!(shown(url), expected, "{url}");
        }
    }

    #[test]
    fn parsing_refuses_an_unknown_mode_and_keeps_the_password_out() {
        let err = Target::parse("postgres://u:secret@h/db?sslmode=verify-all", false)
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            err,
            "postgres at postgres://u@h:5432/db?sslmode=verify-all: unknown sslmode \
             \"verify-all\" (use disable, prefer, require, verify-ca or verify-full)"
        );
        let err = Target::parse("postgres://u:secret@h/db?sslrootcert=%FF", false)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("sslrootcert") && !err.contains("secret"),
            "{err}"
        );
    }

    #[test]
    fn the_client_gets_the_mode_and_never_sees_the_tls_options() {
        let t = Target::parse(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=system&application_name=x",
            false,
        )
        .unwrap();
        assert_eq!(t.config.get_ssl_mode(), postgres::config::SslMode::Require);
        assert_eq!(t.config.get_application_name(), Some("x"));
        let t = Target::parse("host=h user=u sslmode=disable", false).unwrap();
        assert_eq!(t.config.get_ssl_mode(), postgres::config::SslMode::Disable);
        assert!(t.tls.connector.is_none());
        let t = Target::parse("postgres://u@h/db", false).unwrap();
        assert_eq!(t.config.get_ssl_mode(), postgres::config::SslMode::Prefer);
        // A Unix socket is never encrypted, as in libpq; a TCP host beside it keeps the mode.
        let t = Target::parse("host=/run/postgresql user=u sslmode=verify-full", false).unwrap();
        assert_eq!(t.config.get_ssl_mode(), postgres::config::SslMode::Disable);
        let t = Target::parse("host=/run/postgresql,h user=u sslmode=require", false).unwrap();
        assert_eq!(t.config.get_ssl_mode(), postgres::config::SslMode::Require);
    }
}
