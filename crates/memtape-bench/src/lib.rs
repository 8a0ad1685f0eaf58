//! memtape-bench: benchmarks run as commands (`memtape bench ...`), reporting medians over
//! several runs. Nothing here is a test; tests never time anything.

pub mod context;
pub mod erase;
pub mod locomo;
pub mod locomo_qa;
pub mod scale;
pub mod serve;
pub mod store;

/// What can go wrong while benchmarking.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] memtape::Error),
    /// The benchmark's input data is missing or malformed.
    #[error("{0}")]
    Data(String),
    /// The model's first call failed, so the run stopped rather than ask every question of
    /// a provider that does not answer.
    #[error("the model's first call failed, so the run stopped: {0}")]
    Llm(memtape_llm::Error),
    /// Scratch files could not be made.
    #[error("scratch directory: {0}")]
    Io(#[from] std::io::Error),
}

/// The median of `values` (the upper one for an even count); 0 when empty.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// The `q` quantile (0..=1) of `values`, nearest rank; 0 when empty.
pub fn quantile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    if values.is_empty() {
        return 0.0;
    }
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

/// The process's peak resident memory in MB (Linux; 0 elsewhere).
pub fn peak_rss_mb() -> f64 {
    status_mb("VmHWM:")
}

/// The process's current resident memory in MB (Linux; 0 elsewhere).
pub fn rss_mb() -> f64 {
    status_mb("VmRSS:")
}

/// The process's anonymous resident memory in MB (Linux; 0 elsewhere): [`rss_mb`]
/// without the pages of mapped files (index segments the kernel may drop and read again).
pub fn rss_anon_mb() -> f64 {
    status_mb("RssAnon:")
}

/// The bytes the process has had read from storage so far, in MB (`read_bytes` of
/// /proc/self/io: page-cache misses, mapped files' included; Linux, 0 elsewhere).
pub fn read_mb() -> f64 {
    proc_figure("/proc/self/io", "read_bytes:").map_or(0.0, |bytes| bytes / 1e6)
}

/// A kB figure of /proc/self/status, in MB.
fn status_mb(field: &str) -> f64 {
    proc_figure("/proc/self/status", field).map_or(0.0, |kb| kb / 1024.0)
}

/// The number after `field` on its line of the /proc file at `path`, if any.
fn proc_figure(path: &str, field: &str) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse::<f64>().ok()
}
