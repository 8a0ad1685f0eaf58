//! Qanot's WAL scanner (seed 004, "WAL Protocol"): the seed's examples and line formats, the
//! hard negatives, and precision / recall per category on the labelled set in
//! `tests/data/wal-labelled.jsonl` (run with `--nocapture` to see the table).
#![allow(clippy::unwrap_used)]

use chrono::{TimeZone, Utc};
use memtape_core::wal::{self, Category, WalMatch};
use serde::Deserialize;

fn categories(message: &str) -> Vec<Category> {
    wal::scan(message).into_iter().map(|m| m.category).collect()
}

fn m(category: Category, text: &str) -> WalMatch {
    WalMatch {
        category,
        text: text.to_owned(),
    }
}

#[test]
fn seed_qanot_category_names_and_durability() {
    let names: Vec<&str> = Category::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(
        names,
        [
            "correction",
            "proper_noun",
            "preference",
            "decision",
            "specific_value",
            "remember"
        ]
    );
    for c in Category::ALL {
        assert_eq!(c.as_str().parse::<Category>().unwrap(), c);
        assert_eq!(c.to_string(), c.as_str());
    }
    assert!("ProperNoun".parse::<Category>().is_err());
    let durable: Vec<Category> = Category::ALL
        .into_iter()
        .filter(|c| c.is_durable())
        .collect();
    assert_eq!(
        durable,
        [
            Category::ProperNoun,
            Category::Preference,
            Category::Remember
        ]
    );
}

#[test]
fn seed_qanot_table_examples_match_their_category() {
    // The "Example" column of the seed's "What Gets Captured" table.
    assert_eq!(
        categories("Actually, my name is Sardor, not Sarvar"),
        [Category::Correction, Category::ProperNoun]
    );
    assert_eq!(categories("My name is Bobur"), [Category::ProperNoun]);
    assert_eq!(categories("I prefer dark mode"), [Category::Preference]);
    assert_eq!(categories("Let's go with PostgreSQL"), [Category::Decision]);
    assert_eq!(
        categories("The deadline is 2025-06-15"),
        [Category::SpecificValue]
    );
    assert_eq!(
        categories("Remember that the API key rotates monthly"),
        [Category::Remember]
    );
}

#[test]
fn seed_qanot_session_state_examples_match() {
    // The three lines of the seed's SESSION-STATE.md example.
    assert_eq!(
        wal::scan("My name is Sardor"),
        [m(Category::ProperNoun, "My name is Sardor")]
    );
    assert_eq!(
        wal::scan("I prefer Python over JavaScript"),
        [m(Category::Preference, "I prefer Python over JavaScript")]
    );
    assert_eq!(
        wal::scan("let's use FastAPI for the backend"),
        [m(Category::Decision, "let's use FastAPI for the backend")]
    );
}

#[test]
fn seed_qanot_session_state_line_format() {
    let at = Utc.with_ymd_and_hms(2025, 1, 15, 10, 30, 0).unwrap();
    assert_eq!(
        wal::session_state_line(at, &m(Category::ProperNoun, "My name is Sardor")),
        "- [2025-01-15T10:30:00+00:00] **proper_noun**: My name is Sardor\n"
    );
    let at =
        Utc.with_ymd_and_hms(2025, 1, 15, 10, 35, 0).unwrap() + chrono::Duration::milliseconds(789);
    assert_eq!(
        wal::session_state_line(
            at,
            &m(Category::Decision, "let's use FastAPI\nfor the backend")
        ),
        "- [2025-01-15T10:35:00+00:00] **decision**: let's use FastAPI for the backend\n",
        "seconds precision, one line"
    );
}

#[test]
fn seed_qanot_remember_in_uzbek() {
    for message in [
        "Eslab qol: server paroli har oy o'zgaradi.",
        "Buni unutma, ertaga dedlayn.",
        "Yodda tut, men kechki smenada ishlayman.",
        "Iltimos, eslab qoling.",
        "Unutmang, hisobot jumada.",
    ] {
        assert_eq!(categories(message), [Category::Remember], "{message}");
    }
    // Questions and statements about forgetting are not requests to remember.
    for message in [
        "Esingdami, o'tgan hafta nima gaplashgandik?",
        "Unutib qo'ydim.",
        "Unutmadim.",
    ] {
        assert_eq!(categories(message), [], "{message}");
    }
}

