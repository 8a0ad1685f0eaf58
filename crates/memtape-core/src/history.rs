//! History selection: which unconsolidated messages go to the model, following the nanobot
//! seed's get_history rules and Dify's TokenBufferMemory token limit.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::{Message, Role, TokenCounter};

/// Which history a session's model is given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HistoryView {
    /// memtape's: the unconsolidated tail of the current thread, under nanobot's rules
    /// (seed 000) and Dify's token limit ([`select_history`]).
    #[default]
    Thread,
    /// Bub's (seed 001, 2.3): the `message`, `tool_call` and `tool_result` entries after the
    /// session's last anchor, in tape order, as Bub's context selection takes them.
    Bub,
}

impl std::fmt::Display for HistoryView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HistoryView::Thread => "thread",
            HistoryView::Bub => "bub",
        })
    }
}

/// Limits on the history handed to a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryLimits {
    /// At most this many messages, taken from the tail (nanobot's max_messages).
    pub max_messages: usize,
    /// At most this many tokens in all (Dify's max_token_limit); `None` for no limit.
    pub max_tokens: Option<usize>,
}

impl Default for HistoryLimits {
    /// nanobot's default: 500 messages, no token limit.
    fn default() -> Self {
        HistoryLimits {
            max_messages: 500,
            max_tokens: None,
        }
    }
}

