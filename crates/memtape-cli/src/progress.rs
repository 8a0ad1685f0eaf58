//! Progress for long work (model downloads, reindexing, benchmarks): a spinner with the
//! current step and the time taken, drawn on stderr only when it is a terminal and
//! `--quiet` is not given; otherwise nothing at all.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::ctx::Ctx;

/// A spinner on stderr, or nothing.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// Starts a spinner showing `message`: hidden when stderr is not a terminal or with
    /// `--quiet`.
    pub fn spinner(ctx: &Ctx, message: &str) -> Progress {
        let shown = ctx.progress() && std::io::stderr().is_terminal();
        let bar = if shown {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template("{spinner} {wide_msg} {elapsed}") {
                bar.set_style(style);
            }
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        } else {
            ProgressBar::hidden()
        };
        bar.set_message(message.to_owned());
        Progress { bar }
    }

    /// Shows how far a job of `total` steps is (`done` of them), as a bar once the job is
    /// big enough to be worth one.
    pub fn update(&self, done: usize, total: usize) {
        if self.bar.is_hidden() || total < 1000 {
            return;
        }
        if self.bar.length() != Some(total as u64) {
            if let Ok(style) =
                ProgressStyle::with_template("{wide_msg} {bar:30} {pos}/{len} {elapsed}")
            {
                self.bar.set_style(style);
            }
            self.bar.set_length(total as u64);
        }
        self.bar.set_position(done as u64);
    }

    /// Whether anything is drawn.
    pub fn shown(&self) -> bool {
        !self.bar.is_hidden()
    }

    /// Changes the step shown.
    pub fn message(&self, message: &str) {
        self.bar.set_message(message.to_owned());
    }

    /// Prints a line above the spinner (nothing when hidden).
    pub fn println(&self, line: &str) {
        self.bar.println(line);
    }

    /// Removes the spinner.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
