//! The dispatcher: the one thread that decides when and how much the pool claims. Each
//! round settles the attempts that finished since the last one and claims jobs for the free
//! slots (workers plus prefetch) in one request. The dispatcher runs a round itself, one at
//! a time, which hands a job to a worker soonest; while the queue has a backlog (the last
//! round got every job it asked for) and the pool allows more than one round in flight,
//! round threads run them (`run_rounds`), so that the attempts that finish while one round
//! waits for the store go out in the next at once. The dispatcher hands each round's claims
//! to the workers, and sleeps until a round returns, an attempt finishes, an enqueue wakes
//! it, the poll interval passes or the pool stops; once the pool stops and its rounds have
//! returned, it hands the held jobs back.
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
use crossbeam_channel::{after, never, select, Receiver, Sender, TryRecvError};
use std::panic::{catch_unwind, AssertUnwindSafe};
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
    /// Where the dispatcher's rounds run.
    pub(super) rounds: Rounds,
}

/// Where a pool's rounds run: on the dispatcher's own thread, one at a time (no hand-off
/// between threads on the way to the store and back: the least latency), or on round
/// threads, so that several are in flight at once.
pub(super) enum Rounds {
    /// One round at a time, on the dispatcher's thread.
    Inline,
    /// On the round threads (`run_rounds`).
    Threads {
        /// Rounds to the round threads (dropped when the dispatcher ends, which ends them).
        send: Sender<RoundRequest>,
        /// What each round did.
        returned: Receiver<RoundReturned>,
    },
}

/// One round for a round thread: the finished attempts to settle, and how many jobs to
/// claim.
pub(super) struct RoundRequest {
    finished: Vec<(ClaimToken, Finished)>,
    claim: usize,
}

/// What a round did: how many finished attempts it was given, how many jobs it asked for,
/// and the claims it made (registered in flight).
pub(super) struct RoundReturned {
    finished: usize,
    asked: usize,
    claimed: Vec<(Claimed, Arc<Lease>)>,
}

/// A round thread's loop: runs each round it is sent (`settle_and_claim`) and returns what
/// it did, until the dispatcher drops the round channel. A round that panics returns as
/// one that claimed nothing (logged), so that the dispatcher, which waits for every round
/// in flight before it hands the held jobs back, never waits for it forever.
pub(super) fn run_rounds<S: Store>(
    shared: &Shared<S>,
    worker: &str,
    rounds: &Receiver<RoundRequest>,
    returned: &Sender<RoundReturned>,
) {
    for round in rounds.iter() {
        let settled = round.finished.len();
        let asked = round.claim;
        let claimed = catch_unwind(AssertUnwindSafe(|| run_round(shared, worker, round))).unwrap_or_else(|_| {
            bump(&shared.counters.errors);
            tracing::error!(queue = %shared.queue_name,
                "a dispatcher round panicked; its settles and claim may not have been written");
            RoundReturned { finished: settled, asked, claimed: Vec::new() }
        });
        if returned.send(claimed).is_err() {
            return;
        }
    }
}

/// Runs one round: settles its finished attempts and claims (`settle_and_claim`).
fn run_round<S: Store>(shared: &Shared<S>, worker: &str, round: RoundRequest) -> RoundReturned {
    let RoundRequest { finished, claim } = round;
    let settled = finished.len();
    RoundReturned { finished: settled, asked: claim, claimed: settle_and_claim(shared, worker, finished, claim) }
}

