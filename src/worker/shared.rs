//! The state the pool's threads share: the settings they run with, the handler, the
//! counters, the in-flight claims the heartbeat renews, the stopping flag and the count of
//! settling rounds the waits watch.
//!
//! Apart so that the threads' files (dispatcher, workers, settle path, heartbeat) depend on it
//! and not on the pool that starts them.

use super::attempt::{Attempt, Lease, Outcome};
use super::counters::Counters;
use super::settle::SettleRules;
use crate::job::{ClaimToken, RetryPolicy};
use crate::queue::Queue;
use crate::store::Store;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64};
use std::sync::Arc;
use std::time::Duration;

pub(super) type Handler<S> = Arc<dyn Fn(&mut Attempt<S>) -> Outcome + Send + Sync>;

/// A pool's settings as its builder checked them: what [`WorkerPool`](super::WorkerPool)
/// starts with.
pub(super) struct PoolSettings<S: Store> {
    pub(super) queue: Queue<S>,
    pub(super) queue_name: String,
    pub(super) workers: usize,
    pub(super) lease: Duration,
    pub(super) renew_every: Duration,
    pub(super) poll_interval: Duration,
    pub(super) prefetch: Option<usize>,
    pub(super) rounds_in_flight: usize,
    pub(super) worker_id: String,
    pub(super) retry_policy: RetryPolicy,
    pub(super) max_snoozes: u32,
    pub(super) max_start_delay: Option<Duration>,
    pub(super) handler: Handler<S>,
}

/// State shared by the pool's threads.
pub(super) struct Shared<S: Store> {
    pub(super) queue: Queue<S>,
    pub(super) queue_name: String,
    pub(super) lease: Duration,
    /// What its outcomes settle with: the retry policy and the cap of snoozes per job.
    pub(super) rules: SettleRules,
    pub(super) handler: Handler<S>,
    pub(super) counters: Counters,
    /// Claimed and not yet settled, by claim: the pool may hold a new claim of a job whose
    /// older attempt (its lease expired) is still running in a stalled worker.
    pub(super) in_flight: Mutex<HashMap<ClaimToken, Arc<Lease>>>,
    /// Set when a shutdown begins: from then on no worker starts a held job, and the
    /// dispatcher claims nothing more and hands the held jobs back.
    pub(super) stopping: AtomicBool,
    /// Dispatcher rounds that settled attempts, so far; `round_done` is notified after each.
    pub(super) rounds: Mutex<u64>,
    pub(super) round_done: parking_lot::Condvar,
    pub(super) poll_interval: Duration,
    /// The longest a claimed job may wait for its handler (ms), if bounded.
    pub(super) max_start_delay_ms: Option<i64>,
    /// The latest end (ms, the queue's clock) of a queue back-off this pool's outcomes
    /// stored: an idle dispatcher sleeps no longer than until then. 0 for none.
    pub(super) backoff_until: AtomicI64,
}
