//! Time travel, blame and the memory browser's routes against a real server on 127.0.0.1:
//! `as_of` on memory, files, history, search and the prompt; blame from a line to the
//! message that caused it; writing a file with compare-and-append (409 on a stale
//! version); the tenant's agents; and bad moments answered 400 with nothing written.
use crate::common::Server;
use serde_json::{Value, json};

fn put(s: &Server, path: &str, body: &Value) -> (u16, Value) {
    s.call("PUT", path, Some(body), None)
}

fn id(v: &Value) -> u64 {
    v["recorded"]["id"].as_u64().unwrap()
}

#[test]
fn memory_files_history_search_and_context_as_of_a_moment() {
    let s = Server::start();
    let (status, first) = s.post(
        "/v1/sessions/chat/messages",
        &json!({"messages": [
            {"role": "user", "content": "We are planning a trip to Oslo"},
            {"role": "assistant", "content": "Oslo in spring is lovely"}
        ]}),
    );
    assert_eq!(status, 201, "{first}");
    let (status, v1) = put(
        &s,
        "/v1/memory/file",
        &json!({"path": "MEMORY.md", "content": "- trip to Oslo\n"}),
    );
    assert_eq!(status, 200, "{v1}");
    let cut = id(&v1);
    let (_, later) = s.post(
        "/v1/sessions/chat/messages",
        &json!({"messages": [
            {"role": "user", "content": "Change of plan: Bergen instead"},
            {"role": "assistant", "content": "Bergen it is"}
        ]}),
    );
    let (status, v2) = put(
        &s,
        "/v1/memory/file",
        &json!({"path": "MEMORY.md", "content": "- trip to Bergen\n", "if_version": 1}),
    );
    assert_eq!(status, 200, "{v2}");
    assert_eq!(v2["recorded"]["version"], 2);

    // A file, the whole view and Bub's show, as of the first version (by id).
    let (status, file) = s.get(&format!("/v1/memory/file?path=MEMORY.md&as_of={cut}"));
    assert_eq!(status, 200, "{file}");
    assert_eq!(file["content"], "- trip to Oslo\n");
    assert_eq!(file["memory_version"], 1);
    let (_, now) = s.get("/v1/memory/file?path=MEMORY.md");
    assert_eq!(now["content"], "- trip to Bergen\n");
    assert_eq!(now["memory_version"], 2);
    let (_, view) = s.get(&format!("/v1/memory?as_of={cut}"));
    assert_eq!(view["version"], 1);
    assert_eq!(view["files"]["MEMORY.md"]["content"], "- trip to Oslo\n");
    let (_, show) = s.get(&format!("/v1/memory/show?as_of={cut}"));
    assert!(
        show["text"].as_str().unwrap().contains("trip to Oslo"),
        "{show}"
    );
    let (_, light) = s.get("/v1/memory/versions?path=MEMORY.md&ops=false");
    let light = light["versions"].as_array().unwrap();
    assert_eq!(light.len(), 2);
    assert_eq!(light[0]["id"], cut);
    assert_eq!(light[0]["ops"], json!([]));
    let (_, full) = s.get("/v1/memory/versions?path=MEMORY.md");
    assert_eq!(
        full["versions"][1]["ops"][0]["content"],
        "- trip to Bergen\n"
    );
    let (status, none) = s.get("/v1/memory/file?path=MEMORY.md&as_of=1970-01-01T00:00:00Z");
    assert_eq!(status, 404, "{none}");
    assert!(
        none["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not exist as of")
    );

    // History and search as of then: only the first exchange.
    let (status, history) = s.get(&format!("/v1/sessions/chat/history?as_of={cut}"));
    assert_eq!(status, 200, "{history}");
    assert_eq!(history["messages"].as_array().unwrap().len(), 2);
    let (_, history) = s.get("/v1/sessions/chat/history");
    assert_eq!(history["messages"].as_array().unwrap().len(), 4);
    let (_, hits) = s.get(&format!("/v1/search?q=Bergen&mode=bm25&as_of={cut}"));
    assert_eq!(hits["hits"].as_array().unwrap().len(), 0, "{hits}");
    let (_, hits) = s.get("/v1/search?q=Bergen&mode=bm25");
    let found: Vec<u64> = hits["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["entry"]["id"].as_u64().unwrap())
        .collect();
    assert!(found.contains(&later["ids"][0].as_u64().unwrap()), "{hits}");

    // The prompt as of then, with the moment as a number: built from that memory and
    // history, recorded nowhere.
    let (_, entries_before) = s.get("/v1/sessions/chat/entries?limit=1000");
    let (status, ctx) = s.post(
        "/v1/sessions/chat/context",
        &json!({"budget": 4000, "as_of": cut}),
    );
    assert_eq!(status, 200, "{ctx}");
    let system = ctx["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("trip to Oslo") && !system.contains("Bergen"),
        "{system}"
    );
    assert_eq!(ctx["messages"].as_array().unwrap().len(), 3, "{ctx}");
    let (_, entries_after) = s.get("/v1/sessions/chat/entries?limit=1000");
    assert_eq!(entries_before, entries_after);

    // A moment that is neither a time nor an id is a 400 that names the parameter.
    for bad in ["yesterday", "9007199254740992", "2026-13-01T00:00:00Z"] {
        for path in [
            format!("/v1/memory?as_of={bad}"),
            format!("/v1/memory/file?path=MEMORY.md&as_of={bad}"),
            format!("/v1/sessions/chat/history?as_of={bad}"),
            format!("/v1/search?q=x&as_of={bad}"),
            format!("/v1/memory/blame?path=MEMORY.md&as_of={bad}"),
        ] {
            let (status, body) = s.get(&path);
            assert_eq!(status, 400, "{path}: {body}");
            assert!(
                body["error"]["message"].as_str().unwrap().contains("as_of"),
                "{body}"
            );
        }
    }
    let (status, body) = s.post(
        "/v1/sessions/chat/context",
        &json!({"budget": 4000, "as_of": "soon"}),
    );
    assert!(status == 400 || status == 422, "{status} {body}");
}

#[test]
fn blame_leads_to_the_message_and_a_stale_write_is_a_conflict() {
    let s = Server::start();
    // The WAL captures the name into SESSION-STATE.md, caused by the message.
    let (status, appended) = s.post(
        "/v1/sessions/intro/messages?user=ada",
        &json!({"role": "user", "content": "My name is Ada Lovelace"}),
    );
    assert_eq!(status, 201, "{appended}");
    let message = appended["ids"][0].as_u64().unwrap();
    let (status, blame) = s.get("/v1/memory/blame?user=ada&path=SESSION-STATE.md");
    assert_eq!(status, 200, "{blame}");
    let line = blame["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["text"].as_str().unwrap().contains("Ada"))
        .unwrap_or_else(|| panic!("{blame}"));
    assert_eq!(line["source"], "wal");
    assert_eq!(line["causes"][0]["id"], message);
    assert_eq!(line["causes"][0]["session"], "intro");
    assert_eq!(blame["memory"], "own");

    // An edit in the page: compare-and-append against the version it read.
    let (_, read) = s.get("/v1/memory/file?user=ada&path=SESSION-STATE.md");
    let seen = read["memory_version"].as_u64().unwrap();
    let mut edited = read["content"].as_str().unwrap().to_owned();
    edited.push_str("- prefers tea\n");
    // Someone else writes first.
    let (status, _) = s.post(
        "/v1/sessions/intro/messages?user=ada",
        &json!({"role": "user", "content": "Remember that my cat is called Tom"}),
    );
    assert_eq!(status, 201);
    let (status, conflict) = put(
        &s,
        "/v1/memory/file?user=ada",
        &json!({"path": "SESSION-STATE.md", "content": edited, "if_version": seen}),
    );
    assert_eq!(status, 409, "{conflict}");
    assert_eq!(conflict["error"]["code"], "conflict");
    let (_, now) = s.get("/v1/memory/file?user=ada&path=SESSION-STATE.md");
    assert!(now["content"].as_str().unwrap().contains("Tom"));
    assert!(
        !now["content"].as_str().unwrap().contains("prefers tea"),
        "nothing written"
    );
    // Writing the same content again records nothing.
    let same = json!({"path": "SESSION-STATE.md", "content": now["content"], "if_version": now["memory_version"]});
    let (status, nothing) = put(&s, "/v1/memory/file?user=ada", &same);
    assert_eq!(status, 200, "{nothing}");
    assert!(nothing.get("recorded").is_none(), "{nothing}");
    // Bad paths are refused before anything is read or written.
    for path in ["../x.md", "/etc/passwd", "a\u{0}b.md", ""] {
        let (status, body) = put(
            &s,
            "/v1/memory/file",
            &json!({"path": path, "content": "x"}),
        );
        assert!(status == 400 || status == 422, "{path:?}: {status} {body}");
        let (status, body) = s.get(&format!("/v1/memory/blame?path={}", urlencode(path)));
        assert!(status == 400 || status == 422, "{path:?}: {status} {body}");
    }
    let (status, body) = s.get("/v1/memory/blame?path=memories/none.md");
    assert_eq!(status, 404, "{body}");

    // The tenant's agents, with their users.
    let (_, other) = s.post(
        "/v1/sessions/x/messages?agent=helper",
        &json!({"role": "assistant", "content": "hello"}),
    );
    assert!(other["ids"].is_array());
    let (status, agents) = s.get("/v1/agents");
    assert_eq!(status, 200, "{agents}");
    let agents = agents["agents"].as_array().unwrap();
    let names: Vec<&str> = agents
        .iter()
        .map(|a| a["agent"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "helper"]);
    assert_eq!(agents[0]["users"], json!(["ada"]));
    assert_eq!(agents[0]["sessions"], 1);
    assert!(agents[0]["updated_at"].is_string());
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn entries_page_forwards_and_backwards_without_reading_the_whole_tape_per_page() {
    let s = Server::start();
    let messages: Vec<Value> = (0..250)
        .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("turn {i}")}))
        .collect();
    let (status, appended) = s.post(
        "/v1/sessions/long/messages?user=u",
        &json!({"messages": messages}),
    );
    assert_eq!(status, 201, "{appended}");
    let ids: Vec<u64> = appended["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let base = "/v1/sessions/long/entries?user=u&kind=message&limit=100";
    // Forwards: 100, 100, 50, following `next`.
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, page) = s.get(&format!("{base}{cursor}"));
        assert_eq!(status, 200, "{page}");
        seen.extend(
            page["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["id"].as_u64().unwrap()),
        );
        assert!(page.get("prev").is_none());
        match page["next"].as_u64() {
            Some(n) => cursor = format!("&after={n}"),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    // Backwards from the end: the last 100 in tape order, then the 100 before, then 50.
    let mut back: Vec<u64> = Vec::new();
    let mut before = ids[249] + 1;
    loop {
        let (_, page) = s.get(&format!("{base}&before={before}"));
        let got: Vec<u64> = page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_u64().unwrap())
            .collect();
        assert!(got.windows(2).all(|w| w[0] < w[1]), "tape order");
        back.splice(0..0, got);
        assert!(page.get("next").is_none());
        match page["prev"].as_u64() {
            Some(p) => before = p,
            None => break,
        }
    }
    assert_eq!(back, ids);
    let (_, middle) = s.get(&format!("{base}&after={}&before={}", ids[9], ids[20]));
    assert_eq!(middle["entries"].as_array().unwrap().len(), 10);
    let (status, bad) = s.get(&format!("{base}&before=9007199254740992"));
    assert_eq!(status, 400, "{bad}");
}
