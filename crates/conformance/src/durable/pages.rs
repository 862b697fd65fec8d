//! Cursor pages under concurrent acknowledgement and addition: a full pass returns every
//! exhaustion that was unacknowledged when it began exactly once (unless someone
//! acknowledged it before the pass reached it), whatever is acknowledged or added between
//! its pages, and acknowledging an item does not shift the cursor. The first two rules are
//! from `tests/durable_exhaustion.rs`; the seeded one is new.

use super::exhaust_one;
use crate::fixture::Db;
use crate::harness::Harness;
use crate::Rule;
use fenceq::{ClaimToken, Cursor};
use std::collections::{BTreeMap, BTreeSet};

pub(super) fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        a_full_pass_of_pages_returns_every_exhaustion_once_while_others_are_acknowledged_and_added,
        acknowledging_a_middle_item_does_not_shift_the_cursor,
        a_full_pass_returns_every_exhaustion_that_existed_when_it_began_exactly_once_under_a_seeded_interleaving,
    ]
}

fn a_full_pass_of_pages_returns_every_exhaustion_once_while_others_are_acknowledged_and_added<H: Harness>(h: &H) {
    let q = Db::new(h);
    let initial: Vec<ClaimToken> = (0..25).map(|i| exhaust_one(&q, &format!("j{i}"))).collect();
    let mut seen = Vec::new();
    let mut cursor: Option<Cursor> = None;
    let mut round = 0;
    loop {
        let page = q.exhaustions(cursor, 4).unwrap();
        seen.extend(page.items.iter().map(|e| e.token));
        // Meanwhile: acknowledge what this page returned, and add a new exhaustion.
        for item in &page.items {
            q.acknowledge(&item.token).unwrap();
        }
        exhaust_one(&q, &format!("new{round}"));
        round += 1;
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
        assert!(round < 100, "the pass ends");
    }
    let unique: BTreeSet<_> = seen.iter().map(|t| t.id).collect();
    assert_eq!(unique.len(), seen.len(), "no exhaustion returned twice");
    for token in &initial {
        assert!(seen.contains(token), "{token:?} missed");
    }
}

fn acknowledging_a_middle_item_does_not_shift_the_cursor<H: Harness>(h: &H) {
    let q = Db::new(h);
    let tokens: Vec<_> = (0..6).map(|i| exhaust_one(&q, &format!("{i}"))).collect();
    let first = q.exhaustions(None, 3).unwrap();
    assert_eq!(first.items.iter().map(|e| e.token).collect::<Vec<_>>(), tokens[..3]);
    q.acknowledge(&tokens[1]).unwrap();
    q.acknowledge(&tokens[4]).unwrap();
    let second = q.exhaustions(first.next, 3).unwrap();
    assert_eq!(second.items.iter().map(|e| e.token).collect::<Vec<_>>(), vec![tokens[3], tokens[5]]);
    assert_eq!(second.next, None);
}

/// The seeds of the interleavings, each run on a database of its own.
const SEEDS: [u64; 6] = [1, 2, 3, 5, 8, 13];
/// How many exhaustions exist when a pass begins.
const INITIAL: usize = 24;

/// xorshift64*: the interleaving's choices, reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
    }

    /// One of `items`, if any.
    fn pick(&mut self, items: &[i64]) -> Option<i64> {
        (!items.is_empty()).then(|| items[self.below(items.len())])
    }
}

/// One pass of pages of 1 to 5 items, read by the database's handle, while a second handle
/// (another process's operator) acknowledges exhaustions the pass already returned,
/// acknowledges exhaustions it has not reached yet, and adds new ones, 0 to 3 of these
/// between two pages in an order drawn from the seed. No threads: the interleaving is the
/// seed's. Every page is checked against a model of the unacknowledged exhaustions (the
/// first `limit` after the cursor in id order, with a next cursor exactly when the page is
/// full); at the end, every exhaustion of the pass's start that nobody acknowledged before
/// the pass reached it was returned exactly once, with its exact token.
fn a_full_pass_returns_every_exhaustion_that_existed_when_it_began_exactly_once_under_a_seeded_interleaving<
    H: Harness,
