//! memtape-core: the pure domain of memtape — the tape's typed entries, scopes, queries,
//! thread extraction, history selection, token counting and the JSONL interchange formats.
//!
//! This crate does no IO: no files, no network, no clock reads, no environment variables.
//! Time and ids are passed in, so every rule here is fast to test.
//!
//! ```
//! use memtape_core::{Message, Payload, Kind};
//!
//! let call = Message::assistant_tool_calls(vec![memtape_core::ToolCall::function("c1", "search", "{}")]);
//! assert_eq!(Payload::Message(call).kind(), Kind::ToolCall);
//! assert_eq!(Payload::Message(Message::tool_result("c1", "ok")).kind(), Kind::ToolResult);
//! ```

mod as_of;
pub mod context;
pub mod dify;
mod entry;
pub mod erasure;
mod error;
pub mod events;
pub mod formats;
mod history;
pub mod memory;
pub mod names;
mod query;
pub mod retention;
mod scope;
pub mod summary;
mod thread;
mod tokens;
pub mod wal;

pub use as_of::AsOf;
pub use entry::{
    Anchor, Content, ContentPart, Entry, EntryId, Event, FileOwner, FileRef, FileSource, FileType,
    FunctionCall, Kind, MAX_PAYLOAD_NAME_BYTES, Message, Meta, NewEntry, Payload, Role, ToolCall,
};
pub use erasure::{ErasedHow, Erasure};
pub use error::Error;
pub use history::{HistoryLimits, HistoryView, select_history};
pub use query::{AnchorRange, Filter, Order, TapeQuery};
pub use scope::Scope;
pub use thread::walk_thread;
pub use tokens::{Bpe, BpeEncoding, Cached, TokenCounter};

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
