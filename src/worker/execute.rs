//! The workers: each takes claimed jobs from the dispatcher, decides whether it may still
//! start each one (not once the pool stops, not once the lease is lost), runs the handler
//! (a panic caught as a retry) and hands how the attempt finished back to the dispatcher.
//!
//! Apart because this is the code that runs on the worker threads, around the application's
//! handler; the outcomes it hands back are written by the dispatcher's settle path.

use super::attempt::{Attempt, Lease, Outcome, DROPPED, HANDED_BACK, STARTED};
use super::counters::bump;
use super::shared::Shared;
use crate::job::{ClaimToken, Claimed};
use crate::queue::settle::Settled;
use crate::store::Store;
use crossbeam_channel::{Receiver, Sender};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A worker thread's loop: takes claimed jobs until the dispatcher drops the job channel,
/// starts, drops or leaves each (see `begin`), and sends how each it started or dropped
/// finished to the dispatcher.
pub(super) fn run_worker<S: Store>(
    shared: &Shared<S>,
    jobs: &Receiver<(Claimed, Arc<Lease>)>,
    finished: &Sender<(ClaimToken, Finished)>,
) {
    for (claimed, lease) in jobs.iter() {
        let token = claimed.token;
        match begin(shared, &claimed, &lease) {
            Begin::Start => {
                let outcome = work(shared, claimed, lease);
                let _ = finished.send((token, outcome));
            }
            Begin::Drop => {
                let _ = finished.send((token, Finished::Dropped));
            }
            Begin::Late => {
                release_late(shared, &token);
                let _ = finished.send((token, Finished::ReleasedLate));
            }
            // The shutdown hands it back.
            Begin::Leave => {}
        }
    }
}

/// How an attempt finished, as the dispatcher sees it.
#[derive(Debug)]
pub(super) enum Finished {
    /// Settle it with this outcome.
    Settle(Outcome),
    /// The handler settled it itself, with its domain write (`Attempt::complete_with`,
    /// `Attempt::settle_with`): nothing left to settle, counted as what it did.
    SettledByHandler(Outcome, Settled),
    /// Never started: its lease was lost while it was held. Nothing to settle.
    Dropped,
    /// Never started: a worker took it up later after its claim than the pool's
    /// `max_start_delay`, and handed it back. Nothing to settle.
    ReleasedLate,
}

/// What a worker does with a claim it took from the channel.
enum Begin {
    /// Run the handler.
    Start,
    /// Drop it unstarted: its lease is lost.
    Drop,
    /// Leave it: the shutdown hands it back (or has).
    Leave,
    /// Hand it back unstarted: later after its claim than the pool's `max_start_delay`.
    Late,
}

/// Decides, right before a worker would run the handler, whether it may: not once the pool
/// is stopping, and not once the lease is known lost (a renewal failed, or it ran out by the
/// queue's clock: another claimer may hold the job already).
fn begin<S: Store>(shared: &Shared<S>, claimed: &Claimed, lease: &Lease) -> Begin {
    if shared.stopping.load(Ordering::SeqCst) {
        return Begin::Leave;
    }
    let lost = lease.lost.load(Ordering::SeqCst) || shared.queue.now_ms() >= lease.until.load(Ordering::SeqCst);
    if lost {
        if !lease.leave_held(DROPPED) {
            return Begin::Leave;
        }
        let token = claimed.token;
        tracing::warn!(job = %token.id, attempt = token.attempt, claim = %token.claim_id,
            "a prefetched job's lease was lost before a worker took it; dropped unstarted");
        return Begin::Drop;
    }
    let late = shared.max_start_delay_ms.is_some_and(|bound| shared.queue.now_ms() - claimed.claimed_at > bound);
    if late {
        // Once it has left `HELD` the shutdown no longer hands it back: this worker does.
        return if lease.leave_held(HANDED_BACK) { Begin::Late } else { Begin::Leave };
    }
    if lease.leave_held(STARTED) {
        Begin::Start
    } else {
        Begin::Leave
    }
}

/// Hands a job taken up too late back to the queue unstarted (its attempt given back, as a
/// shutdown's hand-back does), so that its next claim counts a start of its own.
fn release_late<S: Store>(shared: &Shared<S>, token: &ClaimToken) {
    let c = &shared.counters;
    match shared.queue.release_all(std::slice::from_ref(token)) {
        Ok(results) => match results.into_iter().next() {
            Some(Ok(())) => {
                bump(&c.released_late);
                shared.queue.wake(&shared.queue_name);
            }
            Some(Err(e)) => {
                bump(&c.dropped_lost);
                tracing::warn!(job = %token.id, attempt = token.attempt, error = %e,
                    "a job taken up after the pool's max_start_delay could not be handed back: its lease was lost; not started");
            }
            None => {}
        },
        Err(e) => {
            bump(&c.errors);
            tracing::error!(job = %token.id, attempt = token.attempt, error = %e,
                "could not hand back a job taken up after the pool's max_start_delay; not started, it is claimable once its lease runs out");
        }
    }
}

/// Works one attempt: runs the handler, catching a panic as a retry.
fn work<S: Store>(shared: &Shared<S>, claimed: Claimed, lease: Arc<Lease>) -> Finished {
    let id = claimed.token.id;
    let token = claimed.token;
    let mut attempt = Attempt { claimed, lease, queue: shared.queue.clone(), rules: shared.rules };
    let outcome = run_handler(shared, &mut attempt);
    if attempt.lease.settled.load(Ordering::SeqCst) {
        let (settled_as, settled) =
            attempt.lease.handler_settle.lock().take().unwrap_or((Outcome::Complete, Settled::Completed));
        if outcome != settled_as {
            tracing::warn!(job = %id, attempt = token.attempt, ?outcome, settled = ?settled_as,
                "the handler settled the job with its own write and then returned another outcome; \
                 the job stays as its own settle left it");
        }
        return Finished::SettledByHandler(settled_as, settled);
    }
    Finished::Settle(outcome)
}

/// Runs the handler, catching a panic as a retry.
fn run_handler<S: Store>(shared: &Shared<S>, attempt: &mut Attempt<S>) -> Outcome {
    let (id, token) = (attempt.claimed.token.id, attempt.claimed.token);
    match catch_unwind(AssertUnwindSafe(|| (shared.handler)(attempt))) {
        Ok(outcome) => outcome,
        Err(panic) => {
            bump(&shared.counters.panicked);
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".into());
            tracing::warn!(job = %id, attempt = token.attempt, %message, "handler panicked; retrying");
            Outcome::retry(format!("handler panicked: {message}"))
        }
    }
}
