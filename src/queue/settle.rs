//! Settles: what a claim's owner decides (complete, retry, exhaust, mark unknown, park), each
//! guarded by the exact live claim, and their composition: a retry with no attempts left
//! becomes an exhaustion in the same transaction. Also `resume`, the way back from a park.

use super::claims::held_briefly;
use super::fence;
use super::retry::retry_conflicts;
use super::Queue;
use crate::clock::duration_ms;
use crate::error::{Error, Result};
use crate::job::{AttemptOutcome, Backoff, BackoffScope, ClaimToken, Claimed, JobState, Retried, Snooze};
use crate::store::{FreshClaim, QueueBackoffAt, SnoozeAt, Store, TokenAt};
use crate::validate::{check_claim, check_park_timeout, check_snooze_delay, clip};
use std::sync::Arc;
use std::time::Duration;

/// How long a lost completion's outcome is read for, while no server accepts writes (a
/// failover's promotion), before the call gives up on knowing it.
const LOST_COMMIT_WAIT: Duration = Duration::from_secs(30);
/// The pause between two reads of a lost completion's outcome.
const LOST_COMMIT_PAUSE: Duration = Duration::from_millis(100);

/// How a claim is settled (the engine's side of a handler's `Outcome`).
#[derive(Debug, Clone)]
pub(crate) enum Settle {
    Complete,
    Retry {
        delay: Duration,
        error: String,
    },
    Exhaust(String),
    Unknown(String),
    Park {
        timeout: Duration,
        reason: String,
    },
    /// Back to pending without spending an attempt, and for [`BackoffScope::Queue`] the
    /// queue's back-off until the same instant; past `max_snoozes` an exhaustion.
    Snooze {
        delay: Duration,
        scope: BackoffScope,
        reason: String,
        max_snoozes: u32,
    },
}

/// What a settle did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    Completed,
    Retried(i64),
    Exhausted,
    Unknown,
    Parked,
    /// Pending again at this instant, no attempt spent (and, for [`BackoffScope::Queue`],
    /// the queue's back-off stored until it).
    Snoozed(i64),
}

impl Settle {
    fn check(&self) -> Result<()> {
        match self {
            Settle::Park { timeout, .. } => check_park_timeout(*timeout),
            Settle::Snooze { delay, .. } => check_snooze_delay(*delay),
            _ => Ok(()),
        }
    }

    /// Whether its settle may write more than one statement (so it cannot run as autocommit
    /// statements): a queue-scoped back-off writes the job and the queue's flow row.
    fn writes_twice(&self) -> bool {
        matches!(self, Settle::Snooze { scope: BackoffScope::Queue, .. })
    }
}

impl<S: Store> Queue<S> {
    /// Completes the job. Terminal: no later write of any token changes it.
    ///
    /// # Errors
    ///
    /// `OwnershipLost` (with its `LostReason`: the lease expired, another claim replaced
    /// it, the job is no longer running, or its row is gone) unless `token` is the exact
    /// claim of a running job with a live lease; completing twice is `OwnershipLost` too.
    /// Storage errors: `Busy`, `StorageFull`, `ReadOnly`; `NestedWrite` from inside a
    /// closure holding the queue's transaction (or an in-memory queue's `with_connection`).
    pub fn complete(&self, token: &ClaimToken) -> Result<()> {
        self.settle(token, Settle::Complete).map(drop)
    }

    /// Completes many jobs in one transaction (for batch consumers): one result per token,
    /// in order. A token that lost its job gets `OwnershipLost` without failing the others.
    ///
    /// # Errors
    ///
    /// A token that does not own its job gets `OwnershipLost` (with its `LostReason`) in
    /// its own slot of the `Vec`, and the others still complete; the whole call fails
    /// (completing nothing) only for storage errors: `Busy`, `StorageFull`, `ReadOnly`, and
    /// `NestedWrite` from inside a closure holding the queue's transaction (or an in-memory
    /// queue's `with_connection`).
    pub fn complete_all(&self, tokens: &[ClaimToken]) -> Result<Vec<Result<()>>> {
        let items: Vec<(ClaimToken, Settle)> = tokens.iter().map(|t| (*t, Settle::Complete)).collect();
        Ok(self.settle_many(items)?.into_iter().map(|r| r.map(drop)).collect())
    }

