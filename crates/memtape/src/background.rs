//! Consolidation in the background (nanobot's `_consolidating` set and task set): after a
//! message is appended, [`Background::nudge`] checks with one bounded read whether the
//! session has reached its memory window, and if so starts its consolidation on a thread
//! of its own, so a reply never waits for the model. One consolidation per session runs
//! at a time: the in-flight set keeps this process from starting a second, and the
//! session's consolidation lock (a store lock) keeps other processes out; a session busy
//! elsewhere is skipped, as nanobot skips one in `_consolidating`.

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use memtape_core::Scope;
use memtape_llm::Llm;
use memtape_store::Store;

use crate::{Consolidated, Engine, LifecycleConfig, Result};

/// What to do with each background consolidation's outcome (log it, count it).
pub type OnConsolidated = dyn Fn(&Scope, &Result<Consolidated>) + Send + Sync;

/// Runs sessions' consolidations in the background.
pub struct Background<S: Store + 'static> {
    engine: Arc<Engine<S>>,
    llm: Arc<dyn Llm>,
    config: LifecycleConfig,
    running: Arc<Running>,
    on_done: Arc<OnConsolidated>,
}

/// The sessions being consolidated by this process.
#[derive(Default)]
struct Running {
    sessions: Mutex<HashSet<Scope>>,
    idle: Condvar,
}

impl<S: Store + 'static> Background<S> {
    /// Background consolidation on `engine` with `llm`, by `config`'s window.
    pub fn new(engine: Arc<Engine<S>>, llm: Arc<dyn Llm>, config: LifecycleConfig) -> Self {
        Background {
            engine,
            llm,
            config,
            running: Arc::default(),
            on_done: Arc::new(|_, _| {}),
        }
    }

    /// Calls `f` with each consolidation's outcome, on its thread.
    pub fn on_done(
        mut self,
        f: impl Fn(&Scope, &Result<Consolidated>) + Send + Sync + 'static,
    ) -> Self {
        self.on_done = Arc::new(f);
        self
    }

    /// The model it consolidates with.
    pub fn llm(&self) -> &Arc<dyn Llm> {
        &self.llm
    }

    /// The settings it runs by.
    pub fn config(&self) -> &LifecycleConfig {
        &self.config
    }

    /// Starts `session`'s consolidation on its own thread if it is due (at least a memory
    /// window of unconsolidated messages) and not already running here. Returns whether
    /// one started. The check reads at most one window of entries, and nothing else runs
    /// on the caller's thread.
    pub fn nudge(&self, session: &Scope) -> Result<bool> {
        if !self.config.consolidate || session.session().is_none() || session.node().is_some() {
            return Ok(false);
        }
        let window = self.config.memory_window;
        if self.engine.unconsolidated(session, window)? < window {
            return Ok(false);
        }
        {
            let mut sessions = self
                .running
                .sessions
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !sessions.insert(session.clone()) {
                return Ok(false);
            }
        }
        let (engine, llm, running, on_done) = (
            Arc::clone(&self.engine),
            Arc::clone(&self.llm),
            Arc::clone(&self.running),
            Arc::clone(&self.on_done),
        );
        let options = self.config.consolidation(false);
        let session = session.clone();
        let spawned = std::thread::Builder::new()
            .name("memtape-consolidate".into())
            .spawn({
                let session = session.clone();
                let running = Arc::clone(&running);
                move || {
                    // Another process consolidating this session: it will do the work.
                    let outcome = match engine.try_lock_consolidation(&session) {
                        Ok(Some(_lock)) => Some(engine.consolidate_locked(
                            &session,
                            llm.as_ref(),
                            options,
                            &|_, _| Vec::new(),
                        )),
                        Ok(None) => None,
                        Err(e) => Some(Err(e)),
                    };
                    if let Some(outcome) = outcome {
                        on_done(&session, &outcome);
                    }
                    running.finish(&session);
                }
            });
        if let Err(e) = spawned {
            running.finish(&session);
            return Err(crate::Error::Internal(format!(
                "cannot start a consolidation thread: {e}"
            )));
        }
        Ok(true)
    }

    /// Whether `session`'s consolidation is running in this process.
    pub fn is_running(&self, session: &Scope) -> bool {
        self.running
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(session)
    }

    /// Waits until no consolidation started here is running (before /new in a chat, and
    /// at shutdown).
    pub fn wait_idle(&self) {
        let mut sessions = self
            .running
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while !sessions.is_empty() {
            sessions = self
                .running
                .idle
                .wait(sessions)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Running {
    fn finish(&self, session: &Scope) {
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        sessions.remove(session);
        self.idle.notify_all();
    }
}
