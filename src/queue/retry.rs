//! Bounded re-runs of the queue's own transactions after a conflict.
//!
//! PostgreSQL aborts a transaction to break a deadlock (40P01) or when it cannot serialize
//! it (40001, in a serializable transaction or on a standby); running the same transaction
//! again is the remedy, and usually succeeds at once. The queue does that for the
//! transactions whose every statement is its own (claims, renewals, settles, intake outside
//! a caller's transaction, operator changes, reaps, prunes, schedule ticks): each is a whole
//! transaction that wrote nothing when it failed, and each is fenced or idempotent, so a
//! re-run decides afresh on the committed rows. At most [`CONFLICT_RETRIES`] re-runs, after
//! a short jittered pause each, then the conflict is returned as `Busy`. (A re-run runs the
//! queue's closure again: what it does outside the transaction, such as the reaper adding to
//! its report, comes after its statements, and under `READ COMMITTED` a conflict aborts a
//! statement, never the commit.)
//!
//! A caller's closure (`transaction`, `with_ownership`, `complete_with`, `resolve_with`,
//! and `enqueue_tx` inside one) is never re-run: it may have done things outside the
//! database, and only the caller knows whether running it twice is safe. Its conflict is
//! returned as `Busy` at once.
//!
//! SQLite never reports a conflict (its waits end in `Busy` after the busy timeout, which a
//! re-run would only repeat), so on SQLite this changes nothing.

use crate::error::{Error, Result};
use std::time::Duration;

/// How many times a transaction of the queue's own is re-run after a conflict.
pub(crate) const CONFLICT_RETRIES: u32 = 5;

/// Runs `transaction` (one whole transaction of the queue's own work, nothing of a
/// caller's), and again after a conflict, up to [`CONFLICT_RETRIES`] more times.
pub(crate) fn retry_conflicts<T>(mut transaction: impl FnMut() -> Result<T>) -> Result<T> {
    let mut retries = 0;
    loop {
        match transaction() {
            Err(e) if e.is_conflict() && retries < CONFLICT_RETRIES => {
                retries += 1;
                let pause = backoff(retries);
                tracing::debug!(error = %e, retry = retries, pause_us = pause.as_micros() as u64,
                    "a conflict aborted the queue's transaction: running it again");
                std::thread::sleep(pause);
            }
            result => return result,
        }
    }
}

/// How many times a keyed intake is run again after its commit's outcome was lost.
pub(crate) const UNKNOWN_COMMIT_RETRIES: u32 = 3;

/// Runs `intake` (a whole intake of the queue's own), and, when `keyed` (every job it adds
/// carries an idempotency key), again after a connection lost while it committed, up to
/// [`UNKNOWN_COMMIT_RETRIES`] more times.
///
/// Such a loss leaves the caller not knowing whether its jobs were added (PostgreSQL: the
/// server or the network went away after the `COMMIT` was sent, as a failover does while a
/// commit waits for its synchronous standby). A keyed intake can find out by running again:
/// each job whose lost commit landed is found by its key (`Enqueued::Duplicate`), each one
/// whose commit did not is added now, so the caller gets an answer instead of an error it
/// cannot retry blindly. An intake without keys is never run again: it could add its jobs
/// twice. A re-run that meets another error (`Unavailable` while no server accepts writes)
/// returns it: it is retryable, and the caller's retry is keyed too.
pub(crate) fn resolve_lost_commit<T>(keyed: bool, mut intake: impl FnMut() -> Result<T>) -> Result<T> {
    let mut retries = 0;
    loop {
        match intake() {
            Err(e @ Error::ConnectionLost { commit_unknown: true, .. })
                if keyed && retries < UNKNOWN_COMMIT_RETRIES =>
            {
                retries += 1;
                tracing::warn!(error = %e, retry = retries,
                    "the connection was lost while a keyed intake committed: running it again to learn its outcome");
            }
            result => return result,
        }
    }
}

