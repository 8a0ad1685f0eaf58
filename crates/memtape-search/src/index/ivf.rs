//! Inverted lists over 4-bit codes: an approximate vector search for large shards that
//! keeps about 40 bytes a row in memory and scans memory in order.
//!
//! Each row's code is its vector in a graph's [`Frame`](super::ann::Frame) (less the
//! centre, on the first 64 principal axes, 8-bit). Spherical k-means over a sample of the
//! codes gives the lists' centroids; every row joins the list of its nearest centroid,
//! stored as 4 bits a value: the unit vector of its code, each axis in 15 steps over three
//! times that axis's spread in the sample (later axes spread less, so one step for every
//! axis would lose them). A search scores the centroids, scans the lists nearest the query
//! until it has looked at enough rows, and keeps the rows whose codes are nearest; the
//! caller rescores those with their whole vectors. A scan is bound by how fast memory
//! streams, so half the bytes a row is about half the time (docs/scaling.md, "Inverted
//! lists", and "Fewer bytes a loaded row").
//!
//! Adding rows never moves others, so the lists grow with the shard as a graph did; the
//! centroids and the axes' steps stay those of the first build (an erasure or a rebuild
//! trains new ones).

use std::io::{self, Read, Write};

use nalgebra::DMatrix;

use crate::vectors::TopK;

/// Rounds of k-means (each one assignment of the sample and one update of the centroids).
const ROUNDS: usize = 8;

/// Sample rows a list is trained from, at most: more rows make better centroids, and
/// cost linearly.
pub(crate) const SAMPLE_PER_LIST: usize = 48;

/// Rows assigned to their lists at once (one matrix product of this many rows by the
/// centroids).
const BLOCK: usize = 1024;

/// The stored form's version, its first word (the 8-bit lists of earlier builds began
/// with their dims, 64: such a file is refused and the lists are built again).
const FORMAT: u64 = 0x4d54_4956_4634_0001;

/// The largest 4-bit step count either side of zero: values run from -7 to 7.
const STEPS: f32 = 7.0;

/// One list: the rows whose code is nearest its centroid, in the order they were added.
#[derive(Clone, Debug, Default, PartialEq)]
struct List {
    rows: Vec<u32>,
    /// [`Lists::half`] bytes per row, in the order of `rows`: axis `i` in the low four bits
    /// of byte `i`, axis `half + i` in the high four, each as its step count plus 8.
    codes: Vec<u8>,
    /// One over the length of each row's code as its steps give it back: rows are ranked
    /// by cosine.
    inv_norms: Vec<f32>,
}

/// Inverted lists over the codes of a shard's first [`Lists::rows`] rows.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Lists {
    dims: usize,
    /// One unit vector of `dims` per list, one after another.
    centroids: Vec<f32>,
    /// The size of one 4-bit step on each axis (of a code's unit vector).
    steps: Vec<f32>,
    lists: Vec<List>,
    rows: usize,
}

/// The steps of each axis for `points` (unit vectors of `dims`, one after another): three
/// times the axis's root mean square over [`STEPS`] (a value further out is clipped).
fn steps_for(points: &[f32], dims: usize) -> Vec<f32> {
    let n = points.len() / dims.max(1);
    let mut sq = vec![0f64; dims];
    for p in points.chunks_exact(dims) {
        for (s, x) in sq.iter_mut().zip(p) {
            *s += f64::from(*x) * f64::from(*x);
        }
    }
    sq.iter()
        .map(|s| {
            let rms = if n > 0 { (s / n as f64).sqrt() } else { 0.0 };
            // An axis the sample never moved on still gets a step (its values clip).
            ((3.0 * rms) as f32 / STEPS).max(1e-6)
        })
        .collect()
}

/// `code` in 4 bits a value over `steps` (layout of [`List::codes`]), written to `out`
/// (`dims.div_ceil(2)` bytes), and one over the length of what the steps give back.
fn encode(code: &[i8], steps: &[f32], out: &mut [u8]) -> f32 {
    let half = out.len();
    let inv = inv_norm(code);
    let nibble = |axis: usize| -> u8 {
        let Some(v) = code.get(axis) else { return 8 };
        let n = (f32::from(*v) * inv / steps[axis])
            .round()
            .clamp(-STEPS, STEPS);
        (n as i8 + 8) as u8
    };
    for (i, o) in out.iter_mut().enumerate() {
        *o = nibble(i) | (nibble(half + i) << 4);
    }
    decoded_inv_norm(out, steps)
}

