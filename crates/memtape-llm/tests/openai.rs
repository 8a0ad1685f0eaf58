//! The OpenAI-compatible client against a scripted server on loopback (`common`).
#![allow(clippy::unwrap_used)]

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::{Answer, Scripted, delta, fast_retries, ok};

use memtape_llm::{ChatRequest, Error, Llm, Message, OpenAi, RetryPolicy, ToolSpec};
use serde_json::{Value, json};

fn save_memory_request() -> ChatRequest {
    let mut request = ChatRequest::new(vec![
        Message::system("You are a memory consolidation agent."),
        Message::user("[2026-01-01 10:00] USER: I met Ada"),
    ]);
    request.tools = vec![ToolSpec {
        name: "save_memory".into(),
        description: "Save the memory consolidation result.".into(),
        parameters: json!({"type": "object", "properties": {
            "history_entry": {"type": "string"}, "memory_update": {"type": "string"}}}),
    }];
    request.force_tool = Some("save_memory".into());
    request
}

#[test]
fn a_tool_call_with_double_encoded_arguments_is_read_and_the_request_is_well_formed() {
    let args = json!({"history_entry": "[2026-01-01 10:00] Met Ada", "memory_update": "# Memory\n- Knows Ada"});
    let double = Value::String(args.to_string()).to_string();
    let server = Scripted::start(vec![ok(json!({
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "save_memory", "arguments": double}}]}}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
    }))]);
    let llm = OpenAi::new(&server.base, "smollm2")
        .unwrap()
        .api_key("sk-test");
    assert!(
        !format!("{llm:?}").contains("sk-test"),
        "no key in debug output"
    );
    let reply = llm.chat(&save_memory_request()).unwrap();
    assert_eq!(reply.tool_calls.len(), 1);
    assert_eq!(reply.tool_calls[0].name, "save_memory");
    assert_eq!(Value::Object(reply.tool_calls[0].arguments.clone()), args);
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(reply.usage.unwrap().prompt_tokens, 120);
    assert_eq!(reply.attempts, 1);

    let seen = server.seen.lock().unwrap();
    assert_eq!(seen[0].line, "POST /v1/chat/completions HTTP/1.1");
    assert!(
        seen[0]
            .headers
            .contains(&("authorization".into(), "Bearer sk-test".into()))
    );
    let body = &seen[0].body;
    assert_eq!(body["model"], "smollm2");
    assert_eq!(body["messages"][1]["role"], "user");
    assert_eq!(body["tools"][0]["function"]["name"], "save_memory");
    assert_eq!(body["tool_choice"]["function"]["name"], "save_memory");
}

