//! The worker pool: every job settled exactly once, the fence rejects a stalled handler's
//! late write, panics are retried, the heartbeat keeps leases alive, outcomes settle as the
//! handler says, an enqueue wakes an idle pool, shutdown loses nothing, prefetch stays within
//! its slots, a failing claim never costs a finished attempt its settle, `wait_idle`.
//! Waits are on channels with generous bounds (hang guards), never on sleeps.

use crate::fixture::{Db, HANG_GUARD, LEASE};
use crate::harness::Harness;
use crate::Rule;
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use fenceq::{JobState, NewJob, Outcome, RetryPolicy, WorkerPool};
use std::collections::HashSet;
use std::time::Duration;

/// The rules of this file.
pub(super) fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        every_job_is_settled_exactly_once_with_many_workers,
        a_handler_that_outlives_its_lease_is_fenced_off_while_the_reclaiming_attempt_commits,
        the_heartbeat_keeps_a_long_attempt_owned,
        a_panicking_handler_is_retried_with_the_panic_message,
        outcomes_settle_as_the_handler_says,
        an_enqueue_through_the_same_queue_wakes_an_idle_pool_at_once,
        shutdown_with_an_attempt_in_flight_loses_nothing,
        shutdown_waits_for_in_flight_attempts_to_finish,
        several_pools_share_one_queue_handle,
        a_pool_without_a_handler_or_with_bad_settings_does_not_start,
        prefetch_claims_beyond_the_free_workers_but_never_beyond_the_slots,
        a_failing_claim_never_costs_a_finished_attempt_its_settle,
        a_pool_that_reclaims_its_own_stalled_job_keeps_the_new_claim,
        wait_idle_returns_once_nothing_is_due_or_running_and_reports_a_timeout,
        an_attempt_completed_by_its_handler_is_no_longer_renewed_and_never_counts_as_a_lost_lease,
    ]
}

