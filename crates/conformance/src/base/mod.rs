//! Base rules, for every store: the job lifecycle, idempotent intake, retention, maintenance
//! and the worker pool.
//!
//! - `lifecycle`: intake to completion, claim order, leases, renew, settles after the lease
//!   ran out, retry, cancel, park and resume, reap, prune, stats;
//! - `intake`: one row per (queue, key), also under contention; all-or-nothing batches;
//!   `enqueue_tx` in the application's own transaction;
//! - `retention`: a property test over every state and clock jumps; pruning under intake;
//! - `maintenance`: the maintenance services' passes and their thread;
//! - `pool`: the worker pool, from exactly-once settles to shutdown and `wait_idle`;
//! - `paused`: paused queues (claims skip them, everything else goes on);
//! - `groups`: one job of a group at a time, in enqueue order, and what blocks a group;
//! - `limits`: rates per queue and per group and a running limit, never broken by a claim;
//! - `backoff`: snoozes (no attempt spent, a cap) and a queue's back-off (closed until its
//!   instant for every handle, lifted early by an operator);
//! - `metrics`: the Prometheus text of the counts, and completions per minute;
//! - `texts`: NUL bytes in stored texts, keys and names, the same on every store;
//! - `schedule` (feature `schedule`): periodic jobs, one run per tick;
//! - `typed_payloads` (feature `serde`): JSON payloads and poison messages.
//!
//! Each rule is named after the behaviour it checks (`base::claim_orders_by_priority_then_run_at_then_id`).

mod backoff;
mod groups;
mod intake;
mod lifecycle;
mod limits;
mod maintenance;
mod metrics;
mod paused;
mod pool;
mod retention;
#[cfg(feature = "schedule")]
mod schedule;
mod texts;
#[cfg(feature = "serde")]
mod typed_payloads;

use crate::harness::Harness;
use crate::Rule;

/// Every rule of this level, the controls included.
pub fn rules<H: Harness>() -> Vec<Rule<H>> {
    let mut rules: Vec<Rule<H>> = Vec::new();
    rules.extend(lifecycle::rules::<H>());
    rules.extend(intake::rules::<H>());
    rules.extend(retention::rules::<H>());
    rules.extend(maintenance::rules::<H>());
    rules.extend(pool::rules::<H>());
    rules.extend(paused::rules::<H>());
    rules.extend(groups::rules::<H>());
    rules.extend(limits::rules::<H>());
    rules.extend(backoff::rules::<H>());
    rules.extend(metrics::rules::<H>());
    rules.extend(texts::rules::<H>());
    #[cfg(feature = "schedule")]
    rules.extend(schedule::rules::<H>());
    #[cfg(feature = "serde")]
    rules.extend(typed_payloads::rules::<H>());
    rules.extend(crate::controls::rules::<H, { crate::controls::BASE }>());
    rules
}