#[test]
fn a_rate_limit_is_retried_after_the_wait_the_server_asks_for() {
    let server = Scripted::start(vec![
        Answer::Reply(
            429,
            vec![("retry-after", "1".into())],
            json!({"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}})
                .to_string(),
        ),
        ok(
            json!({"choices": [{"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}]}),
        ),
    ]);
    let llm = OpenAi::new(&server.base, "m")
        .unwrap()
        .retry(fast_retries(2));
    let started = Instant::now();
    let reply = llm
        .chat(&ChatRequest::new(vec![Message::user("hi")]))
        .unwrap();
    assert_eq!(reply.content, "done");
    assert_eq!(reply.attempts, 2);
    // The server's second, not the policy's milliseconds.
    assert!(started.elapsed() >= Duration::from_secs(1));
}

#[test]
fn server_errors_are_retried_as_the_policy_allows_then_reported() {
    let answer = || {
        Answer::Reply(
            503,
            Vec::new(),
            json!({"error": {"message": "loading model", "type": "unavailable_error"}}).to_string(),
        )
    };
    let server = Scripted::start(vec![answer(), answer(), answer(), answer()]);
    let llm = OpenAi::new(&server.base, "m")
        .unwrap()
        .retry(fast_retries(2));
    match llm.chat(&ChatRequest::new(vec![Message::user("hi")])) {
        Err(Error::Status {
            status: 503,
            message,
            retryable: true,
            ..
        }) => {
            assert_eq!(message, "loading model")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.requests(), 3, "one attempt and two retries");
}

#[test]
fn context_length_exceeded_is_its_own_error_and_not_retried() {
    let server = Scripted::start(vec![Answer::Reply(
        400,
        Vec::new(),
        json!({"error": {"message": "This model's maximum context length is 2048 tokens. However, your messages resulted in 3100 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}}).to_string(),
    )]);
    let llm = OpenAi::new(&server.base, "m")
        .unwrap()
        .retry(fast_retries(2));
    let err = llm
        .chat(&ChatRequest::new(vec![Message::user("long")]))
        .unwrap_err();
    assert!(matches!(err, Error::ContextLength { .. }), "{err:?}");
    assert_eq!(server.requests(), 1);
}

#[test]
fn a_server_that_never_answers_times_out() {
    let server = Scripted::start(vec![Answer::Hang]);
    let llm = OpenAi::new(&server.base, "m")
        .unwrap()
        .timeout(Duration::from_millis(300))
        .retry(RetryPolicy::none());
    let started = Instant::now();
    let err = llm
        .chat(&ChatRequest::new(vec![Message::user("hi")]))
        .unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn malformed_replies_and_arguments_are_typed_errors() {
    let server = Scripted::start(vec![
        Answer::Reply(200, Vec::new(), "<html>gateway</html>".into()),
        ok(json!({"choices": []})),
        ok(
            json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "save_memory", "arguments": "{\"history_entry\": \"cut"}}]}}]}),
        ),
    ]);
    let llm = OpenAi::new(&server.base, "m")
        .unwrap()
        .retry(RetryPolicy::none());
    let request = save_memory_request();
    assert!(matches!(llm.chat(&request), Err(Error::BadReply(_))));
    assert!(matches!(llm.chat(&request), Err(Error::BadReply(_))));
    match llm.chat(&request) {
        Err(Error::BadArguments { tool, .. }) => assert_eq!(tool, "save_memory"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn nothing_listening_is_named_by_its_address_and_a_bad_url_a_config_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let llm = OpenAi::new(&format!("http://127.0.0.1:{port}/v1"), "m")
        .unwrap()
        .retry(RetryPolicy::none());
    let err = llm
        .chat(&ChatRequest::new(vec![Message::user("hi")]))
        .unwrap_err();
    assert!(
        matches!(&err, Error::Unreachable { url, .. } if url == &format!("http://127.0.0.1:{port}/v1/chat/completions")),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
    assert!(matches!(
        OpenAi::new("localhost:11434", "m"),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        OpenAi::new("http://localhost:11434/v1", " "),
        Err(Error::Config(_))
    ));
}

#[test]
fn a_stream_passes_its_text_on_as_it_comes_and_assembles_tool_calls() {
    let server = Scripted::start(vec![Answer::Stream {
        events: vec![
            ": keep-alive\n\n".into(),
            delta(json!({"role": "assistant", "content": ""})),
            delta(json!({"content": "Saving "})),
            delta(json!({"content": "now."})),
            delta(
                json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "save_memory", "arguments": ""}}]}),
            ),
            delta(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"history_entry\": "}}]}),
            ),
            delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Met Ada\"}"}}]})),
            format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
            ),
            format!(
                "data: {}\n\n",
                json!({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}})
            ),
            "data: [DONE]\n\n".into(),
        ],
        cut: false,
    }]);
    let llm = OpenAi::new(&server.base, "m").unwrap();
    let mut pieces = Vec::new();
    let reply = llm
        .chat_stream(&save_memory_request(), &mut |t| pieces.push(t.to_owned()))
        .unwrap();
    assert_eq!(pieces, ["Saving ", "now."]);
    assert_eq!(reply.content, "Saving now.");
    assert_eq!(reply.tool_calls[0].id, "call_1");
    assert_eq!(reply.tool_calls[0].arguments["history_entry"], "Met Ada");
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(reply.usage.unwrap().completion_tokens, 4);
    let seen = server.seen.lock().unwrap();
    assert_eq!(seen[0].body["stream"], true);
    assert_eq!(seen[0].body["stream_options"]["include_usage"], true);
}

#[test]
fn a_stream_cut_mid_way_is_interrupted_with_what_came_and_not_retried() {
    let server = Scripted::start(vec![
        Answer::Stream {
            events: vec![
                delta(json!({"content": "The user "})),
                delta(json!({"content": "lives in"})),
            ],
            cut: true,
        },
        ok(json!({"choices": [{"message": {"content": "should not be asked"}}]})),
    ]);
    let llm = OpenAi::new(&server.base, "m")
        .unwrap()
        .retry(fast_retries(2));
    let mut got = String::new();
    let err = llm
        .chat_stream(&ChatRequest::new(vec![Message::user("hi")]), &mut |t| {
            got.push_str(t)
        })
        .unwrap_err();
    match err {
        Error::Interrupted { received, .. } => assert_eq!(received, "The user lives in"),
        other => panic!("{other:?}"),
    }
    assert_eq!(got, "The user lives in");
    assert_eq!(server.requests(), 1);
}

