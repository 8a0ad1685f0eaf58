//! The search index against a real SQLite tape: filters, modes, catching up after a crash,
//! rebuilding, and refusing vectors of another model.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use memtape_core::{EntryId, Event, Kind, Message, NewEntry, Payload, Role, Scope};
use memtape_search::{
    EmbedError, Embedder, Error, Index, IndexConfig, Mode, SearchFilter, SearchRequest,
};
use memtape_store::{SqliteStore, Store};

/// A deterministic stand-in model: words hashed into 64 buckets, so texts sharing words
/// are close. Real models are tested in memtape-embed and end to end in memtape.
struct Buckets;

impl Embedder for Buckets {
    fn id(&self) -> &str {
        "test-buckets-64"
    }
    fn dim(&self) -> usize {
        64
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0f32; 64];
                for w in memtape_search::text::terms(t) {
                    let h = w
                        .bytes()
                        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
                    v[(h % 64) as usize] += 1.0;
                }
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
                v.iter().map(|x| x / n).collect()
            })
            .collect())
    }
}

fn t(days: i64) -> DateTime<Utc> {
    DateTime::UNIX_EPOCH + Duration::days(20_000 + days)
}

fn session(user: &str, name: &str) -> Scope {
    Scope::agent("acme", "bot")
        .unwrap()
        .with_user(user)
        .unwrap()
        .with_session(name)
        .unwrap()
}

fn say(store: &SqliteStore, scope: &Scope, m: Message, day: i64) -> EntryId {
    store
        .append(vec![NewEntry::new(
            scope.clone(),
            Payload::Message(m),
            t(day),
        )])
        .unwrap()[0]
        .id
}

fn open(path: &Path) -> Index {
    Index::open(path, Some(Arc::new(Buckets)), IndexConfig::plain()).unwrap()
}

fn ids(index: &Index, request: &SearchRequest) -> Vec<u64> {
    index
        .search(request)
        .unwrap()
        .iter()
        .map(|h| h.id.0)
        .collect()
}

struct Fixture {
    _dir: tempfile::TempDir,
    store: SqliteStore,
    index_path: std::path::PathBuf,
    ann: Scope,
}

/// A tape with two users, a tool result, a memory event and a pointer move.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
    let ann = session("ann", "s1");
    let bob = session("bob", "s1");
    say(
        &store,
        &ann,
        Message::user("My sister Maria plays the violin"),
        0,
    ); // 1
    say(
        &store,
        &ann,
        Message::assistant("The violin is a lovely instrument"),
        0,
    ); // 2
    say(
        &store,
        &bob,
        Message::user("I play the violin in an orchestra"),
        1,
    ); // 3
    say(
        &store,
        &ann,
        Message::tool_result("c1", "Concert tickets: violin recital on 2024-05-03"),
        2,
    ); // 4
    let memory = Event {
        name: "memory.long_term".into(),
        data: serde_json::json!({"content": "Ann's sister Maria is a violin teacher"}),
    };
    store
        .append(vec![NewEntry::new(
            Scope::agent("acme", "bot")
                .unwrap()
                .with_user("ann")
                .unwrap(),
            Payload::Event(memory),
            t(3),
        )])
        .unwrap(); // 5
    let pointer = Event {
        name: "session.consolidated".into(),
        data: serde_json::json!({"through": 2}),
    };
    store
        .append(vec![NewEntry::new(
            ann.clone(),
            Payload::Event(pointer),
            t(3),
        )])
        .unwrap(); // 6
    let index_path = dir.path().join("index");
    Fixture {
        _dir: dir,
        store,
        index_path,
        ann,
    }
}

#[test]
fn every_entry_with_text_is_found_and_filters_narrow_the_results() {
    let f = fixture();
    let index = open(&f.index_path);
    assert_eq!(
        index.catch_up(&f.store).unwrap(),
        5,
        "the pointer move has no text"
    );
    assert_eq!(index.covered(), EntryId(6));
    let tenant = SearchFilter::tenant("acme");
    let all = ids(
        &index,
        &SearchRequest::new("violin", tenant.clone()).mode(Mode::Bm25),
    );
    assert_eq!(all.len(), 5);
    let ann = SearchFilter {
        user: Some("ann".into()),
        ..tenant.clone()
    };
    let mut got = ids(
        &index,
        &SearchRequest::new("violin", ann.clone()).mode(Mode::Bm25),
    );
    got.sort();
    assert_eq!(got, [1, 2, 4, 5], "bob's entry is filtered out");
    let session_only = SearchFilter::within(&f.ann);
    let mut got = ids(
        &index,
        &SearchRequest::new("violin", session_only).mode(Mode::Vector),
    );
    got.sort();
    assert_eq!(
        got,
        [1, 2, 4],
        "the memory event lives in the user scope, not the session"
    );
    let kinds = SearchFilter {
        kinds: vec![Kind::ToolResult, Kind::Event],
        ..ann.clone()
    };
    let mut got = ids(&index, &SearchRequest::new("violin", kinds));
    got.sort();
    assert_eq!(got, [4, 5]);
    let roles = SearchFilter {
        roles: vec![Role::Assistant],
        ..ann.clone()
    };
    assert_eq!(ids(&index, &SearchRequest::new("violin", roles)), [2]);
    let window = SearchFilter {
        since: Some(t(1)),
        until: Some(t(3)),
        ..tenant.clone()
    };
    let mut got = ids(&index, &SearchRequest::new("violin", window));
    got.sort();
    assert_eq!(got, [3, 4], "since is inclusive, until exclusive");
    let other_tenant = SearchFilter::tenant("globex");
    assert!(ids(&index, &SearchRequest::new("violin", other_tenant)).is_empty());
}

