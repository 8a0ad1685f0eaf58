//! Thread extraction (Dify's extract_thread_messages): from a leaf, follow parent links
//! back, so a regenerated answer replaces its siblings in the thread that goes through it.

use crate::{Entry, EntryId};

/// Walks the thread that ends at `leaf` back through parent links and returns it oldest
/// first. The walk stops at a root, at the first entry `stop` rejects (it is not included),
/// or after `max` entries. `lookup` fetches an entry by id; a parent it cannot find ends the
/// walk. Parent ids are always smaller than their children's, so the walk cannot loop; a
/// parent that breaks that rule also ends it.
pub fn walk_thread<E>(
    leaf: Entry,
    mut lookup: impl FnMut(EntryId) -> Result<Option<Entry>, E>,
    stop: impl Fn(&Entry) -> bool,
    max: usize,
) -> Result<Vec<Entry>, E> {
    let mut out = Vec::new();
    let mut next = Some(leaf);
    while let Some(entry) = next.take() {
        if out.len() >= max || stop(&entry) {
            break;
        }
        let parent = entry.parent.filter(|p| *p < entry.id);
        out.push(entry);
        if let Some(p) = parent {
            next = lookup(p)?;
        }
    }
    out.reverse();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{Message, Meta, Payload, Scope};

    fn entry(id: u64, parent: Option<u64>, text: &str) -> Entry {
        let role_msg = if text.ends_with('\'') {
            Message::assistant(text)
        } else {
            Message::user(text)
        };
        Entry {
            id: EntryId(id),
            scope: Scope::agent("t", "a").unwrap().with_session("s").unwrap(),
            payload: Payload::Message(role_msg),
            meta: Meta::new(),
            created_at: chrono::DateTime::UNIX_EPOCH,
            parent: parent.map(EntryId),
            erased: None,
        }
    }

    /// The Dify seed's example: A → A' → B → B', then A'' regenerated under A, then C → C'.
    /// The thread from C' is [A, A'', C, C'].
    #[test]
    fn dify_regenerated_answer_replaces_its_siblings() {
        let tape: BTreeMap<u64, Entry> = [
            entry(1, None, "A"),
            entry(2, Some(1), "A'"),
            entry(3, Some(2), "B"),
            entry(4, Some(3), "B'"),
            entry(5, Some(1), "A''"),
            entry(6, Some(5), "C"),
            entry(7, Some(6), "C'"),
        ]
        .into_iter()
        .map(|e| (e.id.0, e))
        .collect();
        let leaf = tape[&7].clone();
        let thread = walk_thread(
            leaf,
            |id| Ok::<_, ()>(tape.get(&id.0).cloned()),
            |_| false,
            100,
        )
        .unwrap();
        let texts: Vec<_> = thread
            .iter()
            .map(|e| e.message().unwrap().content_text().into_owned())
            .collect();
        assert_eq!(texts, ["A", "A''", "C", "C'"]);

        let stopped = walk_thread(
            tape[&7].clone(),
            |id| Ok::<_, ()>(tape.get(&id.0).cloned()),
            |e| e.id.0 <= 5,
            100,
        )
        .unwrap();
        assert_eq!(stopped.len(), 2);
        let capped = walk_thread(
            tape[&7].clone(),
            |id| Ok::<_, ()>(tape.get(&id.0).cloned()),
            |_| false,
            3,
        )
        .unwrap();
        assert_eq!(capped.iter().map(|e| e.id.0).collect::<Vec<_>>(), [5, 6, 7]);
    }
}
