//! BM25F over a document's two fields, its own text and its context (the message before
//! it): term postings read from FTS5's full-text index, field lengths from the mirror,
//! the score computed here.
//!
//! FTS5's own `bm25()` normalises a match by the length of its whole row, context
//! included, and fixes k1 and b. A short message after a 700-token answer was scored as a
//! 700-token document, whatever the context's weight (docs/benchmarks.md, "Third study").
//! BM25F (Robertson, Zaragoza and Taylor, 2004) normalises each field by its own length,
//! weighs the fields' frequencies and saturates their sum once:
//!
//! ```text
//! x(t, d)  = tf_text / (1 - b + b * len_text / avg_text)
//!          + w * tf_context / (1 - b + b * len_context / avg_context)
//! score(d) = sum over query terms t of idf(t) * x * (k1 + 1) / (x + k1)
//! idf(t)   = ln(1 + (N - df + 0.5) / (df + 0.5))
//! ```
//!
//! where `df` counts the documents holding `t` in a field of positive weight. Query terms
//! go through FTS5's own tokenizer (a temporary FTS5 table on the reading connection), so
//! they are stemmed exactly as the documents were. Runs of CJK text are still matched as
//! phrases of character pairs by FTS5 ([`crate::text::cjk_query`]) and their `bm25()` is
//! added.

use rusqlite::Connection;

use super::Docs;
use crate::Result;
use crate::text::{cjk_query, query_words};

/// The tokenizer of the index's FTS5 table, which query terms go through too.
pub(super) const TOKENIZER: &str = "porter unicode61 remove_diacritics 2";

/// The temporary tables a reading connection needs: an FTS5 table that tokenizes a query
/// (`query_text`), its terms (`query_terms`), and the index's postings (`postings`).
pub(super) fn prepare_reader(conn: &Connection) -> Result<()> {
    conn.execute_batch(&format!(
        "CREATE VIRTUAL TABLE temp.query_text USING fts5 (text, tokenize = '{TOKENIZER}');
         CREATE VIRTUAL TABLE temp.query_terms USING fts5vocab (temp, query_text, instance);
         CREATE VIRTUAL TABLE temp.postings USING fts5vocab (main, fts, instance);"
    ))?;
    Ok(())
}

/// The BM25F parameters.
#[derive(Clone, Copy, Debug)]
pub(super) struct Params {
    /// Term frequency saturation.
    pub k1: f32,
    /// Length normalisation (0 = none, 1 = full).
    pub b: f32,
    /// The context field's weight relative to the text's (0 = own text only).
    pub context: f32,
}

/// One query term's postings: each document holding it, with the term's frequency in its
/// text and in its context, in document order.
pub(super) type TermPostings = Vec<(u64, [u32; 2])>;

/// What a query matches in the full-text index, read before the mirror is locked.
#[derive(Debug, Default)]
pub(super) struct Postings {
    terms: Vec<TermPostings>,
    /// FTS5's BM25 of the query's CJK phrases (higher is better), by entry id.
    cjk: Vec<(u64, f64)>,
    /// Each term's document frequency, when `terms` holds only some of the documents that
    /// match (the inverted index's candidates); `None` when it holds all of them.
    df: Option<Vec<f64>>,
}

