//! `memtape mcp` over stdio: the real binary spawned as a child process, as an MCP host
//! launches it, driven by rmcp's client through the same walk as the HTTP test (every tool,
//! the memory files as resources, an update notification, the prompt); the scope flags;
//! what it wrote is the store the other commands read.
#[path = "../../memtape-server/tests/mcp/client.rs"]
mod client;

use std::path::Path;
use std::process::Stdio;

use client::{Client, Connected, ok, read};
use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::json;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `memtape mcp ARGS` on the store in `data`, BM25 only, connected.
async fn launch(
    data: &Path,
    args: &[&str],
) -> (Connected, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_memtape"));
    command
        .arg("mcp")
        .args(args)
        .args(["--model", "none"])
        .env("MEMTAPE_DATA_DIR", data)
        .env_remove("MEMTAPE_MODEL");
    let (transport, _stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let (client, updates) = Client::new();
    (client.serve(transport).await.unwrap(), updates)
}

#[test]
fn every_tool_resource_notification_and_prompt_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    runtime().block_on(async {
        // No `memtape init` first: a host's first launch creates the store.
        let (client, mut updates) = launch(&data, &[]).await;
        client::exercise(&client, &mut updates).await;
        client.cancel().await.unwrap();
    });
    // The other commands read what MCP wrote.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(["history", "chat", "--json"])
        .env("MEMTAPE_DATA_DIR", &data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Hello Ada!"));
}

#[test]
fn the_scope_comes_from_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    runtime().block_on(async {
        let (ada, _) = launch(&data, &["--agent", "helper", "--user", "ada"]).await;
        ok(&ada, "memory_save", json!({"content": "Ada's own memory"})).await;
        ada.cancel().await.unwrap();

        // Another process with the same flags reads it back ...
        let (again, _) = launch(&data, &["--agent", "helper", "--user", "ada"]).await;
        assert_eq!(
            read(&again, "memtape://memory/MEMORY.md").await,
            "Ada's own memory"
        );
        again.cancel().await.unwrap();
        // ... another agent, or another tenant, does not see it.
        for flags in [
            &["--agent", "other"][..],
            &["--tenant", "acme", "--agent", "helper"][..],
        ] {
            let (other, _) = launch(&data, flags).await;
            assert!(
                other.list_all_resources().await.unwrap().is_empty(),
                "{flags:?}"
            );
            other.cancel().await.unwrap();
        }
    });
    // A bad scope is refused before MCP starts, naming what is wrong.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(["mcp", "--model", "none", "--agent", ""])
        .env("MEMTAPE_DATA_DIR", &data)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "nothing but MCP on stdout");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("agent"), "{err}");
}

/// Issue 31, section 6: a line that is not JSON gets a JSON-RPC parse error (code -32700,
/// id null) and the session goes on; a line over the limit gets one too.
#[test]
fn a_malformed_line_gets_a_parse_error_and_the_session_goes_on() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(["mcp", "--model", "none"])
        .env("MEMTAPE_DATA_DIR", dir.path().join("data"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let initialize = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}});
    writeln!(stdin, "this is not json").unwrap();
    writeln!(stdin, "{{\"jsonrpc\": \"2.0\", \"id\": 7, \"method\"").unwrap();
    writeln!(stdin, "{initialize}").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let errors: Vec<_> = lines
        .iter()
        .filter(|l| l["error"]["code"] == -32700)
        .collect();
    assert_eq!(errors.len(), 2, "{lines:?}");
    assert!(errors.iter().all(|e| e["id"].is_null()));
    assert!(
        lines
            .iter()
            .any(|l| l["id"] == 1 && l["result"]["serverInfo"]["name"] == "memtape"),
        "the session went on: {lines:?}"
    );
}

/// Without the default model's files (an empty model cache), `memtape mcp` stops with a
/// message that says how to get them, and how to run without them: `--model none` or
/// `--model wordllama`, put in the host's arguments for the server.
#[test]
fn without_the_models_files_it_says_how_to_run_without_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memtape"))
        .arg("mcp")
        .env("MEMTAPE_DATA_DIR", dir.path().join("data"))
        .env("MEMTAPE_MODELS", dir.path().join("empty-cache"))
        .env_remove("MEMTAPE_MODEL")
        .env_remove("MEMTAPE_MODEL_DIR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "nothing on the protocol's stream");
    let err = String::from_utf8(out.stderr).unwrap();
    for said in [
        "the minilm embedding model is not here",
        "empty-cache",
        "`memtape models fetch`",
        "--model none",
        "--model wordllama",
        "`memtape models fetch --model wordllama`",
        r#""args": ["mcp", "--model", "none"]"#,
    ] {
        assert!(err.contains(said), "{said} missing: {err}");
    }
}