#[test]
fn seed_qanot_other_categories_in_uzbek() {
    assert_eq!(categories("Mening ismim Sardor."), [Category::ProperNoun]);
    assert_eq!(
        categories("Meni Bek deb chaqiring."),
        [Category::ProperNoun]
    );
    assert_eq!(
        categories("Menga qisqa javoblar yoqadi."),
        [Category::Preference]
    );
    assert_eq!(
        categories("Men qora rejimni afzal koʻraman."),
        [Category::Preference]
    );
    assert_eq!(categories("Redisdan foydalanamiz."), [Category::Decision]);
    assert_eq!(
        categories("Aslida bu Python emas, Go."),
        [Category::Correction]
    );
    assert_eq!(categories("Muddat 15-iyun."), [Category::SpecificValue]);
    assert_eq!(categories("Sizga qaysi biri yoqadi?"), []);
    assert_eq!(categories("Qaysi birini tanlaymiz?"), []);
}

#[test]
fn seed_qanot_hard_negatives_do_not_match() {
    for message in [
        "I'm not sure",
        "I'm Not sure, can you check?",
        "I'm happy with it",
        "I'm going to lunch",
        "use your judgement",
        "Use whatever you think is best.",
        "How do I use async in Rust?",
        "I use Vim at work.",
        "actually, never mind",
        "Actually nevermind, I figured it out.",
        "This actually works.",
        "Do you remember when we talked about Docker?",
        "Can you remember what I said yesterday?",
        "I don't remember the password.",
        "I don't know",
        "What do you prefer?",
        "Do you like jazz?",
        "Does Aziz like spicy food?",
        "I want to know how DNS works.",
        "I want you to write a cover letter.",
        "Should we go with Postgres or MySQL?",
        "Give me 2 options.",
        "List the top 10 crates.",
        "Call me back when the build finishes.",
        "It's not working.",
        "I meant to ask you about the report.",
    ] {
        assert_eq!(wal::scan(message), [], "{message}");
    }
}

#[test]
fn seed_qanot_im_needs_a_name() {
    assert_eq!(categories("I'm Sardor"), [Category::ProperNoun]);
    assert_eq!(
        categories("I’m Sardor, nice to meet you"),
        [Category::ProperNoun]
    );
    assert_eq!(
        categories("I'm not sure, but I'm Sardor."),
        [Category::ProperNoun]
    );
    for message in [
        "I'm Happy",
        "I'm Going home",
        "I'm English",
        "I'm Working on it",
    ] {
        assert_eq!(categories(message), [], "{message}");
    }
}

#[test]
fn seed_qanot_use_is_a_decision_only_when_decided() {
    for message in [
        "let's use Redis",
        "We'll use Redis.",
        "Use Redis for the cache.",
        "Fine, use Redis then.",
    ] {
        assert_eq!(categories(message), [Category::Decision], "{message}");
    }
    for message in [
        "I use Redis.",
        "How do I use Redis?",
        "Can I use Redis here?",
        "Use your best judgement.",
    ] {
        assert_eq!(categories(message), [], "{message}");
    }
}

#[test]
fn seed_qanot_text_is_the_triggering_sentence() {
    let hits = wal::scan(
        "Hi there. My name is Bobur.\nCan you help me with Rust? Let's use tokio; the deadline is 2025-06-15. Thanks!",
    );
    assert_eq!(
        hits,
        [
            m(Category::ProperNoun, "My name is Bobur."),
            m(
                Category::Decision,
                "Let's use tokio; the deadline is 2025-06-15."
            ),
            m(
                Category::SpecificValue,
                "Let's use tokio; the deadline is 2025-06-15."
            ),
        ]
    );
    // A title's period does not end the sentence.
    assert_eq!(
        wal::scan("Please call me Mr. Rahimov in formal emails."),
        [m(
            Category::ProperNoun,
            "Please call me Mr. Rahimov in formal emails."
        )]
    );
}

#[test]
fn seed_qanot_each_category_once_per_sentence_in_order() {
    // Two specific values and two preference triggers in one sentence: one match each,
    // ordered by where the first trigger starts.
    let hits = wal::scan("On 2025-06-15 at 10:30 I prefer tea and I like quiet rooms.");
    assert_eq!(
        hits.iter().map(|h| h.category).collect::<Vec<_>>(),
        [Category::SpecificValue, Category::Preference]
    );
    // The same category in two sentences: once per sentence.
    assert_eq!(
        categories("I prefer tea. I also like green tea."),
        [Category::Preference, Category::Preference]
    );
    assert_eq!(wal::scan(""), []);
}

