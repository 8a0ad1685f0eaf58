//! Attached files over REST, as Dify sends them: an upload (`POST /v1/files`, multipart),
//! its reference on an append, history and context giving it back as a reference or
//! rebuilt into OpenAI and Anthropic content parts; every hostile input refused (another
//! tenant's upload, `..`, NUL, symlinks, URLs that are not http(s), oversize and mistyped
//! uploads); and an unknown field refused in every request body the API documents.

use crate::common::Server;
use memtape_server::{KeyStore, Limits, Role};
use serde_json::{Map, Value, json};

/// A PNG (its signature, then some bytes) and its base64.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\nkitten";
const PNG_B64: &str = "iVBORw0KGgpraXR0ZW4=";
/// A text document and its base64.
const NOTES: &[u8] = b"meeting notes: ship friday\n";
const NOTES_B64: &str = "bWVldGluZyBub3Rlczogc2hpcCBmcmlkYXkK";

/// A multipart body with a field and the file `name` of `content_type`.
fn multipart(name: &str, content_type: &str, bytes: &[u8]) -> Vec<u8> {
    let mut body =
        b"--BOUNDARY\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\nada\r\n".to_vec();
    body.extend_from_slice(
        format!(
            "--BOUNDARY\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: {content_type}\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(bytes);
    body.extend_from_slice(b"\r\n--BOUNDARY--\r\n");
    body
}

/// The message of an error body.
fn said(e: &Value) -> &str {
    e["error"]["message"].as_str().unwrap_or_default()
}

/// Uploads `bytes` as `name` with `key` (and `extra` headers).
fn upload(
    s: &Server,
    key: &str,
    name: &str,
    content_type: &str,
    bytes: &[u8],
    extra: &[(&str, &str)],
) -> (u16, Value) {
    let auth = format!("Bearer {key}");
    let mut headers = vec![
        ("Content-Type", "multipart/form-data; boundary=BOUNDARY"),
        ("Authorization", auth.as_str()),
    ];
    headers.extend_from_slice(extra);
    s.send_raw(
        "POST",
        "/v1/files",
        &headers,
        &multipart(name, content_type, bytes),
    )
}

#[test]
fn an_upload_goes_on_a_message_and_comes_back_as_a_reference_or_as_parts() {
    let s = Server::start();
    let (acme, _) = KeyStore::open(s.dir.path())
        .create("acme", Role::Write)
        .unwrap();
    let key = Some(acme.as_str());

    let (status, image) = upload(&s, &acme, "cat.png", "image/png", PNG, &[]);
    assert_eq!(status, 201, "{image}");
    let image_id = image["id"].as_str().unwrap().to_owned();
    assert_eq!(image["name"], "cat.png");
    assert_eq!(image["media_type"], "image/png");
    assert_eq!(image["size"], PNG.len());
    assert_eq!(
        image["reference"],
        json!({"type": "image", "transfer_method": "local_file",
               "upload_file_id": image_id, "belongs_to": "user"})
    );
    // Kept in the tenant's own folder.
    let folder = s.dir.path().join("files/tenants/acme/uploads");
    assert_eq!(std::fs::read(folder.join(&image_id)).unwrap(), PNG);
    let (status, info) = s.call("GET", &format!("/v1/files/{image_id}"), None, key);
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["reference"], image["reference"]);

    let (status, notes) = upload(&s, &acme, "notes.txt", "text/plain", NOTES, &[]);
    assert_eq!(status, 201, "{notes}");
    assert_eq!(notes["reference"]["type"], "document");
    let notes_id = notes["id"].as_str().unwrap().to_owned();

    let url = json!({"type": "image", "transfer_method": "remote_url",
                     "url": "https://example.org/dog.jpg", "belongs_to": "user"});
    let files = json!([image["reference"], notes["reference"], url]);
    let (status, appended) = s.call(
        "POST",
        "/v1/sessions/chat/messages",
        Some(&json!({"role": "user", "content": "what is in these?", "files": files})),
        key,
    );
    assert_eq!(status, 201, "{appended}");

    // By default: the references, as they were sent.
    let (status, history) = s.call("GET", "/v1/sessions/chat/history", None, key);
    assert_eq!(status, 200, "{history}");
    let message = &history["messages"][0];
    assert_eq!(message["content"], "what is in these?");
    assert_eq!(message["files"], files);

    // OpenAI's parts: the upload as base64 data with Dify's default detail, the text
    // document as a file part, the URL as it is; no `files` left beside them.
    let data_png = format!("data:image/png;base64,{PNG_B64}");
    let (status, history) = s.call(
        "GET",
        "/v1/sessions/chat/history?attachments=parts",
        None,
        key,
    );
    assert_eq!(status, 200, "{history}");
    let message = &history["messages"][0];
    assert!(message.get("files").is_none(), "{message}");
    assert_eq!(
        message["content"],
        json!([
            {"type": "text", "text": "what is in these?"},
            {"type": "image_url", "image_url": {"url": data_png, "detail": "low"}},
            {"type": "file", "file": {"filename": notes_id,
                "file_data": format!("data:text/plain;base64,{NOTES_B64}")}},
            {"type": "image_url", "image_url": {"url": "https://example.org/dog.jpg", "detail": "low"}},
        ])
    );
    let (_, openai) = s.call(
        "GET",
        "/v1/sessions/chat/history?attachments=openai",
        None,
        key,
    );
    assert_eq!(openai, history, "openai is parts");

    // Anthropic's blocks.
    let (status, history) = s.call(
        "GET",
        "/v1/sessions/chat/history?attachments=anthropic",
        None,
        key,
    );
    assert_eq!(status, 200, "{history}");
    assert_eq!(
        history["messages"][0]["content"],
        json!([
            {"type": "text", "text": "what is in these?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                "data": "meeting notes: ship friday\n"}},
            {"type": "image", "source": {"type": "url", "url": "https://example.org/dog.jpg"}},
        ])
    );
    let (status, bad) = s.call(
        "GET",
        "/v1/sessions/chat/history?attachments=pictures",
        None,
        key,
    );
    assert_eq!(status, 400, "{bad}");
    assert!(said(&bad).contains("refs"), "{bad}");

    // The context route: references by default, parts on request.
    let (status, context) = s.call(
        "POST",
        "/v1/sessions/chat/context",
        Some(&json!({"dry_run": true})),
        key,
    );
    assert_eq!(status, 200, "{context}");
    let user = |c: &Value| {
        c["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "user")
            .cloned()
            .unwrap()
    };
    assert_eq!(user(&context)["files"], files, "{context}");
    let (status, context) = s.call(
        "POST",
        "/v1/sessions/chat/context",
        Some(&json!({"dry_run": true, "attachments": "anthropic"})),
        key,
    );
    assert_eq!(status, 200, "{context}");
    let content = user(&context)["content"].clone();
    assert!(
        content
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["source"]["data"] == PNG_B64),
        "{content}"
    );
}

#[test]
fn another_tenants_upload_is_refused_and_never_resolved() {
    let s = Server::start();
    let keys = KeyStore::open(s.dir.path());
    let (acme, _) = keys.create("acme", Role::Write).unwrap();
    let (globex, _) = keys.create("globex", Role::Write).unwrap();
    let (status, image) = upload(&s, &acme, "cat.png", "image/png", PNG, &[]);
    assert_eq!(status, 201, "{image}");
    let id = image["id"].as_str().unwrap();

    // globex cannot see it, nor attach it (alone, or second of several: nothing stored).
    let (status, _) = s.call("GET", &format!("/v1/files/{id}"), None, Some(&globex));
    assert_eq!(status, 404);
    let one = json!({"role": "user", "content": "mine now", "files": [image["reference"]]});
    let (status, refused) = s.call("POST", "/v1/sessions/g/messages", Some(&one), Some(&globex));
    assert_eq!(status, 422, "{refused}");
    assert!(said(&refused).contains(id), "names the upload: {refused}");
    let many = json!({"messages": [{"role": "user", "content": "hello"}, one]});
    let (status, _) = s.call(
        "POST",
        "/v1/sessions/g/messages",
        Some(&many),
        Some(&globex),
    );
    assert_eq!(status, 422);
    let (status, _) = s.call("GET", "/v1/sessions/g/history", None, Some(&globex));
    assert_eq!(status, 404, "nothing was stored");

    // A file of the same id in globex's folder would be globex's own: acme's stays acme's.
    let (status, _) = s.call(
        "POST",
        "/v1/sessions/a/messages",
        Some(&json!({"role": "user", "content": "mine", "files": [image["reference"]]})),
        Some(&acme),
    );
    assert_eq!(status, 201);
    assert!(!s.dir.path().join("files/uploads").join(id).exists());
    assert!(!s.dir.path().join("files/tenants/globex").exists());
}

/// Dify's `file_upload_config` (`[attachments]`): an upload of a type it does not allow is
/// refused, and rebuilding leaves such a file out and sends images in its detail.
#[test]
fn the_attachments_settings_decide_what_is_taken_and_rebuilt() {
    let s = Server::start_configured(|state| {
        state.set_attachments_config(memtape::AttachmentsConfig {
            allowed_file_types: vec![memtape::FileType::Image],
            image_detail: memtape::ImageDetail::High,
        });
    });
    let (status, e) = upload(&s, "x", "spec.pdf", "application/pdf", b"%PDF-1.7", &[]);
    assert_eq!(status, 422, "{e}");
    assert!(said(&e).contains("allowed_file_types"), "{e}");
    let (status, image) = upload(&s, "x", "cat.png", "image/png", PNG, &[]);
    assert_eq!(status, 201, "{image}");
    let files = json!([image["reference"],
        {"type": "document", "transfer_method": "remote_url", "url": "https://example.org/a.pdf"}]);
    let (status, _) = s.post(
        "/v1/sessions/s/messages",
        &json!({"role": "user", "content": "look", "files": files}),
    );
    assert_eq!(status, 201);
    let (_, history) = s.get("/v1/sessions/s/history?attachments=parts");
    let content = history["messages"][0]["content"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(content.len(), 2, "the document is left out: {content:?}");
    assert_eq!(content[1]["image_url"]["detail"], "high");
}

/// An erasure takes a tenant's attached uploads (and what they are) with the session.
#[test]
fn an_erased_session_takes_its_uploads_from_the_tenants_folder() {
    let s = Server::start();
    let (admin, _) = KeyStore::open(s.dir.path())
        .create("acme", Role::Admin)
        .unwrap();
    let key = Some(admin.as_str());
    let (status, image) = upload(&s, &admin, "cat.png", "image/png", PNG, &[]);
    assert_eq!(status, 201, "{image}");
    let id = image["id"].as_str().unwrap();
    let folder = s.dir.path().join("files/tenants/acme");
    assert!(folder.join("uploads").join(id).is_file());
    assert!(
        folder
            .join("upload-info")
            .join(format!("{id}.json"))
            .is_file()
    );
    let body = json!({"role": "user", "content": "my cat", "files": [image["reference"]]});
    let (status, _) = s.call("POST", "/v1/sessions/pets/messages", Some(&body), key);
    assert_eq!(status, 201);
    let (status, erased) = s.call(
        "POST",
        "/v1/erase",
        Some(&json!({"what": "session", "session": "pets", "reason": "asked to"})),
        key,
    );
    assert_eq!(status, 200, "{erased}");
    assert!(!folder.join("uploads").join(id).exists());
    assert!(
        !folder
            .join("upload-info")
            .join(format!("{id}.json"))
            .exists()
    );
    let (status, _) = s.call("GET", &format!("/v1/files/{id}"), None, key);
    assert_eq!(status, 404);
}

#[test]
fn uploads_are_checked_for_size_type_and_origin_and_a_retry_stores_once() {
    let s = Server::start_with(Limits {
        upload_bytes: 1024,
        ..Limits::default()
    });
    let uploads = s.dir.path().join("files/uploads");
    let count = || std::fs::read_dir(&uploads).map_or(0, Iterator::count);

    // Over the limit: 413, by the file's size or by the body's.
    let (status, e) = upload(&s, "x", "big.txt", "text/plain", &[b'a'; 2000], &[]);
    assert_eq!(status, 413, "{e}");
    // A body announced over the upload limit and its multipart's own bytes is answered
    // from the headers alone.
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(s.addr).unwrap();
    write!(
        tcp,
        "POST /v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer x\r\nContent-Type: multipart/form-data; boundary=B\r\nContent-Length: {}\r\n\r\n--B\r\n",
        300_000
    )
    .unwrap();
    let mut answer = [0u8; 64];
    let n = tcp.read(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

    // The type must be accepted and agree with the bytes.
    for (name, declared, bytes, why) in [
        (
            "a.png",
            "image/png",
            &b"%PDF-1.7 not an image"[..],
            "are application/pdf",
        ),
        (
            "a.zip",
            "application/zip",
            &b"PK\x03\x04zip"[..],
            "not accepted",
        ),
        (
            "a.txt",
            "text/plain",
            &b"bin\x00ary"[..],
            "are application/octet-stream",
        ),
        (
            "a.bin",
            "application/octet-stream",
            &b"\x00\x01\x02"[..],
            "not accepted",
        ),
        ("a.txt", "text/plain", &b""[..], "empty"),
    ] {
        let (status, e) = upload(&s, "x", name, declared, bytes, &[]);
        assert_eq!(status, 422, "{name} {declared}: {e}");
        assert!(said(&e).contains(why), "{e}");
    }
    // Sent as octet-stream, the bytes say what it is.
    let (status, png) = upload(&s, "x", "cat", "application/octet-stream", PNG, &[]);
    assert_eq!(status, 201, "{png}");
    assert_eq!(png["media_type"], "image/png");
    assert_eq!(count(), 1);

    // A form without an Authorization header could come from any page: refused. JSON is
    // not an upload; a form without a `file` part is named.
    let (status, e) = s.send_raw(
        "POST",
        "/v1/files",
        &[("Content-Type", "multipart/form-data; boundary=BOUNDARY")],
        &multipart("cat.png", "image/png", PNG),
    );
    assert_eq!(status, 403, "{e}");
    let (status, e) = s.post("/v1/files", &json!({"file": "cat.png"}));
    assert_eq!(status, 415, "{e}");
    let (status, e) = s.send_raw(
        "POST",
        "/v1/files",
        &[
            ("Content-Type", "multipart/form-data; boundary=BOUNDARY"),
            ("Authorization", "Bearer x"),
        ],
        b"--BOUNDARY\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\n1\r\n--BOUNDARY--\r\n",
    );
    assert_eq!(status, 400, "{e}");
    assert!(said(&e).contains("file"), "{e}");
    assert_eq!(count(), 1, "nothing refused was stored");

    // A retry with the same Idempotency-Key answers the first answer: one file.
    let retry = [("Idempotency-Key", "upload-1")];
    let (status, first) = upload(&s, "x", "notes.txt", "text/plain", NOTES, &retry);
    assert_eq!(status, 201, "{first}");
    let (status, again) = upload(&s, "x", "notes.txt", "text/plain", NOTES, &retry);
    assert_eq!(status, 201, "{again}");
    assert_eq!(first["id"], again["id"]);
    assert_eq!(count(), 2);
}

/// The upload limit is the upload route's own: a file over the JSON limit is taken there,
/// and the JSON limit still holds everywhere else.
#[test]
fn an_upload_may_be_larger_than_the_json_limit() {
    let s = Server::start_with(Limits {
        body_bytes: 4096,
        upload_bytes: 100_000,
        ..Limits::default()
    });
    let mut picture = PNG.to_vec();
    picture.resize(50_000, 0);
    let (status, e) = upload(&s, "x", "big.png", "image/png", &picture, &[]);
    assert_eq!(status, 201, "{e}");
    assert_eq!(e["size"], 50_000);
    let (status, e) = s.post(
        "/v1/sessions/s/messages",
        &json!({"role": "user", "content": "x".repeat(10_000)}),
    );
    assert_eq!(status, 413, "{e}");
}

#[test]
fn hostile_references_are_refused_naming_what_is_wrong() {
    let s = Server::start();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"secret").unwrap();
    let uploads = s.dir.path().join("files/uploads");
    std::fs::create_dir_all(&uploads).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), uploads.join("link")).unwrap();
    let upload = |id: &str| json!({"type": "document", "transfer_method": "local_file", "upload_file_id": id});
    let url = |u: &str| json!({"type": "image", "transfer_method": "remote_url", "url": u});
    let long_id = "a".repeat(201);
    let long_url = format!("https://example.org/{}", "a".repeat(3000));
    let cases = [
        (upload("../../etc/passwd"), "plain name"),
        (upload("a/b"), "plain name"),
        (upload(".hidden"), "plain name"),
        (upload("a\u{0}b"), "plain name"),
        (upload(""), "plain name"),
        (upload(&long_id), "plain name"),
        (upload("link"), "no upload link"),
        (upload("missing"), "no upload missing"),
        (
            json!({"type": "image", "transfer_method": "tool_file", "tool_file_id": "chart"}),
            "no tool file chart",
        ),
        (url("file:///etc/passwd"), "not an http or https URL"),
        (url("javascript:alert(1)"), "not an http or https URL"),
        (url("ftp://example.org/a"), "not an http or https URL"),
        (url("https://"), "names no host"),
        (url("https://exa mple.org/a"), "space"),
        (url(&long_url), "at most 2048"),
        (
            json!({"type": "spreadsheet", "transfer_method": "remote_url", "url": "https://a.b/c"}),
            "spreadsheet",
        ),
        (
            json!({"type": "image", "transfer_method": "carrier_pigeon", "url": "https://a.b/c"}),
            "carrier_pigeon",
        ),
        (
            json!({"type": "image", "transfer_method": "local_file", "url": "https://a.b/c"}),
            "exactly one",
        ),
        (
            json!({"type": "image", "transfer_method": "remote_url", "url": "https://a.b/c",
                   "upload_file_id": "x"}),
            "exactly one",
        ),
        (
            json!({"type": "image", "transfer_method": "remote_url", "url": "https://a.b/c",
                   "belongs_to": "robot"}),
            "robot",
        ),
        (
            json!({"type": "image", "transfer_method": "remote_url", "url": "https://a.b/c",
                   "size": 12}),
            "unknown field `size`",
        ),
    ];
    for (file, why) in cases {
        let body = json!({"role": "user", "content": "look", "files": [file]});
        let (status, e) = s.post("/v1/sessions/chat/messages", &body);
        assert_eq!(status, 422, "{file}: {e}");
        assert!(said(&e).contains(why), "{file}: {e} should say {why:?}");
    }
    let many: Vec<Value> = (0..33).map(|_| url("https://example.org/a.png")).collect();
    let (status, e) = s.post(
        "/v1/sessions/chat/messages",
        &json!({"role": "user", "content": "look", "files": many}),
    );
    assert_eq!(status, 422, "{e}");
    let (status, _) = s.get("/v1/sessions/chat/history");
    assert_eq!(status, 404, "nothing was stored");
}

/// A body for `schema` with what its required fields need (the first of every choice).
fn minimal(doc: &Value, schema: &Value, depth: usize) -> Value {
    if depth > 8 {
        return Value::Null;
    }
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap();
        return minimal(doc, &doc["components"]["schemas"][name], depth + 1);
    }
    if let Some(first) = schema["oneOf"]
        .as_array()
        .or(schema["anyOf"].as_array())
        .or(schema["allOf"].as_array())
        .and_then(|v| v.first())
    {
        return minimal(doc, first, depth + 1);
    }
    if let Some(first) = schema["enum"].as_array().and_then(|v| v.first()) {
        return first.clone();
    }
    let kind = match &schema["type"] {
        Value::String(t) => t.clone(),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null")
            .to_owned(),
        _ => "object".to_owned(),
    };
    match kind.as_str() {
        "object" => {
            let mut out = Map::new();
            for name in schema["required"].as_array().into_iter().flatten() {
                let name = name.as_str().unwrap();
                out.insert(
                    name.to_owned(),
                    minimal(doc, &schema["properties"][name], depth + 1),
                );
            }
            Value::Object(out)
        }
        "array" => json!([minimal(doc, &schema["items"], depth + 1)]),
        "integer" | "number" => json!(1),
        "boolean" => json!(false),
        "string" => json!("x"),
        _ => Value::Null,
    }
}

