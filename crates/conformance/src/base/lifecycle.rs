//! The job lifecycle: intake to completion, claim order, leases and their expiry, renew,
//! settles after the lease ran out, retry (explicit delay and the default backoff), cancel,
//! park and resume, reap, prune, and per-queue stats.

use crate::fixture::{Db, LEASE, T0};
use crate::harness::Harness;
use crate::Rule;
use fenceq::{Error, JobState, LostReason, NewJob, Retention, Retried, RetryPolicy};
use std::time::Duration;

/// The rules of this file.
pub(super) fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        a_job_runs_from_enqueue_to_completed,
        claim_orders_by_priority_then_run_at_then_id,
        claim_skips_jobs_scheduled_in_the_future_and_other_queues,
        a_live_lease_is_never_handed_out_again_not_even_to_the_same_worker,
        an_expired_lease_is_reclaimable_at_once_and_the_old_token_is_dead,
        reclaim_by_the_same_worker_id_gets_a_new_identity,
        renew_extends_the_lease_only_while_it_is_live,
        a_settle_after_the_lease_ran_out_is_rejected_even_without_a_reclaim,
        retry_schedules_with_an_explicit_delay_then_exhausts_when_out_of_attempts,
        retry_uses_exponential_backoff_with_jitter_by_default,
        cancel_stops_pending_waiting_and_running_jobs_and_the_owner_finds_out,
        park_releases_the_lease_and_resume_grants_one_more_attempt,
        reap_requeues_expired_leases_and_exhausts_the_last_attempt,
        reap_exhausts_waits_past_their_deadline,
        prune_deletes_only_old_completed_and_cancelled_rows,
        prune_works_in_batches,
        stats_count_every_state_per_queue,
    ]
}

fn a_job_runs_from_enqueue_to_completed<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("hello");
    let job = db.take("w1");
    assert_eq!(job.id(), id);
    assert_eq!(job.payload, b"hello");
    assert_eq!(job.token.attempt, 1);
    assert_eq!(job.lease_until, T0 + 30_000);
    assert!(db.owns(&job.token()).unwrap());
    db.complete(&job.token()).unwrap();
    let record = db.job(id).unwrap().unwrap();
    assert_eq!(record.state, JobState::Completed);
    assert_eq!(record.settled_at, Some(T0));
    assert_eq!(record.lease_until, None);
    assert!(db.claim("q", "w1", LEASE).unwrap().is_none());
}

fn claim_orders_by_priority_then_run_at_then_id<H: Harness>(h: &H) {
    let db = Db::new(h);
    let low = db.enqueue(NewJob::new("q", b"low".to_vec())).unwrap().id();
    let high_late =
        db.enqueue(NewJob::new("q", b"hl".to_vec()).priority(5).delay(Duration::from_millis(10))).unwrap().id();
    let high = db.enqueue(NewJob::new("q", b"h".to_vec()).priority(5)).unwrap().id();
    let low2 = db.enqueue(NewJob::new("q", b"low2".to_vec())).unwrap().id();
    db.advance(Duration::from_millis(10));
    let order: Vec<_> = (0..4).map(|_| db.take("w").id()).collect();
    assert_eq!(order, vec![high, high_late, low, low2]);
}

fn claim_skips_jobs_scheduled_in_the_future_and_other_queues<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.enqueue(NewJob::new("q", b"later".to_vec()).delay(Duration::from_secs(60))).unwrap();
    db.enqueue(NewJob::new("other", b"x".to_vec())).unwrap();
    assert!(db.claim("q", "w", LEASE).unwrap().is_none());
    db.advance(Duration::from_secs(59));
    assert!(db.claim("q", "w", LEASE).unwrap().is_none());
    db.advance(Duration::from_secs(1));
    assert_eq!(db.take("w").payload, b"later");
}

fn a_live_lease_is_never_handed_out_again_not_even_to_the_same_worker<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.add("only");
    let first = db.take("bot-1");
    assert!(db.claim("q", "bot-1", LEASE).unwrap().is_none());
    assert!(db.claim("q", "bot-2", LEASE).unwrap().is_none());
    db.advance(LEASE - Duration::from_millis(1));
    assert!(db.claim("q", "bot-1", LEASE).unwrap().is_none(), "one millisecond before expiry");
    assert!(db.owns(&first.token()).unwrap());
}

fn an_expired_lease_is_reclaimable_at_once_and_the_old_token_is_dead<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.add("x");
    let first = db.take("w1");
    db.advance(LEASE);
    assert!(!db.owns(&first.token()).unwrap(), "a lease that ran out at now counts as lost");
    let second = db.take("w2");
    assert_eq!(second.id(), first.id());
    assert_eq!(second.token.attempt, 2);
    assert_ne!(second.token.claim_id, first.token.claim_id);
    let before = db.snapshot();
    for result in [db.complete(&first.token()), db.renew(&first.token(), LEASE).map(|_| ())] {
        assert!(matches!(result, Err(Error::OwnershipLost { reason: LostReason::Superseded, .. })), "{result:?}");
    }
    assert_eq!(db.snapshot(), before);
    db.complete(&second.token()).unwrap();
}

