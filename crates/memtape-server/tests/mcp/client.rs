//! A real MCP client (rmcp's) and the walk through memtape's MCP server that the stdio test
//! (memtape-cli's tests/mcp.rs, against the `memtape mcp` binary) and the HTTP test (this
//! crate's tests/mcp.rs, against `/mcp` of a real server) both run: initialize, list and
//! call every tool with valid input, list and read the memory files, subscribe and receive
//! an update, get the prompt.

#![allow(dead_code, clippy::unwrap_used)] // Each test binary uses a different part.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ClientConfig, GetPromptRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ResourceUpdatedNotificationParam, SubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// The client: it records the resource-updated notifications it receives (and, when
/// asked, the resource-list-changed ones).
pub struct Client {
    updates: UnboundedSender<String>,
    lists: Option<UnboundedSender<()>>,
}

impl Client {
    /// A client and the receiving end of its update notifications.
    pub fn new() -> (Self, UnboundedReceiver<String>) {
        let (tx, rx) = unbounded_channel();
        (
            Client {
                updates: tx,
                lists: None,
            },
            rx,
        )
    }

    /// A client and the receiving ends of its update and list-changed notifications.
    pub fn listening() -> (Self, UnboundedReceiver<String>, UnboundedReceiver<()>) {
        let (tx, rx) = unbounded_channel();
        let (ltx, lrx) = unbounded_channel();
        (
            Client {
                updates: tx,
                lists: Some(ltx),
            },
            rx,
            lrx,
        )
    }
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default().with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.updates.send(params.uri);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(lists) = &self.lists {
            let _ = lists.send(());
        }
    }
}

/// A connected client.
pub type Connected = RunningService<RoleClient, Client>;

/// What a tool answered: its text and whether it is flagged as an error.
pub async fn call(client: &Connected, name: &str, args: Value) -> (String, bool) {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    let result = client
        .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let text = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n");
    (text, result.is_error == Some(true))
}

/// A tool call that must succeed; its text.
pub async fn ok(client: &Connected, name: &str, args: Value) -> String {
    let (text, error) = call(client, name, args).await;
    assert!(!error, "{name} refused: {text}");
    text
}

/// A tool call that must succeed with JSON; the JSON.
pub async fn ok_json(client: &Connected, name: &str, args: Value) -> Value {
    let text = ok(client, name, args).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}: {text}"))
}

/// The text of the memory file at `uri`.
pub async fn read(client: &Connected, uri: &str) -> String {
    let result = client
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .unwrap_or_else(|e| panic!("{uri}: {e}"));
    match &result.contents[0] {
        rmcp::model::ResourceContents::TextResourceContents { text, uri: u, .. } => {
            assert_eq!(u, uri);
            text.clone()
        }
        other => panic!("{uri}: not text: {other:?}"),
    }
}

