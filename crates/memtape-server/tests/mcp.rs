//! MCP over streamable HTTP at `/mcp` of a real server on 127.0.0.1, with rmcp's client:
//! the whole walk (every tool, the memory files as resources, an update notification, the
//! prompt), keys (none, a wrong one, a read key) and tenant isolation with two keys.
#[path = "mcp/client.rs"]
pub(crate) mod client;

use crate::common::Server;
use client::{Client, Connected, call, ok, ok_json, read};
use memtape_server::{KeyStore, Role};
use rmcp::ServiceExt;
use rmcp::model::ReadResourceRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Connects to `url` with `key`, as a host would.
async fn connect(
    url: &str,
    key: Option<&str>,
) -> Result<(Connected, tokio::sync::mpsc::UnboundedReceiver<String>), String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    if let Some(k) = key {
        config = config.auth_header(k.to_owned());
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    let (client, updates) = Client::new();
    let connected = client.serve(transport).await.map_err(|e| e.to_string())?;
    Ok((connected, updates))
}

#[test]
fn every_tool_resource_notification_and_prompt_over_http() {
    let s = Server::start();
    let url = s.url("/mcp");
    runtime().block_on(async {
        let (client, mut updates) = connect(&url, None).await.unwrap();
        client::exercise(&client, &mut updates).await;
        client.cancel().await.unwrap();
    });
    // What MCP wrote is what REST reads.
    let (status, history) = s.get("/v1/sessions/chat/history");
    assert_eq!(status, 200);
    assert_eq!(history["messages"].as_array().unwrap().len(), 4);
}

#[test]
fn agent_and_user_come_from_the_query() {
    let s = Server::start();
    let url = s.url("/mcp?agent=helper&user=ada");
    runtime().block_on(async {
        let (client, _) = connect(&url, None).await.unwrap();
        ok(
            &client,
            "memory_save",
            json!({"content": "Ada's own memory"}),
        )
        .await;
        client.cancel().await.unwrap();
    });
    let (_, shown) = s.post(
        "/v1/tools/memory.show?agent=helper&user=ada",
        &json!({"input": {}}),
    );
    assert!(
        shown["text"].as_str().unwrap().contains("MEMORY.md"),
        "{shown}"
    );
    let (_, other) = s.post("/v1/tools/memory.recall", &json!({"input": {}}));
    assert!(
        !other["text"].as_str().unwrap().contains("Ada's own memory"),
        "the default agent's memory is another's: {other}"
    );
    runtime().block_on(async {
        // A bad agent name: refused at initialization, naming it.
        let err = connect(&s.url("/mcp?agent=a%00b"), None)
            .await
            .err()
            .unwrap();
        assert!(err.contains("agent"), "{err}");
    });
}

