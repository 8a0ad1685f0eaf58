//! Attached files through the CLI (Dify's file references): `memtape upload`, `--file` of
//! `append` and `node add`, `--attachments` of `history` and `context` (references, or
//! OpenAI / Anthropic parts under `[attachments]` of memtape.toml), and every bad reference
//! refused with a message naming it.

use serde_json::{Value, json};

use crate::common::Run;

/// A PNG (its signature, then some bytes) and its base64.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\nkitten";
const PNG_B64: &str = "iVBORw0KGgpraXR0ZW4=";

/// Uploads a PNG; its id.
fn upload_png(r: &Run) -> String {
    std::fs::write(r.dir.path().join("cat.png"), PNG).unwrap();
    r.ok(&["upload", &r.path("cat.png")]).trim().to_owned()
}

#[test]
fn a_file_appended_by_reference_comes_back_as_a_reference_or_as_parts() {
    let r = Run::new();
    let id = upload_png(&r);
    assert_eq!(
        std::fs::read(r.dir.path().join("data/files/uploads").join(&id)).unwrap(),
        PNG,
        "the default tenant's uploads are where files always were"
    );
    let image = format!("image:upload:{id}");
    r.ok(&[
        "append",
        "chat",
        "--role",
        "user",
        "--content",
        "what is this?",
        "--file",
        &image,
        "--file",
        "document:url:https://example.org/a.pdf",
    ]);

    let text = r.ok(&["history", "chat"]);
    assert!(
        text.contains(&format!("[file image:upload:{id}]")) && text.contains("[file document:url:"),
        "{text}"
    );
    let refs = r.json(&["history", "chat", "--json"]);
    assert_eq!(
        refs[0]["files"],
        json!([
            {"type": "image", "transfer_method": "local_file", "upload_file_id": id, "belongs_to": "user"},
            {"type": "document", "transfer_method": "remote_url", "url": "https://example.org/a.pdf", "belongs_to": "user"},
        ])
    );

    let parts = r.json(&["history", "chat", "--attachments", "parts"]);
    assert!(parts[0].get("files").is_none(), "{parts}");
    assert_eq!(
        parts[0]["content"],
        json!([
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_B64}"), "detail": "low"}},
            {"type": "text", "text": "[attached file: https://example.org/a.pdf]"},
        ])
    );
    let anthropic = r.json(&["history", "chat", "--attachments", "anthropic"]);
    assert_eq!(
        anthropic[0]["content"][1],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}})
    );
    assert_eq!(
        anthropic[0]["content"][2],
        json!({"type": "document", "source": {"type": "url", "url": "https://example.org/a.pdf"}})
    );

    // Dify's file_upload_config: images only, in high detail; the document is left out.
    std::fs::write(
        r.dir.path().join("data/memtape.toml"),
        "[attachments]\nallowed_file_types = [\"image\"]\nimage_detail = \"high\"\n",
    )
    .unwrap();
    let parts = r.json(&["history", "chat", "--attachments", "openai"]);
    let content = parts[0]["content"].as_array().unwrap();
    assert_eq!(content.len(), 2, "{content:?}");
    assert_eq!(content[1]["image_url"]["detail"], "high");
    std::fs::write(
        r.dir.path().join("data/memtape.toml"),
        "[attachments]\nimage_detial = \"high\"\n",
    )
    .unwrap();
    let e = r.fails(&["history", "chat", "--attachments", "parts"]);
    assert!(e.contains("image_detial"), "{e}");
    std::fs::remove_file(r.dir.path().join("data/memtape.toml")).unwrap();
    let e = r.fails(&["history", "chat", "--window", "2", "--attachments", "parts"]);
    assert!(e.contains("--attachments"), "not ignored: {e}");

    // The context: references by default, parts on request.
    let context = r.json(&["context", "chat", "--dry-run", "--json"]);
    let user = |c: &Value| {
        c["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "user")
            .cloned()
            .unwrap()
    };
    assert_eq!(user(&context)["files"], refs[0]["files"], "{context}");
    let context = r.json(&["context", "chat", "--dry-run", "--attachments", "parts"]);
    assert_eq!(
        user(&context)["content"][1]["image_url"]["url"],
        format!("data:image/png;base64,{PNG_B64}")
    );

    // Dify's JSON form is taken as it is.
    let dify = json!({"type": "image", "transfer_method": "local_file",
                      "upload_file_id": id, "belongs_to": "assistant"})
    .to_string();
    r.ok(&[
        "append",
        "chat",
        "--role",
        "assistant",
        "--content",
        "a cat",
        "--file",
        &dify,
    ]);
    let refs = r.json(&["history", "chat", "--json"]);
    assert_eq!(refs[1]["files"][0]["belongs_to"], "assistant");
}

