//! The history of attempts ([`fenceq::Queue::attempts`]): every attempt that did not complete
//! leaves exactly one record, written with the settle, reap or claim that ended it (a retry, a
//! snooze, a provider's back-off, each kind of exhaustion, an unknown outcome, a park and the
//! expiry of its wait, a lease reaped or reclaimed, on the plain, limited and grouped claims),
//! with its attempt, claim id, worker, start and end on the manual clock, and its error as the
//! job's `last_error` stored it, bounded as that is; a completion leaves none, nor does a refused
//! settle, nor a settle whose caller's write failed; records survive a restart, a replay and a
//! resolution, are read newest first, and are pruned with their job, never before it.

use crate::fixture::{Db, HANG_GUARD, LEASE, T0};
use crate::harness::Harness;
use crate::Rule;
use fenceq::{
    AttemptOutcome, AttemptRecord, BackoffScope, ClaimToken, Claimed, Error, JobId, JobState, Limits, NewJob, Outcome,
    Rate, Resolution, Retention, Retried, RetryPolicy, Snooze, WorkerPool, MAX_BATCH, MAX_ERROR_LEN,
};
use std::time::Duration;

pub(super) fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        a_retry_leaves_one_record_with_its_attempt_worker_times_and_error,
        a_snooze_and_a_provider_backoff_each_leave_one_record,
        every_kind_of_exhaustion_leaves_one_exhausted_record,
        an_unknown_outcome_leaves_one_record,
        a_park_leaves_one_record_and_the_expiry_of_its_wait_a_second,
        a_reaped_lease_leaves_one_lease_expired_record,
        a_reclaimed_lease_leaves_one_record_on_every_kind_of_claim,
        a_completion_leaves_no_record,
        a_refused_settle_leaves_no_record,
        a_settle_whose_write_fails_leaves_no_record,
        the_error_of_a_record_is_bounded_as_last_error_is,
        records_are_pruned_with_their_job_and_never_before,
        replay_and_resolve_keep_the_earlier_records,
        records_come_newest_first_and_the_limit_is_checked,
        a_pool_records_each_attempt_that_did_not_complete,
    ]
}

/// Every record of job `id`, newest first.
fn records<H: Harness>(db: &Db<'_, H>, id: JobId) -> Vec<AttemptRecord> {
    db.attempts(id, MAX_BATCH).unwrap()
}

/// The one record of job `id`; panics unless there is exactly one.
fn only_record<H: Harness>(db: &Db<'_, H>, id: JobId) -> AttemptRecord {
    match &records(db, id)[..] {
        [record] => record.clone(),
        other => panic!("job {id}: one record expected, found {other:?}"),
    }
}

/// What a record of `claimed`'s attempt must say, ended at `ended_at` with `outcome` and the
/// job's last error as it is now.
fn expected<H: Harness>(db: &Db<'_, H>, claimed: &Claimed, outcome: AttemptOutcome, ended_at: i64) -> AttemptRecord {
    let job = db.job(claimed.id()).unwrap().expect("the job exists");
    AttemptRecord {
        attempt: claimed.token.attempt,
        claim_id: claimed.token.claim_id,
        outcome,
        worker: job.worker.clone(),
        started_at: Some(claimed.claimed_at),
        ended_at,
        error: job.last_error,
    }
}

fn a_retry_leaves_one_record_with_its_attempt_worker_times_and_error<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("x");
    let claimed = db.take("worker-1");
    assert_eq!(claimed.claimed_at, T0);
    assert!(records(&db, id).is_empty(), "a claim alone records nothing");
    db.advance(Duration::from_secs(2));
    let retried = db.retry(&claimed.token(), Duration::from_secs(10), "provider answered 502").unwrap();
    assert_eq!(retried, Retried::Scheduled(T0 + 12_000));
    let record = only_record(&db, id);
    let want = AttemptRecord {
        attempt: 1,
        claim_id: claimed.token.claim_id,
        outcome: AttemptOutcome::Retry,
        worker: Some("worker-1".into()),
        started_at: Some(T0),
        ended_at: T0 + 2_000,
        error: Some("provider answered 502".into()),
    };
    assert_eq!(record, want);
    assert_eq!(db.reopen().attempts(id, 10).unwrap(), vec![want], "a record survives a restart");
    db.advance(Duration::from_secs(10));
    let second = db.take("worker-2");
    db.advance(Duration::from_secs(1));
    db.retry(&second.token(), Duration::ZERO, "again").unwrap();
    let all = records(&db, id);
    assert_eq!(all.len(), 2);
    assert_eq!(all[0], expected(&db, &second, AttemptOutcome::Retry, T0 + 13_000));
    assert_eq!((all[0].attempt, all[0].started_at, all[0].worker.as_deref()), (2, Some(T0 + 12_000), Some("worker-2")));
    assert_eq!(all[1].error.as_deref(), Some("provider answered 502"), "the first error is still there");
}

