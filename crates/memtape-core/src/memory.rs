//! Memory as tape events. Every change to an agent's (or an agent and user's) memory is one
//! `memory.change` event carrying a list of [`Op`]s on markdown files; the memory view is a
//! fold of those events in tape order. Nothing is overwritten: any earlier version can be
//! rebuilt ([`MemoryLog::view_at`]), compared ([`diff`]) and restored ([`MemoryLog::undo_to`]).
//!
//! Every tier of the seeds is a file of this one workspace (see [`paths`]): long-term facts
//! `MEMORY.md` and the user profile `PROFILE.md` (full replace), daily notes
//! `memory/YYYY-MM-DD.md` and the event history `HISTORY.md` (append), working state
//! `SESSION-STATE.md`, agent files `AGENTS.md` / `SOUL.md` (with an enabled flag and a sort
//! order, MateClaw), and free-form files under `memories/` (Anthropic's memory tool).
//!
//! A change's version is its position among the scope's changes (1, 2, 3, …): stable
//! forever, because the tape is never rewritten. Bub's memory zones (`memory/open` and
//! `memory/seal` anchors around a full snapshot) are read and written at the Bub tape
//! boundary ([`crate::formats::bub`]); inside memtape each version is one event, which makes
//! a change atomic by construction and keeps appends cheap.

mod blame;
mod change;
pub mod facts;
mod log;
pub mod paths;
mod view;

pub use blame::BlameLine;
pub use change::{Change, MAX_CAUSES, MAX_FILE_BYTES, Op};
pub use log::{MemoryLog, Recorded};
pub use paths::{MAX_NAME_BYTES, MAX_PATH_BYTES, check_path, sync_ignores};
pub use view::{MemoryFile, MemoryView, diff};

#[cfg(test)]
mod tests;
