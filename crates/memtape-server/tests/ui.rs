//! The memory browser against a real server: `/` and every asset it loads are served with
//! their content type, a strict Content-Security-Policy and an ETag, outside the API keys;
//! no asset names another origin; and every `/v1` path the page's scripts call is an
//! operation of the OpenAPI document (the page uses the public API only).
use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::Server;
use memtape_server::{KeyStore, Role};

/// A GET answer: status, headers by lowercase name, body.
struct Got {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn get(s: &Server, path: &str, extra: &[(&str, &str)]) -> Got {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .new_agent();
    let mut req = agent.get(&s.url(path));
    for (n, v) in extra {
        req = req.header(*n, *v);
    }
    let mut res = req.call().unwrap();
    let status = res.status().as_u16();
    let headers = res
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = res.body_mut().read_to_string().unwrap_or_default();
    Got {
        status,
        headers,
        body,
    }
}

/// The files the page loads: those `index.html` names under `/ui/`, and the modules each
/// script imports (`from "./x.js"`), transitively.
fn assets(s: &Server, index: &str) -> BTreeSet<String> {
    let mut found: BTreeSet<String> = quoted_after(index, "\"/ui/").into_iter().collect();
    let mut todo: Vec<String> = found
        .iter()
        .filter(|f| f.ends_with(".js"))
        .cloned()
        .collect();
    while let Some(js) = todo.pop() {
        let text = get(s, &format!("/ui/{js}"), &[]).body;
        for m in quoted_after(&text, "from \"./") {
            if found.insert(m.clone()) {
                todo.push(m);
            }
        }
    }
    found
}

/// The text between each `start` and the next `"`.
fn quoted_after(text: &str, start: &str) -> Vec<String> {
    text.match_indices(start)
        .filter_map(|(at, _)| {
            let rest = &text[at + start.len()..];
            rest.find('"').map(|end| rest[..end].to_owned())
        })
        .collect()
}

/// The `/v1/...` paths a script names in string or template literals, each `${…}` (a
/// path parameter) written `{}`; the query string left out.
fn api_paths(js: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for quote in ['"', '`'] {
        let start = format!("{quote}/v1/");
        for (at, _) in js.match_indices(&start) {
            let mut path = String::new();
            let mut rest = js[at + 1..].chars().peekable();
            while let Some(c) = rest.next() {
                match c {
                    '$' if quote == '`' && rest.peek() == Some(&'{') => {
                        let mut depth = 0;
                        for c in rest.by_ref() {
                            match c {
                                '{' => depth += 1,
                                '}' => {
                                    depth -= 1;
                                    if depth == 0 {
                                        break;
                                    }
                                }
                                _ => {}
                            }
                        }
                        path.push_str("{}");
                    }
                    c if c == quote || c == '?' => break,
                    c => path.push(c),
                }
            }
            out.insert(path);
        }
    }
    out
}

/// Whether `path` (with `{}` for parameters) matches the document's `template`.
fn matches(path: &str, template: &str) -> bool {
    let a: Vec<&str> = path.split('/').collect();
    let b: Vec<&str> = template.split('/').collect();
    a.len() == b.len()
        && a.iter()
            .zip(&b)
            .all(|(x, y)| x == y || (*x == "{}" && y.starts_with('{') && y.ends_with('}')))
}

#[test]
fn the_page_and_its_assets_are_served_strictly() {
    let s = Server::start();
    let index = get(&s, "/", &[]);
    assert_eq!(index.status, 200);
    assert_eq!(
        index.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(
        index
            .body
            .contains("<script type=\"module\" src=\"/ui/app.js\">")
    );
    let same = get(&s, "/ui/index.html", &[]);
    assert_eq!(same.body, index.body);

    let files = assets(&s, &index.body);
    for f in ["app.js", "app.css"] {
        assert!(files.contains(f), "index.html loads {f}: {files:?}");
    }
    // Every file of the ui folder is reachable from the page (nothing shipped unused).
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            name == "index.html" || files.contains(&name),
            "ui/{name} is not loaded by the page"
        );
    }

    let mut total = index.body.len();
    let mut pages = vec![("/".to_owned(), index)];
    for f in &files {
        let got = get(&s, &format!("/ui/{f}"), &[]);
        total += got.body.len();
        pages.push((format!("/ui/{f}"), got));
    }
    for (path, got) in &pages {
        assert_eq!(got.status, 200, "{path}");
        let ext = path.rsplit('.').next().unwrap();
        let want = match ext {
            "js" => "text/javascript; charset=utf-8",
            "css" => "text/css; charset=utf-8",
            _ => "text/html; charset=utf-8",
        };
        assert_eq!(got.header("content-type"), Some(want), "{path}");
        let csp = got.header("content-security-policy").unwrap_or_default();
        assert!(csp.contains("default-src 'self'"), "{path}: {csp}");
        assert!(csp.contains("script-src 'self'"), "{path}: {csp}");
        assert!(!csp.contains("unsafe"), "{path}: {csp}");
        assert_eq!(got.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(got.header("cache-control"), Some("no-cache"), "{path}");
        assert!(
            !got.body.contains("http://") && !got.body.contains("https://"),
            "{path} names another origin"
        );
        // An unchanged file is not sent again.
        let etag = got.header("etag").unwrap();
        let again = get(&s, path, &[("If-None-Match", etag)]);
        assert_eq!(again.status, 304, "{path}");
        assert!(again.body.is_empty());
    }
    // No inline script or style in the page (the policy would refuse them anyway).
    let html = &pages[0].1.body;
    assert!(!html.contains("<script>") && !html.contains("style="));
    assert!(!html.contains("<style"));
    assert!(total < 80 * 1024, "the page weighs {total} bytes");

    let missing = get(&s, "/ui/nothing.js", &[]);
    assert_eq!(missing.status, 404);
    // The icon browsers ask for is empty rather than a 404 in the console.
    assert_eq!(get(&s, "/favicon.ico", &[]).status, 204);
}

#[test]
fn the_page_is_public_and_the_api_still_needs_a_key() {
    let s = Server::start();
    let (key, _) = KeyStore::open(s.dir.path())
        .create("acme", Role::Read)
        .unwrap();
    assert_eq!(get(&s, "/", &[]).status, 200);
    assert_eq!(get(&s, "/ui/app.js", &[]).status, 200);
    assert_eq!(get(&s, "/v1/sessions", &[]).status, 401);
    let bearer = format!("Bearer {key}");
    assert_eq!(
        get(&s, "/v1/sessions", &[("Authorization", &bearer)]).status,
        200
    );
}

#[test]
fn every_api_path_the_page_calls_is_in_the_openapi_document() {
    let s = Server::start();
    let doc: serde_json::Value = serde_json::from_str(&get(&s, "/openapi.json", &[]).body).unwrap();
    let templates: Vec<String> = doc["paths"].as_object().unwrap().keys().cloned().collect();
    let index = get(&s, "/", &[]).body;
    let mut used = BTreeSet::new();
    for f in assets(&s, &index).iter().filter(|f| f.ends_with(".js")) {
        used.extend(api_paths(&get(&s, &format!("/ui/{f}"), &[]).body));
    }
    for must in [
        "/v1/sessions",
        "/v1/sessions/{}/entries",
        "/v1/search",
        "/v1/memory/versions",
    ] {
        assert!(used.contains(must), "the page calls {must}: {used:?}");
    }
    for path in &used {
        assert!(
            templates.iter().any(|t| matches(path, t)),
            "the page calls {path}, which the OpenAPI document does not have"
        );
    }
}
