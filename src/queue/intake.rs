//! Intake: idempotent by (queue, key), one job, a batch in one transaction, or a job inside
//! a transaction the caller holds (the outbox pattern).

use super::retry::{resolve_lost_commit, retry_conflicts};
use super::{Queue, Shared};
use crate::clock::duration_ms;
use crate::error::{Error, Result};
use crate::job::{Enqueued, NewJob};
use crate::store::{scope, NewRow, Store};
use crate::validate::check_job;
use std::sync::Arc;

impl<S: Store> Queue<S> {
    /// Adds a job, or finds the existing job with the same queue and key.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name is empty, longer than 128 bytes or contains a NUL
    /// byte, the key is empty or longer than 512 bytes, the payload is empty or larger than
    /// the queue's payload limit ([`QueueBuilder::max_payload`](crate::QueueBuilder::max_payload), 1 MiB by default), the
    /// attempt budget is outside 1..=10,000, the delay is over a hundred years, or an
    /// application trigger on `fenceq_jobs` ignored the insert. A duplicate key is not an
    /// error (`Enqueued::Duplicate`). Storage errors: `Busy`, `StorageFull`, `ReadOnly`;
    /// `NestedWrite` from inside a closure holding the queue's transaction (or an in-memory
    /// queue's `with_connection`).
    ///
    /// On PostgreSQL, `ConnectionLost` when the connection broke: with `commit_unknown`
    /// false nothing was written and the call may be retried; with `commit_unknown` true the
    /// job may have been added, and retrying may add it twice. A job with a key never gets
    /// the latter: when the connection breaks while its insert commits, the call runs the
    /// insert again by the key (up to three times) and answers with what that finds
    /// (`Enqueued::Duplicate` when the lost commit landed, `Enqueued::New` when it did not),
    /// or with the re-run's retryable error (`Unavailable` while no server accepts writes).
    pub fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        check_job(&job, self.shared.max_payload)?;
        let queue_name = job.queue.clone();
        let keyed = job.key.is_some();
        let job = Arc::new(job);
        let enqueued = resolve_lost_commit(keyed, || {
            if S::GROUPS_INTAKE {
                // Concurrent callers of this handle share a statement (`intake_group.rs`).
                self.shared.intake.enqueue(&self.shared, job.clone())
            } else {
                insert_alone(&self.shared, job.clone())
            }
        })?;
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
    ///
    /// On PostgreSQL, `ConnectionLost` when the connection broke: with `commit_unknown`
    /// false none was added and the call may be retried; with `commit_unknown` true the
    /// connection broke while the batch committed, so either all or none were added, and
    /// retrying may add them twice. A batch whose every job has a key never gets the
    /// latter: the call runs the batch again by the keys (up to three times) and answers
    /// with what that finds (`Enqueued::Duplicate` for jobs the lost commit added), or with
    /// the re-run's retryable error.
    pub fn enqueue_batch(&self, jobs: impl IntoIterator<Item = NewJob>) -> Result<Vec<Enqueued>> {
        let jobs: Vec<NewJob> = jobs.into_iter().collect();
        for job in &jobs {
            check_job(job, self.shared.max_payload)?;
        }
        let mut queues: Vec<String> = jobs.iter().map(|j| j.queue.clone()).collect();
        queues.sort_unstable();
        queues.dedup();
        let keyed = jobs.iter().all(|job| job.key.is_some());
        let jobs = Arc::new(jobs);
        let results = resolve_lost_commit(keyed, || {
            retry_conflicts(|| {
                let (shared, jobs) = (self.shared.clone(), jobs.clone());
                self.store().submit(move |tx| insert_all(&shared, tx, &jobs))
            })
        })?;
        queues.iter().for_each(|q| self.wake(q));
        Ok(results)
    }

