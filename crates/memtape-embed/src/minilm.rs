//! [`OrtMiniLm`]: all-MiniLM-L6-v2 with int8 weights on ONNX Runtime, loaded at run time
//! from the cached shared library.

use std::borrow::Cow;
use std::fmt::Display;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use memtape_search::{EmbedError, Embedder};
use ort::environment::Environment;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{Session, SessionInputValue};
use ort::value::Tensor;
use tokenizers::{Encoding, Tokenizer, TruncationParams};

use crate::assets::{Model, ModelFiles, sha256_hex};
use crate::error::{Error, Result};
use crate::l2_normalize;

/// The longest input, in tokens (with `[CLS]` and `[SEP]`); longer texts are truncated.
///
/// 256 is sentence-transformers' `max_seq_length` for this model, so vectors match what that
/// library computes; the tokenizer file's own 128 would cut memory entries short. Texts
/// beyond 128 tokens are rare in conversation memory, so the extra cost is small.
pub const MAX_TOKENS: usize = 256;

/// ONNX Runtime allows one environment per process, and the library is loaded only once.
static ENVIRONMENT: Mutex<Option<Environment>> = Mutex::new(None);

/// all-MiniLM-L6-v2 (int8) sentence embeddings: masked mean pooling of the last hidden
/// state, L2-normalised, 384 dimensions.
///
/// Every text runs through the model on its own, so its vector depends on the text alone:
/// the int8 model quantizes each run's activations with one scale, which batch-mates would
/// otherwise shift. Parallelism comes from running texts side by side instead: one
/// single-threaded session per worker thread. Unpadded single runs also waste no compute on
/// padding, so this is as fast as length-sorted batches (docs/benchmarks.md).
pub struct OrtMiniLm {
    /// One session per worker; each worker locks its own for a whole batch.
    sessions: Vec<Mutex<Session>>,
    /// Sessions kept for single texts (searches' queries, two at a time), so a query
    /// never waits behind a background batch holding every worker session.
    single: Vec<Mutex<Session>>,
    tokenizer: Tokenizer,
    inputs: Vec<(String, Input)>,
    output: String,
    id: String,
}

/// How many sessions are kept for single texts.
const SINGLE_SESSIONS: usize = 2;

/// A text's position in the input and its vector.
type Indexed = (usize, Vec<f32>);

/// The inputs a BERT export may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    Ids,
    Mask,
    TypeIds,
}