#[test]
fn a_stream_that_fails_before_any_text_is_retried() {
    let server = Scripted::start(vec![
        Answer::Reply(
            503,
            Vec::new(),
            json!({"error": {"message": "loading"}}).to_string(),
        ),
        Answer::Stream {
            events: vec![delta(json!({"role": "assistant"}))],
            cut: true,
        },
        Answer::Stream {
            events: vec![
                delta(json!({"content": "hello"})),
                format!(
                    "data: {}\n\n",
                    json!({"choices": [{"delta": {}, "finish_reason": "stop"}]})
                ),
            ],
            cut: false,
        },
    ]);
    let llm = OpenAi::new(&server.base, "m")
        .unwrap()
        .retry(fast_retries(3));
    let mut got = String::new();
    let reply = llm
        .chat_stream(&ChatRequest::new(vec![Message::user("hi")]), &mut |t| {
            got.push_str(t)
        })
        .unwrap();
    assert_eq!((got.as_str(), reply.attempts), ("hello", 3));
    assert_eq!(
        reply.finish_reason.as_deref(),
        Some("stop"),
        "complete without [DONE]"
    );
}

#[test]
fn an_error_inside_a_stream_is_classified() {
    let server = Scripted::start(vec![Answer::Stream {
        events: vec!["error: {\"message\": \"the request exceeds the available context size\", \"type\": \"exceed_context_size_error\"}\n\n".into()],
        cut: false,
    }]);
    let llm = OpenAi::new(&server.base, "m")
        .unwrap()
        .retry(RetryPolicy::none());
    let err = llm
        .chat_stream(&ChatRequest::new(vec![Message::user("hi")]), &mut |_| {})
        .unwrap_err();
    assert!(matches!(err, Error::ContextLength { .. }), "{err:?}");
}

/// Attachments go as content parts: an image by URL or data, a document with its bytes as
/// a file part, a document known only by URL named in the text.
#[test]
fn attachments_are_sent_as_content_parts() {
    use memtape_llm::{Attachment, AttachmentKind};
    let server = Scripted::start(vec![common::text("seen")]);
    let mut m = Message::user("what is in these?");
    m.attachments = vec![
        Attachment {
            kind: AttachmentKind::Image,
            url: "data:image/png;base64,iVBORw0K".into(),
            name: Some("cat.png".into()),
        },
        Attachment {
            kind: AttachmentKind::Document,
            url: "data:application/pdf;base64,JVBERi0=".into(),
            name: Some("report.pdf".into()),
        },
        Attachment {
            kind: AttachmentKind::Document,
            url: "https://example.org/a.pdf".into(),
            name: None,
        },
    ];
    let llm = OpenAi::new(&server.base, "m").unwrap();
    llm.chat(&ChatRequest::new(vec![m])).unwrap();
    let content = server.body(0).unwrap()["messages"][0]["content"].clone();
    assert_eq!(
        content,
        json!([
            {"type": "text", "text": "what is in these?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "report.pdf"}},
            {"type": "text", "text": "[attached file: https://example.org/a.pdf]"}
        ])
    );
}

/// An OpenAI-compatible server has no trained memory tool: the `memory` tool goes as a
/// function with its JSON schema, whatever the model is called.
#[test]
fn the_memory_tool_is_a_plain_function_on_openai_compatible_servers() {
    let server = Scripted::start(vec![ok(json!({
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "Noted."}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    }))]);
    let llm = OpenAi::new(&server.base, "claude-sonnet-4-5").unwrap();
    let mut request = ChatRequest::new(vec![Message::user("Remember that I like tea.")]);
    request.tools = vec![ToolSpec {
        name: "memory".into(),
        description: "Files under /memories.".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    }];
    llm.chat(&request).unwrap();
    let body = server.body(0).unwrap();
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "memory");
    assert!(body["tools"][0]["function"]["parameters"].is_object());
    let seen = server.seen.lock().unwrap();
    assert!(seen[0].headers.iter().all(|(k, _)| k != "anthropic-beta"));
}