#[test]
fn bm25_ranks_rare_words_and_stems_and_hybrid_fuses_both_lists() {
    let f = fixture();
    let index = open(&f.index_path);
    index.catch_up(&f.store).unwrap();
    let tenant = SearchFilter::tenant("acme");
    let hits = index
        .search(&SearchRequest::new("who plays in orchestras?", tenant.clone()).mode(Mode::Bm25))
        .unwrap();
    assert_eq!(
        hits[0].id,
        EntryId(3),
        "'orchestras' stems to 'orchestra', the rarest term"
    );
    assert_eq!(hits[0].bm25.unwrap().rank, 1);
    assert!(hits[0].vector.is_none());
    let hits = index
        .search(&SearchRequest::new("Maria violin teacher sister", tenant).limit(3))
        .unwrap();
    assert_eq!(hits.len(), 3);
    assert_eq!(
        hits[0].id,
        EntryId(5),
        "both lists put the memory event first"
    );
    assert!(hits[0].bm25.is_some() && hits[0].vector.is_some());
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
}

#[test]
fn a_search_that_catches_up_as_it_embeds_answers_as_a_catch_up_then_a_search() {
    let f = fixture();
    let overlapped = open(&f.index_path);
    let sequential = open(&f.index_path.with_file_name("sequential"));
    let tenant = SearchFilter::tenant("acme");
    let compare = |query: &str| {
        for mode in [Mode::Bm25, Mode::Vector, Mode::Hybrid] {
            let request = SearchRequest::new(query, tenant.clone()).mode(mode);
            let got = overlapped.search_caught_up(&f.store, &request).unwrap();
            sequential.catch_up(&f.store).unwrap();
            let want = sequential.search(&request).unwrap();
            let pairs = |hits: &[memtape_search::Hit]| {
                hits.iter().map(|h| (h.id.0, h.score)).collect::<Vec<_>>()
            };
            assert_eq!(pairs(&got), pairs(&want), "{query:?} in {mode:?}");
            assert!(!got.is_empty(), "{query:?} in {mode:?} finds something");
        }
    };
    // The first search catches up the whole tape, the second only what came since.
    compare("Maria violin teacher sister");
    let newest = say(&f.store, &f.ann, Message::user("Maria moved to Lisbon"), 4);
    compare("where does Maria live? Lisbon");
    let hits = overlapped
        .search_caught_up(
            &f.store,
            &SearchRequest::new("Lisbon", tenant.clone()).mode(Mode::Hybrid),
        )
        .unwrap();
    assert_eq!(hits[0].id, newest);
    assert!(hits[0].bm25.is_some() && hits[0].vector.is_some());
    assert!(
        overlapped
            .search_caught_up(&f.store, &SearchRequest::new("Lisbon", tenant).limit(0))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn after_a_crash_the_index_catches_up_instead_of_lagging() {
    let f = fixture();
    {
        let index = open(&f.index_path);
        index.catch_up(&f.store).unwrap();
    }
    // The process dies after these appends were acknowledged but before the index saw
    // them: the tape has entries 7 and 8, the index file still says it covers 6.
    say(
        &f.store,
        &f.ann,
        Message::user("We adopted a greyhound called Pixel"),
        4,
    );
    say(
        &f.store,
        &f.ann,
        Message::assistant("Pixel is a great name for a greyhound"),
        4,
    );
    let index = open(&f.index_path);
    assert_eq!(index.covered(), EntryId(6));
    let request = SearchRequest::new("greyhound", SearchFilter::tenant("acme")).mode(Mode::Bm25);
    assert!(ids(&index, &request).is_empty(), "not yet caught up");
    assert_eq!(index.catch_up(&f.store).unwrap(), 2);
    assert_eq!(index.covered(), EntryId(8));
    let mut got = ids(&index, &request);
    got.sort();
    assert_eq!(got, [7, 8]);
    assert_eq!(
        index.catch_up(&f.store).unwrap(),
        0,
        "catching up twice adds nothing"
    );
    // What was committed survives a reopen, vectors included (the search loads the shard).
    drop(index);
    let index = open(&f.index_path);
    assert_eq!(
        ids(
            &index,
            &SearchRequest::new("greyhound Pixel", SearchFilter::tenant("acme"))
                .mode(Mode::Vector)
                .limit(2)
        )
        .len(),
        2
    );
    assert_eq!(index.len(), 7);
}

#[test]
fn a_long_tape_is_indexed_in_batches_with_the_same_result() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let s = session("ann", "long");
    let batch: Vec<NewEntry> = (0..1000)
        .map(|i| {
            NewEntry::new(
                s.clone(),
                Payload::Message(Message::user(format!(
                    "note number {i} about topic{}",
                    i % 7
                ))),
                t(0),
            )
        })
        .collect();
    store.append(batch).unwrap();
    let index = open(&dir.path().join("index"));
    assert_eq!(index.catch_up(&store).unwrap(), 1000);
    assert_eq!(index.covered(), EntryId(1000));
    let hits = index
        .search(
            &SearchRequest::new("topic3", SearchFilter::within(&s))
                .mode(Mode::Bm25)
                .limit(500),
        )
        .unwrap();
    assert_eq!(hits.len(), 143);
}

#[test]
fn an_index_of_another_model_is_refused_until_rebuilt() {
    let f = fixture();
    open(&f.index_path).catch_up(&f.store).unwrap();
    let err = Index::open(&f.index_path, None, IndexConfig::plain()).unwrap_err();
    assert!(matches!(err, Error::EmbedderChanged { .. }), "{err}");
    assert!(err.to_string().contains("memtape reindex"));
    let rebuilt = Index::rebuild(&f.index_path, None, IndexConfig::plain()).unwrap();
    assert_eq!(rebuilt.covered(), EntryId(0));
    assert_eq!(rebuilt.catch_up(&f.store).unwrap(), 5);
    let err = rebuilt
        .search(&SearchRequest::new("violin", SearchFilter::tenant("acme")))
        .unwrap_err();
    assert!(matches!(err, Error::NoEmbedder("hybrid")), "{err}");
    assert_eq!(
        rebuilt
            .search(&SearchRequest::new("violin", SearchFilter::tenant("acme")).mode(Mode::Bm25))
            .unwrap()
            .len(),
        5
    );
}

#[test]
fn a_file_that_is_not_an_index_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    say(&store, &session("ann", "s"), Message::user("a kayak"), 0);
    // Where the index's folder should be, and where a tenant's shard should be.
    let taken = dir.path().join("taken");
    std::fs::write(&taken, b"precious").unwrap();
    let err = Index::open(&taken, None, IndexConfig::plain()).unwrap_err();
    assert!(matches!(err, Error::Dir { .. }), "{err}");
    assert_eq!(std::fs::read(&taken).unwrap(), b"precious");
    let index = Index::open(&dir.path().join("index"), None, IndexConfig::plain()).unwrap();
    let path = index.shard_path("acme");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE precious (x); INSERT INTO precious VALUES (1);")
        .unwrap();
    drop(conn);
    let err = index.catch_up(&store).unwrap_err();
    assert!(matches!(err, Error::Unreadable { .. }), "{err}");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM precious", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete", "not even the journal mode was changed");
}

