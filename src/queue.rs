//! The `Queue` handle: open, intake, claims, settles, exhaustions, maintenance passes.

use crate::clock::duration_ms;
use crate::config::{self, QueueBuilder, Retention, MAX_KEY_LEN, MAX_LEASE, MAX_NAME_LEN};
use crate::error::{Error, Result};
use crate::job::{
    Backoff, ClaimToken, Claimed, Cursor, Enqueued, Exhaustion, Job, JobId, JobState, NewJob, Page, Resolution,
    Retried, UnknownOutcome,
};
use crate::operator::Operator;
use crate::report::{CheckpointReport, CommitStats, PruneReport, ReapReport, Stats};
use crate::store::jobs::{self, *};
use crate::store::Store;
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use rusqlite::Connection;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Longest error, reason or evidence text stored; longer texts are cut (at a char boundary).
pub const MAX_ERROR_LEN: usize = 4096;
/// Most jobs one `claim_batch` or page may return.
pub const MAX_BATCH: u32 = 10_000;
/// How long a checkpoint waits for readers to leave the old WAL. Defaults to 500 ms: longer
/// than a typical read transaction, short enough that writers never stall long.
pub const DEFAULT_CHECKPOINT_PATIENCE: Duration = Duration::from_millis(500);
/// Rows changed per reaper transaction.
const REAP_BATCH: u32 = 1_000;

/// A handle to one queue database: cheap to clone, `Send + Sync`, shared by threads.
///
/// ```
/// use fenceq::{NewJob, Queue};
/// use std::time::Duration;
/// let queue = Queue::open_in_memory()?;
/// queue.enqueue(NewJob::new("telegram", b"hello".to_vec()).key("update:1"))?;
/// let job = queue.claim("telegram", "worker-1", Duration::from_secs(30))?.expect("a due job");
/// queue.complete(&job.token())?;
/// # Ok::<(), fenceq::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Queue {
    pub(crate) store: Arc<Store>,
    wakers: Arc<Mutex<Vec<Waker>>>,
}

/// A worker pool's wake-up channel for one queue.
type Waker = (String, Sender<()>);

const _: fn() = || {
    fn check<T: Clone + Send + Sync>() {}
    check::<Queue>();
};

impl Queue {
    /// Opens (creating if needed) the queue database at `path` with default settings.
    ///
    /// # Errors
    ///
    /// `NotADatabase`, `SchemaTooNew` (the file is left untouched), `ReadOnly`, `Busy`;
    /// `Io` when the file's directory cannot be created, `Pool` when the reader connections
    /// cannot be opened.
    pub fn open(path: impl AsRef<Path>) -> Result<Queue> {
        Queue::builder().path(path.as_ref()).open()
    }

    /// An in-memory queue (one shared connection), for tests and throwaway work.
    ///
    /// # Errors
    ///
    /// No input can make it fail (the default settings are valid): only an SQLite failure
    /// creating the database, such as `OutOfMemory`.
    pub fn open_in_memory() -> Result<Queue> {
        Queue::builder().open()
    }

    /// A builder for every setting; see [`QueueBuilder`].
    pub fn builder() -> QueueBuilder {
        QueueBuilder::default()
    }

    pub(crate) fn from_builder(builder: QueueBuilder) -> Result<Queue> {
        Ok(Queue { store: Arc::new(Store::open(&builder)?), wakers: Arc::default() })
    }

    pub(crate) fn clock(&self) -> Arc<dyn crate::clock::Clock> {
        self.store.clock.clone()
    }

    /// The clock's now, in ms since the epoch.
    pub fn now_ms(&self) -> i64 {
        self.store.now()
    }

    // ---------------------------------------------------------------- intake

