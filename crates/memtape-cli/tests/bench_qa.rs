//! `memtape bench locomo-qa` through the real binary against a scripted OpenAI-compatible
//! server on loopback: a small LoCoMo-format file written here (two conversations, every
//! question category), scripted answers and verdicts, and exact accuracy, counts and
//! token sums; the retrieved turns reach the answer prompt; a model that does not answer
//! stops the run after its first call; no model configured is refused. Also `memtape
//! bench locomo --rankings` on the same file: one line per question asked, whose rankings
//! give the report's recall.

use crate::common::Run;
use memtape_scripted::{Answer, Scripted, ok, status};
use serde_json::{Value, json};

/// Two conversations in LoCoMo's format, made up for this test. Asked, in order: (a) cat 4,
/// (b) cat 2, (d) cat 1 of the first; (e) cat 3, (f) cat 4 of the second. Not asked: a
/// category 5 question and one whose evidence is not in the conversation.
fn locomo_file() -> Value {
    json!([
        {
            "sample_id": "qa-1",
            "conversation": {
                "speaker_a": "Ines",
                "speaker_b": "Tomas",
                "session_1_date_time": "2:00 pm on 3 March, 2024",
                "session_1": [
                    {"speaker": "Ines", "dia_id": "D1:1", "text": "I finally joined the community orchestra, I play the cello there."},
                    {"speaker": "Tomas", "dia_id": "D1:2", "text": "Nice! I am training for the Lisbon marathon in October."},
                    {"speaker": "Ines", "dia_id": "D1:3", "text": "My sister Marta moved to Porto last month."}
                ],
                "session_2_date_time": "10:15 am on 9 April, 2024",
                "session_2": [
                    {"speaker": "Tomas", "dia_id": "D2:1", "text": "We adopted a puppy yesterday, a beagle called Pimenta.",
                     "img_url": ["http://example.invalid/p.jpg"], "blip_caption": "a small beagle on a sofa"},
                    {"speaker": "Ines", "dia_id": "D2:2", "text": "Marta visited and we went hiking together."}
                ],
                "session_3_date_time": "6:30 pm on 20 October, 2024",
                "session_3": [
                    {"speaker": "Tomas", "dia_id": "D3:1", "text": "Done with the Lisbon marathon last Sunday, a personal best!"}
                ]
            },
            "qa": [
                {"question": "What instrument does Ines play?", "answer": "cello", "evidence": ["D1:1"], "category": 4},
                {"question": "When did Tomas adopt the puppy?", "answer": "8 April 2024", "evidence": ["D2:01"], "category": 2},
                {"question": "What instrument does Tomas play?", "adversarial_answer": "cello", "evidence": ["D1:1"], "category": 5},
                {"question": "Where does the sister of Ines live, and what race did her friend complete?",
                 "answer": "Porto; the Lisbon marathon", "evidence": ["D1:3; D3:1"], "category": 1}
            ]
        },
        {
            "sample_id": "qa-2",
            "conversation": {
                "speaker_a": "Ruth",
                "speaker_b": "Omar",
                "session_1_date_time": "9:00 am on 1 June, 2023",
                "session_1": [
                    {"speaker": "Ruth", "dia_id": "D1:1", "text": "I started learning Japanese this spring."},
                    {"speaker": "Omar", "dia_id": "D1:2", "text": "I bought my first house in 2019, a small one near the river."},
                    {"speaker": "Ruth", "dia_id": "D1:3", "text": "I would love to visit Kyoto someday."}
                ]
            },
            "qa": [
                {"question": "Would Ruth enjoy a trip to Japan?", "answer": "Yes", "evidence": ["D1:1", "D1:3"], "category": 3},
                {"question": "In which year did Omar buy a house?", "answer": 2019, "evidence": ["D1:2"], "category": 4},
                {"question": "What is Omar's dog called?", "answer": "Rex", "evidence": ["D9:9"], "category": 4}
            ]
        }
    ])
}

