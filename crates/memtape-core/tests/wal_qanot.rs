//! memtape's WAL scanner against Qanot's own (qanot 2.0.4, `qanot.memory.wal_scan`), on the
//! messages recorded in `tests/data/qanot-wal.jsonl` by `scripts/refs/qanot_wal.py`: every
//! message where the two disagree on a category is listed below with the reason memtape
//! departs from Qanot; any other difference fails. Run with `--nocapture` for the figures.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use memtape_core::wal::{self, Category};
use serde::Deserialize;

use Category::{
    Correction as C, Decision as D, Preference as P, ProperNoun as N, Remember as R,
    SpecificValue as V,
};
use Side::{MemtapeOnly as M, QanotOnly as Q};

/// Which scanner reports the category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    /// Qanot reports it, memtape does not.
    QanotOnly,
    /// memtape reports it, Qanot does not.
    MemtapeOnly,
}

/// Why memtape departs from Qanot. Each names the seed line (seed 004, "What Gets Captured")
/// or the judgement in `src/wal.rs` ("What each category means") that decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    ItsAnywhere,
    ActuallyNotCorrection,
    NotBadBut,
    AslidaNotCorrection,
    YoqAnywhere,
    AytmoqchimanNotMeant,
    ImAnyWord,
    MenAnyWord,
    CallMeNotName,
    ThisIsAnyWord,
    UzbekQuestion,
    UseAnywhere,
    GoWithNoChoice,
    KelingQaniAlone,
    WantToIsRequest,
    PreferenceQuestion,
    RememberQuestion,
    StatementNotRequest,
    UnutmadimNotRequest,
    MoreCorrections,
    MoreNames,
    MorePreferences,
    MoreDecisions,
    MoreValues,
    MoreRemember,
    MemtapeFalsePositive,
}