    /// Adds a job, or finds the existing job with the same queue and key.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name is empty, longer than 128 bytes or contains a NUL
    /// byte, the key is empty or longer than 512 bytes, the payload is empty or larger than
    /// the queue's payload limit ([`QueueBuilder::max_payload`], 1 MiB by default), the
    /// attempt budget is outside 1..=10,000, the delay is over a hundred years, or an
    /// application trigger on `fenceq_jobs` ignored the insert. A duplicate key is not an
    /// error (`Enqueued::Duplicate`). Storage errors: `Busy`, `StorageFull`, `ReadOnly`;
    /// `NestedWrite` from inside a closure holding the queue's transaction (or an in-memory
    /// queue's `with_connection`).
    pub fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        self.check_job(&job)?;
        let queue_name = job.queue.clone();
        let store = self.store.clone();
        let enqueued = self.store.submit(move |tx| insert(&store, tx, &job))?;
        self.wake(&queue_name);
        Ok(enqueued)
    }

    /// Adds many jobs in one transaction: all of them or, on any error, none.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when any one job would be refused by [`Queue::enqueue`] (queue name
    /// 1..=128 bytes without a NUL byte, key 1..=512 bytes, payload within the payload
    /// limit, attempts 1..=10,000, delay at most a hundred years, insert not ignored by a
    /// trigger): then no job is added. Storage errors: `Busy`, `StorageFull`, `ReadOnly`;
    /// `NestedWrite` from inside a closure holding the queue's transaction (or an in-memory
    /// queue's `with_connection`).
    pub fn enqueue_batch(&self, jobs: impl IntoIterator<Item = NewJob>) -> Result<Vec<Enqueued>> {
        let jobs: Vec<NewJob> = jobs.into_iter().collect();
        for job in &jobs {
            self.check_job(job)?;
        }
        let mut queues: Vec<String> = jobs.iter().map(|j| j.queue.clone()).collect();
        queues.sort_unstable();
        queues.dedup();
        let store = self.store.clone();
        let results = self.store.submit(move |tx| jobs.iter().map(|job| insert(&store, tx, job)).collect())?;
        queues.iter().for_each(|q| self.wake(q));
        Ok(results)
    }

    /// Adds a job inside a transaction that is already open (the outbox pattern): the job
    /// exists exactly when that transaction's commit does.
    ///
    /// The way to share the file is the queue's own writer: call this inside
    /// [`Queue::transaction`], [`Queue::with_ownership`] or [`Queue::complete_with`] (and a
    /// pool handler's [`Attempt::with_ownership`](crate::Attempt::with_ownership)) with the
    /// connection the closure gets. The job then commits or rolls back with the rest, and
    /// this process's pools of its queue are woken once the commit is done.
    ///
    /// A transaction on a connection of the application's own (`BEGIN IMMEDIATE` on the same
    /// file) works too, but it is another writer of the file: while it is open, this
    /// process's queue writes wait for it in SQLite's busy handler and fail with `Busy` after
    /// the busy timeout, and pools notice its jobs only at their next poll.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name is empty, longer than 128 bytes or contains a NUL
    /// byte, the key is empty or longer than 512 bytes, the payload is empty or larger than
    /// the queue's payload limit (1 MiB by default), the attempt budget is outside
    /// 1..=10,000, the delay is over a hundred years, or a trigger ignored the insert; the
    /// SQLite error of the insert otherwise. A transaction that is not open is the caller's
    /// bug: the insert then commits on its own.
    pub fn enqueue_tx(&self, tx: &Connection, job: NewJob) -> Result<Enqueued> {
        self.check_job(&job)?;
        let enqueued = insert(&self.store, tx, &job)?;
        if crate::store::in_write() {
            crate::store::note_enqueued_in_write(&job.queue);
        }
        Ok(enqueued)
    }

    /// Runs `f` in a `BEGIN IMMEDIATE` transaction on the queue's own writer and commits
    /// what it did: the application's domain writes beside the queue, and jobs added with
    /// [`Queue::enqueue_tx`] (the outbox pattern, without a second writer of the file).
    /// Returning `Err` (or panicking) rolls everything back. Pools of the queues it enqueued
    /// to are woken after the commit.
    ///
    /// ```
    /// # use fenceq::{NewJob, Queue};
    /// let queue = Queue::open_in_memory()?;
    /// queue.transaction(|tx| {
    ///     tx.execute_batch("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY)")?;
    ///     tx.execute("INSERT INTO orders (id) VALUES (7)", [])?;
    ///     queue.enqueue_tx(tx, NewJob::new("emails", b"order 7 confirmed".to_vec()).key("order:7"))
    /// })?;
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// The closure holds the file's only write lock: keep it short, since no lease of this
    /// process can be renewed while it runs. Inside it, use the connection it gets, never
    /// the queue's own write methods.
    ///
    /// # Errors
    ///
    /// The closure's own error; `NestedWrite` for a queue write from inside it (or for this
    /// call from inside another queue closure); `TransactionLost` when SQLite rolled the
    /// transaction back while the closure carried on; `Busy` when another process held the
    /// write lock past the busy timeout; `StorageFull`, `ReadOnly` when the database cannot
    /// be written.
    pub fn transaction<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.write_waking(f)
    }

    /// [`Store::write`], then wakes the pools of the queues `enqueue_tx` added to in it.
    pub(crate) fn write_waking<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let result = self.store.write(f);
        let queues = crate::store::take_enqueued_in_write();
        if result.is_ok() {
            queues.iter().for_each(|q| self.wake(q));
        }
        result
    }

    fn check_job(&self, job: &NewJob) -> Result<()> {
        check_name("queue name", &job.queue)?;
        if let Some(key) = &job.key {
            check_key(key)?;
        }
        let limit = self.store.settings.max_payload;
        if job.payload.is_empty() || job.payload.len() > limit {
            return Err(Error::invalid(
                "payload",
                format!("{} bytes is not in 1..={limit} (the queue's payload limit)", job.payload.len()),
            ));
        }
        if let Some(attempts) = job.max_attempts {
            config::check_attempts(attempts)?;
        }
        if job.delay > Duration::from_secs(100 * 365 * 24 * 3600) {
            return Err(Error::invalid("delay", "longer than a hundred years"));
        }
        Ok(())
    }

    /// Registers a wake-up channel for `queue` (the worker pool's dispatcher).
    pub(crate) fn subscribe(&self, queue: &str) -> Receiver<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.wakers.lock().push((queue.to_string(), tx));
        rx
    }

    fn wake(&self, queue: &str) {
        let mut wakers = self.wakers.lock();
        wakers.retain(|(q, tx)| {
            q != queue || !matches!(tx.try_send(()), Err(crossbeam_channel::TrySendError::Disconnected(_)))
        });
    }

    // ---------------------------------------------------------------- claims

    /// Claims the next due job of `queue` for `worker` under a lease: by priority, then
    /// run_at, then id. A running job whose lease has expired is claimable at once; a live
    /// lease is never handed out again, not even to the same worker id.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name or worker id is empty, longer than 128 bytes or
    /// contains a NUL byte, or `lease` is not between 1 ms and 24 hours. No due job is
    /// `Ok(None)`, not an error. Storage errors: `Busy`, `StorageFull`, `ReadOnly`;
    /// `NestedWrite` from inside a closure holding the queue's transaction (or an in-memory
    /// queue's `with_connection`).
    pub fn claim(&self, queue: &str, worker: &str, lease: Duration) -> Result<Option<Claimed>> {
        Ok(self.claim_batch(queue, worker, lease, 1)?.pop())
    }

    /// Claims up to `limit` jobs at once, each with its own claim id, in claim order.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name or worker id is empty, longer than 128 bytes or
    /// contains a NUL byte, `lease` is not between 1 ms and 24 hours, or `limit` is not in
    /// 1..=10,000 ([`MAX_BATCH`]). Storage errors: `Busy`, `StorageFull`, `ReadOnly`;
    /// `NestedWrite` from inside a closure holding the queue's transaction (or an in-memory
    /// queue's `with_connection`).
    pub fn claim_batch(&self, queue: &str, worker: &str, lease: Duration, limit: u32) -> Result<Vec<Claimed>> {
        let lease_ms = check_claim(queue, worker, lease, limit)?;
        let (queue, worker, store) = (queue.to_string(), worker.to_string(), self.store.clone());
        self.store.submit(move |tx| job_claim(tx, &queue, &worker, lease_ms, limit, store.now()))
    }

    /// Extends the lease to `lease` from now; returns the new end (ms since the epoch).
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `lease` is not between 1 ms and 24 hours; `OwnershipLost` (with
    /// its `LostReason`) unless `token` is the exact claim of a running job with a live
    /// lease. Storage errors: `Busy`, `StorageFull`, `ReadOnly`; `NestedWrite` from inside
    /// a closure holding the queue's transaction (or an in-memory queue's
    /// `with_connection`).
    pub fn renew(&self, token: &ClaimToken, lease: Duration) -> Result<i64> {
        let mut results = self.renew_all(std::slice::from_ref(token), lease)?;
        results.pop().unwrap_or_else(|| Err(Error::domain("internal: renew_all gave no result")))
    }

    /// Renews many leases in one transaction (a worker pool's heartbeat round): one result
    /// per token, in order. A token that lost its job gets `OwnershipLost` without failing
    /// the others.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for the whole call when `lease` is not between 1 ms and 24 hours. A
    /// token that does not own its job gets `OwnershipLost` (with its `LostReason`) in its
    /// own slot of the `Vec`; the whole call fails (renewing nothing) only for storage
    /// errors: `Busy`, `StorageFull`, `ReadOnly`, and `NestedWrite` from inside a closure
    /// holding the queue's transaction (or an in-memory queue's `with_connection`).
    pub fn renew_all(&self, tokens: &[ClaimToken], lease: Duration) -> Result<Vec<Result<i64>>> {
        let lease_ms = check_lease(lease)?;
        let (tokens, store) = (tokens.to_vec(), self.store.clone());
        self.store.submit(move |tx| {
            let now = store.now();
            let until = now.saturating_add(lease_ms);
            let mut results = Vec::with_capacity(tokens.len());
            for token in &tokens {
                match job_write_owned(tx, JOB_RENEW, "renew", token, now, &[(":lease_until", &until)]) {
                    Ok(()) => results.push(Ok(until)),
                    // Only a guarded miss is per-token; anything else aborts the round.
                    Err(e @ Error::OwnershipLost { .. }) => results.push(Err(e)),
                    Err(e) => return Err(e),
                }
            }
            Ok(results)
        })
    }

    /// True when `token` owns its job at the clock's now. Advisory: the answer can change
    /// right after; use [`Queue::with_ownership`] for writes that depend on it.
    ///
    /// # Errors
    ///
    /// A token that does not own its job is `Ok(false)`, never an error. Read errors:
    /// `Pool` (no pooled connection came free in time), `Busy`; on an in-memory queue,
    /// `NestedWrite` from inside a closure holding its transaction or connection.
    pub fn owns(&self, token: &ClaimToken) -> Result<bool> {
        self.store.read(|conn| job_owns(conn, token, self.store.now()))
    }

    /// Runs `write` in an IMMEDIATE transaction only while `token` owns its job, and commits
    /// both together: a stale token gets `OwnershipLost` and `write` does not run. Inside
    /// the closure use the transaction, not the queue (a nested queue write is `NestedWrite`).
    ///
    /// ```
    /// # use fenceq::{NewJob, Queue};
    /// # use std::time::Duration;
    /// # let queue = Queue::open_in_memory()?;
    /// # queue.enqueue(NewJob::new("q", b"x".to_vec()))?;
    /// # let job = queue.claim("q", "w", Duration::from_secs(30))?.unwrap();
    /// queue.with_ownership(&job.token(), |tx| {
    ///     tx.execute_batch("CREATE TABLE IF NOT EXISTS replies (text TEXT)")?;
    ///     tx.execute("INSERT INTO replies (text) VALUES ('hi')", [])?;
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// The check happens as the write lock is taken: while the transaction holds it nobody
    /// can claim or reap the job, so a write that passed commits even if the lease's nominal
    /// end passes while it runs. The same transaction then extends the lease from its commit
    /// by the lease length of the claim (or last renewal), so the owner can still settle.
    ///
    /// The closure holds the file's only write lock, so no lease of this process can be
    /// renewed while it runs: keep it well under a third of the lease (a longer one is
    /// logged as a warning through `tracing`). Jobs added inside with [`Queue::enqueue_tx`]
    /// commit with the write.
    ///
    /// # Errors
    ///
    /// `OwnershipLost` (and the closure does not run) unless `token` is the exact claim of
    /// a running job with a live lease; the closure's own error (everything rolls back);
    /// `NestedWrite` for a queue write from inside the closure; `TransactionLost` when
    /// SQLite rolled the transaction back while the closure carried on; `Busy`,
    /// `StorageFull`, `ReadOnly` when the database cannot be written.
    pub fn with_ownership<T>(&self, token: &ClaimToken, write: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.owned_write(token, write).map(|(value, _)| value)
    }

    /// [`Queue::with_ownership`], also returning the lease's end after the commit.
    pub(crate) fn owned_write<T>(
        &self,
        token: &ClaimToken,
        write: impl FnOnce(&Connection) -> Result<T>,
    ) -> Result<(T, i64)> {
        self.write_waking(|tx| {
            let lease = self.owned_lease(tx, token)?;
            let value = held_briefly(token, lease, || write(tx))?;
            crate::store::still_in_transaction(tx)?;
            let until = jobs::job_extend_owned(tx, token, lease, self.store.now())?;
            Ok((value, until))
        })
    }

    /// The token's live lease as the write lock was taken, or `OwnershipLost`.
    fn owned_lease(&self, tx: &Connection, token: &ClaimToken) -> Result<jobs::OwnedLease> {
        let now = self.store.now();
        match jobs::job_owned_lease(tx, token, now)? {
            Some(lease) => Ok(lease),
            None => Err(Error::OwnershipLost { token: *token, reason: jobs::lost_reason(tx, token, now)? }),
        }
    }

    // ---------------------------------------------------------------- settles

    /// Completes the job. Terminal: no later write of any token changes it.
    ///
    /// # Errors
    ///
    /// `OwnershipLost` (with its `LostReason`: the lease expired, another claim replaced
    /// it, the job is no longer running, or its row is gone) unless `token` is the exact
    /// claim of a running job with a live lease; completing twice is `OwnershipLost` too.
    /// Storage errors: `Busy`, `StorageFull`, `ReadOnly`; `NestedWrite` from inside a
    /// closure holding the queue's transaction (or an in-memory queue's `with_connection`).
    pub fn complete(&self, token: &ClaimToken) -> Result<()> {
        self.settle(token, Settle::Complete).map(drop)
    }

    /// Completes many jobs in one transaction (for batch consumers): one result per token,
    /// in order. A token that lost its job gets `OwnershipLost` without failing the others.
    ///
    /// # Errors
    ///
    /// A token that does not own its job gets `OwnershipLost` (with its `LostReason`) in
    /// its own slot of the `Vec`, and the others still complete; the whole call fails
    /// (completing nothing) only for storage errors: `Busy`, `StorageFull`, `ReadOnly`, and
    /// `NestedWrite` from inside a closure holding the queue's transaction (or an in-memory
    /// queue's `with_connection`).
    pub fn complete_all(&self, tokens: &[ClaimToken]) -> Result<Vec<Result<()>>> {
        let items: Vec<(ClaimToken, Settle)> = tokens.iter().map(|t| (*t, Settle::Complete)).collect();
        Ok(self.settle_many(items)?.into_iter().map(|r| r.map(drop)).collect())
    }

    /// Completes the job and runs `write` in the same transaction: both commit or neither.
    /// The ownership check is the one of [`Queue::with_ownership`] (as the lock is taken),
    /// and so is the advice to keep the closure short. Jobs added inside with
    /// [`Queue::enqueue_tx`] (a follow-up, a reminder) commit with the completion.
    ///
    /// # Errors
    ///
    /// `OwnershipLost` (and the closure does not run) unless `token` is the exact claim of
    /// a running job with a live lease; the closure's own error (nothing is completed);
    /// `NestedWrite` for a queue write from inside the closure; `TransactionLost` when
    /// SQLite rolled the transaction back while the closure carried on; `Busy`,
    /// `StorageFull`, `ReadOnly` when the database cannot be written.
    pub fn complete_with<T>(&self, token: &ClaimToken, write: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.write_waking(|tx| {
            let lease = self.owned_lease(tx, token)?;
            settle_in(tx, token, &Settle::Complete, self.store.now())?;
            // (The writer refuses to commit a transaction SQLite rolled back meanwhile.)
            held_briefly(token, lease, || write(tx))
        })
    }

    /// Sends the job back to pending after a delay (exponential with jitter for a
    /// [`RetryPolicy`](crate::RetryPolicy), or a fixed `Duration`), or exhausts it when no
    /// attempts are left.
    ///
    /// # Errors
    ///
    /// `OwnershipLost` (with its `LostReason`: the lease expired, another claim replaced
    /// it, the job is no longer running, or its row is gone) unless `token` is the exact
    /// claim of a running job with a live lease. Running out of attempts is not an error
    /// (`Retried::Exhausted`), no delay is refused, and an `error` longer than
    /// [`MAX_ERROR_LEN`] (4,096 bytes) is cut, not refused. Storage errors: `Busy`,
    /// `StorageFull`, `ReadOnly`; `NestedWrite` from inside a closure holding the queue's
    /// transaction (or an in-memory queue's `with_connection`).
    pub fn retry(&self, token: &ClaimToken, backoff: impl Into<Backoff>, error: &str) -> Result<Retried> {
        let delay = match backoff.into() {
            Backoff::After(d) => d,
            Backoff::Policy(p) => p.next_delay(token.attempt),
        };
        match self.settle(token, Settle::Retry { delay, error: error.to_string() })? {
            Settled::Retried(at) => Ok(Retried::Scheduled(at)),
            _ => Ok(Retried::Exhausted),
        }
    }

    /// Turns the exact live claim into an unacknowledged, durable exhaustion that keeps its
    /// token (see [`Queue::exhaustions`] and [`Queue::acknowledge`]).
    ///
    /// # Errors
    ///
    /// `OwnershipLost` (with its `LostReason`: the lease expired, another claim replaced
    /// it, the job is no longer running, or its row is gone) unless `token` is the exact
    /// claim of a running job with a live lease; an `error` longer than [`MAX_ERROR_LEN`]
    /// (4,096 bytes) is cut, not refused. Storage errors: `Busy`, `StorageFull`,
    /// `ReadOnly`; `NestedWrite` from inside a closure holding the queue's transaction (or
    /// an in-memory queue's `with_connection`).
    pub fn exhaust(&self, token: &ClaimToken, error: &str) -> Result<()> {
        self.settle(token, Settle::Exhaust(error.to_string())).map(drop)
    }

    /// Records an ambiguous outcome (the side effect may have happened): never retried or
    /// pruned automatically; see [`Queue::unknowns`] and [`Queue::resolve`].
    ///
    /// # Errors
    ///
    /// `OwnershipLost` (with its `LostReason`: the lease expired, another claim replaced
    /// it, the job is no longer running, or its row is gone) unless `token` is the exact
    /// claim of a running job with a live lease; `evidence` longer than [`MAX_ERROR_LEN`]
    /// (4,096 bytes) is cut, not refused. Storage errors: `Busy`, `StorageFull`,
    /// `ReadOnly`; `NestedWrite` from inside a closure holding the queue's transaction (or
    /// an in-memory queue's `with_connection`).
    pub fn mark_unknown(&self, token: &ClaimToken, evidence: &str) -> Result<()> {
        self.settle(token, Settle::Unknown(evidence.to_string())).map(drop)
    }

    /// Parks the job (for example awaiting an approval) for at most `timeout`: the lease is
    /// released and the job is never reaped as stale; [`Queue::resume`] with the same token
    /// sends it back to pending, and past the deadline the reaper exhausts it.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `timeout` is shorter than 1 ms or longer than a year (365 days). `OwnershipLost` (with its `LostReason`: the lease expired,
    /// another claim replaced it, the job is no longer running, or its row is gone) unless
    /// `token` is the exact claim of a running job with a live lease; a `reason` longer
    /// than [`MAX_ERROR_LEN`] (4,096 bytes) is cut, not refused. Storage errors: `Busy`,
    /// `StorageFull`, `ReadOnly`; `NestedWrite` from inside a closure holding the queue's
    /// transaction (or an in-memory queue's `with_connection`).
    pub fn park(&self, token: &ClaimToken, timeout: Duration, reason: &str) -> Result<()> {
        self.settle(token, Settle::Park { timeout, reason: reason.to_string() }).map(drop)
    }

    fn settle(&self, token: &ClaimToken, settle: Settle) -> Result<Settled> {
        settle.check()?;
        let (token, store) = (*token, self.store.clone());
        self.store.submit(move |tx| settle_in(tx, &token, &settle, store.now()))
    }

    /// Settles many claims in one transaction: one result per item; a stale token gets
    /// `OwnershipLost` without failing the others.
    pub(crate) fn settle_many(&self, items: Vec<(ClaimToken, Settle)>) -> Result<Vec<Result<Settled>>> {
        let store = self.store.clone();
        self.store.submit(move |tx| settle_each(tx, &items, store.now()))
    }

    /// The worker pool's round trip: settles the attempts that finished and claims up to
    /// `limit` more of `queue`, in one request of one transaction. A failed claim fails the
    /// settles too (the caller settles them again alone).
    pub(crate) fn settle_and_claim(
        &self,
        items: Vec<(ClaimToken, Settle)>,
        queue: &str,
        worker: &str,
        lease: Duration,
        limit: u32,
    ) -> Result<(Vec<Result<Settled>>, Vec<Claimed>)> {
        if limit == 0 {
            return Ok((self.settle_many(items)?, Vec::new()));
        }
        let lease_ms = check_claim(queue, worker, lease, limit)?;
        let (queue, worker, store) = (queue.to_string(), worker.to_string(), self.store.clone());
        self.store.submit(move |tx| {
            let now = store.now();
            let settled = settle_each(tx, &items, now)?;
            Ok((settled, job_claim(tx, &queue, &worker, lease_ms, limit, now)?))
        })
    }

    /// Sends a parked job back to pending with one extra attempt, while its wait lasts.
    ///
    /// # Errors
    ///
    /// `WaitExpired` once the park's deadline has passed (by the queue's clock, whether or
    /// not the reaper has exhausted the job yet), `StaleIdentity` for another token,
    /// `InvalidState` when the job is not waiting, `NotFound` when no row has its id.
    /// Storage errors: `Busy`, `StorageFull`, `ReadOnly`; `NestedWrite` from inside a
    /// closure holding the queue's transaction (or an in-memory queue's `with_connection`).
    pub fn resume(&self, token: &ClaimToken) -> Result<()> {
        let state = JobState::Waiting;
        self.store.write(|tx| job_write_identified(tx, JOB_RESUME, "resume", token, state, self.store.now(), None))
    }

    /// Cancels a pending, waiting or running job; a running owner finds out at its next
    /// renew or settle (`OwnershipLost`).
    /// Returns the state the job was cancelled from.
    ///
    /// # Errors
    ///
    /// `NotFound` when no row has this id, `InvalidState` when the job is not pending,
    /// waiting or running. Storage errors: `Busy`, `StorageFull`, `ReadOnly`; `NestedWrite`
    /// from inside a closure holding the queue's transaction (or an in-memory queue's
    /// `with_connection`).
    ///
    /// The change is recorded on the row (`Job::decision`); [`Queue::operator`] records who
    /// made it and why.
    pub fn cancel(&self, id: JobId) -> Result<JobState> {
        self.unnamed().cancel(id)
    }

    /// Changes made through the returned handle (resolve, replay, cancel, acknowledge) record
    /// on the job's row who made them (`by`) and, with [`Operator::note`], why: see
    /// [`Job::decision`](crate::Job::decision). The plain `Queue` methods record the change
    /// without a name.
    ///
    /// ```
    /// # use fenceq::{NewJob, Queue, Resolution};
    /// # use std::time::Duration;
    /// # let queue = Queue::open_in_memory()?;
    /// # queue.enqueue(NewJob::new("q", b"x".to_vec()))?;
    /// # let job = queue.claim("q", "w", Duration::from_secs(30))?.unwrap();
    /// # queue.mark_unknown(&job.token(), "timeout after send")?;
    /// queue.operator("reconciler").note("delivered: found in the chat log").resolve(&job.token(), Resolution::Complete)?;
    /// let decision = queue.job(job.id())?.unwrap().decision.unwrap();
    /// assert_eq!((decision.action.as_str(), decision.by.as_deref()), ("resolve complete", Some("reconciler")));
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    pub fn operator(&self, by: impl Into<String>) -> Operator<'_> {
        Operator::new(self, Some(by.into()))
    }

    fn unnamed(&self) -> Operator<'_> {
        Operator::new(self, None)
    }

    // ---------------------------------------------------------------- exhaustions and unknowns

    /// One page of unacknowledged exhaustions in id order, starting after `cursor` (`None`
    /// for the first page). A full pass returns every job that was unacknowledged-exhausted
    /// when it began exactly once, even while others are acknowledged or added.
    ///
    /// ```
    /// # let queue = fenceq::Queue::open_in_memory()?;
    /// let mut cursor = None;
    /// loop {
    ///     let page = queue.exhaustions(cursor, 100)?;
    ///     for exhaustion in &page.items {
    ///         // alert someone, then:
    ///         queue.acknowledge(&exhaustion.token)?;
    ///     }
    ///     match page.next { Some(next) => cursor = Some(next), None => break }
    /// }
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `limit` is not in 1..=10,000 ([`MAX_BATCH`]). Read errors:
    /// `Pool` (no pooled connection came free in time), `Busy`; on an in-memory queue,
    /// `NestedWrite` from inside a closure holding its transaction or connection.
    pub fn exhaustions(&self, cursor: Option<Cursor>, limit: u32) -> Result<Page<Exhaustion>> {
        self.page(JOB_EXHAUSTIONS_PAGE, "JOB_EXHAUSTIONS_PAGE", cursor, limit)
    }

    /// One page of unknown outcomes in id order (`at` is when the outcome was recorded).
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `limit` is not in 1..=10,000 ([`MAX_BATCH`]). Read errors:
    /// `Pool` (no pooled connection came free in time), `Busy`; on an in-memory queue,
    /// `NestedWrite` from inside a closure holding its transaction or connection.
    pub fn unknowns(&self, cursor: Option<Cursor>, limit: u32) -> Result<Page<UnknownOutcome>> {
        let page = self.page(JOB_UNKNOWNS_PAGE, "JOB_UNKNOWNS_PAGE", cursor, limit)?;
        Ok(Page { items: page.items.into_iter().map(UnknownOutcome::from_record).collect(), next: page.next })
    }

    fn page(
        &self,
        statement: &'static str,
        name: &'static str,
        cursor: Option<Cursor>,
        limit: u32,
    ) -> Result<Page<Exhaustion>> {
        check_limit(limit)?;
        let after = cursor.map_or(0, |c| c.0);
        let items = self.store.read(|conn| job_page(conn, statement, name, after, limit))?;
        let next = (items.len() == limit as usize).then(|| Cursor(items.last().map_or(after, |i| i.token.id.0)));
        Ok(Page { items, next })
    }

    /// Acknowledges an exhaustion with its exact token, making it prunable. Idempotent for
    /// the same token.
    ///
    /// # Errors
    ///
    /// `StaleIdentity` for any other token, `InvalidState` when the job is not exhausted,
    /// `NotFound` when no row has its id (never existed or pruned). Storage errors: `Busy`,
    /// `StorageFull`, `ReadOnly`; `NestedWrite` from inside a closure holding the queue's
    /// transaction (or an in-memory queue's `with_connection`).
    pub fn acknowledge(&self, token: &ClaimToken) -> Result<()> {
        self.unnamed().acknowledge(token)
    }

    /// Dead-letter redrive: an exhausted job goes back to pending, due now, with a fresh
    /// attempt budget. Old tokens stay dead (the next claim has a new claim id).
    ///
    /// # Errors
    ///
    /// `NotFound` when no row has this id, `InvalidState` when the job is not exhausted
    /// (acknowledged or not). Storage errors: `Busy`, `StorageFull`, `ReadOnly`;
    /// `NestedWrite` from inside a closure holding the queue's transaction (or an in-memory
    /// queue's `with_connection`).
    pub fn replay(&self, id: JobId) -> Result<()> {
        self.unnamed().replay(id)
    }

    /// Settles an unknown outcome with its exact token.
    ///
    /// # Errors
    ///
    /// `StaleIdentity` for any other token, `InvalidState` when the job is not unknown,
    /// `NotFound` when no row has its id. Storage errors: `Busy`, `StorageFull`,
    /// `ReadOnly`; `NestedWrite` from inside a closure holding the queue's transaction (or
    /// an in-memory queue's `with_connection`).
    pub fn resolve(&self, token: &ClaimToken, resolution: Resolution) -> Result<()> {
        self.unnamed().resolve(token, resolution)
    }

    /// Settles an unknown outcome with its exact token and runs `write` in the same
    /// transaction: a reconciler's decision and its own record (a row in its audit table,
    /// a follow-up job through [`Queue::enqueue_tx`]) commit together or not at all.
    ///
    /// ```
    /// # use fenceq::{NewJob, Queue, Resolution};
    /// # use std::time::Duration;
    /// # let queue = Queue::open_in_memory()?;
    /// # queue.enqueue(NewJob::new("q", b"x".to_vec()))?;
    /// # let job = queue.claim("q", "w", Duration::from_secs(30))?.unwrap();
    /// # queue.mark_unknown(&job.token(), "timeout after send")?;
    /// queue.resolve_with(&job.token(), Resolution::Complete, |tx| {
    ///     tx.execute_batch("CREATE TABLE IF NOT EXISTS reconciled (job INTEGER, how TEXT)")?;
    ///     tx.execute("INSERT INTO reconciled VALUES (?1, 'seen in the chat log')", [job.id().0])?;
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Those of [`Queue::resolve`] (and `write` does not run); the closure's own error
    /// (nothing is resolved); `NestedWrite` for a queue write from inside the closure;
    /// `TransactionLost` when SQLite rolled the transaction back while the closure carried
    /// on.
    pub fn resolve_with<T>(
        &self,
        token: &ClaimToken,
        resolution: Resolution,
        write: impl FnOnce(&Connection) -> Result<T>,
    ) -> Result<T> {
        self.unnamed().resolve_with(token, resolution, write)
    }

    /// An operator's acknowledgement of one exhaustion by job id (applications acknowledge
    /// with the exact token they read, [`Queue::acknowledge`]). Returns true when it changed
    /// the job, false when it was acknowledged already. With `expected` (0 or 1) the count
    /// is checked inside the same transaction as the change.
    ///
    /// # Errors
    ///
    /// `NotFound`, `InvalidState` when the job is not exhausted, `CountMismatch` (nothing
    /// changed) when `expected` differs from what the acknowledgement changes. Storage
    /// errors: `Busy`, `StorageFull`, `ReadOnly`; `NestedWrite` from inside a closure
    /// holding the queue's transaction (or an in-memory queue's `with_connection`).
    pub fn acknowledge_job(&self, id: JobId, expected: Option<u64>) -> Result<bool> {
        self.unnamed().acknowledge_job(id, expected)
    }

    /// An operator's acknowledgement of every unacknowledged exhaustion of `queue`, in one
    /// transaction; returns their ids in id order. With `expected`, the count is checked in
    /// that transaction: if it differs, nothing changes.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name is empty, longer than 128 bytes or contains a NUL
    /// byte; `CountMismatch` (nothing changed). Storage errors: `Busy`, `StorageFull`,
    /// `ReadOnly`; `NestedWrite` from inside a closure holding the queue's transaction (or
    /// an in-memory queue's `with_connection`).
    pub fn acknowledge_all(&self, queue: &str, expected: Option<u64>) -> Result<Vec<JobId>> {
        self.unnamed().acknowledge_all(queue, expected)
    }

    // ---------------------------------------------------------------- maintenance

    /// Expired leases go back to pending (or are exhausted when no attempts are left) and
    /// parked jobs past their deadline are exhausted, in batches of 1,000 per transaction.
    /// Claims reclaim expired leases by themselves; the reaper keeps `running` honest and
    /// turns abandoned last attempts into exhaustions.
    ///
    /// # Errors
    ///
    /// No input or job state makes it fail, only storage errors: `Busy`, `StorageFull`,
    /// `ReadOnly`, and `NestedWrite` from inside a closure holding the queue's transaction
    /// (or an in-memory queue's `with_connection`). Batches committed before the error stay
    /// committed.
    pub fn reap(&self) -> Result<ReapReport> {
        let mut report = ReapReport::default();
        self.in_batches(REAP_BATCH, |tx| {
            let (requeued, exhausted) = job_reap_expired(tx, self.store.now(), REAP_BATCH)?;
            report.requeued += requeued;
            report.exhausted += exhausted;
            Ok(requeued + exhausted)
        })?;
        report.waits_expired = self.in_batches(REAP_BATCH, |tx| job_reap_waiting(tx, self.store.now(), REAP_BATCH))?.0;
        Ok(report)
    }

    /// [`Queue::reap`] as one transaction that must change exactly `expected` jobs: the
    /// count and the change are the same statements at the same clock reading, and if the
    /// count differs nothing changes (PR #341's conditional, fail-closed operator change).
    /// Holds the write lock for the whole pass, unlike `reap`'s batches.
    ///
    /// # Errors
    ///
    /// `CountMismatch` (nothing changed) when the pass would change another number of jobs.
    /// Storage errors: `Busy`, `StorageFull`, `ReadOnly`; `NestedWrite` from inside a
    /// closure holding the queue's transaction (or an in-memory queue's `with_connection`).
    pub fn reap_expecting(&self, expected: u64) -> Result<ReapReport> {
        self.store.write(|tx| {
            let now = self.store.now();
            let (requeued, exhausted) = job_reap_expired(tx, now, u32::MAX)?;
            let waits_expired = job_reap_waiting(tx, now, u32::MAX)?;
            let report = ReapReport { requeued, exhausted, waits_expired };
            check_expected("reap", Some(expected), report.total())?;
            Ok(report)
        })
    }

    /// Runs `batch` in a transaction of its own, again and again until one changes fewer
    /// than `size` rows; returns the rows changed and the transactions run.
    fn in_batches(&self, size: u32, mut batch: impl FnMut(&Connection) -> Result<u64>) -> Result<(u64, u64)> {
        let (mut changed, mut transactions) = (0, 0);
        loop {
            let rows = self.store.write(&mut batch)?;
            changed += rows;
            transactions += 1;
            if rows < u64::from(size) {
                return Ok((changed, transactions));
            }
        }
    }

    /// Deletes completed and cancelled rows settled, and acknowledged exhaustions
    /// acknowledged, longer than `retention.older_than` ago, in batches. Never deletes
    /// pending, running, waiting, unknown or unacknowledged exhausted rows. A pruned key may
    /// be enqueued again as a new job (with a new, never reused id).
    ///
    /// # Errors
    ///
    /// `InvalidInput` (nothing deleted) when `retention.batch_size` is not in 1..=100,000.
    /// Storage errors: `Busy`, `StorageFull`, `ReadOnly`; `NestedWrite` from inside a
    /// closure holding the queue's transaction (or an in-memory queue's `with_connection`).
    /// Batches committed before a storage error stay deleted.
    pub fn prune(&self, retention: &Retention) -> Result<PruneReport> {
        retention.check()?;
        let horizon = self.store.now().saturating_sub(duration_ms(retention.older_than));
        let size = retention.batch_size;
        let (settled, _) =
            self.in_batches(size, |tx| job_prune(tx, JOB_PRUNE_SETTLED, "JOB_PRUNE_SETTLED", horizon, size))?;
        let (acknowledged, _) =
            self.in_batches(size, |tx| job_prune(tx, JOB_PRUNE_ACKNOWLEDGED, "JOB_PRUNE_ACKNOWLEDGED", horizon, size))?;
        // Transactions that deleted something (the last, empty look of each pass is not one).
        let batches = settled.div_ceil(u64::from(size)) + acknowledged.div_ceil(u64::from(size));
        Ok(PruneReport { settled, acknowledged, batches })
    }

    /// [`Queue::prune`] as one transaction that must delete exactly `expected` rows, or
    /// nothing (see [`Queue::reap_expecting`]); `retention.batch_size` is not used.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `retention.batch_size` is not in 1..=100,000 (checked although
    /// it is not used here), `CountMismatch` (nothing deleted). Storage errors: `Busy`,
    /// `StorageFull`, `ReadOnly`; `NestedWrite` from inside a closure holding the queue's
    /// transaction (or an in-memory queue's `with_connection`).
    pub fn prune_expecting(&self, retention: &Retention, expected: u64) -> Result<PruneReport> {
        retention.check()?;
        let horizon = self.store.now().saturating_sub(duration_ms(retention.older_than));
        self.store.write(|tx| {
            let settled = job_prune(tx, JOB_PRUNE_SETTLED, "JOB_PRUNE_SETTLED", horizon, u32::MAX)?;
            let acknowledged = job_prune(tx, JOB_PRUNE_ACKNOWLEDGED, "JOB_PRUNE_ACKNOWLEDGED", horizon, u32::MAX)?;
            let report = PruneReport { settled, acknowledged, batches: u64::from(settled + acknowledged > 0) };
            check_expected("prune", Some(expected), report.deleted())?;
            Ok(report)
        })
    }

    /// Copies the WAL back into the database and truncates it, waiting at most
    /// [`DEFAULT_CHECKPOINT_PATIENCE`] for readers to move off the old WAL (this process's
    /// writers queue meanwhile). Readers whose transactions overlap without a break starve
    /// SQLite's automatic checkpoints and let the WAL grow without bound; the maintenance
    /// thread runs this every few seconds.
    ///
    /// # Errors
    ///
    /// Readers that outlast the patience are not an error: the report says the checkpoint
    /// did not complete. `NestedWrite` from inside a closure holding the queue's
    /// transaction (or an in-memory queue's `with_connection`); `ReadOnly` on a queue
    /// opened read-only; any other SQLite error of the checkpoint (`Sqlite`, `Corrupt`).
    pub fn checkpoint(&self) -> Result<CheckpointReport> {
        self.checkpoint_with(DEFAULT_CHECKPOINT_PATIENCE)
    }

    /// [`Queue::checkpoint`] waiting at most `patience`: longer than the longest read
    /// transaction, or the checkpoint cannot finish while readers overlap back to back.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `patience` is longer than a minute. Readers that outlast
    /// `patience` are not an error: the report says the checkpoint did not complete.
    /// `NestedWrite` from inside a closure holding the queue's transaction (or an in-memory
    /// queue's `with_connection`); `ReadOnly` on a queue opened read-only; any other SQLite
    /// error of the checkpoint (`Sqlite`, `Corrupt`).
    pub fn checkpoint_with(&self, patience: Duration) -> Result<CheckpointReport> {
        if patience > Duration::from_secs(60) {
            return Err(Error::invalid("checkpoint patience", "longer than a minute"));
        }
        self.store.checkpoint(patience)
    }

    /// How this handle's writes were grouped into transactions so far (group commit combines
    /// concurrent writers of one process into one `BEGIN IMMEDIATE` transaction).
    pub fn commit_stats(&self) -> CommitStats {
        let (transactions, requests, wal_syncs) = self.store.commit_stats();
        CommitStats { transactions, requests, wal_syncs }
    }

    // ---------------------------------------------------------------- inspection

    /// Counts per queue and state.
    ///
    /// # Errors
    ///
    /// Only read errors: `Pool` (no pooled connection came free in time), `Busy`; on an
    /// in-memory queue, `NestedWrite` from inside a closure holding its transaction or
    /// connection.
    pub fn stats(&self) -> Result<Stats> {
        Ok(Stats { queues: self.store.read(|conn| job_stats(conn, self.store.now()))? })
    }

    /// Jobs in id order after `filter.after`, optionally of one queue and one state.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `filter.limit` is not in 1..=10,000 ([`MAX_BATCH`]) or
    /// `filter.queue` is not a valid queue name (an unknown queue lists nothing). Read
    /// errors: `Pool`
    /// (no pooled connection came free in time), `Busy`; on an in-memory queue,
    /// `NestedWrite` from inside a closure holding its transaction or connection.
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<Job>> {
        check_limit(filter.limit)?;
        if let Some(queue) = &filter.queue {
            check_name("queue name", queue)?;
        }
        let after = filter.after.map_or(0, |c| c.0);
        self.store.read(|conn| job_list(conn, filter.queue.as_deref(), filter.state, after, filter.limit))
    }

    /// What [`Queue::reap`] would change at the clock's now, without changing anything.
    ///
    /// # Errors
    ///
    /// Only read errors: `Pool` (no pooled connection came free in time), `Busy`; on an
    /// in-memory queue, `NestedWrite` from inside a closure holding its transaction or
    /// connection.
    pub fn reap_preview(&self) -> Result<ReapReport> {
        let (requeued, exhausted, waits_expired) =
            self.store.read(|conn| job_count_reapable(conn, self.store.now()))?;
        Ok(ReapReport { requeued, exhausted, waits_expired })
    }

    /// What [`Queue::prune`] would delete at the clock's now, without deleting anything.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a retention `prune` would refuse (a batch size outside
    /// 1..=100,000). Read errors:
    /// `Pool` (no pooled connection came free in time), `Busy`; on an in-memory queue,
    /// `NestedWrite` from inside a closure holding its transaction or connection.
    pub fn prune_preview(&self, retention: &Retention) -> Result<PruneReport> {
        retention.check()?;
        let horizon = self.store.now().saturating_sub(duration_ms(retention.older_than));
        let (settled, acknowledged) = self.store.read(|conn| job_count_prunable(conn, horizon))?;
        Ok(PruneReport { settled, acknowledged, batches: 0 })
    }

    /// The schema version of the open database (equal to [`SCHEMA_VERSION`](crate::SCHEMA_VERSION)
    /// once open has upgraded it).
    ///
    /// # Errors
    ///
    /// Only read errors: `Pool` (no pooled connection came free in time), `Busy`; on an
    /// in-memory queue, `NestedWrite` from inside a closure holding its transaction or
    /// connection.
    pub fn schema_version(&self) -> Result<i64> {
        self.store.read(crate::store::migrate::user_version)
    }

    /// Runs `f` on one of the queue's pooled connections: for the application's own reads
    /// and schema (domain tables beside the queue). Writes made here do not take the
    /// queue's in-process write lock; prefer [`Queue::with_ownership`] for domain writes.
    ///
    /// # Errors
    ///
    /// The closure's own error (its SQLite errors typed as for any statement); `Pool` when
    /// no pooled connection came free in time. On an in-memory queue the closure holds the
    /// queue's only connection: this call from inside a closure holding the queue's
    /// transaction or connection is `NestedWrite`, and so is any queue call inside the
    /// closure that needs a connection of its own.
    pub fn with_connection<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.store.read(f)
    }

    /// Due pending and running jobs of `queue` (for `WorkerPool::wait_idle`).
    pub(crate) fn due_or_running(&self, queue: &str) -> Result<u64> {
        self.store.read(|conn| job_count_due_or_running(conn, queue, self.store.now()))
    }

    /// The id of the job of `queue` whose idempotency key is `key`, while its row exists.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name is empty, longer than 128 bytes or contains a NUL
    /// byte, or the key is empty or longer than 512 bytes. Read errors: `Pool` (no pooled
    /// connection came free in time), `Busy`; on an in-memory queue, `NestedWrite` from
    /// inside a closure holding its transaction or connection.
    pub fn find_by_key(&self, queue: &str, key: &str) -> Result<Option<JobId>> {
        check_name("queue name", queue)?;
        check_key(key)?;
        self.store.read(|conn| job_id_by_key(conn, queue, key))
    }

    /// One job's whole record, or `None` when no row has this id.
    ///
    /// # Errors
    ///
    /// No row with this id is `Ok(None)`, not `NotFound`. Read errors: `Pool` (no pooled
    /// connection came free in time), `Busy`; on an in-memory queue, `NestedWrite` from
    /// inside a closure holding its transaction or connection.
    pub fn job(&self, id: JobId) -> Result<Option<Job>> {
        self.store.read(|conn| job_get(conn, id))
    }
}

