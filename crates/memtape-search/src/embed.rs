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

    /// The cosine at or below which a document counts as unrelated to a query: vector
    /// search returns only documents above it, so a query about nothing in the index finds
    /// nothing. Each model measures its own (unrelated texts are far from orthogonal in
    /// most models); the default, 0, only drops documents pointing away from the query.
    fn min_similarity(&self) -> f32 {
        0.0
    }
}
