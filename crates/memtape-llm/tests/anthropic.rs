//! The Anthropic Messages client against a scripted server on loopback (`common`).
#![allow(clippy::unwrap_used)]

mod common;

use common::{Answer, Scripted, fast_retries, ok};
use memtape_llm::{
    Anthropic, ChatRequest, Error, Llm, MemoryTool, Message, RetryPolicy, Role, ToolCall, ToolSpec,
};
use serde_json::json;

fn conversation() -> ChatRequest {
    let call = ToolCall {
        id: "toolu_1".into(),
        name: "memory_search".into(),
        arguments: json!({"query": "Ada"}).as_object().unwrap().clone(),
    };
    let mut assistant = Message::new(Role::Assistant, "Let me look.");
    assistant.tool_calls = vec![call];
    let mut result = Message::new(Role::Tool, "Ada lives in Lisbon");
    result.tool_call_id = Some("toolu_1".into());
    let mut request = ChatRequest::new(vec![
        Message::system("You keep memory."),
        Message::user("Where does Ada live?"),
        assistant,
        result,
    ]);
    request.tools = vec![ToolSpec {
        name: "save_memory".into(),
        description: "Save memory.".into(),
        parameters: json!({"type": "object", "properties": {"memory_update": {"type": "string"}}}),
    }];
    request.force_tool = Some("save_memory".into());
    request
}

#[test]
fn a_tool_use_reply_is_read_and_the_request_follows_the_messages_api() {
    let server = Scripted::start(vec![ok(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [
            {"type": "text", "text": "Saving."},
            {"type": "tool_use", "id": "toolu_2", "name": "save_memory",
             "input": {"memory_update": "- Ada lives in Lisbon"}}
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 50, "output_tokens": 12}
    }))]);
    let llm = Anthropic::new(&server.base.replace("/v1", ""), "claude")
        .unwrap()
        .api_key("sk-ant");
    assert!(
        !format!("{llm:?}").contains("sk-ant"),
        "no key in debug output"
    );
    let reply = llm.chat(&conversation()).unwrap();
    assert_eq!(reply.content, "Saving.");
    assert_eq!(reply.tool_calls[0].id, "toolu_2");
    assert_eq!(
        reply.tool_calls[0].arguments["memory_update"],
        "- Ada lives in Lisbon"
    );
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!(reply.usage.unwrap().completion_tokens, 12);

    let seen = server.seen.lock().unwrap();
    assert_eq!(seen[0].line, "POST /v1/messages HTTP/1.1");
    let header = |name: &str| {
        seen[0]
            .headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(header("x-api-key").as_deref(), Some("sk-ant"));
    assert_eq!(header("anthropic-version").as_deref(), Some("2023-06-01"));
    let body = &seen[0].body;
    assert_eq!(body["system"], "You keep memory.");
    assert_eq!(body["max_tokens"], 1024, "the API requires a budget");
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "save_memory"})
    );
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
    // user, assistant (text + tool_use), user (tool_result): roles alternate.
    let messages = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(messages[1]["content"][1]["type"], "tool_use");
    assert_eq!(messages[1]["content"][1]["input"], json!({"query": "Ada"}));
    assert_eq!(
        messages[2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "Ada lives in Lisbon"})
    );
}

#[test]
fn overload_is_retried_and_a_long_prompt_is_a_context_error() {
    let overloaded = || {
        Answer::Reply(
            529,
            vec![("retry-after", "0".into())],
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
                .to_string(),
        )
    };
    let server = Scripted::start(vec![
        overloaded(),
        ok(json!({"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"})),
        Answer::Reply(
            400,
            Vec::new(),
            json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": "prompt is too long: 202609 tokens > 200000 maximum"}})
            .to_string(),
        ),
    ]);
    let llm = Anthropic::new(&server.base.replace("/v1", ""), "claude")
        .unwrap()
        .retry(fast_retries(2));
    let request = ChatRequest::new(vec![Message::user("hi")]);
    let reply = llm.chat(&request).unwrap();
    assert_eq!((reply.content.as_str(), reply.attempts), ("ok", 2));
    let err = llm.chat(&request).unwrap_err();
    assert!(matches!(err, Error::ContextLength { .. }), "{err:?}");
    assert_eq!(server.requests(), 3, "the context error was not retried");
}