fn a_snooze_and_a_provider_backoff_each_leave_one_record<H: Harness>(h: &H) {
    let db = Db::new(h);
    let plain = db.add("plain");
    let claimed = db.take("w");
    let snooze = Snooze::new(Duration::from_secs(5)).reason("not yet");
    db.snooze(&claimed.token(), snooze).unwrap();
    assert_eq!(only_record(&db, plain), expected(&db, &claimed, AttemptOutcome::Snooze, T0));
    assert_eq!(only_record(&db, plain).error.as_deref(), Some("not yet"));

    let grouped = db.enqueue(NewJob::new("g", b"grouped".to_vec()).group("chat-1")).unwrap().id();
    let claimed = db.claim("g", "w", LEASE).unwrap().unwrap();
    let group_backoff = Snooze::new(Duration::from_secs(5)).scope(BackoffScope::Group).reason("429 for the chat");
    db.snooze(&claimed.token(), group_backoff).unwrap();
    assert_eq!(only_record(&db, grouped), expected(&db, &claimed, AttemptOutcome::Backoff, T0));

    let queued = db.enqueue(NewJob::new("b", b"queued".to_vec())).unwrap().id();
    let claimed = db.claim("b", "w", LEASE).unwrap().unwrap();
    db.advance(Duration::from_millis(250));
    let queue_backoff = Snooze::new(Duration::from_secs(5)).scope(BackoffScope::Queue).reason("429 for the bot");
    db.snooze(&claimed.token(), queue_backoff).unwrap();
    let record = only_record(&db, queued);
    assert_eq!(record, expected(&db, &claimed, AttemptOutcome::Backoff, T0 + 250));
    assert_eq!(record.error.as_deref(), Some("429 for the bot"));
    // The attempt given back is still an attempt of its own: the next claim's record is another.
    db.advance(Duration::from_secs(5));
    let again = db.claim("b", "w", LEASE).unwrap().unwrap();
    assert_eq!(again.token.attempt, 2);
    db.snooze(&again.token(), Snooze::new(Duration::ZERO)).unwrap();
    let all = records(&db, queued);
    assert_eq!(
        all.iter().map(|r| (r.attempt, r.outcome)).collect::<Vec<_>>(),
        [(2, AttemptOutcome::Snooze), (1, AttemptOutcome::Backoff)]
    );
}

fn every_kind_of_exhaustion_leaves_one_exhausted_record<H: Harness>(h: &H) {
    let db = Db::new(h);
    // The handler gives up.
    let given_up = db.add("given up");
    let claimed = db.take("w");
    db.exhaust(&claimed.token(), "bad request").unwrap();
    let record = only_record(&db, given_up);
    assert_eq!(record, expected(&db, &claimed, AttemptOutcome::Exhausted, T0));
    assert_eq!(record.error.as_deref(), Some("bad request"));

    // A retry with no attempt left.
    let last = db.enqueue(NewJob::new("q", b"last".to_vec()).max_attempts(1)).unwrap().id();
    let claimed = db.take("w");
    db.advance(Duration::from_secs(1));
    assert_eq!(db.retry(&claimed.token(), Duration::ZERO, "still failing").unwrap(), Retried::Exhausted);
    let record = only_record(&db, last);
    assert_eq!(record, expected(&db, &claimed, AttemptOutcome::Exhausted, T0 + 1_000));
    assert_eq!(record.error.as_deref(), Some("still failing"));

    // A snooze past its cap.
    let capped = db.add("capped");
    let claimed = db.take("w");
    let snooze = Snooze::new(Duration::ZERO).max_snoozes(0).reason("provider busy");
    assert_eq!(db.snooze(&claimed.token(), snooze).unwrap(), Retried::Exhausted);
    let record = only_record(&db, capped);
    assert_eq!(record, expected(&db, &claimed, AttemptOutcome::Exhausted, T0 + 1_000));
    let error = record.error.unwrap_or_default();
    assert!(error.contains("snoozed 0 times, the cap") && error.contains("provider busy"), "{error}");
}