/// An OpenAI chat completion saying `text`, with `usage` (prompt, completion) if given.
fn reply(text: &str, usage: Option<(u64, u64)>) -> Answer {
    let mut body = json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]
    });
    if let Some((p, c)) = usage {
        body["usage"] = json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c});
    }
    ok(body)
}

/// A run whose memtape.toml points at `server` (one retry), with the file written.
fn setup(server: &Scripted) -> Run {
    let r = Run::new();
    let toml = format!(
        "[llm]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted\"\ntimeout = 5\nmax_retries = 1\n",
        server.base
    );
    std::fs::write(r.dir.path().join("data/memtape.toml"), toml).unwrap();
    std::fs::write(r.path("tiny.json"), locomo_file().to_string()).unwrap();
    r
}

/// The user message of the n-th request `server` was sent.
fn prompt(server: &Scripted, n: usize) -> String {
    let body = server.body(n).unwrap();
    assert_eq!(body["messages"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(body["messages"][0]["role"], "user");
    body["messages"][0]["content"].as_str().unwrap().to_owned()
}

const BENCH: [&str; 7] = [
    "bench",
    "locomo-qa",
    "--data",
    "tiny.json",
    "--model",
    "none",
    "--mode",
];

#[test]
fn locomo_qa_answers_judges_and_counts_with_a_scripted_model() {
    let server = Scripted::start(vec![
        // (a) cat 4: correct, in JSON after a sentence.
        reply("cello", Some((101, 3))),
        reply(
            "Same instrument.\n{\"label\": \"CORRECT\"}",
            Some((201, 11)),
        ),
        // (b) cat 2: a 503 the client retries, then correct as a bare word.
        status(503, "overloaded"),
        reply("On 8 April 2024", Some((102, 5))),
        reply("The date matches: CORRECT", Some((202, 12))),
        // (d) cat 1: the answer call fails twice (the retry included): failed.
        status(500, "boom"),
        status(500, "boom"),
        // (e) cat 3: a verdict that names no label: unparseable.
        reply("Yes, she is learning Japanese", Some((103, 7))),
        reply("I am unsure.", Some((203, 13))),
        // (f) cat 4: wrong; the judge's reply carries no usage.
        reply("2018", Some((104, 2))),
        reply("{\"label\": \"WRONG\"}", None),
    ]);
    let r = setup(&server);
    let mut args = BENCH.to_vec();
    args.extend(["bm25", "--out", "report.json", "--answers", "answers.jsonl"]);
    let out = r.cmd(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(r.path("report.json")).unwrap()).unwrap();
    assert_eq!(report, written);
    assert_eq!(server.requests(), 11);

    assert_eq!(report["system"], "memtape");
    assert_eq!(report["split"], "tiny");
    assert_eq!(report["n_queries"], 5);
    let overall = &report["metrics"]["overall"];
    assert_eq!(overall["J"], 0.4);
    for (key, n) in [
        ("n", 5),
        ("correct", 2),
        ("wrong", 1),
        ("unparseable", 1),
        ("failed", 1),
    ] {
        assert_eq!(overall[key], n, "{key}: {overall}");
    }
    let by = &report["metrics"]["by_category"];
    let categories: Vec<&String> = by.as_object().unwrap().keys().collect();
    assert_eq!(categories, ["1", "2", "3", "4"]);
    for (category, j, n) in [("1", 0.0, 1), ("2", 1.0, 1), ("3", 0.0, 1), ("4", 0.5, 2)] {
        assert_eq!(by[category]["J"], j, "{category}: {by}");
        assert_eq!(by[category]["n"], n, "{category}: {by}");
    }
    assert_eq!(by["1"]["failed"], 1);
    assert_eq!(by["3"]["unparseable"], 1);
    // Retrieval of the same run: every evidence turn shares a word with its question, or
    // is next to one that does, but the marathon turn (D3:1, alone in its session) of the
    // multi-hop question (d), which BM25 cannot find.
    assert_eq!(by["1"]["recall@k"], 0.5);
    for category in ["2", "3", "4"] {
        assert_eq!(by[category]["recall@k"], 1.0, "{category}: {by}");
    }
    assert_eq!(overall["recall@k"], 0.9);
    assert_eq!(overall["retrieval"]["recall@10"], 0.9);

    // Tokens as the scripted server counted them; the reply without usage is named.
    let tokens = &report["tokens"];
    assert_eq!(
        tokens["answer"],
        json!({"calls": 4, "prompt_tokens": 410, "completion_tokens": 17, "calls_without_usage": 0})
    );
    assert_eq!(
        tokens["judge"],
        json!({"calls": 4, "prompt_tokens": 606, "completion_tokens": 36, "calls_without_usage": 1})
    );
    for key in [
        "ingest_s_total",
        "retrieve_ms_p50",
        "retrieve_ms_p95",
        "answer_ms_p50",
        "answer_ms_p95",
        "judge_ms_p50",
        "judge_ms_p95",
        "total_s",
    ] {
        assert!(report["timing"][key].as_f64().unwrap() >= 0.0, "{key}");
    }
    let settings = &report["settings"];
    assert_eq!(settings["model"], "scripted");
    assert_eq!(settings["top_k"], 10);
    assert_eq!(settings["mode"], "bm25");
    assert_eq!(settings["conversations"], 2);
    for key in ["answer_prompt_sha256", "judge_prompt_sha256"] {
        assert_eq!(settings[key].as_str().unwrap().len(), 64, "{key}");
    }
    assert!(
        stderr.contains("locomo-qa tiny: 5 questions, J 0.400"),
        "{stderr}"
    );

    // The answer prompt carries the retrieved turns with speaker and session date, and no
    // gold answer; the judge prompt carries the question, the gold answer and the answer.
    let a = prompt(&server, 0);
    assert!(
        a.contains("[3 March 2024, 2:00 pm] Ines: I finally joined the community orchestra, I play the cello there."),
        "{a}"
    );
    assert!(
        a.contains("Question: What instrument does Ines play?"),
        "{a}"
    );
    let b = prompt(&server, 3);
    assert!(
        b.contains("[9 April 2024, 10:15 am] Tomas: We adopted a puppy yesterday, a beagle called Pimenta. [image: a small beagle on a sofa]"),
        "{b}"
    );
    assert!(!b.contains("8 April 2024"), "the gold answer leaked: {b}");
    // Conversations are apart: the second one's prompts hold none of the first's turns.
    let e = prompt(&server, 7);
    assert!(e.contains("Ruth: I started learning Japanese"), "{e}");
    assert!(!e.contains("Ines"), "{e}");
    let judge = prompt(&server, 10);
    assert!(
        judge.contains("Question: In which year did Omar buy a house?"),
        "{judge}"
    );
    assert!(judge.contains("Gold answer: 2019"), "{judge}");
    assert!(judge.contains("Generated answer: 2018"), "{judge}");
    let body = server.body(0).unwrap();
    assert_eq!(body["model"], "scripted");
    assert_eq!(body["temperature"], 0.0);

    // Every question, one JSON line each.
    let answers = std::fs::read_to_string(r.path("answers.jsonl")).unwrap();
    let lines: Vec<Value> = answers
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let outcomes: Vec<&str> = lines
        .iter()
        .map(|l| l["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        ["correct", "correct", "failed", "unparseable", "wrong"]
    );
    assert_eq!(lines[0]["answer"], "cello");
    assert_eq!(lines[4]["gold"], "2019");
    assert!(
        lines[2]["error"].as_str().unwrap().contains("500"),
        "{}",
        lines[2]
    );
}

#[test]
fn locomo_qa_stops_after_the_first_question_when_the_model_does_not_answer() {
    // Every request is answered 500: the first question's call and its retry, then stop.
    let server = Scripted::start(vec![]);
    let r = setup(&server);
    let mut args = BENCH.to_vec();
    args.push("bm25");
    let err = r.fails(&args);
    assert!(err.contains("could not use the model scripted"), "{err}");
    assert!(err.contains("first call failed"), "{err}");
    assert!(err.contains("500"), "{err}");
    assert_eq!(server.requests(), 2);
}

#[test]
fn locomo_qa_asks_only_the_first_questions_when_limited() {
    let server = Scripted::start(vec![
        reply("cello", Some((10, 1))),
        reply("{\"label\": \"CORRECT\"}", Some((20, 2))),
        reply("April", Some((10, 1))),
        reply("{\"label\": \"WRONG\"}", Some((20, 2))),
    ]);
    let r = setup(&server);
    let mut args = BENCH.to_vec();
    args.extend(["bm25", "--limit-questions", "2", "--top-k", "1"]);
    let report: Value = serde_json::from_str(&r.ok(&args)).unwrap();
    assert_eq!(report["n_queries"], 2);
    assert_eq!(report["metrics"]["overall"]["J"], 0.5);
    assert_eq!(report["settings"]["top_k"], 1);
    assert_eq!(report["settings"]["limit_questions"], 2);
    // The second conversation was never ingested.
    assert_eq!(report["settings"]["conversations"], 1);
    assert_eq!(server.requests(), 4);
    // One turn only reaches the answer prompt.
    assert_eq!(prompt(&server, 0).matches("2024, ").count(), 1);
}

#[test]
fn locomo_qa_without_a_model_says_how_to_configure_one() {
    let r = Run::new();
    std::fs::write(r.path("tiny.json"), locomo_file().to_string()).unwrap();
    let mut args = BENCH.to_vec();
    args.push("bm25");
    let err = r.fails(&args);
    assert!(err.contains("no model is configured"), "{err}");
    assert!(err.contains("MEMTAPE_LLM_MODEL"), "{err}");
}

#[test]
fn locomo_rankings_hold_each_asked_question_and_give_the_reports_recall() {
    let r = Run::new();
    std::fs::write(r.path("tiny.json"), locomo_file().to_string()).unwrap();
    let out = r.path("rankings.jsonl");
    let bench = [
        "bench",
        "locomo",
        "--data",
        "tiny.json",
        "--model",
        "none",
        "--mode",
        "bm25",
    ];
    let report: Value =
        serde_json::from_str(&r.ok(&[&bench[..], &["--rankings", &out]].concat())).unwrap();
    let lines: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The five questions asked, in file order: not category 5, not the unknown evidence.
    let asked: Vec<(&str, i64)> = lines
        .iter()
        .map(|l| {
            (
                l["conversation"].as_str().unwrap(),
                l["category"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        asked,
        [
            ("qa-1", 4),
            ("qa-1", 2),
            ("qa-1", 1),
            ("qa-2", 3),
            ("qa-2", 4)
        ]
    );
    assert_eq!(report["n_queries"], 5);
    // Evidence as the protocol normalises it.
    assert_eq!(lines[1]["evidence"], json!(["D2:1"]));
    assert_eq!(lines[2]["evidence"], json!(["D1:3", "D3:1"]));
    let mut recall_5 = 0.0;
    for line in &lines {
        let ranking = line["ranking"].as_array().unwrap();
        assert!(!ranking.is_empty(), "{line}");
        let scores: Vec<f64> = ranking.iter().map(|p| p[1].as_f64().unwrap()).collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{line}");
        let ids: Vec<&str> = ranking.iter().map(|p| p[0].as_str().unwrap()).collect();
        let evidence: Vec<&str> = line["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap())
            .collect();
        let found = evidence
            .iter()
            .filter(|e| ids.iter().take(5).any(|d| d == *e))
            .count();
        recall_5 += found as f64 / evidence.len() as f64;
    }
    let reported = report["metrics"]["overall"]["recall@5"].as_f64().unwrap();
    assert!(
        (recall_5 / 5.0 - reported).abs() < 1e-9,
        "{recall_5} vs {reported}"
    );
    assert!(
        lines[0]["question"]
            .as_str()
            .unwrap()
            .contains("instrument")
    );
    // A file that cannot be written is named, before anything is ingested.
    let unwritable = r.path("no/such/dir/rankings.jsonl");
    let err = r.fails(&[&bench[..], &["--rankings", &unwritable]].concat());
    assert!(err.contains("writing the rankings to"), "{err}");
    assert!(err.contains("no/such/dir/rankings.jsonl"), "{err}");
    // locomo-qa has no such flag: its --answers records what it retrieved.
    let err = r.fails(&[
        "bench",
        "locomo-qa",
        "--data",
        "tiny.json",
        "--rankings",
        &out,
    ]);
    assert!(err.contains("--rankings"), "{err}");
}

#[test]
fn locomo_reports_metrics_per_ability_when_the_questions_name_one() {
    let r = Run::new();
    let bench = |file: &str, rankings: &str| -> Value {
        serde_json::from_str(&r.ok(&[
            "bench",
            "locomo",
            "--data",
            file,
            "--model",
            "none",
            "--mode",
            "bm25",
            "--rankings",
            rankings,
        ]))
        .unwrap()
    };
    // Without abilities (LoCoMo itself): no per-ability table at all.
    std::fs::write(r.path("plain.json"), locomo_file().to_string()).unwrap();
    let plain = bench("plain.json", &r.path("plain.jsonl"));
    assert!(plain["metrics"].get("by_ability").is_none(), "{plain}");
    // BEAM's shape: an `ability` per question; one question of each file names none.
    let mut file = locomo_file();
    let abilities = [
        ("qa-1", 0, "information_extraction"),
        ("qa-1", 1, "temporal_reasoning"),
        ("qa-1", 3, "information_extraction"),
        ("qa-2", 0, "preference_following"),
    ];
    for conv in file.as_array_mut().unwrap() {
        let id = conv["sample_id"].as_str().unwrap().to_owned();
        for (i, qa) in conv["qa"].as_array_mut().unwrap().iter_mut().enumerate() {
            if let Some((_, _, a)) = abilities.iter().find(|(c, n, _)| *c == id && *n == i) {
                qa["ability"] = json!(a);
            }
        }
    }
    std::fs::write(r.path("beam.json"), file.to_string()).unwrap();
    let out = r.path("beam.jsonl");
    let report = bench("beam.json", &out);
    let by = report["metrics"]["by_ability"].as_object().unwrap();
    let names: Vec<&str> = by.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "information_extraction",
            "preference_following",
            "temporal_reasoning"
        ]
    );
    // Each ability's figure is the mean over its own questions' rankings.
    let lines: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (ability, metrics) in by {
        let mine: Vec<&Value> = lines.iter().filter(|l| l["ability"] == *ability).collect();
        assert!(!mine.is_empty(), "{ability}");
        let recall_10: f64 = mine
            .iter()
            .map(|l| {
                let ids: Vec<&str> = l["ranking"].as_array().unwrap()[..]
                    .iter()
                    .take(10)
                    .map(|p| p[0].as_str().unwrap())
                    .collect();
                let evidence = l["evidence"].as_array().unwrap();
                let found = evidence
                    .iter()
                    .filter(|e| ids.contains(&e.as_str().unwrap()))
                    .count();
                found as f64 / evidence.len() as f64
            })
            .sum::<f64>()
            / mine.len() as f64;
        let reported = metrics["recall@10"].as_f64().unwrap();
        assert!(
            (recall_10 - reported).abs() < 1e-9,
            "{ability}: {recall_10} vs {reported}"
        );
    }
    // A question without an ability counts overall only.
    assert_eq!(report["n_queries"], 5);
    assert!(lines.iter().any(|l| l["ability"].is_null()));
}
