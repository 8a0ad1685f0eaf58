//! Merging the BM25 and vector lists into one ranking.

use std::collections::HashMap;

use crate::{Fusion, Hit, Ranked};

/// One retriever's list: `(row, score)` pairs, best first.
pub type List = Vec<(usize, f32)>;

/// The rows of both lists, each once with its score, best first. The lists must come from
/// the same retriever and query, so their scores compare.
pub fn union(a: List, b: List) -> List {
    if a.is_empty() {
        return b;
    }
    let mut seen: std::collections::HashSet<usize> = a.iter().map(|(row, _)| *row).collect();
    let mut out = a;
    out.extend(b.into_iter().filter(|(row, _)| seen.insert(*row)));
    out.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    out
}

/// Hits for `rows` found by BM25 only. A hit's score is its BM25 score relative to the
/// best one (1 for the best): FTS5 scores terms found in most documents close to zero, so
/// raw scores of a small index all look like 0; the rank keeps the raw score.
pub fn only_bm25(list: &List) -> Vec<(usize, Hit)> {
    let best = list.iter().map(|x| x.1).fold(0.0f32, f32::max);
    let mut hits = single(list, |hit, ranked| hit.bm25 = Some(ranked));
    if best > 0.0 {
        for (_, hit) in &mut hits {
            hit.score /= best;
        }
    }
    hits
}

/// Hits for `rows` found by vector search only.
pub fn only_vector(list: &List) -> Vec<(usize, Hit)> {
    single(list, |hit, ranked| hit.vector = Some(ranked))
}

fn single(list: &List, set: impl Fn(&mut Hit, Ranked)) -> Vec<(usize, Hit)> {
    list.iter()
        .enumerate()
        .map(|(i, &(row, score))| {
            let mut hit = blank(score);
            set(&mut hit, Ranked { rank: i + 1, score });
            (row, hit)
        })
        .collect()
}

fn blank(score: f32) -> Hit {
    Hit {
        id: memtape_core::EntryId(0),
        score,
        bm25: None,
        vector: None,
    }
}

/// Normalises `score` over `list` between `zero` (a score that means no match) and the
/// best score in the list (1), so every hit in the list keeps a share above 0; 1 for all
/// when nothing in the list is above `zero`.
fn normalised(list: &List, zero: f32) -> impl Fn(f32) -> f32 {
    let max = list.iter().map(|x| x.1).fold(f32::MIN, f32::max);
    move |s| {
        if max > zero {
            ((s - zero) / (max - zero)).clamp(0.0, 1.0)
        } else {
            1.0
        }
    }
}

/// Fuses the two lists; the result is ordered best first (ties by row, i.e. older first).
/// `floor` is the vector similarity that means no match (weighted fusion measures vector
/// scores from it; BM25 scores from 0).
pub fn fuse(bm25: &List, vector: &List, fusion: Fusion, floor: f32) -> Vec<(usize, Hit)> {
    let mut hits: HashMap<usize, Hit> = HashMap::new();
    for (i, &(row, score)) in bm25.iter().enumerate() {
        hits.entry(row).or_insert_with(|| blank(0.0)).bm25 = Some(Ranked { rank: i + 1, score });
    }
    for (i, &(row, score)) in vector.iter().enumerate() {
        hits.entry(row).or_insert_with(|| blank(0.0)).vector = Some(Ranked { rank: i + 1, score });
    }
    let (nb, nv) = (normalised(bm25, 0.0), normalised(vector, floor));
    // Adaptive fusion's weights for this query.
    let adapted = match fusion {
        Fusion::Adaptive { bm25_weight } => {
            let (b, v) = (
                bm25_weight * decisiveness(bm25, &nb),
                (1.0 - bm25_weight) * decisiveness(vector, &nv),
            );
            if b + v > 0.0 {
                b / (b + v)
            } else {
                bm25_weight
            }
        }
        _ => 0.0,
    };
    for hit in hits.values_mut() {
        hit.score = match fusion {
            Fusion::Rrf { k, bm25_weight } => {
                let part = |r: Option<Ranked>| r.map_or(0.0, |r| 1.0 / (k + r.rank as f32));
                bm25_weight * part(hit.bm25) + (1.0 - bm25_weight) * part(hit.vector)
            }
            Fusion::Weighted { bm25_weight } => {
                bm25_weight * hit.bm25.map_or(0.0, |r| nb(r.score))
                    + (1.0 - bm25_weight) * hit.vector.map_or(0.0, |r| nv(r.score))
            }
            Fusion::Adaptive { .. } => {
                adapted * hit.bm25.map_or(0.0, |r| nb(r.score))
                    + (1.0 - adapted) * hit.vector.map_or(0.0, |r| nv(r.score))
            }
        };
    }
    let mut out: Vec<(usize, Hit)> = hits.into_iter().collect();
    rank(&mut out);
    out
}