#[test]
fn keys_decide_the_tenant_and_a_read_key_cannot_write() {
    let s = Server::start();
    let keys = KeyStore::open(s.dir.path());
    let (acme, _) = keys.create("acme", Role::Write).unwrap();
    let (globex, _) = keys.create("globex", Role::Write).unwrap();
    let (reader, _) = keys.create("acme", Role::Read).unwrap();
    let url = s.url("/mcp");
    runtime().block_on(async {
        // No key, or a wrong one: refused before MCP starts.
        assert!(connect(&url, None).await.is_err());
        assert!(connect(&url, Some("mtk_nope_nope")).await.is_err());

        let (a, _) = connect(&url, Some(&acme)).await.unwrap();
        let (g, mut g_updates) = connect(&url, Some(&globex)).await.unwrap();
        ok(&a, "memory_save", json!({"content": "acme's secret plan"})).await;
        ok(
            &a,
            "memory",
            json!({"command": "create", "path": "/memories/acme.md", "file_text": "acme only\n"}),
        )
        .await;
        let appended = ok_json(
            &a,
            "tape_append",
            json!({"session": "chat", "messages": [{"role": "user", "content": "the acme launch code is 4711"}]}),
        )
        .await;
        let acme_message = appended["ids"][0].as_u64().unwrap();
        ok(
            &a,
            "node_add",
            json!({"session": "chat", "node": "llm", "message_id": "m1",
                "user_content": "acme's secret node", "assistant_content": "4711"}),
        )
        .await;
        let found = ok_json(
            &a,
            "tape_search",
            json!({"query": "secret plan", "mode": "bm25", "kind": "event"}),
        )
        .await;
        let acme_change = found["hits"][0]["entry"]["id"].as_u64().unwrap();

        // globex calls every tool with acme's session, entry ids, paths and filters: nothing
        // of acme's is returned, changed or named.
        let calls = [
            ("memory_save", json!({"content": "globex plan"})),
            ("memory_daily", json!({"content": "globex day"})),
            ("memory_recall", json!({"query": "secret plan"})),
            ("memory_show", json!({})),
            ("memory_forget", json!({"ids": [acme_change]})),
            ("memory_forget", json!({"ids": [acme_message]})),
            ("memory", json!({"command": "view", "path": "/memories/acme.md"})),
            ("memory", json!({"command": "view", "path": "/memories"})),
            ("memory", json!({"command": "delete", "path": "/memories/acme.md"})),
            ("memory", json!({"command": "str_replace", "path": "/memories/acme.md", "old_str": "acme", "new_str": "x"})),
            ("list_workspace_memory_files", json!({})),
            ("read_workspace_memory_file", json!({"filename": "memories/acme.md"})),
            ("edit_workspace_memory_file", json!({"filename": "MEMORY.md", "oldText": "secret", "newText": "public"})),
            ("write_workspace_memory_file", json!({"filename": "memories/acme.md", "content": "globex was here"})),
            ("memory_search", json!({"query": "secret plan launch code"})),
            ("tape_history", json!({"session": "chat"})),
            ("tape_append", json!({"session": "chat", "messages": [{"role": "user", "content": "globex hello"}]})),
            ("tape_history", json!({"session": "chat"})),
            ("tape_search", json!({"query": "launch code 4711", "mode": "bm25"})),
            ("tape_search", json!({"query": "launch code 4711", "mode": "bm25", "scope": "tenant", "session": "chat"})),
            ("tape_search", json!({"query": "secret plan", "mode": "bm25", "kind": "event", "scope": "tenant"})),
            ("tape_context", json!({"session": "chat", "budget": 2000, "message": "what is the launch code?"})),
            // Without a model these refuse; with acme's ids they must not reach acme.
            ("memory_consolidate", json!({"session": "chat", "all": true})),
            ("memory_extract", json!({"session": "chat"})),
            ("memory_emerge", json!({"days": 3})),
            ("memory_dropped", json!({})),
            ("memory_restore", json!({"id": acme_change})),
            ("memory_as_of", json!({"as_of": acme_change, "path": "MEMORY.md"})),
            ("memory_as_of", json!({"as_of": "2100-01-01T00:00:00Z"})),
            ("memory_blame", json!({"path": "MEMORY.md"})),
            ("memory_blame", json!({"path": "memories/acme.md", "as_of": acme_change})),
            ("node_history", json!({"session": "chat", "node": "llm", "message_id": "m2", "parent_message_id": "m1"})),
            ("node_add", json!({"session": "chat", "node": "llm", "message_id": "m2", "parent_message_id": "m1", "user_content": "globex", "assistant_content": "globex"})),
            ("node_clear", json!({"session": "chat", "node": "llm"})),
            ("node_cleanup", json!({"older_than_days": 1, "session": "chat"})),
            ("memory_clear", json!({})),
        ];
        let mut called: Vec<String> = calls.iter().map(|(t, _)| (*t).to_owned()).collect();
        called.sort();
        called.dedup();
        let mut every: Vec<String> = g
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        every.sort();
        assert_eq!(called, every, "every tool is called");
        for (tool, args) in calls {
            let (text, _) = call(&g, tool, args.clone()).await;
            for acme_only in ["secret", "4711", "acme only", "acme's"] {
                assert!(!text.contains(acme_only), "{tool} {args}: {text}");
            }
        }
        let (text, error) = call(&g, "memory_forget", json!({"ids": [acme_change]})).await;
        assert!(error, "another tenant's change is not globex's to forget: {text}");
        for r in g.list_all_resources().await.unwrap() {
            let content = read(&g, &r.uri).await;
            assert!(!content.contains("secret") && !content.contains("acme only"), "{content}");
        }
        assert!(
            g.read_resource(ReadResourceRequestParams::new("memtape://memory/MEMORY.md"))
                .await
                .is_err(),
            "globex cleared its memory; acme's is not there"
        );
        // acme's memory and tape are as acme left them.
        assert_eq!(read(&a, "memtape://memory/MEMORY.md").await, "acme's secret plan");
        assert_eq!(read(&a, "memtape://memory/memories/acme.md").await, "acme only\n");
        let history = ok_json(&a, "tape_history", json!({"session": "chat"})).await;
        assert_eq!(history["messages"].as_array().unwrap().len(), 1, "{history}");
        let node = ok_json(
            &a,
            "node_history",
            json!({"session": "chat", "node": "llm", "message_id": "m2", "parent_message_id": "m1"}),
        )
        .await;
        assert_eq!(node["messages"][0]["content"], "acme's secret node", "{node}");
        assert_eq!(node["messages"].as_array().unwrap().len(), 2, "{node}");

        // globex's subscribers hear of globex's changes only.
        #[allow(deprecated)]
        g.subscribe(rmcp::model::SubscribeRequestParams::new(
            "memtape://memory/MEMORY.md",
        ))
        .await
        .unwrap();
        ok(&a, "memory_save", json!({"content": "acme's second plan"})).await;
        ok(&g, "memory_save", json!({"content": "globex's own"})).await;
        let update = tokio::time::timeout(std::time::Duration::from_secs(30), g_updates.recv());
        assert_eq!(update.await.unwrap().unwrap(), "memtape://memory/MEMORY.md");
        assert!(g_updates.try_recv().is_err(), "only globex's own change");
        assert_eq!(read(&g, "memtape://memory/MEMORY.md").await, "globex's own");

        // A read key reads but cannot write.
        let (r, _) = connect(&url, Some(&reader)).await.unwrap();
        assert!(
            ok(&r, "memory_recall", json!({}))
                .await
                .contains("acme's second plan")
        );
        assert_eq!(read(&r, "memtape://memory/MEMORY.md").await, "acme's second plan");
        for (tool, args) in [
            ("memory_save", json!({"content": "overwritten"})),
            ("tape_append", json!({"session": "chat", "messages": [{"role": "user", "content": "x"}]})),
            ("tape_context", json!({"session": "chat", "budget": 1000})),
        ] {
            let (text, error) = call(&r, tool, args).await;
            assert!(error && text.contains("read"), "{tool}: {text}");
        }
        ok_json(
            &r,
            "tape_context",
            json!({"session": "chat", "budget": 1000, "record": false}),
        )
        .await;
        // The read-only hint of each registry tool is what the server enforces.
        for tool in r.list_all_tools().await.unwrap() {
            if tool.name.starts_with("tape_") {
                continue;
            }
            let read_only = tool.annotations.as_ref().unwrap().read_only_hint == Some(true);
            let (text, _) = call(&r, &tool.name, json!({})).await;
            assert_eq!(
                !text.contains("needs a write key"),
                read_only,
                "{}: {text}",
                tool.name
            );
        }
        assert_eq!(read(&a, "memtape://memory/MEMORY.md").await, "acme's second plan");
        for c in [a, g, r] {
            c.cancel().await.unwrap();
        }
    });
}

