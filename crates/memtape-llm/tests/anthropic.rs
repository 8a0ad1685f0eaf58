//! The Anthropic Messages client against a scripted server on loopback (`common`).
#![allow(clippy::unwrap_used)]

mod common;

use common::{Answer, Scripted, fast_retries, ok};
use memtape_llm::{
    Anthropic, ChatRequest, Error, Llm, Message, RetryPolicy, Role, ToolCall, ToolSpec,
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