fn with(config: IndexConfig, path: &Path) -> Index {
    Index::open(path, Some(Arc::new(Buckets)), config).unwrap()
}

#[test]
fn an_answer_is_found_through_the_question_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let s = session("ann", "pets");
    say(&store, &s, Message::user("What breed is your dog?"), 0);
    let answer = say(
        &store,
        &s,
        Message::assistant("A beagle, and she is three."),
        0,
    );
    say(
        &store,
        &s,
        Message::user("Nice. Any plans for the weekend?"),
        0,
    );
    let request = SearchRequest::new("dog breed", SearchFilter::within(&s)).mode(Mode::Bm25);
    let plain = with(IndexConfig::plain(), &dir.path().join("plain.db"));
    plain.catch_up(&store).unwrap();
    assert!(
        !ids(&plain, &request).contains(&answer.0),
        "the answer has neither word"
    );
    let config = IndexConfig {
        context_weight: 0.3,
        ..IndexConfig::plain()
    };
    let contextual = with(config, &dir.path().join("context.db"));
    contextual.catch_up(&store).unwrap();
    assert_eq!(
        ids(&contextual, &request),
        [1, answer.0],
        "own words first, then context"
    );
}

/// BM25F (issue 32): a message is normalised by its own length, not by its row's with the
/// message before it. FTS5's `bm25()` scored a short reply after a long answer as a long
/// document, so it ranked below a longer message that opens its session.
#[test]
fn a_short_reply_is_not_scored_as_long_as_the_answer_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let s = session("ann", "planning");
    let filler = "we can split the work into phases with reviews and buffers between them ";
    let answer = say(
        &store,
        &s,
        Message::assistant(format!(
            "Given your deadline, {} and the deadline stays safe.",
            filler.repeat(8)
        )),
        0,
    );
    let reply = say(&store, &s, Message::user("My deadline is March 15."), 0);
    let opener = say(
        &store,
        &session("ann", "later"),
        Message::user("The deadline moved again, sadly, to some later date in the spring."),
        0,
    );
    let request = SearchRequest::new("deadline", SearchFilter::tenant("acme")).mode(Mode::Bm25);
    let index = with(IndexConfig::plain(), &dir.path().join("plain.db"));
    index.catch_up(&store).unwrap();
    assert_eq!(ids(&index, &request), [reply.0, opener.0, answer.0]);
    // b is BM25's length normalisation: without it the answer, saying the word twice,
    // comes first.
    let unnormalised = with(
        IndexConfig {
            bm25_b: 0.0,
            ..IndexConfig::plain()
        },
        &dir.path().join("b0.db"),
    );
    unnormalised.catch_up(&store).unwrap();
    assert_eq!(ids(&unnormalised, &request)[0], answer.0);
}

/// A session's first message is where what is new gets said: with `opener_weight` it ranks
/// above the same words said later in another session.
#[test]
fn a_session_opener_gains_the_opener_weight() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let a = session("ann", "a");
    say(&store, &a, Message::user("hello there"), 0);
    let later = say(&store, &a, Message::user("we adopted a puppy"), 0);
    let opener = say(
        &store,
        &session("ann", "b"),
        Message::user("we adopted a puppy"),
        0,
    );
    let request = SearchRequest::new("puppy", SearchFilter::tenant("acme")).mode(Mode::Bm25);
    let plain = with(IndexConfig::plain(), &dir.path().join("plain.db"));
    plain.catch_up(&store).unwrap();
    assert_eq!(
        ids(&plain, &request),
        [later.0, opener.0],
        "a tie: older first"
    );
    let boosted = with(
        IndexConfig {
            opener_weight: 0.1,
            ..IndexConfig::plain()
        },
        &dir.path().join("boosted.db"),
    );
    boosted.catch_up(&store).unwrap();
    let hits = boosted.search(&request).unwrap();
    assert_eq!(
        hits.iter().map(|h| h.id.0).collect::<Vec<_>>(),
        [opener.0, later.0]
    );
    assert!((hits[0].score - hits[1].score - 0.1).abs() < 1e-6);
}