impl Why {
    fn explain(self) -> &'static str {
        match self {
            Why::ItsAnywhere => {
                "Qanot's correction pattern takes every \"it's\" or \"its\", even inside words \
                (\"because it's\", \"units\"); the seed's triggers are \"actually\", \"no I \
                meant\", \"it's not X, it's Y\": \"It's raining again\" is not a correction \
                (issue 15)."
            }
            Why::ActuallyNotCorrection => {
                "\"actually\" in a question, as an intensifier or praise (\"this actually \
                works\", \"that's actually a great idea\") or before \"never mind\" corrects \
                nothing (src/wal.rs, correction); anywhere else memtape takes it, as the \
                seed's table does."
            }
            Why::NotBadBut => {
                "Qanot's \"not X, but\" takes \"not bad, but…\"; memtape's \"not X but Y\" \
                leaves out \"not only / bad / sure … but\" and verbs after \"do not\" \
                (src/wal.rs, correction)."
            }
            Why::AslidaNotCorrection => {
                "Uzbek \"aslida\" (\"actually\") in a question or as an intensifier (\"bu \
                aslida juda oddiy\"), as for English \"actually\" (src/wal.rs, correction)."
            }
            Why::YoqAnywhere => {
                "Qanot's \"yo'q\" (\"no\", \"there is none\") matches anywhere (\"Menda vaqt \
                yo'q\": I have no time); memtape takes a clause-initial \"Yo'q, <the right \
                version>\", not \"Yo'q, rahmat\" (no, thanks) (src/wal.rs, correction)."
            }
            Why::AytmoqchimanNotMeant => {
                "Qanot's \"men aytmoqchi\" also takes \"men aytmoqchiman\" (\"I want to say\"); \
                memtape takes \"aytmoqchi edim / bo'lganim\" (\"what I meant\"), the seed's \
                \"no I meant\" (src/wal.rs, correction)."
            }
            Why::ImAnyWord => {
                "Qanot compiles its proper_noun pattern case-insensitively, so any word after \
                \"I'm\" or \"im\" (even inside \"Tim\", \"Vim\", \"maoshim\") counts; the seed \
                says \"I'm\" + capitalized word: \"I'm tired\" is not a name (issue 15), nor a \
                nationality or a state (src/wal.rs, proper_noun)."
            }
            Why::MenAnyWord => {
                "Qanot takes any word after Uzbek \"men\" (\"I\") as a name, case-insensitively \
                (\"Men charchadim\": I am tired); memtape takes a capitalised word that ends \
                the clause or carries \"-man\" (\"Men Sardor.\", \"Men Sardorman\"), not \
                places (\"Toshkentdanman\") or other words (src/wal.rs, proper_noun)."
            }
            Why::CallMeNotName => {
                "\"call me back / when / maybe / tomorrow\" gives no name; the seed's trigger \
                is \"call me\" + capitalized word."
            }
            Why::ThisIsAnyWord => {
                "Qanot takes any word after \"this is\" (\"This is great\"); memtape takes \
                \"this is X here / speaking / from\" and a greeting's \"Hi, this is Malika.\" \
                (src/wal.rs, proper_noun)."
            }
            Why::UzbekQuestion => {
                "A question (\"Sening isming nima?\": what is your name?, \"… emasmi?\", \
                \"Qaysi … ishlataylik?\": which shall we use?) records nothing (src/wal.rs, \
                every category)."
            }
            Why::UseAnywhere => {
                "Qanot's decision pattern takes every \"use \" (even inside \"because \"): \
                habits (\"I use Vim\"), questions (\"How do I use async\", issue 15), \
                requests, delegated choices (\"use your judgement\") and standing instructions \
                (\"Never use bullet points\", a preference); memtape takes \"let's use\", \
                \"we'll use\" and a clause-initial \"Use X\" (src/wal.rs, decision)."
            }
            Why::GoWithNoChoice => {
                "\"go with\" in a question (\"Should we go with…?\") or as \"doesn't go with my \
                shoes\" decides nothing (src/wal.rs, decision)."
            }
            Why::KelingQaniAlone => {
                "Qanot takes \"keling\" (come / let's) and \"qani\" (where is / come on) alone: \
                \"Keling!\" (come in), \"Kitob qani?\" (where is the book?), \"o'ylab \
                ko'raylik\" (let's think it over) choose nothing; memtape takes them with a \
                verb of choice (src/wal.rs, decision)."
            }
            Why::WantToIsRequest => {
                "\"I want to …\" and \"I want you to …\" are requests, not preferences \
                (src/wal.rs, preference); the seed's example is \"I prefer dark mode\"."
            }
            Why::PreferenceQuestion => {
                "\"Do I like…?\", \"Would I like…?\" are questions, not preferences \
                (src/wal.rs, preference)."
            }
            Why::RememberQuestion => {
                "\"Do you remember that song?\" asks, it does not ask to keep (src/wal.rs, \
                remember)."
            }
            Why::StatementNotRequest => {
                "\"I don't forget birthdays\" states a habit; the seed's \"don't forget\" is a \
                request (src/wal.rs, remember)."
            }
            Why::UnutmadimNotRequest => {
                "Qanot's \"unutma\" (don't forget) also matches \"unutmadim\" (I haven't \
                forgotten), which asks for nothing (src/wal.rs, remember)."
            }
            Why::MoreCorrections => {
                "A correction the seed describes that Qanot's few words miss: \"I meant\" \
                without \"no\", \"X, not Y\" after \"sorry / wait / my mistake\", \"that's \
                wrong\", \"you misunderstood\", \"I misspoke\", \"I was wrong\", \
                \"Correction:\", Uzbek \"X emas, Y\", \"to'g'rirog'i\", \"xato tushundingiz\", \
                \"adashibman\", \"demoqchi edim\" (src/wal.rs, correction)."
            }
            Why::MoreNames => {
                "A name Qanot's patterns miss: \"I am X\", someone's name (\"my wife's name \
                is\", \"my dog is called\", \"our startup is called\"), \"I go by\", \
                \"everyone calls me\", \"Name's Bekzod\", \"my brother Sherzod\", a name given \
                to the assistant (\"Your name is Jarvis\"), Uzbek \"familiyam\", \"meni X deb \
                chaqiring\", \"ismi\" (src/wal.rs, proper_noun)."
            }
            Why::MorePreferences => {
                "A like or dislike Qanot's adjacent-word patterns miss: \"I'd prefer / \
                rather\", \"I enjoy / dislike\", \"I can't stand\", \"I don't really like\", \
                \"my favorite\", \"always / never …\", \"from now on\", \"I'd love it if\", \
                \"keep it short\", \"Don't use X\", Uzbek \"menga … yoqadi\", \"afzal \
                ko'raman\", \"xohlayman\" without \"men\" right before it (src/wal.rs, \
                preference)."
            }
            Why::MoreDecisions => {
                "A decision Qanot's \"let's do / go / use / try\" misses: \"let's choose / \
                stick with / skip / switch\", \"we'll stick with\", \"we're going with\", \
                \"I've decided\", \"I'll take\", \"pick X\", \"X it is\", \"go ahead with\", \
                \"Final answer:\", \"we're moving X to\", Uzbek \"foydalanamiz\", \
                \"tanlaymiz\", \"qaror qildik\", \"mayli, … bo'lsin\", hortatives other than \
                \"ishlataylik\" (src/wal.rs, decision)."
            }
            Why::MoreValues => {
                "The seed names \"Dates, URLs, large numbers\"; Qanot takes only yyyy-mm-dd, \
                http(s) URLs and numbers of 5+ digits. memtape also takes other date forms, \
                times, domains, e-mails, phone numbers, IPs, versions, 4-digit numbers, \
                amounts and quantities with a unit (src/wal.rs, specific_value)."
            }
            Why::MoreRemember => {
                "A request to keep something Qanot's five phrases miss: \"keep / bear in \
                mind\", \"note that\", \"for future reference\", \"save this to memory\", a \
                clause-initial \"remember, …\", \"please remember\", \"never forget\", Uzbek \
                \"esda tut\", \"yodingda bo'lsin\" (src/wal.rs, remember)."
            }
            Why::MemtapeFalsePositive => {
                "memtape's own false positive, labelled so in wal-labelled.jsonl and counted in \
                its precision: Qanot is right here."
            }
        }
    }
}