fn recv<T>(rx: &Receiver<T>, what: &str) -> T {
    rx.recv_timeout(HANG_GUARD).unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Polls `condition` between bounded waits on `tick` (the pool's own signals), at most ~60 s.
fn eventually(mut condition: impl FnMut() -> bool, what: &str) {
    for _ in 0..6000 {
        if condition() {
            return;
        }
        std::thread::yield_now();
        let _ = crossbeam_channel::after(Duration::from_millis(10)).recv();
    }
    panic!("never happened: {what}");
}

const NO_RETRY_DELAY: RetryPolicy = RetryPolicy { base: Duration::ZERO, max: Duration::ZERO, jitter: 0.0 };

fn every_job_is_settled_exactly_once_with_many_workers<H: Harness>(h: &H) {
    const JOBS: usize = 2000;
    let db = Db::new(h);
    db.enqueue_batch((0..JOBS).map(|i| NewJob::new("q", format!("{i}").into_bytes()))).unwrap();
    let (tx, rx) = unbounded();
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(8)
        .handler(move |a| {
            tx.send(a.token().id).unwrap();
            Outcome::Complete
        })
        .start()
        .unwrap();
    let mut seen = HashSet::new();
    for _ in 0..JOBS {
        assert!(seen.insert(recv(&rx, "a handler call")), "a job was handed out twice");
    }
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert!(report.still_running.is_empty());
    assert_eq!(report.counters.claimed, JOBS as u64);
    assert_eq!(report.counters.completed, JOBS as u64);
    assert_eq!(report.counters.stale_settles_rejected, 0);
    assert_eq!(db.count("completed"), JOBS as i64);
    assert!(rx.try_recv().is_err(), "no job ran twice");
}

fn a_handler_that_outlives_its_lease_is_fenced_off_while_the_reclaiming_attempt_commits<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.create_replies();
    let id = db.add("slow");
    let (started_tx, started) = bounded(1);
    let (release, released) = bounded::<()>(1);
    let (result_tx, result) = bounded(1);
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(1)
        .prefetch(0) // with a free slot the pool would reclaim the expired job itself
        .lease(Duration::from_secs(7200))
        .renew_every(Duration::from_secs(3600)) // no heartbeat during the test: the lease runs out
        .handler(move |a| {
            started_tx.send(a.owner_lost()).unwrap();
            released.recv().unwrap(); // a stall: GC pause, swap, a slow API
            let token = a.token();
            let write = a.with_ownership(|tx| H::insert_reply(tx, token.id.0, token.attempt.into(), "late"));
            result_tx.send((a.owner_lost(), write.map_err(|e| e.to_string()))).unwrap();
            Outcome::Complete
        })
        .start()
        .unwrap();
    assert!(!recv(&started, "the handler to start"), "a fresh claim owns its job");
    db.advance(Duration::from_secs(7200));
    let reclaim = db.claim("q", "rescuer", LEASE).unwrap().expect("the expired lease is reclaimable");
    db.complete_with(&reclaim.token(), |tx| {
        H::insert_reply(tx, reclaim.token.id.0, reclaim.token.attempt.into(), "rescued")
    })
    .unwrap();
    release.send(()).unwrap();
    let (lost, write) = recv(&result, "the stalled handler's write");
    assert!(lost, "owner_lost() turned true");
    assert!(write.unwrap_err().contains("no longer owned"));
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert_eq!(report.counters.stale_settles_rejected, 1, "the late settle was rejected");
    assert_eq!(report.counters.completed, 0);
    let rows: Vec<(i64, i64)> = db.replies().into_iter().map(|(job, attempt, _)| (job, attempt)).collect();
    assert_eq!(rows, vec![(id.0, 2)], "only the reclaiming attempt wrote");
    assert_eq!(db.job(id).unwrap().unwrap().state, JobState::Completed);
}

fn the_heartbeat_keeps_a_long_attempt_owned<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("long");
    let (started_tx, started) = bounded(1);
    let (release, released) = bounded::<()>(1);
    let (lost_tx, lost) = bounded(1);
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(1)
        .lease(Duration::from_secs(30))
        .renew_every(Duration::from_millis(5))
        .handler(move |a| {
            started_tx.send(()).unwrap();
            released.recv().unwrap();
            lost_tx.send(a.owner_lost()).unwrap();
            Outcome::Complete
        })
        .start()
        .unwrap();
    recv(&started, "the handler to start");
    for step in 1..=3 {
        db.advance(Duration::from_secs(20));
        let now = db.now_ms();
        // A heartbeat round at this (manual) instant sets the lease to exactly now + 30 s.
        eventually(
            || db.job(id).unwrap().unwrap().lease_until == Some(now + 30_000),
            "a renewal after the clock moved",
        );
        assert!(db.claim("q", "thief", LEASE).unwrap().is_none(), "step {step}: the renewed lease is live");
    }
    release.send(()).unwrap();
    assert!(!recv(&lost, "the handler's check"), "60 s into a 30 s lease, still the owner");
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert_eq!((report.counters.completed, report.counters.renewals_failed), (1, 0));
}

fn a_panicking_handler_is_retried_with_the_panic_message<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("x");
    let (done_tx, done) = bounded(1);
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .retry_policy(NO_RETRY_DELAY)
        .handler(move |a| {
            if a.attempt() == 1 {
                panic!("boom at attempt one");
            }
            done_tx.send(a.job().last_error.clone()).unwrap();
            Outcome::Complete
        })
        .start()
        .unwrap();
    let last_error = recv(&done, "the second attempt");
    assert_eq!(last_error.as_deref(), Some("handler panicked: boom at attempt one"));
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert_eq!((report.counters.panicked, report.counters.completed), (1, 1));
    assert_eq!(db.job(id).unwrap().unwrap().state, JobState::Completed);
}

fn outcomes_settle_as_the_handler_says<H: Harness>(h: &H) {
    let db = Db::new(h);
    for payload in ["complete", "exhaust", "unknown", "park", "retry"] {
        db.enqueue(NewJob::new("q", payload.as_bytes().to_vec()).key(payload).max_attempts(1)).unwrap();
    }
    let (tx, rx) = unbounded();
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .handler(move |a| {
            tx.send(()).unwrap();
            match a.payload() {
                b"complete" => Outcome::Complete,
                b"exhaust" => Outcome::Exhaust("bad request".into()),
                b"unknown" => Outcome::Unknown("timeout after send".into()),
                b"park" => Outcome::Park { until: Duration::from_secs(60), reason: "approval".into() },
                _ => Outcome::retry_after(Duration::from_secs(1), "flaky"),
            }
        })
        .start()
        .unwrap();
    for _ in 0..5 {
        recv(&rx, "a handler call");
    }
    let c = pool.shutdown(HANG_GUARD).unwrap().counters;
    assert_eq!((c.completed, c.exhausted, c.unknown, c.parked, c.retried), (1, 2, 1, 1, 0));
    let stats = db.stats().unwrap().queue("q");
    assert_eq!((stats.completed, stats.exhausted_unacknowledged, stats.unknown, stats.waiting), (1, 2, 1, 1));
}

