//! Capability level 1, the base lifecycle: intake, claim order, leases, settle, retry, park,
//! cancel, reap and prune, with positive controls and stale controls.

mod common;

use common::*;
use fenceq::{Error, JobState, LostReason, NewJob, Retention, Retried, RetryPolicy};
use std::time::Duration;

#[test]
fn a_job_runs_from_enqueue_to_completed() {
    let q = temp_queue();
    let id = q.add("hello");
    let job = q.take("w1");
    assert_eq!(job.id(), id);
    assert_eq!(job.payload, b"hello");
    assert_eq!(job.token.attempt, 1);
    assert_eq!(job.lease_until, T0 + 30_000);
    assert!(q.owns(&job.token()).unwrap());
    q.complete(&job.token()).unwrap();
    let record = q.job(id).unwrap().unwrap();
    assert_eq!(record.state, JobState::Completed);
    assert_eq!(record.settled_at, Some(T0));
    assert_eq!(record.lease_until, None);
    assert!(q.claim("q", "w1", LEASE).unwrap().is_none());
}

#[test]
fn claim_orders_by_priority_then_run_at_then_id() {
    let q = temp_queue();
    let low = q.enqueue(NewJob::new("q", b"low".to_vec())).unwrap().id();
    let high_late =
        q.enqueue(NewJob::new("q", b"hl".to_vec()).priority(5).delay(Duration::from_millis(10))).unwrap().id();
    let high = q.enqueue(NewJob::new("q", b"h".to_vec()).priority(5)).unwrap().id();
    let low2 = q.enqueue(NewJob::new("q", b"low2".to_vec())).unwrap().id();
    q.advance(Duration::from_millis(10));
    let order: Vec<_> = (0..4).map(|_| q.take("w").id()).collect();
    assert_eq!(order, vec![high, high_late, low, low2]);
}

#[test]
fn claim_skips_jobs_scheduled_in_the_future_and_other_queues() {
    let q = temp_queue();
    q.enqueue(NewJob::new("q", b"later".to_vec()).delay(Duration::from_secs(60))).unwrap();
    q.enqueue(NewJob::new("other", b"x".to_vec())).unwrap();
    assert!(q.claim("q", "w", LEASE).unwrap().is_none());
    q.advance(Duration::from_secs(59));
    assert!(q.claim("q", "w", LEASE).unwrap().is_none());
    q.advance(Duration::from_secs(1));
    assert_eq!(q.take("w").payload, b"later");
}

#[test]
fn a_live_lease_is_never_handed_out_again_not_even_to_the_same_worker() {
    let q = temp_queue();
    q.add("only");
    let first = q.take("bot-1");
    assert!(q.claim("q", "bot-1", LEASE).unwrap().is_none());
    assert!(q.claim("q", "bot-2", LEASE).unwrap().is_none());
    q.advance(LEASE - Duration::from_millis(1));
    assert!(q.claim("q", "bot-1", LEASE).unwrap().is_none(), "one millisecond before expiry");
    assert!(q.owns(&first.token()).unwrap());
}

#[test]
fn an_expired_lease_is_reclaimable_at_once_and_the_old_token_is_dead() {
    let q = temp_queue();
    q.add("x");
    let first = q.take("w1");
    q.advance(LEASE);
    assert!(!q.owns(&first.token()).unwrap(), "a lease that ran out at now counts as lost");
    let second = q.take("w2");
    assert_eq!(second.id(), first.id());
    assert_eq!(second.token.attempt, 2);
    assert_ne!(second.token.claim_id, first.token.claim_id);
    let before = snapshot(&q.path());
    for result in [q.complete(&first.token()), q.renew(&first.token(), LEASE).map(|_| ())] {
        assert!(matches!(result, Err(Error::OwnershipLost { reason: LostReason::Superseded, .. })), "{result:?}");
    }
    assert_eq!(snapshot(&q.path()), before);
    q.complete(&second.token()).unwrap();
}

#[test]
fn reclaim_by_the_same_worker_id_gets_a_new_identity() {
    let q = temp_queue();
    q.add("x");
    let first = q.take("bot");
    q.advance(LEASE + Duration::from_secs(1));
    let again = q.take("bot");
    assert_ne!(again.token(), first.token());
    assert!(matches!(q.complete(&first.token()), Err(Error::OwnershipLost { .. })));
    assert!(q.owns(&again.token()).unwrap());
}

