//! Snoozes and provider back-off, for every store: a snooze puts the claim back without
//! spending an attempt (the next claim is a new attempt, the snoozed token is dead), counts
//! against a cap past which the job is exhausted with a reason that says so; a queue-scoped
//! back-off closes the queue for every handle until its instant (the store's clock), keeps
//! the latest instant asked for, shows in `stats`, and an operator can lift it early (the lift
//! recorded: who, when, why, and the back-off's reason). A
//! worker pool's handler that returns `RetryAfter { scope: Queue }` is not called again
//! before the instant.

use crate::fixture::{Db, HANG_GUARD, LEASE, T0};
use crate::harness::Harness;
use crate::Rule;
use fenceq::{
    BackoffScope, Error, GroupPolicy, JobId, JobState, Limits, NewJob, Outcome, Rate, Retried, Snooze, WorkerPool,
    MAX_SNOOZE,
};
use std::sync::mpsc;
use std::time::Duration;

/// Every rule of snoozes and back-off.
pub fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        a_snooze_gives_the_attempt_back_and_counts_itself,
        a_token_snoozed_away_cannot_settle_or_write,
        past_the_snooze_cap_the_job_is_exhausted_with_the_reason,
        a_queue_backoff_closes_the_queue_for_every_handle_until_its_instant,
        the_latest_queue_backoff_wins_and_other_queues_are_not_affected,
        clear_backoff_reopens_the_queue_at_once,
        a_lift_records_who_lifted_the_backoff_when_and_why,
        a_queue_backoff_keeps_when_it_was_set_while_limits_and_the_group_policy_change,
        a_group_scoped_backoff_of_an_ungrouped_job_is_a_snooze_of_the_job,
        a_delay_beyond_a_year_and_bad_names_are_refused_and_change_nothing,
        a_replay_starts_the_snooze_count_again,
        a_pool_handler_backing_off_the_queue_is_not_called_again_before_the_instant,
        a_pool_handler_records_a_429_and_backs_the_queue_off_in_one_transaction,
        a_pool_exhausts_a_job_past_its_snooze_cap_and_a_snooze_beyond_a_year,
    ]
}

fn job<H: Harness>(db: &Db<'_, H>, id: JobId) -> fenceq::Job {
    db.job(id).unwrap().expect("the job exists")
}

fn a_snooze_gives_the_attempt_back_and_counts_itself<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(3)).unwrap().id();
    let left = |j: &fenceq::Job| j.max_attempts - j.attempt;
    let before = left(&job(&db, id));
    let claimed = db.take("w");
    let snoozed = db.snooze(&claimed.token(), Snooze::new(Duration::from_secs(10)).reason("not yet")).unwrap();
    assert_eq!(snoozed, Retried::Scheduled(T0 + 10_000));
    let j = job(&db, id);
    assert_eq!((j.state, j.run_at, j.snoozes), (JobState::Pending, T0 + 10_000, 1));
    assert_eq!(left(&j), before, "no attempt spent: {j:?}");
    assert_eq!(j.attempt, 1, "the counter is never lowered");
    assert_eq!(j.last_error.as_deref(), Some("not yet"));
    assert!(j.lease_until.is_none());
    assert!(db.stats().unwrap().queue("q").backoff.is_none(), "a job's snooze backs off nothing else");
    db.advance(Duration::from_millis(9_999));
    assert!(db.claim("q", "w", LEASE).unwrap().is_none(), "not before its instant");
    db.advance(Duration::from_millis(1));
    let again = db.take("w");
    assert_eq!(again.token().attempt, 2, "the next claim is a new attempt");
    assert_ne!(again.token().claim_id, claimed.token().claim_id);
    assert_eq!(again.max_attempts, 4);
    // A zero delay puts it back due at once.
    assert_eq!(db.snooze(&again.token(), Snooze::new(Duration::ZERO)).unwrap(), Retried::Scheduled(T0 + 10_000));
    let j = job(&db, id);
    assert_eq!((j.snoozes, left(&j)), (2, before));
    db.complete(&db.take("w").token()).unwrap();
    assert_eq!(job(&db, id).state, JobState::Completed);
}