fn reclaim_by_the_same_worker_id_gets_a_new_identity<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.add("x");
    let first = db.take("bot");
    db.advance(LEASE + Duration::from_secs(1));
    let again = db.take("bot");
    assert_ne!(again.token(), first.token());
    assert!(matches!(db.complete(&first.token()), Err(Error::OwnershipLost { .. })));
    assert!(db.owns(&again.token()).unwrap());
}

fn renew_extends_the_lease_only_while_it_is_live<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.add("x");
    let job = db.take("w");
    db.advance(Duration::from_secs(20));
    assert_eq!(db.renew(&job.token(), LEASE).unwrap(), T0 + 50_000);
    db.advance(Duration::from_secs(29));
    assert!(db.claim("q", "w2", LEASE).unwrap().is_none(), "the renewed lease is still live");
    db.advance(Duration::from_secs(1));
    let err = db.renew(&job.token(), LEASE).unwrap_err();
    assert!(matches!(err, Error::OwnershipLost { reason: LostReason::LeaseExpired, .. }), "{err}");
    assert_eq!(db.job(job.id()).unwrap().unwrap().lease_until, Some(T0 + 50_000), "renew changed nothing");
}

fn a_settle_after_the_lease_ran_out_is_rejected_even_without_a_reclaim<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.add("x");
    let job = db.take("w");
    db.advance(LEASE);
    let before = db.snapshot();
    assert!(matches!(db.complete(&job.token()), Err(Error::OwnershipLost { reason: LostReason::LeaseExpired, .. })));
    assert!(matches!(db.retry(&job.token(), Duration::ZERO, "e"), Err(Error::OwnershipLost { .. })));
    assert!(matches!(db.exhaust(&job.token(), "e"), Err(Error::OwnershipLost { .. })));
    assert!(matches!(db.mark_unknown(&job.token(), "e"), Err(Error::OwnershipLost { .. })));
    assert!(matches!(db.park(&job.token(), LEASE, "e"), Err(Error::OwnershipLost { .. })));
    assert_eq!(db.snapshot(), before);
}

fn retry_schedules_with_an_explicit_delay_then_exhausts_when_out_of_attempts<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(2)).unwrap().id();
    let first = db.take("w");
    assert_eq!(db.retry(&first.token(), Duration::from_secs(10), "flaky").unwrap(), Retried::Scheduled(T0 + 10_000));
    let record = db.job(id).unwrap().unwrap();
    assert_eq!((record.state, record.last_error.as_deref()), (JobState::Pending, Some("flaky")));
    assert!(db.claim("q", "w", LEASE).unwrap().is_none(), "not before the backoff");
    db.advance(Duration::from_secs(10));
    let second = db.take("w");
    assert_eq!(second.last_error.as_deref(), Some("flaky"));
    assert_eq!(db.retry(&second.token(), Duration::from_secs(10), "still flaky").unwrap(), Retried::Exhausted);
    let record = db.job(id).unwrap().unwrap();
    assert_eq!(record.state, JobState::Exhausted);
    assert_eq!(record.attempt, 2);
    assert_eq!(record.exhausted_at, Some(T0 + 10_000));
}

fn retry_uses_exponential_backoff_with_jitter_by_default<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(10)).unwrap();
    let policy = RetryPolicy::default();
    for attempt in 1..=4u32 {
        let job = db.take("w");
        let Retried::Scheduled(at) = db.retry(&job.token(), policy, "e").unwrap() else { panic!("attempts left") };
        let delay = Duration::from_millis((at - db.now_ms()) as u64);
        assert!(delay >= policy.delay(attempt, 0.0) && delay <= policy.delay(attempt, 1.0), "{attempt}: {delay:?}");
        db.clock.set(at);
    }
}

fn cancel_stops_pending_waiting_and_running_jobs_and_the_owner_finds_out<H: Harness>(h: &H) {
    let db = Db::new(h);
    let pending = db.add("p");
    let running_id = db.add("r");
    db.cancel(pending).unwrap();
    let running = db.take("w");
    assert_eq!(running.id(), running_id);
    db.cancel(running_id).unwrap();
    let err = db.complete(&running.token()).unwrap_err();
    assert!(matches!(err, Error::OwnershipLost { reason: LostReason::NotRunning(JobState::Cancelled), .. }));
    assert!(matches!(db.cancel(running_id), Err(Error::InvalidState { state: JobState::Cancelled, .. })));
    assert!(matches!(db.cancel(fenceq::JobId(999)), Err(Error::NotFound(_))));
}

