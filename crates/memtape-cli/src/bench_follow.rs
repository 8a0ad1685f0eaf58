//! `memtape bench follow`: two `memtape serve` processes on one PostgreSQL database, each
//! with its own data directory (its own search index); appends acknowledged by server A,
//! and how long until server B finds them: by BM25 (a search catches the index up first),
//! and by vector search (B's tape watcher, woken by NOTIFY, indexes and embeds in the
//! background). Reports p50/p99 of both over the probes.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Args;
use serde::Serialize;
use serde_json::{Value, json};

use crate::bench::write_report;
use crate::ctx::{Ctx, ModelArgs};

/// `memtape bench follow`.
#[derive(Args)]
pub struct FollowBenchArgs {
    /// The PostgreSQL database both servers use (an empty one, or one memtape already
    /// uses: the probes go to a session of their own).
    #[arg(long, value_name = "URL")]
    database: String,
    /// How many appends to follow.
    #[arg(long, default_value_t = 200)]
    probes: usize,
    /// How long B may take to find one before the run fails, in seconds.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Also write the JSON report here.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    #[command(flatten)]
    models: ModelArgs,
}

#[derive(Serialize)]
struct Delays {
    /// Milliseconds from A's acknowledgement to B's first answer that holds the append.
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

#[derive(Serialize)]
struct Report {
    probes: usize,
    model: String,
    /// B finds the append with BM25.
    bm25: Delays,
    /// B finds the append with vector search (only once it has embedded it).
    vector: Option<Delays>,
    /// A's append latency (POST to acknowledgement), for scale.
    append: Delays,
}

/// A `memtape serve` child on a scratch data directory.
struct Server {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(model: &str, database: &str) -> Result<Server> {
        let dir = tempfile::tempdir()?;
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--model", model, "serve", "--addr", "127.0.0.1:0"])
            .args(["--database", database])
            .env("MEMTAPE_DATA_DIR", dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting memtape serve")?;
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().context("no stdout")?).read_line(&mut line)?;
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .context("memtape serve printed no address")?
            .to_owned();
        Ok(Server {
            child,
            base,
            _dir: dir,
        })
    }

    fn stop(mut self) -> Result<()> {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        let status = self.child.wait()?;
        if !status.success() {
            bail!("memtape serve exited with {status}");
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn delays(mut ms: Vec<f64>) -> Delays {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    Delays {
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: at(1.0),
    }
}

/// Runs the benchmark.
pub fn run(ctx: &Ctx, a: &FollowBenchArgs, out: &mut impl Write) -> Result<()> {
    if a.probes == 0 {
        bail!("--probes must be at least 1");
    }
    let model = ctx.clone().models(&a.models).models.model;
    let model = clap::ValueEnum::to_possible_value(&model)
        .map_or("none".into(), |v| v.get_name().to_owned());
    let server_a = Server::start(&model, &a.database)?;
    let server_b = Server::start(&model, &a.database)?;
    let agent = memtape_bench::serve::http_agent();
    let finds = |mode: &str, word: &str| -> Result<bool> {
        let url = format!("{}/v1/search?q={word}&mode={mode}&limit=5", server_b.base);
        let body: Value = agent.get(&url).call()?.body_mut().read_json()?;
        Ok(body["hits"].as_array().is_some_and(|hits| {
            hits.iter()
                .any(|h| h["entry"]["payload"]["content"].as_str() == Some(word))
        }))
    };
    let vectors = model != "none";
    let deadline = Duration::from_secs(a.timeout);
    let (mut bm25, mut vector, mut append) = (Vec::new(), Vec::new(), Vec::new());
    let salt = fastrand::u32(..);
    for i in 0..a.probes {
        let word = format!("followprobe{salt:x}n{i}");
        let sent = Instant::now();
        let status = agent
            .post(&format!(
                "{}/v1/sessions/bench-follow/messages",
                server_a.base
            ))
            .send_json(json!({"role": "user", "content": word}))?
            .status();
        if status.as_u16() != 201 {
            bail!("server A answered {status} to an append");
        }
        let acked = Instant::now();
        append.push((acked - sent).as_secs_f64() * 1000.0);
        let wait_for = |mode: &str| -> Result<f64> {
            loop {
                if finds(mode, &word)? {
                    return Ok(acked.elapsed().as_secs_f64() * 1000.0);
                }
                if acked.elapsed() > deadline {
                    bail!("server B did not find probe {i} by {mode} within {deadline:?}");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        bm25.push(wait_for("bm25")?);
        if vectors {
            vector.push(wait_for("vector")?);
        }
    }
    server_a.stop()?;
    server_b.stop()?;
    let report = Report {
        probes: a.probes,
        model,
        bm25: delays(bm25),
        vector: vectors.then(|| delays(vector)),
        append: delays(append),
    };
    write_report(&report, a.out.as_deref(), out)
}
