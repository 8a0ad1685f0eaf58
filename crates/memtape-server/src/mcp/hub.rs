//! Resource notifications: who listens to which memory file (or to a memory's list of
//! files), and telling them what changed. Every memory change this process writes, by any
//! route (an MCP tool, REST, the indexer's sync), is announced by the state
//! ([`AppState::memory_changes`]); [`Hub::follow`] compares each watched memory with what
//! it last saw and notifies: `resources/updated` to the subscribers of a file that changed,
//! `resources/list_changed` to the sessions that listed a memory whose files came or went.
//! Changes written by another process are found by comparing again every second.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use memtape::Scope;
use rmcp::RoleServer;
use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::Peer;
use tokio::sync::broadcast::error::RecvError;

use super::{file_uri, memory_files};
use crate::state::{AppState, WeakState};

/// One subscription to a memory file.
pub(super) struct Sub {
    pub(super) session: u64,
    pub(super) memory: Scope,
    pub(super) uri: String,
    pub(super) peer: Peer<RoleServer>,
}

/// A session that listed the files of a memory.
struct Lister {
    session: u64,
    memory: Scope,
    peer: Peer<RoleServer>,
}

/// What the hub tracks, under one lock.
#[derive(Default)]
struct Watch {
    subs: Vec<Sub>,
    listers: Vec<Lister>,
    /// Each watched memory's files (path to content) as last seen.
    seen: HashMap<Scope, BTreeMap<String, String>>,
}

impl Watch {
    /// The memories someone watches that a change of `changed` (or any change) may touch.
    fn watched(&self, changed: Option<&Scope>) -> Vec<Scope> {
        let mut out: Vec<Scope> = Vec::new();
        let memories = self.subs.iter().map(|s| &s.memory);
        for memory in memories.chain(self.listers.iter().map(|l| &l.memory)) {
            if changed.is_none_or(|c| affects(c, memory)) && !out.contains(memory) {
                out.push(memory.clone());
            }
        }
        out
    }

    /// Drops what no session watches any more.
    fn tidy(&mut self) {
        let Watch {
            subs,
            listers,
            seen,
        } = self;
        seen.retain(|m, _| {
            subs.iter().any(|s| &s.memory == m) || listers.iter().any(|l| &l.memory == m)
        });
    }
}

/// How often watched memories are compared even when this process wrote nothing: the
/// longest a change written by another process waits to be notified.
const RECHECK: Duration = Duration::from_secs(1);

/// The subscriptions of every connection of one server.
#[derive(Default)]
pub(super) struct Hub {
    watch: Mutex<Watch>,
}

/// Whether a change of `changed`'s memory can change what `watched` sees: the same scope,
/// or the agent's memory under one of its users' (a user's view layers the agent's files).
fn affects(changed: &Scope, watched: &Scope) -> bool {
    changed.tenant() == watched.tenant()
        && changed.agent_name() == watched.agent_name()
        && (changed.user().is_none() || changed.user() == watched.user())
}

