//! Deterministic stale-worker scenarios on the manual clock (RELIABILITY.md §3 T3), from
//! `tests/stale_workers.rs`:
//!
//! - (a) expire → reap → reclaim: the old owner's renew and settles are rejected and change
//!   nothing, the new owner settles; the same without a reaper, by the same worker id;
//! - (b) an admin replay resets the attempt counter: the old token with the same attempt
//!   number is still rejected, because its claim id differs;
//! - (c) the max-id row is pruned: the next intake gets a greater id, never the pruned one,
//!   even from a new handle;
//! - (d) a settle racing the reaper, in both orders (River #1302 / #1373), with the reaper's
//!   read and write split across a second handle whose clock is ahead;
//! - (e) the reaper moves an abandoned last attempt to exhausted, never to pending.
//!
//! The two races of (d) where the reaper waits on a write lock held by another connection
//! stay SQLite tests (`tests/stale_workers.rs`): they assert SQLite's single-writer lock.

use crate::fixture::{Db, LEASE, T0};
use crate::harness::Harness;
use crate::Rule;
use fenceq::{Error, JobState, LostReason, ManualClock, NewJob, Queue, Retention};
use std::time::Duration;

pub(super) fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        an_expired_owner_is_rejected_after_reap_and_reclaim_while_the_new_owner_settles,
        an_expired_owner_is_rejected_when_the_job_is_reclaimed_without_a_reaper,
        a_replay_resets_the_attempt_but_the_old_token_with_the_same_attempt_stays_dead,
        a_pruned_max_id_is_never_handed_out_again_even_after_reopen,
        a_completion_between_the_reapers_read_and_its_write_wins,
        a_retry_between_the_reapers_read_and_its_write_wins,
        a_completion_after_the_reap_is_rejected_and_changes_nothing,
        the_reaper_exhausts_an_abandoned_last_attempt,
    ]
}

fn lost(result: Result<impl std::fmt::Debug, Error>) -> LostReason {
    match result {
        Err(Error::OwnershipLost { reason, .. }) => reason,
        other => panic!("expected OwnershipLost, got {other:?}"),
    }
}

/// A second handle on the same database with its own clock (another process's view of time).
fn handle_with_clock<H: Harness>(q: &Db<'_, H>, now: i64) -> (Queue<H::Store>, ManualClock) {
    let clock = ManualClock::new(now);
    (q.harness.open(&q.place, &clock, None), clock)
}

/// Every committed reply as (job, attempt), in commit order.
fn reply_rows<H: Harness>(q: &Db<'_, H>) -> Vec<(i64, i64)> {
    q.replies().into_iter().map(|(job, attempt, _)| (job, attempt)).collect()
}

// ------------------------------------------------------------------------ (a)

fn an_expired_owner_is_rejected_after_reap_and_reclaim_while_the_new_owner_settles<H: Harness>(h: &H) {
    let q = Db::new(h);
    q.create_replies();
    let id = q.add("job");
    let a = q.take("worker-a");
    assert_eq!(a.token.attempt, 1);
    q.advance(LEASE);
    // Expired but not yet reaped: A's writes already fail, with the reason.
    let before = q.snapshot();
    assert_eq!(lost(q.renew(&a.token(), LEASE)), LostReason::LeaseExpired);
    assert_eq!(q.snapshot(), before, "a rejected renew changes nothing");
    let reaped = q.reap().unwrap();
    assert_eq!((reaped.requeued, reaped.exhausted, reaped.waits_expired), (1, 0, 0));
    let b = q.take("worker-b");
    assert_eq!((b.id(), b.token.attempt), (id, 2));
    assert_ne!(b.token.claim_id, a.token.claim_id);

    let before = q.snapshot();
    assert_eq!(lost(q.renew(&a.token(), LEASE)), LostReason::Superseded);
    assert_eq!(lost(q.complete(&a.token())), LostReason::Superseded);
    assert_eq!(lost(q.retry(&a.token(), Duration::ZERO, "late")), LostReason::Superseded);
    assert_eq!(lost(q.exhaust(&a.token(), "late")), LostReason::Superseded);
    assert_eq!(lost(q.mark_unknown(&a.token(), "late")), LostReason::Superseded);
    assert_eq!(lost(q.park(&a.token(), LEASE, "late")), LostReason::Superseded);
    let mut ran = false;
    let result = q.complete_with(&a.token(), |tx| {
        ran = true;
        H::insert_reply(tx, id.0, 1, "a")
    });
    assert_eq!(lost(result), LostReason::Superseded);
    assert!(!ran, "the fence is checked before the closure runs");
    assert_eq!(lost(q.with_ownership(&a.token(), |_| Ok(()))), LostReason::Superseded);
    assert!(!q.owns(&a.token()).unwrap());
    assert_eq!(q.snapshot(), before, "A's six rejected writes changed 0 rows");
    assert!(reply_rows(&q).is_empty(), "A's domain write never committed");

    // B renews, writes its domain row and completes in one transaction.
    q.renew(&b.token(), LEASE).unwrap();
    q.complete_with(&b.token(), |tx| H::insert_reply(tx, id.0, 2, "b")).unwrap();
    let job = q.job(id).unwrap().unwrap();
    assert_eq!((job.state, job.attempt, job.claim_id), (JobState::Completed, 2, Some(b.token.claim_id)));
    assert_eq!(reply_rows(&q), vec![(id.0, 2)]);
    // After B's completion A stays dead, and so does B's own token for anything but reads.
    let before = q.snapshot();
    assert_eq!(lost(q.complete(&a.token())), LostReason::Superseded);
    assert_eq!(lost(q.complete(&b.token())), LostReason::NotRunning(JobState::Completed));
    assert_eq!(q.snapshot(), before);
}

