//! One test's database: a fresh place of the harness, a manual clock at [`T0`], and a queue
//! handle on it, with the shorthands every rule uses.

use crate::harness::{Harness, RawRow};
use fenceq::{Claimed, JobId, ManualClock, NewJob, Queue};
use std::time::Duration;

/// The manual clock's start: 2023-11-14, far from zero so that subtractions stay positive.
pub const T0: i64 = 1_700_000_000_000;
/// The lease the shorthands claim with.
pub const LEASE: Duration = Duration::from_secs(30);
/// How long a rule waits for something another thread must do before it calls it a hang
/// (never a timing assertion: only a bound on a wait that should end at once).
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// One test's database and queue. Derefs to the queue.
pub struct Db<'h, H: Harness> {
    /// The harness it was made by.
    pub harness: &'h H,
    /// Where the database lives (kept alive until the test ends).
    pub place: H::Place,
    /// The queue's clock.
    pub clock: ManualClock,
    /// The queue.
    pub queue: Queue<H::Store>,
}

impl<H: Harness> std::ops::Deref for Db<'_, H> {
    type Target = Queue<H::Store>;
    fn deref(&self) -> &Queue<H::Store> {
        &self.queue
    }
}

impl<'h, H: Harness> Db<'h, H> {
    /// A fresh database with the store's defaults.
    pub fn new(harness: &'h H) -> Self {
        Db::with_max_attempts(harness, None)
    }

    /// A fresh database whose jobs get `max_attempts` attempts unless they say otherwise.
    pub fn with_max_attempts(harness: &'h H, max_attempts: Option<u32>) -> Self {
        let place = harness.create();
        let clock = ManualClock::new(T0);
        let queue = harness.open(&place, &clock, max_attempts);
        Db { harness, place, clock, queue }
    }

    /// A second handle on the same database and clock.
    pub fn reopen(&self) -> Queue<H::Store> {
        self.harness.open(&self.place, &self.clock, None)
    }

    /// Moves the clock on.
    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Enqueues a job with `payload` on queue "q" and returns its id.
    pub fn add(&self, payload: &str) -> JobId {
        self.queue.enqueue(NewJob::new("q", payload.as_bytes().to_vec())).unwrap().id()
    }

    /// Claims the next job of "q" as `worker` under [`LEASE`]; panics when none is due.
    pub fn take(&self, worker: &str) -> Claimed {
        self.queue.claim("q", worker, LEASE).unwrap().expect("a claimable job")
    }

    /// Every row, read without fenceq.
    pub fn snapshot(&self) -> Vec<RawRow> {
        self.harness.snapshot(&self.place)
    }

    /// Rows in `state`, counted without fenceq.
    pub fn count(&self, state: &str) -> i64 {
        self.harness.count(&self.place, state)
    }

    /// Creates the domain table `replies`.
    pub fn create_replies(&self) {
        self.harness.create_replies(&self.place)
    }

    /// Every row of `replies`.
    pub fn replies(&self) -> Vec<(i64, i64, String)> {
        self.harness.replies(&self.place)
    }
}
