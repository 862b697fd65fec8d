//! The heartbeat: renews every lease the pool holds (running or prefetched) in one
//! transaction per round, and marks a lease lost when its renewal is refused.
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

/// Renews every in-flight lease in one transaction per round until told to stop.
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
                !lease.lost.load(Ordering::SeqCst) && !lease.completed.load(Ordering::SeqCst) && !lease.let_go()
            })
            .map(|(token, lease)| (*token, lease.clone()))
            .collect();
        if in_flight.is_empty() {
            continue;
        }
        let tokens: Vec<ClaimToken> = in_flight.iter().map(|(t, _)| *t).collect();
        match shared.queue.renew_all(&tokens, shared.lease) {
            Ok(results) => {
                for ((token, lease), result) in in_flight.iter().zip(results) {
                    match result {
                        Ok(until) => lease.until.store(until, Ordering::SeqCst),
                        // Settled (or being or been completed by its handler, or handed back)
                        // while this round ran: nothing was lost. `completing` is read first:
                        // the handler sets `completed` before it clears `completing`, so one
                        // of the two is seen.
                        Err(_)
                            if lease.completing.load(Ordering::SeqCst)
                                || lease.completed.load(Ordering::SeqCst)
                                || lease.let_go()
                                || !shared.in_flight.lock().contains_key(token) => {}
                        // The row still carries this exact claim and is completed: the handler
                        // completed it with the attempt's own token (`Queue::complete_with`).
                        Err(Error::OwnershipLost { reason: LostReason::NotRunning(JobState::Completed), .. }) => {
                            lease.completed.store(true, Ordering::SeqCst);
                        }
                        Err(e) => {
                            lease.lost.store(true, Ordering::SeqCst);
                            bump(&shared.counters.renewals_failed);
                            tracing::warn!(job = %token.id, attempt = token.attempt, error = %e, "lease lost");
                        }
                    }
                }
            }
            Err(e) => {
                bump(&shared.counters.errors);
                tracing::error!(queue = %shared.queue_name, error = %e, "heartbeat round failed");
            }
        }
    }
}
