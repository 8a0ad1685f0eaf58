//! Which model to talk to, from the `[llm]` table of a configuration file
//! ([`LlmSettings`]) and the environment, which wins key by key: `MEMTAPE_LLM_PROVIDER`
//! (`openai`, the default, or `anthropic`), `MEMTAPE_LLM_BASE_URL`, `MEMTAPE_LLM_MODEL`,
//! `MEMTAPE_LLM_API_KEY`, and optionally `MEMTAPE_LLM_TIMEOUT` (seconds per attempt) and
//! `MEMTAPE_LLM_MAX_RETRIES`, and for Anthropic `MEMTAPE_LLM_MEMORY_TOOL` (`auto`, `native`
//! or `schema`: how the `memory` tool is declared, [`MemoryTool`]). The file names the variable that holds the key
//! (`api_key_env`) rather than the key itself, though it may hold one. With no provider,
//! URL or model set anywhere there is no model, and nothing is ever sent anywhere.

use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::http::DEFAULT_TIMEOUT;
use crate::retry::RetryPolicy;
use crate::{Anthropic, Llm, MemoryTool, OpenAi};

/// The API a model is reached through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// OpenAI-compatible chat completions (OpenAI, Ollama, vLLM, llama.cpp, LM Studio).
    OpenAi,
    /// The Anthropic Messages API.
    Anthropic,
}

/// Everything needed to reach one model.
#[derive(Clone, PartialEq)]
pub struct LlmConfig {
    /// The API.
    pub provider: Provider,
    /// Where it is served.
    pub base_url: String,
    /// The model's name.
    pub model: String,
    /// The key, if the server needs one.
    pub api_key: Option<String>,
    /// The longest one attempt may take.
    pub timeout: Duration,
    /// How failed calls are retried.
    pub retry: RetryPolicy,
    /// How the `memory` tool is declared to Anthropic (default: by the model).
    pub memory_tool: MemoryTool,
}

impl std::fmt::Debug for LlmConfig {
    /// Everything but the key, which must not reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmConfig")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .field("memory_tool", &self.memory_tool)
            .finish()
    }
}

/// The `[llm]` table of a configuration file: every key optional, an unknown key refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSettings {
    /// `openai` or `anthropic`.
    pub provider: Option<String>,
    /// Where the model is served.
    pub base_url: Option<String>,
    /// The model's name.
    pub model: Option<String>,
    /// The key itself (prefer `api_key_env`: a file that holds a key is a secret).
    pub api_key: Option<String>,
    /// The environment variable that holds the key (`OPENAI_API_KEY`, say).
    pub api_key_env: Option<String>,
    /// Seconds one attempt may take.
    pub timeout: Option<u64>,
    /// How many times a failed call is retried.
    pub max_retries: Option<u64>,
    /// How the `memory` tool is declared to Anthropic: `auto` (Anthropic's
    /// `memory_20250818` where the model has it), `native` or `schema`.
    pub memory_tool: Option<String>,
}

impl LlmSettings {
    /// The file's value for the variable `name`, as text.
    fn get(&self, name: &str) -> Option<String> {
        match name {
            "MEMTAPE_LLM_PROVIDER" => self.provider.clone(),
            "MEMTAPE_LLM_BASE_URL" => self.base_url.clone(),
            "MEMTAPE_LLM_MODEL" => self.model.clone(),
            "MEMTAPE_LLM_API_KEY" => self.api_key.clone(),
            "MEMTAPE_LLM_TIMEOUT" => self.timeout.map(|n| n.to_string()),
            "MEMTAPE_LLM_MAX_RETRIES" => self.max_retries.map(|n| n.to_string()),
            "MEMTAPE_LLM_MEMORY_TOOL" => self.memory_tool.clone(),
            _ => None,
        }
    }
}

/// The key in `[llm]` that stands for the variable `name`.
fn file_key(name: &str) -> String {
    name.trim_start_matches("MEMTAPE_LLM_").to_ascii_lowercase()
}

impl LlmConfig {
    /// The configuration in this process's environment; `None` when no model is configured.
    pub fn from_env() -> Result<Option<LlmConfig>> {
        LlmConfig::from_vars(|name| std::env::var(name).ok())
    }