/// A long answer after a short turn that matches gains less from it than a short reply
/// does: with `neighbour_length` 0.5 a neighbour's share is scaled by the square root of
/// how much shorter it is than the message it flows to (never above 1). Without it, both
/// replies gain alike.
#[test]
fn a_long_reply_gains_less_from_a_short_match_than_a_short_reply() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let a = session("ann", "a");
    say(&store, &a, Message::user("we adopted a puppy"), 0);
    // 64 words, none of them the query's: 16 times the four words before it.
    let long = say(
        &store,
        &a,
        Message::assistant("here is a list of things to buy ".repeat(8)),
        0,
    );
    let b = session("ann", "b");
    say(&store, &b, Message::user("we adopted a puppy"), 0);
    let short = say(&store, &b, Message::assistant("how lovely"), 0);
    let request = SearchRequest::new("puppy", SearchFilter::tenant("acme")).mode(Mode::Bm25);
    let score = |index: &Index, id: EntryId| {
        index
            .search(&request)
            .unwrap()
            .iter()
            .find(|h| h.id == id)
            .map(|h| h.score)
            .expect("the reply is a hit through its neighbour")
    };
    let spread = IndexConfig {
        neighbour_weight: 0.2,
        ..IndexConfig::plain()
    };
    let alike = with(spread, &dir.path().join("alike.db"));
    alike.catch_up(&store).unwrap();
    assert!((score(&alike, long) - score(&alike, short)).abs() < 1e-6);
    let by_length = with(
        IndexConfig {
            neighbour_length: 0.5,
            ..spread
        },
        &dir.path().join("by_length.db"),
    );
    by_length.catch_up(&store).unwrap();
    assert!((score(&by_length, short) - score(&alike, short)).abs() < 1e-6);
    let ratio = score(&by_length, long) / score(&by_length, short);
    assert!((ratio - 0.25).abs() < 1e-3, "sqrt(4 / 64), not {ratio}");
}

#[test]
fn indexing_in_pieces_and_rebuilding_give_the_same_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let config = IndexConfig {
        context_weight: 0.3,
        neighbour_weight: 0.2,
        ..IndexConfig::plain()
    };
    let pieces = with(config, &dir.path().join("pieces.db"));
    let a = session("ann", "a");
    let b = session("bob", "b");
    let lines = TRIP;
    for (i, line) in lines.iter().enumerate() {
        // Two sessions interleave, and every append is caught up on its own, so each
        // context comes from the tape rather than from the same batch.
        say(
            &store,
            if i % 2 == 0 { &a } else { &b },
            Message::user(*line),
            0,
        );
        say(
            &store,
            if i % 2 == 0 { &b } else { &a },
            Message::assistant(format!("noted: {line}")),
            0,
        );
        pieces.catch_up(&store).unwrap();
    }
    assert_like_a_rebuild(
        &store,
        dir.path(),
        config,
        &TRIP_QUERIES,
        &[("pieces", &pieces)],
    );
}

#[test]
fn neighbours_of_a_strong_match_join_the_results() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let s = session("ann", "trip");
    say(&store, &s, Message::user("We finally went to Iceland"), 0);
    say(&store, &s, Message::user("The glaciers were unreal"), 0);
    say(
        &store,
        &s,
        Message::user("Unrelated: my printer is broken"),
        0,
    );
    let request = SearchRequest::new("Iceland", SearchFilter::within(&s)).mode(Mode::Bm25);
    let plain = with(IndexConfig::plain(), &dir.path().join("plain.db"));
    plain.catch_up(&store).unwrap();
    assert_eq!(ids(&plain, &request), [1]);
    let config = IndexConfig {
        neighbour_weight: 0.3,
        ..IndexConfig::plain()
    };
    let spread = with(config, &dir.path().join("spread.db"));
    spread.catch_up(&store).unwrap();
    let hits = spread.search(&request).unwrap();
    assert_eq!(hits.iter().map(|h| h.id.0).collect::<Vec<_>>(), [1, 2]);
    assert!((hits[1].score - 0.3 * hits[0].score).abs() < 1e-6);
    assert!(
        hits[1].bm25.is_none(),
        "found through its neighbour, not by BM25"
    );
}

#[test]
fn hits_in_a_session_that_matches_as_a_whole_rank_higher() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let once = session("ann", "once");
    let often = session("ann", "often");
    say(&store, &once, Message::user("the marathon is in May"), 0); // 1
    say(&store, &often, Message::user("the marathon is in May"), 0); // 2
    say(
        &store,
        &often,
        Message::user("marathon training goes well"),
        0,
    ); // 3
    let request = SearchRequest::new("marathon May", SearchFilter::tenant("acme")).mode(Mode::Bm25);
    let plain = with(IndexConfig::plain(), &dir.path().join("plain.db"));
    plain.catch_up(&store).unwrap();
    let got = ids(&plain, &request);
    assert_eq!(&got[..2], [1, 2], "equal texts tie; the older comes first");
    let config = IndexConfig {
        scope_weight: 0.1,
        ..IndexConfig::plain()
    };
    let boosted = with(config, &dir.path().join("boosted.db"));
    boosted.catch_up(&store).unwrap();
    assert_eq!(ids(&boosted, &request), [2, 1, 3]);
}