fn a_token_snoozed_away_cannot_settle_or_write<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.create_replies();
    let id = db.add("x");
    let stale = db.take("w").token();
    db.snooze(&stale, Snooze::new(Duration::ZERO)).unwrap();
    let lost = |result: fenceq::Result<()>, call: &str| {
        assert!(matches!(result, Err(Error::OwnershipLost { .. })), "{call}: {result:?}");
    };
    lost(db.complete(&stale), "complete");
    lost(db.snooze(&stale, Snooze::new(Duration::ZERO)).map(drop), "snooze");
    lost(db.retry(&stale, Duration::ZERO, "e").map(drop), "retry");
    lost(db.with_ownership(&stale, |tx| H::insert_reply(tx, id.0, 1, "stale")), "with_ownership");
    let fresh = db.take("w");
    lost(db.complete(&stale), "complete after the reclaim");
    lost(db.exhaust(&stale, "e"), "exhaust after the reclaim");
    lost(db.renew(&stale, LEASE).map(drop), "renew after the reclaim");
    assert!(db.replies().is_empty());
    let j = job(&db, id);
    assert_eq!((j.state, j.snoozes, j.attempt), (JobState::Running, 1, 2));
    db.complete(&fresh.token()).unwrap();
}

fn past_the_snooze_cap_the_job_is_exhausted_with_the_reason<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("x");
    let cap = |token| db.snooze(&token, Snooze::new(Duration::ZERO).max_snoozes(2).reason("provider busy"));
    assert!(matches!(cap(db.take("w").token()).unwrap(), Retried::Scheduled(_)));
    assert!(matches!(cap(db.take("w").token()).unwrap(), Retried::Scheduled(_)));
    let third = db.take("w").token();
    assert_eq!(cap(third).unwrap(), Retried::Exhausted);
    let j = job(&db, id);
    assert_eq!((j.state, j.snoozes), (JobState::Exhausted, 2));
    let reason = j.last_error.clone().unwrap_or_default();
    assert!(reason.contains("snoozed 2 times, the cap"), "{reason}");
    assert!(reason.contains("provider busy"), "{reason}");
    let page = db.exhaustions(None, 10).unwrap();
    assert_eq!(page.items.iter().map(|e| e.token).collect::<Vec<_>>(), vec![third], "a durable exhaustion");
    db.acknowledge(&third).unwrap();
    // A cap of 0 exhausts at the first snooze.
    let other = db.add("y");
    let token = db.take("w").token();
    assert_eq!(db.snooze(&token, Snooze::new(Duration::ZERO).max_snoozes(0)).unwrap(), Retried::Exhausted);
    let j = job(&db, other);
    assert_eq!((j.state, j.snoozes), (JobState::Exhausted, 0));
    assert!(j.last_error.unwrap_or_default().contains("snoozed 0 times, the cap"));
}

fn a_queue_backoff_closes_the_queue_for_every_handle_until_its_instant<H: Harness>(h: &H) {
    let db = Db::new(h);
    let other = db.reopen();
    let first = db.enqueue(NewJob::new("q", b"first".to_vec()).max_attempts(3)).unwrap().id();
    let second = db.add("second");
    let token = db.take("w").token();
    assert_eq!(token.id, first);
    let snooze = Snooze::new(Duration::from_secs(60)).scope(BackoffScope::Queue).reason("429: retry after 60");
    assert_eq!(db.snooze(&token, snooze).unwrap(), Retried::Scheduled(T0 + 60_000));
    for handle in [&db.queue, &other] {
        let backoff = handle.queue_backoff("q").unwrap().expect("the queue backs off");
        assert_eq!((backoff.until, backoff.reason.as_str(), backoff.since), (T0 + 60_000, "429: retry after 60", T0));
        assert!(handle.claim("q", "w2", LEASE).unwrap().is_none(), "no claim hands anything out");
        assert!(handle.claim_batch("q", "w2", LEASE, 10).unwrap().is_empty());
    }
    let stats = db.stats().unwrap().queue("q");
    assert_eq!(stats.backoff.map(|b| b.until), Some(T0 + 60_000));
    assert_eq!(other.queue_backoffs().unwrap().len(), 1);
    let gauge = |seconds: &str| format!("fenceq_queue_backoff_seconds{{queue=\"q\"}} {seconds}\n");
    assert!(db.metrics_text().unwrap().contains(&gauge("60")));
    db.advance(Duration::from_millis(59_999));
    assert!(other.claim("q", "w2", LEASE).unwrap().is_none(), "not even 1 ms before the instant");
    assert!(db.metrics_text().unwrap().contains(&gauge("0.001")));
    db.advance(Duration::from_millis(1));
    assert!(db.queue_backoff("q").unwrap().is_none(), "over at its instant");
    assert!(db.stats().unwrap().queue("q").backoff.is_none());
    assert!(db.metrics_text().unwrap().contains(&gauge("0")));
    let claims = other.claim_batch("q", "w2", LEASE, 10).unwrap();
    assert_eq!(claims.iter().map(|c| c.id()).collect::<Vec<_>>(), vec![second, first], "run_at, then id");
    assert_eq!(claims[0].token().attempt, 1, "the waiting job spent nothing");
    assert_eq!((claims[1].token().attempt, claims[1].max_attempts), (2, 4), "nor did the snoozed one");
}