#[test]
fn malformed_replies_are_typed_errors() {
    let server = Scripted::start(vec![
        Answer::Reply(200, Vec::new(), "{\"content\": ".into()),
        ok(json!({"id": "msg"})),
        ok(
            json!({"content": [{"type": "tool_use", "id": "t", "name": "save_memory", "input": 7}]}),
        ),
    ]);
    let llm = Anthropic::new(&server.base.replace("/v1", ""), "claude")
        .unwrap()
        .retry(RetryPolicy::none());
    let request = ChatRequest::new(vec![Message::user("hi")]);
    assert!(matches!(llm.chat(&request), Err(Error::BadReply(_))));
    assert!(matches!(llm.chat(&request), Err(Error::BadReply(_))));
    assert!(matches!(
        llm.chat(&request),
        Err(Error::BadArguments { .. })
    ));
}

fn event(v: serde_json::Value) -> String {
    format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap())
}

#[test]
fn a_stream_passes_its_text_on_and_assembles_tool_input() {
    let server = Scripted::start(vec![Answer::Stream {
        events: vec![
            event(
                json!({"type": "message_start", "message": {"usage": {"input_tokens": 25, "output_tokens": 1}}}),
            ),
            event(
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            event(json!({"type": "ping"})),
            event(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Saving"}}),
            ),
            event(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " it."}}),
            ),
            event(json!({"type": "content_block_stop", "index": 0})),
            event(
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_9", "name": "save_memory", "input": {}}}),
            ),
            event(
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"memory_update\": \"- Ada"}}),
            ),
            event(
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": " lives in Lisbon\"}"}}),
            ),
            event(json!({"type": "content_block_stop", "index": 1})),
            event(
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}}),
            ),
            event(json!({"type": "message_stop"})),
        ],
        cut: false,
    }]);
    let llm = Anthropic::new(&server.base.replace("/v1", ""), "claude").unwrap();
    let mut pieces = Vec::new();
    let reply = llm
        .chat_stream(&conversation(), &mut |t| pieces.push(t.to_owned()))
        .unwrap();
    assert_eq!(pieces, ["Saving", " it."]);
    assert_eq!(reply.tool_calls[0].id, "toolu_9");
    assert_eq!(
        reply.tool_calls[0].arguments["memory_update"],
        "- Ada lives in Lisbon"
    );
    let usage = reply.usage.unwrap();
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (25, 30));
    assert_eq!(server.seen.lock().unwrap()[0].body["stream"], true);
}

#[test]
fn an_overloaded_stream_is_retried_and_a_cut_one_is_interrupted() {
    let server = Scripted::start(vec![
        Answer::Stream {
            events: vec![event(
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            )],
            cut: false,
        },
        Answer::Stream {
            events: vec![
                event(json!({"type": "message_start", "message": {"usage": {"input_tokens": 3}}})),
                event(
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Half a"}}),
                ),
            ],
            cut: true,
        },
    ]);
    let llm = Anthropic::new(&server.base.replace("/v1", ""), "claude")
        .unwrap()
        .retry(fast_retries(2));
    let err = llm
        .chat_stream(&ChatRequest::new(vec![Message::user("hi")]), &mut |_| {})
        .unwrap_err();
    match err {
        Error::Interrupted { received, .. } => assert_eq!(received, "Half a"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        server.requests(),
        2,
        "the overload was retried, the cut stream was not"
    );
}

/// Attachments go as image and document blocks, with their bytes or by URL.
#[test]
fn attachments_are_sent_as_image_and_document_blocks() {
    use memtape_llm::{Attachment, AttachmentKind};
    let server = Scripted::start(vec![ok(json!({
        "id": "msg_1", "type": "message", "role": "assistant",
        "content": [{"type": "text", "text": "seen"}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 10, "output_tokens": 2}
    }))]);
    let mut m = Message::user("what is in these?");
    m.attachments = vec![
        Attachment {
            kind: AttachmentKind::Image,
            url: "data:image/png;base64,iVBORw0K".into(),
            name: None,
        },
        Attachment {
            kind: AttachmentKind::Document,
            url: "https://example.org/a.pdf".into(),
            name: None,
        },
    ];
    let llm = Anthropic::new(&server.base, "claude").unwrap();
    llm.chat(&ChatRequest::new(vec![m])).unwrap();
    let content = server.body(0).unwrap()["messages"][0]["content"].clone();
    assert_eq!(
        content,
        json!([
            {"type": "text", "text": "what is in these?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"}},
            {"type": "document", "source": {"type": "url", "url": "https://example.org/a.pdf"}}
        ])
    );
}