#[test]
fn seed_qanot_duplicate_detection_for_memory_md() {
    let memory = "# MEMORY.md\n\n- i prefer  dark mode\n- My name is Sardor\n* Remember: the API key rotates monthly.\n";
    assert!(wal::is_duplicate(memory, "I prefer dark mode."));
    assert!(wal::is_duplicate(memory, "my name is SARDOR!"));
    assert!(wal::is_duplicate(
        memory,
        "Remember: the API key rotates monthly"
    ));
    assert!(!wal::is_duplicate(
        memory,
        "I prefer dark mode in the editor"
    ));
    assert!(!wal::is_duplicate(memory, "I prefer light mode"));
    assert!(!wal::is_duplicate("", "I prefer dark mode"));
    // A SESSION-STATE.md style line, and a line holding several sentences.
    let memory = "- [2025-01-15T10:31:00+00:00] **preference**: I prefer Python over JavaScript\nUser notes. I like tea. Done\n";
    assert!(wal::is_duplicate(memory, "I prefer Python over JavaScript"));
    assert!(wal::is_duplicate(memory, "I like tea!"));
    assert!(!wal::is_duplicate(memory, "I like"));
}

#[test]
fn seed_qanot_long_term_line() {
    assert_eq!(
        wal::long_term_line(&m(Category::Preference, "I prefer dark mode.")),
        "- I prefer dark mode\n"
    );
    let line = wal::long_term_line(&m(Category::ProperNoun, "My name is\nSardor!"));
    assert_eq!(line, "- My name is Sardor\n");
    assert!(wal::is_duplicate(&line, "my name is sardor"));
}

#[test]
fn wal_match_serializes_as_category_and_text() {
    let json =
        serde_json::to_string(&m(Category::SpecificValue, "The deadline is 2025-06-15")).unwrap();
    assert_eq!(
        json,
        r#"{"category":"specific_value","text":"The deadline is 2025-06-15"}"#
    );
}

#[derive(Deserialize)]
struct Labelled {
    text: String,
    labels: Vec<Category>,
}

fn labelled_set() -> Vec<(String, Vec<Category>)> {
    include_str!("data/wal-labelled.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, line)| {
            let row: Labelled = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("wal-labelled.jsonl line {}: {e}", i + 1));
            (row.text, row.labels)
        })
        .collect()
}

#[test]
fn seed_qanot_labelled_set_precision_and_recall() {
    let set = labelled_set();
    let negatives = set.iter().filter(|(_, l)| l.is_empty()).count();
    assert!(set.len() >= 220, "{} messages", set.len());
    assert!(negatives >= 70, "{negatives} hard negatives");

    // Misclassified messages, for reading with --nocapture.
    for (text, labels) in &set {
        let mut predicted = categories(text);
        predicted.sort();
        predicted.dedup();
        let mut gold = labels.clone();
        gold.sort();
        if predicted != gold {
            let names =
                |cs: &[Category]| cs.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(",");
            println!(
                "MISS  gold=[{}] got=[{}]  {text}",
                names(&gold),
                names(&predicted)
            );
        }
    }

    let rows = wal::metrics(&set);
    println!("\n{} messages, {negatives} without a label", set.len());
    println!(
        "{:<16} {:>9} {:>7} {:>8}",
        "category", "precision", "recall", "support"
    );
    for (c, p, r, n) in &rows {
        println!("{:<16} {:>9.3} {:>7.3} {:>8}", c.as_str(), p, r, n);
    }
    for (c, p, r, n) in rows {
        assert!(n >= 25, "{c}: only {n} labelled messages");
        assert!(p >= 0.85, "{c}: precision {p:.3} < 0.85");
        assert!(r >= 0.80, "{c}: recall {r:.3} < 0.80");
    }
}

#[derive(Deserialize)]
struct Case {
    text: String,
    labels: Vec<Category>,
}

#[test]
fn issue15_extra_cases_scan_exactly_as_labelled() {
    // The issue's sentences, the Uzbek triggers Qanot's scanner has, and Qanot's false
    // positives (tests/data/wal-extra.jsonl): each must give exactly its labels.
    let mut wrong = Vec::new();
    let mut n = 0;
    for (i, line) in include_str!("data/wal-extra.jsonl").lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let case: Case = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("wal-extra.jsonl line {}: {e}", i + 1));
        n += 1;
        let mut got = categories(&case.text);
        got.sort();
        let mut want = case.labels;
        want.sort();
        if got != want {
            wrong.push(format!(
                "line {}: {:?}: want {want:?}, got {got:?}",
                i + 1,
                case.text
            ));
        }
    }
    assert!(n >= 100, "{n} cases");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn issue15_actually_is_a_correction_anywhere() {
    // The seed's trigger is "actually", not only as the first word.
    for message in [
        "The meeting is on Friday, actually.",
        "it's actually spelled Karimova",
        "The deadline is actually next Monday.",
        "I live in Samarkand, actually.",
        "Actually, could you make it formal instead?",
    ] {
        assert_eq!(categories(message), [Category::Correction], "{message}");
    }
    assert_eq!(
        categories("My name is actually Sarvar."),
        [Category::ProperNoun, Category::Correction]
    );
    // Not in a question, not the intensifier or praise, not "never mind".
    for message in [
        "Did it actually compile?",
        "This actually works!",
        "That's actually a great idea.",
        "It's actually pretty good.",
        "Actually, never mind.",
    ] {
        assert_eq!(categories(message), [], "{message}");
    }
    assert_eq!(
        categories("I actually like this version."),
        [Category::Preference]
    );
}