>(
    h: &H,
) {
    let (mut acknowledged_ahead, mut acknowledged_behind, mut added, mut added_returned) = (0, 0, 0, 0);
    for seed in SEEDS {
        let q = Db::new(h);
        let other = q.reopen();
        let mut rng = Rng::new(seed);
        // The model: every unacknowledged exhaustion, by id.
        let mut live: BTreeMap<i64, ClaimToken> = BTreeMap::new();
        for i in 0..INITIAL {
            let token = exhaust_one(&q, &format!("start {i}"));
            live.insert(token.id.0, token);
        }
        let at_start = live.clone();
        let mut returned: BTreeMap<i64, ClaimToken> = BTreeMap::new();
        let mut skipped = BTreeSet::new(); // acknowledged before the pass reached them
        let mut new_ids = BTreeSet::new();
        let mut cursor: Option<Cursor> = None;
        for pages in 0.. {
            assert!(pages < 1000, "seed {seed}: the pass ends");
            let limit = 1 + rng.below(5);
            let page = q.exhaustions(cursor, limit as u32).unwrap();
            let after = cursor.map_or(0, |c| c.0);
            let expected: Vec<ClaimToken> = live.range(after + 1..).take(limit).map(|(_, t)| *t).collect();
            let got: Vec<ClaimToken> = page.items.iter().map(|e| e.token).collect();
            assert_eq!(got, expected, "seed {seed}, page {pages}: the first {limit} unacknowledged after {after}");
            let next = (expected.len() == limit).then(|| Cursor(expected[limit - 1].id.0));
            assert_eq!(page.next, next, "seed {seed}, page {pages}: a next cursor exactly when the page is full");
            for token in got {
                assert!(returned.insert(token.id.0, token).is_none(), "seed {seed}: {token:?} returned twice");
                added_returned += usize::from(new_ids.contains(&token.id.0));
            }
            // Meanwhile, on the other handle.
            for _ in 0..rng.below(4) {
                match rng.below(3) {
                    0 => {
                        let behind: Vec<i64> = live.keys().copied().filter(|id| returned.contains_key(id)).collect();
                        if let Some(id) = rng.pick(&behind) {
                            other.acknowledge(&live.remove(&id).unwrap()).unwrap();
                            acknowledged_behind += 1;
                        }
                    }
                    1 => {
                        let ahead: Vec<i64> = live.keys().copied().filter(|id| !returned.contains_key(id)).collect();
                        if let Some(id) = rng.pick(&ahead) {
                            other.acknowledge(&live.remove(&id).unwrap()).unwrap();
                            skipped.insert(id);
                            acknowledged_ahead += 1;
                        }
                    }
                    _ => {
                        let token = exhaust_one(&other, &format!("added after page {pages}"));
                        assert!(live.insert(token.id.0, token).is_none());
                        new_ids.insert(token.id.0);
                        added += 1;
                    }
                }
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let mut promised = 0;
        for (id, token) in &at_start {
            if !skipped.contains(id) {
                assert_eq!(returned.get(id), Some(token), "seed {seed}: an exhaustion of the pass's start was missed");
                promised += 1;
            }
        }
        assert!(promised > 0, "seed {seed}: the pass had something to return");
        // A new pass sees exactly the model's unacknowledged exhaustions.
        let all: Vec<ClaimToken> = q.exhaustions(None, 10_000).unwrap().items.iter().map(|e| e.token).collect();
        assert_eq!(all, live.values().copied().collect::<Vec<_>>(), "seed {seed}: what is left");
    }
    // The seeds exercise every kind of interleaved change (a fixed property of the seeds).
    assert!(
        acknowledged_ahead > 0 && acknowledged_behind > 0 && added > 0 && added_returned > 0,
        "ahead {acknowledged_ahead}, behind {acknowledged_behind}, added {added}, added and returned {added_returned}"
    );
}