/// A request offering the `memory` tool (memtape's `/memories` tool, as a JSON schema)
/// beside another tool.
fn with_memory_tool() -> ChatRequest {
    let mut request = ChatRequest::new(vec![Message::user("Remember that I like tea.")]);
    request.tools = vec![
        ToolSpec {
            name: "memory".into(),
            description: "Files under /memories.".into(),
            parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
        },
        ToolSpec {
            name: "memory_search".into(),
            description: "Search memory.".into(),
            parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
        },
    ];
    request
}

fn reply() -> Answer {
    ok(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": "Noted."}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 5, "output_tokens": 2}
    }))
}

/// What the server saw of request `n`: its `anthropic-beta` header and its tools.
fn seen(server: &Scripted, n: usize) -> (Option<String>, serde_json::Value) {
    let seen = server.seen.lock().unwrap();
    let request = &seen[n];
    let beta = request
        .headers
        .iter()
        .find(|(k, _)| k == "anthropic-beta")
        .map(|(_, v)| v.clone());
    (beta, request.body["tools"].clone())
}

/// Seed 004 / MEMORY-TOOL.md: a model trained on Anthropic's memory tool gets it as
/// `{"type": "memory_20250818", "name": "memory"}` with the `context-management-2025-06-27`
/// beta; an older model gets the JSON-schema tool and no beta; a setting forces either.
#[test]
fn the_memory_tool_goes_as_memory_20250818_where_the_model_has_it() {
    let server = Scripted::start((0..5).map(|_| reply()).collect());
    let base = server.base.replace("/v1", "");
    let schema_tool = json!({"name": "memory", "description": "Files under /memories.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}});
    // Claude Sonnet 4.5: the trained tool.
    let sonnet = Anthropic::new(&base, "claude-sonnet-4-5-20250929").unwrap();
    sonnet.chat(&with_memory_tool()).unwrap();
    let (beta, tools) = seen(&server, 0);
    assert_eq!(beta.as_deref(), Some("context-management-2025-06-27"));
    assert_eq!(
        tools[0],
        json!({"type": "memory_20250818", "name": "memory"})
    );
    assert_eq!(tools[1]["name"], "memory_search");
    assert!(tools[1].get("type").is_none(), "{tools}");
    // Claude 3.5 Haiku has no memory tool: a plain tool, no beta.
    let haiku = Anthropic::new(&base, "claude-3-5-haiku-20241022").unwrap();
    haiku.chat(&with_memory_tool()).unwrap();
    let (beta, tools) = seen(&server, 1);
    assert_eq!(beta, None);
    assert_eq!(tools[0], schema_tool);
    // Forced either way.
    let forced = Anthropic::new(&base, "claude-3-5-haiku-20241022")
        .unwrap()
        .memory_tool(MemoryTool::Native);
    forced.chat(&with_memory_tool()).unwrap();
    assert_eq!(seen(&server, 2).1[0]["type"], "memory_20250818");
    let plain = Anthropic::new(&base, "claude-opus-4-1")
        .unwrap()
        .memory_tool(MemoryTool::Schema);
    plain.chat(&with_memory_tool()).unwrap();
    let (beta, tools) = seen(&server, 3);
    assert_eq!((beta, tools[0].clone()), (None, schema_tool));
    // A request without the memory tool carries no beta, on any model.
    sonnet
        .chat(&ChatRequest::new(vec![Message::user("Hi")]))
        .unwrap();
    assert_eq!(seen(&server, 4).0, None);
}

#[test]
fn which_models_have_the_memory_tool() {
    for (model, has) in [
        ("claude-sonnet-4-20250514", true),
        ("claude-sonnet-4-5", true),
        ("claude-opus-4-1-20250805", true),
        ("claude-opus-4-0", true),
        ("claude-haiku-4-5-20251001", true),
        ("claude-sonnet-5", true),
        ("anthropic.claude-sonnet-4-5-20250929-v1:0", true),
        ("claude-sonnet-4@20250514", true),
        ("claude-3-7-sonnet-20250219", false),
        ("claude-3-5-haiku-20241022", false),
        ("claude-haiku-4", false),
        ("gpt-4o", false),
        ("claude", false),
    ] {
        assert_eq!(memtape_llm::has_memory_tool(model), has, "{model}");
    }
    assert!(
        "fancy"
            .parse::<MemoryTool>()
            .unwrap_err()
            .contains("auto, native or schema")
    );
}
