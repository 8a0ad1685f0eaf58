//! Prompt-prefix stability: how much of one prompt an LLM's prompt cache could reuse from
//! the previous one.

use crate::{Message, TokenCounter};

/// Tokens of the longest common prefix of two prompts: every leading message the two
/// share, plus — when the first differing messages have the same role, name and call id —
/// the tokens of the text their contents start with in common (one token fewer, for the
/// token that spans the point where they differ). Counted with `counter`, as
/// [`TokenCounter::count_message`] counts a message.
pub fn common_prefix_tokens(
    previous: &[Message],
    next: &[Message],
    counter: &dyn TokenCounter,
) -> usize {
    let mut tokens = 0;
    for (a, b) in previous.iter().zip(next) {
        if a == b {
            tokens += counter.count_message(b);
            continue;
        }
        if a.role == b.role && a.name == b.name && a.tool_call_id == b.tool_call_id {
            let (ta, tb) = (a.content_text(), b.content_text());
            let common: usize = ta
                .char_indices()
                .zip(tb.chars())
                .take_while(|((_, x), y)| x == y)
                .last()
                .map_or(0, |((i, c), _)| i + c.len_utf8());
            tokens += 3 + counter.count(b.role.as_str());
            tokens += counter.count(&tb[..common]).saturating_sub(1);
        }
        break;
    }
    tokens
}

/// Whether `next` starts with every message of `previous` except its last one: the
/// previous prompt minus its last turn is an exact prefix of the next prompt.
pub fn extends(previous: &[Message], next: &[Message]) -> bool {
    let keep = previous.len().saturating_sub(1);
    next.starts_with(&previous[..keep])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;

    struct Chars;
    impl TokenCounter for Chars {
        fn count(&self, text: &str) -> usize {
            text.chars().count()
        }
    }

    #[test]
    fn common_prefix_counts_shared_messages_and_the_shared_start_of_the_first_difference() {
        let sys = Message::text(Role::System, "rules");
        let a = [
            sys.clone(),
            Message::user("hello"),
            Message::assistant("abcdef"),
        ];
        let b = [
            sys.clone(),
            Message::user("hello"),
            Message::assistant("abcxyz"),
        ];
        let sys_cost = Chars.count_message(&sys);
        let user_cost = Chars.count_message(&Message::user("hello"));
        assert_eq!(
            common_prefix_tokens(&a, &b, &Chars),
            sys_cost + user_cost + 3 + "assistant".len() + 2
        );
        assert_eq!(
            common_prefix_tokens(&a, &a, &Chars),
            a.iter().map(|m| Chars.count_message(m)).sum::<usize>()
        );
        let other_role = [sys, Message::assistant("hello")];
        assert_eq!(common_prefix_tokens(&a, &other_role, &Chars), sys_cost);
    }

    #[test]
    fn extends_ignores_the_previous_last_message() {
        let p = [Message::user("a"), Message::user("b?")];
        let n = [
            Message::user("a"),
            Message::user("b"),
            Message::assistant("c"),
        ];
        assert!(extends(&p, &n));
        assert!(!extends(&n, &p));
        assert!(extends(&[], &p));
    }
}