/// Time-aware ranking (issue 3: "time-aware ranking"): a query naming a date favours what
/// was said on that date, and finds it even when other days match the words better.
#[test]
fn a_date_in_the_query_favours_that_day() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let monday = session("ann", "monday");
    let friday = session("ann", "friday");
    say(
        &store,
        &monday,
        Message::user("garden plans: more garden beds, garden path"),
        0,
    ); // 1
    say(
        &store,
        &friday,
        Message::user("the garden plans changed"),
        4,
    ); // 2
    say(
        &store,
        &friday,
        Message::user("and the weather was fine"),
        4,
    ); // 3
    let day = t(4).format("%-d %B %Y").to_string();
    let text = format!("What were the garden plans on {day}?");
    let request = SearchRequest::new(text.as_str(), SearchFilter::tenant("acme"))
        .mode(Mode::Bm25)
        .limit(1);
    let plain = with(IndexConfig::plain(), &dir.path().join("plain.db"));
    plain.catch_up(&store).unwrap();
    assert_eq!(ids(&plain, &request), [1], "monday matches the words best");
    let config = IndexConfig {
        time_weight: 0.5,
        ..IndexConfig::plain()
    };
    let timed = with(config, &dir.path().join("timed.db"));
    timed.catch_up(&store).unwrap();
    assert_eq!(
        ids(&timed, &request),
        [2],
        "friday's turn is a candidate through the date alone, and wins"
    );
    let undated = SearchRequest::new("What were the garden plans?", SearchFilter::tenant("acme"))
        .mode(Mode::Bm25)
        .limit(1);
    assert_eq!(ids(&timed, &undated), [1], "no date, no change");
}

/// Relative dates (issue 16): a message's "yesterday" is read at its own time, so a query
/// naming that day finds it; a query's own "yesterday" is read at the newest message it
/// searches (another user's newer messages do not move it).
#[test]
fn relative_dates_in_messages_and_queries_name_their_days() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let ann = session("ann", "garden");
    say(
        &store,
        &ann,
        Message::user("garden plans: plant more garden beds, plant a garden path"),
        0,
    ); // 1
    say(
        &store,
        &ann,
        Message::user("yesterday I planted tomatoes in the garden"),
        5,
    ); // 2
    say(&store, &ann, Message::user("the weather was fine"), 5); // 3
    say(
        &store,
        &session("bob", "garden"),
        Message::user("planted the garden, garden, garden"),
        30,
    ); // 4
    let ann_only = SearchFilter {
        user: Some("ann".into()),
        ..SearchFilter::tenant("acme")
    };
    let ask = |index: &Index, text: &str| {
        ids(
            index,
            &SearchRequest::new(text, ann_only.clone())
                .mode(Mode::Bm25)
                .limit(1),
        )
    };
    let day4 = t(4).format("%-d %B %Y").to_string();
    let on_day4 = format!("What did I plant in the garden on {day4}?");
    let plain = with(IndexConfig::plain(), &dir.path().join("plain.db"));
    plain.catch_up(&store).unwrap();
    assert_eq!(ask(&plain, &on_day4), [1], "the plans match the words best");
    let config = IndexConfig {
        time_weight: 0.5,
        ..IndexConfig::plain()
    };
    let timed = with(config, &dir.path().join("timed.db"));
    timed.catch_up(&store).unwrap();
    assert_eq!(ask(&timed, &on_day4), [2], "said on day 5 about day 4");
    assert_eq!(
        ask(&timed, "What did I plant in the garden yesterday?"),
        [2],
        "yesterday of ann's newest message (day 5), not of bob's (day 30)"
    );
    assert_eq!(
        ask(&timed, "What did I plant in the garden?"),
        [1],
        "no date, no change"
    );
}

/// "When" questions (issue 16): a query asking when favours messages that name a date,
/// relative ("yesterday") or absolute; other questions rank as before.
#[test]
fn a_when_question_favours_messages_that_name_a_date() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let ann = session("ann", "walks");
    say(
        &store,
        &ann,
        Message::user("we love hiking in the hills, hills and hiking"),
        1,
    ); // 1
    say(&store, &ann, Message::user("yesterday we went hiking"), 5); // 2
    let first = |index: &Index, text: &str| {
        ids(
            index,
            &SearchRequest::new(text, SearchFilter::tenant("acme"))
                .mode(Mode::Bm25)
                .limit(1),
        )
    };
    let config = IndexConfig {
        when_weight: 1.0,
        ..IndexConfig::plain()
    };
    let plain = with(IndexConfig::plain(), &dir.path().join("plain.db"));
    let aware = with(config, &dir.path().join("aware.db"));
    plain.catch_up(&store).unwrap();
    aware.catch_up(&store).unwrap();
    let when = "When did we go hiking in the hills?";
    assert_eq!(first(&plain, when), [1], "the words match the first best");
    assert_eq!(first(&aware, when), [2], "the dated one answers when");
    assert_eq!(first(&aware, "Where did we go hiking, which hills?"), [1]);
    assert_eq!(
        first(&aware, "In which year did we go hiking in the hills?"),
        [2]
    );
}

/// Knowledge updates (issue 16, an option): of two near-identical statements by one
/// speaker, the later ranks first, unless the query asks about the past; another user's
/// statement is no update of ann's.
#[test]
fn a_later_statement_of_the_same_thing_ranks_first_unless_the_past_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let ann = session("ann", "work");
    say(
        &store,
        &ann,
        Message::user("I work at Acme as a software engineer"),
        1,
    ); // 1
    say(&store, &ann, Message::user("the weather is nice today"), 3); // 2
    say(
        &store,
        &ann,
        Message::user("I work at Globex as a software engineer now"),
        10,
    ); // 3
    let search = |index: &Index, text: &str| {
        ids(
            index,
            &SearchRequest::new(text, SearchFilter::tenant("acme"))
                .mode(Mode::Hybrid)
                .limit(2),
        )
    };
    let plain = with(IndexConfig::plain(), &dir.path().join("plain.db"));
    plain.catch_up(&store).unwrap();
    let now = "where do I work as an engineer?";
    let before = "where did I work before as an engineer?";
    assert_eq!(
        search(&plain, now),
        [1, 3],
        "the shorter statement matches best"
    );
    let config = IndexConfig {
        update_weight: 0.2,
        ..IndexConfig::plain()
    };
    let aware = with(config, &dir.path().join("aware.db"));
    aware.catch_up(&store).unwrap();
    assert_eq!(search(&aware, now), [3, 1], "the update wins");
    assert_eq!(search(&aware, before), [1, 3], "asked about the past");
    // Bob's statement, later still, is not an update of ann's.
    say(
        &store,
        &session("bob", "work"),
        Message::user("I work at Initech as a software engineer"),
        20,
    );
    aware.catch_up(&store).unwrap();
    assert_eq!(
        search(&aware, now)[0],
        3,
        "bob's later statement neither wins as an update nor takes ann's"
    );
}