fn an_enqueue_through_the_same_queue_wakes_an_idle_pool_at_once<H: Harness>(h: &H) {
    let db = Db::new(h);
    let (tx, rx) = bounded(1);
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .poll_interval(Duration::from_secs(3600)) // polling alone would not find it in time
        .handler(move |a| {
            tx.send(a.payload().to_vec()).unwrap();
            Outcome::Complete
        })
        .start()
        .unwrap();
    // Let the dispatcher make its first (empty) claim and go idle.
    eventually(|| db.stats().is_ok(), "the queue answers");
    db.add("wake up");
    assert_eq!(recv(&rx, "the woken pool"), b"wake up");
    pool.shutdown(HANG_GUARD).unwrap();
}

fn shutdown_with_an_attempt_in_flight_loses_nothing<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("stuck");
    let (started_tx, started) = bounded(1);
    let (release, released) = bounded::<()>(1);
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(2)
        .lease(Duration::from_secs(7200))
        .renew_every(Duration::from_secs(3600))
        .handler(move |_| {
            started_tx.send(()).unwrap();
            let _ = released.recv();
            Outcome::Complete
        })
        .start()
        .unwrap();
    recv(&started, "the handler to start");
    let report = pool.shutdown(Duration::from_millis(50)).unwrap();
    assert_eq!(report.still_running, vec![id], "reported as left running");
    assert_eq!(db.job(id).unwrap().unwrap().state, JobState::Running);
    // Its lease is no longer renewed: once it runs out the job is reclaimable.
    db.advance(Duration::from_secs(7200));
    let again = db.take("next-process");
    assert_eq!(again.id(), id);
    release.send(()).unwrap();
    db.complete(&again.token()).unwrap();
}

fn shutdown_waits_for_in_flight_attempts_to_finish<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("finishing");
    let (started_tx, started) = bounded(1);
    let (release, released) = bounded::<()>(1);
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .handler(move |_| {
            started_tx.send(()).unwrap();
            released.recv().unwrap();
            Outcome::Complete
        })
        .start()
        .unwrap();
    recv(&started, "the handler to start");
    let shutdown = std::thread::spawn(move || pool.shutdown(HANG_GUARD).unwrap());
    release.send(()).unwrap();
    let report = shutdown.join().unwrap();
    assert!(report.still_running.is_empty());
    assert_eq!(report.counters.completed, 1);
    assert_eq!(db.job(id).unwrap().unwrap().state, JobState::Completed);
}

fn several_pools_share_one_queue_handle<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.enqueue(NewJob::new("mail", b"m".to_vec())).unwrap();
    db.enqueue(NewJob::new("sms", b"s".to_vec())).unwrap();
    let (tx, rx) = unbounded();
    let pools: Vec<WorkerPool<H::Store>> = ["mail", "sms"]
        .into_iter()
        .map(|name| {
            let tx = tx.clone();
            WorkerPool::builder(db.queue.clone(), name)
                .handler(move |a| {
                    tx.send((a.job().queue.clone(), a.payload().to_vec())).unwrap();
                    Outcome::Complete
                })
                .start()
                .unwrap()
        })
        .collect();
    let mut got = vec![recv(&rx, "one job"), recv(&rx, "the other")];
    got.sort();
    assert_eq!(got, vec![("mail".to_string(), b"m".to_vec()), ("sms".to_string(), b"s".to_vec())]);
    drop(pools); // dropping shuts them down
    assert_eq!(db.count("completed"), 2);
}

fn a_pool_without_a_handler_or_with_bad_settings_does_not_start<H: Harness>(h: &H) {
    let db = Db::new(h);
    assert!(WorkerPool::builder(db.queue.clone(), "q").start().is_err());
    let handler = |_: &mut fenceq::Attempt<H::Store>| Outcome::Complete;
    assert!(WorkerPool::builder(db.queue.clone(), "q").workers(0).handler(handler).start().is_err());
    assert!(WorkerPool::builder(db.queue.clone(), "q")
        .lease(Duration::from_secs(10))
        .renew_every(Duration::from_secs(10))
        .handler(handler)
        .start()
        .is_err());
    assert!(WorkerPool::builder(db.queue.clone(), "").handler(handler).start().is_err());
    assert!(WorkerPool::builder(db.queue.clone(), "q")
        .prefetch(fenceq::MAX_PREFETCH + 1)
        .handler(handler)
        .start()
        .is_err());
}

