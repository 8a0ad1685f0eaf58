//! memtape-embed: local embedding backends for memtape's vector search, and the code that
//! obtains their model files.
//!
//! Two models implement [`memtape_search::Embedder`]:
//!
//! - [`OrtMiniLm`]: all-MiniLM-L6-v2 with int8 weights, run by ONNX Runtime (384 dimensions).
//!   The default: good quality at a few hundred sentences per second on two threads.
//! - [`WordLlama`]: WordLlama static token embeddings (256 dimensions). Lower quality, but
//!   tens of thousands of sentences per second.
//!
//! The [`assets`] module finds the model files ([`assets::locate`], never touches the
//! network) or downloads them ([`assets::fetch`]) into a cache directory chosen by the caller,
//! verifying each file's sha256 before it lands there. [`load`] turns the located files into
//! a ready [`Embedder`].

pub mod assets;
mod error;
mod hub;
mod minilm;
mod registry;
mod wordllama;

pub use assets::{EmbedConfig, Model, ModelFiles, default_cache_dir, fetch, fetch_with, locate};
pub use error::{Error, Result};
pub use memtape_search::Embedder;
pub use minilm::{MINILM_MIN_SIMILARITY, OrtMiniLm};
pub use wordllama::{WORDLLAMA_MIN_SIMILARITY, WordLlama};

/// Loads the embedder for `model` from files found by [`locate`] or [`fetch`].
///
/// `config.threads` sets the number of threads the model may use (MiniLM's intra-op
/// threads; WordLlama ignores it).
pub fn load(model: Model, files: &ModelFiles, config: &EmbedConfig) -> Result<Box<dyn Embedder>> {
    if files.model != model {
        return Err(Error::WrongFiles {
            expected: model,
            got: files.model,
        });
    }
    Ok(match model {
        Model::MiniLmInt8 => Box::new(OrtMiniLm::new(files, config.threads)?),
        Model::WordLlama => Box::new(WordLlama::new(files)?),
    })
}

/// Scales `v` to unit length in place; a zero vector stays zero.
pub(crate) fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in v.iter_mut() {
            *x /= norm;
        }
    }
}