/// Every disagreement on the recorded messages: the message, the category, who reports it,
/// and why memtape departs from Qanot.
const KNOWN: &[(&str, Category, Side, Why)] = &[
    ("Actually I use Linux, not macOS.", D, Q, Why::UseAnywhere),
    ("Because it's faster.", D, Q, Why::UseAnywhere),
    (
        "Can I use this for commercial projects?",
        D,
        Q,
        Why::UseAnywhere,
    ),
    ("Can you use a table for this?", D, Q, Why::UseAnywhere),
    ("Don't use jargon.", D, Q, Why::UseAnywhere),
    ("How about we use Rust?", D, Q, Why::UseAnywhere),
    ("How do I use async", D, Q, Why::UseAnywhere),
    ("How do I use async in Rust?", D, Q, Why::UseAnywhere),
    ("How do I use async?", D, Q, Why::UseAnywhere),
    ("I like it when you use examples.", D, Q, Why::UseAnywhere),
    ("I use Vim at work.", D, Q, Why::UseAnywhere),
    ("I'd rather use metric units.", D, Q, Why::UseAnywhere),
    (
        "Is it OK to use global variables here?",
        D,
        Q,
        Why::UseAnywhere,
    ),
    ("My kids use the tablet too much.", D, Q, Why::UseAnywhere),
    (
        "Never use bullet points when writing to my boss.",
        D,
        Q,
        Why::UseAnywhere,
    ),
    ("Save this to memory: I use a Mac.", D, Q, Why::UseAnywhere),
    ("Should I use Docker?", D, Q, Why::UseAnywhere),
    ("Use whatever you think is best.", D, Q, Why::UseAnywhere),
    ("Use your judgement.", D, Q, Why::UseAnywhere),
    ("We use Jira at work.", D, Q, Why::UseAnywhere),
    (
        "What should we use for the database?",
        D,
        Q,
        Why::UseAnywhere,
    ),
    ("What's the best way to use pandas?", D, Q, Why::UseAnywhere),
    ("What's the use of this parameter?", D, Q, Why::UseAnywhere),
    (
        "Which library do people usually use for this?",
        D,
        Q,
        Why::UseAnywhere,
    ),
    ("Actually, never mind.", C, Q, Why::ActuallyNotCorrection),
    (
        "Actually, that looks great!",
        C,
        Q,
        Why::ActuallyNotCorrection,
    ),
    ("Did it actually compile?", C, Q, Why::ActuallyNotCorrection),
    (
        "Did you actually run the tests?",
        C,
        Q,
        Why::ActuallyNotCorrection,
    ),
    (
        "I actually like this version.",
        C,
        Q,
        Why::ActuallyNotCorrection,
    ),
    (
        "Is it actually faster than the old version?",
        C,
        Q,
        Why::ActuallyNotCorrection,
    ),
    (
        "Is this actually necessary?",
        C,
        Q,
        Why::ActuallyNotCorrection,
    ),
    (
        "It's actually pretty good.",
        C,
        Q,
        Why::ActuallyNotCorrection,
    ),
    (
        "That's actually a great idea.",
        C,
        Q,
        Why::ActuallyNotCorrection,
    ),
    (
        "This actually works really well, thanks!",
        C,
        Q,
        Why::ActuallyNotCorrection,
    ),
    ("This actually works!", C, Q, Why::ActuallyNotCorrection),
    (
        "What does this function actually do?",
        C,
        Q,
        Why::ActuallyNotCorrection,
    ),
    ("Wow, it actually worked.", C, Q, Why::ActuallyNotCorrection),
    (
        "actually nevermind, I figured it out",
        C,
        Q,
        Why::ActuallyNotCorrection,
    ),
    (
        "Adashibman, fayl boshqa papkada.",
        C,
        M,
        Why::MoreCorrections,
    ),
    ("Bu Python emas, Go.", C, M, Why::MoreCorrections),
    (
        "Correction: the budget is $12,000, not $10,000.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "I misspoke earlier: the meeting is at the downtown office, not the airport one.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "I think you misread my question.",
        C,
        M,
        Why::MoreCorrections,
    ),
    ("I was wrong about the date.", C, M, Why::MoreCorrections),
    (
        "Kechirasiz, adashibman: uchrashuv seshanba kuni.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "Let me correct that: we have 40 employees, not 14.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "Men ertangi uchrashuvni demoqchi edim.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "My mistake, the server is in Frankfurt, not Paris.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "No, no, I said Redis, not RabbitMQ.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "No, the meeting is at 3, not 4.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "Nope, wrong file. The bug is in parser.rs.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "Not quite — the function should return None, not an empty list.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "Not the March report — I meant the April one.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "Oops, I meant 8 GB of RAM, not 16.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "Sorry, I meant the blue button, not the red one.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "Sorry, typo — I meant 'deploy', not 'destroy'.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "That's incorrect, the limit is 100 requests per minute.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "That's not right. The client wants the report in PDF, not Word.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "That's wrong — the office is on the 5th floor, not the 3rd.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "To'g'rirog'i, hisobot juma kuni kerak.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "Wait, I meant the second file, not the first one.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "Wrong person — I was asking about Jasur, not Jahongir.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "Xato tushundingiz, men boshqa faylni aytdim.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "You got it wrong, my daughter is Malika, not Madina.",
        C,
        M,
        Why::MoreCorrections,
    ),
    (
        "You misunderstood: I want a summary, not a translation.",
        C,
        M,
        Why::MoreCorrections,
    ),
    ("Alright, Tailwind it is.", D, M, Why::MoreDecisions),
    (
        "Decided: we're switching to GitHub Actions.",
        D,
        M,
        Why::MoreDecisions,
    ),
    (
        "Decision made: no more microservices.",
        D,
        M,
        Why::MoreDecisions,
    ),
    ("FastAPI ishlatamiz.", D, M, Why::MoreDecisions),
    ("Final answer: Vue.", D, M, Why::MoreDecisions),
    (
        "Final decision: we ship on Monday.",
        D,
        M,
        Why::MoreDecisions,
    ),
    ("Go ahead with the migration.", D, M, Why::MoreDecisions),
    ("Go ahead with the refactor.", D, M, Why::MoreDecisions),
    ("I'll take the blue one.", D, M, Why::MoreDecisions),
    (
        "I've decided to drop the mobile app for now.",
        D,
        M,
        Why::MoreDecisions,
    ),
    ("Ikkinchi variantni tanlaymiz.", D, M, Why::MoreDecisions),
    ("Let's call it v1 and ship it.", D, M, Why::MoreDecisions),
    ("Let's choose the blue theme.", D, M, Why::MoreDecisions),
    ("Let's skip the tests for now.", D, M, Why::MoreDecisions),
    ("Let's stick with React.", D, M, Why::MoreDecisions),
    (
        "Let's switch the default branch to main.",
        D,
        M,
        Why::MoreDecisions,
    ),
    ("Mayli, Django bo'lsin.", D, M, Why::MoreDecisions),
    ("Mayli, shunday qilamiz.", D, M, Why::MoreDecisions),
    (
        "OK we'll stick with MongoDB for now.",
        D,
        M,
        Why::MoreDecisions,
    ),
    ("Pick the cheaper hosting plan.", D, M, Why::MoreDecisions),
    (
        "Qaror qildik: loyiha Go tilida yoziladi.",
        D,
        M,
        Why::MoreDecisions,
    ),
    ("Redisdan foydalanamiz.", D, M, Why::MoreDecisions),
    ("Testlarni pytest bilan yozaylik.", D, M, Why::MoreDecisions),
    ("Vue ni tanlaylik.", D, M, Why::MoreDecisions),
    ("We'll host it on Hetzner.", D, M, Why::MoreDecisions),
    (
        "We're going with the monthly plan.",
        D,
        M,
        Why::MoreDecisions,
    ),
    (
        "We're moving the release to next week.",
        D,
        M,
        Why::MoreDecisions,
    ),
    (
        "We're moving the standup to 10am.",
        D,
        M,
        Why::MoreDecisions,
    ),
    ("Ask Tim about it.", N, Q, Why::ImAnyWord),
    (
        "Could you remember that I'm allergic to nuts?",
        N,
        Q,
        Why::ImAnyWord,
    ),
    (
        "Don't forget that I'm in Tashkent time.",
        N,
        Q,
        Why::ImAnyWord,
    ),
    (
        "I think the second one is better, but I'm not sure.",
        N,
        Q,
        Why::ImAnyWord,
    ),
    ("I use Vim at work.", N, Q, Why::ImAnyWord),
    (
        "I'm English, so British spelling please.",
        N,
        Q,
        Why::ImAnyWord,
    ),
    ("I'm Going to bed now.", N, Q, Why::ImAnyWord),
    ("I'm Not sure, can you check?", N, Q, Why::ImAnyWord),
    (
        "I'm Really excited about this project!",
        N,
        Q,
        Why::ImAnyWord,
    ),
    ("I'm So confused right now.", N, Q, Why::ImAnyWord),
    ("I'm Sorry for the confusion.", N, Q, Why::ImAnyWord),
    ("I'm Sorry, I wasn't clear.", N, Q, Why::ImAnyWord),
    ("I'm Uzbek.", N, Q, Why::ImAnyWord),
    ("I'm fine, thanks.", N, Q, Why::ImAnyWord),
    ("I'm going to lunch, back in an hour.", N, Q, Why::ImAnyWord),
    ("I'm happy with the result.", N, Q, Why::ImAnyWord),
    ("I'm hungry, what should I cook?", N, Q, Why::ImAnyWord),
    ("I'm in a hurry, keep it short.", N, Q, Why::ImAnyWord),
    (
        "I'm new to programming, go easy on me.",
        N,
        Q,
        Why::ImAnyWord,
    ),
    ("I'm not a big fan of long emails.", N, Q, Why::ImAnyWord),
    ("I'm not sure about that.", N, Q, Why::ImAnyWord),
    ("I'm not sure, let me check.", N, Q, Why::ImAnyWord),
    ("I'm tired", N, Q, Why::ImAnyWord),
    ("I'm tired of this bug.", N, Q, Why::ImAnyWord),
    ("I'm tired.", N, Q, Why::ImAnyWord),
    ("I'm using Ubuntu on my laptop.", N, Q, Why::ImAnyWord),
    (
        "I'm vegetarian, so no meat recipes please.",
        N,
        Q,
        Why::ImAnyWord,
    ),
    ("Im sure it will work.", N, Q, Why::ImAnyWord),
    (
        "Just a heads up for later: I'm off on Friday.",
        N,
        Q,
        Why::ImAnyWord,
    ),
    ("Keep in mind I'm colorblind.", N, Q, Why::ImAnyWord),
    ("Oylik maoshim kechikdi.", N, Q, Why::ImAnyWord),
    (
        "Please remember I'm allergic to peanuts.",
        N,
        Q,
        Why::ImAnyWord,
    ),
    ("Remember that I'm allergic to nuts.", N, Q, Why::ImAnyWord),
    ("Remember, I'm left-handed.", N, Q, Why::ImAnyWord),
    ("Aslida bu nima?", C, Q, Why::AslidaNotCorrection),
    ("Aslida nima bo'ldi?", C, Q, Why::AslidaNotCorrection),
    ("Bu aslida juda oddiy.", C, Q, Why::AslidaNotCorrection),
    (
        "Aslida men Samarqanddanman, Toshkentdan emas.",
        N,
        Q,
        Why::MenAnyWord,
    ),
    (
        "Eslab qol, men ertalab ishlashni yoqtiraman.",
        N,
        Q,
        Why::MenAnyWord,
    ),
    ("Men Google'da ishlayman.", N, Q, Why::MenAnyWord),
    ("Men Python dasturchisiman.", N, Q, Why::MenAnyWord),
    ("Men Pythonni yoqtiraman.", N, Q, Why::MenAnyWord),
    ("Men Toshkentda yashayman.", N, Q, Why::MenAnyWord),
    ("Men Toshkentdanman.", N, Q, Why::MenAnyWord),
    (
        "Men aytmoqchi bo'lganim boshqa fayl edi.",
        N,
        Q,
        Why::MenAnyWord,
    ),
    (
        "Men aytmoqchi edimki, server emas, klient.",
        N,
        Q,
        Why::MenAnyWord,
    ),
    ("Men aytmoqchiman, bu loyiha zo'r.", N, Q, Why::MenAnyWord),
    (
        "Men bilmoqchiman, bu qanday ishlaydi?",
        N,
        Q,
        Why::MenAnyWord,
    ),
    ("Men bugun band emasman.", N, Q, Why::MenAnyWord),
    ("Men charchadim.", N, Q, Why::MenAnyWord),
    ("Men choy xohlayman.", N, Q, Why::MenAnyWord),
    (
        "Men choyni kofedan ko'ra afzal ko'raman.",
        N,
        Q,
        Why::MenAnyWord,
    ),
    (
        "Men ertangi uchrashuvni demoqchi edim.",
        N,
        Q,
        Why::MenAnyWord,
    ),
    ("Men ham shunday o'ylayman.", N, Q, Why::MenAnyWord),
    (
        "Men istardim, javoblar qisqa bo'lsa.",
        N,
        Q,
        Why::MenAnyWord,
    ),
    ("Men qisqa xabarlarni yoqtiraman.", N, Q, Why::MenAnyWord),
    ("Men qora rejimni afzal ko'raman.", N, Q, Why::MenAnyWord),
    ("Men uzun xatlarni yomon ko'raman.", N, Q, Why::MenAnyWord),
    (
        "Xato tushundingiz, men boshqa faylni aytdim.",
        N,
        Q,
        Why::MenAnyWord,
    ),
    (
        "Yo'q, bunday emas. Men React haqida so'ragandim.",
        N,
        Q,
        Why::MenAnyWord,
    ),
    (
        "Yo'q, men ertangi uchrashuvni demoqchi edim.",
        N,
        Q,
        Why::MenAnyWord,
    ),
    (
        "Yodda tut, men kechki smenada ishlayman.",
        N,
        Q,
        Why::MenAnyWord,
    ),
    ("Yodda tut, men vegetarianman.", N, Q, Why::MenAnyWord),
    (
        "Yodingda bo'lsin, men Mac ishlataman.",
        N,
        Q,
        Why::MenAnyWord,
    ),
    (
        "Bear in mind the office closes early on Fridays.",
        R,
        M,
        Why::MoreRemember,
    ),
    (
        "Esda tut, mijoz PDF formatni so'radi.",
        R,
        M,
        Why::MoreRemember,
    ),
    (
        "For future reference, our fiscal year starts in April.",
        R,
        M,
        Why::MoreRemember,
    ),
    (
        "Just so you remember: my server runs Debian.",
        R,
        M,
        Why::MoreRemember,
    ),
    ("Keep in mind I'm colorblind.", R, M, Why::MoreRemember),
    (
        "Keep in mind that I work night shifts.",
        R,
        M,
        Why::MoreRemember,
    ),
    (
        "Keep this in mind for later: the cluster has 3 nodes.",
        R,
        M,
        Why::MoreRemember,
    ),
    (
        "Make a note: Aziz is on vacation next week.",
        R,
        M,
        Why::MoreRemember,
    ),
    (
        "Never forget that prod deploys need two approvals.",
        R,
        M,
        Why::MoreRemember,
    ),
    (
        "Note that the client prefers PDF invoices.",
        R,
        M,
        Why::MoreRemember,
    ),
    (
        "Note this down: the wifi password is tezkor2024.",
        R,
        M,
        Why::MoreRemember,
    ),
    (
        "Please remember I'm allergic to peanuts.",
        R,
        M,
        Why::MoreRemember,
    ),
    (
        "Please remember to CC my manager on every email.",
        R,
        M,
        Why::MoreRemember,
    ),
    (
        "Remember my wife's name is Malika.",
        R,
        M,
        Why::MoreRemember,
    ),
    ("Remember, I'm left-handed.", R, M, Why::MoreRemember),
    ("Remember, the demo is at 4pm.", R, M, Why::MoreRemember),
    ("Remember: no meetings on Fridays.", R, M, Why::MoreRemember),
    ("Save this to memory: I use a Mac.", R, M, Why::MoreRemember),
    (
        "Store this in memory: office code 4471.",
        R,
        M,
        Why::MoreRemember,
    ),
    (
        "Yodingda bo'lsin, men Mac ishlataman.",
        R,
        M,
        Why::MoreRemember,
    ),
    (
        "Yodingizda bo'lsin, ertaga bayram.",
        R,
        M,
        Why::MoreRemember,
    ),
    ("Because it's faster.", C, Q, Why::ItsAnywhere),
    (
        "Do you remember my name? It's Umid.",
        C,
        Q,
        Why::ItsAnywhere,
    ),
    ("Hey, it's Kamola again.", C, Q, Why::ItsAnywhere),
    ("I'd rather use metric units.", C, Q, Why::ItsAnywhere),
    ("It's a good day for a walk.", C, Q, Why::ItsAnywhere),
    ("It's fine, thanks.", C, Q, Why::ItsAnywhere),
    ("It's no use.", C, Q, Why::ItsAnywhere),
    (
        "It's not that hard, I just need an example.",
        C,
        Q,
        Why::ItsAnywhere,
    ),
    ("It's not working.", C, Q, Why::ItsAnywhere),
    ("It's on the 5th floor.", C, Q, Why::ItsAnywhere),
    ("It's raining again", C, Q, Why::ItsAnywhere),
    ("It's raining again.", C, Q, Why::ItsAnywhere),
    ("Thanks, it's perfect.", C, Q, Why::ItsAnywhere),
    ("The app crashed on its own.", C, Q, Why::ItsAnywhere),
    ("Bu to'g'ri emas, muddat 20-may.", V, M, Why::MoreValues),
    (
        "Call the hotel at +998 90 123 45 67.",
        V,
        M,
        Why::MoreValues,
    ),
    ("Check out example.org for details.", V, M, Why::MoreValues),
    (
        "Correction: the budget is $12,000, not $10,000.",
        V,
        M,
        Why::MoreValues,
    ),
    (
        "Don't forget: the contract ends on 31 December 2025.",
        V,
        M,
        Why::MoreValues,
    ),
    (
        "Eslab qol: mening tug'ilgan kunim 12-mayda.",
        V,
        M,
        Why::MoreValues,
    ),
    ("Flight TK 371 departs at 06:45.", V, M, Why::MoreValues),
    ("His number is 90 123 45 67.", V, M, Why::MoreValues),
    (
        "Hisobotni 2025-yil 1-martgacha topshirish kerak.",
        V,
        M,
        Why::MoreValues,
    ),
    ("I have 3000 photos to sort.", V, M, Why::MoreValues),
    ("Increase the limit by 15%.", V, M, Why::MoreValues),
    ("It costs 450 000 so'm.", V, M, Why::MoreValues),
    ("It weighs 2.3 kg.", V, M, Why::MoreValues),
    ("Let's do it tomorrow at 10:00.", V, M, Why::MoreValues),
    ("Meeting moved to 17 Oct.", V, M, Why::MoreValues),
    ("Muddat 15-iyun.", V, M, Why::MoreValues),
    ("My birthday is 4 May.", V, M, Why::MoreValues),
    (
        "My flight lands at 14:35 on 12/09/2025.",
        V,
        M,
        Why::MoreValues,
    ),
    ("My salary is 8 mln so'm.", V, M, Why::MoreValues),
    ("Narxi 1 200 000 so'm.", V, M, Why::MoreValues),
    ("No I meant next Friday, the 14th.", V, M, Why::MoreValues),
    (
        "Note this down: the wifi password is tezkor2024.",
        V,
        M,
        Why::MoreValues,
    ),
    ("Oops, I meant 8 GB of RAM, not 16.", V, M, Why::MoreValues),
    ("Our budget is $25,000.", V, M, Why::MoreValues),
    ("Population is roughly 2.5 million.", V, M, Why::MoreValues),
    (
        "Port 8443 is open on the staging box.",
        V,
        M,
        Why::MoreValues,
    ),
    ("Remember, the demo is at 4pm.", V, M, Why::MoreValues),
    (
        "Revenue last quarter was 3.2 million dollars.",
        V,
        M,
        Why::MoreValues,
    ),
    ("Send it before 9am tomorrow.", V, M, Why::MoreValues),
    ("Send the report to aziz@example.uz.", V, M, Why::MoreValues),
    (
        "Store this in memory: office code 4471.",
        V,
        M,
        Why::MoreValues,
    ),
    ("Telefonim +998 90 123 45 67.", V, M, Why::MoreValues),
    ("Telefonim +998 91 555 12 34.", V, M, Why::MoreValues),
    ("The API is v2.4.1 now.", V, M, Why::MoreValues),
    ("The PIN is 1234.", V, M, Why::MoreValues),
    ("The budget was actually $5,000.", V, M, Why::MoreValues),
    ("The contract starts 03.02.2026.", V, M, Why::MoreValues),
    ("The invoice total is 1,250 EUR.", V, M, Why::MoreValues),
    ("The max file size is 50 MB.", V, M, Why::MoreValues),
    ("The meeting is on March 3rd at 2pm.", V, M, Why::MoreValues),
    ("The office moved on 1 July 2024.", V, M, Why::MoreValues),
    ("The party is on Friday, the 13th.", V, M, Why::MoreValues),
    (
        "The repo lives at github.com/acme/tezkor.",
        V,
        M,
        Why::MoreValues,
    ),
    ("The server IP is 10.0.4.17.", V, M, Why::MoreValues),
    (
        "The server actually runs on port 8080.",
        V,
        M,
        Why::MoreValues,
    ),
    ("The wifi password is qwerty2024.", V, M, Why::MoreValues),
    ("Tug'ilgan kunim 5-avgust.", V, M, Why::MoreValues),
    ("Uchrashuv 10:30 da bo'ladi.", V, M, Why::MoreValues),
    ("Use port 5432.", V, M, Why::MoreValues),
    (
        "We need to ship by Friday, January 10.",
        V,
        M,
        Why::MoreValues,
    ),
    (
        "We'll use Stripe; the account email is billing@tezkor.uz.",
        V,
        M,
        Why::MoreValues,
    ),
    ("We're moving the standup to 10am.", V, M, Why::MoreValues),
    (
        "remember this: staging is on port 8443",
        V,
        M,
        Why::MoreValues,
    ),
    ("Bu to'g'ri emasmi?", C, Q, Why::UzbekQuestion),
    ("Qaysi kutubxonani ishlataylik?", D, Q, Why::UzbekQuestion),
    ("Sening isming nima?", N, Q, Why::UzbekQuestion),
    (
        "Call me back when the build finishes.",
        N,
        Q,
        Why::CallMeNotName,
    ),
    ("Call me maybe.", N, Q, Why::CallMeNotName),
    ("Call me when you're ready.", N, Q, Why::CallMeNotName),
    ("Can you call me tomorrow?", N, Q, Why::CallMeNotName),
    (
        "Can you remember that day we met?",
        R,
        Q,
        Why::RememberQuestion,
    ),
    ("Do you remember that song?", R, Q, Why::RememberQuestion),
    (
        "Could you go with a simpler example?",
        D,
        Q,
        Why::GoWithNoChoice,
    ),
    (
        "Should we go with Postgres or MySQL?",
        D,
        Q,
        Why::GoWithNoChoice,
    ),
    (
        "This shirt doesn't go with my shoes.",
        D,
        Q,
        Why::GoWithNoChoice,
    ),
    (
        "Do I like this design? Not sure.",
        P,
        Q,
        Why::PreferenceQuestion,
    ),
    ("Would I like this book?", P, Q, Why::PreferenceQuestion),
    (
        "Don't add comments to the code.",
        P,
        M,
        Why::MorePreferences,
    ),
    ("Don't use jargon.", P, M, Why::MorePreferences),
    (
        "Eslab qol, men ertalab ishlashni yoqtiraman.",
        P,
        M,
        Why::MorePreferences,
    ),
    ("From now on, reply in Russian.", P, M, Why::MorePreferences),
    (
        "Har doim o'zbekcha javob bering.",
        P,
        M,
        Why::MorePreferences,
    ),
    ("Honestly I can't stand tabs.", P, M, Why::MorePreferences),
    ("I actually like this version.", P, M, Why::MorePreferences),
    ("I can't stand Comic Sans.", P, M, Why::MorePreferences),
    ("I dislike passive voice.", P, M, Why::MorePreferences),
    ("I don't really like Java.", P, M, Why::MorePreferences),
    (
        "I don't want any markdown in the answer.",
        P,
        M,
        Why::MorePreferences,
    ),
    ("I enjoy reading sci-fi.", P, M, Why::MorePreferences),
    (
        "I really don't like it when answers start with 'Great question'.",
        P,
        M,
        Why::MorePreferences,
    ),
    (
        "I'd appreciate it if you kept answers short.",
        P,
        M,
        Why::MorePreferences,
    ),
    (
        "I'd love it if you used fewer bullet points.",
        P,
        M,
        Why::MorePreferences,
    ),
    ("I'd prefer morning meetings.", P, M, Why::MorePreferences),
    ("I'd rather use metric units.", P, M, Why::MorePreferences),
    (
        "I'm not a big fan of long emails.",
        P,
        M,
        Why::MorePreferences,
    ),
    (
        "Javoblar har doim o'zbek tilida bo'lsin.",
        P,
        M,
        Why::MorePreferences,
    ),
    (
        "Javoblarni o'zbek tilida xohlayman.",
        P,
        M,
        Why::MorePreferences,
    ),
    ("Keep it short, please.", P, M, Why::MorePreferences),
    ("Men Pythonni yoqtiraman.", P, M, Why::MorePreferences),
    ("Men choy xohlayman.", P, M, Why::MorePreferences),
    (
        "Men choyni kofedan ko'ra afzal ko'raman.",
        P,
        M,
        Why::MorePreferences,
    ),
    (
        "Men qisqa xabarlarni yoqtiraman.",
        P,
        M,
        Why::MorePreferences,
    ),
    (
        "Men qora rejimni afzal ko'raman.",
        P,
        M,
        Why::MorePreferences,
    ),
    (
        "Men uzun xatlarni yomon ko'raman.",
        P,
        M,
        Why::MorePreferences,
    ),
    ("Menga emoji yoqmaydi.", P, M, Why::MorePreferences),
    ("Menga qisqa javoblar yoqadi.", P, M, Why::MorePreferences),
    (
        "Menga rasmiy uslub ko'proq yoqadi.",
        P,
        M,
        Why::MorePreferences,
    ),
    (
        "Mening ismim Kamola. Menga qisqa javoblar yoqadi.",
        P,
        M,
        Why::MorePreferences,
    ),
    ("My favorite editor is Neovim.", P, M, Why::MorePreferences),
    (
        "Never use bullet points when writing to my boss.",
        P,
        M,
        Why::MorePreferences,
    ),
    (
        "Personally, I find tabs easier to read.",
        P,
        M,
        Why::MorePreferences,
    ),
    (
        "Please always answer in English.",
        P,
        M,
        Why::MorePreferences,
    ),
    ("Please keep the tone casual.", P, M, Why::MorePreferences),
    (
        "Short answers are better for me.",
        P,
        M,
        Why::MorePreferences,
    ),
    (
        "Thanks for the help. I really prefer answers with code samples.",
        P,
        M,
        Why::MorePreferences,
    ),
    ("Everyone at work calls me Bek.", N, M, Why::MoreNames),
    ("Everyone calls me Sanya.", N, M, Why::MoreNames),
    ("Familiyam Karimov.", N, M, Why::MoreNames),
    (
        "Hello, I am Jasur Karimov, the new backend developer.",
        N,
        M,
        Why::MoreNames,
    ),
    ("Hey! Name's Bekzod.", N, M, Why::MoreNames),
    ("Hey, it's Kamola again.", N, M, Why::MoreNames),
    ("Hi, I am Olim.", N, M, Why::MoreNames),
    ("I go by Sasha at work.", N, M, Why::MoreNames),
    ("I'll call you Jarvis.", N, M, Why::MoreNames),
    ("Meni Bek deb chaqiring.", N, M, Why::MoreNames),
    ("My brother Sherzod needs a CV too.", N, M, Why::MoreNames),
    ("My business is called Oila Non.", N, M, Why::MoreNames),
    ("My cat's name is Mosh.", N, M, Why::MoreNames),
    ("My cousin Aziz lives in Bukhara.", N, M, Why::MoreNames),
    (
        "My dog is called Rex and he hates the vacuum.",
        N,
        M,
        Why::MoreNames,
    ),
    (
        "My full name is Abdulaziz Yusupov but Aziz is fine.",
        N,
        M,
        Why::MoreNames,
    ),
    (
        "My husband, Botir, will join the call.",
        N,
        M,
        Why::MoreNames,
    ),
    (
        "My manager is Aziz, so address the email to him.",
        N,
        M,
        Why::MoreNames,
    ),
    ("My son's name is Timur and he's 7.", N, M, Why::MoreNames),
    ("My wife's name is Malika.", N, M, Why::MoreNames),
    ("O'g'limning ismi Timur.", N, M, Why::MoreNames),
    ("Our cat is named Pamuk.", N, M, Why::MoreNames),
    ("Our startup is called Tezkor.", N, M, Why::MoreNames),
    ("Remember my wife's name is Malika.", N, M, Why::MoreNames),
    ("Seni Botir deb chaqiraman.", N, M, Why::MoreNames),
    ("Sening noming Qanot bo'lsin.", N, M, Why::MoreNames),
    ("The project is named Falcon.", N, M, Why::MoreNames),
    (
        "You got it wrong, my daughter is Malika, not Madina.",
        N,
        M,
        Why::MoreNames,
    ),
    ("Your name is Jarvis.", N, M, Why::MoreNames),
    (
        "Hech qanday xato yo'q, hammasi ishlayapti.",
        C,
        Q,
        Why::YoqAnywhere,
    ),
    ("Menda vaqt yo'q.", C, Q, Why::YoqAnywhere),
    ("Muammo yo'q.", C, Q, Why::YoqAnywhere),
    ("Yo'q, kerak emas.", C, Q, Why::YoqAnywhere),
    ("Yo'q, rahmat.", C, Q, Why::YoqAnywhere),
    ("I don't forget birthdays.", R, Q, Why::StatementNotRequest),
    (
        "I want to cancel my subscription.",
        P,
        Q,
        Why::WantToIsRequest,
    ),
    ("I want to know how DNS works", P, Q, Why::WantToIsRequest),
    ("I want to know how DNS works.", P, Q, Why::WantToIsRequest),
    (
        "I want you to write a cover letter.",
        P,
        Q,
        Why::WantToIsRequest,
    ),
    ("Keling!", D, Q, Why::KelingQaniAlone),
    ("Keling, bir o'ylab ko'raylik.", D, Q, Why::KelingQaniAlone),
    ("Kitob qani?", D, Q, Why::KelingQaniAlone),
    (
        "Men aytmoqchiman, bu loyiha zo'r.",
        C,
        Q,
        Why::AytmoqchimanNotMeant,
    ),
    (
        "Never forget your roots, my grandma said.",
        R,
        M,
        Why::MemtapeFalsePositive,
    ),
    (
        "Tell me about 1984 by Orwell.",
        V,
        M,
        Why::MemtapeFalsePositive,
    ),
    ("Not bad, but it could be shorter.", C, Q, Why::NotBadBut),
    ("Note to self: this is hard.", N, Q, Why::ThisIsAnyWord),
    ("This is Python code.", N, Q, Why::ThisIsAnyWord),
    ("This is great.", N, Q, Why::ThisIsAnyWord),
    ("Unutmadim, rahmat.", R, Q, Why::UnutmadimNotRequest),
];