/// Settles finished attempts and claims jobs for free slots (workers plus prefetch), up to
/// `rounds_in_flight` requests at once; sleeps until a round returns, an attempt finishes,
/// an enqueue wakes it, the poll interval passes, or the pool stops. Once the pool is
/// stopping it claims nothing more and, once its rounds in flight have returned, hands
/// back the held jobs no worker started; it returns once every worker has ended and its
/// last attempt is settled.
pub(super) fn dispatch<S: Store>(
    shared: &Shared<S>,
    worker: &str,
    (workers, mut prefetch): (usize, Prefetch),
    poll: Duration,
    channels: DispatchChannels,
) {
    let DispatchChannels { jobs, finished, wake, stop, handed_back, rounds } = channels;
    let (rounds_in_flight, returned) = match &rounds {
        Rounds::Inline => (1, never()),
        Rounds::Threads { send, returned } => (send.capacity().unwrap_or(1), returned.clone()),
    };
    // The round the dispatcher ran itself, to take in as if a round thread returned it.
    let mut ran: Option<RoundReturned> = None;
    let mut jobs = Some(jobs);
    let (mut finished, mut stop) = (finished, stop);
    let held_back = never();
    // Claimed and not finished: held or running.
    let mut busy = 0usize;
    // Rounds sent and not yet returned, and the jobs they asked for between them.
    let (mut in_flight, mut asked) = (0usize, 0usize);
    let mut done: Vec<(ClaimToken, Finished)> = Vec::new();
    // Whether the next round should claim although no attempt finished: at the start, after
    // a round that claimed (more may be due), a wake and an idle poll.
    let mut look = true;
    // Whether the last round that claimed got every job it asked for: the queue has a
    // backlog. Only then do rounds overlap (on the round threads); otherwise the dispatcher
    // runs one round at a time itself, which hands a job to a worker soonest.
    let mut backlog = false;
    let mut workers_gone = false;
    let mut rates = RateWatch::default();
    loop {
        if let Some(round) = ran.take() {
            in_flight -= 1;
            asked -= round.asked;
            if round.asked > 0 {
                backlog = round.claimed.len() == round.asked;
            }
            match hand_out(shared, round, jobs.as_ref(), &mut prefetch) {
                Some(claimed) => {
                    busy += claimed;
                    // There may be more due jobs.
                    look |= claimed > 0;
                }
                // Every worker has ended.
                None => return,
            }
        }
        if jobs.is_some() && in_flight == 0 && shared.stopping.load(Ordering::SeqCst) {
            // Workers end once the job channel is dropped and they have skipped what it holds.
            jobs = None;
            let (taken, back) = hand_back(shared);
            busy -= taken;
            let _ = handed_back.send(back);
        }
        while done.len() < SETTLE_BATCH {
            match finished.try_recv() {
                Ok(attempt) => {
                    busy -= 1;
                    done.push(attempt);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    workers_gone = true;
                    finished = never();
                    break;
                }
            }
        }
        if workers_gone && jobs.is_none() && in_flight == 0 && done.is_empty() {
            return;
        }
        let claiming = jobs.is_some() && !shared.stopping.load(Ordering::SeqCst);
        // A rate-limited queue claims only for idle workers: a rate counts claims, and a
        // claimed job that waited for a worker would start later than it was counted.
        let ahead = if claiming && rates.limited(shared, poll) { 0 } else { prefetch.now() };
        // The prefetch may have shrunk below what the workers still hold.
        let free = if claiming { (workers + ahead).saturating_sub(busy + asked) } else { 0 };
        let claim = if look || !done.is_empty() { free } else { 0 };
        let another = in_flight == 0 || (backlog && in_flight < rounds_in_flight);
        if another && (claim > 0 || !done.is_empty()) {
            let round = RoundRequest { finished: std::mem::take(&mut done), claim };
            match &rounds {
                // The channel holds as many rounds as may be in flight: this never blocks.
                // (A round while another is in flight implies a backlog.)
                Rounds::Threads { send, .. } if backlog => {
                    if send.send(round).is_err() {
                        return;
                    }
                }
                _ => ran = Some(run_round(shared, worker, round)),
            }
            in_flight += 1;
            asked += claim;
            if claim > 0 {
                look = false;
            }
            continue;
        }
        // Idle (no round in flight, nothing to settle): sleep until the poll, or sooner when
        // a limit or a back-off ends sooner. A round in flight returns by itself.
        let wait = if in_flight == 0 && claiming {
            after(until_limit_opens(shared, idle_wait(shared, poll)))
        } else {
            never()
        };
        // Finished attempts wait in their channel while no other round may start: the next
        // round takes them all at once.
        let attempts = if another { &finished } else { &held_back };
        select! {
            recv(returned) -> round => {
                // Every round thread has ended: nothing can be settled or claimed any more.
                let Ok(round) = round else { return };
                ran = Some(round);
            }
            recv(attempts) -> attempt => {
                // A disconnection is the loop's `try_recv` to find.
                if let Ok(attempt) = attempt {
                    busy -= 1;
                    done.push(attempt);
                }
            }
            recv(wake) -> _ => look = true,
            // `stopping` is set: the loop hands the held jobs back once no round is in flight.
            recv(stop) -> _ => stop = never(),
            recv(wait) -> _ => look = true,
        }
    }
}

/// Whether the pool's queue has a rate (queue-wide or per group) stored, read again at most
/// once per poll interval, so that a limit set while the pool runs (another process, the
/// CLI) takes effect within one. A read that fails counts as limited until the next: the
/// cost is a prefetch skipped, never a start later than its count.
#[derive(Debug, Default)]
struct RateWatch {
    limited: bool,
    read_at: Option<std::time::Instant>,
}

impl RateWatch {
    fn limited<S: Store>(&mut self, shared: &Shared<S>, poll: Duration) -> bool {
        if self.read_at.is_some_and(|at| at.elapsed() < poll) {
            return self.limited;
        }
        self.read_at = Some(std::time::Instant::now());
        self.limited = match shared.queue.limits(&shared.queue_name) {
            Ok(limits) => limits.rate.is_some() || !limits.group_rates.is_empty(),
            Err(e) => {
                tracing::warn!(queue = %shared.queue_name, error = %e,
                    "could not read the queue's limits; claiming for idle workers only until the next read");
                true
            }
        };
        self.limited
    }
}

/// Takes a returned round in: counts a round that settled (the pool's waits watch the
/// count), lets the prefetch follow it, and hands its claims to the workers. Returns how
/// many jobs it handed out, or `None` once no worker is left to take them.
fn hand_out<S: Store>(
    shared: &Shared<S>,
    round: RoundReturned,
    jobs: Option<&Sender<(Claimed, Arc<Lease>)>>,
    prefetch: &mut Prefetch,
) -> Option<usize> {
    if round.finished > 0 {
        *shared.rounds.lock() += 1;
        shared.round_done.notify_all();
    }
    let claimed = round.claimed.len();
    // Only a round sent before the pool stopped claims, and the held jobs are handed back
    // only once every round has returned: a round that claimed finds the channel open.
    let Some(jobs) = jobs else { return Some(0) };
    // Judged before this round's claims join the jobs still waiting to start.
    prefetch.after_round(Round { finished: round.finished, asked: round.asked, claimed, waiting: jobs.len() });
    for claimed in round.claimed {
        // A slot is free for every claimed job, so this never blocks.
        jobs.send(claimed).ok()?;
    }
    Some(claimed)
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
