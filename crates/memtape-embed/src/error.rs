//! The crate's error type.

use std::path::PathBuf;

use crate::assets::Model;

/// A boxed error from a library this crate calls (tokenizers, ONNX Runtime, safetensors).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while obtaining model files or embedding text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A model name that is not one of [`Model::ALL`].
    #[error("unknown embedding model {0:?}; known models: minilm, wordllama")]
    UnknownModel(String),

    /// Model files are neither in the local model directory nor in the cache.
    #[error(
        "the {model} model is not available locally (missing: {missing}); \
         run `memtape models fetch` to download it, or point the model directory at a folder that has these files"
    )]
    Missing {
        /// The model whose files are missing.
        model: Model,
        /// The missing files, comma separated.
        missing: String,
    },

    /// A downloaded file's sha256 differs from the one pinned for it; nothing was cached.
    #[error(
        "checksum mismatch for {file}: expected sha256 {expected}, got {actual}; the file was not cached"
    )]
    Checksum {
        /// The file (as named in the cache).
        file: String,
        /// The pinned sha256.
        expected: String,
        /// The sha256 of what was downloaded.
        actual: String,
    },

    /// MiniLM on a platform for which the package registry has no build of the pinned ONNX
    /// Runtime, with no library in the local model directory either.
    #[error(
        "no ONNX Runtime {version} library is published for {platform}, so the minilm model \
         cannot run here (the pinned builds are for {pinned}). Use the wordllama model, which \
         needs no runtime: run `memtape --model wordllama models fetch`, then pass \
         --model wordllama or set MEMTAPE_MODEL=wordllama. Or put an ONNX Runtime {version} \
         library ({names}) in the local model directory (MEMTAPE_MODEL_DIR)"
    )]
    NoRuntime {
        /// The platform, as `<os> <arch>` (Rust's names, e.g. `macos x86_64`).
        platform: String,
        /// The pinned ONNX Runtime release.
        version: &'static str,
        /// The platforms that have a pinned build, comma separated.
        pinned: String,
        /// The names the library is looked for under in the local model directory.
        names: String,
    },

    /// Every download route failed for a file.
    #[error("could not download {file}: {details}")]
    Download {
        /// The file (as named in the cache).
        file: String,
        /// What each route reported, in the order they were tried.
        details: String,
    },

    /// A filesystem operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },

    /// A tokenizer file could not be loaded or configured.
    #[error("tokenizer {path}: {source}")]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// The tokenizers crate's error.
        source: BoxError,
    },

    /// A weights file is unreadable or not shaped as expected.
    #[error("model weights {path}: {message}")]
    Weights {
        /// The weights file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },

    /// ONNX Runtime failed to load, to build the session or to run it.
    #[error("ONNX Runtime: {0}")]
    Runtime(String),

    /// Tokenizing or pooling a batch failed.
    #[error("embedding failed: {0}")]
    Embed(String),

    /// [`crate::load`] was given files located for another model.
    #[error("files for the {got} model were given to load the {expected} model")]
    WrongFiles {
        /// The model asked for.
        expected: Model,
        /// The model the files belong to.
        got: Model,
    },
}

impl Error {
    /// An [`Error::Io`] for `path`.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}