#[derive(Deserialize)]
struct Header {
    generator: String,
    qanot: String,
}

#[derive(Deserialize)]
struct Recorded {
    text: String,
    qanot: Vec<Category>,
}

fn recorded() -> Vec<Recorded> {
    let mut lines = include_str!("data/qanot-wal.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty());
    let header: Header = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header.generator, "scripts/refs/qanot_wal.py");
    assert_eq!(header.qanot, "2.0.4");
    lines
        .enumerate()
        .map(|(i, line)| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("qanot-wal.jsonl line {}: {e}", i + 2))
        })
        .collect()
}

fn memtape(text: &str) -> BTreeSet<Category> {
    wal::scan(text).into_iter().map(|m| m.category).collect()
}

fn short(c: Category) -> &'static str {
    match c {
        C => "C",
        N => "N",
        P => "P",
        D => "D",
        V => "V",
        R => "R",
    }
}

#[test]
fn qanot_wal_differences_are_all_listed_with_a_reason() {
    let rows = recorded();
    assert!(rows.len() >= 500, "{} recorded messages", rows.len());

    let mut found: BTreeSet<(String, Category, Side)> = BTreeSet::new();
    // Per category: both, neither, Qanot only, memtape only.
    let mut table: BTreeMap<Category, [usize; 4]> = BTreeMap::new();
    let mut whole = 0;
    for row in &rows {
        let ours = memtape(&row.text);
        let theirs: BTreeSet<Category> = row.qanot.iter().copied().collect();
        whole += usize::from(ours == theirs);
        for c in Category::ALL {
            let cell = match (theirs.contains(&c), ours.contains(&c)) {
                (true, true) => 0,
                (false, false) => 1,
                (true, false) => 2,
                (false, true) => 3,
            };
            table.entry(c).or_default()[cell] += 1;
            match cell {
                2 => found.insert((row.text.clone(), c, Q)),
                3 => found.insert((row.text.clone(), c, M)),
                _ => false,
            };
        }
    }

    println!(
        "{} messages; memtape and Qanot agree on every category for {whole}",
        rows.len()
    );
    println!(
        "{:<16} {:>6} {:>7} {:>10} {:>12} {:>9}",
        "category", "both", "neither", "qanot only", "memtape only", "agreement"
    );
    for (c, [both, neither, q, m]) in &table {
        println!(
            "{:<16} {both:>6} {neither:>7} {q:>10} {m:>12} {:>8.1}%",
            c.as_str(),
            100.0 * (both + neither) as f64 / rows.len() as f64
        );
    }

    let listed: BTreeSet<(String, Category, Side)> = KNOWN
        .iter()
        .map(|(t, c, s, _)| ((*t).to_owned(), *c, *s))
        .collect();
    assert_eq!(listed.len(), KNOWN.len(), "a difference is listed twice");
    let unlisted: Vec<_> = found.difference(&listed).collect();
    for (text, c, side) in &unlisted {
        println!(
            "    ({:?}, {}, {}, Why::TODO),",
            text,
            short(*c),
            if *side == Q { "Q" } else { "M" }
        );
    }
    let stale: Vec<_> = listed.difference(&found).collect();
    for (text, c, side) in &stale {
        println!("STALE {side:?} {c}: {text}");
    }
    assert!(
        unlisted.is_empty(),
        "{} differences from Qanot are not listed",
        unlisted.len()
    );
    assert!(
        stale.is_empty(),
        "{} listed differences no longer occur",
        stale.len()
    );
    // The reasons, with how many differences each explains.
    let mut reasons: Vec<(Why, usize)> = Vec::new();
    for (_, _, _, why) in KNOWN {
        match reasons.iter_mut().find(|(w, _)| w == why) {
            Some((_, n)) => *n += 1,
            None => reasons.push((*why, 1)),
        }
    }
    for (why, n) in reasons {
        println!("{n:>4}  {why:?}: {}", why.explain());
    }
}