    /// Completes the job and runs `write` in the same transaction: both commit or neither.
    /// The ownership check is the one of [`Queue::with_ownership`] (as the lock is taken),
    /// and so is the advice to keep the closure short. Jobs added inside with
    /// [`Queue::enqueue_tx`] (a follow-up, a reminder) commit with the completion.
    ///
    /// Inside a [`WorkerPool`](crate::WorkerPool) handler, call
    /// [`Attempt::complete_with`](crate::Attempt::complete_with) instead: it does the same
    /// and also tells the pool, whose heartbeat then stops renewing the lease at once. (This
    /// call with the attempt's own token works too: the pool finds the job completed by that
    /// token when it settles the handler's outcome, and counts it completed.)
    ///
    /// # Errors
    ///
    /// `OwnershipLost` (and the closure does not run) unless `token` is the exact claim of
    /// a running job with a live lease; the closure's own error (nothing is completed);
    /// `NestedWrite` for a queue write from inside the closure; `TransactionLost` when
    /// SQLite rolled the transaction back while the closure carried on; `Busy`,
    /// `StorageFull`, `ReadOnly` when the database cannot be written.
    ///
    /// On PostgreSQL, a connection lost after the `COMMIT` was sent leaves the outcome
    /// unknown (a failover ends the old primary's sessions so). The call then finds out on a
    /// new connection, from the job's row once any transaction still holding it has ended:
    /// completed by this token, the commit landed and the call returns the closure's value;
    /// not, nothing was written and it returns `ConnectionLost` with `commit_unknown` false
    /// (retryable: a retry runs the closure again, or is refused if the lease is gone). While
    /// no server accepts writes (a failover's promotion) it keeps trying for up to 30 s; only
    /// when no connection can be had in that time does `commit_unknown` stay true.
    pub fn complete_with<T>(&self, token: &ClaimToken, write: impl FnOnce(&S::Tx) -> Result<T>) -> Result<T> {
        self.settle_with(token, &Settle::Complete, write).map(|(_, value)| value)
    }

    /// [`Queue::retry`] and `write` in one transaction: both commit or neither, as in
    /// [`Queue::complete_with`]. A handler that records a failure in its own table ("the
    /// provider answered 502") and schedules the retry can never leave one without the other.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::retry`] and [`Queue::complete_with`] (the closure's own error
    /// writes nothing). A connection lost after the `COMMIT` was sent (PostgreSQL) is
    /// `ConnectionLost` with `commit_unknown` true: read the job to know.
    pub fn retry_with<T>(
        &self,
        token: &ClaimToken,
        backoff: impl Into<Backoff>,
        error: &str,
        write: impl FnOnce(&S::Tx) -> Result<T>,
    ) -> Result<(Retried, T)> {
        let settle = Settle::Retry { delay: retry_delay(token, backoff.into()), error: error.to_string() };
        self.settle_with(token, &settle, write).map(|(settled, value)| (retried(settled), value))
    }

    /// [`Queue::snooze`] and `write` in one transaction: both commit or neither, as in
    /// [`Queue::complete_with`]. For a provider's "too many requests" this is the record of
    /// the 429 and the back-off it asks for (with [`BackoffScope::Queue`] or
    /// [`BackoffScope::Group`]) committed together: no claim of any process can start a job
    /// the back-off holds after the record is visible.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::snooze`] and [`Queue::complete_with`] (the closure's own error
    /// writes nothing). A connection lost after the `COMMIT` was sent (PostgreSQL) is
    /// `ConnectionLost` with `commit_unknown` true: read the job to know.
    pub fn snooze_with<T>(
        &self,
        token: &ClaimToken,
        snooze: Snooze,
        write: impl FnOnce(&S::Tx) -> Result<T>,
    ) -> Result<(Retried, T)> {
        let Snooze { delay, scope, reason, max_snoozes } = snooze;
        let settle = Settle::Snooze { delay, scope, reason, max_snoozes };
        self.settle_with(token, &settle, write).map(|(settled, value)| (retried(settled), value))
    }

