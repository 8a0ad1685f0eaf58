//! Vectors kept beside the tape: what [`crate::Store::put_vectors`] takes and the limits
//! every store checks it against.
//!
//! An index embeds an entry once, keeps the vector in its own file and also hands it to
//! the store, keyed by entry id and embedder id. Another index of the same tape (a server
//! joining a PostgreSQL database, an index rebuilt with `memtape reindex`, a tenant's index
//! loaded again) reads it there instead of running the model. Vectors are a cache of what
//! the tape says: they can be made again from it, are never exported, and go with the text
//! they were made of when an erasure rewrites an entry.

use memtape_core::EntryId;

use crate::{Error, Result};

/// The longest embedder id a store keeps vectors under, in bytes.
pub const MAX_EMBEDDER_BYTES: usize = 200;

/// The largest vector a store keeps, in bytes (a 4,096-dimension vector of f32 is 16 KiB;
/// memtape's own are 388 bytes).
pub const MAX_VECTOR_BYTES: usize = 64 * 1024;

/// One vector to keep ([`crate::Store::put_vectors`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewVector {
    /// The entry it was made of.
    pub id: EntryId,
    /// The entry's erasure mark when the embedder read it (`None`: never erased): the
    /// vector is kept only if the entry still has this mark, so a vector of text that an
    /// erasure took meanwhile is dropped, not kept.
    pub erased_by: Option<EntryId>,
    /// The vector, in the embedder's own form (opaque to the store).
    pub bytes: Vec<u8>,
}

/// Checks an embedder id and the vectors to keep under it, naming what is wrong.
pub fn check(embedder: &str, vectors: &[NewVector]) -> Result<()> {
    if embedder.is_empty() || embedder.len() > MAX_EMBEDDER_BYTES {
        return Err(Error::BadVector(format!(
            "the embedder id must be 1 to {MAX_EMBEDDER_BYTES} bytes long (got {})",
            embedder.len()
        )));
    }
    if embedder.chars().any(char::is_control) {
        return Err(Error::BadVector(
            "the embedder id holds a control character".into(),
        ));
    }
    for v in vectors {
        if v.id.0 == 0 || v.id > EntryId::MAX {
            return Err(Error::BadVector(format!(
                "entry id {} is not a tape id",
                v.id
            )));
        }
        if v.bytes.is_empty() || v.bytes.len() > MAX_VECTOR_BYTES {
            return Err(Error::BadVector(format!(
                "the vector of entry {} is {} bytes (1 to {MAX_VECTOR_BYTES})",
                v.id,
                v.bytes.len()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(id: u64, len: usize) -> NewVector {
        NewVector {
            id: EntryId(id),
            erased_by: None,
            bytes: vec![1; len],
        }
    }

    #[test]
    fn limits_are_named() {
        assert!(check("m", &[v(1, 388)]).is_ok());
        for (embedder, vectors, says) in [
            ("", vec![v(1, 4)], "1 to 200 bytes"),
            (&*"x".repeat(201), vec![v(1, 4)], "got 201"),
            ("a\0b", vec![v(1, 4)], "control character"),
            ("m", vec![v(0, 4)], "entry id 0"),
            ("m", vec![v(EntryId::MAX.0 + 1, 4)], "not a tape id"),
            ("m", vec![v(1, 0)], "is 0 bytes"),
            ("m", vec![v(1, MAX_VECTOR_BYTES + 1)], "65537 bytes"),
        ] {
            let err = check(embedder, &vectors).unwrap_err().to_string();
            assert!(err.contains(says), "{err} should say {says}");
        }
    }
}
