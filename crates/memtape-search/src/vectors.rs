//! Nearest-neighbour search over unit vectors held in memory.
//!
//! Vectors are kept as 8 bits per dimension with one scale per vector (384 bytes for a
//! MiniLM vector instead of 1536; cosines change by about 0.001), plus a one-bit code per
//! dimension. Collections up to a limit are scanned in full. Larger ones are first scanned
//! with the one-bit codes (compared by Hamming distance: 48 bytes per MiniLM vector, so a
//! million scan in milliseconds), and the best candidates are rescored with the 8-bit
//! vectors. Neither scan needs training or a graph; both take filters for free and never go
//! stale, which suits an index that grows by appends.
//!
//! A large shard's 8-bit values can be kept on disk instead ([`Spill`]): searches read
//! back only the rows they rescore, while the one-bit codes and scales stay in memory.
//! A shard whose inverted lists cover its first rows drops those rows' one-bit codes
//! ([`Vectors::drop_codes_below`]): its searches find their candidates in the lists.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// Vectors stored row by row, 8-bit quantized, with their one-bit codes.
#[derive(Debug, Default)]
pub struct Vectors {
    dim: usize,
    words: usize,
    /// The 8-bit values of the rows not on disk (rows `spill.rows..`, or all of them).
    values: Vec<i8>,
    scales: Vec<f32>,
    /// The one-bit codes of rows `coded_from..`, `words` a row.
    codes: Vec<u64>,
    /// The first row with a one-bit code: 0 unless inverted lists cover the rows before.
    coded_from: usize,
    spill: Option<Spill>,
}

/// When and where a collection moves its 8-bit values out of memory: from `from` rows on,
/// a chunk of [`SPILL_CHUNK`] rows (or `from`, if fewer) at a time, into a private file made in `dir` (unlinked
/// from the start, so it is never seen by another process and goes when the collection
/// does, a kill included). Searches read back only the rows they rescore (a few thousand,
/// with `pread`: the kernel's file cache holds the rest, outside the process); exact scans
/// read the file in blocks.
#[derive(Clone, Debug)]
pub struct SpillAt {
    /// The directory the file is made in (the shard's, inside the data directory).
    pub dir: PathBuf,
    /// From how many rows on values are moved to disk.
    pub from: usize,
}

/// The values moved to disk so far.
#[derive(Debug)]
struct Spill {
    at: SpillAt,
    /// Made at the first move.
    file: Option<File>,
    /// Rows `0..rows` are in the file.
    rows: usize,
    /// A move failed (a full or read-only disk): the values stay in memory, as they
    /// would without spilling, and no more moves are tried.
    failed: bool,
}

/// How many rows' values are moved to disk at once: 2 MiB of 256-long vectors.
const SPILL_CHUNK: usize = 8192;

/// How many rows an exact scan reads from disk at once.
const READ_ROWS: usize = 4096;

/// A vector quantized to 8 bits: `v[i] ≈ values[i] × scale`.
#[derive(Clone, Debug, PartialEq)]
pub struct Quantized {
    values: Vec<i8>,
    scale: f32,
}

impl Quantized {
    /// The 8-bit values (the vector divided by its scale).
    pub(crate) fn values(&self) -> &[i8] {
        &self.values
    }

    /// The stored form: the scale (f32, little-endian), then one byte per dimension.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.scale.to_le_bytes().to_vec();
        out.extend(self.values.iter().map(|v| v.to_le_bytes()[0]));
        out
    }

    /// Reads [`Quantized::to_bytes`]'s form of a `dim`-long vector.
    pub fn from_bytes(bytes: &[u8], dim: usize) -> Option<Quantized> {
        if bytes.len() != 4 + dim {
            return None;
        }
        let scale = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let values = bytes[4..].iter().map(|b| i8::from_le_bytes([*b])).collect();
        Some(Quantized { values, scale })
    }
}

/// Quantizes `v` symmetrically: the largest magnitude maps to 127.
pub fn quantize(v: &[f32]) -> Quantized {
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
    let values = v
        .iter()
        .map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8)
        .collect();
    Quantized { values, scale }
}

