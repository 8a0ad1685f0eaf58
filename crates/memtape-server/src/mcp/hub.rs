//! Resource subscriptions: who listens to which memory file, and telling them it changed.

use std::sync::Mutex;

use memtape::Scope;
use rmcp::RoleServer;
use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::Peer;

use super::file_uri;

/// One subscription to a memory file.
pub(super) struct Sub {
    pub(super) session: u64,
    pub(super) memory: Scope,
    pub(super) uri: String,
    pub(super) peer: Peer<RoleServer>,
}

/// The subscriptions of every connection of one server.
#[derive(Default)]
pub(super) struct Hub {
    pub(super) subs: Mutex<Vec<Sub>>,
}

/// Whether a change of `changed`'s memory can change what `watched` sees: the same scope,
/// or the agent's memory under one of its users' (a user's view layers the agent's files).
fn affects(changed: &Scope, watched: &Scope) -> bool {
    changed.tenant() == watched.tenant()
        && changed.agent_name() == watched.agent_name()
        && (changed.user().is_none() || changed.user() == watched.user())
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Sub>> {
        self.subs.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn subscribe(&self, sub: Sub) {
        let mut subs = self.lock();
        if !subs
            .iter()
            .any(|s| s.session == sub.session && s.uri == sub.uri && s.memory == sub.memory)
        {
            subs.push(sub);
        }
    }

    pub(super) fn unsubscribe(&self, session: u64, uri: &str) {
        self.lock()
            .retain(|s| !(s.session == session && s.uri == uri));
    }

    pub(super) fn forget(&self, session: u64) {
        self.lock().retain(|s| s.session != session);
    }

    pub(super) fn watching(&self, memory: &Scope) -> bool {
        self.lock().iter().any(|s| affects(memory, &s.memory))
    }

    /// Tells the subscribers of each of `paths` (files of `memory`) that it changed.
    pub(super) async fn notify(&self, memory: &Scope, paths: &[&String]) {
        if paths.is_empty() {
            return;
        }
        let uris: Vec<String> = paths.iter().map(|p| file_uri(p)).collect();
        let targets: Vec<(u64, Peer<RoleServer>, String)> = self
            .lock()
            .iter()
            .filter(|s| affects(memory, &s.memory) && uris.contains(&s.uri))
            .map(|s| (s.session, s.peer.clone(), s.uri.clone()))
            .collect();
        for (session, peer, uri) in targets {
            let sent = peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                .await;
            if sent.is_err() {
                // The connection is gone.
                self.forget(session);
            }
        }
    }
}
