//! The settle path: how a dispatcher round writes the outcomes of finished attempts and its
//! claim, what it does when that request fails (settles again without the claim, then each
//! alone, an outcome whose text the store refused with the text replaced), and how each
//! result is counted and logged.
//!
//! Apart from the dispatcher so that the loop reads as when to settle and claim, and this
//! file as what a failure of either costs (never a neighbour's outcome).

use super::attempt::{Lease, Outcome};
use super::counters::bump;
use super::execute::Finished;
use super::shared::Shared;
use crate::error::{Error, LostReason, Result};
use crate::job::{BackoffScope, ClaimToken, Claimed, JobId, JobState};
use crate::queue::settle::{Settle, Settled};
use crate::store::Store;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Settles `finished` and claims up to `free` jobs in one request; registers the claims as
/// in flight and returns them.
///
/// When the combined request fails, the settles are tried again in one transaction of their
/// own, so that a failing claim never costs the finished attempts their outcomes. When that
/// fails too because the store refused a statement (not for its own trouble: the
/// connection, the disk, a lock), one outcome failed the whole batch: each is then settled
/// alone (see `settle_alone`), so that one outcome the store refuses never fails its
/// neighbours, and the claim is made on its own.
pub(super) fn settle_and_claim<S: Store>(
    shared: &Shared<S>,
    worker: &str,
    finished: Vec<(ClaimToken, Finished)>,
    free: usize,
) -> Vec<(Claimed, Arc<Lease>)> {
    if finished.is_empty() && free == 0 {
        return Vec::new();
    }
    // A finished attempt needs no more renewals; forgotten before its settle commits, so
    // that a heartbeat round racing the settle knows a failed renewal of it is no loss.
    forget(shared, &finished);
    let c = &shared.counters;
    let mut batch: Vec<(ClaimToken, Outcome)> = Vec::with_capacity(finished.len());
    for (token, finished) in finished {
        match finished {
            Finished::Settle(outcome) => batch.push((token, outcome)),
            // Its settle committed with the handler's write.
            Finished::SettledByHandler(outcome, settled) => count_settled(shared, &outcome, settled),
            // Logged by the worker that dropped it.
            Finished::Dropped => bump(&c.dropped_lost),
            // Handed back (and counted) by the worker that took it up too late.
            Finished::ReleasedLate => {}
        }
    }
    if batch.is_empty() && free == 0 {
        return Vec::new();
    }
    let claim_failed = |e: &Error| {
        bump(&c.errors);
        if may_have_committed(e) {
            tracing::error!(queue = %shared.queue_name, jobs = batch.len(), error = %e,
                "claim outcome unknown: the connection broke while the round committed; settling again \
                 (a settle that did commit is refused as no longer owned)");
        } else {
            tracing::error!(queue = %shared.queue_name, error = %e, "claim failed");
        }
    };
    let claimed = match shared.queue.settle_and_claim(
        settles(shared, &batch),
        &shared.queue_name,
        worker,
        shared.lease,
        free as u32,
    ) {
        Ok((results, claimed)) => {
            tally(shared, &batch, results);
            claimed
        }
        // Nothing was to be settled: the claim failed, and that is all there is to say.
        Err(e) if batch.is_empty() => {
            claim_failed(&e);
            return Vec::new();
        }
        Err(e) => match shared.queue.settle_many(settles(shared, &batch)) {
            Ok(results) => {
                claim_failed(&e);
                tally(shared, &batch, results);
                Vec::new()
            }
            // The store's own trouble (the connection, the disk, a lock): each alone would
            // fail the same way, after waiting as long.
            Err(e) if !e.is_statement_refused() => {
                c.errors.fetch_add(batch.len() as u64, Ordering::SeqCst);
                let jobs: Vec<JobId> = batch.iter().map(|(token, _)| token.id).collect();
                if may_have_committed(&e) {
                    tracing::error!(queue = %shared.queue_name, ?jobs, error = %e,
                        "settle outcome unknown: the connection broke while it committed, so the jobs may be \
                         settled; if not, their leases run out and they are claimed again");
                } else {
                    tracing::error!(queue = %shared.queue_name, ?jobs, error = %e,
                        "settles failed; the jobs stay running until their leases run out, then are claimed again");
                }
                return Vec::new();
            }
            Err(e) => {
                tracing::warn!(queue = %shared.queue_name, jobs = batch.len(), error = %e,
                    "a round's settles failed together; settling each alone");
                if !settle_alone(shared, &batch) || free == 0 {
                    return Vec::new();
                }
                match shared.queue.claim_batch(&shared.queue_name, worker, shared.lease, free as u32) {
                    Ok(claimed) => claimed,
                    Err(e) => {
                        claim_failed(&e);
                        return Vec::new();
                    }
                }
            }
        },
    };
    let mut in_flight = shared.in_flight.lock();
    claimed
        .into_iter()
        .map(|claimed| {
            bump(&c.claimed);
            let lease = Arc::new(Lease::held(claimed.lease_until));
            in_flight.insert(claimed.token, lease.clone());
            (claimed, lease)
        })
        .collect()
}

