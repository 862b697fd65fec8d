//! What a handler sees (`Attempt`) and what it returns (`Outcome`).

use crate::error::Result;
use crate::job::{BackoffScope, ClaimToken, Claimed};
use crate::queue::settle::Settled;
use crate::queue::Queue;
use crate::store::DefaultStore;
use crate::store::Store;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::settle::SettleRules;

/// What a handler decided about its attempt. The pool settles it with the attempt's exact
/// token; a settle rejected as stale is counted and logged, never retried blindly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done: the job is completed.
    Complete,
    /// Try again later: after `after`, or after the pool's retry policy when `None`. When no
    /// attempts are left the job is exhausted instead.
    Retry {
        /// The delay, or `None` for the pool's exponential backoff with jitter.
        after: Option<Duration>,
        /// What went wrong (stored as the job's last error).
        error: String,
    },
    /// Give up now: a durable exhaustion that must be acknowledged.
    Exhaust(String),
    /// The side effect may or may not have happened (a timeout after sending): the job
    /// becomes `unknown` and is never retried automatically. The text is the evidence.
    Unknown(String),
    /// Wait (for an approval, say) for at most `until`; resume with the attempt's token.
    Park {
        /// The longest wait before the reaper exhausts the job: between 1 ms and a year. A
        /// park outside that range exhausts the job at once, with an error that says why.
        until: Duration,
        /// Why it waits.
        reason: String,
    },
    /// Put the job back for later without spending an attempt (River's `JobSnooze`): it is
    /// pending again after the delay, the next claim is a new attempt with a fresh claim id
    /// (this attempt's token is dead), and its budget of attempts is what it was before this
    /// claim. Each snooze counts against the pool's
    /// [`max_snoozes`](crate::WorkerPoolBuilder::max_snoozes): a job snoozed that many times
    /// is exhausted instead, with an error that says so. A delay over a year
    /// ([`MAX_SNOOZE`](crate::MAX_SNOOZE)) exhausts the job at once, with an error that says why.
    Snooze(Duration),
    /// The provider said "too many requests, retry after `delay`" (an HTTP 429 with
    /// `Retry-After`): a snooze of the job (no attempt spent; it counts against the same
    /// cap), and for [`BackoffScope::Queue`] also the queue's back-off until the same
    /// instant, in the same transaction, so that no claim of the queue in any process hands
    /// out anything before it. See [`BackoffScope`] for what each scope closes.
    RetryAfter {
        /// How long the provider asked to wait.
        delay: Duration,
        /// What must wait: the job, its group or the whole queue.
        scope: BackoffScope,
    },
}

impl Outcome {
    /// A retry under the pool's backoff policy.
    pub fn retry(error: impl Into<String>) -> Self {
        Outcome::Retry { after: None, error: error.into() }
    }

    /// A retry after exactly `after`. It spends an attempt; for a provider's "retry after"
    /// that should not, see [`Outcome::provider_backoff`].
    pub fn retry_after(after: Duration, error: impl Into<String>) -> Self {
        Outcome::Retry { after: Some(after), error: error.into() }
    }

    /// [`Outcome::Snooze`]: the job again after `delay`, no attempt spent.
    pub fn snooze(delay: Duration) -> Self {
        Outcome::Snooze(delay)
    }

    /// [`Outcome::RetryAfter`]: a provider's back-off of `delay` for `scope`, no attempt spent.
    ///
    /// ```
    /// # use fenceq::{BackoffScope, NewJob, Outcome, Queue, WorkerPool};
    /// # use std::time::Duration;
    /// # let queue = Queue::open_in_memory()?;
    /// let pool = WorkerPool::builder(queue.clone(), "telegram")
    ///     .handler(|attempt| {
    ///         // send(attempt.payload()) answered 429 with retry_after = 3:
    ///         Outcome::provider_backoff(Duration::from_secs(3), BackoffScope::Queue)
    ///     })
    ///     .start()?;
    /// # pool.shutdown(Duration::from_secs(5))?;
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    pub fn provider_backoff(delay: Duration, scope: BackoffScope) -> Self {
        Outcome::RetryAfter { delay, scope }
    }
}

