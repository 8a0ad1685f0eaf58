//! The OpenAPI document is a contract: a snapshot of it is kept in the repository, so every
//! change to the API shows up as a change to `openapi.json` in review. Run with
//! `MEMTAPE_UPDATE_OPENAPI=1` to accept a deliberate change. The served document is the
//! same, and it is OpenAPI 3.1 with every operation documented.
use crate::common;
use serde_json::Value;

const SNAPSHOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");

#[test]
fn the_openapi_document_changes_only_deliberately() {
    let now = memtape_server::openapi_json();
    if std::env::var_os("MEMTAPE_UPDATE_OPENAPI").is_some() {
        std::fs::write(SNAPSHOT, format!("{now}\n")).unwrap();
    }
    let kept = std::fs::read_to_string(SNAPSHOT).unwrap_or_default();
    assert!(
        kept.trim_end() == now,
        "the API changed: review the difference and run with MEMTAPE_UPDATE_OPENAPI=1 to \
         accept it (crates/memtape-server/openapi.json)"
    );
    let doc: Value = serde_json::from_str(&now).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            assert!(
                op["responses"].as_object().is_some_and(|r| !r.is_empty()),
                "{method} {path} documents no response"
            );
            assert!(
                op["description"].is_string() || op["summary"].is_string(),
                "{method} {path}"
            );
        }
    }
}

#[test]
fn the_server_serves_the_same_document() {
    let s = common::Server::start();
    let (status, served) = s.get("/openapi.json");
    assert_eq!(status, 200);
    let built: Value = serde_json::from_str(&memtape_server::openapi_json()).unwrap();
    assert_eq!(served, built);
}
