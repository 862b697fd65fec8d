//! Paused queues, for every store: a paused queue's claims find nothing (a worker pool of it
//! claims nothing and keeps polling), while enqueues land, attempts already claimed renew and
//! settle, the reaper still returns expired leases to pending, and other queues carry on.
//! The pause is stored with the queue's data, so another handle sees it at once; pausing is
//! idempotent and keeps its first record of who paused and why; an unpause makes the held
//! jobs claimable in the usual order and wakes the pools of the handle that made it.

use crate::fixture::{Db, HANG_GUARD, LEASE, T0};
use crate::harness::Harness;
use crate::Rule;
use fenceq::{Error, JobId, JobState, NewJob, Outcome, PausedQueue, Retried, WorkerPool};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

/// Every rule of paused queues.
pub fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        claims_skip_a_paused_queue_and_enqueues_still_land,
        attempts_claimed_before_the_pause_renew_and_settle,
        unpause_makes_the_held_jobs_claimable_in_claim_order,
        other_queues_are_not_affected_by_a_pause,
        pausing_twice_is_idempotent_and_keeps_the_first_record,
        a_queue_with_no_jobs_can_be_paused_and_stats_lists_it,
        bad_queue_and_operator_names_are_refused_and_change_nothing,
        another_handle_sees_the_pause_and_the_unpause,
        the_reaper_still_reaps_a_paused_queues_expired_leases,
        a_paused_queues_pool_claims_nothing_finishes_what_it_holds_and_wakes_on_unpause,
    ]
}

fn state_and_attempt<H: Harness>(db: &Db<'_, H>, id: JobId) -> (JobState, u32) {
    let job = db.job(id).unwrap().expect("the job exists");
    (job.state, job.attempt)
}

fn claims_skip_a_paused_queue_and_enqueues_still_land<H: Harness>(h: &H) {
    let db = Db::new(h);
    let before = db.add("enqueued before the pause");
    assert!(db.pause("q").unwrap(), "the first pause pauses");
    assert!(db.is_paused("q").unwrap());
    let during = db.enqueue(NewJob::new("q", b"during".to_vec()).key("k")).unwrap();
    assert!(!during.is_duplicate(), "the enqueue landed as a new job");
    assert!(
        db.enqueue(NewJob::new("q", b"again".to_vec()).key("k")).unwrap().is_duplicate(),
        "intake is still idempotent"
    );
    assert!(db.claim("q", "w", LEASE).unwrap().is_none());
    assert!(db.claim_batch("q", "w", LEASE, 100).unwrap().is_empty());
    db.advance(Duration::from_secs(24 * 3600));
    assert!(db.claim("q", "w", LEASE).unwrap().is_none(), "time passing does not end a pause");
    for id in [before, during.id()] {
        assert_eq!(state_and_attempt(&db, id), (JobState::Pending, 0), "job {id} waits untouched");
    }
    assert_eq!(db.count("pending"), 2);
    let stats = db.stats().unwrap().queue("q");
    assert_eq!(stats.pending, 2);
    assert_eq!(stats.paused.map(|p| (p.queue, p.since)), Some(("q".to_string(), T0)));
}

fn attempts_claimed_before_the_pause_renew_and_settle<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.create_replies();
    let ids: Vec<JobId> = (0..5).map(|n| db.add(&format!("job {n}"))).collect();
    let claims = db.claim_batch("q", "w", LEASE, 5).unwrap();
    assert_eq!(claims.iter().map(|c| c.id()).collect::<Vec<_>>(), ids);
    assert!(db.pause("q").unwrap());
    let token = |n: usize| claims[n].token();

    db.renew(&token(0), LEASE).unwrap();
    db.with_ownership(&token(0), |tx| H::insert_reply(tx, ids[0].0, 1, "written while paused")).unwrap();
    db.complete(&token(0)).unwrap();
    db.complete_with(&token(1), |tx| H::insert_reply(tx, ids[1].0, 1, "done while paused")).unwrap();
    let retried = db.retry(&token(2), Duration::from_secs(1), "transient").unwrap();
    assert!(matches!(retried, Retried::Scheduled(_)), "{retried:?}");
    db.exhaust(&token(3), "permanent").unwrap();
    db.park(&token(4), Duration::from_secs(60), "awaiting approval").unwrap();
    db.resume(&token(4)).unwrap();

    let states: Vec<JobState> = ids.iter().map(|id| state_and_attempt(&db, *id).0).collect();
    use JobState::*;
    assert_eq!(states, vec![Completed, Completed, Pending, Exhausted, Pending]);
    assert_eq!(db.replies().len(), 2, "both owned writes committed");
    db.advance(Duration::from_secs(5));
    assert!(db.claim("q", "w", LEASE).unwrap().is_none(), "the retried and resumed jobs wait for the unpause");
    assert_eq!(db.exhaustions(None, 10).unwrap().items.len(), 1);
}