fn park_releases_the_lease_and_resume_grants_one_more_attempt<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(1)).unwrap().id();
    let job = db.take("w");
    db.park(&job.token(), Duration::from_secs(3600), "awaiting approval").unwrap();
    db.advance(Duration::from_secs(600));
    assert_eq!(db.reap().unwrap().total(), 0, "a parked job is never reaped as stale");
    assert!(db.claim("q", "w", LEASE).unwrap().is_none());
    db.resume(&job.token()).unwrap();
    let record = db.job(id).unwrap().unwrap();
    assert_eq!((record.state, record.max_attempts), (JobState::Pending, 2));
    let resumed = db.take("w");
    assert_eq!(resumed.token.attempt, 2);
    db.complete(&resumed.token()).unwrap();
}

fn reap_requeues_expired_leases_and_exhausts_the_last_attempt<H: Harness>(h: &H) {
    let db = Db::new(h);
    let a = db.enqueue(NewJob::new("q", b"a".to_vec()).max_attempts(3)).unwrap().id();
    let b = db.enqueue(NewJob::new("q", b"b".to_vec()).max_attempts(1)).unwrap().id();
    let live = db.enqueue(NewJob::new("other", b"live".to_vec())).unwrap().id();
    db.take("w");
    db.take("w");
    db.advance(LEASE);
    let live_job = db.claim("other", "w", LEASE).unwrap().unwrap();
    assert_eq!(live_job.id(), live);
    let report = db.reap().unwrap();
    assert_eq!((report.requeued, report.exhausted, report.waits_expired), (1, 1, 0));
    assert_eq!(db.job(a).unwrap().unwrap().state, JobState::Pending);
    let b_record = db.job(b).unwrap().unwrap();
    assert_eq!(b_record.state, JobState::Exhausted);
    assert!(b_record.last_error.unwrap().contains("lease expired"));
    assert_eq!(db.job(live).unwrap().unwrap().state, JobState::Running, "a live lease is untouched");
    assert_eq!(db.reap().unwrap().total(), 0);
}

fn reap_exhausts_waits_past_their_deadline<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("x");
    let job = db.take("w");
    db.park(&job.token(), Duration::from_secs(900), "approval").unwrap();
    db.advance(Duration::from_secs(900));
    assert_eq!(db.reap().unwrap().waits_expired, 1);
    let record = db.job(id).unwrap().unwrap();
    assert_eq!(record.state, JobState::Exhausted);
    assert_eq!(record.last_error.as_deref(), Some("wait expired: approval"));
    assert!(matches!(db.resume(&job.token()), Err(Error::InvalidState { state: JobState::Exhausted, .. })));
}

fn prune_deletes_only_old_completed_and_cancelled_rows<H: Harness>(h: &H) {
    let db = Db::new(h);
    let done = db.add("done");
    let cancelled = db.add("cancelled");
    let pending = db.add("pending");
    let running = db.add("running");
    db.complete(&db.take("w").token()).unwrap();
    db.cancel(cancelled).unwrap();
    db.take("w"); // "pending" becomes running ...
    let _ = running;
    db.advance(Duration::from_secs(7 * 24 * 3600 - 1));
    assert_eq!(db.prune(&Retention::default()).unwrap().deleted(), 0, "younger than 7 days");
    db.advance(Duration::from_secs(1));
    let preview = db.prune_preview(&Retention::default()).unwrap();
    let report = db.prune(&Retention::default()).unwrap();
    assert_eq!((report.settled, report.acknowledged), (2, 0));
    assert_eq!(preview.deleted(), report.deleted());
    assert!(db.job(done).unwrap().is_none());
    assert!(db.job(cancelled).unwrap().is_none());
    assert!(db.job(pending).unwrap().is_some());
    assert_eq!(db.stats().unwrap().queue("q").total(), 2);
}

fn prune_works_in_batches<H: Harness>(h: &H) {
    let db = Db::new(h);
    for i in 0..25 {
        db.add(&format!("{i}"));
        db.complete(&db.take("w").token()).unwrap();
    }
    db.advance(Duration::from_secs(8 * 24 * 3600));
    let report = db.prune(&Retention { older_than: Duration::from_secs(3600), batch_size: 10 }).unwrap();
    assert_eq!(report.settled, 25);
    assert!(report.batches >= 3);
}

fn stats_count_every_state_per_queue<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.add("a");
    db.add("b");
    db.enqueue(NewJob::new("other", b"c".to_vec())).unwrap();
    let job = db.take("w");
    db.advance(LEASE);
    let stats = db.stats().unwrap();
    let s = stats.queue("q");
    assert_eq!((s.pending, s.running, s.expired_leases, s.oldest_pending_run_at), (1, 1, 1, Some(T0)));
    assert_eq!(stats.queue("other").pending, 1);
    assert_eq!(stats.queue("nothing").total(), 0);
    let _ = job;
}