/// How much a list's best hit stands out: 1 minus the mean normalised score of its hits 2
/// to 10 (1 for a list of one hit, 0 for an empty one).
fn decisiveness(list: &List, normalise: &impl Fn(f32) -> f32) -> f32 {
    match list.len() {
        0 => 0.0,
        1 => 1.0,
        n => {
            let rest = &list[1..n.min(10)];
            1.0 - rest.iter().map(|(_, s)| normalise(*s)).sum::<f32>() / rest.len() as f32
        }
    }
}

/// Orders hits best first; equal scores keep row (tape) order.
pub fn rank(hits: &mut [(usize, Hit)]) {
    hits.sort_by(|a, b| b.1.score.total_cmp(&a.1.score).then(a.0.cmp(&b.0)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rrf_rewards_agreement_between_the_lists() {
        let bm25 = vec![(1, 9.0), (2, 5.0), (5, 4.0), (6, 3.0), (3, 1.0)];
        let vector = vec![(3, 0.9), (2, 0.8), (4, 0.7)];
        let fused = fuse(&bm25, &vector, Fusion::default(), 0.0);
        let rows: Vec<usize> = fused.iter().map(|x| x.0).collect();
        // 2 is second in both lists; 3 is first in one and last in the other; 1 is first
        // in one list only.
        assert_eq!(rows[..3], [2, 3, 1]);
        assert_eq!(fused[0].1.bm25.map(|r| r.rank), Some(2));
        assert_eq!(fused[0].1.vector.map(|r| r.rank), Some(2));
    }

    #[test]
    fn weighted_fusion_follows_normalised_scores_and_weights() {
        let bm25 = vec![(1, 10.0), (2, 0.0)];
        let vector = vec![(2, 0.9), (1, 0.1)];
        let rows = |w| -> Vec<usize> {
            fuse(&bm25, &vector, Fusion::Weighted { bm25_weight: w }, 0.0)
                .iter()
                .map(|x| x.0)
                .collect()
        };
        assert_eq!(rows(0.8), [1, 2]);
        assert_eq!(rows(0.2), [2, 1]);
    }

    #[test]
    fn adaptive_fusion_trusts_the_list_whose_best_hit_stands_out() {
        // BM25's best hit stands out (the rest score 1 of 10); the vector list's ten hits
        // score alike, so at equal weights BM25's choice wins, where weighted fusion ties
        // it with the vector list's first.
        let bm25: List = std::iter::once((1, 10.0))
            .chain((2..11).map(|row| (row, 1.0)))
            .collect();
        let vector: List = std::iter::once((20, 0.9))
            .chain((21..30).map(|row| (row, 0.89)))
            .collect();
        let score = |fusion, row| {
            fuse(&bm25, &vector, fusion, 0.0)
                .into_iter()
                .find(|(r, _)| *r == row)
                .map(|(_, hit)| hit.score)
                .unwrap()
        };
        let adaptive = Fusion::Adaptive { bm25_weight: 0.5 };
        assert!(score(adaptive, 1) > 2.0 * score(adaptive, 20));
        let weighted = Fusion::Weighted { bm25_weight: 0.5 };
        assert_eq!(score(weighted, 1), score(weighted, 20));
        assert_eq!(decisiveness(&Vec::new(), &|s| s), 0.0);
        assert_eq!(decisiveness(&vec![(1, 3.0)], &|s| s), 1.0);
    }
}
