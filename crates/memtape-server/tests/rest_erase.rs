//! `POST /v1/erase` on a real server: admin keys only, confined to the key's tenant, bad
//! bodies refused before anything changes, the receipt naming the key, and after the
//! server stops no file of the data directory holds a byte of what was erased.
use crate::common::Server;
use memtape_server::{KeyStore, Role};
use serde_json::{Value, json};

const SECRET: &str = "4111-1111-ZOË";

fn files_holding(dir: &std::path::Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            for e in std::fs::read_dir(&path).unwrap() {
                stack.push(e.unwrap().path());
            }
        } else if meta.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[test]
fn only_an_admin_key_erases_and_only_in_its_tenant() {
    let mut s = Server::start();
    let keys = KeyStore::open(s.dir.path());
    let (admin, admin_record) = keys.create("acme", Role::Admin).unwrap();
    let (writer, _) = keys.create("acme", Role::Write).unwrap();
    let (reader, _) = keys.create("acme", Role::Read).unwrap();
    let (other, _) = keys.create("zeta", Role::Admin).unwrap();
    let say = |key: &str, text: &str| {
        let (status, body) = s.call(
            "POST",
            "/v1/sessions/s1/messages?user=ann",
            Some(&json!({"role": "user", "content": text})),
            Some(key),
        );
        assert_eq!(status, 201, "{body}");
    };
    say(&writer, &format!("my card is {SECRET}"));
    say(&writer, "and I like kayaks");
    say(&other, &format!("zeta's own {SECRET}"));
    let erase = |key: &str, query: &str, body: Value| {
        s.call("POST", &format!("/v1/erase{query}"), Some(&body), Some(key))
    };
    let text = json!({"what": "text", "text": SECRET, "reason": "ticket 42"});
    for key in [&writer, &reader] {
        let (status, body) = erase(key, "?user=ann", text.clone());
        assert_eq!(status, 403, "{body}");
    }
    // Bad bodies: nothing changes.
    for (query, body, want) in [
        (
            "?user=ann",
            json!({"what": "text", "text": SECRET, "also": 1}),
            422,
        ),
        ("?user=ann", json!({"what": "text"}), 400),
        ("?user=ann", json!({"what": "text", "text": "41"}), 400),
        ("", json!({"what": "user"}), 400),
        ("?user=ann", json!({"what": "entries", "ids": []}), 400),
        (
            "?user=ann",
            json!({"what": "entries", "ids": [9007199254740992_u64]}),
            422,
        ),
        ("?user=ann", json!({"what": "everything"}), 422),
    ] {
        let (status, answer) = erase(&admin, query, body.clone());
        assert_eq!(status, want, "{body} → {answer}");
    }
    let (_, history) = s.call(
        "GET",
        "/v1/sessions/s1/history?user=ann",
        None,
        Some(&writer),
    );
    assert!(history.to_string().contains("4111"), "{history}");

    let (status, dry) = erase(
        &admin,
        "?user=ann",
        json!({"what": "text", "text": SECRET, "dry_run": true}),
    );
    assert_eq!(status, 200, "{dry}");
    assert_eq!(
        (dry["redacted"].as_u64(), dry["receipt"].is_null()),
        // The message, and the WAL's capture of it into the working state.
        (Some(2), true),
        "{dry}"
    );
    let (status, done) = erase(&admin, "?user=ann", text);
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["redacted"], 2, "{done}");
    assert!(done["receipt"].as_u64().is_some(), "{done}");
    let (_, history) = s.call(
        "GET",
        "/v1/sessions/s1/history?user=ann",
        None,
        Some(&writer),
    );
    assert!(
        history.to_string().contains("my card is [erased]"),
        "{history}"
    );
    let (_, hits) = s.call(
        "GET",
        "/v1/search?q=4111&mode=bm25&user=ann",
        None,
        Some(&reader),
    );
    assert_eq!(hits["hits"], json!([]), "{hits}");
    // Nothing erased is read back, the receipt included.
    let (_, entries) = s.call(
        "GET",
        "/v1/sessions/s1/entries?user=ann&limit=100",
        None,
        Some(&reader),
    );
    assert!(!entries.to_string().contains("4111"), "{entries}");
    // Zeta's text, in another tenant, is untouched.
    let (_, zeta) = s.call(
        "GET",
        "/v1/search?q=4111&mode=bm25&user=ann",
        None,
        Some(&other),
    );
    assert!(zeta.to_string().contains("zeta's own 4111"), "{zeta}");

    // The whole user: history empty, the key named on the receipt.
    let (status, done) = erase(&admin, "?user=ann", json!({"what": "user"}));
    assert_eq!(status, 200, "{done}");
    // Both messages and what the WAL captured of them.
    assert!(done["entries"].as_u64().unwrap() >= 2, "{done}");
    let (_, history) = s.call(
        "GET",
        "/v1/sessions/s1/history?user=ann",
        None,
        Some(&writer),
    );
    assert_eq!(history["messages"], json!([]), "{history}");
    assert!(!history.to_string().contains("kayak"));
    s.stop();
    // Zeta's copy is the only one left on disk.
    let left = files_holding(s.dir.path(), "my card is 4111");
    assert_eq!(left, Vec::<String>::new());
    let tape = std::fs::read(s.dir.path().join("memtape.db")).unwrap();
    let needle = format!("key:{}", admin_record.id);
    assert!(
        tape.windows(needle.len()).any(|w| w == needle.as_bytes()),
        "the receipt names the key"
    );
}
