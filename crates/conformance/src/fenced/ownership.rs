//! Ownership inside the caller's transaction: `with_ownership` and `complete_with` commit the
//! domain write together with the ownership check (or the settle) or not at all, a stale
//! token rolls the domain write back (its closure never runs), a queue write inside the
//! closure is refused instead of deadlocking, and the store's `owns` answers inside a
//! transaction of the application's own. (From `tests/ownership.rs`, and the last test of
//! `tests/fenced_identity.rs`.)

use crate::fixture::{Db, LEASE, T0};
use crate::harness::Harness;
use crate::Rule;
use fenceq::store::Store;
use fenceq::{Error, JobState, LostReason};

pub(super) fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        with_ownership_commits_the_domain_write_while_the_claim_owns_the_job,
        with_ownership_does_not_run_the_write_for_a_stale_token,
        a_failing_domain_write_rolls_back_and_the_claim_stays_owned,
        complete_with_commits_the_settle_and_the_domain_write_together,
        complete_with_a_stale_token_rolls_the_domain_write_back,
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
        assert!(<H::Store as Store>::owns(tx, &job.token(), T0).unwrap());
        assert!(!<H::Store as Store>::owns(tx, &job.token(), T0 + 30_000).unwrap(), "expired at the lease's end");
        let mut other = job.token();
        other.attempt += 1;
        assert!(!<H::Store as Store>::owns(tx, &other, T0).unwrap());
        checked = true;
    });
    assert!(checked, "the transaction ran");
}