fn an_unknown_outcome_leaves_one_record<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("x");
    let claimed = db.take("w");
    db.advance(Duration::from_secs(3));
    db.mark_unknown(&claimed.token(), "timeout after send").unwrap();
    let record = only_record(&db, id);
    assert_eq!(record, expected(&db, &claimed, AttemptOutcome::Unknown, T0 + 3_000));
    assert_eq!(record.error.as_deref(), Some("timeout after send"));
}

fn a_park_leaves_one_record_and_the_expiry_of_its_wait_a_second<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("x");
    let claimed = db.take("w");
    db.advance(Duration::from_secs(1));
    db.park(&claimed.token(), Duration::from_secs(60), "awaiting approval").unwrap();
    let parked = only_record(&db, id);
    assert_eq!(parked, expected(&db, &claimed, AttemptOutcome::Parked, T0 + 1_000));
    assert_eq!(parked.error.as_deref(), Some("awaiting approval"));
    db.advance(Duration::from_secs(59));
    assert_eq!(db.reap().unwrap().waits_expired, 0, "not before the deadline");
    db.advance(Duration::from_secs(1));
    assert_eq!(db.reap().unwrap().waits_expired, 1);
    let all = records(&db, id);
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[0], expected(&db, &claimed, AttemptOutcome::WaitExpired, T0 + 61_000));
    assert_eq!(all[0].error.as_deref(), Some("wait expired: awaiting approval"));
    assert_eq!(all[1], parked, "the park's own record is kept as it was");

    // A resumed park ends its wait without a record; the attempt after it is a new one.
    let resumed = db.add("y");
    let claimed = db.take("w");
    db.park(&claimed.token(), Duration::from_secs(60), "awaiting approval").unwrap();
    db.resume(&claimed.token()).unwrap();
    assert_eq!(only_record(&db, resumed).outcome, AttemptOutcome::Parked);
}

fn a_reaped_lease_leaves_one_lease_expired_record<H: Harness>(h: &H) {
    let db = Db::new(h);
    let requeued = db.add("requeued");
    let first = db.take("w-1");
    let exhausted = db.enqueue(NewJob::new("q", b"last".to_vec()).max_attempts(1)).unwrap().id();
    let last = db.take("w-2");
    db.advance(LEASE + Duration::from_secs(5));
    let report = db.reap().unwrap();
    assert_eq!((report.requeued, report.exhausted), (1, 1));
    let reaped_at = T0 + 35_000;
    let record = only_record(&db, requeued);
    assert_eq!(record, expected(&db, &first, AttemptOutcome::LeaseExpired, reaped_at));
    assert_eq!(record.error.as_deref(), Some("lease expired (worker w-1)"));
    let record = only_record(&db, exhausted);
    assert_eq!(record, expected(&db, &last, AttemptOutcome::LeaseExpired, reaped_at));
    assert_eq!(db.job(exhausted).unwrap().unwrap().state, JobState::Exhausted);
    assert_eq!(db.reap().unwrap().total(), 0);
    assert_eq!(records(&db, requeued).len(), 1, "a second pass records nothing");
}