/// The query's side of a 4-bit dot product: its unit vector times each axis's step, in
/// 8 bits, split into the axes of the low and the high four bits, and the sum of all its
/// values times 8 (the codes store each step count plus 8).
struct Query4 {
    low: Vec<i16>,
    high: Vec<i16>,
    offset: i32,
}

impl Query4 {
    fn new(query: &[i8], steps: &[f32], half: usize) -> Query4 {
        let inv = inv_norm(query);
        let scaled: Vec<f32> = (0..2 * half)
            .map(|axis| match (query.get(axis), steps.get(axis)) {
                (Some(v), Some(s)) => f32::from(*v) * inv * s,
                _ => 0.0,
            })
            .collect();
        let max = scaled.iter().fold(0f32, |m, x| m.max(x.abs()));
        let scale = if max > 0.0 { 127.0 / max } else { 0.0 };
        let q: Vec<i16> = scaled.iter().map(|x| (x * scale).round() as i16).collect();
        let offset = 8 * q.iter().map(|v| i32::from(*v)).sum::<i32>();
        Query4 {
            low: q[..half].to_vec(),
            high: q[half..].to_vec(),
            offset,
        }
    }

    /// The dot product with one row's code (up to a scale the same for every row). Up to
    /// four chunks of 16 bytes (codes of up to 128 values), the products are summed in 16
    /// lanes of 16 bits (127 × 15 twice a chunk, four times: 15,240 fits), which one
    /// 256-bit register holds; longer codes widen each chunk's pairs to 32 bits.
    fn dot(&self, code: &[u8]) -> i32 {
        let done = code.len() / 16 * 16;
        let chunks = code[..done]
            .chunks_exact(16)
            .zip(self.low.chunks_exact(16).zip(self.high.chunks_exact(16)));
        let sum = if done <= 64 {
            let mut lanes = [0i16; 16];
            for (c, (lo, hi)) in chunks {
                for i in 0..16 {
                    lanes[i] += lo[i] * i16::from(c[i] & 15) + hi[i] * i16::from(c[i] >> 4);
                }
            }
            lanes.iter().map(|v| i32::from(*v)).sum::<i32>()
        } else {
            let mut lanes = [0i32; 16];
            for (c, (lo, hi)) in chunks {
                for i in 0..16 {
                    let p = lo[i] * i16::from(c[i] & 15) + hi[i] * i16::from(c[i] >> 4);
                    lanes[i] += i32::from(p);
                }
            }
            lanes.iter().sum::<i32>()
        };
        let tail: i32 = code[done..]
            .iter()
            .zip(self.low[done..].iter().zip(&self.high[done..]))
            .map(|(c, (lo, hi))| {
                i32::from(*lo) * i32::from(c & 15) + i32::from(*hi) * i32::from(c >> 4)
            })
            .sum();
        sum + tail - self.offset
    }
}

/// Lists at most: training costs the square of the count (each of its sample rows is
/// compared with every centroid), about 100 billion multiply-adds at this many, and a
/// search's recall depends on the share of rows it scans, not on how finely the lists cut
/// them (docs/scaling.md, "Inverted lists").
const MAX_LISTS: usize = 2_048;

/// How many lists a shard of `rows` rows is given: about twice the square root (a list
/// then holds about half the root), at least one and at most [`MAX_LISTS`].
pub(crate) fn lists_for(rows: usize) -> usize {
    ((2.0 * (rows as f64).sqrt()).round() as usize).clamp(1, MAX_LISTS)
}

/// `code` as floats of unit length (zeros stay zeros).
fn unit(code: &[i8], out: &mut [f32]) {
    let inv = inv_norm(code);
    for (o, v) in out.iter_mut().zip(code) {
        *o = f32::from(*v) * inv;
    }
}

