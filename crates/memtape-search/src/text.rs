//! Query analysis for BM25: terms are lowercased words and numbers; English stop words are
//! dropped unless nothing else is left ([`query_words`]); the index stems them with FTS5's
//! tokenizer and scores them with BM25F.
//!
//! Documents are analysed by FTS5 itself (`porter unicode61`): lowercasing, diacritics
//! removed, split on anything that is not a letter or digit, Porter-stemmed. Query terms go
//! through the same tokenizer, so only stop-word removal happens here.
//!
//! Chinese, Japanese and Korean runs have no spaces between words, so unicode61 would
//! make a whole run one token and "我喜欢" would not find "我喜欢喝茶". Their overlapping
//! character pairs ([`cjk_bigrams`]) go in a column of their own, and a query's runs are
//! searched there as phrases of pairs ([`cjk_query`]): a substring match.

/// English function words that carry no topic (NLTK's list, without the contractions).
const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "s",
    "t",
    "d",
    "ll",
    "m",
    "re",
    "ve",
    "y",
    "don",
    "didn",
    "doesn",
    "isn",
    "wasn",
    "weren",
    "won",
    "wouldn",
    "shouldn",
    "couldn",
    "hasn",
    "haven",
    "hadn",
    "aren",
];

/// Whether `word` (lowercase) is an English stop word.
pub fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.contains(&word)
}

/// The distinct lowercase terms of `text`, split on anything that is not a letter or digit.
pub fn terms(text: &str) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .filter(|word| seen.insert(word.clone()))
        .collect()
}

/// The words of `text` a BM25 search looks for: its distinct terms without stop words, or
/// with them when the text has nothing else.
pub fn query_words(text: &str) -> Vec<String> {
    let all = terms(text);
    let content: Vec<String> = all.iter().filter(|t| !is_stop_word(t)).cloned().collect();
    if content.is_empty() { all } else { content }
}

/// Whether `c` is written without spaces between words: Han, Hiragana, Katakana, Hangul.
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF // Hiragana, Katakana
        | 0x31F0..=0x31FF // Katakana phonetic extensions
        | 0x3400..=0x4DBF // Han extension A
        | 0x4E00..=0x9FFF // Han
        | 0xF900..=0xFAFF // Han compatibility
        | 0x1100..=0x11FF // Hangul Jamo
        | 0x3130..=0x318F // Hangul compatibility Jamo
        | 0xAC00..=0xD7AF // Hangul syllables
        | 0x20000..=0x2FA1F // Han extensions B–F, compatibility supplement
    )
}

/// The maximal runs of CJK characters in `text`.
fn cjk_runs(text: &str) -> impl Iterator<Item = Vec<char>> + '_ {
    text.split(|c: char| !is_cjk(c))
        .filter(|run| !run.is_empty())
        .map(|run| run.chars().collect())
}

/// The pairs of a run: "我喜欢" → "我喜 喜欢"; a lone character stands for itself.
fn pairs(run: &[char]) -> Vec<String> {
    if run.len() == 1 {
        return vec![run[0].to_string()];
    }
    run.windows(2).map(|w| w.iter().collect()).collect()
}

/// The text indexed in the CJK column: every run's overlapping character pairs,
/// space-separated ("" for text without CJK).
pub fn cjk_bigrams(text: &str) -> String {
    cjk_runs(text)
        .flat_map(|run| pairs(&run))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The FTS5 query for the CJK column: each CJK run of `text` as a phrase of its pairs
/// (so it matches where the run occurs inside a longer one), OR-ed; a lone character
/// matches the pairs it starts. `None` when the text has no CJK.
pub fn cjk_query(text: &str) -> Option<String> {
    let phrases: Vec<String> = cjk_runs(text)
        .map(|run| {
            if run.len() == 1 {
                format!("\"{}\"*", run[0])
            } else {
                format!("\"{}\"", pairs(&run).join(" "))
            }
        })
        .collect();
    (!phrases.is_empty()).then(|| phrases.join(" OR "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_keep_names_numbers_and_content_words() {
        assert_eq!(
            query_words("When did Caroline go to the LGBTQ support group in 2023?"),
            ["caroline", "go", "lgbtq", "support", "group", "2023"]
        );
    }

    #[test]
    fn operators_and_punctuation_are_plain_words() {
        assert_eq!(
            query_words(r#"NEAR("x" AND w*) OR -z"#),
            ["near", "x", "w", "z"]
        );
    }

    #[test]
    fn a_query_of_only_stop_words_still_searches() {
        assert_eq!(query_words("Who was it?"), ["who", "was", "it"]);
        assert!(query_words(" ?! ").is_empty());
    }

    #[test]
    fn cjk_runs_become_pairs_and_phrases() {
        assert_eq!(cjk_bigrams("我喜欢喝茶 and tea"), "我喜 喜欢 欢喝 喝茶");
        assert_eq!(cjk_bigrams("plain English"), "");
        assert_eq!(
            cjk_query("我喜欢? 茶").as_deref(),
            Some(r#""我喜 喜欢" OR "茶"*"#)
        );
        assert_eq!(cjk_query("no cjk here"), None);
    }
}