/// Counts (and logs) what each settle of `batch` did.
fn tally<S: Store>(shared: &Shared<S>, batch: &[(ClaimToken, Outcome)], results: Vec<Result<Settled>>) {
    for ((token, outcome), result) in batch.iter().zip(results) {
        tally_one(shared, token, outcome, result);
    }
}

/// Counts what a settle that committed did (the pool's or the handler's own).
pub(super) fn count_settled<S: Store>(shared: &Shared<S>, outcome: &Outcome, settled: Settled) {
    let c = &shared.counters;
    match settled {
        Settled::Completed => bump(&c.completed),
        Settled::Retried(_) => bump(&c.retried),
        Settled::Exhausted => bump(&c.exhausted),
        Settled::Unknown => bump(&c.unknown),
        Settled::Parked => bump(&c.parked),
        Settled::Snoozed(at) => {
            bump(&c.snoozed);
            if matches!(outcome, Outcome::RetryAfter { scope: BackoffScope::Queue, .. }) {
                // The dispatcher sleeps no longer than until the back-off ends.
                shared.backoff_until.fetch_max(at, Ordering::SeqCst);
            }
        }
    }
}

fn tally_one<S: Store>(shared: &Shared<S>, token: &ClaimToken, outcome: &Outcome, result: Result<Settled>) {
    let c = &shared.counters;
    match result {
        Ok(settled) => count_settled(shared, outcome, settled),
        // The row still carries this exact claim and is completed: the handler completed it
        // with the attempt's own token (`Queue::complete_with`), and the settle came second.
        Err(Error::OwnershipLost { reason: LostReason::NotRunning(JobState::Completed), .. }) => {
            bump(&c.completed);
            if *outcome != Outcome::Complete {
                tracing::warn!(job = %token.id, attempt = token.attempt, ?outcome,
                    "the handler completed the job with its own token and then returned another outcome; \
                     the job stays completed");
            }
        }
        Err(Error::OwnershipLost { reason, .. }) => {
            bump(&c.stale_settles_rejected);
            tracing::warn!(job = %token.id, attempt = token.attempt, claim = %token.claim_id, %reason,
                "settle rejected: the attempt no longer owns its job");
        }
        Err(e) if may_have_committed(&e) => {
            bump(&c.errors);
            tracing::error!(job = %token.id, attempt = token.attempt, ?outcome, error = %e,
                "settle outcome unknown: the connection broke while it committed, so the job may be settled");
        }
        Err(e) => {
            bump(&c.errors);
            tracing::error!(job = %token.id, attempt = token.attempt, ?outcome, error = %e,
                "settle failed; the job stays running until its lease runs out, then is claimed again");
        }
    }
}

/// Settles each outcome of `batch` in a transaction of its own, after the batch failed as a
/// whole. An outcome whose text the store refused is settled as the handler said with the
/// text escaped (`settle_replacing_text`). Once a settle fails for a reason of the store's
/// rather than its own row's (the connection, the disk, a lock), the rest would fail the
/// same way: they are counted and logged, not tried. Returns false in that case.
fn settle_alone<S: Store>(shared: &Shared<S>, batch: &[(ClaimToken, Outcome)]) -> bool {
    let mut store_failed: Option<String> = None;
    let mut not_tried: Vec<JobId> = Vec::new();
    for (token, outcome) in batch {
        if store_failed.is_some() {
            not_tried.push(token.id);
            continue;
        }
        let result = match shared.queue.settle(token, settle_of(shared, token, outcome)) {
            Err(e) if e.is_statement_refused() => settle_replacing_text(shared, token, outcome, e),
            other => other,
        };
        if let Err(e) = &result {
            if !e.is_statement_refused() && !matches!(e, Error::OwnershipLost { .. } | Error::InvalidInput { .. }) {
                store_failed = Some(e.to_string());
            }
        }
        tally_one(shared, token, outcome, result);
    }
    if let Some(error) = store_failed {
        if !not_tried.is_empty() {
            shared.counters.errors.fetch_add(not_tried.len() as u64, Ordering::SeqCst);
            tracing::error!(queue = %shared.queue_name, jobs = ?not_tried, %error,
                "settles not written; the jobs stay running until their leases run out, then are claimed again");
        }
        return false;
    }
    true
}

/// Settles an outcome whose settle the store refused as it was, with its text replaced:
/// first escaped to printable ASCII (a person still reads what the handler said), then, if
/// that is refused too, a note alone. The outcome itself never changes: an unknown stays
/// unknown (its side effect may have happened), a retry stays a retry. `refused` is the
/// store's error for the original, returned when the outcome has no text to replace or
/// every replacement is refused too.
fn settle_replacing_text<S: Store>(
    shared: &Shared<S>,
    token: &ClaimToken,
    outcome: &Outcome,
    refused: Error,
) -> Result<Settled> {
    let text = match outcome {
        Outcome::Retry { error: text, .. } | Outcome::Exhaust(text) | Outcome::Unknown(text) => text,
        Outcome::Park { reason, .. } => reason,
        // Their texts are the engine's own.
        Outcome::Complete | Outcome::Snooze(_) | Outcome::RetryAfter { .. } => return Err(refused),
    };
    let replacements = [
        format!("{REPLACED_TEXT}; escaped: {}", text.escape_default()),
        format!("{REPLACED_TEXT}; see the worker's log"),
    ];
    for replacement in replacements {
        match shared.queue.settle(token, settle_of(shared, token, &with_text(outcome, replacement))) {
            Err(e) if e.is_statement_refused() => continue,
            Ok(settled) => {
                bump(&shared.counters.texts_replaced);
                tracing::error!(job = %token.id, attempt = token.attempt, ?outcome, error = %refused,
                    "the store refused the outcome's text; settled with the text replaced");
                return Ok(settled);
            }
            Err(e) => return Err(e),
        }
    }
    Err(refused)
}

