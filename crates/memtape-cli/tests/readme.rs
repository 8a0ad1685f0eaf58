//! The README's tour, run exactly as written, twice in one working directory: every command
//! between the tour markers must succeed both times, with the freshly built `memtape` first
//! on PATH. And its curl examples, run against a real `memtape serve`, and its MCP entry,
//! launched as a host would.

use crate::common;
use std::path::Path;
use std::process::Command;

#[test]
fn the_readme_tour_runs_as_written_twice_in_one_directory() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let start = readme.find("<!-- tour -->").expect("README has a tour");
    let end = readme
        .find("<!-- /tour -->")
        .expect("README's tour is closed");
    let block = &readme[start..end];
    let script: String = block
        .lines()
        .skip_while(|l| !l.starts_with("```sh"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        script.contains("memtape init"),
        "the tour lost its commands:\n{script}"
    );

    let work = tempfile::tempdir().unwrap();
    for run in 1..=2 {
        let stdout = tour(&script, work.path());
        check(&stdout, run);
    }
    // Each run made its own store in the directory.
    let stores = std::fs::read_dir(work.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("memtape.db").exists())
        .count();
    assert_eq!(stores, 2);
    assert!(work.path().join("backup.jsonl").metadata().unwrap().len() > 0);
}

/// Runs the tour's script in `work`; returns its stdout.
fn tour(script: &str, work: &Path) -> String {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_memtape")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .env("PATH", path)
        .env_remove("MEMTAPE_DATA_DIR")
        .current_dir(work)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tour failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// What the tour's comments promise, on run `run`.
fn check(stdout: &str, run: usize) {
    let thread_line = stdout
        .lines()
        .position(|l| l.starts_with("#1 message user: Hi, I'm Ada"))
        .unwrap();
    let thread: Vec<&str> = stdout.lines().skip(thread_line).take(4).collect();
    assert!(
        thread[3].starts_with("#7 message assistant: Checking the ledger"),
        "{thread:?}"
    );
    // After `consolidate chat-1 3` (which prints the pointer event's id, 8) history starts at 5.
    assert!(
        stdout.contains("8\n#5 message user: Why was I charged twice?\n#7 message assistant: Checking the ledger...\nchat-1 "),
        "{stdout}"
    );
    // The semantic search puts Ada's stated preference (or its imported copy) first; BM25 with filters finds the
    // assistant's refund message; reindex rebuilds from every entry with text (the anchor and the pointer have none).
    let search = stdout.lines().find(|l| l.contains("] #")).unwrap();
    assert!(
        search.ends_with("message user: Hi, I'm Ada. I prefer dark mode."),
        "{stdout}"
    );
    assert!(
        stdout.contains("[chat-1] #6 message assistant: A retry bug; refunded."),
        "{stdout}"
    );
    assert!(
        stdout.contains("indexed 11 entries through #14"),
        "{stdout}"
    );
    // The memory part: the WAL's capture is found, versioned, synced to markdown.
    assert!(
        stdout.contains(r#"{"file":"MEMORY.md","line":2,"content":"- I prefer dark mode"}"#),
        "{stdout}"
    );
    assert!(stdout.contains("\nv3\t#"), "{stdout}");
    // Blame leads the WAL's lines to the message; as of entry 2, memory had one version.
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("\twal\t#1@chat-1\t") && l.ends_with("I prefer dark mode.")),
        "{stdout}"
    );
    // `memory show` at the start, and `memory show --as-of 2` after three more versions.
    assert_eq!(
        stdout.matches(": version 1, 2 file(s)\n").count(),
        2,
        "{stdout}"
    );
    assert!(stdout.contains("+++ b/memories/ada.md\n"), "{stdout}");
    assert!(stdout.contains("wrote SESSION-STATE.md\n"), "{stdout}");
    assert!(
        stdout.contains("**preference**: I prefer dark mode.\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(r#"[{"category":"correction","text":"Actually, call me Ada Lovelace."}"#),
        "{stdout}"
    );
    // The context: the memory block carries the WAL's capture; /new archives and clears.
    let at = stdout
        .find("{\"messages\"")
        .unwrap_or_else(|| panic!("no context JSON in {stdout}"));
    let context: serde_json::Value = serde_json::Deserializer::from_str(&stdout[at..])
        .into_iter()
        .next()
        .unwrap()
        .unwrap();
    assert!(context["tokens"].as_u64().unwrap() > 0);
    let system = context["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("You are a helpful assistant.") && system.contains("<memory>"),
        "{system}"
    );
    assert!(system.contains("I prefer dark mode"), "{system}");
    assert!(
        stdout.contains("session=chat-1 cleared"),
        "run {run}: {stdout}"
    );
}

/// The curl examples under the first command, against `memtape serve` (on a free port
/// instead of 7077): each succeeds and answers JSON; the history holds the message posted
/// and the search finds it.
#[test]
fn the_readme_curl_examples_run_against_memtape_serve() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let start = readme
        .find("<!-- curl -->")
        .expect("README has curl examples");
    let end = readme
        .find("<!-- /curl -->")
        .expect("README's curl examples are closed");
    let script: String = readme[start..end]
        .lines()
        .skip_while(|l| !l.starts_with("```sh"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .map(|l| format!("{l}\n"))
        .collect();
    let commands: Vec<String> = script
        .replace("\\\n", " ")
        .lines()
        .filter(|l| l.starts_with("curl"))
        .map(str::to_owned)
        .collect();
    assert_eq!(commands.len(), 3, "{script}");
    let r = common::Run::new();
    let s = common::serving::Serving::start(&r, &[]);
    let host = s.base.trim_start_matches("http://").to_owned();
    let mut answers = Vec::new();
    for command in &commands {
        let command = command.replace("localhost:7077", &host);
        let out = Command::new("sh").args(["-c", &command]).output().unwrap();
        assert!(
            out.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{command}: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        answers.push(body);
    }
    assert_eq!(
        answers[0]["ids"].as_array().unwrap().len(),
        1,
        "{}",
        answers[0]
    );
    assert_eq!(
        answers[1]["messages"][0]["content"],
        "Hi, I am Ada. I prefer dark mode."
    );
    assert!(
        !answers[2]["hits"].as_array().unwrap().is_empty(),
        "{}",
        answers[2]
    );
    let (code, _) = s.terminate();
    assert_eq!(code, Some(0));
}

/// The MCP entry under "Connect your agent", launched as an MCP host launches it (its
/// command and arguments, the built `memtape` for `memtape`): it answers the handshake as
/// memtape and lists the memory tools.
#[test]
fn the_readme_mcp_entry_launches_a_working_server() {
    use std::io::Write;
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let start = readme
        .find("<!-- mcp -->")
        .expect("README has an MCP entry");
    let end = readme
        .find("<!-- /mcp -->")
        .expect("README's MCP entry is closed");
    let json: String = readme[start..end]
        .lines()
        .skip_while(|l| !l.starts_with("```json"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect::<Vec<_>>()
        .join("\n");
    let entry: serde_json::Value = serde_json::from_str(&json).unwrap();
    let server = &entry["mcpServers"]["memtape"];
    assert_eq!(server["command"], "memtape");
    let args: Vec<&str> = server["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let r = common::Run::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(&args)
        .env("MEMTAPE_DATA_DIR", r.dir.path().join("data"))
        .env_remove("MEMTAPE_MODEL")
        .envs(common::no_model_settings())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for message in [
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "readme", "version": "1"}}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    ] {
        writeln!(stdin, "{message}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        lines
            .iter()
            .any(|l| l["id"] == 1 && l["result"]["serverInfo"]["name"] == "memtape"),
        "{lines:?} {stderr}"
    );
    let tools = lines
        .iter()
        .find(|l| l["id"] == 2)
        .unwrap_or_else(|| panic!("no tools/list answer: {lines:?} {stderr}"));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"memory_save") && names.contains(&"tape_search"),
        "{names:?}"
    );
}