/// A model that keeps the texts it embeds.
#[derive(Default)]
struct Recording(std::sync::Mutex<Vec<String>>);

impl Recording {
    /// How many texts it has embedded.
    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// The texts embedded after the first `from`.
    fn since(&self, from: usize) -> Vec<String> {
        self.0.lock().unwrap()[from..].to_vec()
    }
}

impl Embedder for Recording {
    fn id(&self) -> &str {
        Buckets.id()
    }
    fn dim(&self) -> usize {
        Buckets.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut seen = self.0.lock().unwrap();
        seen.extend(texts.iter().map(|t| (*t).to_owned()));
        Buckets.embed(texts)
    }
}

/// An index in `dir` with the default settings and a [`Recording`] model, caught up.
fn recorded(dir: &Path, store: &SqliteStore) -> (Arc<Recording>, Index) {
    let model = Arc::new(Recording::default());
    let index = Index::open(
        &dir.join("index"),
        Some(model.clone()),
        IndexConfig::default(),
    )
    .unwrap();
    index.catch_up(store).unwrap();
    (model, index)
}

/// Query vectors are kept (issue 16): a repeated query does not run the model again and
/// finds the same hits; the cache is bounded (1,024 queries, oldest dropped first).
#[test]
fn a_repeated_query_reuses_its_vector() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    say(
        &store,
        &session("ann", "s"),
        Message::user("ann owns a red kayak"),
        0,
    );
    let (model, index) = recorded(dir.path(), &store);
    let calls = || model.count();
    let search = |text: &str| {
        index
            .search(&SearchRequest::new(text, SearchFilter::tenant("acme")).limit(3))
            .unwrap()
    };
    let before = calls();
    let first = search("a red kayak");
    assert_eq!(calls(), before + 1);
    let again = search("a red kayak");
    assert_eq!(calls(), before + 1, "the second time from the cache");
    assert_eq!(format!("{first:?}"), format!("{again:?}"));
    // Another tenant with an entry (a tenant with none is answered without the model).
    store
        .append(vec![NewEntry::new(
            Scope::agent("other", "bot")
                .unwrap()
                .with_session("s")
                .unwrap(),
            Payload::Message(Message::user("other words")),
            t(0),
        )])
        .unwrap();
    index
        .search_caught_up(
            &store,
            &SearchRequest::new("a red kayak", SearchFilter::tenant("other")).limit(3),
        )
        .unwrap();
    assert_eq!(calls(), before + 3, "each tenant's queries are its own");
    for i in 0..1024 {
        search(&format!("query number {i}"));
    }
    assert_eq!(calls(), before + 1027);
    search("a red kayak");
    assert_eq!(calls(), before + 1028, "dropped after 1,024 newer queries");
}

/// Speaker-aware ranking (issue 16): a query that names a speaker favours what that
/// speaker said over another speaker's words about them; a tool result's name (a
/// function's) is not a speaker; a query naming no one ranks as before.
#[test]
fn a_speaker_named_in_the_query_ranks_their_own_words_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let chat = session("ann", "chat");
    let named = |name: &str, text: &str| {
        let mut m = Message::user(text);
        m.name = Some(name.to_owned());
        m
    };
    say(
        &store,
        &chat,
        named("Melanie", "I painted a sunset over the lake"),
        0,
    ); // 1
    say(
        &store,
        &chat,
        named(
            "Caroline Smith",
            "Melanie painted that? Melanie, your painting: a painted sky",
        ),
        0,
    ); // 2
    let mut tool = Message::tool_result("call_1", "painted sky found in the paint store");
    tool.name = Some("Melanie".to_owned());
    say(&store, &chat, tool, 0); // 3
    let request = |text: &str| {
        SearchRequest::new(text, SearchFilter::tenant("acme"))
            .mode(Mode::Bm25)
            .limit(3)
    };
    let plain = with(IndexConfig::plain(), &dir.path().join("plain.db"));
    plain.catch_up(&store).unwrap();
    let question = request("What has Melanie painted?");
    assert_eq!(
        ids(&plain, &question)[0],
        2,
        "Caroline's turn names Melanie and says painted twice"
    );
    let config = IndexConfig {
        speaker_weight: 0.5,
        ..IndexConfig::plain()
    };
    let aware = with(config, &dir.path().join("aware.db"));
    aware.catch_up(&store).unwrap();
    assert_eq!(
        ids(&aware, &question),
        [1, 2, 3],
        "Melanie's own words first; the tool named Melanie gains nothing"
    );
    assert_eq!(
        ids(
            &aware,
            &request("what did smith's friend say about the painted sky?")
        )[0],
        2,
        "any word of a name names its speaker, in any case, possessive or not"
    );
    assert_eq!(
        ids(&aware, &request("a painted sky")),
        ids(&plain, &request("a painted sky")),
        "no name, no change"
    );
}

