//! Names of the events memtape itself writes on the tape. Projections (the session table,
//! later the memory view) are folds over these.

/// Moves a session's consolidation pointer: `data = {"through": <entry id>}`; entries with
/// ids up to and including `through` are consolidated and left out of history.
pub const SESSION_CONSOLIDATED: &str = "session.consolidated";

/// Carries a session's free metadata (for example from a nanobot session file):
/// `data = {"metadata": {...}}`. The latest one wins.
pub const SESSION_METADATA: &str = "session.metadata";

/// A Bub tape `error` entry, kept as an event so it round-trips: `data` is the error payload.
pub const TAPE_ERROR: &str = "tape.error";

/// One version of an agent's (or agent and user's) memory: `data = {"ops": [...],
/// "source": "..."}` (see [`crate::memory::Change`]).
pub const MEMORY_CHANGE: &str = "memory.change";

/// A compaction of a session's conversation (MateClaw's summary or Qanot's removal), on
/// the session's tape: `data` is a [`crate::context::Compaction`]. The latest one whose
/// `through` is on the current thread is in effect for every later prompt.
pub const CONTEXT_COMPACTION: &str = "context.compaction";

/// How far a session's exchanges have been copied to Qanot's working buffer:
/// `data = {"through": <entry id>}` (the last copied assistant reply).
pub const CONTEXT_WORKING_BUFFER: &str = "context.working_buffer";