/// One over the length of `code` (0 for a zero code, which then scores 0).
fn inv_norm(code: &[i8]) -> f32 {
    let sq: i32 = code.iter().map(|v| i32::from(*v) * i32::from(*v)).sum();
    if sq > 0 {
        1.0 / (sq as f32).sqrt()
    } else {
        0.0
    }
}

impl Lists {
    /// Lists of `count` centroids (fewer when the sample has fewer rows) trained by
    /// spherical k-means on `sample`, codes of `dims` values one after another. The first
    /// centroids are sample rows spread evenly over it (the sample is itself spread over
    /// the shard), so training is deterministic.
    pub(crate) fn train(sample: &[i8], dims: usize, count: usize) -> Lists {
        let n = sample.len() / dims.max(1);
        let k = count.min(n).max(1);
        let mut points = vec![0f32; n * dims];
        for (code, out) in sample.chunks_exact(dims).zip(points.chunks_exact_mut(dims)) {
            unit(code, out);
        }
        let mut centroids = vec![0f32; k * dims];
        if n > 0 {
            for (j, c) in centroids.chunks_exact_mut(dims).enumerate() {
                let row = j * n / k;
                c.copy_from_slice(&points[row * dims..(row + 1) * dims]);
            }
        }
        for _ in 0..ROUNDS {
            let (assigned, scores) = nearest(&centroids, dims, &points);
            let mut sums = vec![0f32; k * dims];
            let mut counts = vec![0usize; k];
            for (p, &a) in points.chunks_exact(dims).zip(&assigned) {
                counts[a as usize] += 1;
                for (s, x) in sums[a as usize * dims..(a as usize + 1) * dims]
                    .iter_mut()
                    .zip(p)
                {
                    *s += x;
                }
            }
            // A list left empty takes the sample row its centroid fits worst, worst first
            // (sorted only when a list is empty).
            let mut worst: Vec<usize> = Vec::new();
            if counts.contains(&0) {
                worst = (0..n).collect();
                worst.sort_by(|a, b| scores[*a].total_cmp(&scores[*b]));
            }
            let mut spare = worst.into_iter();
            for (j, c) in centroids.chunks_exact_mut(dims).enumerate() {
                let sum = &sums[j * dims..(j + 1) * dims];
                if counts[j] == 0 {
                    if let Some(row) = spare.next() {
                        c.copy_from_slice(&points[row * dims..(row + 1) * dims]);
                    }
                    continue;
                }
                let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
                if norm > 0.0 {
                    for (c, s) in c.iter_mut().zip(sum) {
                        *c = s / norm;
                    }
                }
            }
        }
        Lists {
            dims,
            centroids,
            steps: steps_for(&points, dims),
            lists: vec![List::default(); k],
            rows: 0,
        }
    }

    /// The bytes of one row's code.
    fn half(&self) -> usize {
        self.dims.div_ceil(2)
    }

    /// How many rows, from the first, the lists hold.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// The values of each code.
    pub(crate) fn dims(&self) -> usize {
        self.dims
    }

    /// The list of each of `codes` (`dims` values per row), nearest centroid first.
    pub(crate) fn assign(&self, codes: &[i8]) -> Vec<u32> {
        let mut points = vec![0f32; codes.len()];
        for (code, out) in codes
            .chunks_exact(self.dims)
            .zip(points.chunks_exact_mut(self.dims))
        {
            unit(code, out);
        }
        nearest(&self.centroids, self.dims, &points).0
    }

    /// Adds `codes` (`dims` values per row) as rows `rows()..`, each to list `lists[i]`
    /// (from [`Lists::assign`]).
    pub(crate) fn add(&mut self, codes: &[i8], lists: &[u32]) {
        let half = self.half();
        let mut packed = vec![0u8; half];
        for (code, &l) in codes.chunks_exact(self.dims).zip(lists) {
            let inv = encode(code, &self.steps, &mut packed);
            let list = &mut self.lists[l as usize];
            list.rows.push(self.rows as u32);
            list.codes.extend_from_slice(&packed);
            list.inv_norms.push(inv);
            self.rows += 1;
        }
    }