fn the_latest_queue_backoff_wins_and_other_queues_are_not_affected<H: Harness>(h: &H) {
    let db = Db::new(h);
    for _ in 0..3 {
        db.add("x");
    }
    db.enqueue(NewJob::new("other", b"o".to_vec())).unwrap();
    let back_off = |secs: u64, reason: &str| {
        let token = db.take("w").token();
        db.snooze(&token, Snooze::new(Duration::from_secs(secs)).scope(BackoffScope::Queue).reason(reason)).unwrap();
    };
    let claims = db.claim_batch("q", "w", LEASE, 3).unwrap();
    let snooze = |n: usize, secs: u64, reason: &str| {
        let s = Snooze::new(Duration::from_secs(secs)).scope(BackoffScope::Queue).reason(reason);
        db.snooze(&claims[n].token(), s).unwrap();
    };
    snooze(0, 30, "thirty");
    snooze(1, 90, "ninety");
    snooze(2, 10, "ten");
    let backoff = db.queue_backoff("q").unwrap().unwrap();
    assert_eq!((backoff.until, backoff.reason.as_str()), (T0 + 90_000, "ninety"), "an earlier end never shortens it");
    assert!(db.queue_backoff("other").unwrap().is_none());
    assert!(db.claim("other", "w", LEASE).unwrap().is_some(), "other queues claim as usual");
    db.advance(Duration::from_secs(89));
    assert!(db.claim("q", "w", LEASE).unwrap().is_none());
    db.advance(Duration::from_secs(1));
    back_off(5, "again");
    assert_eq!(db.queue_backoff("q").unwrap().map(|b| b.until), Some(T0 + 95_000), "an ended back-off is replaced");
}

fn clear_backoff_reopens_the_queue_at_once<H: Harness>(h: &H) {
    let db = Db::new(h);
    let other = db.reopen();
    let first = db.add("first");
    let second = db.add("second");
    let token = db.take("w").token();
    db.snooze(&token, Snooze::new(Duration::from_secs(3600)).scope(BackoffScope::Queue)).unwrap();
    assert!(db.claim("q", "w", LEASE).unwrap().is_none());
    assert!(other.clear_backoff("q").unwrap(), "it was backing off");
    assert!(!db.clear_backoff("q").unwrap(), "nothing left to clear");
    assert!(!db.clear_backoff("never-seen").unwrap());
    assert!(db.queue_backoff("q").unwrap().is_none());
    let claimed = db.claim("q", "w", LEASE).unwrap().expect("due at once");
    assert_eq!(claimed.id(), second);
    db.complete(&claimed.token()).unwrap();
    // The snoozed job keeps its own instant: only the queue's back-off was lifted.
    assert!(db.claim("q", "w", LEASE).unwrap().is_none());
    db.advance(Duration::from_secs(3600));
    assert_eq!(db.claim("q", "w", LEASE).unwrap().map(|c| c.id()), Some(first));
}

