//! A `memtape serve` child process for the CLI tests, and a real HTTP client for it.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::Run;

/// A `memtape serve` child and the address it printed.
pub struct Serving {
    /// The server process.
    pub child: Child,
    /// Its base URL.
    pub base: String,
    /// What it printed when it started listening.
    pub banner: String,
    agent: ureq::Agent,
}

impl Serving {
    /// Starts `memtape --model none serve` on a free loopback port of `r`'s data directory.
    pub fn start(r: &Run, extra: &[&str]) -> Serving {
        Serving::start_with(r, "none", extra)
    }

    /// [`Serving::start`] with the embedding model `model`.
    pub fn start_with(r: &Run, model: &str, extra: &[&str]) -> Serving {
        Serving::start_env(r, model, extra, &[])
    }

    /// [`Serving::start_with`] with more environment variables.
    pub fn start_env(r: &Run, model: &str, extra: &[&str], vars: &[(&str, &str)]) -> Serving {
        let mut child = Command::new(env!("CARGO_BIN_EXE_memtape"))
            .args(["--model", model, "serve", "--addr", "127.0.0.1:0"])
            .args(extra)
            .env("MEMTAPE_DATA_DIR", r.dir.path().join("data"))
            .envs(super::no_model_settings())
            .envs(vars.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The banner, up to its last line (nothing follows it until the server stops).
        let mut banner = String::new();
        let mut reader = BufReader::new(child.stdout.as_mut().unwrap());
        while !banner.contains("stop with Ctrl-C") {
            if reader.read_line(&mut banner).unwrap() == 0 {
                break;
            }
        }
        let base = banner
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {banner:?}"))
            .to_owned();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .new_agent();
        Serving {
            child,
            base,
            banner,
            agent,
        }
    }

    /// Sends `method path` with an optional JSON body and key: the status and JSON body.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        key: Option<&str>,
    ) -> (u16, Value) {
        self.try_call(method, path, body, key)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// [`Serving::call`], with a broken connection as an error instead of a panic.
    pub fn try_call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        key: Option<&str>,
    ) -> Result<(u16, Value), ureq::Error> {
        let url = format!("{}{path}", self.base);
        let auth = key.map(|k| format!("Bearer {k}"));
        let mut response = if method == "GET" {
            let mut r = self.agent.get(&url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.call()?
        } else {
            let mut r = self.agent.post(&url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.send_json(body.unwrap_or(Value::Null))?
        };
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string()?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// The value of the unlabelled metric `name` in the server's `/metrics` (loopback needs
    /// no key), or a panic showing what was there.
    pub fn metric(&self, name: &str) -> f64 {
        let mut response = self
            .agent
            .get(format!("{}/metrics", self.base))
            .call()
            .unwrap();
        let text = response.body_mut().read_to_string().unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
    }

    /// Sends SIGKILL (the process dies at once, mid-write; [`Serving::terminate_killed`]
    /// then waits for it).
    pub fn kill(&self) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-KILL", &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    /// Sends SIGTERM and waits; returns the exit code and the rest of stdout.
    pub fn terminate(mut self) -> (Option<i32>, String) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        // Both pipes drained, so a server with much to say can still exit.
        let stderr = self.child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                let mut sink = Vec::new();
                let _ = e.read_to_end(&mut sink);
            })
        });
        let mut rest = String::new();
        if let Some(mut stdout) = self.child.stdout.take() {
            stdout.read_to_string(&mut rest).unwrap();
        }
        let status = self.child.wait().unwrap();
        if let Some(t) = stderr {
            t.join().unwrap();
        }
        (status.code(), rest)
    }

    /// Waits for a server that was killed.
    pub fn terminate_killed(mut self) -> Option<i32> {
        self.child.wait().ok().and_then(|s| s.code())
    }
}

impl Drop for Serving {
    /// A test that fails before it stops its server does not leave the server running.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