    /// [`Queue::exhaust`] and `write` in one transaction: both commit or neither, as in
    /// [`Queue::complete_with`].
    ///
    /// # Errors
    ///
    /// Those of [`Queue::exhaust`] and [`Queue::complete_with`] (the closure's own error
    /// writes nothing). A connection lost after the `COMMIT` was sent (PostgreSQL) is
    /// `ConnectionLost` with `commit_unknown` true: read the job to know.
    pub fn exhaust_with<T>(
        &self,
        token: &ClaimToken,
        error: &str,
        write: impl FnOnce(&S::Tx) -> Result<T>,
    ) -> Result<T> {
        self.settle_with(token, &Settle::Exhaust(error.to_string()), write).map(|(_, value)| value)
    }

    /// [`Queue::mark_unknown`] and `write` in one transaction: both commit or neither, as
    /// in [`Queue::complete_with`].
    ///
    /// # Errors
    ///
    /// Those of [`Queue::mark_unknown`] and [`Queue::complete_with`] (the closure's own
    /// error writes nothing). A connection lost after the `COMMIT` was sent (PostgreSQL) is
    /// `ConnectionLost` with `commit_unknown` true: read the job to know.
    pub fn mark_unknown_with<T>(
        &self,
        token: &ClaimToken,
        evidence: &str,
        write: impl FnOnce(&S::Tx) -> Result<T>,
    ) -> Result<T> {
        self.settle_with(token, &Settle::Unknown(evidence.to_string()), write).map(|(_, value)| value)
    }

    /// [`Queue::park`] and `write` in one transaction: both commit or neither, as in
    /// [`Queue::complete_with`].
    ///
    /// # Errors
    ///
    /// Those of [`Queue::park`] and [`Queue::complete_with`] (the closure's own error
    /// writes nothing). A connection lost after the `COMMIT` was sent (PostgreSQL) is
    /// `ConnectionLost` with `commit_unknown` true: read the job to know.
    pub fn park_with<T>(
        &self,
        token: &ClaimToken,
        timeout: Duration,
        reason: &str,
        write: impl FnOnce(&S::Tx) -> Result<T>,
    ) -> Result<T> {
        let settle = Settle::Park { timeout, reason: reason.to_string() };
        self.settle_with(token, &settle, write).map(|(_, value)| value)
    }

    /// One settle and the caller's `write` in one transaction of the queue's writer, after
    /// the ownership check of [`Queue::with_ownership`] (the row held): both commit or
    /// neither. A completion whose connection was lost while committing is read back from
    /// the row (`completed_by`); another settle's lost commit stays `commit_unknown`.
    pub(crate) fn settle_with<T>(
        &self,
        token: &ClaimToken,
        settle: &Settle,
        write: impl FnOnce(&S::Tx) -> Result<T>,
    ) -> Result<(Settled, T)> {
        settle.check()?;
        let mut value: Option<T> = None;
        let committed = self.write_waking(|tx| {
            let lease = self.owned_lease(tx, token)?;
            let now = |tx: &S::Tx| self.shared.now_in(tx);
            let settled = settle_in::<S>(tx, token, settle, now(tx)?, &now)?;
            // (The writer refuses to commit a transaction the store rolled back meanwhile.)
            value = Some(held_briefly(token, lease, || write(tx))?);
            Ok(settled)
        });
        let settled = match committed {
            Ok(settled) => settled,
            Err(lost @ Error::ConnectionLost { commit_unknown: true, .. }) if matches!(settle, Settle::Complete) => {
                match self.completed_by(token) {
                    Ok(true) => Settled::Completed,
                    Ok(false) => return Err(Error::ConnectionLost { statement: "COMMIT", commit_unknown: false }),
                    Err(e) => {
                        tracing::warn!(error = %e, "the outcome of a completion whose connection was lost could not be read");
                        return Err(lost);
                    }
                }
            }
            Err(e) => return Err(e),
        };
        // The work committed, so the closure ran to its end and returned its value.
        let value = value.ok_or_else(|| Error::domain("the settle committed without the closure's value"))?;
        Ok((settled, value))
    }

