//! The *fenced* level: every token-taking call compares the full identity
//! {id, attempt, claim_id} of a claim, so a stale or forged token never writes, whatever it
//! shares with the current one.
//!
//! - `identity`: the full identity on `renew`, `owns` and every settle; claim ids never
//!   reused; a replay or a pruned and re-enqueued key brings back an (id, attempt) pair but
//!   never the old claim; settled jobs stay settled; ids are never reused;
//! - `stale_workers`: deterministic stale-worker scenarios on the manual clock: expiry,
//!   reap and reclaim, reclaim without a reaper, an admin replay, a pruned max id, a settle
//!   racing the reaper in both orders, the reaper's exhaustion of an abandoned last attempt;
//! - `ownership`: ownership inside the caller's transaction (`with_ownership`,
//!   `complete_with`, the store's `owns` in a transaction of the application's own): the
//!   domain write and the fence commit together or not at all.
//!
//! The level also runs the fenced side of the [controls](crate::controls).

use crate::harness::Harness;
use crate::Rule;

mod identity;
mod ownership;
mod stale_workers;

/// Every rule of this level, the controls included.
pub fn rules<H: Harness>() -> Vec<Rule<H>> {
    let mut rules: Vec<Rule<H>> = Vec::new();
    rules.extend(identity::rules::<H>());
    rules.extend(stale_workers::rules::<H>());
    rules.extend(ownership::rules::<H>());
    rules.extend(crate::controls::rules::<H, { crate::controls::FENCED }>());
    rules
}