fn a_reclaimed_lease_leaves_one_record_on_every_kind_of_claim<H: Harness>(h: &H) {
    let db = Db::new(h);
    let rate = Rate::new(1_000, Duration::from_secs(1));
    let limited = Limits { rate: Some(rate), ..Limits::default() };
    let grouped = Limits { group_rates: vec![rate], ..Limits::default() };
    db.set_limits("limited", &limited).unwrap();
    db.set_limits("grouped", &grouped).unwrap();
    let mut taken = Vec::new();
    for queue in ["plain", "limited", "grouped"] {
        let id = db.enqueue(NewJob::new(queue, b"x".to_vec()).group("chat-1")).unwrap().id();
        taken.push((queue, id, db.claim(queue, "old", LEASE).unwrap().expect("claimable")));
    }
    db.advance(LEASE);
    for (queue, id, old) in &taken {
        let old_record = expected(&db, old, AttemptOutcome::LeaseExpired, T0 + 30_000);
        let new = if *queue == "plain" {
            db.claim_batch(queue, "new", LEASE, 4).unwrap().pop().expect("reclaimable")
        } else {
            db.claim(queue, "new", LEASE).unwrap().expect("reclaimable")
        };
        assert_eq!((new.id(), new.token.attempt), (*id, 2), "{queue}");
        let record = only_record(&db, *id);
        assert_eq!(record, AttemptRecord { error: Some("lease expired (worker old)".into()), ..old_record }, "{queue}");
        db.complete(&new.token()).unwrap();
        assert_eq!(records(&db, *id).len(), 1, "{queue}: the reclaiming attempt's completion records nothing");
    }
    assert_eq!(db.reap().unwrap().total(), 0, "nothing left for the reaper");
}

fn a_completion_leaves_no_record<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.create_replies();
    let ids: Vec<JobId> = (0..4).map(|i| db.add(&format!("job {i}"))).collect();
    let one = db.take("w");
    db.complete(&one.token()).unwrap();
    let two: Vec<ClaimToken> = db.claim_batch("q", "w", LEASE, 2).unwrap().iter().map(Claimed::token).collect();
    assert!(db.complete_all(&two).unwrap().iter().all(Result::is_ok));
    let four = db.take("w");
    db.complete_with(&four.token(), |tx| H::insert_reply(tx, four.id().0, 1, "done")).unwrap();
    for id in ids {
        assert_eq!(db.job(id).unwrap().unwrap().state, JobState::Completed);
        assert!(records(&db, id).is_empty(), "job {id}");
    }
}

fn a_refused_settle_leaves_no_record<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.create_replies();
    let id = db.add("x");
    let stale = db.take("w").token();
    db.advance(LEASE);
    // Expired, not yet reclaimed: every settle is refused and records nothing.
    let lost = |result: fenceq::Result<()>, call: &str| {
        assert!(matches!(result, Err(Error::OwnershipLost { .. })), "{call}: {result:?}");
    };
    lost(db.retry(&stale, Duration::ZERO, "late").map(drop), "retry after expiry");
    assert!(records(&db, id).is_empty(), "a refused retry records nothing");
    let fresh = db.take("w");
    assert_eq!(records(&db, id).len(), 1, "the reclaim recorded the expired attempt once");
    lost(db.retry(&stale, Duration::ZERO, "stale").map(drop), "retry");
    lost(db.exhaust(&stale, "stale"), "exhaust");
    lost(db.mark_unknown(&stale, "stale"), "mark_unknown");
    lost(db.park(&stale, Duration::from_secs(60), "stale"), "park");
    lost(db.snooze(&stale, Snooze::new(Duration::ZERO)).map(drop), "snooze");
    lost(
        db.retry_with(&stale, Duration::ZERO, "stale", |tx| H::insert_reply(tx, id.0, 1, "stale")).map(drop),
        "retry_with",
    );
    let forged = ClaimToken { attempt: fresh.token.attempt, ..stale };
    lost(db.exhaust(&forged, "forged"), "exhaust with another claim id");
    assert_eq!(records(&db, id).len(), 1, "no refused settle recorded anything");
    assert!(db.replies().is_empty());
    db.complete(&fresh.token()).unwrap();
    lost(db.retry(&fresh.token(), Duration::ZERO, "after the completion").map(drop), "retry of a completed job");
    assert_eq!(records(&db, id).len(), 1);
}

fn a_settle_whose_write_fails_leaves_no_record<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.create_replies();
    let id = db.add("x");
    let claimed = db.take("w");
    let failed = db.retry_with(&claimed.token(), Duration::ZERO, "502", |_| -> fenceq::Result<()> {
        Err(Error::domain("the application's write failed"))
    });
    assert!(failed.is_err());
    assert!(records(&db, id).is_empty(), "the record rolled back with the write");
    assert_eq!(db.job(id).unwrap().unwrap().state, JobState::Running);
    db.retry_with(&claimed.token(), Duration::ZERO, "502", |tx| H::insert_reply(tx, id.0, 1, "502")).unwrap();
    assert_eq!(only_record(&db, id), expected(&db, &claimed, AttemptOutcome::Retry, T0));
    assert_eq!(db.replies(), [(id.0, 1, "502".to_string())]);
}