    /// Whether `token` completed its job, read once any transaction still holding the row
    /// has ended: the fence's locking read waits for it (a lost connection's transaction may
    /// still be committing on the server), then the row says who settled it. Retried while
    /// no server accepts writes, for up to [`LOST_COMMIT_WAIT`].
    fn completed_by(&self, token: &ClaimToken) -> Result<bool> {
        let deadline = std::time::Instant::now() + LOST_COMMIT_WAIT;
        loop {
            let read = self.store().write(|tx| {
                let now = self.shared.now_in(tx)?;
                S::owned_lease(tx, TokenAt { token, now })?;
                Ok(S::identity(tx, token.id)?.is_some_and(|row| row.matches(token) && row.state == JobState::Completed))
            });
            match read {
                Err(e) if e.is_retryable() && std::time::Instant::now() < deadline => {
                    std::thread::sleep(LOST_COMMIT_PAUSE)
                }
                other => return other,
            }
        }
    }

    /// Sends the job back to pending after a delay (exponential with jitter for a
    /// [`RetryPolicy`](crate::RetryPolicy), or a fixed `Duration`), or exhausts it when no
    /// attempts are left.
    ///
    /// # Errors
    ///
    /// `OwnershipLost` (with its `LostReason`: the lease expired, another claim replaced
    /// it, the job is no longer running, or its row is gone) unless `token` is the exact
    /// claim of a running job with a live lease. Running out of attempts is not an error
    /// (`Retried::Exhausted`), no delay is refused, and an `error` longer than
    /// [`MAX_ERROR_LEN`](crate::MAX_ERROR_LEN) (4,096 bytes) is cut, not refused; a NUL byte in it is stored as [`NUL_SHOWN_AS`](crate::NUL_SHOWN_AS). Storage errors: `Busy`,
    /// `StorageFull`, `ReadOnly`; `NestedWrite` from inside a closure holding the queue's
    /// transaction (or an in-memory queue's `with_connection`).
    pub fn retry(&self, token: &ClaimToken, backoff: impl Into<Backoff>, error: &str) -> Result<Retried> {
        let delay = retry_delay(token, backoff.into());
        self.settle(token, Settle::Retry { delay, error: error.to_string() }).map(retried)
    }

    /// Turns the exact live claim into an unacknowledged, durable exhaustion that keeps its
    /// token (see [`Queue::exhaustions`] and [`Queue::acknowledge`]).
    ///
    /// # Errors
    ///
    /// `OwnershipLost` (with its `LostReason`: the lease expired, another claim replaced
    /// it, the job is no longer running, or its row is gone) unless `token` is the exact
    /// claim of a running job with a live lease; an `error` longer than [`MAX_ERROR_LEN`](crate::MAX_ERROR_LEN)
    /// (4,096 bytes) is cut, not refused; a NUL byte in it is stored as [`NUL_SHOWN_AS`](crate::NUL_SHOWN_AS). Storage errors: `Busy`, `StorageFull`,
    /// `ReadOnly`; `NestedWrite` from inside a closure holding the queue's transaction (or
    /// an in-memory queue's `with_connection`).
    pub fn exhaust(&self, token: &ClaimToken, error: &str) -> Result<()> {
        self.settle(token, Settle::Exhaust(error.to_string())).map(drop)
    }