#[test]
fn renew_extends_the_lease_only_while_it_is_live() {
    let q = temp_queue();
    q.add("x");
    let job = q.take("w");
    q.advance(Duration::from_secs(20));
    assert_eq!(q.renew(&job.token(), LEASE).unwrap(), T0 + 50_000);
    q.advance(Duration::from_secs(29));
    assert!(q.claim("q", "w2", LEASE).unwrap().is_none(), "the renewed lease is still live");
    q.advance(Duration::from_secs(1));
    let err = q.renew(&job.token(), LEASE).unwrap_err();
    assert!(matches!(err, Error::OwnershipLost { reason: LostReason::LeaseExpired, .. }), "{err}");
    assert_eq!(q.job(job.id()).unwrap().unwrap().lease_until, Some(T0 + 50_000), "renew changed nothing");
}

#[test]
fn a_settle_after_the_lease_ran_out_is_rejected_even_without_a_reclaim() {
    let q = temp_queue();
    q.add("x");
    let job = q.take("w");
    q.advance(LEASE);
    let before = snapshot(&q.path());
    assert!(matches!(q.complete(&job.token()), Err(Error::OwnershipLost { reason: LostReason::LeaseExpired, .. })));
    assert!(matches!(q.retry(&job.token(), Duration::ZERO, "e"), Err(Error::OwnershipLost { .. })));
    assert!(matches!(q.exhaust(&job.token(), "e"), Err(Error::OwnershipLost { .. })));
    assert!(matches!(q.mark_unknown(&job.token(), "e"), Err(Error::OwnershipLost { .. })));
    assert!(matches!(q.park(&job.token(), LEASE, "e"), Err(Error::OwnershipLost { .. })));
    assert_eq!(snapshot(&q.path()), before);
}

#[test]
fn retry_schedules_with_an_explicit_delay_then_exhausts_when_out_of_attempts() {
    let q = temp_queue();
    let id = q.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(2)).unwrap().id();
    let first = q.take("w");
    assert_eq!(q.retry(&first.token(), Duration::from_secs(10), "flaky").unwrap(), Retried::Scheduled(T0 + 10_000));
    let record = q.job(id).unwrap().unwrap();
    assert_eq!((record.state, record.last_error.as_deref()), (JobState::Pending, Some("flaky")));
    assert!(q.claim("q", "w", LEASE).unwrap().is_none(), "not before the backoff");
    q.advance(Duration::from_secs(10));
    let second = q.take("w");
    assert_eq!(second.last_error.as_deref(), Some("flaky"));
    assert_eq!(q.retry(&second.token(), Duration::from_secs(10), "still flaky").unwrap(), Retried::Exhausted);
    let record = q.job(id).unwrap().unwrap();
    assert_eq!(record.state, JobState::Exhausted);
    assert_eq!(record.attempt, 2);
    assert_eq!(record.exhausted_at, Some(T0 + 10_000));
}

#[test]
fn retry_uses_exponential_backoff_with_jitter_by_default() {
    let q = temp_queue();
    q.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(10)).unwrap();
    let policy = RetryPolicy::default();
    for attempt in 1..=4u32 {
        let job = q.take("w");
        let Retried::Scheduled(at) = q.retry(&job.token(), policy, "e").unwrap() else { panic!("attempts left") };
        let delay = Duration::from_millis((at - q.now_ms()) as u64);
        assert!(delay >= policy.delay(attempt, 0.0) && delay <= policy.delay(attempt, 1.0), "{attempt}: {delay:?}");
        q.clock.set(at);
    }
}

#[test]
fn cancel_stops_pending_waiting_and_running_jobs_and_the_owner_finds_out() {
    let q = temp_queue();
    let pending = q.add("p");
    let running_id = q.add("r");
    q.cancel(pending).unwrap();
    let running = q.take("w");
    assert_eq!(running.id(), running_id);
    q.cancel(running_id).unwrap();
    let err = q.complete(&running.token()).unwrap_err();
    assert!(matches!(err, Error::OwnershipLost { reason: LostReason::NotRunning(JobState::Cancelled), .. }));
    assert!(matches!(q.cancel(running_id), Err(Error::InvalidState { state: JobState::Cancelled, .. })));
    assert!(matches!(q.cancel(fenceq::JobId(999)), Err(Error::NotFound(_))));
}

#[test]
fn park_releases_the_lease_and_resume_grants_one_more_attempt() {
    let q = temp_queue();
    let id = q.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(1)).unwrap().id();
    let job = q.take("w");
    q.park(&job.token(), Duration::from_secs(3600), "awaiting approval").unwrap();
    q.advance(Duration::from_secs(600));
    assert_eq!(q.reap().unwrap().total(), 0, "a parked job is never reaped as stale");
    assert!(q.claim("q", "w", LEASE).unwrap().is_none());
    q.resume(&job.token()).unwrap();
    let record = q.job(id).unwrap().unwrap();
    assert_eq!((record.state, record.max_attempts), (JobState::Pending, 2));
    let resumed = q.take("w");
    assert_eq!(resumed.token.attempt, 2);
    q.complete(&resumed.token()).unwrap();
}

