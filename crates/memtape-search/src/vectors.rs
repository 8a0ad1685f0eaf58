//! Nearest-neighbour search over unit vectors held in memory.
//!
//! Small collections are searched exactly. Large ones are first scanned with one-bit
//! codes (the sign of each dimension, compared by Hamming distance: 48 bytes per MiniLM
//! vector, so a million fit in 48 MB and scan in milliseconds), and the best candidates
//! are then rescored exactly. The scan needs no training or graph, takes filters for free
//! and never goes stale, which suits an index that grows by appends.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Vectors stored row by row, with their one-bit codes.
#[derive(Debug, Default)]
pub struct Vectors {
    dim: usize,
    words: usize,
    values: Vec<f32>,
    codes: Vec<u64>,
}

/// A scored row, ordered so that a `BinaryHeap` of them keeps the worst on top.
#[derive(Clone, Copy, Debug)]
struct Scored<T> {
    score: T,
    row: usize,
}

impl<T: PartialOrd> PartialEq for Scored<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<T: PartialOrd> Eq for Scored<T> {}
impl<T: PartialOrd> PartialOrd for Scored<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T: PartialOrd> Ord for Scored<T> {
    /// Higher scores sort first, so the heap's top is the lowest score kept; ties prefer
    /// the earlier row.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .partial_cmp(&self.score)
            .unwrap_or(Ordering::Equal)
            .then(self.row.cmp(&other.row))
    }
}

/// Keeps the `k` best (highest-scoring) rows seen.
fn top_k<T: PartialOrd + Copy>(
    k: usize,
    scored: impl Iterator<Item = (usize, T)>,
) -> Vec<(usize, T)> {
    let mut heap: BinaryHeap<Scored<T>> = BinaryHeap::with_capacity(k + 1);
    for (row, score) in scored {
        if heap.len() < k {
            heap.push(Scored { score, row });
        } else if let Some(worst) = heap.peek()
            && score > worst.score
        {
            heap.pop();
            heap.push(Scored { score, row });
        }
    }
    let mut out: Vec<(usize, T)> = heap.into_iter().map(|s| (s.row, s.score)).collect();
    out.sort_by(|a, b| {
        b.1.partial_cmp(&a.1)
            .unwrap_or(Ordering::Equal)
            .then(a.0.cmp(&b.0))
    });
    out
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
fn encode(v: &[f32], words: usize, out: &mut Vec<u64>) {
    let start = out.len();
    out.resize(start + words, 0);
    for (i, x) in v.iter().enumerate() {
        if *x > 0.0 {
            out[start + i / 64] |= 1 << (i % 64);
        }
    }
}

impl Vectors {
    /// An empty collection of `dim`-long vectors.
    pub fn new(dim: usize) -> Self {
        Vectors {
            dim,
            words: dim.div_ceil(64),
            values: Vec::new(),
            codes: Vec::new(),
        }
    }

    /// How many vectors are held.
    pub fn len(&self) -> usize {
        self.values.len() / self.dim.max(1)
    }

    /// Whether no vector is held.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Adds a vector as the next row. The caller guarantees its length is `dim`.
    pub fn push(&mut self, v: &[f32]) {
        debug_assert_eq!(v.len(), self.dim);
        self.values.extend_from_slice(v);
        encode(v, self.words, &mut self.codes);
    }

    /// Row `row`'s vector.
    pub fn row(&self, row: usize) -> &[f32] {
        &self.values[row * self.dim..(row + 1) * self.dim]
    }

    /// The `k` rows most similar to `query` (by cosine; vectors are unit length) among
    /// those `allowed` accepts, best first. Exact when at most `exact_limit` rows are held;
    /// otherwise one-bit codes pick `oversample × k` candidates that are rescored exactly.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        exact_limit: usize,
        oversample: usize,
        allowed: impl Fn(usize) -> bool,
    ) -> Vec<(usize, f32)> {
        if k == 0 || self.is_empty() {
            return Vec::new();
        }
        let rows = 0..self.len();
        if self.len() <= exact_limit {
            return top_k(
                k,
                rows.filter(|r| allowed(*r))
                    .map(|r| (r, dot(self.row(r), query))),
            );
        }
        let mut code = Vec::with_capacity(self.words);
        encode(query, self.words, &mut code);
        // Hamming distances of every admitted row (u16::MAX for the rest), then the
        // smallest distance threshold that admits enough candidates: a counting select,
        // linear in the rows, with no heap.
        let distances: Vec<u16> = (0..self.len())
            .map(|r| {
                if !allowed(r) {
                    return u16::MAX;
                }
                let c = &self.codes[r * self.words..(r + 1) * self.words];
                c.iter()
                    .zip(&code)
                    .map(|(a, b)| (a ^ b).count_ones())
                    .sum::<u32>() as u16
            })
            .collect();
        let wanted = k.saturating_mul(oversample);
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
        let candidates = distances
            .iter()
            .enumerate()
            .filter(|(_, d)| usize::from(**d) <= threshold)
            .map(|(r, _)| (r, dot(self.row(r), query)));
        top_k(k, candidates)
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
        base.iter().for_each(|v| vectors.push(v));
        // A query close to row 42: both paths must rank it first.
        let query = unit(
            &base[42]
                .iter()
                .map(|x| x + (rng.f32() - 0.5) * 0.05)
                .collect::<Vec<_>>(),
        );
        let exact = vectors.search(&query, 5, usize::MAX, 1, |_| true);
        let quantized = vectors.search(&query, 5, 0, 10, |_| true);
        assert_eq!(exact[0].0, 42);
        assert_eq!(quantized[0].0, 42);
        assert!(
            (exact[0].1 - quantized[0].1).abs() < 1e-6,
            "rescoring is exact"
        );
        // Filters apply on both paths.
        let filtered = vectors.search(&query, 5, 0, 10, |r| r != 42);
        assert!(filtered.iter().all(|(r, _)| *r != 42));
        assert_eq!(filtered.len(), 5);
    }

    #[test]
    fn top_k_breaks_ties_by_row() {
        let got = top_k(2, [(3, 1.0f32), (1, 1.0), (2, 0.5)].into_iter());
        assert_eq!(got, vec![(1, 1.0), (3, 1.0)]);
    }
}