fn unpause_makes_the_held_jobs_claimable_in_claim_order<H: Harness>(h: &H) {
    let db = Db::new(h);
    assert!(db.pause("q").unwrap());
    let low = db.enqueue(NewJob::new("q", b"low".to_vec())).unwrap().id();
    let high = db.enqueue(NewJob::new("q", b"high".to_vec()).priority(5)).unwrap().id();
    let later = db.enqueue(NewJob::new("q", b"later".to_vec()).delay(Duration::from_secs(60))).unwrap().id();
    let low_too = db.add("low too");
    assert!(db.unpause("q").unwrap(), "the unpause unpauses");
    assert!(!db.is_paused("q").unwrap());
    assert!(db.paused_queues().unwrap().is_empty());
    assert!(db.stats().unwrap().queue("q").paused.is_none());
    let claims = db.claim_batch("q", "w", LEASE, 10).unwrap();
    let claimed: Vec<JobId> = claims.iter().map(|c| c.id()).collect();
    assert_eq!(claimed, vec![high, low, low_too], "priority, then run_at, then id; the delayed job is not due");
    for claim in &claims {
        db.complete(&claim.token()).unwrap();
    }
    db.advance(Duration::from_secs(60));
    assert_eq!(db.claim("q", "w", LEASE).unwrap().map(|c| c.id()), Some(later));
    assert!(!db.unpause("q").unwrap(), "a queue that is not paused: nothing to do");
}

fn other_queues_are_not_affected_by_a_pause<H: Harness>(h: &H) {
    let db = Db::new(h);
    let names = ["other", "Q", "q ", "qq"];
    for name in ["q"].iter().chain(&names) {
        db.enqueue(NewJob::new(*name, name.as_bytes().to_vec())).unwrap();
    }
    assert!(db.pause("q").unwrap());
    assert!(db.claim("q", "w", LEASE).unwrap().is_none());
    for name in names {
        // Names are exact: another case, a trailing space or a longer name is another queue.
        assert!(!db.is_paused(name).unwrap(), "{name:?}");
        let claimed = db.claim(name, "w", LEASE).unwrap().unwrap_or_else(|| panic!("{name:?} claims"));
        assert_eq!(claimed.payload, name.as_bytes());
        db.complete(&claimed.token()).unwrap();
    }
    let stats = db.stats().unwrap();
    assert!(stats.queue("q").paused.is_some());
    assert!(names.iter().all(|name| stats.queue(name).paused.is_none()));
    assert_eq!(db.paused_queues().unwrap().len(), 1);
}

fn pausing_twice_is_idempotent_and_keeps_the_first_record<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.add("held");
    assert!(db.operator("alice").note("telegram outage").pause("q").unwrap());
    let first = PausedQueue {
        queue: "q".to_string(),
        since: T0,
        by: Some("alice".to_string()),
        note: Some("telegram outage".to_string()),
    };
    db.advance(Duration::from_secs(10));
    assert!(!db.operator("bob").note("me too").pause("q").unwrap(), "paused already");
    assert!(!db.pause("q").unwrap(), "paused already");
    assert_eq!(db.paused_queues().unwrap(), vec![first.clone()], "the first record stays");
    assert_eq!(db.stats().unwrap().queue("q").paused, Some(first));
    assert!(db.claim("q", "w", LEASE).unwrap().is_none());

    assert!(db.operator("carol").note("outage over").unpause("q").unwrap());
    assert!(!db.unpause("q").unwrap(), "not paused any more");
    db.advance(Duration::from_secs(10));
    assert!(db.pause("q").unwrap(), "a pause after an unpause pauses again");
    let second = db.paused_queues().unwrap();
    assert_eq!(second, vec![PausedQueue { queue: "q".to_string(), since: T0 + 20_000, by: None, note: None }]);
}