impl Hub {
    /// A hub that follows `state`'s memory changes on a task of the current tokio
    /// runtime, until the state is dropped. Outside a runtime nothing is notified.
    pub(super) fn started(state: &AppState) -> Arc<Hub> {
        let hub = Arc::new(Hub::default());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let (follower, state) = (hub.clone(), state.downgrade());
                runtime.spawn(async move { follower.follow(state).await });
            }
            Err(_) => tracing::warn!("no tokio runtime: MCP resource notifications are off"),
        }
        hub
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Watch> {
        self.watch.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Subscribes `sub`; `files` are its memory's files now (the baseline for changes).
    pub(super) fn subscribe(&self, sub: Sub, files: BTreeMap<String, String>) {
        let mut w = self.lock();
        w.seen.entry(sub.memory.clone()).or_insert(files);
        if !w
            .subs
            .iter()
            .any(|s| s.session == sub.session && s.uri == sub.uri && s.memory == sub.memory)
        {
            w.subs.push(sub);
        }
    }

    /// Records that `session` listed `memory`'s files (`files`): it hears when files come
    /// or go.
    pub(super) fn listed(
        &self,
        session: u64,
        memory: &Scope,
        peer: Peer<RoleServer>,
        files: &BTreeMap<String, String>,
    ) {
        let mut w = self.lock();
        w.seen
            .entry(memory.clone())
            .or_insert_with(|| files.clone());
        if !w
            .listers
            .iter()
            .any(|l| l.session == session && &l.memory == memory)
        {
            w.listers.push(Lister {
                session,
                memory: memory.clone(),
                peer,
            });
        }
    }

    pub(super) fn unsubscribe(&self, session: u64, uri: &str) {
        let mut w = self.lock();
        w.subs.retain(|s| !(s.session == session && s.uri == uri));
        w.tidy();
    }

    /// Forgets everything of `session` (it ended).
    pub(super) fn forget(&self, session: u64) {
        let mut w = self.lock();
        w.subs.retain(|s| s.session != session);
        w.listers.retain(|l| l.session != session);
        w.tidy();
    }

    /// Notifies about the memory changes `state` announces, until the state is gone. Many
    /// changes in a row are handled as one; a listener that fell behind compares every
    /// watched memory. Other processes on the same data directory (the CLI beside the
    /// server) announce nothing here, so every [`RECHECK`] each watched memory is compared
    /// anyway.
    pub(super) async fn follow(&self, state: WeakState) {
        let Some(mut changes) = state.upgrade().map(|s| s.memory_changes()) else {
            return;
        };
        let mut recheck = tokio::time::interval(RECHECK);
        recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let mut changed: Vec<Option<Scope>> = tokio::select! {
                change = changes.recv() => match change {
                    Ok(scope) => vec![Some(scope)],
                    Err(RecvError::Lagged(_)) => vec![None],
                    Err(RecvError::Closed) => return,
                },
                _ = recheck.tick() => vec![None],
            };
            loop {
                match changes.try_recv() {
                    Ok(scope) => changed.push(Some(scope)),
                    Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {
                        changed.push(None)
                    }
                    Err(_) => break,
                }
            }
            let Some(state) = state.upgrade() else {
                return;
            };
            let mut memories: Vec<Scope> = Vec::new();
            for c in &changed {
                for m in self.lock().watched(c.as_ref()) {
                    if !memories.contains(&m) {
                        memories.push(m);
                    }
                }
            }
            for memory in memories {
                match memory_files(&state, &memory).await {
                    Ok(files) => self.compare(&memory, files).await,
                    Err(e) => tracing::warn!("memory notifications for {memory}: {e:?}"),
                }
            }
        }
    }

    /// Compares `memory`'s `files` now with what was last seen, and notifies.
    async fn compare(&self, memory: &Scope, files: BTreeMap<String, String>) {
        let (updated, listers) = {
            let mut w = self.lock();
            let Some(before) = w.seen.get(memory) else {
                return;
            };
            let changed: Vec<String> = files
                .iter()
                .filter(|(p, c)| before.get(*p) != Some(*c))
                .map(|(p, _)| file_uri(p))
                .chain(
                    before
                        .keys()
                        .filter(|p| !files.contains_key(*p))
                        .map(|p| file_uri(p)),
                )
                .collect();
            let listed = !files.keys().eq(before.keys());
            let updated: Vec<(u64, Peer<RoleServer>, String)> = w
                .subs
                .iter()
                .filter(|s| &s.memory == memory && changed.contains(&s.uri))
                .map(|s| (s.session, s.peer.clone(), s.uri.clone()))
                .collect();
            let listers: Vec<(u64, Peer<RoleServer>)> = w
                .listers
                .iter()
                .filter(|l| listed && &l.memory == memory)
                .map(|l| (l.session, l.peer.clone()))
                .collect();
            w.seen.insert(memory.clone(), files);
            (updated, listers)
        };
        for (session, peer, uri) in updated {
            let sent = peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                .await;
            if sent.is_err() {
                // The connection is gone.
                self.forget(session);
            }
        }
        for (session, peer) in listers {
            if peer.notify_resource_list_changed().await.is_err() {
                self.forget(session);
            }
        }
    }
}