    /// Records an ambiguous outcome (the side effect may have happened): never retried or
    /// pruned automatically; see [`Queue::unknowns`] and [`Queue::resolve`].
    ///
    /// # Errors
    ///
    /// `OwnershipLost` (with its `LostReason`: the lease expired, another claim replaced
    /// it, the job is no longer running, or its row is gone) unless `token` is the exact
    /// claim of a running job with a live lease; `evidence` longer than [`MAX_ERROR_LEN`](crate::MAX_ERROR_LEN)
    /// (4,096 bytes) is cut, not refused; a NUL byte in it is stored as [`NUL_SHOWN_AS`](crate::NUL_SHOWN_AS). Storage errors: `Busy`, `StorageFull`,
    /// `ReadOnly`; `NestedWrite` from inside a closure holding the queue's transaction (or
    /// an in-memory queue's `with_connection`).
    pub fn mark_unknown(&self, token: &ClaimToken, evidence: &str) -> Result<()> {
        self.settle(token, Settle::Unknown(evidence.to_string())).map(drop)
    }

    /// Parks the job (for example awaiting an approval) for at most `timeout`: the lease is
    /// released and the job is never reaped as stale; [`Queue::resume`] with the same token
    /// sends it back to pending, and past the deadline the reaper exhausts it.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `timeout` is shorter than 1 ms or longer than a year (365 days). `OwnershipLost` (with its `LostReason`: the lease expired,
    /// another claim replaced it, the job is no longer running, or its row is gone) unless
    /// `token` is the exact claim of a running job with a live lease; a `reason` longer
    /// than [`MAX_ERROR_LEN`](crate::MAX_ERROR_LEN) (4,096 bytes) is cut, not refused; a NUL byte in it is stored as [`NUL_SHOWN_AS`](crate::NUL_SHOWN_AS). Storage errors: `Busy`,
    /// `StorageFull`, `ReadOnly`; `NestedWrite` from inside a closure holding the queue's
    /// transaction (or an in-memory queue's `with_connection`).
    pub fn park(&self, token: &ClaimToken, timeout: Duration, reason: &str) -> Result<()> {
        self.settle(token, Settle::Park { timeout, reason: reason.to_string() }).map(drop)
    }

    /// Puts the job back for later without spending an attempt (River's `JobSnooze`): the
    /// exact live claim becomes `pending` again at now + the snooze's delay, its lease
    /// cleared, its reason stored as the last error, its snooze count ([`Job::snoozes`](crate::Job::snoozes))
    /// raised, and its attempt given back: the next claim is a new attempt with a fresh
    /// claim id (so `token` is dead from the commit on), and the job has as many attempts
    /// left as before this claim. With [`BackoffScope::Queue`] the queue's back-off is
    /// stored in the same transaction (see [`Queue::queue_backoff`]); with
    /// [`BackoffScope::Group`] the snooze itself closes the job's group (see
    /// [`BackoffScope`]). A job snoozed [`Snooze::max_snoozes`] times already is exhausted
    /// instead (`Retried::Exhausted`), with an error that says it was snoozed that many
    /// times, the cap; a queue-scoped back-off is stored then too.
    ///
    /// ```
    /// # use fenceq::{BackoffScope, NewJob, Queue, Retried, Snooze};
    /// # use std::time::Duration;
    /// let queue = Queue::open_in_memory()?;
    /// queue.enqueue(NewJob::new("telegram", b"hi".to_vec()))?;
    /// let job = queue.claim("telegram", "w", Duration::from_secs(30))?.unwrap();
    /// let snooze = Snooze::new(Duration::from_secs(3)).scope(BackoffScope::Queue).reason("429");
    /// assert!(matches!(queue.snooze(&job.token(), snooze)?, Retried::Scheduled(_)));
    /// assert!(queue.queue_backoff("telegram")?.is_some());
    /// assert!(queue.claim("telegram", "w", Duration::from_secs(30))?.is_none());
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a delay over a year ([`MAX_SNOOZE`](crate::MAX_SNOOZE)); nothing
    /// changes. `OwnershipLost` (with its `LostReason`) unless `token` is the exact claim of
    /// a running job with a live lease. A reason longer than [`MAX_ERROR_LEN`](crate::MAX_ERROR_LEN)
    /// (4,096 bytes) is cut, not refused; a NUL byte in it is stored as
    /// [`NUL_SHOWN_AS`](crate::NUL_SHOWN_AS). Storage errors: `Busy`, `StorageFull`,
    /// `ReadOnly`; `NestedWrite` from inside a closure holding the queue's transaction (or
    /// an in-memory queue's `with_connection`).
    pub fn snooze(&self, token: &ClaimToken, snooze: Snooze) -> Result<Retried> {
        let Snooze { delay, scope, reason, max_snoozes } = snooze;
        self.settle(token, Settle::Snooze { delay, scope, reason, max_snoozes }).map(retried)
    }

