//! The heartbeat: renews every lease the pool holds (running or prefetched), each in a
//! transaction of its own, and marks a lease lost when its renewal is refused.
//!
//! One transaction per lease, not one per round: on a store with row locks (PostgreSQL) a
//! renewal holds its job's row until it commits, so a round in one transaction would hold
//! every row it renewed while it waits for the next (a settle in progress, a busy server),
//! and every settle of those jobs would wait for the whole round.
//!
//! Apart because it runs on its own thread and clock, and touches only the in-flight set and
//! the leases, never the job channel.

use super::attempt::Lease;
use super::counters::bump;
use super::shared::Shared;
use crate::error::{Error, LostReason};
use crate::job::{ClaimToken, JobState};
use crate::store::Store;
use crossbeam_channel::{select, Receiver};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Renews every in-flight lease, one transaction each, once per `every`, until told to stop.
pub(super) fn heartbeat<S: Store>(shared: &Shared<S>, every: Duration, stop: Receiver<()>) {
    loop {
        select! {
            recv(stop) -> _ => return,
            default(every) => {}
        }
        let in_flight: Vec<(ClaimToken, Arc<Lease>)> = shared
            .in_flight
            .lock()
            .iter()
            .filter(|(_, lease)| {
                !lease.lost.load(Ordering::SeqCst) && !lease.settled.load(Ordering::SeqCst) && !lease.let_go()
            })
            .map(|(token, lease)| (*token, lease.clone()))
            .collect();
        for (token, lease) in &in_flight {
            // A renewal answers `OwnershipLost` for its token; any other error is the store's.
            match shared.queue.renew(token, shared.lease) {
                Ok(until) => lease.until.store(until, Ordering::SeqCst),
                Err(refused @ Error::OwnershipLost { .. }) => refusal(shared, token, lease, refused),
                // A storage error (the store down, busy past its timeout): the rest of the
                // round would wait the same way, so it ends here and the next round tries again.
                Err(e) => {
                    bump(&shared.counters.errors);
                    tracing::error!(queue = %shared.queue_name, error = %e, "heartbeat round failed");
                    break;
                }
            }
        }
    }
}

/// What a refused renewal of `token` means for its lease.
fn refusal<S: Store>(shared: &Shared<S>, token: &ClaimToken, lease: &Lease, refused: Error) {
    match refused {
        // Settled (or being or been settled by its handler, or handed back) while this
        // round ran: nothing was lost. `settling` is read first: the handler sets
        // `settled` before it clears `settling`, so one of the two is seen.
        _ if lease.settling.load(Ordering::SeqCst)
            || lease.settled.load(Ordering::SeqCst)
            || lease.let_go()
            || !shared.in_flight.lock().contains_key(token) => {}
        // The row still carries this exact claim and is completed: the handler completed it
        // with the attempt's own token (`Queue::complete_with`).
        Error::OwnershipLost { reason: LostReason::NotRunning(JobState::Completed), .. } => {
            lease.settled.store(true, Ordering::SeqCst);
        }
        e => {
            lease.lost.store(true, Ordering::SeqCst);
            bump(&shared.counters.renewals_failed);
            tracing::warn!(job = %token.id, attempt = token.attempt, error = %e, "lease lost");
        }
    }
}