/// What a replaced outcome text begins with.
const REPLACED_TEXT: &str = "[fenceq: the store refused this text]";

/// `outcome` with its text replaced by `text`.
fn with_text(outcome: &Outcome, text: String) -> Outcome {
    match outcome {
        Outcome::Complete => Outcome::Complete,
        Outcome::Retry { after, .. } => Outcome::Retry { after: *after, error: text },
        Outcome::Exhaust(_) => Outcome::Exhaust(text),
        Outcome::Unknown(_) => Outcome::Unknown(text),
        Outcome::Park { until, .. } => Outcome::Park { until: *until, reason: text },
        Outcome::Snooze(delay) => Outcome::Snooze(*delay),
        Outcome::RetryAfter { delay, scope } => Outcome::RetryAfter { delay: *delay, scope: *scope },
    }
}

/// How the engine settles each finished attempt (built again for the rare retry of a
/// failed round rather than cloned every round).
fn settles<S: Store>(shared: &Shared<S>, batch: &[(ClaimToken, Outcome)]) -> Vec<(ClaimToken, Settle)> {
    batch.iter().map(|(token, outcome)| (*token, settle_of(shared, token, outcome))).collect()
}

fn settle_of<S: Store>(shared: &Shared<S>, token: &ClaimToken, outcome: &Outcome) -> Settle {
    shared.rules.settle_of(token, outcome)
}

/// What a pool's outcomes settle with beyond their own values: its retry policy (for a
/// `Retry` without a delay) and its cap of snoozes per job. The pool's settle path and a
/// handler's own settle ([`Attempt::settle_with`](super::Attempt::settle_with)) read the same.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SettleRules {
    pub(crate) retry_policy: crate::job::RetryPolicy,
    pub(crate) max_snoozes: u32,
}

impl SettleRules {
    /// How the engine settles `outcome` of `token`'s attempt.
    pub(crate) fn settle_of(&self, token: &ClaimToken, outcome: &Outcome) -> Settle {
        match outcome {
            Outcome::Complete => Settle::Complete,
            Outcome::Retry { after, error } => Settle::Retry {
                delay: after.unwrap_or_else(|| self.retry_policy.next_delay(token.attempt)),
                error: error.clone(),
            },
            Outcome::Exhaust(error) => Settle::Exhaust(error.clone()),
            Outcome::Unknown(evidence) => Settle::Unknown(evidence.clone()),
            Outcome::Park { until, reason } => match crate::validate::check_park_timeout(*until) {
                Ok(()) => Settle::Park { timeout: *until, reason: reason.clone() },
                // A park the store would refuse would leave the job running until its lease ran
                // out, then run it again: a person sees an exhaustion that says why instead.
                Err(refused) => Settle::Exhaust(format!("the handler parked the job ({reason}), but {refused}")),
            },
            Outcome::Snooze(delay) => snooze_of(self, *delay, BackoffScope::Job, format!("snoozed for {delay:?}")),
            Outcome::RetryAfter { delay, scope } => snooze_of(
                self,
                *delay,
                *scope,
                format!("the provider asked to retry after {delay:?} ({scope} back-off)"),
            ),
        }
    }
}

/// The settle of a handler's snooze or provider back-off: a snooze under the pool's cap, or,
/// for a delay the store would refuse (over a year), an exhaustion that says why (left
/// running, the job would be claimed again once its lease ran out, and snoozed again).
fn snooze_of(rules: &SettleRules, delay: std::time::Duration, scope: BackoffScope, reason: String) -> Settle {
    match crate::validate::check_snooze_delay(delay) {
        Ok(()) => Settle::Snooze { delay, scope, reason, max_snoozes: rules.max_snoozes },
        Err(refused) => Settle::Exhaust(format!("the handler put the job back ({reason}), but {refused}")),
    }
}

/// Drops settled (or given up) attempts from the in-flight set the heartbeat renews.
fn forget<S: Store>(shared: &Shared<S>, batch: &[(ClaimToken, Finished)]) {
    let mut in_flight = shared.in_flight.lock();
    for (token, _) in batch {
        in_flight.remove(token);
    }
}

/// True for an error after which the work may have committed (PostgreSQL's `ConnectionLost`
/// while committing): a settle's outcome is then unknown, not failed.
fn may_have_committed(e: &Error) -> bool {
    matches!(e, Error::ConnectionLost { commit_unknown: true, .. })
}