impl Postings {
    /// Reads the postings of `text`'s query words (and its CJK phrases) on `conn`, a reader
    /// set up by [`prepare_reader`]. `None` when the text has nothing to search for.
    pub(super) fn read(conn: &Connection, text: &str) -> Result<Option<Postings>> {
        let words = query_words(text);
        let cjk = cjk_query(text);
        if words.is_empty() && cjk.is_none() {
            return Ok(None);
        }
        let mut out = Postings::default();
        if !words.is_empty() {
            for term in stems(conn, &words.join(" "))? {
                let mut stmt =
                    conn.prepare_cached("SELECT doc, col FROM temp.postings WHERE term = ?1")?;
                let mut rows = stmt.query([&term])?;
                let mut postings: TermPostings = Vec::new();
                while let Some(r) = rows.next()? {
                    let doc: i64 = r.get(0)?;
                    let field = match r.get_ref(1)?.as_bytes().ok() {
                        Some(b"text") => 0,
                        Some(b"context") => 1,
                        _ => continue,
                    };
                    let doc = doc as u64;
                    match postings.last_mut() {
                        Some((last, tf)) if *last == doc => tf[field] += 1,
                        _ => {
                            let mut tf = [0, 0];
                            tf[field] = 1;
                            postings.push((doc, tf));
                        }
                    }
                }
                out.terms.push(postings);
            }
        }
        out.cjk = read_cjk(conn, text)?;
        Ok(Some(out))
    }

    /// The postings of candidates only ([`super::inverted::Inverted::candidates`]): for
    /// each query term, the candidates holding it with their frequencies, and the term's
    /// document frequency over the whole shard; `cjk` as [`read_cjk`] reads it.
    pub(super) fn of_candidates(
        terms: Vec<TermPostings>,
        df: Vec<f64>,
        cjk: Vec<(u64, f64)>,
    ) -> Postings {
        Postings {
            terms,
            cjk,
            df: Some(df),
        }
    }

    /// The BM25F score of every matching document the mirror holds, as `(row, score)`,
    /// best first. Documents committed after the mirror was last updated are left out.
    pub(super) fn scores(&self, docs: &Docs, params: Params) -> Vec<(usize, f32)> {
        let n = docs.ids.len() as f64;
        if n == 0.0 {
            return Vec::new();
        }
        let avg = docs.field_tokens.map(|total| (total as f64 / n).max(1.0));
        let (k1, b, w) = (
            f64::from(params.k1),
            f64::from(params.b),
            f64::from(params.context),
        );
        let norm =
            |tf: u32, len: u32, avg: f64| f64::from(tf) / (1.0 - b + b * f64::from(len) / avg);
        // Each document the postings name is looked up in the mirror once, in id order
        // (a lookup is a few cache misses in a large shard); the sums are kept by its
        // place among them, each term's part added in term order as before.
        let mut ids: Vec<u64> = self
            .terms
            .iter()
            .flatten()
            .map(|(id, _)| *id)
            .chain(self.cjk.iter().map(|(id, _)| *id))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let rows = docs.rows_of(&ids);
        let mut sums: Vec<Option<f64>> = vec![None; ids.len()];
        for (i, postings) in self.terms.iter().enumerate() {
            let counts = |tf: &[u32; 2]| tf[0] > 0 || (w > 0.0 && tf[1] > 0);
            let df = match &self.df {
                Some(df) => df.get(i).copied().unwrap_or(0.0),
                None => postings.iter().filter(|(_, tf)| counts(tf)).count() as f64,
            };
            if df == 0.0 {
                continue;
            }
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for (id, tf) in postings.iter().filter(|(_, tf)| counts(tf)) {
                let Ok(i) = ids.binary_search(id) else {
                    continue;
                };
                let Some(row) = rows[i] else {
                    continue;
                };
                let len = docs.meta[row].tokens;
                let x = norm(tf[0], len[0], avg[0]) + w * norm(tf[1], len[1], avg[1]);
                *sums[i].get_or_insert(0.0) += idf * x * (k1 + 1.0) / (x + k1);
            }
        }
        for (id, score) in &self.cjk {
            if let Ok(i) = ids.binary_search(id)
                && rows[i].is_some()
            {
                *sums[i].get_or_insert(0.0) += score;
            }
        }
        let mut out: Vec<(usize, f32)> = sums
            .iter()
            .zip(&rows)
            .filter_map(|(sum, row)| Some(((*row)?, (*sum)? as f32)))
            .collect();
        // Best first; equal scores in tape order, so rankings are deterministic.
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }
}