fn a_lift_records_who_lifted_the_backoff_when_and_why<H: Harness>(h: &H) {
    let db = Db::new(h);
    let other = db.reopen();
    for payload in ["x", "y", "z", "w"] {
        db.add(payload);
    }
    assert_eq!(db.last_backoff_lift("q").unwrap(), None, "nothing lifted yet");
    let token = db.take("w").token();
    db.snooze(&token, Snooze::new(Duration::from_secs(600)).scope(BackoffScope::Queue).reason("429")).unwrap();
    db.advance(Duration::from_secs(5));
    // Refused input changes nothing: the back-off lasts and no lift is recorded.
    assert!(matches!(db.operator("").clear_backoff("q"), Err(Error::InvalidInput { .. })));
    assert!(matches!(db.operator("alice").note("n".repeat(5000)).clear_backoff("q"), Err(Error::InvalidInput { .. })));
    assert!(db.queue_backoff("q").unwrap().is_some());
    assert_eq!(db.last_backoff_lift("q").unwrap(), None);
    assert!(db.operator("alice").note("provider recovered").clear_backoff("q").unwrap());
    let lift = fenceq::BackoffLift {
        queue: "q".into(),
        at: T0 + 5_000,
        by: Some("alice".into()),
        note: Some("provider recovered".into()),
        reason: "429".into(),
    };
    assert_eq!(other.last_backoff_lift("q").unwrap(), Some(lift.clone()), "seen by every handle");
    let claimed = db.claim("q", "w", LEASE).unwrap().expect("claimable at once");
    db.complete(&claimed.token()).unwrap();
    // A clear that lifts nothing records nothing; a back-off that ends by itself neither.
    assert!(!db.operator("bob").clear_backoff("q").unwrap());
    let token = db.take("w").token();
    db.snooze(&token, Snooze::new(Duration::from_secs(1)).scope(BackoffScope::Queue).reason("503")).unwrap();
    db.advance(Duration::from_secs(2));
    assert!(!db.clear_backoff("q").unwrap());
    assert_eq!(db.last_backoff_lift("q").unwrap(), Some(lift));
    assert_eq!(db.last_backoff_lift("other").unwrap(), None);
    // An unnamed lift replaces the last one.
    let token = db.take("w").token();
    db.snooze(&token, Snooze::new(Duration::from_secs(60)).scope(BackoffScope::Queue).reason("slow down")).unwrap();
    assert!(db.clear_backoff("q").unwrap());
    let unnamed = db.last_backoff_lift("q").unwrap().expect("recorded");
    assert_eq!((unnamed.by, unnamed.note, unnamed.reason.as_str()), (None, None, "slow down"));
    assert!(matches!(db.last_backoff_lift(""), Err(Error::InvalidInput { .. })));
}

/// Found by the reference model: a back-off's `since` (when it was last set) was the queue's
/// flow-control row's `updated_at`, which setting the queue's limits or its group policy also
/// moves; the back-off then reported a later `since` than the snooze that set it.
fn a_queue_backoff_keeps_when_it_was_set_while_limits_and_the_group_policy_change<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.add("x");
    let token = db.take("w").token();
    db.snooze(&token, Snooze::new(Duration::from_secs(60)).scope(BackoffScope::Queue).reason("429")).unwrap();
    let since = || {
        let one = db.queue_backoff("q").unwrap().expect("backing off").since;
        let all: Vec<i64> = db.queue_backoffs().unwrap().iter().map(|b| b.since).collect();
        let stats = db.stats().unwrap().queue("q").backoff.map(|b| b.since);
        (one, all, stats)
    };
    assert_eq!(since(), (T0, vec![T0], Some(T0)));
    db.advance(Duration::from_secs(1));
    db.set_limits("q", &Limits { rate: Some(Rate::new(5, Duration::from_secs(1))), ..Limits::default() }).unwrap();
    assert_eq!(since(), (T0, vec![T0], Some(T0)), "setting limits does not set the back-off");
    db.advance(Duration::from_secs(1));
    db.set_group_policy("q", GroupPolicy::ContinueAfterFailure).unwrap();
    db.clear_limits("q").unwrap();
    assert_eq!(since(), (T0, vec![T0], Some(T0)), "nor does the group policy, nor clearing limits");
    db.advance(Duration::from_secs(58));
    assert!(db.queue_backoff("q").unwrap().is_none(), "over at its instant");
    let token = db.take("w").token();
    db.snooze(&token, Snooze::new(Duration::from_secs(60)).scope(BackoffScope::Queue).reason("again")).unwrap();
    assert_eq!(since().0, T0 + 60_000, "a back-off set again is set at its own instant");
}