fn a_queue_with_no_jobs_can_be_paused_and_stats_lists_it<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.enqueue(NewJob::new("a", b"a".to_vec())).unwrap();
    db.enqueue(NewJob::new("z", b"z".to_vec())).unwrap();
    assert!(db.pause("m-empty").unwrap());
    assert!(db.pause("zz-empty").unwrap());
    let stats = db.stats().unwrap();
    let names: Vec<&str> = stats.queues.iter().map(|q| q.queue.as_str()).collect();
    assert_eq!(names, vec!["a", "m-empty", "z", "zz-empty"], "queues with rows or a pause, by name");
    let empty = stats.queue("m-empty");
    assert_eq!(empty.total(), 0);
    assert_eq!(empty.paused.as_ref().map(|p| p.since), Some(T0));
    assert!(stats.queue("a").paused.is_none() && stats.queue("z").paused.is_none());
    // Jobs enqueued to it later wait for the unpause.
    let id = db.enqueue(NewJob::new("m-empty", b"later".to_vec())).unwrap().id();
    assert!(db.claim("m-empty", "w", LEASE).unwrap().is_none());
    assert!(db.unpause("m-empty").unwrap());
    assert_eq!(db.claim("m-empty", "w", LEASE).unwrap().map(|c| c.id()), Some(id));
    assert_eq!(db.paused_queues().unwrap().iter().map(|p| p.queue.as_str()).collect::<Vec<_>>(), vec!["zz-empty"]);
}

fn bad_queue_and_operator_names_are_refused_and_change_nothing<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.add("claimable");
    let long = "x".repeat(129);
    for name in ["", long.as_str(), "a\0b"] {
        let refused = |result: fenceq::Result<bool>, call: &str| {
            assert!(
                matches!(&result, Err(Error::InvalidInput { what: "queue name", .. })),
                "{call}({name:?}): {result:?}"
            );
        };
        refused(db.pause(name), "pause");
        refused(db.unpause(name), "unpause");
        refused(db.is_paused(name), "is_paused");
        refused(db.operator("alice").pause(name), "operator pause");
    }
    let too_long_note = "n".repeat(4097);
    for (by, note) in [("", "ok"), (long.as_str(), "ok"), ("a\0b", "ok"), ("alice", too_long_note.as_str())] {
        let result = db.operator(by).note(note).pause("q");
        assert!(matches!(result, Err(Error::InvalidInput { .. })), "by {by:?}: {result:?}");
        let result = db.operator(by).note(note).unpause("q");
        assert!(matches!(result, Err(Error::InvalidInput { .. })), "by {by:?}: {result:?}");
    }
    assert!(db.paused_queues().unwrap().is_empty(), "nothing was paused");
    assert!(db.claim("q", "w", LEASE).unwrap().is_some(), "q still claims");
    // The longest valid name is a queue like any other.
    let longest = "y".repeat(128);
    assert!(db.pause(&longest).unwrap());
    assert!(db.is_paused(&longest).unwrap());
}

fn another_handle_sees_the_pause_and_the_unpause<H: Harness>(h: &H) {
    let db = Db::new(h);
    let other = db.reopen();
    let id = db.add("job");
    assert!(db.operator("alice").pause("q").unwrap());
    assert!(other.is_paused("q").unwrap());
    assert!(other.claim("q", "w", LEASE).unwrap().is_none());
    assert_eq!(other.paused_queues().unwrap()[0].by.as_deref(), Some("alice"));
    assert!(!other.pause("q").unwrap(), "paused already, by the first handle");
    assert!(other.unpause("q").unwrap());
    assert!(!db.is_paused("q").unwrap());
    assert_eq!(db.claim("q", "w", LEASE).unwrap().map(|c| c.id()), Some(id));
    // And the other way round, also across a reopen of both.
    assert!(other.pause("other-queue").unwrap());
    drop(other);
    let third = db.reopen();
    assert!(db.is_paused("other-queue").unwrap() && third.is_paused("other-queue").unwrap());
}