    /// Up to `count` rows below `below` that `allowed` admits, the nearest `query` (a
    /// code of `dims` values) by the cosine of their 4-bit codes, best first. Lists are scanned
    /// nearest centroid first until at least `scan` rows have been looked at.
    pub(crate) fn search(
        &self,
        query: &[i8],
        scan: usize,
        count: usize,
        below: usize,
        allowed: &dyn Fn(usize) -> bool,
    ) -> Vec<usize> {
        let mut q = vec![0f32; self.dims];
        unit(query, &mut q);
        let mut order: Vec<(usize, f32)> = self
            .centroids
            .chunks_exact(self.dims)
            .map(|c| crate::vectors::dot(c, &q))
            .enumerate()
            .collect();
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let half = self.half();
        let q4 = Query4::new(query, &self.steps, half);
        let mut top = TopK::new(count);
        let mut seen = 0;
        for (l, _) in order {
            if seen >= scan {
                break;
            }
            let list = &self.lists[l];
            seen += list.rows.len();
            let rows = list.rows.iter().zip(list.codes.chunks_exact(half));
            for ((row, code), inv) in rows.zip(&list.inv_norms) {
                let score = q4.dot(code) as f32 * inv;
                // The filter looks at the row's metadata, a read from anywhere in memory:
                // only for rows that would be kept.
                let row = *row as usize;
                if top.would_keep(score) && row < below && allowed(row) {
                    top.offer(row, score);
                }
            }
        }
        top.into_sorted().into_iter().map(|(row, _)| row).collect()
    }

    /// The bytes the lists hold in memory.
    pub(crate) fn memory(&self) -> usize {
        (self.centroids.len() + self.steps.len()) * 4
            + self
                .lists
                .iter()
                .map(|l| l.rows.capacity() * 4 + l.codes.capacity() + l.inv_norms.capacity() * 4)
                .sum::<usize>()
            + self.lists.len() * std::mem::size_of::<List>()
    }

    /// Writes the stored form to `out`: [`FORMAT`], dims, list count and rows (u64 each,
    /// little-endian), the centroids and the axes' steps (f32), then each list's length
    /// (u64), rows (u32) and codes. Streamed, so a large shard's lists are not copied in
    /// memory to be saved.
    pub(crate) fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(&FORMAT.to_le_bytes())?;
        for n in [self.dims, self.lists.len(), self.rows] {
            out.write_all(&(n as u64).to_le_bytes())?;
        }
        for c in self.centroids.iter().chain(&self.steps) {
            out.write_all(&c.to_le_bytes())?;
        }
        for list in &self.lists {
            out.write_all(&(list.rows.len() as u64).to_le_bytes())?;
            for r in &list.rows {
                out.write_all(&r.to_le_bytes())?;
            }
            out.write_all(&list.codes)?;
        }
        Ok(())
    }

    /// Reads [`Lists::write_to`]'s form, `len` bytes of `input`, refusing (with what is
    /// wrong) anything that is not lists of `dims`-value codes holding each of their rows
    /// exactly once; no count is believed beyond what `len` bytes can hold.
    pub(crate) fn read_from(input: impl Read, len: u64, dims: usize) -> Result<Lists, String> {
        let mut r = Reader { input, left: len };
        let format = r.take(8)?;
        if format != FORMAT.to_le_bytes() {
            return Err("lists of another format (an earlier build's)".to_owned());
        }
        let (found_dims, count, rows) = (r.word()?, r.word()?, r.word()?);
        if found_dims != dims || dims == 0 {
            return Err(format!(
                "codes of {found_dims} values where {dims} were expected"
            ));
        }
        let half = dims.div_ceil(2);
        // Every centroid takes 4 bytes a value and every row 4 + half.
        let fits = |n: usize, each: usize| (n as u64).saturating_mul(each as u64) <= len;
        if count == 0 || !fits(count, 4 * dims) || !fits(rows, 4 + half) {
            return Err(format!("{count} lists of {rows} rows in {len} bytes"));
        }
        let floats = |bytes: Vec<u8>| -> Vec<f32> {
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        };
        let centroids = floats(r.take(count * dims * 4)?);
        if centroids.iter().any(|c| !c.is_finite()) {
            return Err("a centroid that is not finite".to_owned());
        }
        let steps = floats(r.take(dims * 4)?);
        if steps.iter().any(|s| !s.is_finite() || *s <= 0.0) {
            return Err("an axis's step that is not a positive number".to_owned());
        }
        let mut held = vec![false; rows];
        let mut lists = Vec::with_capacity(count);
        for _ in 0..count {
            let n = r.word()?;
            if n > rows {
                return Err(format!("a list of {n} rows among {rows}"));
            }
            let list_rows: Vec<u32> = r
                .take(n * 4)?
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            for row in &list_rows {
                match held.get_mut(*row as usize) {
                    Some(h) if !*h => *h = true,
                    _ => return Err(format!("row {row} twice, or past the {rows} rows")),
                }
            }
            let codes = r.take(n * half)?;
            let inv_norms = codes
                .chunks_exact(half)
                .map(|c| decoded_inv_norm(c, &steps))
                .collect();
            lists.push(List {
                rows: list_rows,
                codes,
                inv_norms,
            });
        }
        if r.left != 0 {
            return Err(format!("{} bytes after the lists", r.left));
        }
        if held.iter().any(|h| !h) {
            return Err("a row in no list".to_owned());
        }
        Ok(Lists {
            dims,
            centroids,
            steps,
            lists,
            rows,
        })
    }
}