/// Whether `name` is valid for every host.
pub fn host_safe(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The whole walk, on a fresh store, for the default agent.
pub async fn exercise(client: &Connected, updates: &mut UnboundedReceiver<String>) {
    let info = client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "memtape");
    assert!(
        info.instructions
            .as_deref()
            .unwrap()
            .contains("memory_search"),
        "{:?}",
        info.instructions
    );
    assert!(info.capabilities.resources.as_ref().unwrap().subscribe == Some(true));

    // Every tool, host-safe, with an object schema.
    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    for t in &tools {
        assert!(host_safe(&t.name), "{} is not a host-safe name", t.name);
        assert_eq!(
            t.input_schema.get("type"),
            Some(&json!("object")),
            "{}",
            t.name
        );
        assert!(t.description.is_some(), "{}", t.name);
        let schema = serde_json::to_string(&*t.input_schema).unwrap();
        assert!(
            !schema.contains("$ref"),
            "{}: every field inline: {schema}",
            t.name
        );
    }
    names.sort();
    let mut expected: Vec<String> = memtape::tools::registry()
        .iter()
        .map(|s| s.function_name())
        .chain(
            [
                "tape_append",
                "tape_history",
                "tape_search",
                "tape_context",
                "memory_consolidate",
                "memory_extract",
                "memory_emerge",
                "memory_dropped",
                "memory_restore",
                "memory_as_of",
                "memory_blame",
                "node_add",
                "node_history",
                "node_clear",
                "node_cleanup",
            ]
            .map(str::to_owned),
        )
        .collect();
    expected.sort();
    assert_eq!(names, expected);

    // The tape tools.
    let appended = ok_json(
        client,
        "tape_append",
        json!({"session": "chat", "messages": [
            {"role": "user", "content": "Hi, my name is Ada. I prefer dark mode."},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "function": {"name": "memory_search", "arguments": "{}"}}]},
            {"role": "tool", "content": "nothing", "tool_call_id": "c1"},
            {"role": "assistant", "content": "Hello Ada!"}
        ]}),
    )
    .await;
    assert_eq!(appended["ids"].as_array().unwrap().len(), 4, "{appended}");
    assert!(
        appended["captured"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["category"] == "preference"),
        "the WAL ran: {appended}"
    );
    let history = ok_json(client, "tape_history", json!({"session": "chat"})).await;
    let messages = history["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "{history}");
    assert_eq!(messages[1]["tool_calls"][0]["id"], "c1");
    assert_eq!(
        messages[3],
        json!({"role": "assistant", "content": "Hello Ada!"})
    );
    let hits = ok_json(
        client,
        "tape_search",
        json!({"query": "dark mode", "mode": "bm25", "session": "chat"}),
    )
    .await;
    let hits = hits["hits"].as_array().unwrap();
    assert!(!hits.is_empty());
    assert!(
        hits[0]["entry"]["payload"]["content"]
            .as_str()
            .unwrap()
            .contains("dark mode")
    );
    let context = ok_json(
        client,
        "tape_context",
        json!({"session": "chat", "budget": 4000, "system": "You are helpful."}),
    )
    .await;
    let prompt = context["messages"].as_array().unwrap();
    assert_eq!(prompt[0]["role"], "system");
    assert!(
        prompt[0]["content"]
            .as_str()
            .unwrap()
            .contains("You are helpful.")
    );
    assert_eq!(prompt.last().unwrap()["content"], "Hello Ada!");
    assert!(context["tokens"].as_u64().unwrap() <= 4000);
    // Time travel on the tape tools: as of the first message, one message of history,
    // no hit on what came later, and a prompt built from then.
    let first = appended["ids"][0].as_u64().unwrap();
    let then = ok_json(
        client,
        "tape_history",
        json!({"session": "chat", "as_of": first.to_string()}),
    )
    .await;
    assert_eq!(then["messages"].as_array().unwrap().len(), 1, "{then}");
    let later = ok_json(
        client,
        "tape_search",
        json!({"query": "Hello Ada", "mode": "bm25", "as_of": first.to_string()}),
    )
    .await;
    assert!(
        later["hits"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["entry"]["id"].as_u64() <= Some(first)),
        "{later}"
    );
    let past = ok_json(
        client,
        "tape_context",
        json!({"session": "chat", "budget": 4000, "as_of": first.to_string()}),
    )
    .await;
    assert_eq!(past["messages"].as_array().unwrap().len(), 2, "{past}");

    // Bub's tools.
    assert_eq!(
        ok(
            client,
            "memory_save",
            json!({"content": "Ada likes green tea."})
        )
        .await,
        "saved to long-term memory"
    );
    let blame = ok_json(client, "memory_blame", json!({"path": "MEMORY.md"})).await;
    assert_eq!(blame["lines"][0]["text"], "Ada likes green tea.", "{blame}");
    let now = ok_json(
        client,
        "memory_as_of",
        json!({"as_of": "2100-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(
        now["files"]["MEMORY.md"]["content"], "Ada likes green tea.",
        "{now}"
    );
    assert!(
        ok(client, "memory_show", json!({}))
            .await
            .contains("MEMORY.md")
    );
    assert!(
        ok(client, "memory_recall", json!({"query": "tea"}))
            .await
            .contains("green tea")
    );
    assert!(
        ok(
            client,
            "memory_daily",
            json!({"content": "Ada visited Lisbon."})
        )
        .await
        .starts_with("appended to daily notes (memory/")
    );
    // Qanot's search.
    assert!(
        ok(client, "memory_search", json!({"query": "Lisbon"}))
            .await
            .contains("Ada visited Lisbon.")
    );
    // Anthropic's memory tool.
    assert_eq!(
        ok(
            client,
            "memory",
            json!({"command": "create", "path": "/memories/notes.md", "file_text": "likes chess\n"})
        )
        .await,
        "File created successfully at: /memories/notes.md"
    );
    // MateClaw's workspace tools.
    ok(
        client,
        "write_workspace_memory_file",
        json!({"filename": "PROFILE.md", "content": "# Profile\nName: Ada\n"}),
    )
    .await;
    ok(
        client,
        "edit_workspace_memory_file",
        json!({"filename": "PROFILE.md", "oldText": "Name: Ada", "newText": "Name: Ada Lovelace"}),
    )
    .await;
    let listed = ok_json(client, "list_workspace_memory_files", json!({})).await;
    let files: Vec<&str> = listed["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["filename"].as_str().unwrap())
        .collect();
    assert!(
        files.contains(&"MEMORY.md") && files.contains(&"PROFILE.md"),
        "{listed}"
    );
    let read_back = ok_json(
        client,
        "read_workspace_memory_file",
        json!({"filename": "PROFILE.md"}),
    )
    .await;
    assert_eq!(read_back["content"], "# Profile\nName: Ada Lovelace\n");
    // Forget the daily note's change, found on the tape.
    let found = ok_json(
        client,
        "tape_search",
        json!({"query": "Lisbon", "mode": "bm25", "kind": "event"}),
    )
    .await;
    let id = found["hits"][0]["entry"]["id"].as_u64().unwrap();
    assert!(
        ok(client, "memory_forget", json!({"ids": [id]}))
            .await
            .starts_with("forgot 1 change(s)")
    );
    assert!(
        !ok(client, "memory_search", json!({"query": "Lisbon"}))
            .await
            .contains("Lisbon")
    );

    // A refusal is the tool's answer; an unknown tool is an error.
    let (text, error) = call(client, "memory_save", json!({"wrong": 1})).await;
    assert!(error, "{text}");
    assert!(text.contains("invalid input"), "{text}");
    let (text, error) = call(client, "tape_history", json!({"session": "nope"})).await;
    assert!(error && text.contains("no session nope"), "{text}");
    assert!(
        client
            .call_tool(CallToolRequestParams::new("nope"))
            .await
            .is_err(),
        "an unknown tool is an error"
    );

    // The memory files as resources.
    let resources = client.list_all_resources().await.unwrap();
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    for uri in [
        "memtape://memory/MEMORY.md",
        "memtape://memory/PROFILE.md",
        "memtape://memory/SESSION-STATE.md",
        "memtape://memory/memories/notes.md",
    ] {
        assert!(uris.contains(&uri), "{uri} in {uris:?}");
    }
    assert_eq!(
        read(client, "memtape://memory/MEMORY.md").await,
        "Ada likes green tea."
    );
    assert_eq!(
        read(client, "memtape://memory/memories/notes.md").await,
        "likes chess\n"
    );
    assert!(
        read(client, "memtape://memory/SESSION-STATE.md")
            .await
            .contains("dark mode")
    );
    assert!(
        client
            .read_resource(ReadResourceRequestParams::new("memtape://memory/NOPE.md"))
            .await
            .is_err()
    );

    // Subscribe, change the file with a tool, receive the update.
    #[allow(deprecated)] // resources/subscribe: the handshake protocols' subscription.
    client
        .subscribe(SubscribeRequestParams::new("memtape://memory/MEMORY.md"))
        .await
        .unwrap();
    ok(client, "memory_recall", json!({})).await; // A read changes nothing ...
    ok(
        client,
        "memory_save",
        json!({"content": "Ada likes oolong."}),
    )
    .await; // ... a save does.
    let uri = tokio::time::timeout(Duration::from_secs(30), updates.recv())
        .await
        .expect("an update notification")
        .unwrap();
    assert_eq!(uri, "memtape://memory/MEMORY.md");
    assert_eq!(
        read(client, "memtape://memory/MEMORY.md").await,
        "Ada likes oolong."
    );
    assert!(updates.try_recv().is_err(), "one change, one notification");
    assert!(
        ok(client, "memory_clear", json!({}))
            .await
            .starts_with("memory cleared")
    );
    let uri = tokio::time::timeout(Duration::from_secs(30), updates.recv())
        .await
        .expect("an update notification for the cleared file")
        .unwrap();
    assert_eq!(uri, "memtape://memory/MEMORY.md");

    // The memory skill.
    let prompts = client.list_prompts(None).await.unwrap();
    assert_eq!(prompts.prompts[0].name, "memory_skill");
    let prompt = client
        .get_prompt(GetPromptRequestParams::new("memory_skill"))
        .await
        .unwrap();
    let text = prompt.messages[0].content.as_text().unwrap().text.clone();
    assert!(
        text.contains("When to save") && text.contains("tape_search"),
        "{text}"
    );
}