impl OrtMiniLm {
    /// Loads the model from `files` (which must include the ONNX Runtime library) with
    /// `threads` worker sessions, each running one text at a time on one thread, and two
    /// more for single texts (queries).
    ///
    /// The ONNX Runtime library is loaded on first use and stays loaded for the process; a
    /// later call with a different library path reuses the first one.
    ///
    /// [`Embedder::id`] is `minilm-l6-v2-q8` for the pinned `model.onnx`; any other ONNX
    /// file (from the hub or a local folder) gets `-<first 12 hex digits of its sha256>`
    /// appended, so vectors of different files are never mixed up.
    pub fn new(files: &ModelFiles, threads: usize) -> Result<Self> {
        let runtime = files.runtime.as_deref().ok_or_else(|| {
            Error::Runtime("no ONNX Runtime library among the model files".to_string())
        })?;
        let environment = environment(runtime)?;
        let bytes = std::fs::read(&files.weights).map_err(Error::io(&files.weights))?;
        let id = weights_id(Model::MiniLmInt8, &sha256_hex(&bytes));
        let mut sessions = (0..threads.max(1) + SINGLE_SESSIONS)
            .map(|_| {
                Session::builder(&environment)
                    .map_err(runtime_error)?
                    .with_optimization_level(GraphOptimizationLevel::Level3)
                    .map_err(runtime_error)?
                    // ONNX Runtime's fused residual-add-and-layer-norm kernel is slower
                    // here than the two operators it replaces: 2.45 → 1.89 ms for 24
                    // tokens (docs/benchmarks.md).
                    .with_disabled_optimizers("SkipLayerNormFusion")
                    .map_err(runtime_error)?
                    .with_intra_threads(1)
                    .map_err(runtime_error)?
                    .with_inter_threads(1)
                    .map_err(runtime_error)?
                    .commit_from_memory(&bytes)
                    .map_err(|e| Error::Runtime(format!("{}: {e}", files.weights.display())))
            })
            .collect::<Result<Vec<Session>>>()?;
        let single = sessions
            .split_off(threads.max(1))
            .into_iter()
            .map(Mutex::new)
            .collect();
        let session = &sessions[0];

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
        // The file pads every text to 128 tokens; texts run alone, so no padding at all.
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
            sessions: sessions.into_iter().map(Mutex::new).collect(),
            single,
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
    ///
    /// Texts are handed out longest first to the worker sessions, which run side by side.
    /// A single text runs on the session kept for single texts, or on a free worker
    /// session if that one is busy.
    pub fn embed_texts(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        if let [text] = texts {
            let encoding = self
                .tokenizer
                .encode(*text, true)
                .map_err(|e| Error::Embed(format!("tokenizing: {e}")))?;
            let free = self
                .single
                .iter()
                .chain(&self.sessions)
                .find_map(|s| s.try_lock().ok());
            let mut session = match free {
                Some(s) => s,
                None => self.single[text.len() % self.single.len()]
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            };
            return Ok(vec![self.run(&mut session, &encoding)?]);
        }
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| Error::Embed(format!("tokenizing: {e}")))?;
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encodings[i].len()));
        let next = AtomicUsize::new(0);
        let work = |session: &Mutex<Session>| -> Result<Vec<Indexed>> {
            let mut session = session.lock().unwrap_or_else(PoisonError::into_inner);
            let mut done = Vec::new();
            while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                done.push((i, self.run(&mut session, &encodings[i])?));
            }
            Ok(done)
        };
        let workers = self.sessions.len().min(texts.len());
        let results: Vec<Result<Vec<Indexed>>> = if workers == 1 {
            vec![work(&self.sessions[0])]
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = self.sessions[..workers]
                    .iter()
                    .map(|session| scope.spawn(|| work(session)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(Error::Embed("an embedding worker panicked".to_string()))
                        })
                    })
                    .collect()
            })
        };
        let mut vectors = vec![Vec::new(); texts.len()];
        for result in results {
            for (i, v) in result? {
                vectors[i] = v;
            }
        }
        Ok(vectors)
    }

    /// Runs one tokenized text through `session`: the masked mean of the last hidden state,
    /// L2-normalised.
    fn run(&self, session: &mut Session, encoding: &Encoding) -> Result<Vec<f32>> {
        let len = encoding.len();
        if len == 0 {
            // The tokenizer adds [CLS] and [SEP], so this cannot happen with this model's
            // tokenizer; a zero vector matches nothing rather than failing the batch.
            return Ok(vec![0.0; Model::MiniLmInt8.dim()]);
        }
        let column = |values: &[u32]| values.iter().map(|&v| i64::from(v)).collect::<Vec<_>>();
        let mut inputs: Vec<(Cow<'_, str>, SessionInputValue<'_>)> = Vec::new();
        for (name, kind) in &self.inputs {
            let data = match kind {
                Input::Ids => column(encoding.get_ids()),
                Input::Mask => column(encoding.get_attention_mask()),
                Input::TypeIds => column(encoding.get_type_ids()),
            };
            let tensor = Tensor::from_array(([1, len], data)).map_err(runtime_error)?;
            inputs.push((Cow::Borrowed(name.as_str()), tensor.into()));
        }
        let outputs = session.run(inputs).map_err(runtime_error)?;
        let (shape, hidden) = outputs[self.output.as_str()]
            .try_extract_tensor::<f32>()
            .map_err(runtime_error)?;
        let width = match **shape {
            [1, l, w] if l as usize == len && w > 0 => w as usize,
            _ => {
                return Err(Error::Runtime(format!(
                    "unexpected output shape {:?} for one text of {len} tokens",
                    &**shape
                )));
            }
        };
        let mut v = vec![0f32; width];
        let mut weight = 0f32;
        for (token, &m) in hidden
            .chunks_exact(width)
            .zip(encoding.get_attention_mask())
        {
            if m == 0 {
                continue;
            }
            weight += 1.0;
            for (acc, x) in v.iter_mut().zip(token) {
                *acc += x;
            }
        }
        if weight > 0.0 {
            v.iter_mut().for_each(|x| *x /= weight);
        }
        l2_normalize(&mut v);
        Ok(v)
    }
}

/// The cosine at or below which MiniLM's vectors count as unrelated. Unrelated texts score
/// 0.04–0.13 against a short chat (docs/benchmarks.md), paraphrases 0.45 and more; LoCoMo's
/// recall is flat for floors from 0 to 0.35.
pub const MINILM_MIN_SIMILARITY: f32 = 0.3;

impl Embedder for OrtMiniLm {
    fn min_similarity(&self) -> f32 {
        MINILM_MIN_SIMILARITY
    }

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

/// ONNX Runtime (1.29 and later) starts its telemetry while the environment is created,
/// before [`ort::environment::EnvironmentBuilder::with_telemetry`] can turn it off: it
/// writes a device id and an event store under `~/.cache/Microsoft/DeveloperTools/
/// .onnxruntime/` and may upload events. This variable, read at that moment, turns all of it
/// off. memtape writes nowhere but its data and model directories and sends nothing.
const TELEMETRY_OFF: &str = "ORT_DISABLE_TELEMETRY";

/// The process's ONNX Runtime environment, loading the library from `library` the first time.
fn environment(library: &Path) -> Result<Environment> {
    let mut slot = ENVIRONMENT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(environment) = slot.as_ref() {
        return Ok(environment.clone());
    }
    if std::env::var_os(TELEMETRY_OFF).is_none_or(|v| v != "1") {
        // SAFETY: `set_var` is unsafe because C code in another thread could read the
        // environment at the same moment (Rust's own reads take std's environment lock).
        // This runs once per process, under ENVIRONMENT's lock, before ONNX Runtime is
        // loaded. memtape's binaries load the model before they start any other thread; a
        // library user who loads it while other threads run C code that reads the
        // environment should set ORT_DISABLE_TELEMETRY=1 at startup, which skips this.
        #[allow(unsafe_code)]
        unsafe {
            std::env::set_var(TELEMETRY_OFF, "1");
        }
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
/// file (or an earlier pinned build it supersedes), else the id with a hash suffix.
pub(crate) fn weights_id(model: Model, sha: &str) -> String {
    if model.is_pinned_weights(sha) {
        model.embedder_id().to_string()
    } else {
        format!("{}-{}", model.embedder_id(), &sha[..12.min(sha.len())])
    }
}
