//! `with_ownership` and `complete_with`: the domain write and the ownership check (or the
//! settle) commit together or not at all; a stale token rolls the domain write back.

mod common;

use common::*;
use fenceq::rusqlite::Connection;
use fenceq::{Error, JobState, LostReason};

fn reply(tx: &Connection, job: i64) -> fenceq::Result<()> {
    tx.execute("INSERT INTO replies (job) VALUES (?1)", [job])?;
    Ok(())
}

#[test]
fn with_ownership_commits_the_domain_write_while_the_claim_owns_the_job() {
    let q = temp_queue();
    create_replies(&q.path());
    q.add("x");
    let job = q.take("w");
    q.with_ownership(&job.token(), |tx| reply(tx, job.id().0)).unwrap();
    assert_eq!(replies(&q.path()), 1);
    assert_eq!(q.job(job.id()).unwrap().unwrap().state, JobState::Running, "ownership alone does not settle");
}

#[test]
fn with_ownership_does_not_run_the_write_for_a_stale_token() {
    let q = temp_queue();
    create_replies(&q.path());
    q.add("x");
    let old = q.take("w1");
    q.advance(LEASE);
    let new = q.take("w2");
    let mut ran = false;
    let err = q
        .with_ownership(&old.token(), |tx| {
            ran = true;
            reply(tx, 1)
        })
        .unwrap_err();
    assert!(matches!(err, Error::OwnershipLost { reason: LostReason::Superseded, .. }));
    assert!(!ran);
    q.with_ownership(&new.token(), |tx| reply(tx, 2)).unwrap();
    assert_eq!(replies(&q.path()), 1, "only the reclaiming attempt's write committed");
}

#[test]
fn a_failing_domain_write_rolls_back_and_the_claim_stays_owned() {
    let q = temp_queue();
    create_replies(&q.path());
    q.add("x");
    let job = q.take("w");
    let err = q
        .complete_with(&job.token(), |tx| {
            reply(tx, 1)?;
            Err::<(), _>(Error::domain("the reply service said no"))
        })
        .unwrap_err();
    assert!(matches!(err, Error::Domain(_)));
    assert_eq!(replies(&q.path()), 0, "the domain write rolled back");
    assert_eq!(q.job(job.id()).unwrap().unwrap().state, JobState::Running, "and so did the settle");
    assert!(q.owns(&job.token()).unwrap());
}

#[test]
fn complete_with_commits_the_settle_and_the_domain_write_together() {
    let q = temp_queue();
    create_replies(&q.path());
    q.add("x");
    let job = q.take("w");
    q.complete_with(&job.token(), |tx| reply(tx, 1)).unwrap();
    assert_eq!(replies(&q.path()), 1);
    assert_eq!(q.job(job.id()).unwrap().unwrap().state, JobState::Completed);
    // A second completion with the same token writes nothing.
    assert!(matches!(q.complete_with(&job.token(), |tx| reply(tx, 1)), Err(Error::OwnershipLost { .. })));
    assert_eq!(replies(&q.path()), 1);
}

#[test]
fn complete_with_a_stale_token_rolls_the_domain_write_back() {
    let q = temp_queue();
    create_replies(&q.path());
    q.add("x");
    let job = q.take("w");
    q.advance(LEASE);
    assert!(matches!(q.complete_with(&job.token(), |tx| reply(tx, 1)), Err(Error::OwnershipLost { .. })));
    assert_eq!(replies(&q.path()), 0);
}

#[test]
fn a_queue_write_inside_the_closure_is_refused_instead_of_deadlocking() {
    let q = temp_queue();
    q.add("x");
    let job = q.take("w");
    let err = q.with_ownership(&job.token(), |_| q.complete(&job.token())).unwrap_err();
    assert!(matches!(err, Error::NestedWrite), "{err}");
    assert!(q.owns(&job.token()).unwrap());
}
