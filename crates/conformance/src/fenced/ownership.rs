//! Ownership inside the caller's transaction: `with_ownership` and `complete_with` commit the
//! domain write together with the ownership check (or the settle) or not at all, a stale
//! token rolls the domain write back (its closure never runs), a queue write inside the
//! closure is refused instead of deadlocking, and the store's `owns` answers inside a
//! transaction of the application's own. (From `tests/ownership.rs`, and the last test of
//! `tests/fenced_identity.rs`.)

use crate::fixture::{Db, LEASE, T0};
use crate::harness::Harness;
use crate::Rule;
use fenceq::store::{Store, TokenAt};
use fenceq::{BackoffScope, ClaimToken, Error, JobState, LostReason, Queue, Retried, Snooze};
use std::time::Duration;

pub(super) fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        with_ownership_commits_the_domain_write_while_the_claim_owns_the_job,
        with_ownership_does_not_run_the_write_for_a_stale_token,
        a_failing_domain_write_rolls_back_and_the_claim_stays_owned,
        complete_with_commits_the_settle_and_the_domain_write_together,
        complete_with_a_stale_token_rolls_the_domain_write_back,
        every_settle_with_a_domain_write_commits_both_or_neither,
        a_queue_backoff_and_the_write_that_records_it_commit_together,
        a_queue_write_inside_the_closure_is_refused_instead_of_deadlocking,
        owns_in_checks_inside_the_callers_transaction,
    ]
}

fn with_ownership_commits_the_domain_write_while_the_claim_owns_the_job<H: Harness>(h: &H) {
    let q = Db::new(h);
    q.create_replies();
    q.add("x");
    let job = q.take("w");
    q.with_ownership(&job.token(), |tx| H::insert_reply(tx, job.id().0, 1, "reply")).unwrap();
    assert_eq!(q.replies(), [(job.id().0, 1, "reply".to_string())]);
    assert_eq!(q.job(job.id()).unwrap().unwrap().state, JobState::Running, "ownership alone does not settle");
}

fn with_ownership_does_not_run_the_write_for_a_stale_token<H: Harness>(h: &H) {
    let q = Db::new(h);
    q.create_replies();
    let id = q.add("x");
    let old = q.take("w1");
    q.advance(LEASE);
    let new = q.take("w2");
    let mut ran = false;
    let err = q
        .with_ownership(&old.token(), |tx| {
            ran = true;
            H::insert_reply(tx, id.0, 1, "old")
        })
        .unwrap_err();
    assert!(matches!(err, Error::OwnershipLost { reason: LostReason::Superseded, .. }));
    assert!(!ran);
    q.with_ownership(&new.token(), |tx| H::insert_reply(tx, id.0, 2, "new")).unwrap();
    assert_eq!(q.replies(), [(id.0, 2, "new".to_string())], "only the reclaiming attempt's write committed");
}

fn a_failing_domain_write_rolls_back_and_the_claim_stays_owned<H: Harness>(h: &H) {
    let q = Db::new(h);
    q.create_replies();
    q.add("x");
    let job = q.take("w");
    let err = q
        .complete_with(&job.token(), |tx| {
            H::insert_reply(tx, job.id().0, 1, "reply")?;
            Err::<(), _>(Error::domain("the reply service said no"))
        })
        .unwrap_err();
    assert!(matches!(err, Error::Domain(_)));
    assert!(q.replies().is_empty(), "the domain write rolled back");
    assert_eq!(q.job(job.id()).unwrap().unwrap().state, JobState::Running, "and so did the settle");
    assert!(q.owns(&job.token()).unwrap());
}