#[test]
fn issue15_qanot_false_positives_stay_out() {
    // Qanot's scanner reports each of these (a name, a correction, a decision); none holds one.
    for message in [
        "I'm tired",
        "It's raining again",
        "How do I use async",
        "Because it's faster.",
        "This is great.",
        "Call me maybe.",
        "Men charchadim.",
        "Menda vaqt yo'q.",
        "Kitob qani?",
        "Keling!",
        "Sening isming nima?",
        "Unutmadim, rahmat.",
        "I don't forget birthdays.",
        "Not bad, but it could be shorter.",
    ] {
        assert_eq!(wal::scan(message), [], "{message}");
    }
}

#[test]
fn issue15_uzbek_triggers_qanot_has() {
    // A name after "Men …", and naming the assistant.
    for message in [
        "Men Sardor.",
        "Salom, men Aziz.",
        "Men Jasur bo'laman.",
        "Sening isming Jarvis.",
        "Seni Botir deb chaqiraman.",
    ] {
        assert_eq!(categories(message), [Category::ProperNoun], "{message}");
    }
    for message in ["Men Toshkentda yashayman.", "Men Python dasturchisiman."] {
        assert_eq!(categories(message), [], "{message}");
    }
    // "… ishlataylik" and the other hortatives of choice are decisions.
    for message in [
        "Redisni ishlataylik.",
        "Qani, FastAPI ni sinab ko'raylik.",
        "Vue ni tanlaylik.",
        "Keling, ertaga boshlaymiz.",
    ] {
        assert_eq!(categories(message), [Category::Decision], "{message}");
    }
    for message in [
        "Keling, bir o'ylab ko'raylik.",
        "Keyinroq gaplashaylik.",
        "Qaysi kutubxonani ishlataylik?",
    ] {
        assert_eq!(categories(message), [], "{message}");
    }
    // "yo'q, …", "aslida" anywhere, "men aytmoqchi edim", "to'g'ri emas".
    for message in [
        "Yo'q, uchrashuv juma kuni.",
        "Uchrashuv aslida juma kuni.",
        "Men aytmoqchi edimki, server emas, klient.",
        "Javobing to'g'ri emas.",
    ] {
        assert_eq!(categories(message), [Category::Correction], "{message}");
    }
    for message in [
        "Yo'q, rahmat.",
        "Bu aslida juda oddiy.",
        "Bu to'g'ri emasmi?",
    ] {
        assert_eq!(categories(message), [], "{message}");
    }
}

#[test]
fn issue15_not_x_but_y_is_a_correction() {
    for message in [
        "The meeting is not Monday but Tuesday.",
        "The bug is not here but in the parser.",
        "No, the meeting is at 3, not 4.",
    ] {
        assert_eq!(categories(message), [Category::Correction], "{message}");
    }
    for message in [
        "Not only fast but also safe.",
        "I do not know, but I can check.",
    ] {
        assert_eq!(categories(message), [], "{message}");
    }
}

#[test]
fn blind_set_figures_do_not_fall() {
    // tests/data/wal-blind.jsonl was labelled from the seed alone, by someone who had not seen
    // the patterns, and measured once after they were frozen (README, "The WAL on a blind
    // set"). These are those figures: a change to the patterns may raise them, not lower them.
    // Lines 230-271 are Russian, which the patterns do not cover.
    let set: Vec<(String, Vec<Category>)> = include_str!("data/wal-blind.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, line)| {
            let row: Labelled = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("wal-blind.jsonl line {}: {e}", i + 1));
            (row.text, row.labels)
        })
        .collect();
    assert_eq!(set.len(), 271);
    let recorded = [
        (Category::Correction, 0.704, 0.704, 27),
        (Category::ProperNoun, 1.000, 0.562, 32),
        (Category::Preference, 0.900, 0.562, 32),
        (Category::Decision, 0.909, 0.667, 30),
        (Category::SpecificValue, 0.909, 0.952, 42),
        (Category::Remember, 0.941, 0.571, 28),
    ];
    let rows = wal::metrics(&set);
    for ((c, p, r, n), (rc, rp, rr, rn)) in rows.into_iter().zip(recorded) {
        println!("{:<16} {p:>9.3} {r:>7.3} {n:>8}", c.as_str());
        assert_eq!((c, n), (rc, rn));
        assert!(p >= rp - 0.0005, "{c}: precision {p:.3} < {rp:.3}");
        assert!(r >= rr - 0.0005, "{c}: recall {r:.3} < {rr:.3}");
    }
}