#[test]
fn stopping_ends_the_sessions_so_a_graceful_shutdown_does_not_wait_for_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let engine = memtape::Engine::init(dir.path()).unwrap();
    let state = memtape_server::AppState::new(
        engine,
        KeyStore::open(dir.path()),
        memtape_server::Limits::default(),
        true,
    );
    runtime().block_on(async {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let signal = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|stopped| *stopped).await;
        };
        let app = axum::Router::new()
            .route_service(
                "/mcp",
                memtape_server::mcp::mcp_service_until(state, signal(stop_rx.clone())),
            )
            // What the authentication middleware puts on a request.
            .layer(axum::Extension(memtape_server::Caller {
                tenant: "default".into(),
                role: Role::Admin,
                key: None,
            }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        // Graceful shutdown without a grace period: it waits for every connection.
        let server = tokio::spawn(
            axum::serve(listener, app)
                .with_graceful_shutdown(signal(stop_rx))
                .into_future(),
        );
        let (client, _) = connect(&url, None).await.unwrap();
        ok(&client, "memory_show", json!({})).await;
        stop_tx.send(true).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(60), server)
            .await
            .expect("the server stopped with a host still connected")
            .unwrap()
            .unwrap();
    });
}

#[test]
fn a_session_belongs_to_the_tenant_that_started_it() {
    let s = Server::start();
    let keys = KeyStore::open(s.dir.path());
    let (acme, _) = keys.create("acme", Role::Write).unwrap();
    let (globex, _) = keys.create("globex", Role::Write).unwrap();
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let post = |key: &str, session: Option<&str>, body: serde_json::Value| {
        let mut request = agent
            .post(&s.url("/mcp"))
            .header("Authorization", &format!("Bearer {key}"))
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-06-18");
        if let Some(id) = session {
            request = request.header("Mcp-Session-Id", id);
        }
        let mut response = request.send_json(&body).unwrap();
        let id = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        (id, response.body_mut().read_to_string().unwrap_or_default())
    };
    let (id, body) = post(
        &acme,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
    );
    let id = id.unwrap_or_else(|| panic!("no session id: {body}"));
    post(
        &acme,
        Some(&id),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    ok_raw(
        &post(
            &acme,
            Some(&id),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "memory_save", "arguments": {"content": "acme's secret plan"}}}),
        )
        .1,
    );
    // globex's key with acme's session id is refused, and learns nothing.
    let (_, body) = post(
        &globex,
        Some(&id),
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read",
            "params": {"uri": "memtape://memory/MEMORY.md"}}),
    );
    assert!(
        body.contains("another key") && !body.contains("secret"),
        "{body}"
    );
    let (_, body) = post(
        &globex,
        Some(&id),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "memory_show", "arguments": {}}}),
    );
    assert!(
        body.contains("another key") && !body.contains("MEMORY.md"),
        "{body}"
    );
    // acme's own session goes on.
    let (_, body) = post(
        &acme,
        Some(&id),
        json!({"jsonrpc": "2.0", "id": 5, "method": "resources/read",
            "params": {"uri": "memtape://memory/MEMORY.md"}}),
    );
    assert!(body.contains("acme's secret plan"), "{body}");
}