fn complete_with_commits_the_settle_and_the_domain_write_together<H: Harness>(h: &H) {
    let q = Db::new(h);
    q.create_replies();
    q.add("x");
    let job = q.take("w");
    q.complete_with(&job.token(), |tx| H::insert_reply(tx, job.id().0, 1, "reply")).unwrap();
    assert_eq!(q.replies().len(), 1);
    assert_eq!(q.job(job.id()).unwrap().unwrap().state, JobState::Completed);
    // A second completion with the same token writes nothing.
    assert!(matches!(
        q.complete_with(&job.token(), |tx| H::insert_reply(tx, job.id().0, 1, "again")),
        Err(Error::OwnershipLost { .. })
    ));
    assert_eq!(q.replies(), [(job.id().0, 1, "reply".to_string())]);
}

fn complete_with_a_stale_token_rolls_the_domain_write_back<H: Harness>(h: &H) {
    let q = Db::new(h);
    q.create_replies();
    q.add("x");
    let job = q.take("w");
    q.advance(LEASE);
    assert!(matches!(
        q.complete_with(&job.token(), |tx| H::insert_reply(tx, job.id().0, 1, "late")),
        Err(Error::OwnershipLost { .. })
    ));
    assert!(q.replies().is_empty());
}

/// The settle of `kind` (one per settle that takes a domain write besides completion) for
/// `token`, with `write` in its transaction.
fn settle_as<H: Harness>(
    q: &Queue<H::Store>,
    kind: &str,
    token: &ClaimToken,
    write: impl FnOnce(&<H::Store as Store>::Tx) -> fenceq::Result<()>,
) -> fenceq::Result<()> {
    let later = Duration::from_secs(60);
    match kind {
        "retry" => q.retry_with(token, later, "the provider answered 502", write).map(|(_, ())| ()),
        "snooze" => q.snooze_with(token, Snooze::new(later).reason("429"), write).map(|(_, ())| ()),
        "exhaust" => q.exhaust_with(token, "gave up", write),
        "unknown" => q.mark_unknown_with(token, "timed out after sending", write),
        "park" => q.park_with(token, later, "awaiting approval", write),
        other => unreachable!("no settle {other}"),
    }
}

/// `retry_with`, `snooze_with`, `exhaust_with`, `mark_unknown_with` and `park_with` commit
/// the settle and the domain write together: a failing write leaves the claim running and
/// writes nothing, a stale token runs no write, a second settle with the same token is
/// refused and writes nothing.
fn every_settle_with_a_domain_write_commits_both_or_neither<H: Harness>(h: &H) {
    let q = Db::with_max_attempts(h, Some(3));
    q.create_replies();
    let settles = [
        ("retry", JobState::Pending),
        ("snooze", JobState::Pending),
        ("exhaust", JobState::Exhausted),
        ("unknown", JobState::Unknown),
        ("park", JobState::Waiting),
    ];
    let mut written = Vec::new();
    for (kind, state) in settles {
        let id = q.add(kind);
        let job = q.take("w");
        assert_eq!(job.id(), id);
        let token = job.token();
        let err = settle_as::<H>(&q, kind, &token, |tx| {
            H::insert_reply(tx, id.0, 1, kind)?;
            Err(Error::domain("the domain write failed"))
        })
        .unwrap_err();
        assert!(matches!(err, Error::Domain(_)), "{kind}: {err:?}");
        assert_eq!(q.replies(), written, "{kind}: a failed write rolled back");
        assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Running, "{kind}: and so did the settle");
        assert!(q.owns(&token).unwrap(), "{kind}");

        settle_as::<H>(&q, kind, &token, |tx| H::insert_reply(tx, id.0, 1, kind)).unwrap();
        written.push((id.0, 1, kind.to_string()));
        assert_eq!(q.replies(), written, "{kind}");
        assert_eq!(q.job(id).unwrap().unwrap().state, state, "{kind}");

        let mut ran = false;
        let again = settle_as::<H>(&q, kind, &token, |_| {
            ran = true;
            Ok(())
        });
        assert!(matches!(again, Err(Error::OwnershipLost { .. })), "{kind}: {again:?}");
        assert!(!ran, "{kind}: a refused settle runs no write");
    }
    let id = q.add("late");
    let job = q.take("w");
    q.advance(LEASE);
    for (kind, _) in settles {
        let before = q.snapshot();
        let mut ran = false;
        let late = settle_as::<H>(&q, kind, &job.token(), |_| {
            ran = true;
            Ok(())
        });
        assert!(matches!(late, Err(Error::OwnershipLost { reason: LostReason::LeaseExpired, .. })), "{kind}: {late:?}");
        assert!(!ran && q.snapshot() == before, "{kind}: a stale token writes nothing");
    }
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Running);
}

