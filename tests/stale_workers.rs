//! T3: deterministic stale-worker scenarios on a manual clock (RELIABILITY.md §3 T3).
//!
//! (a) expire → reap → reclaim: the old owner's renew and settle are rejected and change
//!     nothing, the new owner settles;
//! (b) an admin replay resets the attempt counter: the old token with the same attempt
//!     number is still rejected, because its claim id differs;
//! (c) the max-id row is pruned: the next intake gets a greater id, never the pruned one;
//! (d) a completion racing the reaper (River #1302 / #1373): both orders, plus a reaper that
//!     waits on another connection's write lock while the completion commits;
//! (e) the reaper moves an abandoned last attempt to exhausted, never to pending.

mod common;

use common::*;
use crossbeam_channel::bounded;
use fenceq::rusqlite::{Connection, TransactionBehavior};
use fenceq::{Error, JobState, LostReason, ManualClock, NewJob, Queue, Retention};
use std::time::Duration;

fn lost(result: Result<impl std::fmt::Debug, Error>) -> LostReason {
    match result {
        Err(Error::OwnershipLost { reason, .. }) => reason,
        other => panic!("expected OwnershipLost, got {other:?}"),
    }
}

/// A second handle on the same file with its own clock (another process's view of time).
fn handle_with_clock(q: &TestQueue, now: i64) -> (Queue, ManualClock) {
    let clock = ManualClock::new(now);
    (Queue::builder().path(q.path()).clock(clock.clone()).open().unwrap(), clock)
}

// ------------------------------------------------------------------------ (a)

#[test]
fn an_expired_owner_is_rejected_after_reap_and_reclaim_while_the_new_owner_settles() {
    let q = temp_queue();
    create_replies(&q.path());
    let id = q.add("job");
    let a = q.take("worker-a");
    assert_eq!(a.token.attempt, 1);
    q.advance(LEASE);
    // Expired but not yet reaped: A's writes already fail, with the reason.
    let before = snapshot(&q.path());
    assert_eq!(lost(q.renew(&a.token(), LEASE)), LostReason::LeaseExpired);
    assert_eq!(snapshot(&q.path()), before, "a rejected renew changes nothing");
    let reaped = q.reap().unwrap();
    assert_eq!((reaped.requeued, reaped.exhausted, reaped.waits_expired), (1, 0, 0));
    let b = q.take("worker-b");
    assert_eq!((b.id(), b.token.attempt), (id, 2));
    assert_ne!(b.token.claim_id, a.token.claim_id);

    let before = snapshot(&q.path());
    assert_eq!(lost(q.renew(&a.token(), LEASE)), LostReason::Superseded);
    assert_eq!(lost(q.complete(&a.token())), LostReason::Superseded);
    assert_eq!(lost(q.retry(&a.token(), Duration::ZERO, "late")), LostReason::Superseded);
    assert_eq!(lost(q.exhaust(&a.token(), "late")), LostReason::Superseded);
    assert_eq!(lost(q.mark_unknown(&a.token(), "late")), LostReason::Superseded);
    assert_eq!(lost(q.park(&a.token(), LEASE, "late")), LostReason::Superseded);
    let mut ran = false;
    let result = q.complete_with(&a.token(), |tx| {
        ran = true;
        tx.execute("INSERT INTO replies VALUES (?1, ?2)", [id.0, 1])?;
        Ok(())
    });
    assert_eq!(lost(result), LostReason::Superseded);
    assert!(!ran, "the fence is checked before the closure runs");
    assert_eq!(lost(q.with_ownership(&a.token(), |_| Ok(()))), LostReason::Superseded);
    assert!(!q.owns(&a.token()).unwrap());
    assert_eq!(snapshot(&q.path()), before, "A's six rejected writes changed 0 rows");
    assert!(reply_rows(&q.path()).is_empty(), "A's domain write never committed");

    // B renews, writes its domain row and completes in one transaction.
    q.renew(&b.token(), LEASE).unwrap();
    q.complete_with(&b.token(), |tx| {
        tx.execute("INSERT INTO replies VALUES (?1, ?2)", [id.0, 2])?;
        Ok(())
    })
    .unwrap();
    let job = q.job(id).unwrap().unwrap();
    assert_eq!((job.state, job.attempt, job.claim_id), (JobState::Completed, 2, Some(b.token.claim_id)));
    assert_eq!(reply_rows(&q.path()), vec![(id.0, 2)]);
    // After B's completion A stays dead, and so does B's own token for anything but reads.
    let before = snapshot(&q.path());
    assert_eq!(lost(q.complete(&a.token())), LostReason::Superseded);
    assert_eq!(lost(q.complete(&b.token())), LostReason::NotRunning(JobState::Completed));
    assert_eq!(snapshot(&q.path()), before);
}