/// How a claim is settled (the engine's side of a handler's `Outcome`).
#[derive(Debug, Clone)]
pub(crate) enum Settle {
    Complete,
    Retry { delay: Duration, error: String },
    Exhaust(String),
    Unknown(String),
    Park { timeout: Duration, reason: String },
}

/// What a settle did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    Completed,
    Retried(i64),
    Exhausted,
    Unknown,
    Parked,
}

impl Settle {
    fn check(&self) -> Result<()> {
        match self {
            Settle::Park { timeout, .. }
                if *timeout < Duration::from_millis(1) || *timeout > Duration::from_secs(365 * 24 * 3600) =>
            {
                Err(Error::invalid("park timeout", "must be between 1 ms and a year"))
            }
            _ => Ok(()),
        }
    }
}

/// One guarded settle statement (two for a retry out of attempts) for the exact token.
fn settle_in(conn: &Connection, token: &ClaimToken, settle: &Settle, now: i64) -> Result<Settled> {
    match settle {
        Settle::Complete => {
            job_write_owned(conn, JOB_COMPLETE, "complete", token, now, &[]).map(|()| Settled::Completed)
        }
        Settle::Retry { delay, error } => {
            let error = clip(error);
            let run_at = now.saturating_add(duration_ms(*delay));
            let retry = [(":run_at", &run_at as &dyn rusqlite::ToSql), (":error", &error)];
            match job_write_owned(conn, JOB_RETRY, "retry", token, now, &retry) {
                Ok(()) => Ok(Settled::Retried(run_at)),
                // Either no attempts are left or the token is stale; exhaust tells them apart.
                Err(Error::OwnershipLost { .. }) => {
                    job_write_owned(conn, JOB_EXHAUST, "retry", token, now, &[(":error", &error)])?;
                    Ok(Settled::Exhausted)
                }
                Err(e) => Err(e),
            }
        }
        Settle::Exhaust(error) => {
            job_write_owned(conn, JOB_EXHAUST, "exhaust", token, now, &[(":error", &clip(error))])
                .map(|()| Settled::Exhausted)
        }
        Settle::Unknown(evidence) => {
            job_write_owned(conn, JOB_MARK_UNKNOWN, "mark_unknown", token, now, &[(":error", &clip(evidence))])
                .map(|()| Settled::Unknown)
        }
        Settle::Park { timeout, reason } => {
            let wait_until = now.saturating_add(duration_ms(*timeout));
            let park = [(":wait_until", &wait_until as &dyn rusqlite::ToSql), (":error", &clip(reason))];
            job_write_owned(conn, JOB_PARK, "park", token, now, &park).map(|()| Settled::Parked)
        }
    }
}

