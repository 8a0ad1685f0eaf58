//! memtape-search: retrieval over the tape. BM25 and vector search, fused, kept as a
//! projection of the tape that can always be rebuilt from it.

mod embed;

pub use embed::{EmbedError, Embedder};