/// The integer dot product of two equal-length 8-bit vectors. Pairs of products are summed
/// before widening (the shape of SIMD multiply-add instructions), in 16 lanes.
pub(crate) fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let mut lanes = [0i32; 16];
    let (ca, cb) = (a.chunks_exact(32), b.chunks_exact(32));
    let tail: i32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| i32::from(*x) * i32::from(*y))
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            let p0 = i32::from(i16::from(x[2 * i]) * i16::from(y[2 * i]));
            let p1 = i32::from(i16::from(x[2 * i + 1]) * i16::from(y[2 * i + 1]));
            lanes[i] += p0 + p1;
        }
    }
    lanes.iter().sum::<i32>() + tail
}

/// Best first: the higher score, then the earlier row.
fn better<T: PartialOrd>(a: &(usize, T), b: &(usize, T)) -> Ordering {
    b.1.partial_cmp(&a.1)
        .unwrap_or(Ordering::Equal)
        .then(a.0.cmp(&b.0))
}

/// The `k` best (highest-scoring) rows offered so far.
///
/// Rows that beat the `k`-th best score of the last trim are gathered unordered; at `2k`
/// the best `k` are selected in linear time and the rest dropped. Each offer costs O(1)
/// amortised where a heap's costs a logarithm: a scan of inverted lists offers tens of
/// thousands of rows, most of them early (a `perf` profile of a million-row search had 8%
/// of its samples in the heap's pops).
pub(crate) struct TopK<T> {
    k: usize,
    kept: Vec<(usize, T)>,
    /// The `k`-th best score at the last trim: a row must beat it to be kept.
    floor: Option<T>,
}

impl<T: PartialOrd + Copy> TopK<T> {
    /// Keeps up to `k` rows.
    pub(crate) fn new(k: usize) -> Self {
        TopK {
            k,
            kept: Vec::with_capacity(2 * k.min(1 << 16)),
            floor: None,
        }
    }

    /// Whether a row scoring `score` could be kept now: a caller can skip what it costs
    /// to admit a row (a filter's look at it) when it could not.
    pub(crate) fn would_keep(&self, score: T) -> bool {
        self.k > 0 && self.floor.is_none_or(|floor| score > floor)
    }

    /// Offers `row` with `score`.
    pub(crate) fn offer(&mut self, row: usize, score: T) {
        if self.would_keep(score) {
            self.kept.push((row, score));
            if self.kept.len() >= 2 * self.k {
                self.trim();
            }
        }
    }

    /// Keeps the best `k` of those gathered, and their worst score as the floor.
    fn trim(&mut self) {
        if self.kept.len() > self.k {
            self.kept.select_nth_unstable_by(self.k - 1, better);
            self.kept.truncate(self.k);
            self.floor = Some(self.kept[self.k - 1].1);
        }
    }

    /// The rows kept, best first (ties: the earlier row first).
    pub(crate) fn into_sorted(mut self) -> Vec<(usize, T)> {
        self.kept.sort_unstable_by(better);
        self.kept.truncate(self.k);
        self.kept
    }
}

/// Keeps the `k` best (highest-scoring) rows seen.
pub(crate) fn top_k<T: PartialOrd + Copy>(
    k: usize,
    scored: impl Iterator<Item = (usize, T)>,
) -> Vec<(usize, T)> {
    let mut top = TopK::new(k);
    for (row, score) in scored {
        top.offer(row, score);
    }
    top.into_sorted()
}

/// The dot product of two equal-length slices, in eight lanes so it vectorises.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The one-bit code of `v`: bit i is set when `v[i] > 0`.
fn encode(v: &[i8], words: usize, out: &mut Vec<u64>) {
    let start = out.len();
    out.resize(start + words, 0);
    for (i, x) in v.iter().enumerate() {
        if *x > 0 {
            out[start + i / 64] |= 1 << (i % 64);
        }
    }
}

impl Vectors {
    /// The bytes the vectors take in memory (not the values moved to disk), as allocated
    /// (a collection that grows holds up to twice what it uses).
    pub fn memory(&self) -> usize {
        self.values.capacity() + self.scales.capacity() * 4 + self.codes.capacity() * 8
    }

    /// Gives back the memory allocated beyond what the rows use (after a load, which grows
    /// the collection by doubling).
    pub fn shrink_to_fit(&mut self) {
        self.values.shrink_to_fit();
        self.scales.shrink_to_fit();
        self.codes.shrink_to_fit();
    }