/// A raw JSON-RPC answer (an SSE event or JSON) that is a result, not an error.
fn ok_raw(body: &str) {
    assert!(
        body.contains("\"result\"") && !body.contains("\"error\""),
        "{body}"
    );
}

/// A client of `url` that listed the memory files (none yet) and subscribed to MEMORY.md,
/// with the channels its update and list-changed notifications arrive on.
async fn watching_memory(
    url: &str,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, Client>,
    tokio::sync::mpsc::UnboundedReceiver<String>,
    tokio::sync::mpsc::UnboundedReceiver<()>,
) {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()),
    );
    let (client, updates, lists) = Client::listening();
    let client = client.serve(transport).await.unwrap();
    assert!(client.list_all_resources().await.unwrap().is_empty());
    #[allow(deprecated)]
    client
        .subscribe(rmcp::model::SubscribeRequestParams::new(
            "memtape://memory/MEMORY.md",
        ))
        .await
        .unwrap();
    (client, updates, lists)
}

/// Memory changed through REST reaches MCP sessions: a subscriber of MEMORY.md hears of a
/// save made through `/v1`, and a session that listed the memory files hears when a file
/// appears, and not when one only changes.
#[test]
fn changes_made_over_rest_are_notified_over_mcp() {
    let s = Server::start();
    let url = s.url("/mcp");
    runtime().block_on(async {
        let (client, mut updates, mut lists) = watching_memory(&url).await;
        let wait = std::time::Duration::from_secs(30);

        // A new MEMORY.md: updated, and the list changed.
        let (status, body) = s.post("/v1/memory/save", &json!({"content": "Ada likes tea"}));
        assert_eq!(status, 201, "{body}");
        let uri = tokio::time::timeout(wait, updates.recv()).await.unwrap();
        assert_eq!(uri.as_deref(), Some("memtape://memory/MEMORY.md"));
        tokio::time::timeout(wait, lists.recv())
            .await
            .unwrap()
            .unwrap();

        // MEMORY.md changes again: updated only. Then a new file: the list changed once.
        let (status, body) = s.post(
            "/v1/memory/save",
            &json!({"content": "Ada likes green tea"}),
        );
        assert_eq!(status, 201, "{body}");
        let uri = tokio::time::timeout(wait, updates.recv()).await.unwrap();
        assert_eq!(uri.as_deref(), Some("memtape://memory/MEMORY.md"));
        let (status, body) = s.call(
            "PUT",
            "/v1/memories",
            Some(&json!({"path": "/memories/notes.md", "file_text": "a note"})),
            None,
        );
        assert_eq!(status, 201, "{body}");
        tokio::time::timeout(wait, lists.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(
            lists.try_recv().is_err(),
            "an edit does not change the list"
        );
        assert!(updates.try_recv().is_err(), "notes.md has no subscriber");
        client.cancel().await.unwrap();
    });
}

/// Another process on the same data directory (the CLI beside the server) announces
/// nothing to the server: its memory changes are still notified, within the server's
/// recheck interval.
#[test]
fn changes_made_by_another_process_are_notified_over_mcp() {
    let s = Server::start();
    let url = s.url("/mcp");
    // The other process: an engine of its own on the same files.
    let other = memtape::Engine::init(s.dir.path()).unwrap();
    let agent = memtape::Scope::agent("default", "default").unwrap();
    runtime().block_on(async {
        let (client, mut updates, mut lists) = watching_memory(&url).await;
        let wait = std::time::Duration::from_secs(10);
        let saved = other
            .call_tool(&agent, "memory.save", &json!({"content": "Ada likes tea"}))
            .unwrap();
        assert!(!saved.is_error, "{}", saved.text);
        let uri = tokio::time::timeout(wait, updates.recv()).await.unwrap();
        assert_eq!(uri.as_deref(), Some("memtape://memory/MEMORY.md"));
        tokio::time::timeout(wait, lists.recv())
            .await
            .unwrap()
            .unwrap();
        // Nothing changes: nothing more is notified.
        tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
        assert!(updates.try_recv().is_err(), "a recheck finds no change");
        assert!(lists.try_recv().is_err());
        client.cancel().await.unwrap();
    });
}

/// A registry tool called over MCP can name its session, as `POST /v1/tools` can: in a
/// session with Bub's view, a memory change then writes the session's memory zone on its
/// tape. A session that is not a string, or not a valid name, is the tool's refusal.
#[test]
fn registry_tools_take_a_session() {
    let s = Server::start();
    let (status, started) = s.post("/v1/sessions/bub/start", &json!({}));
    assert_eq!(status, 200, "{started}");
    let entries = |s: &Server| {
        let (status, page) = s.get("/v1/sessions/bub/entries?limit=1000");
        assert_eq!(status, 200, "{page}");
        page["entries"].as_array().unwrap().len()
    };
    let before = entries(&s);
    let url = s.url("/mcp");
    runtime().block_on(async {
        let (c, _) = connect(&url, None).await.unwrap();
        let tools = c.list_all_tools().await.unwrap();
        let save = tools.iter().find(|t| t.name == "memory_save").unwrap();
        assert!(save.input_schema["properties"]["session"].is_object());

        ok(&c, "memory_save", json!({"content": "Ada likes tea"})).await;
        assert_eq!(
            entries(&s),
            before,
            "no session named: bub's tape is untouched"
        );
        ok(
            &c,
            "memory_save",
            json!({"content": "Ada likes green tea", "session": "bub"}),
        )
        .await;
        assert!(entries(&s) > before, "the new zone is on bub's tape");
        // Bub's recommended 4 KB: a longer long-term memory is saved, with a warning.
        let long = "Ada likes green tea. ".repeat(250);
        let text = ok(
            &c,
            "memory_save",
            json!({"content": long, "session": "bub"}),
        )
        .await;
        assert!(
            text.starts_with("saved to long-term memory\nWarning: long-term memory is 5250 bytes"),
            "{text}"
        );

        let (text, error) = call(&c, "memory_save", json!({"content": "x", "session": 5})).await;
        assert!(error && text.contains("session"), "{text}");
        let (text, error) = call(
            &c,
            "memory_save",
            json!({"content": "y", "session": "a\u{1}b"}),
        )
        .await;
        assert!(error && text.contains("control character"), "{text}");
        c.cancel().await.unwrap();
    });
}

/// Issue 31, section 4: `tape_append` with an `idempotency_key` runs once: called again, it
/// answers the first answer and stores nothing; the key for other messages is refused.
#[test]
fn a_retried_tape_append_with_an_idempotency_key_stores_once() {
    let s = Server::start();
    let url = s.url("/mcp");
    runtime().block_on(async {
        let (c, _) = connect(&url, None).await.unwrap();
        let args = json!({"session": "retry", "idempotency_key": "append-1",
            "messages": [{"role": "user", "content": "my flight is 77123"}]});
        let first = ok_json(&c, "tape_append", args.clone()).await;
        let again = ok_json(&c, "tape_append", args).await;
        assert_eq!(first, again, "the first answer");
        let other = json!({"session": "retry", "idempotency_key": "append-1",
            "messages": [{"role": "user", "content": "something else"}]});
        let (text, is_error) = call(&c, "tape_append", other).await;
        assert!(is_error, "{text}");
        assert!(text.contains("another request"), "{text}");
        let history = ok_json(&c, "tape_history", json!({"session": "retry"})).await;
        assert_eq!(
            history["messages"].as_array().map(Vec::len),
            Some(1),
            "{history}"
        );
    });
}

/// Issue 31, section 5: one key may have at most `mcp_sessions_per_key` MCP sessions open;
/// past it a new session is refused with 429 naming the limit, and a closed session gives
/// its room back.
#[test]
fn a_key_may_open_only_so_many_mcp_sessions() {
    let s = Server::start_with(memtape_server::Limits {
        mcp_sessions_per_key: 3,
        ..memtape_server::Limits::default()
    });
    let url = s.url("/mcp");
    runtime().block_on(async {
        let mut open = Vec::new();
        for _ in 0..3 {
            open.push(connect(&url, None).await.unwrap().0);
        }
        let Err(refused) = connect(&url, None).await else {
            panic!("a fourth session was opened");
        };
        assert!(
            refused.contains("429") || refused.contains("limit"),
            "{refused}"
        );
        // The refusal as a client that reads it sees it.
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent();
        let mut response = agent
            .post(&url)
            .header("Accept", "application/json, text/event-stream")
            .send_json(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"}}}))
            .unwrap();
        assert_eq!(response.status().as_u16(), 429);
        let text = response.body_mut().read_to_string().unwrap();
        assert!(text.contains("3 MCP sessions"), "{text}");
        // Closing one (the client ends its session) makes room.
        open.pop().unwrap().cancel().await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match connect(&url, None).await {
                Ok((c, _)) => {
                    open.push(c);
                    break;
                }
                Err(e) => {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "no room came back: {e}"
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    });
}

/// Issue 31, section 5: 64 requests that start sessions with one key at once get exactly
/// the limit's worth: the room is taken before a session starts, so none passes it.
#[test]
fn sixty_four_sessions_started_at_once_never_pass_the_limit() {
    let s = Server::start_with(memtape_server::Limits {
        mcp_sessions_per_key: 4,
        ..memtape_server::Limits::default()
    });
    let url = s.url("/mcp");
    let barrier = std::sync::Barrier::new(64);
    let statuses: Vec<(u16, bool)> = std::thread::scope(|threads| {
        let handles: Vec<_> = (0..64)
            .map(|i| {
                let (url, barrier) = (&url, &barrier);
                threads.spawn(move || {
                    let agent = ureq::Agent::config_builder()
                        .http_status_as_error(false)
                        .build()
                        .new_agent();
                    barrier.wait();
                    let response = agent
                        .post(url)
                        .header("Accept", "application/json, text/event-stream")
                        .send_json(json!({"jsonrpc": "2.0", "id": i, "method": "initialize",
                            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "t", "version": "1"}}}))
                        .unwrap();
                    (
                        response.status().as_u16(),
                        response.headers().contains_key("mcp-session-id"),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let started = statuses
        .iter()
        .filter(|(code, id)| *code == 200 && *id)
        .count();
    let refused = statuses.iter().filter(|(code, _)| *code == 429).count();
    assert_eq!((started, refused), (4, 60), "{statuses:?}");
}

/// Issue 31, section 4: a query over 8 KiB is refused at once naming the limit, on REST,
/// as an MCP tool error (`tape_search`, `memory_search`), and the session goes on.
#[test]
fn a_huge_query_is_refused_naming_the_limit_on_every_surface() {
    let s = Server::start();
    let huge = "quokka ".repeat(150_000); // about 1 MB
    let started = std::time::Instant::now();
    let (status, body) = s.get(&format!("/v1/search?q={}&mode=bm25", "w".repeat(9000)));
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "query_too_long", "{body}");
    let url = s.url("/mcp");
    runtime().block_on(async {
        let (c, _) = connect(&url, None).await.unwrap();
        for (tool, args) in [
            ("tape_search", json!({"query": huge.clone()})),
            ("memory_search", json!({"query": huge.clone()})),
        ] {
            let (text, is_error) = call(&c, tool, args).await;
            assert!(is_error, "{tool}: {text}");
            assert!(text.contains("8192"), "{tool}: {text}");
        }
        // The session goes on.
        ok(&c, "memory_show", json!({})).await;
    });
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "refused at once, not after searching: {:?}",
        started.elapsed()
    );
}

/// Erasure over MCP: no tool by default (a prompt must not be able to make an agent erase
/// a user's history); where the operator opted in, `tape_erase_session` erases one of the
/// connection's own sessions, with a key that may write, and nothing of another user's.
#[test]
fn erasing_a_session_is_offered_only_where_the_operator_opted_in() {
    async fn tools_of(client: &Connected) -> Vec<String> {
        client
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect()
    }
    let append =
        |text: &str| json!({"session": "s1", "messages": [{"role": "user", "content": text}]});

    let plain = Server::start();
    let url = plain.url("/mcp?user=ann");
    runtime().block_on(async {
        let (client, _) = connect(&url, None).await.unwrap();
        assert!(
            !tools_of(&client)
                .await
                .contains(&"tape_erase_session".to_owned())
        );
        ok(&client, "tape_append", append("keep this")).await;
        let args = json!({"session": "s1"}).as_object().unwrap().clone();
        let refused = client
            .call_tool(
                rmcp::model::CallToolRequestParams::new("tape_erase_session").with_arguments(args),
            )
            .await;
        assert!(refused.is_err(), "{refused:?}");
        client.cancel().await.unwrap();
    });
    let (_, history) = plain.get("/v1/sessions/s1/history?user=ann");
    assert!(history.to_string().contains("keep this"));

    let s = Server::start_configured(|state| state.set_mcp_erase_own_session(true));
    let keys = KeyStore::open(s.dir.path());
    let (writer, _) = keys.create("default", Role::Write).unwrap();
    let (reader, _) = keys.create("default", Role::Read).unwrap();
    runtime().block_on(async {
        let (ann, _) = connect(&s.url("/mcp?user=ann"), Some(&writer))
            .await
            .unwrap();
        let (bob, _) = connect(&s.url("/mcp?user=bob"), Some(&writer))
            .await
            .unwrap();
        assert!(
            tools_of(&ann)
                .await
                .contains(&"tape_erase_session".to_owned())
        );
        ok(&ann, "tape_append", append("ann's secret plan")).await;
        ok(&bob, "tape_append", append("bob's own words")).await;
        let (read_only, _) = connect(&s.url("/mcp?user=ann"), Some(&reader))
            .await
            .unwrap();
        let (text, error) = call(&read_only, "tape_erase_session", json!({"session": "s1"})).await;
        assert!(error, "a read key cannot erase: {text}");
        let (text, error) = call(
            &ann,
            "tape_erase_session",
            json!({"session": "s1", "all": true}),
        )
        .await;
        assert!(error, "unknown fields are refused: {text}");
        let done = ok_json(
            &ann,
            "tape_erase_session",
            json!({"session": "s1", "reason": "asked"}),
        )
        .await;
        assert!(done["receipt"].as_u64().is_some(), "{done}");
        assert!(done["entries"].as_u64().unwrap() >= 1, "{done}");
        for c in [ann, bob, read_only] {
            c.cancel().await.unwrap();
        }
    });
    let history = |user: &str| {
        s.call(
            "GET",
            &format!("/v1/sessions/s1/history?user={user}"),
            None,
            Some(&writer),
        )
        .1
        .to_string()
    };
    assert!(
        !history("ann").contains("secret plan"),
        "{}",
        history("ann")
    );
    assert!(
        history("bob").contains("bob's own words"),
        "bob's session s1 is another session"
    );
}

#[test]
fn node_memory_tools_follow_the_thread_and_refuse_bad_ids() {
    let s = Server::start();
    let url = s.url("/mcp?agent=chatflow");
    runtime().block_on(async {
        let (client, _) = connect(&url, None).await.unwrap();
        // The node's first run: an empty history, not an error.
        let first = ok_json(
            &client,
            "node_history",
            json!({"session": "c1", "node": "llm", "message_id": "m1"}),
        )
        .await;
        assert_eq!(first, json!({"messages": []}));
        for (id, parent, text) in [("m1", None, "one"), ("m2", Some("m1"), "two"), ("m3", Some("m1"), "three")] {
            let added = ok_json(
                &client,
                "node_add",
                json!({"session": "c1", "node": "llm", "message_id": id,
                    "parent_message_id": parent, "user_content": format!("q {text}"),
                    "assistant_content": format!("a {text}")}),
            )
            .await;
            assert_eq!(added["ids"].as_array().unwrap().len(), 2, "{added}");
        }
        let history = ok_json(
            &client,
            "node_history",
            json!({"session": "c1", "node": "llm", "message_id": "m4", "parent_message_id": "m3"}),
        )
        .await;
        let texts: Vec<&str> = history["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["q one", "a one", "q three", "a three"], "m2 was regenerated");
        for (tool, args, needle) in [
            ("node_add", json!({"session": "c1", "node": "llm", "message_id": "", "user_content": "q", "assistant_content": "a"}), "message_id is empty"),
            ("node_add", json!({"session": "c1", "node": "llm", "message_id": "x".repeat(300), "user_content": "q", "assistant_content": "a"}), "at most 256"),
            ("node_add", json!({"session": "c\u{0}1", "node": "llm", "message_id": "m9", "user_content": "q", "assistant_content": "a"}), "control character"),
            ("node_add", json!({"session": "c1", "node": "llm", "message_id": "m9", "user_content": "q", "assistant_content": "a", "files": []}), "files"),
            ("node_history", json!({"session": "c1", "node": "llm"}), "message_id"),
            ("node_cleanup", json!({"older_than_days": 0}), "at least 1"),
            ("node_cleanup", json!({"older_than_days": 4294967296_u64}), "4294967296"),
        ] {
            let (text, error) = call(&client, tool, args.clone()).await;
            assert!(error, "{tool} {args}: {text}");
            assert!(text.contains(needle), "{needle:?} in {text}");
        }
        let report = ok_json(&client, "node_cleanup", json!({"older_than_days": 1, "dry_run": true})).await;
        assert_eq!(report["active"], 1, "{report}");
        let cleared = ok_json(&client, "node_clear", json!({"session": "c1", "node": "llm"})).await;
        assert!(cleared["anchor"].as_u64().is_some(), "{cleared}");
        let never = ok_json(&client, "node_clear", json!({"session": "c1", "node": "other"})).await;
        assert_eq!(never, json!({}), "a node never written: nothing to clear");
        let after = ok_json(
            &client,
            "node_history",
            json!({"session": "c1", "node": "llm", "message_id": "m4", "parent_message_id": "m3"}),
        )
        .await;
        assert_eq!(after, json!({"messages": []}));
        client.cancel().await.unwrap();
    });
    // What MCP wrote is what REST reads: the app is the connection's agent.
    let (status, body) = s.get("/v1/sessions/c1/nodes/llm/history?agent=chatflow&message_id=m1");
    assert_eq!((status, body), (200, json!({"messages": []})), "cleared");
}

/// `tape_append` takes Dify's file references (an upload of the tenant, checked as over
/// REST), `tape_history` gives them back as references or rebuilt into parts, and an
/// unknown argument, of a message or of a memory tool, is a tool error, never ignored.
#[test]
fn tape_append_takes_files_and_unknown_arguments_are_refused() {
    let s = Server::start();
    let (status, image) = s.send_raw(
        "POST",
        "/v1/files",
        &[
            ("Content-Type", "multipart/form-data; boundary=B"),
            ("Authorization", "Bearer local"),
        ],
        b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"cat.png\"\r\nContent-Type: image/png\r\n\r\n\x89PNG\r\n\x1a\nkitten\r\n--B--\r\n",
    );
    assert_eq!(status, 201, "{image}");
    let reference = image["reference"].clone();
    let url = s.url("/mcp");
    runtime().block_on(async {
        let (c, _) = connect(&url, None).await.unwrap();
        ok(
            &c,
            "tape_append",
            json!({"session": "chat", "messages": [
                {"role": "user", "content": "look", "files": [reference]}]}),
        )
        .await;
        let refs = ok_json(&c, "tape_history", json!({"session": "chat"})).await;
        assert_eq!(refs["messages"][0]["files"][0], reference, "{refs}");
        let parts = ok_json(
            &c,
            "tape_history",
            json!({"session": "chat", "attachments": "anthropic"}),
        )
        .await;
        assert_eq!(
            parts["messages"][0]["content"][1],
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png",
                "data": "iVBORw0KGgpraXR0ZW4="}}),
            "{parts}"
        );
        let context = ok_json(
            &c,
            "tape_context",
            json!({"session": "chat", "budget": 4000, "record": false, "attachments": "parts"}),
        )
        .await;
        let user = context["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "user")
            .cloned()
            .unwrap();
        assert_eq!(
            user["content"][1]["image_url"]["url"], "data:image/png;base64,iVBORw0KGgpraXR0ZW4=",
            "{context}"
        );

        let refused = [
            (
                "tape_append",
                json!({"session": "chat", "messages": [
                    {"role": "user", "content": "hi", "colour": "red"}]}),
                "colour",
            ),
            (
                "tape_append",
                json!({"session": "chat", "messages": [{"role": "user", "content": "hi",
                    "files": [{"type": "image", "transfer_method": "local_file",
                               "upload_file_id": "../../etc/passwd"}]}]}),
                "plain name",
            ),
            (
                "tape_append",
                json!({"session": "chat", "messages": [{"role": "user", "content": "hi",
                    "files": [{"type": "image", "transfer_method": "local_file",
                               "upload_file_id": "someone-elses"}]}]}),
                "no upload someone-elses",
            ),
            (
                "tape_append",
                json!({"session": "chat", "messages": [{"role": "user", "content": "hi",
                    "files": [{"type": "image", "transfer_method": "remote_url",
                               "url": "file:///etc/passwd"}]}]}),
                "http or https",
            ),
            (
                "tape_append",
                json!({"session": "chat", "messages": [{"role": "assistant",
                    "tool_calls": [{"id": "c", "type": "function",
                        "function": {"name": "f", "arguments": "{}", "strict": true}}]}]}),
                "strict",
            ),
            (
                "memory_search",
                json!({"query": "x", "fuzzy": true}),
                "fuzzy",
            ),
            (
                "memory",
                json!({"command": "view", "path": "/memories", "recursive": true}),
                "recursive",
            ),
        ];
        for (tool, args, why) in refused {
            let (text, error) = call(&c, tool, args.clone()).await;
            assert!(error, "{tool} {args}: {text}");
            assert!(text.contains(why), "{tool} {args}: {text} should say {why}");
        }
        let history = ok_json(&c, "tape_history", json!({"session": "chat"})).await;
        assert_eq!(
            history["messages"].as_array().unwrap().len(),
            1,
            "nothing refused was stored: {history}"
        );
        c.cancel().await.unwrap();
    });
}

/// `node_add` takes a turn's files as `tape_append` does, checked the same way, and
/// `node_history` gives them back.
#[test]
fn node_add_takes_files() {
    let s = Server::start();
    let url = s.url("/mcp");
    runtime().block_on(async {
        let (c, _) = connect(&url, None).await.unwrap();
        let chart = json!({"type": "image", "transfer_method": "remote_url",
                           "url": "https://example.com/chart.png"});
        ok(
            &c,
            "node_add",
            json!({"session": "c1", "node": "llm", "message_id": "m1",
                   "user_content": "q", "assistant_content": "a", "user_files": [chart]}),
        )
        .await;
        let history = ok_json(
            &c,
            "node_history",
            json!({"session": "c1", "node": "llm", "message_id": "m2", "parent_message_id": "m1"}),
        )
        .await;
        assert_eq!(
            history["messages"][0]["files"][0]["url"], chart["url"],
            "{history}"
        );
        let (text, error) = call(
            &c,
            "node_add",
            json!({"session": "c1", "node": "llm", "message_id": "m3",
                   "user_content": "q", "assistant_content": "a",
                   "user_files": [{"type": "image", "transfer_method": "local_file",
                                   "upload_file_id": "nope"}]}),
        )
        .await;
        assert!(error && text.contains("files"), "{text}");
        c.cancel().await.unwrap();
    });
}