/// A one-worker pool whose handler reports each job it starts, then waits for a release
/// before completing it; `prefetch` `None` keeps the default.
fn gated_pool<H: Harness>(
    db: &Db<'_, H>,
    prefetch: Option<usize>,
    poll: Duration,
) -> (WorkerPool<H::Store>, Receiver<fenceq::JobId>, Sender<()>) {
    let (started_tx, started) = unbounded();
    let (release, released) = unbounded::<()>();
    let builder = WorkerPool::builder(db.queue.clone(), "q").workers(1);
    let builder = match prefetch {
        Some(jobs) => builder.prefetch(jobs),
        None => builder, // the default
    };
    let pool = builder
        .poll_interval(poll)
        .handler(move |a| {
            started_tx.send(a.token().id).unwrap();
            released.recv_timeout(HANG_GUARD).unwrap();
            Outcome::Complete
        })
        .start()
        .unwrap();
    (pool, started, release)
}

/// With one worker stuck in its handler, the pool holds exactly `1 + prefetch` claims: the
/// prefetched jobs wait, leased, for the next free worker, and nothing beyond is claimed.
/// The default prefetch (twice the workers, growing only while attempts finish) holds
/// `1 + 2`: a stuck worker finishes nothing, so it never grows.
fn prefetch_claims_beyond_the_free_workers_but_never_beyond_the_slots<H: Harness>(h: &H) {
    for (set, prefetch) in [(Some(0), 0usize), (Some(3), 3), (None, 2)] {
        let db = Db::new(h);
        for i in 0..10 {
            db.add(&format!("job {i}"));
        }
        let (pool, started, release) = gated_pool(&db, set, fenceq::DEFAULT_POLL_INTERVAL);
        recv(&started, "the first attempt");
        eventually(|| pool.in_flight().len() == 1 + prefetch, "the prefetched claims");
        db.add("one more"); // wakes the dispatcher, which has no free slot for it
        assert_eq!(db.count("running"), 1 + prefetch as i64, "prefetch {prefetch}");
        assert_eq!(pool.in_flight().len(), 1 + prefetch);
        for _ in 0..11 {
            release.send(()).unwrap();
        }
        eventually(|| pool.counters().completed == 11, "every job done");
        let report = pool.shutdown(HANG_GUARD).unwrap();
        assert_eq!(report.counters.completed, 11, "prefetch {prefetch}: every job ran once");
        assert_eq!(db.count("completed"), 11);
    }
}

/// The dispatcher settles and claims in one request; when the claim fails, the finished
/// attempt's outcome is still settled (alone), and claiming resumes once it can.
fn a_failing_claim_never_costs_a_finished_attempt_its_settle<H: Harness>(h: &H) {
    let db = Db::new(h);
    let first = db.add("first");
    let (pool, started, release) = gated_pool(&db, Some(0), Duration::from_millis(20));
    assert_eq!(recv(&started, "the first attempt"), first);
    db.harness.fail_claims(&db.place, true);
    let second = db.add("second");
    release.send(()).unwrap();
    eventually(|| db.count("completed") == 1, "the first attempt settled despite the failing claim");
    assert_eq!(db.job(first).unwrap().unwrap().state, JobState::Completed);
    eventually(|| pool.counters().errors >= 1, "the failed claim counted");
    assert_eq!(db.job(second).unwrap().unwrap().state, JobState::Pending, "no claim got through");
    db.harness.fail_claims(&db.place, false);
    release.send(()).unwrap();
    assert_eq!(recv(&started, "the second attempt once claims work again"), second);
    eventually(|| db.count("completed") == 2, "the second job done");
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert_eq!(report.counters.completed, 2);
    assert_eq!(report.counters.stale_settles_rejected, 0);
}