/// One over the length of what a stored 4-bit `code` gives back over `steps` (what
/// [`encode`] returns, and a read of the stored form computes again).
fn decoded_inv_norm(code: &[u8], steps: &[f32]) -> f32 {
    let half = code.len();
    let mut sq = 0f32;
    for (i, c) in code.iter().enumerate() {
        for (axis, nibble) in [(i, c & 15), (half + i, c >> 4)] {
            if let Some(s) = steps.get(axis) {
                let back = (f32::from(nibble) - 8.0) * s;
                sq += back * back;
            }
        }
    }
    if sq > 0.0 { 1.0 / sq.sqrt() } else { 0.0 }
}

/// Reads a stored form front to back, never past its length.
struct Reader<R> {
    input: R,
    left: u64,
}

impl<R: Read> Reader<R> {
    /// The next `n` bytes.
    fn take(&mut self, n: usize) -> Result<Vec<u8>, String> {
        if n as u64 > self.left {
            return Err(format!(
                "the lists end early, {} bytes short",
                n as u64 - self.left
            ));
        }
        let mut out = vec![0u8; n];
        self.input
            .read_exact(&mut out)
            .map_err(|e| format!("reading the lists: {e}"))?;
        self.left -= n as u64;
        Ok(out)
    }

    /// The next u64 (little-endian), as a count.
    fn word(&mut self) -> Result<usize, String> {
        let b = self.take(8)?;
        let n = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        usize::try_from(n).map_err(|_| format!("a count of {n}"))
    }
}

