//! The [`Embedder`] trait: how the index turns text into vectors, whatever the backend.

/// An error from an embedding backend, boxed so backends keep their own error types.
pub type EmbedError = Box<dyn std::error::Error + Send + Sync>;

/// Turns texts into L2-normalised vectors of a fixed dimension.
///
/// Implementations live in their own crates (memtape-embed holds the ONNX Runtime MiniLM
/// and WordLlama backends) so this crate stays free of model runtimes.
pub trait Embedder: Send + Sync {
    /// A stable name for the model and its settings (e.g. `minilm-l6-v2-int8`). The index
    /// records it, so vectors of different models are never compared.
    fn id(&self) -> &str;

    /// The length of every vector this embedder returns.
    fn dim(&self) -> usize;

    /// One unit-length vector per text, in order. Batching, padding and threading are the
    /// implementation's business; callers pass batches of a few hundred texts at most.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
}