/// A pool may reclaim a job whose older attempt still runs in one of its own stalled workers.
/// The stale attempt's rejected settle must not make the pool forget the new claim (its
/// lease would no longer be renewed, and its worker would find it unregistered).
fn a_pool_that_reclaims_its_own_stalled_job_keeps_the_new_claim<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("stalls once");
    let (started_tx, started) = unbounded();
    // Each attempt waits for its own release.
    let (release_1, released_1) = bounded::<()>(1);
    let (release_2, released_2) = bounded::<()>(1);
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(2)
        .prefetch(0)
        .lease(Duration::from_secs(7200))
        .renew_every(Duration::from_secs(3600)) // no renewal in the test: the first lease runs out
        .poll_interval(Duration::from_millis(10))
        .handler(move |a| {
            let attempt = a.attempt();
            started_tx.send(attempt).unwrap();
            let release = if attempt == 1 { &released_1 } else { &released_2 };
            release.recv_timeout(HANG_GUARD).unwrap();
            Outcome::Complete
        })
        .start()
        .unwrap();
    assert_eq!(recv(&started, "attempt 1"), 1);
    db.advance(Duration::from_secs(7201));
    assert_eq!(recv(&started, "the pool's own reclaim"), 2);
    release_1.send(()).unwrap();
    eventually(|| pool.counters().stale_settles_rejected == 1, "attempt 1's settle rejected");
    assert_eq!(pool.in_flight(), vec![id], "attempt 2 is still in flight");
    release_2.send(()).unwrap();
    eventually(|| pool.counters().completed == 1, "attempt 2 completes");
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert_eq!((report.counters.retried, report.counters.errors), (0, 0), "{:?}", report.counters);
    let job = db.job(id).unwrap().unwrap();
    assert_eq!((job.state, job.attempt), (JobState::Completed, 2));
}

fn wait_idle_returns_once_nothing_is_due_or_running_and_reports_a_timeout<H: Harness>(h: &H) {
    let db = Db::new(h);
    let (release_tx, release_rx) = bounded::<()>(0);
    let (started_tx, started_rx) = bounded(1);
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(2)
        .handler(move |attempt| {
            if attempt.payload() == b"held" {
                started_tx.send(()).unwrap();
                let _ = release_rx.recv_timeout(HANG_GUARD);
            }
            Outcome::Complete
        })
        .start()
        .unwrap();
    assert!(pool.wait_idle(HANG_GUARD).unwrap(), "an empty queue is idle at once");
    db.enqueue_batch((0..50).map(|i| NewJob::new("q", format!("{i}").into_bytes()))).unwrap();
    // A job due later does not count; a job running does.
    db.enqueue(NewJob::new("q", b"later".to_vec()).delay(Duration::from_secs(3600))).unwrap();
    db.enqueue(NewJob::new("q", b"held".to_vec())).unwrap();
    recv(&started_rx, "the held job started");
    assert!(!pool.wait_idle(Duration::from_millis(20)).unwrap(), "a running job is not idle: the timeout");
    release_tx.send(()).unwrap();
    assert!(pool.wait_idle(HANG_GUARD).unwrap());
    let stats = db.stats().unwrap();
    assert_eq!((stats.queues[0].completed, stats.queues[0].pending, stats.queues[0].running), (51, 1, 0));
    assert!(pool.wait_idle(Duration::MAX).unwrap(), "any timeout is accepted");
    pool.shutdown(HANG_GUARD).unwrap();
}

fn an_attempt_completed_by_its_handler_is_no_longer_renewed_and_never_counts_as_a_lost_lease<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.create_replies();
    db.add("x");
    let (done_tx, done_rx) = bounded(1);
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(1)
        .lease(Duration::from_millis(300))
        .renew_every(Duration::from_millis(2))
        .handler(move |attempt| {
            let token = attempt.token();
            attempt.complete_with(|tx| H::insert_reply(tx, token.id.0, token.attempt.into(), "done")).unwrap();
            // The attempt stays in the pool's hands a while after its completion committed:
            // many heartbeat rounds pass (a bounded spin, not a guess at scheduling).
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_millis(60) {
                std::thread::yield_now();
            }
            let _ = done_tx.send(());
            Outcome::Complete
        })
        .start()
        .unwrap();
    recv(&done_rx, "the handler finished");
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert_eq!(report.counters.completed, 1, "{:?}", report.counters);
    assert_eq!(report.counters.renewals_failed, 0, "{:?}", report.counters);
    assert_eq!(report.counters.stale_settles_rejected, 0, "{:?}", report.counters);
}