/// Every JSON request body the API documents refuses a field it does not know, naming it,
/// rather than ignoring it: the field is sent first, beside what the body needs.
/// A query parameter the route does not have (a typo such as `?attachment=parts`) is a 400
/// naming it, on every route the API documents with query parameters, never ignored.
#[test]
fn every_route_refuses_an_unknown_query_parameter() {
    let s = Server::start();
    let (_, doc) = s.get("/openapi.json");
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let takes_query = op["parameters"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["in"] == "query"));
            if !takes_query {
                continue;
            }
            let concrete = path
                .replace("{session}", "s")
                .replace("{node}", "n")
                .replace("{id}", "1")
                .replace("{name}", "memory.save");
            let url = format!("{concrete}?zz_not_a_param=1");
            let method = method.to_ascii_uppercase();
            let (status, e) = match method.as_str() {
                "GET" | "DELETE" => s.call(&method, &url, None, None),
                _ => s.send_raw(
                    &method,
                    &url,
                    &[("Content-Type", "application/json")],
                    b"{}",
                ),
            };
            assert_eq!(status, 400, "{method} {url}: {e}");
            assert!(said(&e).contains("zz_not_a_param"), "{method} {url}: {e}");
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} routes");
    // The typo that prompted it: history is not silently given as references.
    let (status, e) = s.get("/v1/sessions/s/history?attachment=parts");
    assert_eq!(status, 400, "{e}");
    assert!(said(&e).contains("unknown field `attachment`"), "{e}");
}