#[test]
fn reap_requeues_expired_leases_and_exhausts_the_last_attempt() {
    let q = temp_queue();
    let a = q.enqueue(NewJob::new("q", b"a".to_vec()).max_attempts(3)).unwrap().id();
    let b = q.enqueue(NewJob::new("q", b"b".to_vec()).max_attempts(1)).unwrap().id();
    let live = q.enqueue(NewJob::new("other", b"live".to_vec())).unwrap().id();
    q.take("w");
    q.take("w");
    q.advance(LEASE);
    let live_job = q.claim("other", "w", LEASE).unwrap().unwrap();
    assert_eq!(live_job.id(), live);
    let report = q.reap().unwrap();
    assert_eq!((report.requeued, report.exhausted, report.waits_expired), (1, 1, 0));
    assert_eq!(q.job(a).unwrap().unwrap().state, JobState::Pending);
    let b_record = q.job(b).unwrap().unwrap();
    assert_eq!(b_record.state, JobState::Exhausted);
    assert!(b_record.last_error.unwrap().contains("lease expired"));
    assert_eq!(q.job(live).unwrap().unwrap().state, JobState::Running, "a live lease is untouched");
    assert_eq!(q.reap().unwrap().total(), 0);
}

#[test]
fn reap_exhausts_waits_past_their_deadline() {
    let q = temp_queue();
    let id = q.add("x");
    let job = q.take("w");
    q.park(&job.token(), Duration::from_secs(900), "approval").unwrap();
    q.advance(Duration::from_secs(900));
    assert_eq!(q.reap().unwrap().waits_expired, 1);
    let record = q.job(id).unwrap().unwrap();
    assert_eq!(record.state, JobState::Exhausted);
    assert_eq!(record.last_error.as_deref(), Some("wait expired: approval"));
    assert!(matches!(q.resume(&job.token()), Err(Error::InvalidState { state: JobState::Exhausted, .. })));
}

#[test]
fn prune_deletes_only_old_completed_and_cancelled_rows() {
    let q = temp_queue();
    let done = q.add("done");
    let cancelled = q.add("cancelled");
    let pending = q.add("pending");
    let running = q.add("running");
    q.complete(&q.take("w").token()).unwrap();
    q.cancel(cancelled).unwrap();
    q.take("w"); // "pending" becomes running ...
    let _ = running;
    q.advance(Duration::from_secs(7 * 24 * 3600 - 1));
    assert_eq!(q.prune(&Retention::default()).unwrap().deleted(), 0, "younger than 7 days");
    q.advance(Duration::from_secs(1));
    let preview = q.prune_preview(&Retention::default()).unwrap();
    let report = q.prune(&Retention::default()).unwrap();
    assert_eq!((report.settled, report.acknowledged), (2, 0));
    assert_eq!(preview.deleted(), report.deleted());
    assert!(q.job(done).unwrap().is_none());
    assert!(q.job(cancelled).unwrap().is_none());
    assert!(q.job(pending).unwrap().is_some());
    assert_eq!(q.stats().unwrap().queue("q").total(), 2);
}

#[test]
fn prune_works_in_batches() {
    let q = temp_queue();
    for i in 0..25 {
        q.add(&format!("{i}"));
        q.complete(&q.take("w").token()).unwrap();
    }
    q.advance(Duration::from_secs(8 * 24 * 3600));
    let report = q.prune(&Retention { older_than: Duration::from_secs(3600), batch_size: 10 }).unwrap();
    assert_eq!(report.settled, 25);
    assert!(report.batches >= 3);
}

#[test]
fn stats_count_every_state_per_queue() {
    let q = temp_queue();
    q.add("a");
    q.add("b");
    q.enqueue(NewJob::new("other", b"c".to_vec())).unwrap();
    let job = q.take("w");
    q.advance(LEASE);
    let stats = q.stats().unwrap();
    let s = stats.queue("q");
    assert_eq!((s.pending, s.running, s.expired_leases, s.oldest_pending_run_at), (1, 1, 1, Some(T0)));
    assert_eq!(stats.queue("other").pending, 1);
    assert_eq!(stats.queue("nothing").total(), 0);
    let _ = job;
}

#[test]
fn the_in_memory_queue_works_from_several_threads() {
    let q = fenceq::Queue::open_in_memory().unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let q = q.clone();
            s.spawn(move || {
                for i in 0..25 {
                    q.enqueue(NewJob::new("q", format!("{t}-{i}").into_bytes())).unwrap();
                }
            });
        }
    });
    let mut done = 0;
    while let Some(job) = q.claim("q", "w", LEASE).unwrap() {
        q.complete(&job.token()).unwrap();
        done += 1;
    }
    assert_eq!(done, 100);
}
