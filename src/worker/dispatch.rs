//! The dispatcher: the one thread that claims for the pool. Each round it settles the
//! attempts that finished since the last one and claims jobs for the free slots (workers
//! plus prefetch) in one request, hands the claims to the workers, and sleeps until an
//! attempt finishes, an enqueue wakes it, the poll interval passes or the pool stops; once
//! the pool stops it hands the held jobs back.
//!
//! Apart from the workers and the settle path: it decides when and how much to claim, while
//! what a round writes is the settle path's.

use super::attempt::{Lease, HANDED_BACK};
use super::counters::bump;
use super::execute::Finished;
use super::prefetch::{Prefetch, Round};
use super::settle::settle_and_claim;
use super::shared::Shared;
use crate::job::{ClaimToken, Claimed, JobId};
use crate::store::Store;
use crossbeam_channel::{select, Receiver, Sender, TryRecvError};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Most outcomes settled in one transaction.
const SETTLE_BATCH: usize = 512;

/// The dispatcher's channels.
pub(super) struct DispatchChannels {
    /// Claimed jobs to the workers, each with its lease (dropped when the pool stops).
    pub(super) jobs: Sender<(Claimed, Arc<Lease>)>,
    /// Finished attempts from the workers (disconnected once every worker has ended).
    pub(super) finished: Receiver<(ClaimToken, Finished)>,
    /// An enqueue to this queue through the same `Queue`.
    pub(super) wake: Receiver<()>,
    /// Closed when the pool stops.
    pub(super) stop: Receiver<()>,
    /// The jobs handed back when the pool stopped, to the shutdown.
    pub(super) handed_back: Sender<Vec<JobId>>,
}

/// Settles finished attempts and claims jobs for free slots (workers plus prefetch), in one
/// request per round; sleeps until an attempt finishes, an enqueue wakes it, the poll
/// interval passes, or the pool stops. Once the pool is stopping it claims nothing more,
/// hands back the held jobs no worker started, and returns once every worker has ended and
/// its last attempt is settled.
pub(super) fn dispatch<S: Store>(
    shared: &Shared<S>,
    worker: &str,
    (workers, mut prefetch): (usize, Prefetch),
    poll: Duration,
    channels: DispatchChannels,
) {
    let DispatchChannels { jobs, finished, wake, stop, handed_back } = channels;
    let mut jobs = Some(jobs);
    let mut busy = 0usize;
    let mut done: Vec<(ClaimToken, Finished)> = Vec::new();
    let mut workers_gone = false;
    loop {
        if jobs.is_some() && shared.stopping.load(Ordering::SeqCst) {
            // Workers end once the job channel is dropped and they have skipped what it holds.
            jobs = None;
            let (taken, back) = hand_back(shared);
            busy -= taken;
            let _ = handed_back.send(back);
        }
        while done.len() < SETTLE_BATCH {
            match finished.try_recv() {
                Ok(attempt) => done.push(attempt),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    workers_gone = true;
                    break;
                }
            }
        }
        busy -= done.len();
        let finished_now = done.len();
        // The prefetch may have shrunk below what the workers still hold.
        let free = if jobs.is_some() { (workers + prefetch.now()).saturating_sub(busy) } else { 0 };
        let settled_any = !done.is_empty();
        let claimed = settle_and_claim(shared, worker, std::mem::take(&mut done), free);
        if settled_any {
            *shared.rounds.lock() += 1;
            shared.round_done.notify_all();
        }
        if let Some(jobs) = &jobs {
            // Judged before this round's claims join the jobs still waiting to start.
            prefetch.after_round(Round {
                finished: finished_now,
                asked: free,
                claimed: claimed.len(),
                waiting: jobs.len(),
            });
        }
        let slots = workers + prefetch.now();
        let claimed_any = !claimed.is_empty();
        for claimed in claimed {
            busy += 1;
            // A worker is free for every claimed job, so this does not block long.
            if jobs.as_ref().is_some_and(|jobs| jobs.send(claimed).is_err()) {
                return;
            }
        }
        if workers_gone && jobs.is_none() {
            return;
        }
        if claimed_any && busy < slots {
            continue; // there may be more due jobs
        }
        if jobs.is_none() {
            // Stopping: only finished attempts matter now.
            match finished.recv() {
                Ok(attempt) => done.push(attempt),
                Err(_) => workers_gone = true,
            }
            continue;
        }
        let wait = until_limit_opens(shared, idle_wait(shared, poll));
        select! {
            recv(stop) -> _ => {} // `stopping` is set: the next round hands the held jobs back
            recv(finished) -> attempt => match attempt {
                Ok(attempt) => done.push(attempt),
                Err(_) => workers_gone = true,
            },
            recv(wake) -> _ => {}
            default(wait) => {}
        }
    }
}