/// A filter for [`Queue::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFilter {
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this state.
    pub state: Option<JobState>,
    /// Start after this id (`None` for the first page).
    pub after: Option<Cursor>,
    /// At most this many jobs. Defaults to 100.
    pub limit: u32,
}

impl Default for ListFilter {
    fn default() -> Self {
        ListFilter { queue: None, state: None, after: None, limit: 100 }
    }
}

/// The schema version of the database file at `path` (0 for a new or empty file), read
/// without changing anything: the file is opened read-only and not upgraded.
///
/// # Errors
///
/// A missing file is `Ok(0)`, not an error. `NotADatabase` (naming the file) for a file
/// that is not an SQLite database; otherwise the SQLite error of the read-only open or read
/// (a file that cannot be opened is `Sqlite`; a file another process holds locked is
/// `Busy`).
pub fn schema_version_of(path: impl AsRef<Path>) -> Result<i64> {
    let path = path.as_ref();
    if !path.exists() {
        return Ok(0);
    }
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| Error::sqlite("open read-only", e))?;
    crate::store::migrate::user_version(&conn).map_err(|e| match e {
        Error::NotADatabase { .. } => Error::NotADatabase { path: path.display().to_string() },
        other => other,
    })
}

/// True when `token` owns its job at `at`, checked inside a transaction the caller opened
/// (ideally `BEGIN IMMEDIATE`, so that no reclaim can commit between this check and the
/// caller's commit).
///
/// # Errors
///
/// A token that does not own its job is `Ok(false)`, never `OwnershipLost`. Only the SQLite
/// error of its query on `conn`, typed as for any statement (`Busy`, or `Sqlite` when
/// `conn` has no fenceq schema).
pub fn owns_in(conn: &Connection, token: &ClaimToken, at: i64) -> Result<bool> {
    job_owns(conn, token, at)
}

