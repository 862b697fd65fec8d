//! Intake groups: concurrent [`Queue::enqueue`](super::Queue::enqueue) calls of one queue
//! handle share one statement and one commit, on a store that asks for it
//! ([`Store::GROUPS_INTAKE`]: PostgreSQL).
//!
//! On a server every statement is a round trip and every commit the server's own work and
//! WAL flush, so callers that each run their own `INSERT` (and wait for their own commit)
//! spend the server's CPU on per-statement work: on the 2-core development machine 4 to 64
//! threads calling `enqueue` reached 3,900 to 4,600 jobs/s, a batch of 100 in one statement
//! 75,000. So the calls of one handle queue here, and the first caller that finds no leader
//! leads: it takes up to [`MAX_GROUP`] waiting jobs and inserts them in one statement that
//! adds all of them or none ([`Store::enqueue_all_or_none`], in autocommit: one round trip
//! and one commit for the group), hands the leadership to the first caller that arrived
//! meanwhile, and answers each caller with its own result. When a key is already taken (or
//! two callers of the group share one), that statement changes nothing, and the group
//! inserts its jobs one by one in one transaction instead.
//! A lone caller is a group of one and runs exactly as before: one autocommit `INSERT`.
//!
//! Each caller gets the answer it would have got alone:
//! - its own job's id, or `Duplicate` with the id of the job its key already named (also
//!   when an earlier caller of the same group added it);
//! - when the group's transaction failed before its commit (a row the database refused, say),
//!   nothing of it committed, so each job is then inserted alone and each caller gets its
//!   own outcome: one refused job never fails its neighbours;
//! - when whether it committed is unknown (the connection was lost on the way), every caller
//!   gets that error, as a lone caller would.
//!
//! SQLite's writer already groups every request of a process (one transaction, one savepoint
//! each), so it keeps the plain path.

use super::intake::{insert, insert_alone, new_row};
use super::retry::retry_conflicts;
use super::Shared;
use crate::error::{Error, Result};
use crate::job::{Enqueued, NewJob};
use crate::store::{NewRow, Store};
use parking_lot::{Condvar, Mutex};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Most jobs one group inserts; the rest wait for the next leader.
pub(crate) const MAX_GROUP: usize = 100;

/// The handle's waiting callers and whether one of them leads.
#[derive(Default)]
pub(crate) struct IntakeGroup {
    pending: Mutex<Pending>,
    /// Callers whose job shared a group with an earlier caller's (for `commit_stats`).
    joined: AtomicU64,
}

/// Invariant: when `leading` is false, `members` is empty.
#[derive(Default)]
struct Pending {
    members: Vec<Member>,
    leading: bool,
}

struct Member {
    job: Arc<NewJob>,
    slot: Arc<Slot>,
}

/// Where a caller waits for its turn.
#[derive(Default)]
struct Slot {
    turn: Mutex<Turn>,
    wake: Condvar,
}

#[derive(Default)]
enum Turn {
    #[default]
    Waiting,
    Lead,
    Answered(Result<Enqueued>),
}

impl Slot {
    fn set(&self, turn: Turn) {
        *self.turn.lock() = turn;
        self.wake.notify_one();
    }
}

impl std::fmt::Debug for IntakeGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntakeGroup").field("joined", &self.joined()).finish_non_exhaustive()
    }
}

impl IntakeGroup {
    /// Callers that shared a group with an earlier caller, so far: each of them is a request
    /// that cost no transaction of its own.
    pub(crate) fn joined(&self) -> u64 {
        self.joined.load(Ordering::Relaxed)
    }

    /// Inserts `job` (checked already) in a group with the handle's other waiting callers,
    /// and returns its own result once the transaction that carried it has committed.
    pub(crate) fn enqueue<S: Store>(&self, shared: &Arc<Shared<S>>, job: Arc<NewJob>) -> Result<Enqueued> {
        if crate::store::scope::in_write() {
            // The store would refuse it as well; refused here, before it can join a group
            // that another thread's leader runs.
            return Err(Error::NestedWrite);
        }
        let slot = Arc::new(Slot::default());
        let lead = {
            let mut pending = self.pending.lock();
            pending.members.push(Member { job, slot: slot.clone() });
            !std::mem::replace(&mut pending.leading, true)
        };
        if lead {
            self.lead(shared);
        }
        loop {
            let mut turn = slot.turn.lock();
            match std::mem::take(&mut *turn) {
                Turn::Answered(result) => return result,
                Turn::Lead => {
                    drop(turn);
                    self.lead(shared);
                }
                Turn::Waiting => slot.wake.wait(&mut turn),
            }
        }
    }

