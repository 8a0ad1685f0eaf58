//! memtape against the real Bub (bub 0.5.1): tapes written by Bub's own `FileTapeStore`
//! through its `Tape` API, with what Bub read from them (its context and its anchor
//! queries), recorded by `scripts/refs/bub_tapes.py` into
//! `fixtures/refs/bub/cases.json`. Each tape is imported into a real SQLite store; the
//! test checks that nothing is lost (a Bub export gives back every line), that memtape's
//! Bub history equals the seed's view and Bub's own wherever the two agree, and that
//! anchor queries select the same entries or fail the same way.
use memtape::{AnchorRange, Engine, Error, Format, HistoryLimits, Scope, TapeQuery};
use memtape_core::formats::bub;
use serde_json::Value;

const CASES: &str = include_str!("fixtures/refs/bub/cases.json");

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A message as a model receives it: the entry's message as JSON.
fn messages(entries: &[memtape::Entry]) -> Vec<Value> {
    entries
        .iter()
        .map(|e| serde_json::to_value(e.message().unwrap()).unwrap())
        .collect()
}

/// Whether the tape's last anchor is a memory zone's (Bub 0.5.1 starts its context after
/// it; the seed keeps zones out of context selection).
fn ends_in_zone(tape: &[Value]) -> bool {
    tape.iter()
        .rev()
        .find(|l| l["kind"] == "anchor")
        .is_some_and(|l| {
            let name = l["payload"]["name"].as_str().unwrap();
            name == "memory/open" || name == "memory/seal"
        })
}

#[test]
fn bub_tapes_recorded_by_bub_itself() {
    let all: Value = serde_json::from_str(CASES).unwrap();
    let cases = all["cases"].as_array().unwrap();
    assert!(cases.len() >= 8);
    let (mut views_equal, mut views_differ, mut queries) = (0, Vec::new(), 0);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let tape = case["tape"].as_str().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::init(dir.path()).unwrap();
        let agent = Scope::agent("default", "default").unwrap();
        let session = agent.clone().with_session(name).unwrap();
        engine
            .import(Format::Bub, tape, &agent, Some(name))
            .unwrap();

        // Nothing is lost: out again, every line as Bub wrote it (ids, kinds, payloads,
        // meta, dates), as JSON values.
        let mut out = Vec::new();
        engine.export(Format::Bub, &session, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert_eq!(lines(&out), lines(tape), "{name}: the tape is kept whole");

        // History: always the seed's view; Bub's own wherever it does not start after a
        // zone or fail for want of an anchor.
        let history = engine.history(&session, &HistoryLimits::default()).unwrap();
        let ours = messages(&history);
        let seed: Vec<Value> = case["seed_view"].as_array().unwrap().clone();
        assert_eq!(ours, seed, "{name}: memtape's Bub view is the seed's");
        for (m, s) in history.iter().zip(&seed) {
            // Byte for byte: the text Bub gives its model is the text memtape gives.
            if let Some(text) = s["content"].as_str() {
                assert_eq!(m.message().unwrap().content_text(), text, "{name}");
            }
        }
        match case["bub_view"].get("messages") {
            Some(Value::Array(bub)) if *bub == ours => views_equal += 1,
            Some(Value::Array(_)) => {
                assert!(
                    ends_in_zone(&lines(tape)),
                    "{name}: Bub's view differs for a reason not documented"
                );
                views_differ.push(format!("{name} (last anchor is a memory zone's)"));
            }
            _ => {
                assert_eq!(case["bub_view"]["error"], "not_found", "{name}");
                views_differ.push(format!("{name} (no anchor: Bub raises not_found)"));
            }
        }

        // Anchor queries: the same entries, or not found where Bub says so.
        for q in case["queries"].as_array().unwrap() {
            let spec = &q["query"];
            let range = if spec.get("last_anchor").is_some() {
                AnchorRange::FromLast
            } else if let Some(a) = spec["after_anchor"].as_str() {
                AnchorRange::After(a.into())
            } else {
                let pair = spec["between"].as_array().unwrap();
                AnchorRange::Between(
                    pair[0].as_str().unwrap().into(),
                    pair[1].as_str().unwrap().into(),
                )
            };
            let query = TapeQuery {
                range,
                ..TapeQuery::default()
            };
            let got = engine.query(&session, &query);
            match q.get("ids") {
                Some(Value::Array(ids)) => {
                    let mut text = String::new();
                    bub::render(&got.unwrap(), &mut text);
                    let strip = |mut v: Value| {
                        v.as_object_mut().unwrap().remove("id");
                        v
                    };
                    let ours: Vec<Value> = lines(&text).into_iter().map(strip).collect();
                    let all = lines(tape);
                    let want: Vec<Value> = ids
                        .iter()
                        .map(|id| strip(all[id.as_u64().unwrap() as usize - 1].clone()))
                        .collect();
                    assert_eq!(ours, want, "{name}: {spec}");
                }
                _ => {
                    assert_eq!(q["error"], "not_found", "{name}: {spec}");
                    assert!(
                        matches!(got, Err(Error::NoAnchor(..))),
                        "{name}: {spec}: {got:?}"
                    );
                }
            }
            queries += 1;
        }
    }
    println!(
        "{} Bub tapes: every line kept; history equal to Bub's on {views_equal}, to the seed's \
         on all; differing from Bub 0.5.1 on purpose: {views_differ:?}; {queries} anchor \
         queries equal",
        cases.len()
    );
    assert!(views_equal >= 5);
}