pub(crate) fn check_name(what: &'static str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(what, format!("{} bytes is not in 1..={MAX_NAME_LEN}", name.len())));
    }
    // SQLite's length() (in the schema's CHECK) and C strings stop at a NUL byte.
    if name.contains('\0') {
        return Err(Error::invalid(what, "contains a NUL byte"));
    }
    Ok(())
}

fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(Error::invalid("key", format!("{} bytes is not in 1..={MAX_KEY_LEN}", key.len())));
    }
    Ok(())
}

fn check_lease(lease: Duration) -> Result<i64> {
    if lease < Duration::from_millis(1) || lease > MAX_LEASE {
        return Err(Error::invalid("lease", format!("{lease:?} is not between 1 ms and {MAX_LEASE:?}")));
    }
    Ok(duration_ms(lease))
}

fn check_limit(limit: u32) -> Result<()> {
    if limit == 0 || limit > MAX_BATCH {
        return Err(Error::invalid("limit", format!("{limit} is not in 1..={MAX_BATCH}")));
    }
    Ok(())
}

/// The arguments of a claim; returns the lease in ms.
pub(crate) fn check_claim(queue: &str, worker: &str, lease: Duration, limit: u32) -> Result<i64> {
    check_name("queue name", queue)?;
    check_name("worker id", worker)?;
    let lease_ms = check_lease(lease)?;
    check_limit(limit)?;
    Ok(lease_ms)
}