#[test]
fn an_expired_owner_is_rejected_when_the_job_is_reclaimed_without_a_reaper() {
    let q = temp_queue();
    let id = q.add("job");
    let a = q.take("worker-a");
    q.advance(LEASE + Duration::from_millis(1));
    // The same worker id reclaims: still a new claim, and the old token is dead.
    let b = q.take("worker-a");
    assert_eq!((b.id(), b.token.attempt), (id, 2));
    let before = snapshot(&q.path());
    assert_eq!(lost(q.complete(&a.token())), LostReason::Superseded);
    assert_eq!(snapshot(&q.path()), before);
    q.complete(&b.token()).unwrap();
    assert_eq!(raw_count(&q.path(), "completed"), 1);
}

// ------------------------------------------------------------------------ (b)

#[test]
fn a_replay_resets_the_attempt_but_the_old_token_with_the_same_attempt_stays_dead() {
    let q = temp_queue();
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

    let before = snapshot(&q.path());
    assert_eq!(lost(q.renew(&a.token(), LEASE)), LostReason::Superseded);
    assert_eq!(lost(q.complete(&a.token())), LostReason::Superseded);
    assert_eq!(lost(q.retry(&a.token(), Duration::ZERO, "stale")), LostReason::Superseded);
    assert!(!q.owns(&a.token()).unwrap());
    assert!(matches!(q.acknowledge(&a.token()), Err(Error::StaleIdentity { .. })));
    assert_eq!(snapshot(&q.path()), before, "the same-attempt stale token changed nothing");

    q.complete(&b.token()).unwrap();
    let job = q.job(id).unwrap().unwrap();
    assert_eq!((job.state, job.attempt, job.claim_id), (JobState::Completed, 1, Some(b.token.claim_id)));
    // And the forged combination (B's id and attempt, A's claim id) is just as dead.
    assert_eq!(lost(q.complete(&a.token())), LostReason::Superseded);
}

// ------------------------------------------------------------------------ (c)

#[test]
fn a_pruned_max_id_is_never_handed_out_again_even_after_reopen() {
    let q = temp_queue();
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
/// lease is live at its own clock, completes first: the reaper's guarded UPDATE must not
/// overwrite `completed`.
#[test]
fn a_completion_between_the_reapers_read_and_its_write_wins() {
    let q = temp_queue();
    let id = q.add("job");
    let owner = q.take("owner");
    let (reaper, _) = handle_with_clock(&q, T0 + LEASE.as_millis() as i64 + 1);
    let seen = reaper.reap_preview().unwrap();
    assert_eq!(seen.requeued, 1, "the reaper's read sees the expired claim");
    q.complete(&owner.token()).unwrap(); // the owner's clock says the lease is live
    let before = snapshot(&q.path());
    let reaped = reaper.reap().unwrap();
    assert_eq!(reaped.total(), 0, "the reaper's write re-checks state and lease");
    assert_eq!(snapshot(&q.path()), before);
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Completed);
}

/// The same with a retry (River #1373's second case): the retried job is pending with its
/// backoff; the reaper must not touch it.
#[test]
fn a_retry_between_the_reapers_read_and_its_write_wins() {
    let q = temp_queue();
    let id = q.add("job");
    let owner = q.take("owner");
    let (reaper, _) = handle_with_clock(&q, T0 + LEASE.as_millis() as i64 + 1);
    assert_eq!(reaper.reap_preview().unwrap().requeued, 1);
    q.retry(&owner.token(), Duration::from_secs(3600), "rate limited").unwrap();
    let before = snapshot(&q.path());
    assert_eq!(reaper.reap().unwrap().total(), 0);
    assert_eq!(snapshot(&q.path()), before);
    let job = q.job(id).unwrap().unwrap();
    assert_eq!(
        (job.state, job.run_at, job.last_error.as_deref()),
        (JobState::Pending, T0 + 3_600_000, Some("rate limited"))
    );
}

/// The other order: the reap commits first, then the owner's late completion is rejected
/// (the job is pending again) and changes nothing.
#[test]
fn a_completion_after_the_reap_is_rejected_and_changes_nothing() {
    let q = temp_queue();
    let id = q.add("job");
    let owner = q.take("owner");
    q.advance(LEASE);
    assert_eq!(q.reap().unwrap().requeued, 1);
    let before = snapshot(&q.path());
    assert_eq!(lost(q.complete(&owner.token())), LostReason::NotRunning(JobState::Pending));
    assert_eq!(snapshot(&q.path()), before);
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Pending);
}

