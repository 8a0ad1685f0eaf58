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
        compact: false,
    }
}

#[test]
fn attachments_go_with_their_entries_or_when_they_hold_the_text() {
    let data = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let dir = data.path();
    // Tenant `t`'s files are in its own folder; the `default` tenant's are `files/` itself.
    let uploads = dir.join("files/tenants/t/uploads");
    let tools = dir.join("files/tenants/t/tool-files");
    std::fs::create_dir_all(&uploads).unwrap();
    std::fs::create_dir_all(&tools).unwrap();
    let others = dir.join("files/uploads");
    std::fs::create_dir_all(&others).unwrap();
    std::fs::write(others.join("card.txt"), format!("card: {SECRET}\n")).unwrap();
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
    assert!(
        others.join("card.txt").exists(),
        "another tenant's file of the same name is not this erasure's"
    );
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

/// Time travel to a moment before an erasure shows `[erased]` where the message was (its
/// role and place kept); a moment after it, and now, leave it out; blame names the
/// erasure on the cause it took.
#[test]
fn the_past_shows_erased_where_the_text_was_and_blame_names_the_erasure() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};

    use chrono::TimeZone;
    use memtape::memory::{Change, Op, paths};
    use memtape::{AsOf, HistoryLimits};

    let data = tempfile::tempdir().unwrap();
    let minute = Arc::new(AtomicI64::new(0));
    let clock = Arc::clone(&minute);
    let start = chrono::Utc.with_ymd_and_hms(2026, 5, 1, 8, 0, 0).unwrap();
    let e = Engine::init(data.path())
        .unwrap()
        .with_clock(move || start + chrono::Duration::minutes(clock.load(Ordering::SeqCst)));
    let agent = Scope::agent("t", "a").unwrap();
    let s = agent.clone().with_session("s").unwrap();
    let say = |m: Message| e.append(&s, m, AppendOptions::default()).unwrap();
    let first = say(Message::user("my name is Ann"));
    let second = say(Message::user(format!("my card is {SECRET}")));
    let third = say(Message::assistant("noted"));
    let mut change = Change::one(
        Op::Write {
            path: paths::MEMORY.into(),
            content: "Ann has a card on file.".into(),
        },
        "test",
    );
    change.caused_by = vec![second.id];
    e.record_memory(&agent, change).unwrap();

    minute.store(10, Ordering::SeqCst);
    let done = e
        .erase(&agent, Erase::Entries(vec![second.id]), options(), None)
        .unwrap();
    let receipt = done.receipt.unwrap().id;
    minute.store(20, Ordering::SeqCst);

    let texts = |as_of: Option<AsOf>| -> Vec<(u64, String)> {
        e.history_as_of(&s, &HistoryLimits::default(), as_of.as_ref())
            .unwrap()
            .iter()
            .map(|x| (x.id.0, x.message().unwrap().content_text().into_owned()))
            .collect()
    };
    let without = vec![
        (first.id.0, "my name is Ann".to_owned()),
        (third.id.0, "noted".to_owned()),
    ];
    let with_mark = vec![
        (first.id.0, "my name is Ann".to_owned()),
        (second.id.0, "[erased]".to_owned()),
        (third.id.0, "noted".to_owned()),
    ];
    assert_eq!(texts(None), without);
    let before = [
        AsOf::Time(start + chrono::Duration::minutes(5)),
        AsOf::Entry(third.id),
    ];
    for moment in before {
        assert_eq!(texts(Some(moment)), with_mark, "{moment}");
    }
    for moment in [
        AsOf::Time(start + chrono::Duration::minutes(15)),
        AsOf::Entry(receipt),
    ] {
        assert_eq!(texts(Some(moment)), without, "{moment}");
    }

    let blame = e.blame(&agent, paths::MEMORY, None).unwrap().unwrap();
    let cause = &blame.causes[&second.id];
    assert_eq!(cause.erased.map(|x| x.by), Some(receipt));
    assert!(!format!("{:?}", cause.payload).contains("ZQX"));
}

/// A memory version erased whole keeps its number (later versions keep theirs) and applies
/// nothing; the versions list names the erasure.
#[test]
fn an_erased_memory_version_keeps_its_number_and_applies_nothing() {
    use memtape::memory::{Change, Op, paths};

    let data = tempfile::tempdir().unwrap();
    let e = Engine::init(data.path()).unwrap();
    let agent = Scope::agent("t", "a").unwrap();
    let write = |path: &str, content: &str| {
        e.record_memory(
            &agent,
            Change::one(
                Op::Write {
                    path: path.into(),
                    content: content.into(),
                },
                "test",
            ),
        )
        .unwrap()
    };
    write(paths::MEMORY, "likes tea");
    let secret = write(paths::PROFILE, &format!("card {SECRET}"));
    write(paths::MEMORY, "likes tea and kayaks");
    let done = e
        .erase(&agent, Erase::Entries(vec![secret.id]), options(), None)
        .unwrap();
    let receipt = done.receipt.unwrap().id;
    let (log, _) = e.memory_log(&agent).unwrap();
    let versions: Vec<(u64, Option<memtape::EntryId>)> = log
        .changes()
        .iter()
        .map(|r| (r.version, r.erased))
        .collect();
    assert_eq!(versions, vec![(1, None), (2, Some(receipt)), (3, None)]);
    let now = e.memory(&agent).unwrap();
    assert_eq!(now.version, 3);
    assert_eq!(now.content(paths::MEMORY), Some("likes tea and kayaks"));
    assert_eq!(now.content(paths::PROFILE), None);
}

/// A user's workspace folder that is a symlink out of the data directory: the user's
/// erasure removes the link, never what it points at.
#[test]
fn a_user_erasure_removes_a_symlinked_workspace_link_not_its_target() {
    let data = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("MEMORY.md"), "not memtape's").unwrap();
    let e = Engine::init(data.path()).unwrap();
    let agent = Scope::agent("t", "a").unwrap();
    let ann = agent.clone().with_user("ann").unwrap();
    e.save_long_term(&ann, "likes tea").unwrap();
    let link = memtape::workspace_dir(data.path(), &ann);
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(outside.path(), &link).unwrap();
    e.erase(
        &agent,
        Erase::User("ann".into()),
        options(),
        Some(data.path()),
    )
    .unwrap();
    assert!(
        std::fs::symlink_metadata(&link).is_err(),
        "the link is gone"
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("MEMORY.md")).unwrap(),
        "not memtape's"
    );
}