    /// Makes room for `rows` more vectors at once (their 8-bit values too unless they
    /// will move to disk).
    pub fn reserve_exact(&mut self, rows: usize) {
        if self.dim == 0 {
            return;
        }
        self.scales.reserve_exact(rows);
        self.codes.reserve_exact(rows * self.words);
        let stay = self
            .spill
            .as_ref()
            .is_none_or(|s| self.len() + rows < s.at.from);
        if stay {
            self.values.reserve_exact(rows * self.dim);
        }
    }

    /// An empty collection of `dim`-long vectors.
    pub fn new(dim: usize) -> Self {
        Vectors {
            dim,
            words: dim.div_ceil(64),
            values: Vec::new(),
            scales: Vec::new(),
            codes: Vec::new(),
            coded_from: 0,
            spill: None,
        }
    }

    /// An empty collection of `dim`-long vectors that moves its 8-bit values to disk as
    /// `at` says (never, for `None`).
    pub fn spilling(dim: usize, at: Option<SpillAt>) -> Self {
        Vectors {
            spill: at.map(|at| Spill {
                at,
                file: None,
                rows: 0,
                failed: false,
            }),
            ..Vectors::new(dim)
        }
    }

    /// The first row with a one-bit code (the rows before it are covered by inverted
    /// lists, [`Vectors::drop_codes_below`]).
    pub(crate) fn coded_from(&self) -> usize {
        self.coded_from
    }

    /// Drops the one-bit codes of the rows before `rows` (at most all of them), which
    /// inverted lists now cover: 32 bytes a row of 256 dimensions. Searches of those rows
    /// go through the lists; should one scan them here after all (a rare fallback), they
    /// are scored with their 8-bit values. Moves the codes kept, so it is called once the
    /// lists have caught up, not for each row they add.
    pub(crate) fn drop_codes_below(&mut self, rows: usize) {
        let rows = rows.min(self.len());
        if rows <= self.coded_from {
            return;
        }
        self.codes.drain(..(rows - self.coded_from) * self.words);
        self.codes.shrink_to_fit();
        self.coded_from = rows;
    }

    /// How many rows have their values on disk (the first ones).
    pub fn on_disk(&self) -> usize {
        self.spill.as_ref().map_or(0, |s| s.rows)
    }

    /// The length of every vector held.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// How many vectors are held.
    pub fn len(&self) -> usize {
        self.scales.len()
    }

    /// Whether no vector is held.
    pub fn is_empty(&self) -> bool {
        self.scales.is_empty() || self.dim == 0
    }

    /// Adds a quantized vector as the next row. The caller guarantees its length is `dim`.
    pub fn push(&mut self, q: &Quantized) {
        debug_assert_eq!(q.values.len(), self.dim);
        self.values.extend_from_slice(&q.values);
        self.scales.push(q.scale);
        encode(&q.values, self.words, &mut self.codes);
        self.move_to_disk();
    }

    /// Moves the values held in memory to disk once the spill's threshold and a chunk are
    /// reached. A failure leaves them in memory (and stops further moves): nothing is lost,
    /// only the memory not saved.
    fn move_to_disk(&mut self) {
        let (dim, len) = (self.dim, self.len());
        let Some(spill) = self.spill.as_mut().filter(|s| !s.failed) else {
            return;
        };
        // A chunk is smaller when the threshold is (a small shard's tests).
        let chunk = SPILL_CHUNK.min(spill.at.from.max(1));
        if dim == 0 || len < spill.at.from || len - spill.rows < chunk {
            return;
        }
        let moved = (|| -> io::Result<()> {
            if spill.file.is_none() {
                spill.file = Some(tempfile::tempfile_in(&spill.at.dir)?);
            }
            let bytes: Vec<u8> = self.values.iter().map(|v| v.to_le_bytes()[0]).collect();
            if let Some(file) = &spill.file {
                file.write_all_at(&bytes, (spill.rows * dim) as u64)?;
            }
            Ok(())
        })();
        match moved {
            Ok(()) => {
                spill.rows = len;
                self.values = Vec::new();
            }
            Err(e) => {
                spill.failed = true;
                tracing::warn!(
                    "search index: cannot keep vectors on disk in {} ({e}); they stay in memory",
                    spill.at.dir.display()
                );
            }
        }
    }