fn a_group_scoped_backoff_of_an_ungrouped_job_is_a_snooze_of_the_job<H: Harness>(h: &H) {
    let db = Db::new(h);
    let first = db.add("first");
    let second = db.add("second");
    let token = db.take("w").token();
    assert_eq!(token.id, first);
    let snooze = Snooze::new(Duration::from_secs(60)).scope(BackoffScope::Group);
    assert_eq!(db.snooze(&token, snooze).unwrap(), Retried::Scheduled(T0 + 60_000));
    assert!(db.queue_backoff("q").unwrap().is_none(), "no queue back-off");
    assert_eq!(db.claim("q", "w", LEASE).unwrap().map(|c| c.id()), Some(second));
    assert_eq!(job(&db, first).snoozes, 1);
}

fn a_delay_beyond_a_year_and_bad_names_are_refused_and_change_nothing<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.add("x");
    let token = db.take("w").token();
    let before = db.snapshot();
    for delay in [MAX_SNOOZE + Duration::from_millis(1), Duration::from_secs(u64::MAX), Duration::MAX] {
        for scope in [BackoffScope::Job, BackoffScope::Queue] {
            let result = db.snooze(&token, Snooze::new(delay).scope(scope));
            assert!(matches!(result, Err(Error::InvalidInput { .. })), "{delay:?}: {result:?}");
        }
    }
    assert_eq!(db.snapshot(), before, "nothing changed");
    assert!(db.queue_backoffs().unwrap().is_empty());
    let long = "x".repeat(129);
    for name in ["", long.as_str(), "a\0b"] {
        assert!(matches!(db.queue_backoff(name), Err(Error::InvalidInput { what: "queue name", .. })), "{name:?}");
        assert!(matches!(db.clear_backoff(name), Err(Error::InvalidInput { what: "queue name", .. })), "{name:?}");
    }
    // The longest delay is a year, to the ms.
    let snoozed = db.snooze(&token, Snooze::new(MAX_SNOOZE).scope(BackoffScope::Queue)).unwrap();
    let year_ms = MAX_SNOOZE.as_millis() as i64;
    assert_eq!(snoozed, Retried::Scheduled(T0 + year_ms));
    assert_eq!(db.queue_backoff("q").unwrap().map(|b| b.until), Some(T0 + year_ms));
}

fn a_replay_starts_the_snooze_count_again<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("x");
    let token = db.take("w").token();
    db.snooze(&token, Snooze::new(Duration::ZERO).max_snoozes(1)).unwrap();
    let token = db.take("w").token();
    assert_eq!(db.snooze(&token, Snooze::new(Duration::ZERO).max_snoozes(1)).unwrap(), Retried::Exhausted);
    assert_eq!(job(&db, id).snoozes, 1);
    db.replay(id).unwrap();
    assert_eq!(job(&db, id).snoozes, 0);
    let token = db.take("w").token();
    assert!(matches!(db.snooze(&token, Snooze::new(Duration::ZERO).max_snoozes(1)).unwrap(), Retried::Scheduled(_)));
}

/// One worker, no prefetch. The handler backs the queue off for 60 s on the first job's
/// first attempt. Until the clock reaches the instant, the pool (polling every 20 ms) claims
/// nothing, the second job included; once it does, both run, the second first (it was due
/// earlier), and the snoozed job's attempt was given back.
fn a_pool_handler_backing_off_the_queue_is_not_called_again_before_the_instant<H: Harness>(h: &H) {
    let db = Db::new(h);
    let first = db.add("first");
    let second = db.add("second");
    let (started_tx, started) = mpsc::channel::<(JobId, u32)>();
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(1)
        .prefetch(0)
        .poll_interval(Duration::from_millis(20))
        .handler(move |attempt| {
            let (id, n) = (attempt.token().id, attempt.attempt());
            started_tx.send((id, n)).unwrap();
            if (id, n) == (first, 1) {
                Outcome::provider_backoff(Duration::from_secs(60), BackoffScope::Queue)
            } else {
                Outcome::Complete
            }
        })
        .start()
        .unwrap();
    assert_eq!(started.recv_timeout(HANG_GUARD), Ok((first, 1)));
    // Idle: the snoozed job is not due, and the queue's back-off holds the second back.
    assert!(pool.wait_idle(HANG_GUARD).unwrap());
    assert_eq!(db.queue_backoff("q").unwrap().map(|b| b.until), Some(T0 + 60_000));
    db.advance(Duration::from_millis(59_999));
    // Several polls at 1 ms before the instant: the handler is not called.
    assert_eq!(started.recv_timeout(Duration::from_millis(200)), Err(mpsc::RecvTimeoutError::Timeout));
    db.advance(Duration::from_millis(1));
    assert_eq!(started.recv_timeout(HANG_GUARD), Ok((second, 1)));
    assert_eq!(started.recv_timeout(HANG_GUARD), Ok((first, 2)));
    assert!(pool.wait_idle(HANG_GUARD).unwrap());
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert_eq!((report.counters.snoozed, report.counters.completed, report.counters.claimed), (1, 2, 3));
    let j = job(&db, first);
    assert_eq!(
        (j.state, j.snoozes, j.max_attempts - j.attempt),
        (JobState::Completed, 1, job(&db, second).max_attempts - 1)
    );
}

