//! [`OrtMiniLm`]: all-MiniLM-L6-v2 with int8 weights on ONNX Runtime, loaded at run time
//! from the cached shared library.

use std::borrow::Cow;
use std::fmt::Display;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use memtape_search::{EmbedError, Embedder};
use ort::environment::Environment;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{Session, SessionInputValue};
use ort::value::Tensor;
use tokenizers::{Tokenizer, TruncationParams};

use crate::assets::{Model, ModelFiles, sha256_hex};
use crate::error::{Error, Result};
use crate::l2_normalize;

/// The longest input, in tokens (with `[CLS]` and `[SEP]`); longer texts are truncated.
///
/// 256 is sentence-transformers' `max_seq_length` for this model, so vectors match what that
/// library computes; the tokenizer file's own 128 would cut memory entries short. Texts
/// beyond 128 tokens are rare in conversation memory, so the extra cost is small.
pub const MAX_TOKENS: usize = 256;

/// Texts per model run. Texts are sorted by length first so each run pads little.
const SUB_BATCH: usize = 32;

/// ONNX Runtime allows one environment per process, and the library is loaded only once.
static ENVIRONMENT: Mutex<Option<Environment>> = Mutex::new(None);

/// all-MiniLM-L6-v2 (int8) sentence embeddings: masked mean pooling of the last hidden
/// state, L2-normalised, 384 dimensions.
pub struct OrtMiniLm {
    session: Mutex<Session>,
    tokenizer: Tokenizer,
    inputs: Vec<(String, Input)>,
    output: String,
    id: String,
}

/// The inputs a BERT export may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    Ids,
    Mask,
    TypeIds,
}

impl OrtMiniLm {
    /// Loads the model from `files` (which must include the ONNX Runtime library) with
    /// `threads` intra-op threads.
    ///
    /// The ONNX Runtime library is loaded on first use and stays loaded for the process; a
    /// later call with a different library path reuses the first one.
    ///
    /// [`Embedder::id`] is `minilm-l6-v2-int8` for the pinned `model.onnx`; any other ONNX
    /// file (from the hub or a local folder) gets `-<first 12 hex digits of its sha256>`
    /// appended, so vectors of different files are never mixed up.
    pub fn new(files: &ModelFiles, threads: usize) -> Result<Self> {
        let runtime = files.runtime.as_deref().ok_or_else(|| {
            Error::Runtime("no ONNX Runtime library among the model files".to_string())
        })?;
        let environment = environment(runtime)?;
        let bytes = std::fs::read(&files.weights).map_err(Error::io(&files.weights))?;
        let id = weights_id(Model::MiniLmInt8, &sha256_hex(&bytes));
        let session = Session::builder(&environment)
            .map_err(runtime_error)?
            .with_optimization_level(GraphOptimizationLevel::Level3)
            .map_err(runtime_error)?
            .with_intra_threads(threads.max(1))
            .map_err(runtime_error)?
            .with_inter_threads(1)
            .map_err(runtime_error)?
            // Idle threads sleep instead of spinning: the embedder shares its process and
            // the machine with other work, where spinning costs more than it gains.
            .with_intra_op_spinning(true)
            .map_err(runtime_error)?
            .commit_from_memory(&bytes)
            .map_err(|e| Error::Runtime(format!("{}: {e}", files.weights.display())))?;

        let inputs = session
            .inputs()
            .iter()
            .map(|outlet| {
                let kind = match outlet.name() {
                    "input_ids" => Input::Ids,
                    "attention_mask" => Input::Mask,
                    "token_type_ids" => Input::TypeIds,
                    other => {
                        return Err(Error::Runtime(format!(
                            "{}: unexpected model input {other:?}",
                            files.weights.display()
                        )));
                    }
                };
                Ok((outlet.name().to_string(), kind))
            })
            .collect::<Result<Vec<_>>>()?;
        let outputs = session.outputs();
        let output = outputs
            .iter()
            .find(|o| o.name() == "last_hidden_state")
            .or_else(|| outputs.first())
            .map(|o| o.name().to_string())
            .ok_or_else(|| Error::Runtime("the model has no outputs".to_string()))?;

        let mut tokenizer =
            Tokenizer::from_file(&files.tokenizer).map_err(|source| Error::Tokenizer {
                path: files.tokenizer.clone(),
                source,
            })?;
        // The file pads every text to 128 tokens; pad each sub-batch to its longest instead.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|source| Error::Tokenizer {
                path: files.tokenizer.clone(),
                source,
            })?;

        let embedder = Self {
            session: Mutex::new(session),
            tokenizer,
            inputs,
            output,
            id,
        };
        // One run now, so a model of the wrong shape fails here rather than mid-indexing.
        let probe = embedder.embed_texts(&["memtape"])?;
        let dim = probe.first().map_or(0, Vec::len);
        if dim != Model::MiniLmInt8.dim() {
            return Err(Error::Runtime(format!(
                "{}: the model gives {dim}-dimensional vectors, expected {}",
                files.weights.display(),
                Model::MiniLmInt8.dim()
            )));
        }
        Ok(embedder)
    }

    /// Embeds `texts`: one unit vector per text, in order.
    pub fn embed_texts(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| Error::Embed(format!("tokenizing: {e}")))?;
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| encodings[i].len());
        let mut vectors = vec![Vec::new(); texts.len()];

        let mut session = self.session.lock().unwrap_or_else(PoisonError::into_inner);
        for chunk in sub_batches(&order, |i| encodings[i].len()) {
            let rows = chunk.len();
            let len = chunk
                .iter()
                .map(|&i| encodings[i].len())
                .max()
                .unwrap_or(0)
                .max(1);
            let mut ids = vec![0i64; rows * len];
            let mut mask = vec![0i64; rows * len];
            let mut type_ids = vec![0i64; rows * len];
            for (row, &i) in chunk.iter().enumerate() {
                let e = &encodings[i];
                let start = row * len;
                for (j, ((&id, &m), &t)) in e
                    .get_ids()
                    .iter()
                    .zip(e.get_attention_mask())
                    .zip(e.get_type_ids())
                    .enumerate()
                {
                    ids[start + j] = i64::from(id);
                    mask[start + j] = i64::from(m);
                    type_ids[start + j] = i64::from(t);
                }
            }
            // Pooling needs the mask after it has gone into the tensor.
            let pool_mask: Vec<f32> = mask.iter().map(|&m| m as f32).collect();
            let mut ids = Some(ids);
            let mut mask = Some(mask);
            let mut type_ids = Some(type_ids);
            let mut inputs: Vec<(Cow<'_, str>, SessionInputValue<'_>)> = Vec::new();
            for (name, kind) in &self.inputs {
                let data = match kind {
                    Input::Ids => ids.take(),
                    Input::Mask => mask.take(),
                    Input::TypeIds => type_ids.take(),
                }
                .unwrap_or_else(|| vec![0i64; rows * len]);
                let tensor = Tensor::from_array(([rows, len], data)).map_err(runtime_error)?;
                inputs.push((Cow::Borrowed(name.as_str()), tensor.into()));
            }
            let outputs = session.run(inputs).map_err(runtime_error)?;
            let (shape, hidden) = outputs[self.output.as_str()]
                .try_extract_tensor::<f32>()
                .map_err(runtime_error)?;
            let width = match **shape {
                [b, l, w] if b as usize == rows && l as usize == len && w > 0 => w as usize,
                _ => {
                    return Err(Error::Runtime(format!(
                        "unexpected output shape {:?} for a batch of {rows}×{len}",
                        &**shape
                    )));
                }
            };
            for (row, &i) in chunk.iter().enumerate() {
                let mut v = vec![0f32; width];
                let mut weight = 0f32;
                for j in 0..len {
                    let m = pool_mask[row * len + j];
                    if m == 0.0 {
                        continue;
                    }
                    weight += m;
                    let token = &hidden[(row * len + j) * width..][..width];
                    for (acc, x) in v.iter_mut().zip(token) {
                        *acc += m * x;
                    }
                }
                if weight > 0.0 {
                    v.iter_mut().for_each(|x| *x /= weight);
                }
                l2_normalize(&mut v);
                vectors[i] = v;
            }
        }
        Ok(vectors)
    }
}

