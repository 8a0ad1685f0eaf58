//! The one error type of memtape-search.

use std::path::PathBuf;

use crate::EmbedError;

/// What went wrong in the search index.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The index file could not be read or written.
    #[error("search index: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The tape could not be read while catching up.
    #[error("search index: reading the tape: {0}")]
    Store(#[from] memtape_store::Error),
    /// The embedding model failed.
    #[error("search index: embedding failed: {0}")]
    Embed(#[source] EmbedError),
    /// The embedder returned something other than one vector of its dimension per text.
    #[error(
        "search index: embedder {embedder} returned {got} vectors of length {len} for {want} texts (expected length {dim})"
    )]
    BadEmbedding {
        /// The embedder's id.
        embedder: String,
        /// How many texts were sent.
        want: usize,
        /// How many vectors came back.
        got: usize,
        /// The length of the first wrong vector.
        len: usize,
        /// The dimension the embedder declares.
        dim: usize,
    },
    /// The index holds vectors of another model than the one it was opened with.
    #[error(
        "the search index at {path} was built with embedder {built}, not {given}; run `memtape reindex` to rebuild it"
    )]
    EmbedderChanged {
        /// The index file.
        path: PathBuf,
        /// The embedder the index was built with ("none" for BM25 only).
        built: String,
        /// The embedder it was opened with ("none" for BM25 only).
        given: String,
    },
    /// Vector or hybrid search was asked of an index without an embedder.
    #[error(
        "{0} search needs an embedding model; this index has none (use --mode bm25, or set up a model)"
    )]
    NoEmbedder(&'static str),
    /// The index file was written by a newer memtape, or is not a memtape index.
    #[error(
        "{path} is not a search index this memtape can read ({why}); run `memtape reindex` to rebuild it"
    )]
    Unreadable {
        /// The index file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The inverted index of a large shard (tantivy) failed; searches use FTS5 meanwhile.
    #[error("search index: inverted index: {0}")]
    Inverted(String),
    /// The index file could not be removed for a rebuild.
    #[error("cannot remove the old search index {path}: {source}")]
    Remove {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The lock file that guards replacing a broken index could not be taken.
    #[error("cannot lock {path} to replace a broken search index: {source}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The query is longer than [`MAX_QUERY_BYTES`](crate::MAX_QUERY_BYTES).
    #[error(
        "the search query is {bytes} bytes; at most {max} are accepted (search for the words that matter)"
    )]
    QueryTooLong {
        /// The query's length in bytes.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// A shard file holds another tenant's documents than the one it was opened for.
    #[error(
        "the search index shard {path} holds tenant {found:?}, not {tenant:?}; move it away (it is rebuilt from the tape)"
    )]
    OtherTenant {
        /// The shard file.
        path: PathBuf,
        /// The tenant it holds.
        found: String,
        /// The tenant it was opened for.
        tenant: String,
    },
    /// A directory of the index could not be made or read.
    #[error("search index directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The vectors a large shard keeps on disk could not be read back.
    #[error("search index: reading vectors back from disk: {0}")]
    VectorsOnDisk(#[source] std::io::Error),
    /// The tape was replaced while a catch-up was running.
    #[error("search index: the tape changed during a catch-up; run the search again")]
    TapeChanged,
}
