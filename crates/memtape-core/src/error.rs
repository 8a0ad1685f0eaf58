//! The one error type of memtape-core: every way a value can be invalid.

/// What went wrong in the domain layer. Each variant names the offending value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A scope component is empty, too long or contains control characters.
    #[error("invalid scope: {0}")]
    InvalidScope(String),
    /// A message breaks a structural rule (for example a tool result without tool_call_id).
    #[error("invalid message: {0}")]
    InvalidMessage(String),
    /// An entry's stored kind does not agree with its payload, or its payload is malformed.
    #[error("invalid entry: {0}")]
    InvalidEntry(String),
    /// An entry id that is not a number from 0 to 2^53 − 1.
    #[error("{0:?} is not an entry id: ids are whole numbers up to 9007199254740991 (2^53 - 1)")]
    IdOutOfRange(String),
    /// A kind name that memtape does not know.
    #[error(
        "unknown kind {0:?} (expected one of message, tool_call, tool_result, anchor, event, system)"
    )]
    UnknownKind(String),
    /// A role name that memtape does not know.
    #[error("unknown role {0:?} (expected one of user, assistant, system, tool)")]
    UnknownRole(String),
    /// A line of an import file could not be read; nothing from the file is imported.
    #[error("line {line}: {reason}")]
    BadLine {
        /// 1-based line number in the input.
        line: usize,
        /// Why the line was rejected.
        reason: String,
    },
    /// A memory workspace path breaks a rule (absolute, `..`, encoded traversal, …).
    #[error("invalid path {path:?}: {why}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// The rule it breaks.
        why: String,
    },
    /// A memory change or request that cannot be applied.
    #[error("invalid memory change: {0}")]
    InvalidMemory(String),
    /// An import file as a whole is inconsistent (for example a dangling parent reference).
    #[error("invalid import: {0}")]
    InvalidImport(String),
    /// A Dify memory configuration (`MemoryConfig`) that cannot work.
    #[error("invalid Dify memory config: {0}")]
    MemoryConfig(String),
    /// An "as of" moment that is neither an entry id nor an RFC 3339 time.
    #[error("invalid as-of moment: {0}")]
    InvalidAsOf(String),
    /// A summarizer could not summarize; whatever it was to replace is kept.
    #[error("summarizer failed: {0}")]
    Summarize(String),
}