/// `CountMismatch` unless `found` is what the caller expected (when it expected anything).
pub(crate) fn check_expected(operation: &'static str, expected: Option<u64>, found: u64) -> Result<()> {
    match expected {
        Some(expected) if expected != found => Err(Error::CountMismatch { operation, expected, found }),
        _ => Ok(()),
    }
}

/// Runs a caller's closure that holds the write lock, and warns when it held it longer than
/// a third of the lease: no lease of the process could be renewed meanwhile.
fn held_briefly<T>(token: &ClaimToken, lease: jobs::OwnedLease, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let started = std::time::Instant::now();
    let result = f();
    let held = started.elapsed();
    let third = Duration::from_millis(u64::try_from(lease.length_ms / 3).unwrap_or(0));
    if held > third {
        tracing::warn!(job = %token.id, attempt = token.attempt, held_ms = held.as_millis() as u64,
            lease_ms = lease.length_ms,
            "an owned write held the queue's writer longer than a third of its lease: no lease of this \
             process could be renewed meanwhile; keep domain writes short");
    }
    result
}

/// Cuts a stored text to `MAX_ERROR_LEN` bytes at a char boundary.
fn clip(text: &str) -> &str {
    if text.len() <= MAX_ERROR_LEN {
        return text;
    }
    let mut end = MAX_ERROR_LEN;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Settles each item on `conn`: a guarded miss or bad input is that item's result (it changed
/// nothing); any other error fails them all.
fn settle_each(conn: &Connection, items: &[(ClaimToken, Settle)], now: i64) -> Result<Vec<Result<Settled>>> {
    let mut results = Vec::with_capacity(items.len());
    for (token, settle) in items {
        match settle.check().and_then(|()| settle_in(conn, token, settle, now)) {
            Ok(settled) => results.push(Ok(settled)),
            Err(e @ (Error::OwnershipLost { .. } | Error::InvalidInput { .. })) => results.push(Err(e)),
            Err(e) => return Err(e),
        }
    }
    Ok(results)
}

/// Adds `job` (or finds the job with its key) on `conn`, in the caller's transaction.
fn insert(store: &Store, conn: &Connection, job: &NewJob) -> Result<Enqueued> {
    let now = store.now();
    let run_at = now.saturating_add(duration_ms(job.delay));
    let max_attempts = job.max_attempts.unwrap_or(store.settings.max_attempts);
    let key = job.key.as_deref();
    match job_insert(conn, &job.queue, key, &job.payload, job.priority, run_at, max_attempts, now)? {
        Some(id) => Ok(Enqueued::New(id)),
        // Nothing inserted: a key conflict, or (in a shared database file) an application
        // trigger that ignored the insert.
        None => key
            .map(|key| job_id_by_key(conn, &job.queue, key))
            .transpose()?
            .flatten()
            .map(Enqueued::Duplicate)
            .ok_or_else(|| Error::invalid("job", "the insert was ignored (is there a trigger on fenceq_jobs?)")),
    }
}