    /// One settle in a transaction of its own.
    pub(crate) fn settle(&self, token: &ClaimToken, settle: Settle) -> Result<Settled> {
        settle.check()?;
        let writes_twice = settle.writes_twice();
        let (token, settle) = (*token, Arc::new(settle));
        let work = move |settle: Arc<Settle>, shared: Arc<super::Shared<S>>| {
            move |tx: &S::Tx| {
                let now = |tx: &S::Tx| shared.now_in(tx);
                settle_in::<S>(tx, &token, &settle, now(tx)?, &now)
            }
        };
        retry_conflicts(|| {
            let (settle, shared) = (settle.clone(), self.shared.clone());
            if writes_twice {
                // The job's snooze and the queue's back-off commit together.
                self.store().submit(work(settle, shared))
            } else {
                // One settle writes once at most: a retry out of attempts exhausts only after
                // the retry's guard changed nothing.
                self.store().submit_single(work(settle, shared))
            }
        })
    }

    /// Settles many claims in one transaction: one result per item; a stale token gets
    /// `OwnershipLost` without failing the others.
    pub(crate) fn settle_many(&self, items: Vec<(ClaimToken, Settle)>) -> Result<Vec<Result<Settled>>> {
        if items.is_empty() {
            // Nothing to write: no transaction (one that fails would report a failure of nothing).
            return Ok(Vec::new());
        }
        let items = Arc::new(items);
        retry_conflicts(|| {
            let (items, shared) = (items.clone(), self.shared.clone());
            self.store().submit(move |tx| settle_each(&shared, tx, &items))
        })
    }

    /// The worker pool's round trip: settles the attempts that finished and claims up to
    /// `limit` more of `queue`, in one request of one transaction. A failed claim fails the
    /// settles too (the caller settles them again alone).
    pub(crate) fn settle_and_claim(
        &self,
        items: Vec<(ClaimToken, Settle)>,
        queue: &str,
        worker: &str,
        lease: Duration,
        limit: u32,
    ) -> Result<(Vec<Result<Settled>>, Vec<Claimed>)> {
        if limit == 0 {
            return Ok((self.settle_many(items)?, Vec::new()));
        }
        if items.is_empty() {
            // The claim alone writes once: on PostgreSQL that is one statement in autocommit,
            // without the `BEGIN` and `COMMIT` round trips of a transaction (a pool woken for
            // one job waits for each of them).
            return Ok((Vec::new(), self.claim_batch(queue, worker, lease, limit)?));
        }
        let lease_ms = check_claim(queue, worker, lease, limit)?;
        let items = Arc::new(items);
        retry_conflicts(|| {
            let (items, shared) = (items.clone(), self.shared.clone());
            let (queue, worker) = (queue.to_string(), worker.to_string());
            self.store().submit(move |tx| {
                let settled = settle_each(&shared, tx, &items)?;
                let claims = shared.claim_in(tx, FreshClaim { queue: &queue, worker: &worker, lease_ms, limit })?;
                Ok((settled, shared.claimed(&queue, claims)))
            })
        })
    }

    /// Sends a parked job back to pending with one extra attempt, while its wait lasts.
    ///
    /// # Errors
    ///
    /// `WaitExpired` once the park's deadline has passed (by the queue's clock, whether or
    /// not the reaper has exhausted the job yet), `StaleIdentity` for another token,
    /// `InvalidState` when the job is not waiting, `NotFound` when no row has its id.
    /// Storage errors: `Busy`, `StorageFull`, `ReadOnly`; `NestedWrite` from inside a
    /// closure holding the queue's transaction (or an in-memory queue's `with_connection`).
    pub fn resume(&self, token: &ClaimToken) -> Result<()> {
        retry_conflicts(|| {
            self.store().write(|tx| {
                let now = self.shared.now_in(tx)?;
                let resumed = S::resume_if_waiting(tx, TokenAt { token, now })?;
                fence::identified::<S>(tx, token, JobState::Waiting, now, "resume", resumed)
            })
        })
    }
}