impl Embedder for OrtMiniLm {
    fn id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        Model::MiniLmInt8.dim()
    }

    fn embed(&self, texts: &[&str]) -> std::result::Result<Vec<Vec<f32>>, EmbedError> {
        Ok(self.embed_texts(texts)?)
    }
}

impl std::fmt::Debug for OrtMiniLm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrtMiniLm")
            .field("id", &self.id)
            .field("inputs", &self.inputs)
            .field("output", &self.output)
            .finish_non_exhaustive()
    }
}

/// The process's ONNX Runtime environment, loading the library from `library` the first time.
fn environment(library: &Path) -> Result<Environment> {
    let mut slot = ENVIRONMENT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(environment) = slot.as_ref() {
        return Ok(environment.clone());
    }
    let environment = ort::init_from(library)
        .map_err(|e| Error::Runtime(format!("loading {}: {e}", library.display())))?
        .with_name("memtape")
        .with_telemetry(false)
        .build()
        .map_err(runtime_error)?;
    *slot = Some(environment.clone());
    Ok(environment)
}

fn runtime_error(e: impl Display) -> Error {
    Error::Runtime(e.to_string())
}

/// The embedder id for a weights file with sha256 `sha`: the model's id when it is the pinned
/// file, else the id with a hash suffix.
pub(crate) fn weights_id(model: Model, sha: &str) -> String {
    if sha == model.pinned_weights_sha256() {
        model.embedder_id().to_string()
    } else {
        format!("{}-{}", model.embedder_id(), &sha[..12.min(sha.len())])
    }
}

/// Splits `order` (indices sorted by token length) into runs of at most [`SUB_BATCH`] texts
/// whose longest is at most a quarter longer than their shortest (plus a few tokens), so
/// padding to the longest wastes little compute even in small, mixed batches.
fn sub_batches(order: &[usize], len: impl Fn(usize) -> usize) -> Vec<&[usize]> {
    let mut out = Vec::new();
    let mut start = 0;
    for end in 1..=order.len() {
        let full = end - start == SUB_BATCH;
        let spread = end < order.len() && len(order[end]) > len(order[start]) * 5 / 4 + 4;
        if end == order.len() || full || spread {
            out.push(&order[start..end]);
            start = end;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_batches_keep_similar_lengths_together_and_cover_every_text() {
        let lengths = [5usize, 6, 8, 9, 12, 30, 31, 33, 120];
        let order: Vec<usize> = (0..lengths.len()).collect();
        let batches = sub_batches(&order, |i| lengths[i]);
        let as_lengths: Vec<Vec<usize>> = batches
            .iter()
            .map(|b| b.iter().map(|&i| lengths[i]).collect())
            .collect();
        assert_eq!(
            as_lengths,
            [vec![5, 6, 8, 9], vec![12], vec![30, 31, 33], vec![120]]
        );
        let many: Vec<usize> = (0..70).collect();
        let sizes: Vec<usize> = sub_batches(&many, |_| 10).iter().map(|b| b.len()).collect();
        assert_eq!(sizes, [32, 32, 6]);
    }
}