/// Vectors hold what was said, not who said it (issue 16): a message is embedded without
/// its speaker's name (a tool result keeps its function's name, which is what it is
/// about), and a query without the words that name a speaker heard in the scopes it
/// searches: possessive or not, never a speaker heard only by another user or tenant,
/// never down to nothing. BM25 still reads the names.
#[test]
fn vectors_hold_what_was_said_not_who_said_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let named = |name: &str, text: &str| {
        let mut m = Message::user(text);
        m.name = Some(name.to_owned());
        m
    };
    let ann = session("ann", "chat");
    say(&store, &ann, named("Melanie", "I painted a sunset"), 0);
    say(&store, &ann, named("Caroline Smith", "Nice sunset!"), 0);
    let mut tool = Message::tool_result("call_1", "sunset photos");
    tool.name = Some("lookup".to_owned());
    say(&store, &ann, tool, 0);
    say(&store, &ann, Message::user("no name here"), 0);
    say(
        &store,
        &session("bob", "chat"),
        named("Zed", "I fixed the boat"),
        0,
    );
    let elsewhere = Scope::agent("other", "bot")
        .unwrap()
        .with_user("zoe")
        .unwrap()
        .with_session("chat")
        .unwrap();
    say(&store, &elsewhere, named("Quinn", "I sailed the boat"), 0);
    let (model, index) = recorded(dir.path(), &store);
    assert_eq!(
        model.since(0),
        [
            "I painted a sunset",
            "Nice sunset!",
            "lookup: sunset photos",
            "no name here",
            "I fixed the boat",
            "I sailed the boat"
        ]
    );
    let embedded = |text: &str, filter: SearchFilter| {
        let before = model.count();
        index
            .search(&SearchRequest::new(text, filter).mode(Mode::Hybrid))
            .unwrap();
        model.since(before)
    };
    let anns = || {
        SearchFilter::within(
            &Scope::agent("acme", "bot")
                .unwrap()
                .with_user("ann")
                .unwrap(),
        )
    };
    assert_eq!(
        embedded(
            "What did Melanie's friend caroline SMITH say about Zed?",
            anns()
        ),
        ["What did friend say about Zed?"],
        "Zed is bob's speaker, not one of ann's"
    );
    assert_eq!(
        embedded("what did Zed fix?", SearchFilter::tenant("acme")),
        ["what did fix?"],
        "the tenant's searches hear bob's speakers too"
    );
    assert_eq!(
        embedded("what did Zed and Quinn fix?", SearchFilter::tenant("acme")),
        ["what did and Quinn fix?"],
        "Quinn speaks only in another tenant"
    );
    assert_eq!(embedded("Melanie?", anns()), ["Melanie?"]);
    assert_eq!(
        ids(
            &index,
            &SearchRequest::new("melanie", anns()).mode(Mode::Bm25)
        )[0],
        1,
        "BM25 still finds a speaker by name"
    );
}

/// A server indexes text at once and vectors behind (`set_vectors_behind`): BM25 finds a
/// document as soon as its catch-up commits, vector search once a pass has embedded it;
/// another process mirrors those vectors; a catch-up that embeds as it goes fills what was
/// left behind first. Every way ends in the index a rebuild makes.
#[test]
fn vectors_left_behind_are_found_by_bm25_at_once_and_by_vectors_once_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let config = IndexConfig {
        context_weight: 0.3,
        embed_context: true,
        ..IndexConfig::plain()
    };
    let server = with(config, &dir.path().join("server.db"));
    server.set_vectors_behind(true);
    let filler_path = dir.path().join("filler.db");
    let filler = with(config, &filler_path);
    filler.set_vectors_behind(true);
    let a = session("ann", "a");
    let lines = TRIP;
    let mut last = EntryId(0);
    for line in lines {
        last = say(&store, &a, Message::user(line), 0);
        server.catch_up(&store).unwrap();
        filler.catch_up(&store).unwrap();
    }
    assert_eq!((server.covered(), server.embedded()), (last, EntryId(0)));
    let bm25 = SearchRequest::new("Lisbon", SearchFilter::tenant("acme")).mode(Mode::Bm25);
    // (3 follows it, and so has it as context.)
    assert_eq!(ids(&server, &bm25), [2, 3]);
    let vector =
        SearchRequest::new("Lisbon train", SearchFilter::tenant("acme")).mode(Mode::Vector);
    assert!(
        ids(&server, &vector).is_empty(),
        "no vector is embedded yet"
    );

    // Another process opened the file before the vectors came.
    let other = with(config, &dir.path().join("server.db"));
    // Its search loads the tenant's shard, which has no vector yet either.
    assert_eq!(ids(&other, &bm25), [2, 3]);
    assert_eq!(other.embedded(), EntryId(0));
    let mut steps = 0;
    while server.embed_step(&store).unwrap() {
        steps += 1;
        assert!(steps < 10, "the embedding pass does not finish");
    }
    assert_eq!(server.embedded(), last);
    other.catch_up(&store).unwrap();
    assert_eq!(other.embedded(), last);

    // A catch-up embedding as it goes (another process, default mode) fills the gap.
    let inline = with(config, &filler_path);
    say(&store, &a, Message::assistant("noted: Lisbon"), 0);
    inline.catch_up(&store).unwrap();
    assert_eq!(inline.embedded(), inline.covered());
    server.catch_up(&store).unwrap();
    while server.embed_step(&store).unwrap() {}

    other.catch_up(&store).unwrap();
    assert_like_a_rebuild(
        &store,
        dir.path(),
        config,
        &TRIP_QUERIES,
        &[("server", &server), ("other", &other), ("inline", &inline)],
    );
}

