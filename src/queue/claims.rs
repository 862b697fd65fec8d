//! Claims, renewals and ownership: the lease a claim grants, and the writes that commit only
//! while it is live (`with_ownership`, whose check is made as the transaction begins).

use super::fence;
use super::retry::retry_conflicts;
use super::Queue;
use crate::error::{Error, Result};
use crate::job::{ClaimToken, Claimed};
use crate::store::{FreshClaim, OwnedLease, Store, TokenAt};
use crate::validate::{check_claim, check_lease};
use std::time::{Duration, Instant};

impl<S: Store> Queue<S> {
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
    /// 1..=10,000 ([`MAX_BATCH`](crate::MAX_BATCH)). Storage errors: `Busy`, `StorageFull`, `ReadOnly`;
    /// `NestedWrite` from inside a closure holding the queue's transaction (or an in-memory
    /// queue's `with_connection`).
    pub fn claim_batch(&self, queue: &str, worker: &str, lease: Duration, limit: u32) -> Result<Vec<Claimed>> {
        let lease_ms = check_claim(queue, worker, lease, limit)?;
        retry_conflicts(|| {
            let (queue, worker, shared) = (queue.to_string(), worker.to_string(), self.shared.clone());
            self.store().submit_single(move |tx| {
                let claims = shared.claim_in(tx, FreshClaim { queue: &queue, worker: &worker, lease_ms, limit })?;
                Ok(shared.claimed(&queue, claims))
            })
        })
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

    /// Renews many leases in one transaction: one result per token, in order. A token that
    /// lost its job gets `OwnershipLost` without failing the others. On PostgreSQL each
    /// renewal holds its job's row until the commit, so a settle of one of the jobs waits for
    /// the whole call; a worker pool's heartbeat renews its leases one call each for that.
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
        retry_conflicts(|| {
            let (tokens, shared) = (tokens.to_vec(), self.shared.clone());
            self.store().submit(move |tx| {
                let mut results = Vec::with_capacity(tokens.len());
                for token in &tokens {
                    // The job's row first (PostgreSQL: a row lock, which may mean waiting for
                    // another transaction that holds it; SQLite: one read under the write lock
                    // the transaction holds), then the instant the lease is judged by: an
                    // instant taken before a wait (for this row, or an earlier token's) would
                    // renew a lease that ended meanwhile, and that another call was refused for.
                    S::owned_lease(tx, TokenAt { token, now: i64::MIN })?;
                    let now = shared.now_in(tx)?;
                    let until = now.saturating_add(lease_ms);
                    let renewed = S::renew_if_owned(tx, TokenAt { token, now }, until)?;
                    match fence::owned::<S>(tx, token, now, renewed) {
                        Ok(()) => results.push(Ok(until)),
                        // Only a guarded miss is per-token; anything else aborts the round.
                        Err(e @ Error::OwnershipLost { .. }) => results.push(Err(e)),
                        Err(e) => return Err(e),
                    }
                }
                Ok(results)
            })
        })
    }

    /// Hands claims back unstarted, in one transaction (a worker pool's prefetched jobs as
    /// it shuts down): each job the exact live claim still owns goes back to pending, due at
    /// once, with the attempt given back to its budget; one result per token, in order. A
    /// token that lost its job gets `OwnershipLost` without failing the others, and changes
    /// nothing: whoever owns the job now keeps it.
    pub(crate) fn release_all(&self, tokens: &[ClaimToken]) -> Result<Vec<Result<()>>> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        retry_conflicts(|| {
            let (tokens, shared) = (tokens.to_vec(), self.shared.clone());
            self.store().submit(move |tx| {
                let now = shared.now_in(tx)?;
                let mut results = Vec::with_capacity(tokens.len());
                for token in &tokens {
                    let released = S::release_if_owned(tx, TokenAt { token, now })?;
                    match fence::owned::<S>(tx, token, now, released) {
                        Ok(()) => results.push(Ok(())),
                        Err(e @ Error::OwnershipLost { .. }) => results.push(Err(e)),
                        Err(e) => return Err(e),
                    }
                }
                Ok(results)
            })
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
        self.store().read(|tx| S::owns(tx, TokenAt { token, now: self.shared.now_in(tx)? }))
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
    pub fn with_ownership<T>(&self, token: &ClaimToken, write: impl FnOnce(&S::Tx) -> Result<T>) -> Result<T> {
        self.owned_write(token, write).map(|(value, _)| value)
    }

    /// [`Queue::with_ownership`], also returning the lease's end after the commit.
    pub(crate) fn owned_write<T>(
        &self,
        token: &ClaimToken,
        write: impl FnOnce(&S::Tx) -> Result<T>,
    ) -> Result<(T, i64)> {
        self.write_waking(|tx| {
            let lease = self.owned_lease(tx, token)?;
            let value = held_briefly(token, lease, || write(tx))?;
            S::still_in_transaction(tx)?;
            // Read again after the closure: the extension runs from the commit, not from
            // the transaction's start.
            let now = self.shared.now_in(tx)?;
            let until = now.saturating_add(lease.length_ms);
            if until <= lease.until {
                return Ok((value, lease.until));
            }
            let extended = S::extend_owned(tx, TokenAt { token, now }, until)?;
            // A miss here: the closure itself changed the job row (it holds the transaction).
            fence::owned::<S>(tx, token, now, extended)?;
            Ok((value, until))
        })
    }

    /// The token's live lease once the transaction holds the job (PostgreSQL: its row
    /// lock), or `OwnershipLost`. The row first, then the instant the lease is judged by, as
    /// in [`Queue::renew_all`]: an instant read before waiting for a transaction that held
    /// the row would pass a lease that ended during the wait.
    pub(crate) fn owned_lease(&self, tx: &S::Tx, token: &ClaimToken) -> Result<OwnedLease> {
        Ok(fence::lease_after_the_row::<S>(tx, token, |tx| self.shared.now_in(tx))?.0)
    }
}

/// Runs a caller's closure that holds the write lock, and warns when it held it longer than
/// a third of the lease: no lease of the process could be renewed meanwhile.
pub(crate) fn held_briefly<T>(token: &ClaimToken, lease: OwnedLease, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let started = Instant::now();
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