    /// Adds a job inside a transaction that is already open (the outbox pattern): the job
    /// exists exactly when that transaction's commit does.
    ///
    /// Call this inside [`Queue::transaction`], [`Queue::with_ownership`] or
    /// [`Queue::complete_with`] (and a pool handler's
    /// [`Attempt::with_ownership`](crate::Attempt::with_ownership)) with the transaction the
    /// closure gets. The job then commits or rolls back with the rest, and this process's
    /// pools of its queue are woken once the commit is done.
    ///
    /// On SQLite, a transaction on a connection of the application's own (`BEGIN IMMEDIATE`
    /// on the same file) works too, but it is another writer of the file: while it is open,
    /// this process's queue writes wait for it in SQLite's busy handler and fail with `Busy`
    /// after the busy timeout, and pools of other handles notice its jobs only at their next
    /// poll. On PostgreSQL the job's commit notifies every listening pool, in any process.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name is empty, longer than 128 bytes or contains a NUL
    /// byte, the key is empty or longer than 512 bytes, the payload is empty or larger than
    /// the queue's payload limit (1 MiB by default), the attempt budget is outside
    /// 1..=10,000, the delay is over a hundred years, or a trigger ignored the insert; the
    /// store's error of the insert otherwise. A transaction that is not open is the caller's
    /// bug: the insert then commits on its own.
    pub fn enqueue_tx(&self, tx: &S::Tx, job: NewJob) -> Result<Enqueued> {
        check_job(&job, self.shared.max_payload)?;
        let enqueued = insert(&self.shared, tx, &job)?;
        if scope::in_write() {
            scope::note_enqueued_in_write(&job.queue);
        }
        Ok(enqueued)
    }
}

/// Adds `jobs` in the transaction `tx`: all at once where the store can (every job new,
/// see `Store::enqueue_all_new`), else each with `insert`.
fn insert_all<S: Store>(shared: &Shared<S>, tx: &S::Tx, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
    let now = shared.now_in(tx)?;
    let rows: Vec<NewRow<'_>> = jobs.iter().map(|job| new_row(shared, job, now)).collect();
    match S::enqueue_all_new(tx, &rows)? {
        Some(ids) => Ok(ids.into_iter().map(Enqueued::New).collect()),
        None => jobs.iter().map(|job| insert(shared, tx, job)).collect(),
    }
}

pub(super) fn new_row<'j, S: Store>(shared: &Shared<S>, job: &'j NewJob, now: i64) -> NewRow<'j> {
    NewRow {
        queue: &job.queue,
        key: job.key.as_deref(),
        payload: &job.payload,
        priority: job.priority,
        run_at: now.saturating_add(duration_ms(job.delay)),
        max_attempts: job.max_attempts.unwrap_or(shared.max_attempts),
        created_at: now,
        group: job.group.as_deref(),
    }
}

/// Adds `job` (or finds the job with its key) in a statement of its own (autocommit where
/// the store can), run again after a conflict.
pub(super) fn insert_alone<S: Store>(shared: &Arc<Shared<S>>, job: Arc<NewJob>) -> Result<Enqueued> {
    retry_conflicts(|| {
        let (owner, job) = (shared.clone(), job.clone());
        shared.store.submit_single(move |tx| insert(&owner, tx, &job))
    })
}

/// Adds `job` (or finds the job with its key) in the transaction `tx`.
pub(crate) fn insert<S: Store>(shared: &Shared<S>, tx: &S::Tx, job: &NewJob) -> Result<Enqueued> {
    let key = job.key.as_deref();
    let row = new_row(shared, job, shared.now_in(tx)?);
    match S::enqueue(tx, &row)? {
        Some(id) => Ok(Enqueued::New(id)),
        // Nothing inserted: a key conflict, or (in a shared database file) an application
        // trigger that ignored the insert.
        None => key
            .map(|key| S::find_by_key(tx, &job.queue, key))
            .transpose()?
            .flatten()
            .map(Enqueued::Duplicate)
            .ok_or_else(|| Error::invalid("job", "the insert was ignored (is there a trigger on fenceq_jobs?)")),
    }
}