/// Two processes' worth of indexes on one file, all at once: one indexes text and leaves
/// vectors behind while a second thread embeds them, another embeds as it goes, and the
/// tape keeps growing. Whatever the interleaving, each ends equal to a rebuild.
#[test]
fn text_first_and_embedding_indexes_share_a_file_under_concurrent_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::create(dir.path()).unwrap());
    let config = IndexConfig {
        embed_context: true,
        ..IndexConfig::plain()
    };
    let path = dir.path().join("shared.db");
    let behind = Arc::new(with(config, &path));
    behind.set_vectors_behind(true);
    let inline = Arc::new(with(config, &path));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (store, behind) = (store.clone(), behind.clone());
        std::thread::spawn(move || {
            for i in 0..300 {
                let scope = session("ann", &format!("s{}", i % 5));
                say(
                    &store,
                    &scope,
                    Message::user(format!("turn {i} about topic{}", i % 17)),
                    0,
                );
                behind.catch_up(store.as_ref()).unwrap();
            }
        })
    };
    let embedder = {
        let (store, behind, done) = (store.clone(), behind.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                behind.embed_step(store.as_ref()).unwrap();
            }
        })
    };
    let other = {
        let (store, inline, done) = (store.clone(), inline.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                inline.catch_up(store.as_ref()).unwrap();
            }
        })
    };
    writer.join().unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    embedder.join().unwrap();
    other.join().unwrap();
    behind.catch_up(store.as_ref()).unwrap();
    while behind.embed_step(store.as_ref()).unwrap() {}
    inline.catch_up(store.as_ref()).unwrap();
    let whole = assert_like_a_rebuild(
        store.as_ref(),
        dir.path(),
        config,
        &["topic3", "turn 299", "topic16 turn"],
        &[("behind", &behind), ("inline", &inline)],
    );
    assert_eq!(whole.len(), 300);
    for index in [&behind, &inline] {
        assert_eq!(
            (index.covered(), index.embedded()),
            (whole.covered(), whole.covered())
        );
    }
}

/// A short conversation about a trip, and questions about it.
const TRIP: [&str; 6] = [
    "Where did you travel?",
    "To Lisbon, by train",
    "What did you eat?",
    "Pastel de nata",
    "And the weather?",
    "Sunny and warm",
];
const TRIP_QUERIES: [&str; 4] = ["Lisbon train", "weather sunny", "eat nata", "travel"];

/// Rebuilds an index of `store` with `config` in `dir` and checks that each of `indexes`
/// answers every query in every mode exactly as the rebuild does; returns the rebuild.
fn assert_like_a_rebuild(
    store: &SqliteStore,
    dir: &Path,
    config: IndexConfig,
    queries: &[&str],
    indexes: &[(&str, &Index)],
) -> Index {
    let whole = Index::rebuild(&dir.join("whole.db"), Some(Arc::new(Buckets)), config).unwrap();
    whole.catch_up(store).unwrap();
    for query in queries {
        for mode in [Mode::Bm25, Mode::Vector, Mode::Hybrid] {
            let request = SearchRequest::new(*query, SearchFilter::tenant("acme")).mode(mode);
            let want = whole.search(&request).unwrap();
            assert!(!want.is_empty(), "{query} {mode:?}");
            for (name, index) in indexes {
                let got = index.search(&request).unwrap();
                assert_eq!(got, want, "{name}: {query} {mode:?}");
            }
        }
    }
    whole
}

/// Vectors are kept in the store (issue 36): a second index of the same tape (a server
/// joining, an index deleted and made again) and a rebuild read them instead of running the
/// model, and rank exactly as the index that embedded them; another embedding of the
/// entries (with their context) is another key, embedded anew.
#[test]
fn a_second_index_and_a_rebuild_read_the_stores_vectors_instead_of_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let s = session("ann", "s");
    for (i, text) in [
        "ann owns a red kayak",
        "the kayak is kept at the lake",
        "bob prefers hiking in the hills",
    ]
    .into_iter()
    .enumerate()
    {
        say(&store, &s, Message::user(text), i as i64);
    }
    let (first_model, first) = recorded(dir.path(), &store);
    assert_eq!(first_model.count(), 3, "the first index embeds every entry");
    let other = tempfile::tempdir().unwrap();
    let (second_model, second) = recorded(other.path(), &store);
    assert_eq!(second.len(), 3);
    assert_eq!(second_model.count(), 0, "the second reads the kept vectors");
    let hits = |index: &Index| {
        let req = SearchRequest::new("a red kayak", SearchFilter::tenant("acme"))
            .mode(Mode::Vector)
            .limit(3);
        index
            .search(&req)
            .unwrap()
            .into_iter()
            .map(|h| (h.id, h.score))
            .collect::<Vec<_>>()
    };
    assert_eq!(hits(&first), hits(&second));
    // An entry appended now is embedded once, by whichever index catches up first (the
    // searches above embedded their query, once in each).
    let (from_first, from_second) = (first_model.count(), second_model.count());
    say(&store, &s, Message::user("a new paddle for the kayak"), 5);
    second.catch_up(&store).unwrap();
    first.catch_up(&store).unwrap();
    assert_eq!(
        second_model.since(from_second),
        vec!["a new paddle for the kayak"]
    );
    assert_eq!(first_model.count(), from_first);
    // A rebuild (`memtape reindex`) with the same model runs it not once.
    let model = Arc::new(Recording::default());
    let (rebuilt, added) = Index::rebuild_from(
        &other.path().join("index"),
        &store,
        Some(model.clone()),
        IndexConfig::default(),
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!((added, model.count()), (4, 0));
    assert_eq!(hits(&rebuilt), hits(&first));
    // Messages embedded with their context make other vectors, kept under their own key.
    let with_context = Arc::new(Recording::default());
    let third = tempfile::tempdir().unwrap();
    let index = Index::open(
        &third.path().join("index"),
        Some(with_context.clone()),
        IndexConfig {
            embed_context: true,
            ..IndexConfig::default()
        },
    )
    .unwrap();
    index.catch_up(&store).unwrap();
    assert_eq!(with_context.count(), 4);
}