/// A second connection (another process's fenceq) holds the write lock and completes the
/// job by its exact token while the reaper waits for the lock; once it commits, the reaper's
/// transaction sees the completion and changes nothing.
#[test]
fn a_reaper_waiting_on_another_connections_write_lock_does_not_overwrite_its_completion() {
    let q = temp_queue();
    let id = q.add("job");
    let owner = q.take("owner");
    let (reaper, _) = handle_with_clock(&q, T0 + LEASE.as_millis() as i64 + 1);
    assert_eq!(reaper.reap_preview().unwrap().requeued, 1);

    let (locked_tx, locked) = bounded(1);
    let (commit_tx, commit) = bounded::<()>(1);
    let path = q.path();
    let token = owner.token();
    let holder = std::thread::spawn(move || {
        let mut conn = Connection::open(&path).unwrap();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        // The engine's own completion guard, written by hand: exact token and a live lease at
        // the owner's clock (T0 + 1).
        let changed = tx
            .execute(
                "UPDATE fenceq_jobs SET state = 'completed', lease_until = NULL, settled_at = ?4
                 WHERE id = ?1 AND attempt = ?2 AND claim_id = ?3 AND state = 'running' AND lease_until > ?4",
                fenceq::rusqlite::params![token.id.0, token.attempt, token.claim_id.0.as_bytes().as_slice(), T0 + 1],
            )
            .unwrap();
        locked_tx.send(changed).unwrap();
        commit.recv_timeout(HANG_GUARD).unwrap();
        tx.commit().unwrap();
    });
    assert_eq!(locked.recv_timeout(HANG_GUARD).unwrap(), 1, "the owner's guarded completion matched");

    let (reaped_tx, reaped) = bounded(1);
    let reaper_thread = std::thread::spawn(move || reaped_tx.send(reaper.reap()).unwrap());
    // The reaper cannot finish while the lock is held (its busy timeout is 5 s).
    assert!(
        reaped.recv_timeout(Duration::from_millis(300)).is_err(),
        "the reaper must wait for the other connection's write lock"
    );
    commit_tx.send(()).unwrap();
    holder.join().unwrap();
    let report = reaped.recv_timeout(HANG_GUARD).unwrap().unwrap();
    reaper_thread.join().unwrap();
    assert_eq!(report.total(), 0, "the reaper's guarded UPDATE saw the committed completion");
    let job = q.job(id).unwrap().unwrap();
    assert_eq!((job.state, job.attempt, job.lease_until), (JobState::Completed, 1, None));
}

/// The engine's own `complete_with` holds the write lock (its closure is paused) while a
/// reaper in another handle waits: the completion commits and the reaper changes nothing.
#[test]
fn a_reaper_waiting_on_an_engine_completion_in_progress_changes_nothing() {
    let q = temp_queue();
    create_replies(&q.path());
    let id = q.add("job");
    let owner = q.take("owner");
    let (reaper, _) = handle_with_clock(&q, T0 + LEASE.as_millis() as i64 + 1);
    assert_eq!(reaper.reap_preview().unwrap().requeued, 1);

    let (inside_tx, inside) = bounded(1);
    let (go_tx, go) = bounded::<()>(1);
    let worker = q.queue.clone();
    let token = owner.token();
    let completing = std::thread::spawn(move || {
        worker.complete_with(&token, |tx| {
            tx.execute("INSERT INTO replies VALUES (?1, ?2)", [token.id.0, 1])?;
            inside_tx.send(()).unwrap();
            go.recv_timeout(HANG_GUARD).unwrap();
            Ok(())
        })
    });
    inside.recv_timeout(HANG_GUARD).unwrap();
    let (reaped_tx, reaped) = bounded(1);
    let reaper_thread = std::thread::spawn(move || reaped_tx.send(reaper.reap()).unwrap());
    assert!(reaped.recv_timeout(Duration::from_millis(300)).is_err(), "the reaper waits for the lock");
    go_tx.send(()).unwrap();
    completing.join().unwrap().unwrap();
    assert_eq!(reaped.recv_timeout(HANG_GUARD).unwrap().unwrap().total(), 0);
    reaper_thread.join().unwrap();
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Completed);
    assert_eq!(reply_rows(&q.path()), vec![(id.0, 1)]);
}

// ------------------------------------------------------------------------ (e)

#[test]
fn the_reaper_exhausts_an_abandoned_last_attempt() {
    let q = temp_queue();
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
    assert_eq!(raw_count(&q.path(), "pending"), 0, "never pending without attempts left");
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
