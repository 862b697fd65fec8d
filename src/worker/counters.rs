//! The pool's counters: the atomic ones its threads bump, and the public snapshot
//! [`WorkerPool::counters`](super::WorkerPool::counters) returns.
//!
//! Apart because every thread of the pool counts (workers, dispatcher, heartbeat), and the
//! snapshot is part of the public API.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one pool, as [`WorkerPool::counters`] returns them.
///
/// [`WorkerPool::counters`]: super::WorkerPool::counters
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// Attempts claimed.
    pub claimed: u64,
    /// Attempts completed.
    pub completed: u64,
    /// Attempts sent back to pending.
    pub retried: u64,
    /// Attempts exhausted (by `Outcome::Exhaust`, or a retry with no attempts left).
    pub exhausted: u64,
    /// Attempts marked unknown.
    pub unknown: u64,
    /// Attempts parked.
    pub parked: u64,
    /// Attempts put back without spending an attempt (`Outcome::Snooze`,
    /// `Outcome::RetryAfter`); a snooze past the cap counts as exhausted instead.
    pub snoozed: u64,
    /// Handler panics (each retried).
    pub panicked: u64,
    /// Settles rejected because the attempt no longer owned its job (the fence at work).
    pub stale_settles_rejected: u64,
    /// Lease renewals rejected.
    pub renewals_failed: u64,
    /// Prefetched jobs dropped unstarted because their lease was lost before a worker took
    /// them (a renewal failed, or the lease ran out by the queue's clock), and held jobs a
    /// shutdown could not hand back because another claim had them already: this pool never
    /// started them, and whoever holds or reclaims the job runs it (logged as a warning).
    pub dropped_lost: u64,
    /// Prefetched jobs a shutdown handed back unstarted (see [`ShutdownReport::handed_back`]).
    ///
    /// [`ShutdownReport::handed_back`]: super::ShutdownReport::handed_back
    pub handed_back: u64,
    /// Claimed jobs a worker took up later after their claim than the pool's
    /// [`max_start_delay`](super::WorkerPoolBuilder::max_start_delay) allows: handed back
    /// unstarted (pending again at once, no attempt spent), so that no handler starts later
    /// than its claim's instant (what the queue's rates count) by more than the bound.
    pub released_late: u64,
    /// Outcomes whose text (a retry's error, an exhaustion's, an unknown's evidence, a
    /// park's reason) the store refused: each was settled as the handler said, with the text
    /// escaped to printable ASCII (or, refused again, replaced by a note), and logged at
    /// error level with its job id and the store's error.
    pub texts_replaced: u64,
    /// Settles, claims, hand-backs and heartbeat rounds that failed for another reason,
    /// counted once per job a settle or hand-back failed for, and logged at error level with
    /// the job ids. A job whose settle failed stays running until its lease runs out, then
    /// is claimed again.
    pub errors: u64,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) claimed: AtomicU64,
    pub(super) completed: AtomicU64,
    pub(super) retried: AtomicU64,
    pub(super) exhausted: AtomicU64,
    pub(super) unknown: AtomicU64,
    pub(super) parked: AtomicU64,
    pub(super) snoozed: AtomicU64,
    pub(super) panicked: AtomicU64,
    pub(super) stale_settles_rejected: AtomicU64,
    pub(super) renewals_failed: AtomicU64,
    pub(super) dropped_lost: AtomicU64,
    pub(super) handed_back: AtomicU64,
    pub(super) released_late: AtomicU64,
    pub(super) texts_replaced: AtomicU64,
    pub(super) errors: AtomicU64,
}

impl Counters {
    pub(super) fn snapshot(&self) -> PoolCounters {
        let get = |c: &AtomicU64| c.load(Ordering::SeqCst);
        PoolCounters {
            claimed: get(&self.claimed),
            completed: get(&self.completed),
            retried: get(&self.retried),
            exhausted: get(&self.exhausted),
            unknown: get(&self.unknown),
            parked: get(&self.parked),
            snoozed: get(&self.snoozed),
            panicked: get(&self.panicked),
            stale_settles_rejected: get(&self.stale_settles_rejected),
            renewals_failed: get(&self.renewals_failed),
            dropped_lost: get(&self.dropped_lost),
            handed_back: get(&self.handed_back),
            released_late: get(&self.released_late),
            texts_replaced: get(&self.texts_replaced),
            errors: get(&self.errors),
        }
    }
}

pub(super) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::SeqCst);
}