#[test]
fn every_request_body_refuses_an_unknown_field() {
    let s = Server::start();
    let (_, doc) = s.get("/openapi.json");
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let Some(schema) = op["requestBody"]["content"]["application/json"]
                .get("schema")
                .cloned()
            else {
                continue;
            };
            let concrete = path
                .replace("{session}", "s")
                .replace("{id}", "1")
                .replace("{name}", "memory.save");
            let body = minimal(&doc, &schema, 0);
            let mut text = String::from("{\"zz_not_a_field\": 1");
            if let Some(fields) = body.as_object() {
                for (k, v) in fields {
                    text.push_str(&format!(", {}: {v}", json!(k)));
                }
            }
            text.push('}');
            let (status, e) = s.send_raw(
                &method.to_ascii_uppercase(),
                &concrete,
                &[("Content-Type", "application/json")],
                text.as_bytes(),
            );
            assert!(
                status == 422 || status == 400,
                "{method} {path} with {text}: {status} {e}"
            );
            assert!(
                said(&e).contains("zz_not_a_field"),
                "{method} {path} with {text}: {e}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} bodies");
    // A field of one of several messages too, and of a tool call.
    let (status, e) = s.post(
        "/v1/sessions/s/messages",
        &json!({"messages": [{"role": "user", "content": "hi", "colour": "red"}]}),
    );
    assert_eq!(status, 422, "{e}");
    assert!(said(&e).contains("colour"), "{e}");
    let (status, e) = s.post(
        "/v1/sessions/s/messages",
        &json!({"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "f", "arguments": "{}", "strict": true}}]}),
    );
    assert_eq!(status, 422, "{e}");
    assert!(said(&e).contains("strict"), "{e}");
    // What is known is kept: reasoning comes back.
    let (status, _) = s.post(
        "/v1/sessions/s/messages",
        &json!({"role": "assistant", "content": "4", "reasoning_content": "2 + 2"}),
    );
    assert_eq!(status, 201);
    let (_, history) = s.get("/v1/sessions/s/history");
    assert_eq!(history["messages"][0]["reasoning_content"], "2 + 2");
}

/// Node memory takes file references as appends do (Dify's `add_messages` carries the
/// turn's files): over REST and MCP, the tenant's own uploads only, and the node's history
/// gives them back.
#[test]
fn a_node_turn_carries_files_of_its_own_tenant_only() {
    let s = Server::start();
    let keys = KeyStore::open(s.dir.path());
    let (acme, _) = keys.create("acme", Role::Write).unwrap();
    let (globex, _) = keys.create("globex", Role::Write).unwrap();
    let (status, image) = upload(&s, &acme, "cat.png", "image/png", PNG, &[]);
    assert_eq!(status, 201, "{image}");
    let reference = image["reference"].clone();
    let chart = json!({"type": "image", "transfer_method": "remote_url",
                       "url": "https://example.com/chart.png"});
    let turn = |key: &str, id: &str| {
        s.call(
            "POST",
            "/v1/sessions/c1/nodes/llm/turns",
            Some(&json!({"message_id": id, "user_content": "what is this?",
                         "assistant_content": "a cat, and a chart of cats",
                         "user_files": [reference], "assistant_files": [chart]})),
            Some(key),
        )
    };
    let (status, added) = turn(&acme, "m1");
    assert_eq!(status, 201, "{added}");
    let (status, history) = s.call(
        "GET",
        "/v1/sessions/c1/nodes/llm/history?message_id=m2&parent_message_id=m1",
        None,
        Some(&acme),
    );
    assert_eq!(status, 200, "{history}");
    assert_eq!(history["messages"][0]["files"][0], reference, "{history}");
    assert_eq!(
        history["messages"][1]["files"][0]["belongs_to"], "assistant",
        "{history}"
    );
    // Another tenant's upload is refused by name, and nothing of the turn is written.
    let (status, refused) = turn(&globex, "m1");
    assert_eq!(status, 422, "{refused}");
    assert!(said(&refused).contains("files"), "{refused}");
    let (_, empty) = s.call(
        "GET",
        "/v1/sessions/c1/nodes/llm/history?message_id=m2&parent_message_id=m1",
        None,
        Some(&globex),
    );
    assert_eq!(empty["messages"], json!([]), "{empty}");
    // A malformed reference is named too.
    let (status, refused) = s.call(
        "POST",
        "/v1/sessions/c1/nodes/llm/turns",
        Some(
            &json!({"message_id": "m3", "user_content": "q", "assistant_content": "a",
                     "user_files": [{"type": "image", "transfer_method": "local_file",
                                     "upload_file_id": "../../etc/passwd"}]}),
        ),
        Some(&acme),
    );
    assert_eq!(status, 422, "{refused}");
    assert!(said(&refused).contains("plain name"), "{refused}");
}

/// 64 clients upload at once, each sending its upload twice with one idempotency key (a
/// retry): 64 files, each stored once and each its own.
#[test]
fn sixty_four_clients_upload_at_once_and_a_retry_stores_once() {
    let s = Server::start();
    let ids: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..64)
            .map(|i| {
                let s = &s;
                scope.spawn(move || {
                    let text = format!("note number {i}\n");
                    let key = format!("upload-{i}");
                    let mut ids = Vec::new();
                    for _ in 0..2 {
                        let (status, file) = upload(
                            s,
                            "local",
                            "n.txt",
                            "text/plain",
                            text.as_bytes(),
                            &[("Idempotency-Key", key.as_str())],
                        );
                        assert_eq!(status, 201, "{file}");
                        ids.push(file["id"].as_str().unwrap().to_owned());
                    }
                    assert_eq!(ids[0], ids[1], "the retry answers the first upload");
                    ids.pop().unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), 64);
    let stored = std::fs::read_dir(s.dir.path().join("files/uploads"))
        .unwrap()
        .count();
    assert_eq!(stored, 64, "each upload stored once");
    for (i, id) in ids.iter().enumerate() {
        let (status, info) = s.get(&format!("/v1/files/{id}"));
        assert_eq!(status, 200, "{info}");
        assert_eq!(info["size"], format!("note number {i}\n").len(), "{info}");
    }
}
