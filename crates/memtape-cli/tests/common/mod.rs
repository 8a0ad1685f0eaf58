//! The harness the CLI tests share: the real `memtape` binary run in a scratch directory
//! with its own data directory.

pub mod model;
pub mod serving;

use std::process::{Command, Output};

use serde_json::Value;

/// The model settings of the environment the tests run in, blanked: a test reaches a model
/// only through a memtape.toml it writes.
pub fn no_model_settings() -> Vec<(&'static str, &'static str)> {
    [
        "MEMTAPE_LLM_PROVIDER",
        "MEMTAPE_LLM_BASE_URL",
        "MEMTAPE_LLM_MODEL",
        "MEMTAPE_LLM_API_KEY",
        "MEMTAPE_LLM_TIMEOUT",
        "MEMTAPE_LLM_MAX_RETRIES",
        "MEMTAPE_CONFIG",
        // The tape stays in the scratch data directory unless a test names a database.
        "MEMTAPE_DATABASE_URL",
    ]
    .into_iter()
    .map(|name| (name, ""))
    .collect()
}

/// A scratch working directory with a data directory in it.
pub struct Run {
    /// The working directory; the data directory is `data` inside it.
    pub dir: tempfile::TempDir,
}

impl Run {
    /// A fresh directory with an initialised store.
    pub fn new() -> Self {
        let run = Run {
            dir: tempfile::tempdir().unwrap(),
        };
        run.ok(&["init"]);
        run
    }

    /// A fresh directory whose data directory does not exist yet.
    pub fn new_empty() -> Self {
        Run {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Runs `memtape ARGS` with the scratch data directory and the default model.
    pub fn cmd(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_memtape"))
            .args(args)
            .env("MEMTAPE_DATA_DIR", self.dir.path().join("data"))
            .env_remove("MEMTAPE_MODEL")
            .envs(no_model_settings())
            .current_dir(self.dir.path())
            .output()
            .unwrap()
    }

    /// Runs and expects success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd(args);
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs and expects failure with nothing on stdout; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.cmd(args);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(
            out.stdout.is_empty(),
            "a failed command printed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    /// Runs and parses stdout as JSON.
    pub fn json(&self, args: &[&str]) -> Value {
        serde_json::from_str(&self.ok(args)).unwrap()
    }

    /// A path inside the scratch directory.
    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }
}