/// The pause before re-run `retry` (1-based): between half and all of 2 ms doubled per
/// re-run (2, 4, 8, 16, 32 ms), so that the transactions of a deadlock do not meet again in
/// step.
fn backoff(retry: u32) -> Duration {
    let ceiling_us: u64 = 2_000 << retry.saturating_sub(1).min(4);
    // uuid's v4 generator is already a dependency; its random bits serve as jitter.
    let bits = (uuid::Uuid::new_v4().as_u128() >> 64) as u64;
    Duration::from_micros(ceiling_us / 2 + bits % (ceiling_us / 2 + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{BusyCause, Error};
    use std::cell::Cell;

    fn conflict() -> Error {
        Error::Busy { statement: "CLAIM", cause: BusyCause::Deadlock }
    }

    #[test]
    fn a_conflict_is_retried_until_it_clears() {
        let runs = Cell::new(0);
        let result = retry_conflicts(|| {
            runs.set(runs.get() + 1);
            if runs.get() < 3 {
                Err(conflict())
            } else {
                Ok(runs.get())
            }
        });
        assert_eq!(result.unwrap(), 3);
    }

    #[test]
    fn a_lasting_conflict_is_busy_after_the_last_retry() {
        let runs = Cell::new(0);
        let result: Result<()> = retry_conflicts(|| {
            runs.set(runs.get() + 1);
            Err(conflict())
        });
        assert!(matches!(result, Err(Error::Busy { statement: "CLAIM", cause: BusyCause::Deadlock })));
        assert_eq!(runs.get(), 1 + CONFLICT_RETRIES);
    }

    #[test]
    fn other_errors_and_timeouts_are_not_retried() {
        for error in [Error::Busy { statement: "CLAIM", cause: BusyCause::Locked }, Error::TransactionLost] {
            let runs = Cell::new(0);
            let shown = error.to_string();
            let mut error = Some(error);
            let result: Result<()> = retry_conflicts(|| {
                runs.set(runs.get() + 1);
                Err(error.take().expect("run once"))
            });
            assert!(result.is_err());
            assert_eq!(runs.get(), 1, "{shown}");
        }
    }

    fn lost_commit() -> Error {
        Error::ConnectionLost { statement: "COMMIT", commit_unknown: true }
    }

    #[test]
    fn a_keyed_intake_whose_commit_was_lost_runs_again_until_it_has_an_answer() {
        let runs = Cell::new(0);
        let result = resolve_lost_commit(true, || {
            runs.set(runs.get() + 1);
            if runs.get() < 3 {
                Err(lost_commit())
            } else {
                Ok(runs.get())
            }
        });
        assert_eq!(result.unwrap(), 3);
    }

    #[test]
    fn an_intake_without_keys_is_never_run_again_and_a_lasting_loss_is_returned() {
        let runs = Cell::new(0);
        let result: Result<()> = resolve_lost_commit(false, || {
            runs.set(runs.get() + 1);
            Err(lost_commit())
        });
        assert!(matches!(result, Err(Error::ConnectionLost { commit_unknown: true, .. })));
        assert_eq!(runs.get(), 1, "an unkeyed intake may have added its jobs: never twice");
        runs.set(0);
        let result: Result<()> = resolve_lost_commit(true, || {
            runs.set(runs.get() + 1);
            Err(lost_commit())
        });
        assert!(matches!(result, Err(Error::ConnectionLost { commit_unknown: true, .. })));
        assert_eq!(runs.get(), 1 + UNKNOWN_COMMIT_RETRIES);
    }

    #[test]
    fn a_loss_before_the_commit_and_other_errors_are_returned_at_once() {
        for error in [
            Error::ConnectionLost { statement: "ENQUEUE", commit_unknown: false },
            Error::Unavailable { statement: "connect", reason: "refused".into() },
        ] {
            let runs = Cell::new(0);
            let shown = error.to_string();
            let mut error = Some(error);
            let result: Result<()> = resolve_lost_commit(true, || {
                runs.set(runs.get() + 1);
                Err(error.take().expect("run once"))
            });
            assert!(result.is_err());
            assert_eq!(runs.get(), 1, "{shown}");
        }
    }

    #[test]
    fn pauses_are_short_jittered_and_grow() {
        for retry in 1..=CONFLICT_RETRIES {
            let ceiling = 2_000u64 << (retry - 1);
            for _ in 0..50 {
                let pause = backoff(retry).as_micros() as u64;
                assert!((ceiling / 2..=ceiling).contains(&pause), "retry {retry}: {pause} us");
            }
        }
    }
}
