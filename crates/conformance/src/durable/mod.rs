//! The *durable* level: a job out of attempts is an unacknowledged terminal record that keeps
//! its exact token, survives a restart, and is prunable only after an acknowledgement with
//! that exact token; an unknown outcome waits for a resolution with its exact token; cursor
//! pages make a full pass over the records while others are acknowledged and added.
//!
//! - `exhaustion`: exhaustion records and their tokens, exact and idempotent
//!   acknowledgement, what retention may prune, replay, unknown outcomes and their
//!   resolution (with the reconciler's own write in the same transaction), the reaper's
//!   exhaustions;
//! - `attempts`: the history of attempts, one record per attempt that did not complete
//!   (every kind of settle, the reaper's and a reclaiming claim's take-over of an expired
//!   lease, the expiry of a park), none for a completion or a refused settle, kept across
//!   replay and resolution and pruned with its job;
//! - `pages`: cursor pages under concurrent acknowledgement and addition, the documented
//!   ordering (ids ascending after the cursor) checked page by page against a model in a
//!   seeded interleaving;
//! - `model`: the reference model against the store, over the fuzz corpus and generated
//!   histories (it drives exhaustion pages, acknowledgement, replay and resolution, so a
//!   store below this level cannot pass it).
//!
//! The level also runs the durable side of the [controls](crate::controls).

use crate::fixture::LEASE;
use crate::harness::Harness;
use crate::Rule;
use fenceq::store::Store;
use fenceq::{ClaimToken, NewJob, Queue};

mod attempts;
mod exhaustion;
mod model;
mod pages;

/// Every rule of this level, the controls included.
pub fn rules<H: Harness>() -> Vec<Rule<H>> {
    let mut rules: Vec<Rule<H>> = Vec::new();
    rules.extend(exhaustion::rules::<H>());
    rules.extend(attempts::rules::<H>());
    rules.extend(pages::rules::<H>());
    rules.extend(model::rules::<H>());
    rules.extend(crate::controls::rules::<H, { crate::controls::DURABLE }>());
    rules
}

/// Enqueues a one-attempt job with `payload` on "q", claims it and exhausts it with the
/// reason "`payload` failed"; returns its token. Every other job of "q" must be settled.
fn exhaust_one<S: Store>(q: &Queue<S>, payload: &str) -> ClaimToken {
    let id = q.enqueue(NewJob::new("q", payload.as_bytes().to_vec()).max_attempts(1)).unwrap().id();
    let job = q.claim("q", "w", LEASE).unwrap().expect("a claimable job");
    assert_eq!(job.id(), id, "the job just enqueued is the one claimed");
    q.exhaust(&job.token(), &format!("{payload} failed")).unwrap();
    job.token()
}