fn the_error_of_a_record_is_bounded_as_last_error_is<H: Harness>(h: &H) {
    let db = Db::new(h);
    let long = format!("a\0b{}", "é".repeat(MAX_ERROR_LEN));
    for (payload, settle) in [("retry", 0), ("exhaust", 1), ("unknown", 2)] {
        let id = db.add(payload);
        let claimed = db.take("w");
        match settle {
            0 => drop(db.retry(&claimed.token(), Duration::from_secs(3600), &long).unwrap()),
            1 => db.exhaust(&claimed.token(), &long).unwrap(),
            _ => db.mark_unknown(&claimed.token(), &long).unwrap(),
        }
        let record = only_record(&db, id);
        let error = record.error.clone().unwrap_or_default();
        assert!(error.len() <= MAX_ERROR_LEN, "{payload}: {} bytes", error.len());
        let start: String = error.chars().take(4).collect();
        assert_eq!(start, format!("a{}bé", fenceq::NUL_SHOWN_AS), "{payload}");
        assert!(!error.contains('\0'), "{payload}");
        assert_eq!(record.error, db.job(id).unwrap().unwrap().last_error, "{payload}: as last_error");
    }
}

fn records_are_pruned_with_their_job_and_never_before<H: Harness>(h: &H) {
    let db = Db::new(h);
    let day = Duration::from_secs(24 * 3600);
    let retention = Retention { older_than: 7 * day, ..Retention::default() };
    // Completed after a retry, acknowledged after an exhaustion, exhausted unacknowledged,
    // unknown, and waiting: each with one record.
    let completed = db.add("completed");
    db.retry(&db.take("w").token(), Duration::ZERO, "first try").unwrap();
    db.complete(&db.take("w").token()).unwrap();
    let acknowledged = db.enqueue(NewJob::new("q", b"acknowledged".to_vec()).max_attempts(1)).unwrap().id();
    let token = db.take("w").token();
    db.exhaust(&token, "gave up").unwrap();
    db.acknowledge(&token).unwrap();
    let unacknowledged = db.enqueue(NewJob::new("q", b"unacknowledged".to_vec()).max_attempts(1)).unwrap().id();
    db.exhaust(&db.take("w").token(), "gave up").unwrap();
    let unknown = db.add("unknown");
    db.mark_unknown(&db.take("w").token(), "maybe sent").unwrap();
    let waiting = db.add("waiting");
    db.park(&db.take("w").token(), 364 * day, "approval").unwrap();
    let all = [completed, acknowledged, unacknowledged, unknown, waiting];
    for id in all {
        assert_eq!(records(&db, id).len(), 1, "job {id}");
    }
    db.advance(7 * day - Duration::from_millis(1));
    let report = db.prune(&retention).unwrap();
    assert_eq!((report.settled, report.acknowledged), (0, 0), "nothing is old enough yet");
    for id in all {
        assert_eq!(records(&db, id).len(), 1, "job {id}: kept with its job");
    }
    db.advance(Duration::from_millis(1));
    let report = db.prune(&retention).unwrap();
    assert_eq!((report.settled, report.acknowledged), (1, 1));
    for id in [completed, acknowledged] {
        assert!(db.job(id).unwrap().is_none(), "job {id} pruned");
        assert!(records(&db, id).is_empty(), "job {id}: its records went with it");
    }
    for id in [unacknowledged, unknown, waiting] {
        assert!(db.job(id).unwrap().is_some(), "job {id} kept");
        assert_eq!(records(&db, id).len(), 1, "job {id}: its record is kept with it");
    }
    // A pruned key enqueued again is a new job with a history of its own.
    let again = db.add("completed again");
    assert!(records(&db, again).is_empty());
}