/// The delay of a retry of `token`'s attempt.
fn retry_delay(token: &ClaimToken, backoff: Backoff) -> Duration {
    match backoff {
        Backoff::After(d) => d,
        Backoff::Policy(p) => p.next_delay(token.attempt),
    }
}

/// A retry's or snooze's settle as its caller sees it.
fn retried(settled: Settled) -> Retried {
    match settled {
        Settled::Retried(at) | Settled::Snoozed(at) => Retried::Scheduled(at),
        _ => Retried::Exhausted,
    }
}

/// How many times a settle waits for a row another transaction holds before it gives up
/// with `Busy` (each wait is bounded by the busy timeout; in autocommit another transaction
/// may take the row again between the wait and the settle's own statement).
const HELD_RETRIES: u32 = 20;

/// One guarded settle (two for a retry out of attempts) for the exact token, judged at
/// `now`, or, when it missed a row that still holds the token's running claim (another
/// transaction held the row, or the lease had ended), at an instant read (`clock`) once the
/// row is free.
fn settle_in<S: Store>(
    tx: &S::Tx,
    token: &ClaimToken,
    settle: &Settle,
    now: i64,
    clock: &dyn Fn(&S::Tx) -> Result<i64>,
) -> Result<Settled> {
    let mut now = now;
    for _ in 0..HELD_RETRIES {
        let (changed, settled) = match settle_once::<S>(tx, token, settle, now)? {
            Ok(settled) => return Ok(settled),
            Err(missed) => missed,
        };
        match fence::owned_or_held::<S>(tx, token, now, changed)? {
            Ok(()) => return Ok(settled),
            Err(fence::Miss::Lost(e)) => return Err(e),
            // Judged again once the row is free, at an instant read then; a lease that
            // ended by that instant is refused here, one that lives is settled again.
            Err(fence::Miss::Held) => now = fence::lease_after_the_row::<S>(tx, token, clock)?.1,
        }
    }
    Err(Error::Busy { statement: "settle", cause: crate::error::BusyCause::RowHeld })
}

/// The guarded statement(s) of one settle at `now`: `Ok` when a retry was scheduled, else
/// whether the settle changed the row and what it did if it did.
fn settle_once<S: Store>(
    tx: &S::Tx,
    token: &ClaimToken,
    settle: &Settle,
    now: i64,
) -> Result<std::result::Result<Settled, (bool, Settled)>> {
    let claim = TokenAt { token, now };
    Ok(Err(match settle {
        Settle::Complete => (S::complete_if_owned(tx, claim)?, Settled::Completed),
        Settle::Retry { delay, error } => {
            let error = &*clip(error);
            let run_at = now.saturating_add(duration_ms(*delay));
            if S::retry_if_owned(tx, claim, run_at, error)? {
                return Ok(Ok(Settled::Retried(run_at)));
            }
            // Either no attempts are left, or the token is stale, or (on a server store)
            // another transaction held the row; the exhaustion, guarded by the count, tells
            // the first apart.
            (S::exhaust_out_of_attempts_if_owned(tx, claim, error)?, Settled::Exhausted)
        }
        Settle::Exhaust(error) => (S::exhaust_if_owned(tx, claim, &clip(error))?, Settled::Exhausted),
        Settle::Unknown(evidence) => (S::mark_unknown_if_owned(tx, claim, &clip(evidence))?, Settled::Unknown),
        Settle::Park { timeout, reason } => {
            let wait_until = now.saturating_add(duration_ms(*timeout));
            (S::park_if_owned(tx, claim, wait_until, &clip(reason))?, Settled::Parked)
        }
        Settle::Snooze { delay, scope, reason, max_snoozes } => {
            let reason = &*clip(reason);
            let run_at = now.saturating_add(duration_ms(*delay));
            let outcome = AttemptOutcome::of_snooze(*scope);
            let snoozed =
                S::snooze_if_owned(tx, claim, SnoozeAt { run_at, reason, max_snoozes: *max_snoozes, outcome })?;
            // Either the cap is reached or the token is stale (or, on a server store, another
            // transaction held the row); the exhaustion, guarded by the count, tells them apart.
            let settled = snoozed || exhaust_past_snooze_cap::<S>(tx, claim, *max_snoozes, reason)?;
            if settled && *scope == BackoffScope::Queue {
                // The provider's answer holds for the queue whatever became of this job.
                S::back_off_queue_of(tx, QueueBackoffAt { id: token.id, until: run_at, reason, now })?;
            }
            if snoozed {
                return Ok(Ok(Settled::Snoozed(run_at)));
            }
            (settled, Settled::Exhausted)
        }
    }))
}

