//! The one error type of the memtape facade.

use memtape_core::{EntryId, Kind};

/// What went wrong in an engine call. Each variant names the offending value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store failed or refused a write.
    #[error(transparent)]
    Store(#[from] memtape_store::Error),
    /// A value broke a domain rule (a bad line in an import, an invalid scope, ...).
    #[error(transparent)]
    Invalid(#[from] memtape_core::Error),
    /// The search index failed.
    #[error(transparent)]
    Search(#[from] memtape_search::Error),
    /// Search was asked of an engine without an index.
    #[error("this engine has no search index (attach one with Engine::with_index)")]
    NoIndex,
    /// No entry with that id in this tenant.
    #[error("no entry {0}")]
    NoEntry(EntryId),
    /// A thread was asked for from an entry that is not a message.
    #[error("entry {0} is a {1}, not a message: threads run through messages")]
    NotAMessage(EntryId, Kind),
    /// An anchor query named an anchor the scope does not have.
    #[error("no anchor {0} in {1}")]
    NoAnchor(String, String),
    /// An import or export needs a session that was not given.
    #[error("{0}")]
    NeedSession(String),
    /// An import would mix into a session that already has entries.
    #[error(
        "{0} already has {1} entries; import into a new session (--session) so nothing is mixed"
    )]
    SessionNotEmpty(String, u64),
    /// An import holds an entry that an erasure took from this store: a file made before
    /// the erasure must not bring the content back.
    #[error(
        "entry {entry} of the file was erased from this store (receipt {by}); a file made before the erasure cannot bring it back, so nothing was imported"
    )]
    Erased {
        /// The entry's id.
        entry: EntryId,
        /// The receipt of the erasure that took it.
        by: EntryId,
    },
    /// A memtape-format import names a scope outside the one it was given: imports are
    /// confined to the caller's scope; a whole-store restore is its own, explicit form.
    #[error(
        "entry {entry} of the file belongs to {scope}, outside the import's scope {allowed}: import it into its own scope (--tenant/--agent/--user), or restore the whole store as an administrator (memtape import --restore)"
    )]
    OutsideScope {
        /// The entry's id in the file.
        entry: EntryId,
        /// The scope it names.
        scope: String,
        /// The scope the import was confined to.
        allowed: String,
    },
    /// Writing an export failed.
    #[error("writing the export: {0}")]
    Write(#[from] std::io::Error),
    /// Reading or writing a file of the markdown workspace failed.
    #[error("workspace file {path}: {source}")]
    Workspace {
        /// The file or folder.
        path: std::path::PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// A memory tool refused a call (a missing file, an ambiguous edit, a bad argument).
    /// The text is what the model is shown as the tool's error result; nothing changed.
    #[error("{0}")]
    Tool(String),
    /// The engine or a request is configured in a way that cannot work (for example node
    /// memory without a conversation).
    #[error("configuration error: {0}")]
    Config(String),
    /// A call to a language model failed (after the client's retries).
    #[error(transparent)]
    Llm(#[from] memtape_llm::Error),
    /// A model answered, but not in a form that can be used (no tool call, the wrong
    /// tool, a required argument missing). Nothing was written.
    #[error("the model's reply cannot be used: {0}")]
    Model(String),
    /// Other writers kept changing what this write depends on, attempt after attempt;
    /// nothing was written, and trying again later is safe.
    #[error("{0}")]
    Contended(String),
    /// A broken internal expectation.
    #[error("internal error: {0}")]
    Internal(String),
}