fn an_expired_owner_is_rejected_when_the_job_is_reclaimed_without_a_reaper<H: Harness>(h: &H) {
    let q = Db::new(h);
    let id = q.add("job");
    let a = q.take("worker-a");
    q.advance(LEASE + Duration::from_millis(1));
    // The same worker id reclaims: still a new claim, and the old token is dead.
    let b = q.take("worker-a");
    assert_eq!((b.id(), b.token.attempt), (id, 2));
    let before = q.snapshot();
    assert_eq!(lost(q.complete(&a.token())), LostReason::Superseded);
    assert_eq!(q.snapshot(), before);
    q.complete(&b.token()).unwrap();
    assert_eq!(q.count("completed"), 1);
}

// ------------------------------------------------------------------------ (b)

fn a_replay_resets_the_attempt_but_the_old_token_with_the_same_attempt_stays_dead<H: Harness>(h: &H) {
    let q = Db::new(h);
    let id = q.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(1)).unwrap().id();
    let a = q.take("worker-a");
    assert_eq!(a.token.attempt, 1);
    q.exhaust(&a.token(), "gave up").unwrap();
    q.replay(id).unwrap();
    let replayed = q.job(id).unwrap().unwrap();
    assert_eq!((replayed.state, replayed.attempt), (JobState::Pending, 0), "the admin retry reset the attempt");
    let b = q.take("worker-b");
    assert_eq!(b.token.attempt, a.token.attempt, "the (id, attempt) pair came back");
    assert_eq!(b.id(), a.id());
    assert_ne!(b.token.claim_id, a.token.claim_id);

    let before = q.snapshot();
    assert_eq!(lost(q.renew(&a.token(), LEASE)), LostReason::Superseded);
    assert_eq!(lost(q.complete(&a.token())), LostReason::Superseded);
    assert_eq!(lost(q.retry(&a.token(), Duration::ZERO, "stale")), LostReason::Superseded);
    assert!(!q.owns(&a.token()).unwrap());
    assert!(matches!(q.acknowledge(&a.token()), Err(Error::StaleIdentity { .. })));
    assert_eq!(q.snapshot(), before, "the same-attempt stale token changed nothing");

    q.complete(&b.token()).unwrap();
    let job = q.job(id).unwrap().unwrap();
    assert_eq!((job.state, job.attempt, job.claim_id), (JobState::Completed, 1, Some(b.token.claim_id)));
    // And the forged combination (B's id and attempt, A's claim id) is just as dead.
    assert_eq!(lost(q.complete(&a.token())), LostReason::Superseded);
}

// ------------------------------------------------------------------------ (c)

fn a_pruned_max_id_is_never_handed_out_again_even_after_reopen<H: Harness>(h: &H) {
    let q = Db::new(h);
    let ids: Vec<_> = (0..3).map(|i| q.add(&format!("job-{i}"))).collect();
    let max = *ids.iter().max().unwrap();
    // Complete the max-id job (claims go in id order, so settle all three).
    let mut max_token = None;
    for _ in 0..3 {
        let job = q.take("w");
        q.complete(&job.token()).unwrap();
        if job.id() == max {
            max_token = Some(job.token());
        }
    }
    q.advance(Duration::from_secs(8 * 24 * 3600));
    let pruned = q.prune(&Retention::default()).unwrap();
    assert_eq!(pruned.settled, 3);
    assert!(q.job(max).unwrap().is_none(), "the max-id row is gone");
    assert_eq!(lost(q.complete(&max_token.unwrap())), LostReason::Missing);

    let next = q.add("after prune");
    assert!(next > max, "new id {next} must be greater than the pruned max id {max}");
    // The high-water mark is durable: a new handle (a restarted process) continues above it.
    let next_id = next;
    let job = q.take("w");
    q.complete(&job.token()).unwrap();
    q.advance(Duration::from_secs(8 * 24 * 3600));
    assert_eq!(q.prune(&Retention::default()).unwrap().settled, 1);
    let again = q.reopen();
    let after_reopen = again.enqueue(NewJob::new("q", b"y".to_vec())).unwrap().id();
    assert!(after_reopen > next_id, "{after_reopen} > {next_id} after reopen");
}