/// Exhausts the exact live claim `claim` instead of snoozing it once more, because it was
/// snoozed `max_snoozes` times already: the one place a snooze past its cap exhausts a job.
/// True when it did (false: the token does not own the job, or the job is under its cap).
pub(crate) fn exhaust_past_snooze_cap<S: Store>(
    tx: &S::Tx,
    claim: TokenAt<'_>,
    max_snoozes: u32,
    reason: &str,
) -> Result<bool> {
    let error = clip(&format!(
        "snoozed {max_snoozes} times, the cap (max_snoozes): exhausted instead of snoozing again ({reason})"
    ))
    .into_owned();
    S::exhaust_past_snooze_cap_if_owned(tx, claim, max_snoozes, &error)
}

/// Settles each item in `tx`, judged at the transaction's instant
/// ([`Shared::now_in`](super::Shared::now_in), read again for an item whose row another
/// transaction held): a guarded miss or bad input is that item's result (it changed
/// nothing); any other error fails them all.
fn settle_each<S: Store>(
    shared: &super::Shared<S>,
    tx: &S::Tx,
    items: &[(ClaimToken, Settle)],
) -> Result<Vec<Result<Settled>>> {
    let clock = |tx: &S::Tx| shared.now_in(tx);
    let clock: &dyn Fn(&S::Tx) -> Result<i64> = &clock;
    let now = clock(tx)?;
    if items.len() > 1 && items.iter().all(|(_, settle)| matches!(settle, Settle::Complete)) {
        // Only completions (`complete_all`, most pool rounds): the store completes them all
        // at once, and each miss is explained as `settle_in` would.
        let tokens: Vec<ClaimToken> = items.iter().map(|(token, _)| *token).collect();
        let changed = S::complete_many_if_owned(tx, &tokens, now)?;
        let mut results = Vec::with_capacity(items.len());
        for (token, changed) in tokens.iter().zip(changed) {
            match fence::owned_or_held::<S>(tx, token, now, changed)? {
                Ok(()) => results.push(Ok(Settled::Completed)),
                Err(fence::Miss::Lost(e)) => results.push(Err(e)),
                // Another transaction held the row: this one alone, after waiting for it.
                Err(fence::Miss::Held) => match settle_in::<S>(tx, token, &Settle::Complete, now, clock) {
                    Ok(settled) => results.push(Ok(settled)),
                    Err(e @ Error::OwnershipLost { .. }) => results.push(Err(e)),
                    Err(e) => return Err(e),
                },
            }
        }
        return Ok(results);
    }
    let mut results = Vec::with_capacity(items.len());
    for (token, settle) in items {
        match settle.check().and_then(|()| settle_in::<S>(tx, token, settle, now, clock)) {
            Ok(settled) => results.push(Ok(settled)),
            Err(e @ (Error::OwnershipLost { .. } | Error::InvalidInput { .. })) => results.push(Err(e)),
            Err(e) => return Err(e),
        }
    }
    Ok(results)
}