/// `Attempt::settle_with`: the handler's record of the 429 and the queue's back-off commit
/// together; the pool counts the attempt as snoozed and settles nothing more; no other job
/// starts before the instant.
fn a_pool_handler_records_a_429_and_backs_the_queue_off_in_one_transaction<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.create_replies();
    let first = db.add("first");
    db.add("second");
    let (started_tx, started) = mpsc::channel::<JobId>();
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(1)
        .prefetch(0)
        .poll_interval(Duration::from_millis(20))
        .handler(move |attempt| {
            let id = attempt.token().id;
            started_tx.send(id).unwrap();
            let back_off = Outcome::provider_backoff(Duration::from_secs(60), BackoffScope::Queue);
            match attempt.settle_with(back_off.clone(), |tx| H::insert_reply(tx, id.0, 1, "429")) {
                Ok(()) => back_off,
                Err(e) => Outcome::retry(e.to_string()),
            }
        })
        .start()
        .unwrap();
    let one = started.recv_timeout(HANG_GUARD).unwrap();
    assert!(pool.wait_idle(HANG_GUARD).unwrap());
    let report = pool.shutdown(HANG_GUARD).unwrap();
    let mut ran = vec![one];
    ran.extend(started.try_iter());
    assert_eq!(ran, [first], "the back-off held every other job");
    assert_eq!(db.replies(), [(first.0, 1, "429".to_string())]);
    assert_eq!(db.queue_backoff("q").unwrap().map(|b| b.until), Some(T0 + 60_000));
    let c = report.counters;
    assert_eq!((c.claimed, c.snoozed, c.completed, c.errors, c.stale_settles_rejected), (1, 1, 0, 0, 0));
    let j = job(&db, first);
    assert_eq!(
        (j.state, j.snoozes, j.max_attempts - j.attempt),
        (JobState::Pending, 1, job(&db, JobId(first.0 + 1)).max_attempts)
    );
}

fn a_pool_exhausts_a_job_past_its_snooze_cap_and_a_snooze_beyond_a_year<H: Harness>(h: &H) {
    let db = Db::new(h);
    let capped = db.add("capped");
    let too_long = db.add("too long");
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(1)
        .prefetch(0)
        .max_snoozes(2)
        .handler(move |attempt| {
            if attempt.token().id == too_long {
                Outcome::snooze(MAX_SNOOZE + Duration::from_secs(1))
            } else {
                Outcome::snooze(Duration::ZERO)
            }
        })
        .start()
        .unwrap();
    assert!(pool.wait_idle(HANG_GUARD).unwrap());
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert_eq!((report.counters.snoozed, report.counters.exhausted), (2, 2), "{:?}", report.counters);
    let j = job(&db, capped);
    assert_eq!((j.state, j.snoozes, j.attempt), (JobState::Exhausted, 2, 3));
    assert!(j.last_error.unwrap_or_default().contains("snoozed 2 times, the cap"));
    let j = job(&db, too_long);
    assert_eq!((j.state, j.snoozes), (JobState::Exhausted, 0));
    assert!(j.last_error.unwrap_or_default().contains("longer than a year"));
}