    /// The cosine of rows `a` and `b` (`None` when either has no vector yet, or cannot be
    /// read back from disk).
    pub fn between(&self, a: usize, b: usize) -> Option<f32> {
        if a >= self.len() || b >= self.len() {
            return None;
        }
        let read = |r: usize| {
            self.row(r)
                .inspect_err(|e| tracing::warn!("search index: reading a vector back: {e}"))
                .ok()
        };
        let (va, vb) = (read(a)?, read(b)?);
        Some(dot_i8(&va, &vb) as f32 * self.scales[a] * self.scales[b])
    }

    /// The 8-bit values of row `row` (its vector divided by its scale): borrowed from
    /// memory, or read back from disk.
    pub(crate) fn row(&self, row: usize) -> io::Result<Cow<'_, [i8]>> {
        let on_disk = self.on_disk();
        if row >= on_disk {
            let r = row - on_disk;
            return Ok(Cow::Borrowed(
                &self.values[r * self.dim..(r + 1) * self.dim],
            ));
        }
        let mut bytes = vec![0u8; self.dim];
        self.read_at(row, &mut bytes)?;
        Ok(Cow::Owned(bytes.into_iter().map(|b| b as i8).collect()))
    }

    /// Reads the values of the rows from `row` on that fill `bytes` from the spill file.
    fn read_at(&self, row: usize, bytes: &mut [u8]) -> io::Result<()> {
        match self.spill.as_ref().and_then(|s| s.file.as_ref()) {
            Some(file) => file.read_exact_at(bytes, (row * self.dim) as u64),
            None => Err(io::Error::other("no spill file")),
        }
    }

    /// Calls `f` with each row of `rows` and its 8-bit values, in order, reading the rows
    /// on disk [`READ_ROWS`] at a time.
    pub(crate) fn each_row(
        &self,
        rows: std::ops::Range<usize>,
        mut f: impl FnMut(usize, &[i8]),
    ) -> io::Result<()> {
        let on_disk = self.on_disk();
        let mut row = rows.start;
        let (mut bytes, mut values) = (Vec::new(), Vec::new());
        while row < rows.end.min(on_disk) {
            let n = READ_ROWS.min(rows.end.min(on_disk) - row);
            bytes.resize(n * self.dim, 0);
            self.read_at(row, &mut bytes)?;
            values.clear();
            values.extend(bytes.iter().map(|b| *b as i8));
            for (i, v) in values.chunks_exact(self.dim.max(1)).enumerate() {
                f(row + i, v);
            }
            row += n;
        }
        for r in row..rows.end {
            let m = r - on_disk;
            f(r, &self.values[m * self.dim..(m + 1) * self.dim]);
        }
        Ok(())
    }

    /// Writes row `row`'s vector ([`Vectors::row`] times its scale) into `out` (`dim`
    /// long).
    pub(crate) fn vector_into(&self, row: usize, out: &mut [f32]) -> io::Result<()> {
        let scale = self.scales[row];
        for (x, q) in out.iter_mut().zip(self.row(row)?.iter()) {
            *x = f32::from(*q) * scale;
        }
        Ok(())
    }

    /// The scale of row `row` (its vector is its 8-bit values times this).
    pub(crate) fn scale(&self, row: usize) -> f32 {
        self.scales[row]
    }

    /// The cosine of row `row`, whose values are `values`, with the quantized query `q`.
    fn score_values(&self, row: usize, values: &[i8], q: &Quantized) -> f32 {
        dot_i8(values, &q.values) as f32 * self.scales[row] * q.scale
    }

    /// The cosine of row `row` with the quantized query `q`.
    pub(crate) fn score(&self, row: usize, q: &Quantized) -> io::Result<f32> {
        Ok(self.score_values(row, &self.row(row)?, q))
    }

    /// The `k` rows most similar to `query` (by cosine; vectors are unit length) among
    /// those `allowed` accepts, best first. Exact when at most `exact_limit` rows are held;
    /// otherwise one-bit codes pick at least `candidates` (and at least `k`) rows that are
    /// rescored with the 8-bit vectors. (The index calls [`Vectors::search_from`].)
    #[cfg(test)]
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        exact_limit: usize,
        candidates: usize,
        allowed: impl Fn(usize) -> bool,
    ) -> Vec<(usize, f32)> {
        self.search_from(0, &quantize(query), k, exact_limit, candidates, allowed)
            .expect("in memory")
    }

    /// [`Vectors::search`] among the rows from `first` on only (those after the part an
    /// approximate index covers), for the quantized query `q`: exact when at most
    /// `exact_limit` rows are scanned.
    pub(crate) fn search_from(
        &self,
        first: usize,
        q: &Quantized,
        k: usize,
        exact_limit: usize,
        candidates: usize,
        allowed: impl Fn(usize) -> bool,
    ) -> io::Result<Vec<(usize, f32)>> {
        if k == 0 || self.is_empty() || first >= self.len() {
            return Ok(Vec::new());
        }
        let rows = first..self.len();
        if rows.len() <= exact_limit {
            let mut top = TopK::new(k);
            self.each_row(rows, |r, values| {
                if allowed(r) {
                    top.offer(r, self.score_values(r, values, q));
                }
            })?;
            return Ok(top.into_sorted());
        }
        let mut top = TopK::new(k);
        // Rows without a one-bit code (inverted lists cover them, and are not used for
        // this search) are scored with their 8-bit values.
        let coded = first.max(self.coded_from).min(self.len());
        if first < coded {
            self.each_row(first..coded, |r, values| {
                if allowed(r) {
                    top.offer(r, self.score_values(r, values, q));
                }
            })?;
        }
        let rows = coded..self.len();
        let mut code = Vec::with_capacity(self.words);
        encode(&q.values, self.words, &mut code);
        // Hamming distances of every admitted row (u16::MAX for the rest), then the
        // smallest distance threshold that admits enough candidates: a counting select,
        // linear in the rows, with no heap.
        let distances: Vec<u16> = rows
            .clone()
            .map(|r| {
                if !allowed(r) {
                    return u16::MAX;
                }
                let at = r - self.coded_from;
                let c = &self.codes[at * self.words..(at + 1) * self.words];
                c.iter()
                    .zip(&code)
                    .map(|(a, b)| (a ^ b).count_ones())
                    .sum::<u32>() as u16
            })
            .collect();
        let wanted = candidates.max(k);
        let mut histogram = vec![0usize; self.dim + 1];
        distances
            .iter()
            .filter(|d| **d != u16::MAX)
            .for_each(|d| histogram[usize::from(*d)] += 1);
        let mut threshold = 0;
        let mut admitted = 0;
        for (d, count) in histogram.iter().enumerate() {
            threshold = d;
            admitted += count;
            if admitted >= wanted {
                break;
            }
        }
        for (r, d) in rows.zip(&distances) {
            if usize::from(*d) <= threshold {
                top.offer(r, self.score(r, q)?);
            }
        }
        Ok(top.into_sorted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = dot(v, v).sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn dot_matches_the_plain_sum_for_any_length() {
        for len in [1, 7, 8, 9, 384] {
            let a: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..len).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - plain).abs() < 1e-4, "len {len}");
        }
    }

    #[test]
    fn exact_and_quantized_search_agree_on_clear_neighbours() {
        let mut rng = fastrand::Rng::with_seed(7);
        let dim = 64;
        let mut vectors = Vectors::new(dim);
        let base: Vec<Vec<f32>> = (0..500)
            .map(|_| unit(&(0..dim).map(|_| rng.f32() - 0.5).collect::<Vec<_>>()))
            .collect();
        base.iter().for_each(|v| vectors.push(&quantize(v)));
        // A query close to row 42: both paths must rank it first.
        let query = unit(
            &base[42]
                .iter()
                .map(|x| x + (rng.f32() - 0.5) * 0.05)
                .collect::<Vec<_>>(),
        );
        let exact = vectors.search(&query, 5, usize::MAX, 1, |_| true);
        let quantized = vectors.search(&query, 5, 0, 50, |_| true);
        assert_eq!(exact[0].0, 42);
        assert_eq!(quantized[0].0, 42);
        assert!(
            (exact[0].1 - quantized[0].1).abs() < 1e-6,
            "rescoring is exact"
        );
        // Filters apply on both paths.
        let filtered = vectors.search(&query, 5, 0, 50, |r| r != 42);
        assert!(filtered.iter().all(|(r, _)| *r != 42));
        assert_eq!(filtered.len(), 5);
    }

    /// Rows whose one-bit codes were dropped (inverted lists cover them) are still
    /// searched, with their 8-bit values; the codes kept still serve the rest, and new
    /// rows get theirs.
    #[test]
    fn rows_without_one_bit_codes_are_scored_with_their_values() {
        let mut rng = fastrand::Rng::with_seed(11);
        let dim = 64;
        let mut vectors = Vectors::new(dim);
        let base: Vec<Vec<f32>> = (0..2_000)
            .map(|_| unit(&(0..dim).map(|_| rng.f32() - 0.5).collect::<Vec<_>>()))
            .collect();
        base.iter().for_each(|v| vectors.push(&quantize(v)));
        let query = unit(&(0..dim).map(|_| rng.f32() - 0.5).collect::<Vec<_>>());
        let exact = vectors.search(&query, 10, usize::MAX, 1, |_| true);
        vectors.shrink_to_fit();
        let memory = vectors.memory();
        vectors.drop_codes_below(1_200);
        assert_eq!(vectors.coded_from(), 1_200);
        assert_eq!(memory - vectors.memory(), 1_200 * 8);
        // Dropping fewer than are gone changes nothing; more than are held drops them all.
        vectors.drop_codes_below(100);
        assert_eq!(vectors.coded_from(), 1_200);
        // Every coded row a candidate: the search is exact over both parts.
        let both = vectors.search(&query, 10, 0, 800, |_| true);
        assert_eq!(both, exact);
        // Filters apply to the rows without codes too.
        let odd = vectors.search(&query, 10, 0, 800, |r| r % 2 == 1);
        assert_eq!(
            odd,
            vectors.search(&query, 10, usize::MAX, 1, |r| r % 2 == 1)
        );
        // A row added afterwards gets its code: a query on it finds it first.
        vectors.push(&quantize(&query));
        let found = vectors.search(&query, 1, 0, 1, |r| r >= 1_200);
        assert_eq!(found[0].0, 2_000);
        vectors.drop_codes_below(usize::MAX);
        assert_eq!(vectors.coded_from(), 2_001);
        assert_eq!(vectors.search(&query, 1, 0, 1, |_| true)[0].0, 2_000);
    }

    #[test]
    fn eight_bit_cosines_stay_within_a_hundredth_of_f32() {
        let mut rng = fastrand::Rng::with_seed(3);
        let mut vectors = Vectors::new(384);
        let rows: Vec<Vec<f32>> = (0..50)
            .map(|_| unit(&(0..384).map(|_| rng.f32() - 0.5).collect::<Vec<_>>()))
            .collect();
        rows.iter().for_each(|v| vectors.push(&quantize(v)));
        let query = quantize(&rows[0]);
        for (r, v) in rows.iter().enumerate() {
            let exact = dot(v, &rows[0]);
            assert!(
                (vectors.score(r, &query).unwrap() - exact).abs() < 0.01,
                "row {r}"
            );
        }
    }

    #[test]
    fn the_stored_form_round_trips() {
        let q = quantize(&unit(&[0.3, -0.2, 0.0, 0.9]));
        assert_eq!(Quantized::from_bytes(&q.to_bytes(), 4), Some(q.clone()));
        assert_eq!(Quantized::from_bytes(&q.to_bytes(), 5), None);
    }

    /// Vectors on disk answer every question as vectors in memory do, for a fraction of the
    /// memory; the newest rows (less than a chunk) stay in memory.
    #[test]
    fn vectors_on_disk_search_as_vectors_in_memory_do() {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = fastrand::Rng::with_seed(11);
        let dim = 48;
        let at = SpillAt {
            dir: dir.path().to_owned(),
            from: 300,
        };
        let (mut memory, mut disk) = (Vectors::new(dim), Vectors::spilling(dim, Some(at)));
        let rows: Vec<Vec<f32>> = (0..1000)
            .map(|_| unit(&(0..dim).map(|_| rng.f32() - 0.5).collect::<Vec<_>>()))
            .collect();
        for (i, v) in rows.iter().enumerate() {
            memory.push(&quantize(v));
            disk.push(&quantize(v));
            // Nothing moves before the threshold; then a chunk (300 rows) at a time.
            assert_eq!(
                disk.on_disk(),
                if i + 1 < 300 { 0 } else { (i + 1) / 300 * 300 }
            );
        }
        assert_eq!(disk.on_disk(), 900);
        // Counted as allocated: what a collection grown by doubling holds beyond its rows
        // counts until it is given back.
        assert!(memory.memory() > 1000 * (dim + 4 + 8));
        memory.shrink_to_fit();
        disk.shrink_to_fit();
        assert_eq!(memory.memory(), 1000 * (dim + 4 + 8));
        assert_eq!(disk.memory(), memory.memory() - 900 * dim);
        let q = quantize(&rows[7]);
        for exact_limit in [usize::MAX, 0] {
            for first in [0, 450, 950] {
                let filter = |r: usize| !r.is_multiple_of(3);
                assert_eq!(
                    disk.search_from(first, &q, 10, exact_limit, 40, filter)
                        .unwrap(),
                    memory
                        .search_from(first, &q, 10, exact_limit, 40, filter)
                        .unwrap(),
                    "exact_limit {exact_limit}, first {first}"
                );
            }
        }
        let (mut a, mut b) = (vec![0.0; dim], vec![0.0; dim]);
        for r in [0, 299, 300, 899, 900, 999] {
            assert_eq!(disk.score(r, &q).unwrap(), memory.score(r, &q).unwrap());
            assert_eq!(disk.between(r, 5), memory.between(r, 5));
            disk.vector_into(r, &mut a).unwrap();
            memory.vector_into(r, &mut b).unwrap();
            assert_eq!(a, b);
        }
        let mut seen = Vec::new();
        disk.each_row(295..905, |r, v| {
            assert_eq!(v, &*memory.row(r).unwrap());
            seen.push(r);
        })
        .unwrap();
        assert_eq!(seen, (295..905).collect::<Vec<_>>());
        // The file is private: nothing is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// A directory that cannot take the file (here: none) leaves the vectors in memory,
    /// all of them still there.
    #[test]
    fn vectors_that_cannot_go_to_disk_stay_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let at = SpillAt {
            dir: dir.path().join("missing"),
            from: 10,
        };
        let mut disk = Vectors::spilling(8, Some(at));
        let mut memory = Vectors::new(8);
        for i in 0..100 {
            let v = unit(
                &(0..8)
                    .map(|d| ((i * 8 + d) as f32).sin())
                    .collect::<Vec<_>>(),
            );
            disk.push(&quantize(&v));
            memory.push(&quantize(&v));
        }
        assert_eq!(disk.on_disk(), 0);
        assert_eq!(disk.memory(), memory.memory());
        let q = quantize(&unit(&[1.0; 8]));
        assert_eq!(
            disk.search_from(0, &q, 5, usize::MAX, 0, |_| true).unwrap(),
            memory
                .search_from(0, &q, 5, usize::MAX, 0, |_| true)
                .unwrap()
        );
    }

    #[test]
    fn top_k_breaks_ties_by_row() {
        let got = top_k(2, [(3, 1.0f32), (1, 1.0), (2, 0.5)].into_iter());
        assert_eq!(got, vec![(1, 1.0), (3, 1.0)]);
    }

    #[test]
    fn top_k_keeps_the_best_rows_through_many_trims() {
        let mut rng = fastrand::Rng::with_seed(7);
        for k in [0, 1, 2, 10, 1000] {
            // Scores from a few values, so ties cross every trim; rows in no order.
            let mut rows: Vec<usize> = (0..5000).collect();
            rng.shuffle(&mut rows);
            let offered: Vec<(usize, i32)> = rows.iter().map(|&r| (r, rng.i32(0..50))).collect();
            let mut top = TopK::new(k);
            let mut admitted = 0;
            for &(row, score) in &offered {
                admitted += usize::from(top.would_keep(score));
                top.offer(row, score);
            }
            let got = top.into_sorted();
            let mut want = offered.clone();
            want.sort_by(better);
            want.truncate(k);
            assert_eq!(got.len(), want.len(), "k {k}");
            // The same scores, best first; among the rows tied at the last score any may
            // be kept (those offered after a trim that set the floor there are not), so
            // only rows scoring above it must be the same.
            let scores = |l: &[(usize, i32)]| l.iter().map(|p| p.1).collect::<Vec<_>>();
            assert_eq!(scores(&got), scores(&want), "k {k}");
            if let Some(last) = want.last().map(|p| p.1) {
                let above = |l: &[(usize, i32)]| {
                    l.iter().filter(|p| p.1 > last).copied().collect::<Vec<_>>()
                };
                assert_eq!(above(&got), above(&want), "k {k}");
            }
            // The floor turns rows away once the kept ones beat them.
            if k > 0 && k < 1000 {
                assert!(admitted < offered.len() / 2, "k {k}: {admitted} admitted");
            }
        }
    }
}
