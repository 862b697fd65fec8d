//! Durable records that wait for a person or a reconciler: exhaustions (paged,
//! acknowledged, replayed) and unknown outcomes (paged, resolved), and cancellation. The
//! changes themselves, and the decision each records on its row, are the operator's
//! (`operator.rs`); the plain methods here make them without a name.

use super::operator::Operator;
use super::Queue;
use crate::error::Result;
use crate::job::{ClaimToken, Cursor, Exhaustion, JobId, JobState, Page, Resolution, UnknownOutcome};
use crate::store::{PageRequest, Store};
use crate::validate::check_limit;

impl<S: Store> Queue<S> {
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
    /// [`Job::decision`](crate::Job::decision); a pause records them on the queue's row
    /// ([`PausedQueue`](crate::PausedQueue)). The plain `Queue` methods record the change
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
    pub fn operator(&self, by: impl Into<String>) -> Operator<'_, S> {
        Operator::new(self, Some(by.into()))
    }

    pub(crate) fn unnamed(&self) -> Operator<'_, S> {
        Operator::new(self, None)
    }

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
    /// `InvalidInput` when `limit` is not in 1..=10,000 ([`MAX_BATCH`](crate::MAX_BATCH)). Read errors:
    /// `Pool` (no pooled connection came free in time), `Busy`; on an in-memory queue,
    /// `NestedWrite` from inside a closure holding its transaction or connection.
    pub fn exhaustions(&self, cursor: Option<Cursor>, limit: u32) -> Result<Page<Exhaustion>> {
        self.page(cursor, limit, S::exhaustions)
    }

    /// One page of unknown outcomes in id order (`at` is when the outcome was recorded).
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `limit` is not in 1..=10,000 ([`MAX_BATCH`](crate::MAX_BATCH)). Read errors:
    /// `Pool` (no pooled connection came free in time), `Busy`; on an in-memory queue,
    /// `NestedWrite` from inside a closure holding its transaction or connection.
    pub fn unknowns(&self, cursor: Option<Cursor>, limit: u32) -> Result<Page<UnknownOutcome>> {
        let page = self.page(cursor, limit, S::unknowns)?;
        Ok(Page { items: page.items.into_iter().map(UnknownOutcome::from_record).collect(), next: page.next })
    }

    /// One page after `cursor`: a full page has a next cursor (its last id), a short one
    /// ends the pass.
    fn page(
        &self,
        cursor: Option<Cursor>,
        limit: u32,
        read: impl FnOnce(&S::Tx, PageRequest) -> Result<Vec<Exhaustion>>,
    ) -> Result<Page<Exhaustion>> {
        check_limit(limit)?;
        let after = cursor.map_or(0, |c| c.0);
        let items = self.store().read(|tx| read(tx, PageRequest { after, limit }))?;
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
    /// (acknowledged or not); `SettledCountsShort` (SQLite, nothing changed) when the counts
    /// `stats` reads never had the acknowledged row. Storage errors: `Busy`, `StorageFull`,
    /// `ReadOnly`; `NestedWrite` from inside a closure holding the queue's transaction (or an
    /// in-memory queue's `with_connection`).
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
        write: impl FnOnce(&S::Tx) -> Result<T>,
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
}
