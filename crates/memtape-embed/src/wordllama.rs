//! [`WordLlama`]: static token embeddings (the `l2_supercat` 256-dimensional table) pooled
//! into sentence vectors.

use memtape_search::{EmbedError, Embedder};
use safetensors::{Dtype, SafeTensors};
use tokenizers::Tokenizer;

use crate::assets::{Model, ModelFiles, sha256_hex};
use crate::error::{Error, Result};
use crate::l2_normalize;
use crate::minilm::weights_id;

/// The tensor holding the token table in WordLlama's safetensors files.
const TABLE: &str = "embedding.weight";

/// WordLlama sentence embeddings: the mean of the token rows (tokenized without special
/// tokens), L2-normalised, 256 dimensions.
///
/// The F16 table is widened to f32 once at load (32000 × 256 × 4 bytes = 33 MB), which keeps
/// lookups a plain slice add. A text without tokens (the empty string) gets the zero vector.
pub struct WordLlama {
    table: Vec<f32>,
    rows: usize,
    tokenizer: Tokenizer,
    id: String,
}

impl WordLlama {
    /// Loads the token table and tokenizer from `files`.
    ///
    /// [`Embedder::id`] is `wordllama-l2-256` for the pinned weights; other weights files get
    /// `-<first 12 hex digits of their sha256>` appended.
    pub fn new(files: &ModelFiles) -> Result<Self> {
        let path = &files.weights;
        let bytes = std::fs::read(path).map_err(Error::io(path))?;
        let id = weights_id(Model::WordLlama, &sha256_hex(&bytes));
        let bad = |message: String| Error::Weights {
            path: path.clone(),
            message,
        };
        let tensors = SafeTensors::deserialize(&bytes).map_err(|e| bad(e.to_string()))?;
        let tensor = tensors
            .tensor(TABLE)
            .map_err(|e| bad(format!("no {TABLE} tensor: {e}")))?;
        let dim = Model::WordLlama.dim();
        let rows = match *tensor.shape() {
            [rows, d] if d == dim => rows,
            ref other => {
                return Err(bad(format!(
                    "{TABLE} has shape {other:?}, expected [_, {dim}]"
                )));
            }
        };
        let data = tensor.data();
        let table: Vec<f32> = match tensor.dtype() {
            Dtype::F16 => data
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            Dtype::BF16 => data
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            Dtype::F32 => data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            other => return Err(bad(format!("{TABLE} has unsupported dtype {other:?}"))),
        };

        let mut tokenizer =
            Tokenizer::from_file(&files.tokenizer).map_err(|source| Error::Tokenizer {
                path: files.tokenizer.clone(),
                source,
            })?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|source| Error::Tokenizer {
                path: files.tokenizer.clone(),
                source,
            })?;
        // No cache of merged words: WordLlama's tokenizer does not split a text into words
        // before its merges, so each entry would be a whole text (an agent's texts are
        // rarely seen twice), and its 10,000 entries held about 57 MB (docs/scaling.md,
        // "Resident memory").
        let mut model = tokenizer.get_model().clone();
        model.resize_cache(0);
        tokenizer.with_model(model);
        Ok(Self {
            table,
            rows,
            tokenizer,
            id,
        })
    }

    /// Embeds `texts`: one unit vector per text (zero for a text without tokens), in order.
    pub fn embed_texts(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let dim = Model::WordLlama.dim();
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), false)
            .map_err(|e| Error::Embed(format!("tokenizing: {e}")))?;
        encodings
            .iter()
            .map(|encoding| {
                let mut v = vec![0f32; dim];
                let mut count = 0usize;
                for &id in encoding.get_ids() {
                    let id = id as usize;
                    if id >= self.rows {
                        return Err(Error::Embed(format!(
                            "token id {id} outside the {}-row table",
                            self.rows
                        )));
                    }
                    let row = &self.table[id * dim..][..dim];
                    for (acc, x) in v.iter_mut().zip(row) {
                        *acc += x;
                    }
                    count += 1;
                }
                if count > 0 {
                    // Scaling before normalising changes nothing but keeps the mean honest.
                    let n = count as f32;
                    v.iter_mut().for_each(|x| *x /= n);
                }
                l2_normalize(&mut v);
                Ok(v)
            })
            .collect()
    }
}

/// The cosine at or below which WordLlama's vectors count as unrelated. Unrelated texts
/// score up to 0.16 against a short chat (docs/benchmarks.md); LoCoMo's recall holds for
/// floors up to 0.3.
pub const WORDLLAMA_MIN_SIMILARITY: f32 = 0.25;

impl Embedder for WordLlama {
    fn min_similarity(&self) -> f32 {
        WORDLLAMA_MIN_SIMILARITY
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        Model::WordLlama.dim()
    }

    fn embed(&self, texts: &[&str]) -> std::result::Result<Vec<Vec<f32>>, EmbedError> {
        Ok(self.embed_texts(texts)?)
    }
}

impl std::fmt::Debug for WordLlama {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WordLlama")
            .field("id", &self.id)
            .field("rows", &self.rows)
            .finish()
    }
}
