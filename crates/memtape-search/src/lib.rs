//! memtape-search: retrieval over the tape. BM25 (SQLite FTS5) and vector search over
//! local embeddings, fused, with filters by scope, kind, role and time. The index is a
//! projection of the tape, one shard per tenant: it records the last tape id it covers,
//! catches up from there, and can be deleted and rebuilt at any time.
//!
//! ```
//! use memtape_core::{Message, NewEntry, Payload, Scope};
//! use memtape_search::{Index, IndexConfig, Mode, SearchFilter, SearchRequest};
//! use memtape_store::{MemoryStore, Store};
//!
//! let store = MemoryStore::new();
//! let session = Scope::agent("t", "a")?.with_session("s1")?;
//! let now = chrono::DateTime::UNIX_EPOCH;
//! for text in ["I adopted a puppy named Rex", "The weather is grey today"] {
//!     store.append(vec![NewEntry::new(session.clone(), Payload::Message(Message::user(text)), now)])?;
//! }
//! let dir = tempfile::tempdir()?;
//! let index = Index::open(&dir.path().join("index"), None, IndexConfig::default())?;
//! index.catch_up(&store)?;
//! let request = SearchRequest::new("puppies", SearchFilter::within(&session)).mode(Mode::Bm25);
//! let hits = index.search(&request)?;
//! assert_eq!(hits[0].id.0, 1); // "puppies" matches "puppy": Porter stemming
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod embed;
mod error;
mod fusion;
mod index;
mod request;
pub mod text;
mod vectors;
pub mod when;

pub use embed::{EmbedError, Embedder};
pub use error::Error;
pub use index::{
    DEFAULT_MAX_SHARDS, DEFAULT_MEMORY, Index, IndexConfig, PendingVectors, Progress, Result,
    ShardStats, ShardStatus,
};
pub use request::{Fusion, Hit, MAX_QUERY_BYTES, Mode, Ranked, SearchFilter, SearchRequest};
pub use vectors::dot;