    /// The configuration that `get` (a variable's value by name) describes; an empty value
    /// counts as unset.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<LlmConfig>> {
        LlmConfig::from_sources(get, &LlmSettings::default(), "")
    }

    /// The configuration of `file` (the `[llm]` table of the file `file_name`) with the
    /// variables `get` finds put over it, key by key. An error names the variable or the
    /// file's key that is wrong.
    pub fn from_sources(
        get: impl Fn(&str) -> Option<String>,
        file: &LlmSettings,
        file_name: &str,
    ) -> Result<Option<LlmConfig>> {
        // Each value with what it is called where it came from, for error messages.
        let lookup = |name: &str| -> Option<(String, String)> {
            if let Some(v) = get(name).filter(|v| !v.trim().is_empty()) {
                return Some((v, name.to_owned()));
            }
            let v = file.get(name).filter(|v| !v.trim().is_empty())?;
            Some((v, format!("{} in [llm] of {file_name}", file_key(name))))
        };
        let var = |name: &str| lookup(name).map(|(v, _)| v);
        let label = |name: &str| lookup(name).map_or_else(|| name.to_owned(), |(_, l)| l);
        let (provider, base_url, model) = (
            var("MEMTAPE_LLM_PROVIDER"),
            var("MEMTAPE_LLM_BASE_URL"),
            var("MEMTAPE_LLM_MODEL"),
        );
        if provider.is_none() && base_url.is_none() && model.is_none() {
            return Ok(None);
        }
        let provider = match provider.as_deref().map(str::trim) {
            None | Some("openai") => Provider::OpenAi,
            Some("anthropic") => Provider::Anthropic,
            Some(other) => {
                return Err(Error::Config(format!(
                    "{} is {other:?}; use openai (any OpenAI-compatible server) or anthropic",
                    label("MEMTAPE_LLM_PROVIDER")
                )));
            }
        };
        let model = model.ok_or_else(|| {
            Error::Config(
                "no model is named: set MEMTAPE_LLM_MODEL (or model in [llm] of memtape.toml)"
                    .into(),
            )
        })?;
        let base_url = base_url.unwrap_or_else(|| {
            match provider {
                Provider::OpenAi => "https://api.openai.com/v1",
                Provider::Anthropic => "https://api.anthropic.com",
            }
            .to_owned()
        });
        let number = |name: &str, max: u64| -> Result<Option<u64>> {
            var(name)
                .map(|v| match v.trim().parse::<u64>() {
                    Ok(n) if n <= max => Ok(n),
                    _ => Err(Error::Config(format!(
                        "{} is {v:?}; expected a whole number from 0 to {max}",
                        label(name)
                    ))),
                })
                .transpose()
        };
        let timeout = match number("MEMTAPE_LLM_TIMEOUT", 3600)? {
            Some(0) => {
                return Err(Error::Config(format!(
                    "{} must be at least 1",
                    label("MEMTAPE_LLM_TIMEOUT")
                )));
            }
            Some(s) => Duration::from_secs(s),
            None => DEFAULT_TIMEOUT,
        };
        let mut retry = RetryPolicy::default();
        if let Some(n) = number("MEMTAPE_LLM_MAX_RETRIES", 10)? {
            retry.max_retries = n as u32;
        }
        let memory_tool = match var("MEMTAPE_LLM_MEMORY_TOOL") {
            Some(v) => v
                .parse::<MemoryTool>()
                .map_err(|e| Error::Config(format!("{}: {e}", label("MEMTAPE_LLM_MEMORY_TOOL"))))?,
            None => MemoryTool::Auto,
        };
        let config = LlmConfig {
            memory_tool,
            provider,
            base_url,
            model: model.trim().to_owned(),
            api_key: match (var("MEMTAPE_LLM_API_KEY"), &file.api_key_env) {
                (Some(key), _) => Some(key),
                (None, Some(name)) => {
                    Some(get(name).filter(|v| !v.trim().is_empty()).ok_or_else(|| {
                        Error::Config(format!(
                            "api_key_env in [llm] of {file_name} names {name}, which is not set"
                        ))
                    })?)
                }
                (None, None) => None,
            },
            timeout,
            retry,
        };
        // Refuse a bad URL now rather than at the first call.
        config.connect()?;
        Ok(Some(config))
    }

    /// The client this configuration describes (no request is sent).
    pub fn connect(&self) -> Result<Box<dyn Llm>> {
        Ok(match self.provider {
            Provider::OpenAi => {
                let mut c = OpenAi::new(&self.base_url, &self.model)?
                    .timeout(self.timeout)
                    .retry(self.retry);
                if let Some(key) = &self.api_key {
                    c = c.api_key(key);
                }
                Box::new(c)
            }
            Provider::Anthropic => {
                let mut c = Anthropic::new(&self.base_url, &self.model)?
                    .timeout(self.timeout)
                    .retry(self.retry)
                    .memory_tool(self.memory_tool);
                if let Some(key) = &self.api_key {
                    c = c.api_key(key);
                }
                Box::new(c)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Result<Option<LlmConfig>> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        LlmConfig::from_vars(|name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn nothing_set_is_no_model() {
        assert_eq!(vars(&[]).unwrap(), None);
        assert_eq!(vars(&[("MEMTAPE_LLM_API_KEY", "sk")]).unwrap(), None);
        assert_eq!(vars(&[("MEMTAPE_LLM_MODEL", " ")]).unwrap(), None);
    }

    #[test]
    fn the_memory_tool_mode_is_read_and_checked() {
        let model = ("MEMTAPE_LLM_MODEL", "claude-3-5-haiku");
        let c = vars(&[model]).unwrap().unwrap();
        assert_eq!(c.memory_tool, MemoryTool::Auto);
        let c = vars(&[model, ("MEMTAPE_LLM_MEMORY_TOOL", "native")])
            .unwrap()
            .unwrap();
        assert_eq!(c.memory_tool, MemoryTool::Native);
        let file = LlmSettings {
            memory_tool: Some("maybe".into()),
            ..LlmSettings::default()
        };
        let err = LlmConfig::from_sources(
            |n| (n == "MEMTAPE_LLM_MODEL").then(|| "m".to_owned()),
            &file,
            "memtape.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("memory_tool in [llm] of memtape.toml")
                && err.contains("auto, native or schema"),
            "{err}"
        );
    }

    #[test]
    fn a_model_with_defaults_per_provider() {
        let c = vars(&[("MEMTAPE_LLM_MODEL", "gpt-4o-mini")])
            .unwrap()
            .unwrap();
        assert_eq!(c.provider, Provider::OpenAi);
        assert_eq!(c.base_url, "https://api.openai.com/v1");
        assert_eq!(c.timeout, DEFAULT_TIMEOUT);
        let c = vars(&[
            ("MEMTAPE_LLM_PROVIDER", "anthropic"),
            ("MEMTAPE_LLM_MODEL", "claude-haiku"),
            ("MEMTAPE_LLM_API_KEY", "sk-ant"),
            ("MEMTAPE_LLM_TIMEOUT", "5"),
            ("MEMTAPE_LLM_MAX_RETRIES", "0"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(c.provider, Provider::Anthropic);
        assert_eq!(c.base_url, "https://api.anthropic.com");
        assert_eq!(c.api_key.as_deref(), Some("sk-ant"));
        assert_eq!(c.timeout, Duration::from_secs(5));
        assert_eq!(c.retry.max_retries, 0);
        assert_eq!(c.connect().unwrap().model(), "claude-haiku");
        // The key never shows in debug output (logs).
        assert!(!format!("{c:?}").contains("sk-ant"));
    }

    #[test]
    fn the_environment_wins_over_the_file_key_by_key() {
        let file = LlmSettings {
            provider: Some("openai".into()),
            base_url: Some("http://127.0.0.1:11434/v1".into()),
            model: Some("llama3.2".into()),
            api_key_env: Some("OLLAMA_KEY".into()),
            timeout: Some(30),
            ..LlmSettings::default()
        };
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let c = LlmConfig::from_sources(
            env(&[("MEMTAPE_LLM_MODEL", "qwen"), ("OLLAMA_KEY", "k1")]),
            &file,
            "memtape.toml",
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.model, "qwen");
        assert_eq!(c.base_url, "http://127.0.0.1:11434/v1");
        assert_eq!(c.api_key.as_deref(), Some("k1"));
        assert_eq!(c.timeout, Duration::from_secs(30));
        // A missing key variable and a bad value from the file are named as the file's.
        let missing = LlmConfig::from_sources(env(&[]), &file, "memtape.toml").unwrap_err();
        assert!(missing.to_string().contains("OLLAMA_KEY"), "{missing}");
        let bad = LlmSettings {
            timeout: Some(0),
            ..file.clone()
        };
        let err =
            LlmConfig::from_sources(env(&[("OLLAMA_KEY", "k")]), &bad, "memtape.toml").unwrap_err();
        assert!(
            err.to_string().contains("timeout in [llm] of memtape.toml"),
            "{err}"
        );
        // Nothing in either: no model.
        assert_eq!(
            LlmConfig::from_sources(env(&[]), &LlmSettings::default(), "f").unwrap(),
            None
        );
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        let err = |pairs: &[(&str, &str)]| match vars(pairs) {
            Err(Error::Config(m)) => m,
            other => panic!("{pairs:?}: {other:?}"),
        };
        assert!(
            err(&[
                ("MEMTAPE_LLM_PROVIDER", "gemini"),
                ("MEMTAPE_LLM_MODEL", "m")
            ])
            .contains("MEMTAPE_LLM_PROVIDER")
        );
        assert!(
            err(&[("MEMTAPE_LLM_BASE_URL", "http://localhost:11434/v1")])
                .contains("MEMTAPE_LLM_MODEL")
        );
        assert!(
            err(&[
                ("MEMTAPE_LLM_MODEL", "m"),
                ("MEMTAPE_LLM_BASE_URL", "localhost:1")
            ])
            .contains("http://")
        );
        for (name, value) in [
            ("MEMTAPE_LLM_TIMEOUT", "0"),
            ("MEMTAPE_LLM_TIMEOUT", "soon"),
            ("MEMTAPE_LLM_TIMEOUT", "99999"),
            ("MEMTAPE_LLM_MAX_RETRIES", "-1"),
            ("MEMTAPE_LLM_MAX_RETRIES", "11"),
        ] {
            assert!(err(&[("MEMTAPE_LLM_MODEL", "m"), (name, value)]).contains(name));
        }
    }
}
