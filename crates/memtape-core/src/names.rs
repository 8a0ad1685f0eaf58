//! One rule for names that look alike, on every way in (scope names: tenant, agent, user,
//! session, node; memory file and folder names): a name is kept in Unicode's composed form
//! (NFC), so `é` typed as one character or as `e` and a combining accent is one name; and
//! a name may not hold what makes two names look the same while they differ (bidi controls
//! such as U+202E, zero-width characters such as U+200B and U+FEFF) or begin or end with a
//! space. Names already stored keep working: stores read them as written, and only new
//! names are held to the rule.

use std::borrow::Cow;

use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};

/// `name` in Unicode's composed form (NFC); borrowed when it already is.
pub fn nfc(name: &str) -> Cow<'_, str> {
    match is_nfc_quick(name.chars()) {
        IsNormalized::Yes => Cow::Borrowed(name),
        _ => {
            let composed: String = name.nfc().collect();
            if composed == name {
                Cow::Borrowed(name)
            } else {
                Cow::Owned(composed)
            }
        }
    }
}

/// Whether `c` changes how text around it is laid out or shown without being seen itself:
/// bidi embeddings, overrides, isolates and marks, zero-width spaces and joiners, the word
/// joiner, the byte order mark.
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{061C}'
            | '\u{FEFF}'
            | '\u{180E}'
    )
}

/// Why `name` breaks the look-alike rule, if it does: an invisible character (named by its
/// code point), or a space at either end.
pub fn look_alike(name: &str) -> Option<String> {
    if let Some(c) = name.chars().find(|c| is_invisible(*c)) {
        return Some(format!(
            "contains U+{:04X}, an invisible character that makes names look alike",
            u32::from(c)
        ));
    }
    if name.starts_with(char::is_whitespace) || name.ends_with(char::is_whitespace) {
        return Some("begins or ends with a space".to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composed_and_decomposed_are_one_name() {
        let decomposed = "e\u{301}.md";
        assert_eq!(nfc(decomposed), "\u{e9}.md");
        assert!(matches!(nfc("\u{e9}.md"), Cow::Borrowed(_)));
        assert!(matches!(nfc("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn invisible_characters_and_outer_spaces_are_named() {
        for bad in [
            "evil\u{202E}dm.txt",
            "a\u{200B}b",
            "\u{FEFF}MEMORY.md",
            " bob",
            "bob ",
            "tab\t",
        ] {
            assert!(look_alike(bad).is_some(), "{bad:?}");
        }
        for good in ["bob", "Ada Lovelace", "日本語", "café", "a-b_c.d"] {
            assert_eq!(look_alike(good), None, "{good:?}");
        }
        assert!(look_alike("x\u{202E}").unwrap().contains("U+202E"));
    }
}