/// How long an idle dispatcher sleeps: the poll interval, or less when a limit held the
/// queue's jobs back at the last claim and opens sooner (at least a millisecond: it does not
/// spin).
fn until_limit_opens<S: Store>(shared: &Shared<S>, poll: Duration) -> Duration {
    let queue = &shared.queue.shared;
    match queue.limit_opens_at(&shared.queue_name) {
        Some(at) => {
            let ms = u64::try_from(at.saturating_sub(queue.now())).unwrap_or(0).max(1);
            poll.min(Duration::from_millis(ms))
        }
        None => poll,
    }
}

/// How long an idle dispatcher waits: the poll interval, or less when a queue back-off this
/// pool stored ends sooner (its claims find nothing until then, and something once it ends).
/// A back-off stored by another pool or process is found at the next poll.
fn idle_wait<S: Store>(shared: &Shared<S>, poll: Duration) -> Duration {
    let until = shared.backoff_until.load(Ordering::SeqCst);
    if until == 0 {
        return poll;
    }
    let left = until.saturating_sub(shared.queue.now_ms());
    if left <= 0 {
        // Over: forget it (a later one replaces it with `fetch_max`).
        let _ = shared.backoff_until.compare_exchange(until, 0, Ordering::SeqCst, Ordering::SeqCst);
        return poll;
    }
    // One ms past the end: the claim finds the queue open only once `until` has passed.
    poll.min(Duration::from_millis(left as u64 + 1))
}

/// Hands back every held job no worker has started (a worker that takes one afterwards
/// skips it), in one transaction. Returns how many held jobs it took out of the pool's hands,
/// and the ids of those the queue took back (a held job whose lease another claim has taken
/// stays with that claim). Run by the dispatcher once the pool is stopping and it has
/// stopped claiming, so that no claim joins the held jobs afterwards.
fn hand_back<S: Store>(shared: &Shared<S>) -> (usize, Vec<JobId>) {
    let held: Vec<ClaimToken> = {
        let mut in_flight = shared.in_flight.lock();
        // Each held claim leaves `HELD` once: here, or in the worker that starts or drops it.
        let held: Vec<ClaimToken> =
            in_flight.iter().filter(|(_, lease)| lease.leave_held(HANDED_BACK)).map(|(token, _)| *token).collect();
        // Forgotten before the release commits: the heartbeat no longer renews them, and a
        // renewal racing the release is no lost lease.
        for token in &held {
            in_flight.remove(token);
        }
        held
    };
    if held.is_empty() {
        return (0, Vec::new());
    }
    let c = &shared.counters;
    let mut back = Vec::with_capacity(held.len());
    match shared.queue.release_all(&held) {
        Ok(results) => {
            for (token, result) in held.iter().zip(results) {
                match result {
                    Ok(()) => back.push(token.id),
                    Err(e) => {
                        bump(&c.dropped_lost);
                        tracing::warn!(job = %token.id, attempt = token.attempt, error = %e,
                            "a held job was not handed back: its lease was lost before the shutdown; not started");
                    }
                }
            }
            c.handed_back.fetch_add(back.len() as u64, Ordering::SeqCst);
            if !back.is_empty() {
                // Other pools of this handle may take them at once.
                shared.queue.wake(&shared.queue_name);
            }
        }
        Err(e) => {
            c.errors.fetch_add(held.len() as u64, Ordering::SeqCst);
            let jobs: Vec<JobId> = held.iter().map(|token| token.id).collect();
            tracing::error!(queue = %shared.queue_name, ?jobs, error = %e,
                "could not hand the held jobs back; not started, they are claimable once their leases run out");
        }
    }
    (held.len(), back)
}