/// Ownership state shared between an attempt and the pool's heartbeat.
#[derive(Debug)]
pub(crate) struct Lease {
    /// The end of the last lease the database confirmed (claim or renewal).
    pub until: AtomicI64,
    /// Set when a renewal was rejected.
    pub lost: AtomicBool,
    /// Set once the handler's own settle ([`Attempt::complete_with`],
    /// [`Attempt::settle_with`]) committed: the heartbeat stops renewing it, and a renewal
    /// that raced the settle is no lost lease.
    pub settled: AtomicBool,
    /// Set while the handler's own settle runs. Its commit can reach the heartbeat's
    /// connection before it reaches the handler's (on PostgreSQL the row lock is released at
    /// the server's commit, and the heartbeat's renewal that waited on it is answered while
    /// the handler still waits for its own `COMMIT` reply): a renewal refused meanwhile is
    /// the settle's doing, not a lost lease. If the settle fails after all, `OwnershipLost`
    /// marks the attempt lost itself.
    pub settling: AtomicBool,
    /// What the handler's own settle was and did, for the pool's counts (none when the
    /// heartbeat found the job completed by the attempt's token through `Queue::complete_with`).
    pub handler_settle: parking_lot::Mutex<Option<(Outcome, Settled)>>,
    /// Where the claim is in the pool's hands: [`HELD`] until a worker starts it or the pool
    /// lets it go unstarted. It leaves `HELD` once, by one compare-and-swap, so that a worker
    /// about to start it and a shutdown handing it back never both have it.
    pub stage: AtomicU8,
}

/// Claimed and waiting for a worker (prefetched).
pub(crate) const HELD: u8 = 0;
/// A worker started its handler.
pub(crate) const STARTED: u8 = 1;
/// Handed back unstarted by a shutdown.
pub(crate) const HANDED_BACK: u8 = 2;
/// Dropped unstarted: its lease was lost before a worker took it.
pub(crate) const DROPPED: u8 = 3;

impl Lease {
    /// A fresh claim's lease, held until a worker starts it.
    pub(crate) fn held(until: i64) -> Lease {
        Lease {
            until: AtomicI64::new(until),
            lost: AtomicBool::new(false),
            settled: AtomicBool::new(false),
            settling: AtomicBool::new(false),
            handler_settle: parking_lot::Mutex::new(None),
            stage: AtomicU8::new(HELD),
        }
    }