/// A handler that records a provider's 429 and backs the queue off does both in one
/// transaction: once the record is visible, no handle can claim a job the back-off holds.
fn a_queue_backoff_and_the_write_that_records_it_commit_together<H: Harness>(h: &H) {
    let q = Db::new(h);
    q.create_replies();
    let other = q.reopen();
    let first = q.add("first");
    q.add("second");
    let token = q.take("w").token();
    let snooze = Snooze::new(Duration::from_secs(30)).scope(BackoffScope::Queue).reason("429: retry after 30");
    let (retried, ()) = q.snooze_with(&token, snooze, |tx| H::insert_reply(tx, first.0, 1, "429")).unwrap();
    assert_eq!(retried, Retried::Scheduled(T0 + 30_000));
    assert_eq!(q.replies(), [(first.0, 1, "429".to_string())]);
    for handle in [&q.queue, &other] {
        assert_eq!(handle.queue_backoff("q").unwrap().map(|b| b.until), Some(T0 + 30_000));
        assert!(handle.claim("q", "w2", LEASE).unwrap().is_none(), "the back-off holds the second job");
    }

    // A write that fails leaves neither the record nor the back-off.
    q.advance(Duration::from_secs(30));
    let token = q.take("w").token();
    let snooze = Snooze::new(Duration::from_secs(30)).scope(BackoffScope::Queue).reason("429 again");
    let err = q
        .snooze_with(&token, snooze, |tx| {
            H::insert_reply(tx, token.id.0, 2, "429 again")?;
            Err::<(), _>(Error::domain("the record failed"))
        })
        .unwrap_err();
    assert!(matches!(err, Error::Domain(_)), "{err:?}");
    assert!(q.queue_backoff("q").unwrap().is_none(), "no back-off without its record");
    assert_eq!(q.replies().len(), 1);
    assert!(other.claim("q", "w2", LEASE).unwrap().is_some(), "the queue stays open");
}

fn a_queue_write_inside_the_closure_is_refused_instead_of_deadlocking<H: Harness>(h: &H) {
    let q = Db::new(h);
    q.add("x");
    let job = q.take("w");
    let err = q.with_ownership(&job.token(), |_| q.complete(&job.token())).unwrap_err();
    assert!(matches!(err, Error::NestedWrite), "{err}");
    assert!(q.owns(&job.token()).unwrap());
}

/// The store's `owns` (SQLite's `fenceq::SqliteStore::owns_in`) inside a transaction of the application's
/// own, on another connection than the queue's.
fn owns_in_checks_inside_the_callers_transaction<H: Harness>(h: &H) {
    let q = Db::new(h);
    q.add("x");
    let job = q.take("w");
    let mut checked = false;
    q.harness.foreign_transaction(&q.place, false, &mut |tx| {
        assert!(<H::Store as Store>::owns(tx, TokenAt { token: &job.token(), now: T0 }).unwrap());
        assert!(
            !<H::Store as Store>::owns(tx, TokenAt { token: &job.token(), now: T0 + 30_000 }).unwrap(),
            "expired at the lease's end"
        );
        let mut other = job.token();
        other.attempt += 1;
        assert!(!<H::Store as Store>::owns(tx, TokenAt { token: &other, now: T0 }).unwrap());
        checked = true;
    });
    assert!(checked, "the transaction ran");
}