fn replay_and_resolve_keep_the_earlier_records<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(1)).unwrap().id();
    let first = db.take("w");
    db.exhaust(&first.token(), "first life").unwrap();
    db.replay(id).unwrap();
    db.advance(Duration::from_secs(1));
    let second = db.take("w");
    assert_eq!(second.token.attempt, 1, "a replay starts the attempts again");
    db.mark_unknown(&second.token(), "maybe").unwrap();
    db.resolve(&second.token(), Resolution::Retry).unwrap();
    db.advance(Duration::from_secs(1));
    let third = db.take("w");
    // The resolution granted the one attempt it ran: its retry finds none left.
    assert_eq!(db.retry(&third.token(), Duration::ZERO, "after the resolution").unwrap(), Retried::Exhausted);
    let all = records(&db, id);
    let seen: Vec<(u32, AttemptOutcome, Option<&str>)> =
        all.iter().map(|r| (r.attempt, r.outcome, r.error.as_deref())).collect();
    assert_eq!(
        seen,
        [
            (2, AttemptOutcome::Exhausted, Some("after the resolution")),
            (1, AttemptOutcome::Unknown, Some("maybe")),
            (1, AttemptOutcome::Exhausted, Some("first life")),
        ]
    );
    assert_ne!(all[1].claim_id, all[2].claim_id, "two lives' first attempts are told apart by their claims");
    assert_eq!(
        (all[2].started_at, all[1].started_at, all[0].started_at),
        (Some(T0), Some(T0 + 1_000), Some(T0 + 2_000))
    );
}

fn records_come_newest_first_and_the_limit_is_checked<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(5)).unwrap().id();
    // Each attempt is claimed at `claim` and fails at `end`: the third ends before the second
    // (the clock stepped back), and still comes first, as the newest.
    for (attempt, claim, end) in [(1, 0, 0), (2, 10_000, 5_000), (3, 20_000, 1_000)] {
        db.clock.set(T0 + claim);
        let token = db.take("w").token();
        db.clock.set(T0 + end);
        db.retry(&token, Duration::ZERO, &format!("failure {attempt}")).unwrap();
    }
    let newest: Vec<(u32, i64)> = db.attempts(id, 2).unwrap().iter().map(|r| (r.attempt, r.ended_at - T0)).collect();
    assert_eq!(newest, [(3, 1_000), (2, 5_000)]);
    assert_eq!(records(&db, id).iter().map(|r| r.attempt).collect::<Vec<_>>(), [3, 2, 1]);
    for limit in [0, MAX_BATCH + 1] {
        assert!(matches!(db.attempts(id, limit), Err(Error::InvalidInput { .. })), "limit {limit}");
    }
    assert!(db.attempts(JobId(987_654), 10).unwrap().is_empty(), "no row, no records");
}

fn a_pool_records_each_attempt_that_did_not_complete<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(5)).unwrap().id();
    let (done_tx, done) = crossbeam_channel::bounded(1);
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(1)
        .retry_policy(RetryPolicy { base: Duration::ZERO, max: Duration::ZERO, jitter: 0.0 })
        .handler(move |a| match a.attempt() {
            1 => panic!("boom at attempt one"),
            2 => Outcome::retry("flaky provider"),
            3 => Outcome::provider_backoff(Duration::ZERO, BackoffScope::Job),
            _ => {
                done_tx.send(()).unwrap();
                Outcome::Complete
            }
        })
        .start()
        .unwrap();
    done.recv_timeout(HANG_GUARD).expect("the fourth attempt");
    pool.shutdown(HANG_GUARD).unwrap();
    assert_eq!(db.job(id).unwrap().unwrap().state, JobState::Completed);
    let all = records(&db, id);
    let seen: Vec<(u32, AttemptOutcome)> = all.iter().map(|r| (r.attempt, r.outcome)).collect();
    assert_eq!(seen, [(3, AttemptOutcome::Snooze), (2, AttemptOutcome::Retry), (1, AttemptOutcome::Retry)]);
    assert_eq!(all[1].error.as_deref(), Some("flaky provider"));
    assert_eq!(all[2].error.as_deref(), Some("handler panicked: boom at attempt one"));
    assert!(all.iter().all(|r| r.worker.as_deref().is_some_and(|w| !w.is_empty())), "{all:?}");
    assert!(all.iter().all(|r| (r.started_at, r.ended_at) == (Some(T0), T0)), "the manual clock stood still: {all:?}");
}