/// Selects the history to send from `messages`, the unconsolidated messages of the current
/// thread, oldest first. Returns the indices kept, in order.
///
/// The rules, applied until nothing changes (each only removes, so this ends):
/// 1. keep the last `max_messages` (nanobot: trim from the tail);
/// 2. when the window holds a user message, start at a user message (align to a user turn);
/// 3. drop tool results whose call is not earlier in the kept messages (orphans);
/// 4. drop assistant messages whose tool calls do not all have a later result — which may
///    orphan the results they did have, hence the repetition;
/// 5. with a token limit, drop from the front until the rest fits (Dify's TokenBufferMemory
///    pops the oldest). The limit is strict: if even the last message does not fit, the
///    history is empty.
pub fn select_history(
    messages: &[&Message],
    limits: &HistoryLimits,
    counter: &dyn TokenCounter,
) -> Vec<usize> {
    let start = messages.len().saturating_sub(limits.max_messages);
    let mut keep: Vec<usize> = (start..messages.len()).collect();
    let window_has_user = keep.iter().any(|&i| messages[i].role == Role::User);
    // Token costs are computed lazily, newest first: only the suffix that can fit is ever
    // tokenized.
    let mut costs: HashMap<usize, usize> = HashMap::new();
    loop {
        let before = keep.len();

        if window_has_user {
            let first_user = keep
                .iter()
                .position(|&i| messages[i].role == Role::User)
                .unwrap_or(keep.len());
            keep.drain(..first_user);
        }

        let mut called: HashSet<&str> = HashSet::new();
        keep.retain(|&i| {
            let m = messages[i];
            called.extend(m.tool_calls.iter().map(|c| c.id.as_str()));
            match (m.role, &m.tool_call_id) {
                (Role::Tool, Some(id)) => called.contains(id.as_str()),
                _ => true,
            }
        });

        let mut last_result: HashMap<&str, usize> = HashMap::new();
        for (pos, &i) in keep.iter().enumerate() {
            if let Some(id) = &messages[i].tool_call_id {
                last_result.insert(id.as_str(), pos);
            }
        }
        let mut pos = 0;
        keep.retain(|&i| {
            let complete = messages[i]
                .tool_calls
                .iter()
                .all(|c| last_result.get(c.id.as_str()).is_some_and(|&r| r > pos));
            pos += 1;
            complete
        });

        if let Some(max) = limits.max_tokens {
            // Keep the longest suffix that fits: the same as popping the oldest until it fits.
            let (mut total, mut cut) = (0, keep.len());
            for (pos, &i) in keep.iter().enumerate().rev() {
                let cost = *costs
                    .entry(i)
                    .or_insert_with(|| counter.count_message(messages[i]));
                if total + cost > max {
                    break;
                }
                total += cost;
                cut = pos;
            }
            keep.drain(..cut);
        }

        if keep.len() == before {
            return keep;
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::{Bpe, BpeEncoding, ToolCall};

    /// Counts one token per whitespace-separated word: fast and easy to reason about.
    struct Words;
    impl TokenCounter for Words {
        fn count(&self, text: &str) -> usize {
            text.split_whitespace().count()
        }
    }

    fn run(messages: &[Message], limits: HistoryLimits) -> Vec<usize> {
        let refs: Vec<&Message> = messages.iter().collect();
        select_history(&refs, &limits, &Words)
    }

    fn calls(ids: &[&str]) -> Message {
        Message::assistant_tool_calls(
            ids.iter()
                .map(|id| ToolCall::function(*id, "f", "{}"))
                .collect(),
        )
    }

    #[test]
    fn nanobot_trims_to_max_messages_then_aligns_to_a_user_turn() {
        let msgs = vec![
            Message::user("u0"),
            Message::assistant("a0"),
            Message::user("u1"),
            Message::assistant("a1"),
        ];
        let limits = HistoryLimits {
            max_messages: 3,
            max_tokens: None,
        };
        // The window [a0, u1, a1] starts mid-turn: a0 is dropped.
        assert_eq!(run(&msgs, limits), [2, 3]);
    }

    #[test]
    fn nanobot_drops_orphaned_tool_results_at_the_window_edge() {
        // The consolidation pointer split a call from its result: the result is orphaned.
        let msgs = vec![
            Message::tool_result("c1", "r1"),
            Message::user("u"),
            Message::assistant("a"),
        ];
        assert_eq!(run(&msgs, HistoryLimits::default()), [1, 2]);
    }

    #[test]
    fn nanobot_iteratively_drops_incomplete_tool_call_groups() {
        let msgs = vec![
            Message::user("u"),
            calls(&["c1", "c2"]), // c2 never answered: the whole group goes
            Message::tool_result("c1", "r1"),
            Message::assistant("a"),
            Message::user("u2"),
            calls(&["c3"]),
            Message::tool_result("c3", "r3"),
        ];
        assert_eq!(run(&msgs, HistoryLimits::default()), [0, 3, 4, 5, 6]);
    }

    #[test]
    fn dify_token_limit_pops_the_oldest() {
        let msgs = vec![
            Message::user("one two three"),
            Message::assistant("four five"),
            Message::user("six"),
            Message::assistant("seven"),
        ];
        // Costs with Words: 3 overhead + 1 role + words → 7, 6, 5, 5.
        let limits = |t| HistoryLimits {
            max_messages: 500,
            max_tokens: Some(t),
        };
        assert_eq!(run(&msgs, limits(23)), [0, 1, 2, 3]);
        assert_eq!(run(&msgs, limits(22)), [2, 3]); // a0 would lead: re-aligned to u1
        assert_eq!(run(&msgs, limits(5)), Vec::<usize>::new()); // strict: only a1 fits, but the window had users
        assert_eq!(run(&msgs, limits(4)), Vec::<usize>::new());
    }

    #[test]
    fn real_bpe_token_limit() {
        let bpe = Bpe::new(BpeEncoding::Cl100k);
        let msgs = [
            Message::user("hello world"),
            Message::assistant("hello world"),
        ];
        let refs: Vec<&Message> = msgs.iter().collect();
        let limits = HistoryLimits {
            max_messages: 500,
            max_tokens: Some(12),
        };
        // Each message costs 3 + role (1) + 2 = 6 tokens with cl100k.
        assert_eq!(select_history(&refs, &limits, &bpe), [0, 1]);
        let limits = HistoryLimits {
            max_tokens: Some(11),
            ..limits
        };
        assert_eq!(select_history(&refs, &limits, &bpe), Vec::<usize>::new());
    }

    /// One generated message: user, plain assistant, system, assistant calling tools with
    /// fresh ids, or a tool result for one of the ids called so far or a stray one.
    #[derive(Clone, Debug)]
    enum Step {
        User(u8),
        Assistant(u8),
        System,
        Calls(u8),
        Result(u8),
        Stray,
    }

    fn build(steps: &[Step]) -> Vec<Message> {
        let mut out = Vec::new();
        let mut issued: Vec<String> = Vec::new();
        for (n, step) in steps.iter().enumerate() {
            let words = |k: u8| vec!["w"; usize::from(k % 7) + 1].join(" ");
            out.push(match step {
                Step::User(k) => Message::user(words(*k)),
                Step::Assistant(k) => Message::assistant(words(*k)),
                Step::System => Message::text(Role::System, "sys"),
                Step::Calls(k) => {
                    let ids: Vec<String> = (0..=k % 3).map(|j| format!("c{n}_{j}")).collect();
                    issued.extend(ids.iter().cloned());
                    Message::assistant_tool_calls(
                        ids.iter()
                            .map(|id| ToolCall::function(id, "f", "{}"))
                            .collect(),
                    )
                }
                Step::Result(k) if !issued.is_empty() => {
                    let id = issued[usize::from(*k) % issued.len()].clone();
                    Message::tool_result(id, words(*k))
                }
                Step::Result(_) | Step::Stray => Message::tool_result(format!("stray{n}"), "x"),
            });
        }
        out
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => any::<u8>().prop_map(Step::User),
            3 => any::<u8>().prop_map(Step::Assistant),
            1 => Just(Step::System),
            2 => any::<u8>().prop_map(Step::Calls),
            4 => any::<u8>().prop_map(Step::Result),
            1 => Just(Step::Stray),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The properties the foundation issue asks of get_history, for any message list.
        #[test]
        fn history_properties(
            steps in proptest::collection::vec(step(), 0..60),
            max_messages in 1usize..70,
            max_tokens in proptest::option::of(0usize..200),
        ) {
            let msgs = build(&steps);
            let limits = HistoryLimits { max_messages, max_tokens };
            let out = run(&msgs, limits);

            // A subsequence of the input, within the message limit.
            prop_assert!(out.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(out.len() <= max_messages);
            let window_start = msgs.len().saturating_sub(max_messages);
            prop_assert!(out.iter().all(|&i| i >= window_start && i < msgs.len()));

            // Within the token limit.
            if let Some(max) = max_tokens {
                let total: usize = out.iter().map(|&i| Words.count_message(&msgs[i])).sum();
                prop_assert!(total <= max, "{total} > {max}");
            }

            // Starts with a user message whenever the window holds one.
            let window_has_user = msgs[window_start..].iter().any(|m| m.role == Role::User);
            if window_has_user && let Some(&first) = out.first() {
                prop_assert_eq!(msgs[first].role, Role::User);
            }

            // Every tool result has its call earlier; every call has all its results later.
            for (pos, &i) in out.iter().enumerate() {
                let m = &msgs[i];
                if let Some(id) = &m.tool_call_id {
                    prop_assert!(out[..pos].iter().any(|&j| msgs[j].tool_calls.iter().any(|c| &c.id == id)));
                }
                for call in &m.tool_calls {
                    prop_assert!(out[pos + 1..].iter().any(|&j| msgs[j].tool_call_id.as_deref() == Some(call.id.as_str())));
                }
            }

            // Ends at the last message when that is a plain user or assistant turn that fits
            // alone (an assistant turn may lose its user turn to the token limit, and then
            // alignment empties the history rather than start mid-turn).
            if let Some(last) = msgs.last() {
                let plain = last.tool_calls.is_empty() && matches!(last.role, Role::User | Role::Assistant);
                let fits = max_tokens.is_none_or(|t| Words.count_message(last) <= t);
                if plain && fits {
                    let ends_at_last = out.last().copied() == Some(msgs.len() - 1);
                    if last.role == Role::User {
                        prop_assert!(ends_at_last);
                    } else {
                        prop_assert!(ends_at_last || out.is_empty());
                    }
                }
            }

            // Without tools or limits beyond the count, nothing but the alignment is dropped.
            let toolless = msgs.iter().all(|m| m.tool_calls.is_empty() && m.tool_call_id.is_none());
            if toolless && max_tokens.is_none() {
                let first_user = (window_start..msgs.len()).find(|&i| msgs[i].role == Role::User).unwrap_or(window_start);
                prop_assert_eq!(out, (first_user..msgs.len()).collect::<Vec<_>>());
            }
        }
    }
}
