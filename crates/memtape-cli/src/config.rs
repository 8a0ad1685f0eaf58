//! `memtape.toml`: the configuration file, in the data directory (or where
//! `MEMTAPE_CONFIG` points). `[llm]` says which model the memory lifecycle talks to (the
//! `MEMTAPE_LLM_*` variables win key by key); `[lifecycle]` when and how it runs;
//! `[retention]` how long raw conversation is kept; `[mcp]` what MCP clients may do beyond
//! the default tools; `[attachments]` how attached files are rebuilt into content parts. No file means the defaults and no
//! model: nothing is ever sent anywhere, and nothing expires.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use memtape::{AttachmentsConfig, LifecycleConfig, RetentionConfig};
use memtape_llm::{Llm, LlmConfig, LlmSettings};
use serde::Deserialize;

use crate::ctx::Ctx;

/// The file's name in the data directory.
pub const FILE_NAME: &str = "memtape.toml";

/// The largest configuration file read (a config is a few lines).
const MAX_BYTES: u64 = 1024 * 1024;

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    llm: LlmSettings,
    #[serde(default)]
    lifecycle: LifecycleConfig,
    #[serde(default)]
    retention: RetentionConfig,
    #[serde(default)]
    mcp: McpSettings,
    #[serde(default)]
    attachments: AttachmentsConfig,
}

/// `[mcp]`: what MCP clients are offered beyond the default tools.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpSettings {
    /// Offer `tape_erase_session`: a client erases one of its own sessions (default
    /// false: an agent must not erase a user's history because a prompt told it to).
    pub erase_own_session: bool,
}

/// The configuration in effect.
#[derive(Debug)]
pub struct Config {
    /// The file it came from (which may not exist).
    pub path: PathBuf,
    /// The model, if one is configured.
    pub llm: Option<LlmConfig>,
    /// Where the model's name and address came from, when a model is configured: e.g.
    /// "model from MEMTAPE_LLM_MODEL, address from /home/ada/.local/share/memtape/memtape.toml".
    pub llm_origin: Option<String>,
    /// The lifecycle settings.
    pub lifecycle: LifecycleConfig,
    /// The retention policies and their schedule.
    pub retention: RetentionConfig,
    /// The MCP settings.
    pub mcp: McpSettings,
    /// How attached files are rebuilt into content parts (`[attachments]`, Dify's
    /// `file_upload_config`).
    pub attachments: AttachmentsConfig,
}

impl Config {
    /// The model setup a server runs with (`None` without a model), and the banner line
    /// that says so.
    pub fn server_model(&self) -> Result<(Option<memtape_server::ModelSetup>, String)> {
        let Some(llm) = &self.llm else {
            return Ok((
                None,
                format!(
                    "none (memory is kept by the caller; set MEMTAPE_LLM_MODEL or [llm] in {} \
                     for consolidation by a model)",
                    self.path.display()
                ),
            ));
        };
        let line = format!(
            "{} at {}{}",
            llm.model,
            llm.base_url,
            if self.lifecycle.consolidate {
                format!(
                    "; sessions consolidate in the background at {} messages",
                    self.lifecycle.memory_window
                )
            } else {
                String::new()
            }
        );
        let setup = memtape_server::ModelSetup {
            llm: std::sync::Arc::from(llm.connect()?),
            lifecycle: self.lifecycle.clone(),
        };
        Ok((Some(setup), line))
    }

    /// The configured model's client, or an error that says how to configure one.
    pub fn require_llm(&self) -> Result<Box<dyn Llm>> {
        let Some(llm) = &self.llm else {
            bail!(
                "no model is configured: set MEMTAPE_LLM_MODEL (and MEMTAPE_LLM_BASE_URL, \
                 MEMTAPE_LLM_PROVIDER=openai|anthropic, MEMTAPE_LLM_API_KEY as needed), or \
                 write them under [llm] in {}",
                self.path.display()
            );
        };
        Ok(llm.connect()?)
    }
}

/// The configuration for `ctx`: its data directory's `memtape.toml` (or `MEMTAPE_CONFIG`),
/// with the environment over it.
pub fn load(ctx: &Ctx) -> Result<Config> {
    let path = match std::env::var_os("MEMTAPE_CONFIG").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => ctx.data_dir()?.join(FILE_NAME),
    };
    let file = read(&path)?;
    file.lifecycle
        .validate()
        .with_context(|| format!("[lifecycle] of {}", path.display()))?;
    file.retention
        .validate()
        .with_context(|| format!("[retention] of {}", path.display()))?;
    let name = path.display().to_string();
    let get = |n: &str| std::env::var(n).ok();
    let llm = LlmConfig::from_sources(get, &file.llm, &name)?;
    let llm_origin = llm.as_ref().map(|_| origin(get, &file.llm, &name));
    Ok(Config {
        path,
        llm,
        llm_origin,
        lifecycle: file.lifecycle,
        retention: file.retention,
        mcp: file.mcp,
        attachments: file.attachments,
    })
}

/// Where the model's name and address came from: the variable that set each (which wins,
/// as in [`LlmConfig::from_sources`]), else the file `file_name`, else the provider's
/// default address.
fn origin(get: impl Fn(&str) -> Option<String>, file: &LlmSettings, file_name: &str) -> String {
    let set = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
    let source = |var: &str, in_file: &Option<String>| {
        if set(get(var)).is_some() {
            Some(var.to_owned())
        } else if set(in_file.clone()).is_some() {
            Some(file_name.to_owned())
        } else {
            None
        }
    };
    let model = source("MEMTAPE_LLM_MODEL", &file.model);
    let address = source("MEMTAPE_LLM_BASE_URL", &file.base_url);
    match (model, address) {
        (Some(m), Some(a)) if m == a => format!("model and address from {m}"),
        (Some(m), Some(a)) => format!("model from {m}, address from {a}"),
        (Some(m), None) => format!("model from {m}, the provider's default address"),
        // A configuration without a model's name is refused before this is asked.
        (None, Some(a)) => format!("address from {a}"),
        (None, None) => "the provider's default address".to_owned(),
    }
}

/// The file at `path`, or the defaults when there is none.
fn read(path: &std::path::Path) -> Result<File> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(File::default()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    if !meta.is_file() {
        bail!("{} is not a file", path.display());
    }
    if meta.len() > MAX_BYTES {
        bail!(
            "{} is {} bytes; a configuration file is at most {MAX_BYTES}",
            path.display(),
            meta.len()
        );
    }
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("{} is not UTF-8 text", path.display()))?;
    toml::from_str(&text).with_context(|| format!("{} is not a valid memtape.toml", path.display()))
}
