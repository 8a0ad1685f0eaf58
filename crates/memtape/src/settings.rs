//! The memory lifecycle's settings: the `[lifecycle]` table of `memtape.toml`, with
//! nanobot's and MateClaw's defaults. Every key is optional; an unknown key, or a value
//! outside its range, is refused naming it.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// How the model keeps memory: when consolidation runs, and on what window.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LifecycleConfig {
    /// nanobot's `memory_window`: consolidation starts at this many unconsolidated
    /// messages and keeps the newest half (2 to 10000; default 100).
    pub memory_window: usize,
    /// Whether servers and `memtape chat` consolidate in the background when a model is
    /// configured (default true).
    pub consolidate: bool,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        LifecycleConfig {
            memory_window: crate::MEMORY_WINDOW,
            consolidate: true,
        }
    }
}

impl LifecycleConfig {
    /// Checks every value's range.
    pub fn validate(&self) -> Result<()> {
        if !(2..=10_000).contains(&self.memory_window) {
            return Err(Error::Config(format!(
                "memory_window is {}; it must be from 2 to 10000",
                self.memory_window
            )));
        }
        Ok(())
    }

    /// The options a consolidation runs with.
    pub fn consolidation(&self, archive_all: bool) -> crate::ConsolidateOptions {
        crate::ConsolidateOptions {
            window: self.memory_window,
            archive_all,
        }
    }
}
