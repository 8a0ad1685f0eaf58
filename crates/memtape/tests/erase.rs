//! Erasure through the engine, on a real SQLite file and a real files folder: attached
//! files go with the entries that attach them (whole), or when their bytes hold the text
//! erased; a symlink in the files folder is never followed out of it.
use memtape::{AppendOptions, Engine, Erase, EraseOptions, Message, Scope};
use memtape_core::FileRef;

const SECRET: &str = "ZQX-991-ÅSE";

fn file(json: serde_json::Value) -> FileRef {
    serde_json::from_value(json).unwrap()
}

fn upload(id: &str) -> FileRef {
    file(serde_json::json!({
        "type": "document", "transfer_method": "local_file", "upload_file_id": id,
        "belongs_to": "user"
    }))
}

fn with_files(text: &str, files: Vec<FileRef>) -> Message {
    let mut m = Message::user(text);
    m.files = files;
    m
}

fn options() -> EraseOptions {
    EraseOptions {
        by: "cli".into(),
        reason: String::new(),
        dry_run: false,
    }
}

#[test]
fn attachments_go_with_their_entries_or_when_they_hold_the_text() {
    let data = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let dir = data.path();
    let uploads = dir.join("files/uploads");
    let tools = dir.join("files/tool-files");
    std::fs::create_dir_all(&uploads).unwrap();
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::write(uploads.join("card.txt"), format!("card: {SECRET}\n")).unwrap();
    let utf16: Vec<u8> = format!("note {SECRET}")
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    std::fs::write(uploads.join("wide.txt"), utf16).unwrap();
    std::fs::write(uploads.join("photo.png"), b"\x89PNG plain picture").unwrap();
    std::fs::write(tools.join("chart.png"), b"\x89PNG chart").unwrap();
    std::fs::write(outside.path().join("keep.txt"), SECRET).unwrap();
    std::os::unix::fs::symlink(outside.path().join("keep.txt"), uploads.join("link.txt")).unwrap();

    let e = Engine::init(dir).unwrap();
    let agent = Scope::agent("t", "a").unwrap();
    let s1 = agent.clone().with_session("s1").unwrap();
    let s2 = agent.clone().with_session("s2").unwrap();
    let say = |scope: &Scope, m: Message| e.append(scope, m, AppendOptions::default()).unwrap();
    say(
        &s1,
        with_files(
            "here are my files",
            vec![
                upload("card.txt"),
                upload("wide.txt"),
                upload("photo.png"),
                upload("link.txt"),
            ],
        ),
    );
    let tool_file = file(serde_json::json!({
        "type": "image", "transfer_method": "tool_file", "tool_file_id": "chart.png",
        "belongs_to": "assistant"
    }));
    let url = file(serde_json::json!({
        "type": "image", "transfer_method": "remote_url", "url": "https://example.org/a.png",
        "belongs_to": "user"
    }));
    say(&s2, with_files("a chart and a link", vec![tool_file, url]));

    // By text: the files whose bytes hold it go (UTF-8 and UTF-16); the rest stay, the
    // message that attached them included (it does not hold the text).
    let done = e
        .erase(&agent, Erase::Text(SECRET.into()), options(), Some(dir))
        .unwrap();
    assert_eq!(done.files_removed, 2, "{done:?}");
    assert!(!uploads.join("card.txt").exists());
    assert!(!uploads.join("wide.txt").exists());
    assert!(uploads.join("photo.png").exists());
    // The symlink pointed outside: neither it nor what it points at was touched.
    assert!(outside.path().join("keep.txt").exists());

    // A session erased whole takes its files, tool files too; a URL is not ours.
    let done = e
        .erase(&agent, Erase::Session("s2".into()), options(), Some(dir))
        .unwrap();
    assert_eq!(done.files_removed, 1, "{done:?}");
    assert!(!tools.join("chart.png").exists());
    assert!(uploads.join("photo.png").exists(), "s1's file stays");

    // A dry run removes nothing.
    let dry = EraseOptions {
        dry_run: true,
        ..options()
    };
    let counted = e
        .erase(&agent, Erase::Session("s1".into()), dry, Some(dir))
        .unwrap();
    assert_eq!(counted.files_removed, 0);
    assert!(uploads.join("photo.png").exists());
    e.erase(&agent, Erase::Session("s1".into()), options(), Some(dir))
        .unwrap();
    assert!(!uploads.join("photo.png").exists());
    assert_eq!(
        std::fs::read_to_string(outside.path().join("keep.txt")).unwrap(),
        SECRET,
        "nothing outside the data directory is touched"
    );
}