// ------------------------------------------------------------------------ (d)

/// The reaper's view says the lease expired (its clock is ahead), but the owner, whose
/// lease is live at its own clock, completes first: the reaper's guarded write must not
/// overwrite `completed`.
fn a_completion_between_the_reapers_read_and_its_write_wins<H: Harness>(h: &H) {
    let q = Db::new(h);
    let id = q.add("job");
    let owner = q.take("owner");
    let (reaper, _) = handle_with_clock(&q, T0 + LEASE.as_millis() as i64 + 1);
    let seen = reaper.reap_preview().unwrap();
    assert_eq!(seen.requeued, 1, "the reaper's read sees the expired claim");
    q.complete(&owner.token()).unwrap(); // the owner's clock says the lease is live
    let before = q.snapshot();
    let reaped = reaper.reap().unwrap();
    assert_eq!(reaped.total(), 0, "the reaper's write re-checks state and lease");
    assert_eq!(q.snapshot(), before);
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Completed);
}

/// The same with a retry (River #1373's second case): the retried job is pending with its
/// backoff; the reaper must not touch it.
fn a_retry_between_the_reapers_read_and_its_write_wins<H: Harness>(h: &H) {
    let q = Db::new(h);
    let id = q.add("job");
    let owner = q.take("owner");
    let (reaper, _) = handle_with_clock(&q, T0 + LEASE.as_millis() as i64 + 1);
    assert_eq!(reaper.reap_preview().unwrap().requeued, 1);
    q.retry(&owner.token(), Duration::from_secs(3600), "rate limited").unwrap();
    let before = q.snapshot();
    assert_eq!(reaper.reap().unwrap().total(), 0);
    assert_eq!(q.snapshot(), before);
    let job = q.job(id).unwrap().unwrap();
    assert_eq!(
        (job.state, job.run_at, job.last_error.as_deref()),
        (JobState::Pending, T0 + 3_600_000, Some("rate limited"))
    );
}

/// The other order: the reap commits first, then the owner's late completion is rejected
/// (the job is pending again) and changes nothing.
fn a_completion_after_the_reap_is_rejected_and_changes_nothing<H: Harness>(h: &H) {
    let q = Db::new(h);
    let id = q.add("job");
    let owner = q.take("owner");
    q.advance(LEASE);
    assert_eq!(q.reap().unwrap().requeued, 1);
    let before = q.snapshot();
    assert_eq!(lost(q.complete(&owner.token())), LostReason::NotRunning(JobState::Pending));
    assert_eq!(q.snapshot(), before);
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Pending);
}

// ------------------------------------------------------------------------ (e)

fn the_reaper_exhausts_an_abandoned_last_attempt<H: Harness>(h: &H) {
    let q = Db::new(h);
    let id = q.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(2)).unwrap().id();
    let first = q.take("w1");
    q.advance(LEASE);
    assert_eq!(q.reap().unwrap().requeued, 1, "attempt 1 of 2: back to pending");
    let last = q.take("w2");
    assert_eq!(last.token.attempt, 2);
    q.advance(LEASE);
    assert!(q.claim("q", "w3", LEASE).unwrap().is_none(), "an expired last attempt is not reclaimable");
    let preview = q.reap_preview().unwrap();
    assert_eq!((preview.requeued, preview.exhausted), (0, 1));
    let reaped = q.reap().unwrap();
    assert_eq!((reaped.requeued, reaped.exhausted, reaped.waits_expired), (0, 1, 0));
    let job = q.job(id).unwrap().unwrap();
    assert_eq!((job.state, job.attempt, job.max_attempts), (JobState::Exhausted, 2, 2));
    assert_eq!(job.exhausted_at, Some(q.now_ms()));
    assert_eq!(job.acknowledged_at, None);
    assert!(job.last_error.as_deref().unwrap_or("").contains("lease expired"), "{:?}", job.last_error);
    assert_eq!(q.count("pending"), 0, "never pending without attempts left");
    assert!(q.claim("q", "w3", LEASE).unwrap().is_none());
    // The durable record keeps the last claim's token; the stale tokens cannot settle it.
    let page = q.exhaustions(None, 10).unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].token, last.token());
    for stale in [first.token(), last.token()] {
        assert!(matches!(
            lost(q.complete(&stale)),
            LostReason::NotRunning(JobState::Exhausted) | LostReason::Superseded
        ));
    }
    assert!(matches!(q.acknowledge(&first.token()), Err(Error::StaleIdentity { .. })));
    q.acknowledge(&last.token()).unwrap();
    assert!(q.exhaustions(None, 10).unwrap().items.is_empty());
    // A second reap finds nothing.
    assert_eq!(q.reap().unwrap().total(), 0);
}