    /// Moves a held claim to `stage`: false when it had left `HELD` already.
    pub(crate) fn leave_held(&self, stage: u8) -> bool {
        self.stage.compare_exchange(HELD, stage, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// True once the pool let the claim go unstarted (handed back or dropped).
    pub(crate) fn let_go(&self) -> bool {
        matches!(self.stage.load(Ordering::SeqCst), HANDED_BACK | DROPPED)
    }
}

/// One claimed attempt, as a handler sees it.
///
/// `owner_lost()` is advisory: it turns true when a renewal failed or when the last lease
/// the database confirmed has run out. The authority is the database check inside
/// [`Attempt::with_ownership`] (and the settle itself).
#[derive(Debug)]
pub struct Attempt<S: Store = DefaultStore> {
    pub(crate) claimed: Claimed,
    pub(crate) lease: Arc<Lease>,
    pub(crate) queue: Queue<S>,
    pub(crate) rules: SettleRules,
}

impl<S: Store> Attempt<S> {
    /// The job's payload.
    pub fn payload(&self) -> &[u8] {
        &self.claimed.payload
    }

    /// The job's idempotency key.
    pub fn key(&self) -> Option<&str> {
        self.claimed.key.as_deref()
    }

    /// The attempt's token (persist it to resume a parked job later).
    pub fn token(&self) -> ClaimToken {
        self.claimed.token
    }

    /// Which attempt this is (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.claimed.token.attempt
    }

    /// The whole claimed job (queue, priority, budget, previous error).
    pub fn job(&self) -> &Claimed {
        &self.claimed
    }

    /// The queue this attempt was claimed from, so that a handler can enqueue follow-up
    /// jobs without capturing a clone of its own: inside [`Attempt::complete_with`] or
    /// [`Attempt::with_ownership`] with [`Queue::enqueue_tx`] (the follow-up commits with the
    /// completion), or outside them with [`Queue::enqueue`].
    ///
    /// ```
    /// # use fenceq::{NewJob, Outcome, Queue, WorkerPool};
    /// # use std::time::Duration;
    /// # let queue = Queue::open_in_memory()?;
    /// let pool = WorkerPool::builder(queue.clone(), "updates")
    ///     .handler(|attempt| {
    ///         let reply = NewJob::new("replies", attempt.payload().to_vec());
    ///         match attempt.complete_with(|tx| attempt.queue().enqueue_tx(tx, reply)) {
    ///             Ok(_) => Outcome::Complete,
    ///             Err(e) => Outcome::retry(e.to_string()),
    ///         }
    ///     })
    ///     .start()?;
    /// queue.enqueue(NewJob::new("updates", b"hi".to_vec()))?;
    /// assert!(pool.wait_idle(Duration::from_secs(10))?);
    /// assert_eq!(queue.stats()?.queue("replies").pending, 1);
    /// # pool.shutdown(Duration::from_secs(5))?;
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    pub fn queue(&self) -> &Queue<S> {
        &self.queue
    }

    /// True once a renewal failed or the last confirmed lease ran out: stop working and
    /// return. Advisory only; see [`Attempt::with_ownership`].
    pub fn owner_lost(&self) -> bool {
        // The queue's now, in the frame the lease was granted in (on PostgreSQL with the
        // system clock, the server's as last measured, not this host's).
        self.lease.lost.load(Ordering::SeqCst) || self.queue.now_ms() >= self.lease.until.load(Ordering::SeqCst)
    }

    /// Completes the job and runs `write` in the same transaction (see
    /// [`Queue::complete_with`]): the handler's domain write and the completion commit
    /// together or not at all, so a crash at any point can never leave the write committed
    /// and the job reclaimable. Jobs added inside with [`Queue::enqueue_tx`] (a follow-up, a
    /// reminder) commit with them.
    ///
    /// After it returned `Ok`, the attempt is settled: the pool counts it completed and
    /// settles nothing more, whatever the handler returns (return `Outcome::Complete`).
    /// On `Err` nothing was written; return the outcome the error calls for.
    ///
    /// ```
    /// # use fenceq::{NewJob, Outcome, Queue, WorkerPool};
    /// # use std::time::Duration;
    /// # let queue = Queue::open_in_memory()?;
    /// # queue.transaction(|tx| Ok(tx.execute_batch("CREATE TABLE replies (update_id INTEGER, text TEXT)")?))?;
    /// let pool = WorkerPool::builder(queue.clone(), "telegram")
    ///     .handler(|attempt| {
    ///         let update = attempt.token().id.0;
    ///         match attempt.complete_with(|tx| {
    ///             tx.execute("INSERT INTO replies VALUES (?1, 'hello')", [update])?;
    ///             Ok(())
    ///         }) {
    ///             Ok(()) => Outcome::Complete,
    ///             Err(e) => Outcome::retry(e.to_string()),
    ///         }
    ///     })
    ///     .start()?;
    /// # queue.enqueue(NewJob::new("telegram", b"hi".to_vec()))?;
    /// # for _ in 0..500 { if pool.counters().completed == 1 { break } std::thread::sleep(Duration::from_millis(10)); }
    /// # assert_eq!(pool.shutdown(Duration::from_secs(5))?.counters.completed, 1);
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Those of [`Queue::complete_with`]; on `OwnershipLost`, `owner_lost()` turns true.
    pub fn complete_with<T>(&self, write: impl FnOnce(&S::Tx) -> Result<T>) -> Result<T> {
        self.settle_with(Outcome::Complete, write)
    }

    /// Settles the attempt as `outcome` says and runs `write` in the same transaction: both
    /// commit or neither, for every outcome ([`Attempt::complete_with`] is this with
    /// [`Outcome::Complete`]). The outcome settles as the pool would settle it when the
    /// handler returned it: a `Retry` without a delay under the pool's retry policy, a
    /// snooze or provider back-off under the pool's `max_snoozes`.
    ///
    /// This is how a handler records a provider's answer and acts on it at once: the row
    /// "got 429 at 12:00:03" and the queue's back-off commit together, so no worker of any
    /// process starts a job the back-off holds once the record is there (with the record in
    /// [`Attempt::with_ownership`] and the back-off returned as the outcome, other workers
    /// could start jobs in between).
    ///
    /// After it returned `Ok`, the attempt is settled: the pool counts it as what it did and
    /// settles nothing more, whatever the handler returns (return the same outcome). On
    /// `Err` nothing was written; return the outcome the error calls for.
    ///
    /// ```
    /// # use fenceq::{BackoffScope, NewJob, Outcome, Queue, WorkerPool};
    /// # use std::time::Duration;
    /// # let queue = Queue::open_in_memory()?;
    /// # queue.transaction(|tx| Ok(tx.execute_batch("CREATE TABLE sends (job INTEGER, answer TEXT)")?))?;
    /// let pool = WorkerPool::builder(queue.clone(), "telegram")
    ///     .handler(|attempt| {
    ///         // The provider answered 429 with Retry-After: 3.
    ///         let back_off = Outcome::provider_backoff(Duration::from_secs(3), BackoffScope::Queue);
    ///         let job = attempt.token().id.0;
    ///         match attempt.settle_with(back_off.clone(), |tx| {
    ///             tx.execute("INSERT INTO sends VALUES (?1, '429')", [job])?;
    ///             Ok(())
    ///         }) {
    ///             Ok(()) => back_off,
    ///             Err(e) => Outcome::retry(e.to_string()),
    ///         }
    ///     })
    ///     .start()?;
    /// # queue.enqueue(NewJob::new("telegram", b"hi".to_vec()))?;
    /// # for _ in 0..500 { if pool.counters().snoozed == 1 { break } std::thread::sleep(Duration::from_millis(10)); }
    /// # assert_eq!(pool.shutdown(Duration::from_secs(5))?.counters.snoozed, 1);
    /// # assert!(queue.queue_backoff("telegram")?.is_some());
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Those of [`Queue::complete_with`] and of the settle `outcome` stands for
    /// ([`Queue::retry`], [`Queue::snooze`], [`Queue::exhaust`], [`Queue::mark_unknown`],
    /// [`Queue::park`]); on `OwnershipLost`, `owner_lost()` turns true. A park or snooze
    /// whose length the store refuses is settled as an exhaustion that says why, as the
    /// pool does with such an outcome.
    pub fn settle_with<T>(&self, outcome: Outcome, write: impl FnOnce(&S::Tx) -> Result<T>) -> Result<T> {
        let settle = self.rules.settle_of(&self.claimed.token, &outcome);
        self.lease.settling.store(true, Ordering::SeqCst);
        let result = self.noting_loss(self.queue.settle_with(&self.claimed.token, &settle, write));
        let result = result.map(|(settled, value)| {
            *self.lease.handler_settle.lock() = Some((outcome, settled));
            self.lease.settled.store(true, Ordering::SeqCst);
            value
        });
        self.lease.settling.store(false, Ordering::SeqCst);
        result
    }

    /// Runs a domain write that commits only while this attempt still owns the job (see
    /// [`Queue::with_ownership`]). On `OwnershipLost`, `owner_lost()` turns true as well.
    ///
    /// The write's commit extends the lease (see [`Queue::with_ownership`]), and the attempt
    /// learns the new end, so a write that outlasted the nominal lease does not make the
    /// attempt lose its job: it can still settle.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::with_ownership`].
    pub fn with_ownership<T>(&self, write: impl FnOnce(&S::Tx) -> Result<T>) -> Result<T> {
        let (value, until) = self.noting_loss(self.queue.owned_write(&self.claimed.token, write))?;
        self.lease.until.fetch_max(until, Ordering::SeqCst);
        Ok(value)
    }

    /// Passes `result` on; an `OwnershipLost` turns `owner_lost()` true first.
    fn noting_loss<T>(&self, result: Result<T>) -> Result<T> {
        if matches!(result, Err(crate::Error::OwnershipLost { .. })) {
            self.lease.lost.store(true, Ordering::SeqCst);
        }
        result
    }
}