fn the_reaper_still_reaps_a_paused_queues_expired_leases<H: Harness>(h: &H) {
    let db = Db::new(h);
    let again = db.add("attempts left");
    let last = db.enqueue(NewJob::new("q", b"last attempt".to_vec()).max_attempts(1)).unwrap().id();
    let claims = db.claim_batch("q", "stalled", LEASE, 2).unwrap();
    assert_eq!(claims.len(), 2);
    assert!(db.pause("q").unwrap());
    db.advance(LEASE);
    // An expired lease is claimable at once, but not while the queue is paused...
    assert!(db.claim("q", "w", LEASE).unwrap().is_none());
    assert_eq!(db.stats().unwrap().queue("q").expired_leases, 2);
    // ...and the reaper does not wait for the unpause: no attempt stays stuck.
    let report = db.reap().unwrap();
    assert_eq!((report.requeued, report.exhausted), (1, 1));
    assert_eq!(state_and_attempt(&db, again), (JobState::Pending, 1));
    assert_eq!(state_and_attempt(&db, last).0, JobState::Exhausted);
    assert!(db.claim("q", "w", LEASE).unwrap().is_none());
    for claim in &claims {
        assert!(matches!(db.complete(&claim.token()), Err(Error::OwnershipLost { .. })), "the stalled tokens are dead");
    }
    assert!(db.unpause("q").unwrap());
    let reclaimed = db.claim("q", "w", LEASE).unwrap().expect("the requeued job");
    assert_eq!((reclaimed.id(), reclaimed.token.attempt), (again, 2));
}

/// The pool holds one attempt (one worker, no prefetch) in a handler that waits to be
/// released. Paused meanwhile, the pool finishes that attempt and settles it, and its claim
/// in the same round takes nothing: `wait_idle` (a paused queue's pending jobs are not due)
/// returns only once that round committed, and would wait out its bound if the round had
/// claimed the held job. The unpause must then wake the pool: its poll interval is longer
/// than any wait of the test, so only the wake can make it claim in time.
fn a_paused_queues_pool_claims_nothing_finishes_what_it_holds_and_wakes_on_unpause<H: Harness>(h: &H) {
    let db = Db::new(h);
    let first = db.add("first");
    let (started_tx, started) = mpsc::channel::<JobId>();
    let (release, release_rx) = mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(1)
        .prefetch(0)
        .poll_interval(HANG_GUARD * 4)
        .handler(move |attempt| {
            started_tx.send(attempt.token().id).unwrap();
            match release_rx.lock().unwrap().recv_timeout(HANG_GUARD) {
                Ok(()) => Outcome::Complete,
                Err(_) => Outcome::retry("the test never released this attempt"),
            }
        })
        .start()
        .unwrap();
    assert_eq!(started.recv_timeout(HANG_GUARD), Ok(first));
    assert!(db.pause("q").unwrap());
    let second = db.add("second"); // wakes the pool, which has no free slot
    release.send(()).unwrap();
    assert!(pool.wait_idle(HANG_GUARD).unwrap(), "the running attempt finished and nothing else was claimed");
    assert_eq!(state_and_attempt(&db, first), (JobState::Completed, 1));
    assert_eq!(state_and_attempt(&db, second), (JobState::Pending, 0));
    assert_eq!(pool.counters().claimed, 1);
    assert!(started.try_recv().is_err());

    assert!(db.unpause("q").unwrap());
    assert_eq!(started.recv_timeout(HANG_GUARD), Ok(second), "the unpause woke the pool");
    release.send(()).unwrap();
    assert!(pool.wait_idle(HANG_GUARD).unwrap());
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert!(report.still_running.is_empty());
    assert_eq!((report.counters.claimed, report.counters.completed), (2, 2));
    assert_eq!(state_and_attempt(&db, second), (JobState::Completed, 1));
}