    /// Leads one group: takes the waiting jobs (this caller's own is the first), inserts
    /// and commits them, hands the leadership on and answers every member.
    fn lead<S: Store>(&self, shared: &Arc<Shared<S>>) {
        let batch: Vec<Member> = {
            let mut pending = self.pending.lock();
            let take = pending.members.len().min(MAX_GROUP);
            pending.members.drain(..take).collect()
        };
        let (jobs, slots): (Vec<Arc<NewJob>>, Vec<Arc<Slot>>) = batch.into_iter().map(|m| (m.job, m.slot)).unzip();
        self.joined.fetch_add(jobs.len().saturating_sub(1) as u64, Ordering::Relaxed);
        let results = catch_unwind(AssertUnwindSafe(|| insert_group(shared, jobs)));
        {
            let mut pending = self.pending.lock();
            match pending.members.first() {
                Some(next) => next.slot.set(Turn::Lead),
                None => pending.leading = false,
            }
        }
        match results {
            Ok(results) => {
                for (slot, result) in slots.iter().zip(results) {
                    slot.set(Turn::Answered(result));
                }
            }
            Err(panic) => {
                for slot in &slots {
                    slot.set(Turn::Answered(Err(Error::domain("the intake group's leader panicked"))));
                }
                resume_unwind(panic);
            }
        }
    }
}

/// The result of each of `jobs`, in order (see the module docs).
fn insert_group<S: Store>(shared: &Arc<Shared<S>>, jobs: Vec<Arc<NewJob>>) -> Vec<Result<Enqueued>> {
    if jobs.len() == 1 {
        return each_alone(shared, jobs);
    }
    let jobs = Arc::new(jobs);
    // The common case, every job new: one statement, in autocommit where the store can.
    let all_new = retry_conflicts(|| {
        let (owner, jobs) = (shared.clone(), jobs.clone());
        shared.store.submit_single(move |tx| {
            let now = owner.now_in(tx)?;
            let rows: Vec<NewRow<'_>> = jobs.iter().map(|job| new_row(&owner, job, now)).collect();
            S::enqueue_all_or_none(tx, &rows)
        })
    });
    match all_new {
        Ok(Some(ids)) => return ids.into_iter().map(|id| Ok(Enqueued::New(id))).collect(),
        // A key conflict: nothing was inserted; job by job below.
        Ok(None) => {}
        // Refused, so nothing of it committed: each job alone, each caller its own outcome.
        Err(e) if e.proves_nothing_written() => return each_alone(shared, Arc::unwrap_or_clone(jobs)),
        // Not refused (a lost connection: whether it committed is unknown; no connection at
        // all), as it would be for a lone caller.
        Err(e) => return shared_error(e, jobs.len()),
    }
    // Set once the work ran to its end: an error after that is the commit's.
    let ran = Arc::new(AtomicBool::new(false));
    let one_by_one = retry_conflicts(|| {
        let (owner, jobs, ran) = (shared.clone(), jobs.clone(), ran.clone());
        ran.store(false, Ordering::SeqCst);
        shared.store.submit(move |tx| {
            let results = jobs.iter().map(|job| insert(&owner, tx, job)).collect::<Result<Vec<_>>>()?;
            ran.store(true, Ordering::SeqCst);
            Ok(results)
        })
    });
    match one_by_one {
        Ok(results) => results.into_iter().map(Ok).collect(),
        Err(e) if ran.load(Ordering::SeqCst) => shared_error(e, jobs.len()),
        // Rolled back before its commit: nothing of it is in the database.
        Err(_) => each_alone(shared, Arc::unwrap_or_clone(jobs)),
    }
}

/// Each of `jobs` in a statement of its own, each with its own outcome.
fn each_alone<S: Store>(shared: &Arc<Shared<S>>, jobs: Vec<Arc<NewJob>>) -> Vec<Result<Enqueued>> {
    jobs.into_iter().map(|job| insert_alone(shared, job)).collect()
}

/// `e` for each of `members`: the error itself for the first (the leader's own call), a
/// copy for the others.
fn shared_error(e: Error, members: usize) -> Vec<Result<Enqueued>> {
    let mut results: Vec<Result<Enqueued>> = (1..members).map(|_| Err(e.clone())).collect();
    results.insert(0, Err(e));
    results
}
