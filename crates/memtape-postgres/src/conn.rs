//! Connections to the database: how they are opened (durable commits, optionally read-only),
//! the statements each one has prepared, a small pool of idle ones, and how a client error
//! becomes the store's error naming the database (never its password).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use memtape_store::Error;
use postgres::types::ToSql;
use postgres::{Client, Config, NoTls, Row, Statement};

use crate::Result;

/// How many connections one store opens at most for its reads and writes (its locks and
/// its listener have a connection each besides).
pub const MAX_OPEN: usize = 32;

/// How long opening a connection may take before it is an error.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a store's database is, and how to reach it.
#[derive(Clone)]
pub(crate) struct Target {
    config: Config,
    /// The address as shown in messages: `postgres://user@host:port/db`, no password.
    address: String,
    read_only: bool,
}

impl Target {
    pub(crate) fn parse(url: &str, read_only: bool) -> Result<Self> {
        let mut config: Config = url.parse().map_err(|e| Error::Database {
            store: "the --database address".to_owned(),
            source: Box::new(e),
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("memtape");
        }
        let address = redacted(&config);
        Ok(Target {
            config,
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

    /// The store's error for a failure of the client or the server. When the server said
    /// why, its own words are the source: the client's error alone reads "db error", and a
    /// log that prints the error's text would not show the reason.
    pub(crate) fn err(&self, source: postgres::Error) -> Error {
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
        let mut client = self.config.connect(NoTls).map_err(|e| self.err(e))?;
        let mut setup = String::from(
            "SET synchronous_commit = on; SET client_min_messages = warning; SET TIME ZONE 'UTC';",
        );
        if self.read_only {
            setup.push_str(" SET default_transaction_read_only = on;");
        }
        client.batch_execute(&setup).map_err(|e| self.err(e))?;
        Ok(client)
    }
}

/// How `url` is shown in messages, never with its password: `postgres://user@host:port/db`
/// when it parses as a database address, else the text with any `user:password@` cut to
/// `user@`.
pub fn shown(url: &str) -> String {
    if let Ok(config) = url.parse::<Config>() {
        return redacted(&config);
    }
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let user = url[scheme + 3..at].split(':').next().unwrap_or("");
            format!("{}{user}@{}", &url[..scheme + 3], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// `postgres://user@host:port/db` for `config`: what messages show, without the password.
fn redacted(config: &Config) -> String {
    use postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().map_or(String::new(), |u| format!("{u}@"));
    let db = config.get_dbname().unwrap_or("");
    format!("postgres://{user}{host}:{port}/{db}")
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