/// FTS5's BM25 of the CJK phrases of `text` (higher is better), by entry id: none when it
/// has no CJK text.
pub(super) fn read_cjk(conn: &Connection, text: &str) -> Result<Vec<(u64, f64)>> {
    let mut out = Vec::new();
    if let Some(phrases) = cjk_query(text) {
        let mut stmt = conn
            .prepare_cached("SELECT rowid, bm25(fts, 0.0, 0.0, 1.0) FROM fts WHERE fts MATCH ?1")?;
        let mut rows = stmt.query([format!("cjk : ({phrases})")])?;
        while let Some(r) = rows.next()? {
            out.push((r.get::<_, i64>(0)? as u64, -r.get::<_, f64>(1)?));
        }
    }
    Ok(out)
}

/// The distinct terms FTS5's tokenizer makes of `text`, in order. The temporary table is
/// emptied first too, so a query that failed halfway never breaks the next.
fn stems(conn: &Connection, text: &str) -> Result<Vec<String>> {
    conn.prepare_cached("DELETE FROM temp.query_text")?
        .execute([])?;
    conn.prepare_cached("INSERT INTO temp.query_text (rowid, text) VALUES (1, ?1)")?
        .execute([text])?;
    let terms = conn
        .prepare_cached("SELECT term FROM temp.query_terms ORDER BY offset")?
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<String>, _>>();
    conn.prepare_cached("DELETE FROM temp.query_text")?
        .execute([])?;
    let mut out: Vec<String> = Vec::new();
    for term in terms? {
        if !out.contains(&term) {
            out.push(term);
        }
    }
    Ok(out)
}

/// The token counts of a document's text and context, from FTS5's `docsize` record (one
/// SQLite varint per column: text, context, cjk). A record that cannot be read counts 0.
pub(super) fn field_tokens(record: &[u8]) -> [u32; 2] {
    let mut out = [0u32; 2];
    let mut bytes = record.iter();
    for slot in &mut out {
        let mut value: u64 = 0;
        for i in 0..9 {
            let Some(&byte) = bytes.next() else {
                return out;
            };
            if i == 8 {
                value = (value << 8) | u64::from(byte);
                break;
            }
            value = (value << 7) | u64::from(byte & 0x7f);
            if byte & 0x80 == 0 {
                break;
            }
        }
        *slot = u32::try_from(value).unwrap_or(u32::MAX);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docsize_records_are_read_as_fts5_writes_them() {
        // 9 tokens, then 300 (0x82 0x2c), then 3.
        assert_eq!(field_tokens(&[0x09, 0x00, 0x00]), [9, 0]);
        assert_eq!(field_tokens(&[0x82, 0x2c, 0x03, 0x00]), [300, 3]);
        assert_eq!(field_tokens(&[]), [0, 0]);
        assert_eq!(field_tokens(&[0x81]), [0, 0]);
        // Nine bytes make a full 64-bit value: counted as u32::MAX.
        assert_eq!(field_tokens(&[0xff; 9]), [u32::MAX, 0]);
    }

    #[test]
    fn the_index_and_its_queries_share_a_tokenizer() {
        assert!(super::super::file::SCHEMA.contains(&format!("tokenize = '{TOKENIZER}'")));
    }

    #[test]
    fn query_terms_are_stemmed_as_documents_are() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE fts USING fts5 (text, context, cjk, content = '', tokenize = '{TOKENIZER}');"
        ))
        .unwrap();
        prepare_reader(&conn).unwrap();
        assert_eq!(
            stems(&conn, "Running runs São Paulo running").unwrap(),
            ["run", "sao", "paulo"]
        );
        // The temporary table is left empty for the next query, and a leftover row (a
        // query that failed halfway) does not stop it.
        assert_eq!(stems(&conn, "dogs").unwrap(), ["dog"]);
        conn.execute(
            "INSERT INTO temp.query_text (rowid, text) VALUES (1, 'cats')",
            [],
        )
        .unwrap();
        assert_eq!(stems(&conn, "birds").unwrap(), ["bird"]);
    }
}
