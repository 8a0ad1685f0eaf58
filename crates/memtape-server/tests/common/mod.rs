//! The harness the server tests share: a real `memtape-server` on 127.0.0.1 over a real
//! SQLite store in a temporary directory, and a real HTTP client (ureq).

#![allow(dead_code, clippy::unwrap_used)] // Each test binary uses a different part.

use std::net::SocketAddr;
use std::time::Duration;

use memtape::{Engine, Index, IndexConfig};
use memtape_server::{AppState, KeyStore, Limits};
use serde_json::Value;

/// A running server and its data directory.
pub struct Server {
    /// The data directory.
    pub dir: tempfile::TempDir,
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    agent: ureq::Agent,
}

impl Server {
    /// A server over a fresh store with a BM25 index, on loopback, without keys.
    pub fn start() -> Self {
        Self::start_with(Limits::default())
    }

    /// [`Server::start`] with `limits`.
    pub fn start_with(limits: Limits) -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, limits)
    }

    /// A server over the store in `dir` (created if missing).
    pub fn start_in(dir: tempfile::TempDir, limits: Limits) -> Self {
        Self::start_indexed(dir, limits, None, None)
    }

    /// A server over a fresh store that keeps memory with `model`.
    pub fn start_with_model(model: memtape_server::ModelSetup) -> Self {
        Self::start_indexed(
            tempfile::tempdir().unwrap(),
            Limits::default(),
            None,
            Some(model),
        )
    }

    /// A server over a fresh store that keeps memory with `model`, under `limits`.
    pub fn start_with_model_and(model: memtape_server::ModelSetup, limits: Limits) -> Self {
        Self::start_indexed(tempfile::tempdir().unwrap(), limits, None, Some(model))
    }

    /// A server over the store in `dir` (its keys there) that keeps memory with `model`.
    pub fn start_in_with_model(dir: tempfile::TempDir, model: memtape_server::ModelSetup) -> Self {
        Self::start_indexed(dir, Limits::default(), None, Some(model))
    }

    /// A server over a fresh store whose index embeds with `embedder`.
    #[allow(dead_code)] // Not every test file embeds.
    pub fn start_embedding(embedder: std::sync::Arc<dyn memtape::Embedder>) -> Self {
        Self::start_indexed(
            tempfile::tempdir().unwrap(),
            Limits::default(),
            Some(embedder),
            None,
        )
    }

    /// A server over a fresh store, its state set up by `configure` before it serves.
    pub fn start_configured(configure: impl FnOnce(&AppState)) -> Self {
        Self::start_setup(
            tempfile::tempdir().unwrap(),
            Limits::default(),
            None,
            None,
            configure,
        )
    }

    fn start_indexed(
        dir: tempfile::TempDir,
        limits: Limits,
        embedder: Option<std::sync::Arc<dyn memtape::Embedder>>,
        model: Option<memtape_server::ModelSetup>,
    ) -> Self {
        Self::start_setup(dir, limits, embedder, model, |_| {})
    }

    fn start_setup(
        dir: tempfile::TempDir,
        limits: Limits,
        embedder: Option<std::sync::Arc<dyn memtape::Embedder>>,
        model: Option<memtape_server::ModelSetup>,
        configure: impl FnOnce(&AppState),
    ) -> Self {
        Self::start_full(dir, limits, embedder, model, true, configure)
    }

    /// A server over the store in `dir`, on 127.0.0.1 all the same, whose state is told
    /// it listens only on loopback or not (`loopback`: what `memtape serve` derives from
    /// its address), its state set up by `configure` before it serves.
    pub fn start_full(
        dir: tempfile::TempDir,
        limits: Limits,
        embedder: Option<std::sync::Arc<dyn memtape::Embedder>>,
        model: Option<memtape_server::ModelSetup>,
        loopback: bool,
        configure: impl FnOnce(&AppState),
    ) -> Self {
        let engine = Engine::init(dir.path()).unwrap();
        let index =
            Index::open(&dir.path().join("index"), embedder, IndexConfig::default()).unwrap();
        let engine = engine.with_index(index).unwrap();
        let keys = KeyStore::open(dir.path());
        let state = AppState::with_model(engine, keys, limits, loopback, model);
        state.set_data_dir(dir.path().to_owned());
        configure(&state);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            runtime
                .block_on(memtape_server::serve(
                    listener,
                    state,
                    async {
                        let _ = stopped.await;
                    },
                    Duration::from_secs(5),
                ))
                .unwrap();
        });
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .new_agent();
        Server {
            dir,
            addr,
            stop: Some(stop),
            thread: Some(thread),
            agent,
        }
    }

    /// The URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Sends `method path` with an optional JSON body and key; returns the status and the
    /// JSON body (`Null` when it is not JSON).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        key: Option<&str>,
    ) -> (u16, Value) {
        let url = self.url(path);
        let mut response = match (method, body) {
            ("GET" | "DELETE", _) => {
                let mut r = if method == "GET" {
                    self.agent.get(&url)
                } else {
                    self.agent.delete(&url)
                };
                if let Some(k) = key {
                    r = r.header("Authorization", &format!("Bearer {k}"));
                }
                r.call().unwrap()
            }
            (m, b) => {
                let mut r = match m {
                    "POST" => self.agent.post(&url),
                    "PUT" => self.agent.put(&url),
                    "PATCH" => self.agent.patch(&url),
                    other => panic!("method {other}"),
                };
                if let Some(k) = key {
                    r = r.header("Authorization", &format!("Bearer {k}"));
                }
                match b {
                    Some(b) => r.send_json(b).unwrap(),
                    // A write says it is JSON even without a body (the cross-site guard).
                    None => r
                        .header("Content-Type", "application/json")
                        .send_empty()
                        .unwrap(),
                }
            }
        };
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// GET without a key.
    pub fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, None, None)
    }

    /// POST JSON without a key.
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.call("POST", path, Some(body), None)
    }

    /// Sends `method path` with `body` as it is, with `headers`; returns the status and the
    /// JSON body (`Null` when it is not JSON).
    pub fn send_raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, Value) {
        let url = self.url(path);
        let mut r = match method {
            "POST" => self.agent.post(&url),
            "PUT" => self.agent.put(&url),
            "PATCH" => self.agent.patch(&url),
            other => panic!("method {other}"),
        };
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let mut response = r.send(body).unwrap();
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Stops the server (graceful) and waits for it.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