/// For each of `points` (unit vectors of `dims`, one after another), the centroid of
/// the highest cosine and that cosine, by blocks of [`BLOCK`] rows (one matrix product
/// each).
fn nearest(centroids: &[f32], dims: usize, points: &[f32]) -> (Vec<u32>, Vec<f32>) {
    let k = centroids.len() / dims.max(1);
    let n = points.len() / dims.max(1);
    let mut lists = Vec::with_capacity(n);
    let mut scores = Vec::with_capacity(n);
    if k == 0 {
        return (vec![0; n], vec![0.0; n]);
    }
    // Column j of `c` is centroid j; the product's column i holds point i's cosines.
    let c = DMatrix::from_column_slice(dims, k, centroids).transpose();
    for block in points.chunks(BLOCK * dims) {
        let x = DMatrix::from_column_slice(dims, block.len() / dims, block);
        let s = &c * x;
        for column in s.column_iter() {
            let (best, score) =
                column
                    .iter()
                    .enumerate()
                    .fold((0, f32::NEG_INFINITY), |(bj, bs), (j, &v)| {
                        if v > bs { (j, v) } else { (bj, bs) }
                    });
            lists.push(best as u32);
            scores.push(score);
        }
    }
    (lists, scores)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::vectors::{dot_i8, quantize, top_k};

    impl Lists {
        fn to_bytes(&self) -> Vec<u8> {
            let mut out = Vec::new();
            self.write_to(&mut out).unwrap();
            out
        }

        fn from_bytes(bytes: &[u8], dims: usize) -> Result<Lists, String> {
            Lists::read_from(bytes, bytes.len() as u64, dims)
        }
    }

    /// `n` codes of `dims` values around `clusters` random centres (noise of about the
    /// centres' own spread), 8-bit.
    fn codes(n: usize, dims: usize, clusters: usize, seed: u64) -> Vec<i8> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let centres: Vec<Vec<f32>> = (0..clusters)
            .map(|_| (0..dims).map(|_| rng.f32() - 0.5).collect())
            .collect();
        let mut out = Vec::with_capacity(n * dims);
        for _ in 0..n {
            let c = &centres[rng.usize(..clusters)];
            let v: Vec<f32> = c.iter().map(|x| x + (rng.f32() - 0.5) * 0.8).collect();
            out.extend_from_slice(quantize(&v).values());
        }
        out
    }

    fn cosine(a: &[i8], b: &[i8]) -> f32 {
        dot_i8(a, b) as f32 * inv_norm(a) * inv_norm(b)
    }

    fn exact(all: &[i8], dims: usize, q: &[i8], k: usize) -> Vec<usize> {
        let scored = all.chunks_exact(dims).map(|c| cosine(c, q)).enumerate();
        top_k(k, scored).into_iter().map(|(r, _)| r).collect()
    }

    fn built(all: &[i8], dims: usize) -> Lists {
        let n = all.len() / dims;
        let mut lists = Lists::train(all, dims, lists_for(n));
        for chunk in all.chunks(300 * dims) {
            let assigned = lists.assign(chunk);
            lists.add(chunk, &assigned);
        }
        lists
    }

    /// The best 10 of `candidates` by their whole codes (as the caller rescores them).
    fn rescored(all: &[i8], dims: usize, q: &[i8], candidates: &[usize]) -> Vec<usize> {
        let scored = candidates
            .iter()
            .map(|&r| (r, cosine(&all[r * dims..(r + 1) * dims], q)));
        top_k(10, scored).into_iter().map(|(r, _)| r).collect()
    }

    #[test]
    fn scanning_a_fifth_of_the_rows_finds_nearly_all_of_the_exact_top_ten() {
        let dims = 32;
        let all = codes(20_000, dims, 50, 1);
        let lists = built(&all, dims);
        assert_eq!(lists.rows(), 20_000);
        assert_eq!(lists.lists.len(), lists_for(20_000));
        let queries = codes(50, dims, 50, 2);
        let (mut found, mut found_first) = (0, 0);
        for q in queries.chunks_exact(dims) {
            let truth = exact(&all, dims, q, 10);
            let got = lists.search(q, 4_000, 100, usize::MAX, &|_| true);
            let best = rescored(&all, dims, q, &got);
            found += best.iter().filter(|r| truth.contains(r)).count();
            found_first += got[..10].iter().filter(|r| truth.contains(r)).count();
        }
        let recall = found as f64 / 500.0;
        assert!(recall >= 0.95, "recall@10 {recall}");
        // Even unrescored, the 4-bit codes order the rows much as the 8-bit ones do.
        let first = found_first as f64 / 500.0;
        assert!(first >= 0.6, "recall@10 of the codes alone {first}");
    }

    #[test]
    fn a_full_scan_rescored_is_the_exact_search_and_filters_and_bounds_apply() {
        let dims = 16;
        let all = codes(3_000, dims, 20, 3);
        let lists = built(&all, dims);
        let q = &codes(1, dims, 20, 4)[..];
        let everything = lists.search(q, usize::MAX, 200, usize::MAX, &|_| true);
        assert_eq!(
            rescored(&all, dims, q, &everything),
            exact(&all, dims, q, 10)
        );
        let even = lists.search(q, usize::MAX, 10, 2_000, &|r| r % 2 == 0);
        assert_eq!(even.len(), 10);
        assert!(even.iter().all(|r| r % 2 == 0 && *r < 2_000), "{even:?}");
    }

    #[test]
    fn every_row_is_in_exactly_one_list_and_the_stored_form_round_trips() {
        let dims = 8;
        let all = codes(2_000, dims, 10, 5);
        let lists = built(&all, dims);
        let mut held: Vec<u32> = lists.lists.iter().flat_map(|l| l.rows.clone()).collect();
        held.sort_unstable();
        assert_eq!(held, (0..2_000).collect::<Vec<u32>>());
        let bytes = lists.to_bytes();
        assert_eq!(Lists::from_bytes(&bytes, dims).unwrap(), lists);
        assert!(Lists::from_bytes(&bytes, dims + 1).is_err());
        // Truncated, extended, a row twice: each refused, none panics.
        assert!(Lists::from_bytes(&bytes[..bytes.len() - 1], dims).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Lists::from_bytes(&longer, dims).is_err());
        let first_rows = 32 + (lists.centroids.len() + dims) * 4 + 8;
        let mut twice = bytes.clone();
        let other = lists.lists[0].rows[1].to_le_bytes();
        twice[first_rows..first_rows + 4].copy_from_slice(&other);
        assert!(Lists::from_bytes(&twice, dims).is_err());
        // Another format (the 8-bit lists began with their dims) is refused as such.
        let mut older = bytes.clone();
        older[..8].copy_from_slice(&(dims as u64).to_le_bytes());
        let refused = Lists::from_bytes(&older, dims).unwrap_err();
        assert!(refused.contains("another format"), "{refused}");
        for cut in [0, 7, 8, 24, 100] {
            assert!(Lists::from_bytes(&bytes[..cut], dims).is_err(), "cut {cut}");
        }
    }

    /// How fast a scan reads codes: `cargo test --release -p memtape-search --lib
    /// lists_scan_speed -- --ignored --nocapture`.
    #[test]
    #[ignore = "a benchmark"]
    fn lists_scan_speed() {
        let dims = 64;
        let n = 1_000_000;
        let all = codes(n, dims, 1, 7);
        let mut lists = Lists::train(&all[..dims], dims, 1);
        lists.add(&all, &vec![0; n]);
        let q = codes(1, dims, 1, 8);
        for _ in 0..3 {
            let started = std::time::Instant::now();
            let got = lists.search(&q, n, 4_000, usize::MAX, &|_| true);
            let ns = started.elapsed().as_nanos() as f64 / n as f64;
            println!("scan of {n} codes: {ns:.1} ns a row ({} kept)", got.len());
        }
        // The kernel alone, over codes read from memory and over codes in the cache: a
        // scan is bound by how fast memory streams (docs/scaling.md, "Inverted lists").
        let hot = &all[..10_000 * dims];
        for (name, codes, rounds) in [("from memory", &all[..], 1), ("in cache", hot, 100)] {
            let started = std::time::Instant::now();
            let mut sum = 0i64;
            for _ in 0..rounds {
                for code in codes.chunks_exact(dims) {
                    sum += i64::from(dot_i8(std::hint::black_box(code), &q));
                }
            }
            let ns = started.elapsed().as_nanos() as f64 / n as f64;
            println!("dot_i8, {name}: {ns:.1} ns a row ({sum})");
        }
        let q4 = Query4::new(&q, &lists.steps, lists.half());
        let packed = &lists.lists[0].codes;
        let hot = &packed[..10_000 * lists.half()];
        for (name, codes, rounds) in [("from memory", &packed[..], 1), ("in cache", hot, 100)] {
            let started = std::time::Instant::now();
            let mut sum = 0i64;
            for _ in 0..rounds {
                for code in codes.chunks_exact(lists.half()) {
                    sum += i64::from(q4.dot(std::hint::black_box(code)));
                }
            }
            let ns = started.elapsed().as_nanos() as f64 / n as f64;
            println!("4-bit dot, {name}: {ns:.1} ns a row ({sum})");
        }
    }

    #[test]
    fn fewer_sample_rows_than_lists_train_as_many_lists_as_rows() {
        let dims = 8;
        let all = codes(5, dims, 2, 6);
        let lists = Lists::train(&all, dims, 100);
        assert_eq!(lists.lists.len(), 5);
        let empty = Lists::train(&[], dims, 10);
        assert_eq!(empty.lists.len(), 1);
        assert!(
            empty
                .search(&all[..dims], 10, 5, usize::MAX, &|_| true)
                .is_empty()
        );
    }
}