#[test]
fn bad_references_and_uploads_are_refused_naming_them() {
    let r = Run::new();
    let id = upload_png(&r);
    let outside = r.dir.path().join("secret");
    std::fs::write(&outside, "secret").unwrap();
    std::os::unix::fs::symlink(&outside, r.dir.path().join("data/files/uploads/link")).unwrap();
    let json_with = |extra: &str| {
        format!(
            "{{\"type\":\"image\",\"transfer_method\":\"local_file\",\"upload_file_id\":\"{id}\"{extra}}}"
        )
    };
    let cases = [
        ("image:upload:../../etc/passwd".to_owned(), "plain name"),
        ("image:upload:.hidden".to_owned(), "plain name"),
        ("image:upload:a\u{1}b".to_owned(), "plain name"),
        ("image:upload:link".to_owned(), "no upload link"),
        ("image:upload:missing".to_owned(), "no upload missing"),
        ("image:tool:chart".to_owned(), "no tool file chart"),
        ("image:url:file:///etc/passwd".to_owned(), "http or https"),
        ("image:url:javascript:alert(1)".to_owned(), "http or https"),
        ("spreadsheet:upload:x".to_owned(), "spreadsheet"),
        ("image:carrier:x".to_owned(), "carrier"),
        ("image".to_owned(), "TYPE:upload:ID"),
        (json_with(",\"size\":1"), "unknown field \"size\""),
        (json_with(",\"url\":\"https://a.b/c\""), "exactly one"),
    ];
    for (spec, why) in &cases {
        let e = r.fails(&[
            "append",
            "chat",
            "--role",
            "user",
            "--content",
            "x",
            "--file",
            spec,
        ]);
        assert!(e.contains(why), "{spec}: {e} should say {why}");
    }
    // Another tenant's upload is not this tenant's.
    let e = r.fails(&[
        "append",
        "chat",
        "--tenant",
        "globex",
        "--role",
        "user",
        "--content",
        "x",
        "--file",
        &format!("image:upload:{id}"),
    ]);
    assert!(e.contains(&format!("no upload {id}")), "{e}");
    let e = r.fails(&["history", "chat"]);
    assert!(e.contains("chat"), "nothing was stored: {e}");

    // Uploads: the type must agree with the bytes, and be one memtape takes.
    std::fs::write(r.dir.path().join("notes.txt"), "just text").unwrap();
    let e = r.fails(&["upload", &r.path("notes.txt"), "--media-type", "image/png"]);
    assert!(e.contains("text/plain"), "{e}");
    std::fs::write(r.dir.path().join("a.bin"), b"\x00\x01binary").unwrap();
    let e = r.fails(&["upload", &r.path("a.bin")]);
    assert!(e.contains("not accepted"), "{e}");
    std::fs::write(r.dir.path().join("big.txt"), vec![b'a'; 1024 * 1024 + 1]).unwrap();
    let e = r.fails(&["upload", &r.path("big.txt"), "--limit-mib", "1"]);
    assert!(e.contains("limit"), "{e}");
    let json = r.json(&["upload", &r.path("notes.txt"), "--json"]);
    assert_eq!(json["media_type"], "text/plain");
    assert_eq!(json["reference"]["type"], "document");
}

#[test]
fn node_memory_keeps_the_files_of_both_sides() {
    let r = Run::new();
    let id = upload_png(&r);
    r.ok(&[
        "node",
        "add",
        "conv-1",
        "llm-1",
        "--message-id",
        "m1",
        "--query",
        "Analyze this image",
        "--answer",
        "A landscape",
        "--file",
        &format!("image:upload:{id}"),
        "--answer-file",
        "image:url:https://example.org/out.png",
    ]);
    let history = r.json(&[
        "node",
        "history",
        "conv-1",
        "llm-1",
        "--message-id",
        "m2",
        "--parent",
        "m1",
        "--json",
    ]);
    assert_eq!(history[0]["files"][0]["upload_file_id"], id, "{history}");
    assert_eq!(history[0]["files"][0]["belongs_to"], "user");
    assert_eq!(history[1]["files"][0]["url"], "https://example.org/out.png");
    assert_eq!(history[1]["files"][0]["belongs_to"], "assistant");
    let e = r.fails(&[
        "node",
        "add",
        "conv-1",
        "llm-1",
        "--message-id",
        "m2",
        "--query",
        "q",
        "--answer",
        "a",
        "--file",
        "image:upload:../x",
    ]);
    assert!(e.contains("plain name"), "{e}");
}

/// `memtape serve` takes `[attachments]` of memtape.toml, and an upload the CLI made is the
/// server's default tenant's: the two surfaces share the files.
#[test]
fn serve_rebuilds_under_the_attachments_settings_and_shares_the_clis_uploads() {
    let r = Run::new();
    let id = upload_png(&r);
    std::fs::write(
        r.dir.path().join("data/memtape.toml"),
        "[attachments]\nallowed_file_types = [\"image\"]\nimage_detail = \"high\"\n",
    )
    .unwrap();
    std::fs::write(r.dir.path().join("spec.pdf"), b"%PDF-1.7 spec").unwrap();
    let e = r.fails(&["upload", &r.path("spec.pdf")]);
    assert!(e.contains("allowed_file_types"), "{e}");
    let s = crate::common::serving::Serving::start(&r, &[]);
    let files = json!([
        {"type": "image", "transfer_method": "local_file", "upload_file_id": id},
        {"type": "document", "transfer_method": "remote_url", "url": "https://example.org/a.pdf"},
    ]);
    let (status, e) = s.call(
        "POST",
        "/v1/sessions/chat/messages",
        Some(json!({"role": "user", "content": "look", "files": files})),
        None,
    );
    assert_eq!(status, 201, "{e}");
    let (status, history) = s.call(
        "GET",
        "/v1/sessions/chat/history?attachments=parts",
        None,
        None,
    );
    assert_eq!(status, 200, "{history}");
    assert_eq!(
        history["messages"][0]["content"],
        json!([
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_B64}"), "detail": "high"}},
        ]),
        "the document is not an allowed type: left out"
    );
    s.terminate();
}
