//! The worker pool: every job settled exactly once, the fence rejects a stalled handler's
//! late write, panics are retried, the heartbeat keeps leases alive, outcomes settle as the
//! handler says, an enqueue wakes an idle pool, shutdown loses nothing, prefetch stays within
//! its slots, a failing claim never costs a finished attempt its settle, `wait_idle` and
//! `wait_drained`; overlapping rounds claim no more than the free slots; a prefetched job
//! whose lease was lost is never started; a shutdown starts no held job and hands them back
//! (fenced, their budget intact); a handler's own `Queue::complete_with` counts as
//! completed; a failing claim with nothing to settle opens no other transaction.
//! Waits are on channels with generous bounds (hang guards), never on sleeps.

use crate::fixture::{Db, HANG_GUARD, LEASE};
use crate::harness::Harness;
use crate::Rule;
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use fenceq::store::{Store, TokenAt};
use fenceq::{ClaimToken, JobId, JobState, NewJob, Outcome, RetryPolicy, WorkerPool, WorkerPoolBuilder};
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
        overlapping_rounds_never_hold_more_than_the_slots,
        a_failing_claim_never_costs_a_finished_attempt_its_settle,
        a_pool_that_reclaims_its_own_stalled_job_keeps_the_new_claim,
        wait_idle_returns_once_nothing_is_due_or_running_and_reports_a_timeout,
        an_attempt_completed_by_its_handler_is_no_longer_renewed_and_never_counts_as_a_lost_lease,
        a_handler_completing_through_queue_complete_with_its_own_token_counts_as_completed,
        a_prefetched_job_whose_lease_was_lost_is_dropped_and_never_started,
        release_if_owned_is_fenced_and_gives_the_attempt_back_to_the_budget,
        shutdown_starts_no_held_job_and_hands_them_back_claimable_at_once,
        a_shutdown_never_hands_back_a_held_job_another_claim_has_taken,
        a_second_pool_never_runs_a_job_the_stopped_pool_runs,
        wait_drained_waits_for_scheduled_retries_and_paused_jobs_wait_idle_does_not,
        a_failing_claim_with_nothing_to_settle_opens_no_other_transaction,
        a_park_out_of_range_exhausts_the_job_saying_why,
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

/// Also with one round in flight and with more than any store's default, so that both the
/// serial dispatcher and overlapping rounds are run on every store.
fn every_job_is_settled_exactly_once_with_many_workers<H: Harness>(h: &H) {
    for rounds in [None, Some(1), Some(3)] {
        settled_exactly_once(h, rounds);
    }
}

fn settled_exactly_once<H: Harness>(h: &H, rounds: Option<usize>) {
    const JOBS: usize = 2000;
    let db = Db::new(h);
    let builder = with_rounds(WorkerPool::builder(db.queue.clone(), "q").workers(8), rounds);
    let (pool, rx) = reporting_pool(&db, JOBS, builder);
    each_job_runs_once(&rx, JOBS, || {});
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert!(report.still_running.is_empty());
    assert_eq!(report.counters.claimed, JOBS as u64);
    assert_eq!(report.counters.completed, JOBS as u64);
    assert_eq!(report.counters.stale_settles_rejected, 0);
    assert_eq!(db.count("completed"), JOBS as i64);
    assert!(rx.try_recv().is_err(), "no job ran twice");
}

/// `builder` with `rounds` in flight; `None` keeps the store's default.
fn with_rounds<S: Store>(builder: WorkerPoolBuilder<S>, rounds: Option<usize>) -> WorkerPoolBuilder<S> {
    match rounds {
        Some(rounds) => builder.rounds_in_flight(rounds),
        None => builder,
    }
}

/// Enqueues `jobs` jobs and starts `builder`'s pool with a handler that reports each job it
/// runs, then completes it.
fn reporting_pool<H: Harness>(
    db: &Db<'_, H>,
    jobs: usize,
    builder: WorkerPoolBuilder<H::Store>,
) -> (WorkerPool<H::Store>, Receiver<JobId>) {
    db.enqueue_batch((0..jobs).map(|i| NewJob::new("q", format!("{i}").into_bytes()))).unwrap();
    let (tx, rx) = unbounded();
    let pool = builder
        .handler(move |a| {
            tx.send(a.token().id).unwrap();
            Outcome::Complete
        })
        .start()
        .unwrap();
    (pool, rx)
}

/// Receives `jobs` reports of a `reporting_pool`, each of another job, calling `after_each`
/// after each.
fn each_job_runs_once(rx: &Receiver<JobId>, jobs: usize, mut after_each: impl FnMut()) {
    let mut seen = HashSet::new();
    for _ in 0..jobs {
        assert!(seen.insert(recv(rx, "a handler call")), "a job was handed out twice");
        after_each();
    }
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
    for rounds in [0, fenceq::MAX_ROUNDS_IN_FLIGHT + 1] {
        let refused = WorkerPool::builder(db.queue.clone(), "q").rounds_in_flight(rounds).handler(handler).start();
        match refused {
            Err(fenceq::Error::InvalidInput { what, .. }) => assert_eq!(what, "rounds_in_flight"),
            other => panic!("rounds in flight {rounds}: {other:?}"),
        }
    }
    for bound in [Duration::ZERO, Duration::from_secs(31)] {
        let builder = WorkerPool::builder(db.queue.clone(), "q").lease(Duration::from_secs(30));
        match builder.max_start_delay(bound).handler(handler).start() {
            Err(fenceq::Error::InvalidInput { what, .. }) => assert_eq!(what, "max_start_delay"),
            other => panic!("max start delay {bound:?}: {other:?}"),
        }
    }
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
        let (pool, started, release) = gated_pool(&db, set, Duration::from_secs(1)); // the default poll interval
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

/// Rounds in flight at once claim, between them, no more than the free slots: with a fixed
/// prefetch the pool never holds more than its workers plus the prefetch, while short
/// handlers keep several rounds out, and every job still runs once.
fn overlapping_rounds_never_hold_more_than_the_slots<H: Harness>(h: &H) {
    const JOBS: usize = 600;
    const WORKERS: usize = 2;
    const PREFETCH: usize = 3;
    let db = Db::new(h);
    let builder = WorkerPool::builder(db.queue.clone(), "q")
        .workers(WORKERS)
        .prefetch(PREFETCH)
        .rounds_in_flight(fenceq::MAX_ROUNDS_IN_FLIGHT);
    let (pool, rx) = reporting_pool(&db, JOBS, builder);
    let mut most = 0;
    each_job_runs_once(&rx, JOBS, || most = most.max(pool.in_flight().len()));
    assert!(
        most <= WORKERS + PREFETCH,
        "the pool held {most} claims at once, more than its {} slots",
        WORKERS + PREFETCH
    );
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert_eq!(report.counters.claimed, JOBS as u64);
    assert_eq!(report.counters.completed, JOBS as u64);
    assert_eq!(db.count("completed"), JOBS as i64);
    assert!(rx.try_recv().is_err(), "no job ran twice");
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
            // The attempt stays in the pool's hands a while after its completion committed.
            let_heartbeat_rounds_pass();
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

/// Keeps the calling handler busy for 60 ms: many heartbeat rounds (every 2 ms) pass while its
/// attempt is in the pool's hands (a bounded spin, not a guess at scheduling).
fn let_heartbeat_rounds_pass() {
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(60) {
        std::thread::yield_now();
    }
}

/// A handler that completes its job through `Queue::complete_with` with the attempt's own
/// token (not `Attempt::complete_with`): the job is completed, and the pool counts it so,
/// neither as a stale settle (its own settle of `Complete` comes second and finds the job
/// completed by that exact claim) nor as a lost lease (a renewal racing it finds the same).
fn a_handler_completing_through_queue_complete_with_its_own_token_counts_as_completed<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.create_replies();
    let id = db.add("x");
    let (done_tx, done_rx) = bounded(1);
    let queue = db.queue.clone();
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(1)
        .lease(Duration::from_millis(300))
        .renew_every(Duration::from_millis(2))
        .handler(move |attempt| {
            let token = attempt.token();
            queue.complete_with(&token, |tx| H::insert_reply(tx, token.id.0, token.attempt.into(), "done")).unwrap();
            let_heartbeat_rounds_pass();
            let _ = done_tx.send(());
            Outcome::Complete
        })
        .start()
        .unwrap();
    recv(&done_rx, "the handler finished");
    eventually(|| pool.counters().completed + pool.counters().stale_settles_rejected == 1, "the settle");
    let c = pool.shutdown(HANG_GUARD).unwrap().counters;
    assert_eq!((c.completed, c.stale_settles_rejected, c.renewals_failed, c.errors), (1, 0, 0, 0), "{c:?}");
    assert_eq!(db.job(id).unwrap().unwrap().state, JobState::Completed);
    assert_eq!(db.replies().len(), 1);
}

/// One worker, three prefetched jobs, the clock moved past their lease (a stall or an outage
/// longer than the lease) and another handle reclaiming all four: the pool never starts the
/// held jobs, whose leases it knows lost; it drops them and counts them.
fn a_prefetched_job_whose_lease_was_lost_is_dropped_and_never_started<H: Harness>(h: &H) {
    let db = Db::new(h);
    let ids: Vec<JobId> = (0..4).map(|i| db.add(&format!("job {i}"))).collect();
    let (started_tx, started) = unbounded();
    let (release, released) = unbounded::<()>();
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(1)
        .prefetch(3)
        .lease(Duration::from_secs(10))
        .renew_every(Duration::from_millis(5))
        .poll_interval(Duration::from_millis(10))
        .handler(move |a| {
            started_tx.send((a.token().id, a.owner_lost())).unwrap();
            released.recv_timeout(HANG_GUARD).unwrap();
            Outcome::Complete
        })
        .start()
        .unwrap();
    assert_eq!(recv(&started, "the first attempt"), (ids[0], false));
    eventually(|| pool.in_flight().len() == 4, "three jobs prefetched");
    db.advance(Duration::from_secs(11));
    let rescuer = db.reopen();
    let reclaimed = reclaim_all(&rescuer, ids.len());
    let mut got: Vec<(JobId, u32)> = reclaimed.iter().map(|c| (c.token.id, c.token.attempt)).collect();
    got.sort();
    assert_eq!(got, ids.iter().map(|id| (*id, 2)).collect::<Vec<_>>());
    release.send(()).unwrap();
    eventually(|| pool.counters().dropped_lost == 3, "the held jobs dropped");
    let report = pool.shutdown(HANG_GUARD).unwrap();
    // Every thread of the pool has ended: its handler (and the sender it holds) is gone.
    let late: Vec<(JobId, bool)> = std::iter::from_fn(|| started.recv_timeout(HANG_GUARD).ok()).collect();
    assert!(late.is_empty(), "the pool started held jobs whose leases it knew lost: {late:?}");
    let c = report.counters;
    assert_eq!((c.completed, c.stale_settles_rejected, c.dropped_lost, c.handed_back), (0, 1, 3, 0), "{c:?}");
    assert!(report.handed_back.is_empty() && report.still_running.is_empty());
    for claimed in &reclaimed {
        rescuer.complete(&claimed.token).unwrap();
    }
    assert_eq!(db.count("completed"), 4);
}

/// Claims `jobs` expired jobs of "q" for "rescuer", in as many claims as it takes: a claim
/// skips a row another transaction holds (on PostgreSQL, a heartbeat round's renewal that is
/// about to fail), and finds it on a later try.
fn reclaim_all<S: Store>(rescuer: &fenceq::Queue<S>, jobs: usize) -> Vec<fenceq::Claimed> {
    let mut reclaimed = Vec::new();
    eventually(
        || {
            reclaimed.extend(rescuer.claim_batch("q", "rescuer", LEASE, 10).unwrap());
            reclaimed.len() >= jobs
        },
        "every expired job reclaimed",
    );
    assert_eq!(reclaimed.len(), jobs);
    reclaimed
}

/// The store's hand-back of an unstarted claim: fenced by the exact live token (a forged,
/// expired or superseded token changes nothing), and the job it releases is pending, due at
/// once, with the attempt given back to its budget; the next claim is a new attempt.
fn release_if_owned_is_fenced_and_gives_the_attempt_back_to_the_budget<H: Harness>(h: &H) {
    let db = Db::with_max_attempts(h, Some(3));
    let id = db.add("x");
    let release = |token: &ClaimToken| {
        let now = db.now_ms();
        db.transaction(|tx| <H::Store as Store>::release_if_owned(tx, TokenAt { token, now })).unwrap()
    };
    let first = db.take("w");
    let forged = ClaimToken { claim_id: crate::controls::forged_claim_id(), ..first.token };
    let before = db.snapshot();
    assert!(!release(&forged), "another claim id releases nothing");
    assert_eq!(db.snapshot(), before);
    db.advance(Duration::from_secs(1));
    assert!(release(&first.token), "the exact live claim releases");
    let job = db.job(id).unwrap().unwrap();
    assert_eq!((job.state, job.attempt, job.max_attempts, job.lease_until), (JobState::Pending, 1, 4, None));
    assert!(job.run_at <= db.now_ms(), "due at once");
    assert!(!release(&first.token), "a released claim is no longer owned");
    let second = db.take("w2");
    assert_eq!((second.token.id, second.token.attempt), (id, 2), "the next claim is the next attempt");
    assert_ne!(second.token.claim_id, first.token.claim_id);
    let before = db.snapshot();
    assert!(!release(&first.token), "a superseded claim releases nothing");
    assert_eq!(db.snapshot(), before);
    db.advance(LEASE);
    assert!(!release(&second.token), "an expired lease releases nothing");
    assert_eq!(db.snapshot(), before);
    // The budget held: attempts 2 and 3 remain after the expired one.
    let third = db.take("w3");
    assert_eq!(third.token.attempt, 3);
    db.retry(&third.token, Duration::ZERO, "once more").unwrap();
    let fourth = db.take("w4");
    assert_eq!(fourth.token.attempt, 4);
    assert!(matches!(db.retry(&fourth.token, Duration::ZERO, "no more").unwrap(), fenceq::Retried::Exhausted));
}

/// A pool whose workers are all busy holds its prefetched jobs; a shutdown starts none of
/// them: it hands them back before it returns, claimable at once by another handle with the
/// attempt given back, and reports them. No handler starts after it returned.
/// With the store's rounds in flight and with three.
fn shutdown_starts_no_held_job_and_hands_them_back_claimable_at_once<H: Harness>(h: &H) {
    for rounds in [None, Some(3)] {
        hands_back_held_jobs(h, rounds);
    }
}

fn hands_back_held_jobs<H: Harness>(h: &H, rounds: Option<usize>) {
    const JOBS: usize = 70;
    const PREFETCH: usize = 64;
    let db = Db::new(h);
    db.enqueue_batch((0..JOBS).map(|i| NewJob::new("q", format!("{i}").into_bytes()))).unwrap();
    let (started_tx, started) = unbounded();
    let (release, released) = unbounded::<()>();
    let builder = with_rounds(WorkerPool::builder(db.queue.clone(), "q").workers(2).prefetch(PREFETCH), rounds);
    let pool = builder
        .handler(move |a| {
            started_tx.send(a.token().id).unwrap();
            released.recv_timeout(HANG_GUARD).unwrap();
            Outcome::Complete
        })
        .start()
        .unwrap();
    let running = [recv(&started, "one attempt"), recv(&started, "the other")];
    eventually(|| pool.in_flight().len() == 2 + PREFETCH, "the prefetched claims");
    let report = pool.shutdown(Duration::from_millis(50)).unwrap();
    let mut still_running = running.to_vec();
    still_running.sort();
    assert_eq!(report.still_running, still_running);
    assert_eq!(report.handed_back.len(), PREFETCH, "{report:?}");
    assert_eq!(report.counters.handed_back, PREFETCH as u64);
    for id in &report.handed_back {
        let job = db.job(*id).unwrap().unwrap();
        assert_eq!((job.state, job.attempt, job.max_attempts - job.attempt), (JobState::Pending, 1, 5), "{job:?}");
    }
    // Claimable at once (the clock has not moved), by another handle: the handed-back jobs
    // at their next attempt, the never-claimed ones at their first.
    let other = db.reopen();
    let claimed = other.claim_batch("q", "next", LEASE, 100).unwrap();
    assert_eq!(claimed.len(), JOBS - 2);
    let again: HashSet<JobId> = claimed.iter().filter(|c| c.token.attempt == 2).map(|c| c.token.id).collect();
    assert_eq!(again, report.handed_back.iter().copied().collect::<HashSet<_>>());
    assert!(claimed.iter().all(|c| c.token.attempt <= 2));
    release.send(()).unwrap();
    release.send(()).unwrap();
    // Every thread of the stopped pool ends (its handler, and the sender it holds, go too).
    let late: Vec<JobId> = std::iter::from_fn(|| started.recv_timeout(HANG_GUARD).ok()).collect();
    assert!(late.is_empty(), "the stopped pool started held jobs after its shutdown returned: {late:?}");
    eventually(|| db.count("completed") == 2, "the two running attempts settled");
    for claimed in &claimed {
        other.complete(&claimed.token).unwrap();
    }
    assert_eq!(db.count("completed"), JOBS as i64);
}

/// Held jobs whose leases ran out and another handle reclaimed are not the pool's to hand
/// back: its release is fenced, so they stay with the new owner, and they count as dropped.
fn a_shutdown_never_hands_back_a_held_job_another_claim_has_taken<H: Harness>(h: &H) {
    let db = Db::new(h);
    let ids: Vec<JobId> = (0..3).map(|i| db.add(&format!("job {i}"))).collect();
    let (started_tx, started) = unbounded();
    let (release, released) = unbounded::<()>();
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(1)
        .prefetch(2)
        .lease(Duration::from_secs(10))
        .renew_every(Duration::from_secs(5)) // no renewal in the test: the leases run out
        .handler(move |a| {
            started_tx.send(a.token().id).unwrap();
            released.recv_timeout(HANG_GUARD).unwrap();
            Outcome::Complete
        })
        .start()
        .unwrap();
    assert_eq!(recv(&started, "the first attempt"), ids[0]);
    eventually(|| pool.in_flight().len() == 3, "two jobs prefetched");
    db.advance(Duration::from_secs(11));
    let rescuer = db.reopen();
    let reclaimed = reclaim_all(&rescuer, 3);
    let before = db.snapshot();
    let report = pool.shutdown(Duration::from_millis(20)).unwrap();
    assert_eq!(db.snapshot(), before, "the stale hand-back changed nothing");
    assert!(report.handed_back.is_empty(), "{report:?}");
    assert_eq!(report.still_running, vec![ids[0]]);
    assert_eq!((report.counters.dropped_lost, report.counters.handed_back), (2, 0));
    release.send(()).unwrap();
    let late: Vec<JobId> = std::iter::from_fn(|| started.recv_timeout(HANG_GUARD).ok()).collect();
    assert!(late.is_empty(), "{late:?}");
    for claimed in &reclaimed {
        rescuer.complete(&claimed.token).unwrap();
    }
    assert_eq!(db.count("completed"), 3);
}

/// Two pools on one queue. The first (one worker, a prefetch, a short lease) shuts down
/// while its worker is busy; the second takes what it handed back. The clock then moves past
/// the first pool's leases, as it would while a stopped pool's last attempts drain: a held
/// job it kept would be reclaimed by the second pool and started by both. No job is run by
/// both, and the stopped pool starts nothing after its shutdown returned.
fn a_second_pool_never_runs_a_job_the_stopped_pool_runs<H: Harness>(h: &H) {
    const JOBS: usize = 40;
    let db = Db::new(h);
    db.enqueue_batch((0..JOBS).map(|i| NewJob::new("q", format!("{i}").into_bytes()))).unwrap();
    let (a_started_tx, a_started) = unbounded();
    let (a_release, a_released) = unbounded::<()>();
    let a = WorkerPool::builder(db.queue.clone(), "q")
        .workers(1)
        .prefetch(16)
        .lease(Duration::from_millis(600))
        .handler(move |attempt| {
            a_started_tx.send(attempt.token().id).unwrap();
            a_released.recv_timeout(HANG_GUARD).unwrap();
            Outcome::Complete
        })
        .start()
        .unwrap();
    let first = recv(&a_started, "the first pool's first attempt");
    eventually(|| a.in_flight().len() == 17, "the first pool's prefetched claims");
    let (b_ran_tx, b_ran) = unbounded();
    let b = WorkerPool::builder(db.reopen(), "q")
        .workers(2)
        .poll_interval(Duration::from_millis(5))
        .handler(move |attempt| {
            b_ran_tx.send(attempt.token().id).unwrap();
            Outcome::Complete
        })
        .start()
        .unwrap();
    let report = a.shutdown(Duration::from_millis(100)).unwrap();
    let mut a_runs = vec![first];
    let mut b_runs: Vec<JobId> = Vec::new();
    let mut moved = false;
    a_release.send(()).unwrap();
    loop {
        match a_started.recv_timeout(HANG_GUARD) {
            // The stopped pool started a held job: let the clock run past its lease so that
            // the second pool reclaims it too, as it would in real time.
            Ok(id) => {
                a_runs.push(id);
                if !moved {
                    db.advance(Duration::from_secs(1));
                    moved = true;
                }
                while !b_runs.contains(&id) {
                    b_runs.push(recv(&b_ran, "the second pool's reclaim"));
                }
                a_release.send(()).unwrap();
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => panic!("the stopped pool hangs"),
        }
    }
    if !moved {
        db.advance(Duration::from_secs(1));
    }
    assert!(b.wait_drained(HANG_GUARD).unwrap(), "the second pool ran everything left");
    b.shutdown(HANG_GUARD).unwrap();
    b_runs.extend(b_ran.try_iter());
    let a_set: HashSet<JobId> = a_runs.iter().copied().collect();
    let both: Vec<&JobId> = b_runs.iter().filter(|id| a_set.contains(id)).collect();
    assert!(both.is_empty(), "jobs run by both pools: {both:?} (the first pool ran {a_runs:?})");
    assert_eq!(a_runs, vec![first], "the stopped pool started nothing more");
    assert_eq!((report.still_running, report.handed_back.len()), (vec![first], 16));
    let b_set: HashSet<JobId> = b_runs.iter().copied().collect();
    assert_eq!(b_set.len(), b_runs.len(), "the second pool ran no job twice");
    assert_eq!(a_set.len() + b_set.len(), JOBS);
    assert_eq!(db.count("completed"), JOBS as i64);
}

/// `wait_idle` returns while a retry is scheduled for later; `wait_drained` waits for it to
/// have run, and for a paused queue's pending jobs.
fn wait_drained_waits_for_scheduled_retries_and_paused_jobs_wait_idle_does_not<H: Harness>(h: &H) {
    let db = Db::new(h);
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .poll_interval(Duration::from_millis(5))
        .handler(|attempt| match attempt.attempt() {
            1 => Outcome::retry_after(Duration::from_secs(2), "flaky upstream"),
            _ => Outcome::Complete,
        })
        .start()
        .unwrap();
    assert!(pool.wait_drained(HANG_GUARD).unwrap(), "an empty queue is drained at once");
    let id = db.add("x");
    eventually(|| pool.counters().retried == 1, "the first attempt's retry");
    assert!(pool.wait_idle(HANG_GUARD).unwrap(), "nothing is due: idle");
    assert!(!pool.wait_drained(Duration::from_millis(20)).unwrap(), "a retry is scheduled: not drained");
    db.advance(Duration::from_secs(2));
    assert!(pool.wait_drained(HANG_GUARD).unwrap());
    assert_eq!(db.job(id).unwrap().unwrap().state, JobState::Completed, "drained means run");
    db.pause("q").unwrap();
    let held = db.add("held by the pause");
    assert!(pool.wait_idle(HANG_GUARD).unwrap(), "a paused queue's pending job is not due");
    assert!(!pool.wait_drained(Duration::from_millis(20)).unwrap(), "but it is still to run");
    db.unpause("q").unwrap();
    eventually(|| pool.counters().retried == 2, "its first attempt's retry");
    assert!(!pool.wait_drained(Duration::from_millis(20)).unwrap());
    db.advance(Duration::from_secs(2));
    assert!(pool.wait_drained(HANG_GUARD).unwrap());
    assert_eq!(db.job(held).unwrap().unwrap().state, JobState::Completed);
    assert!(pool.wait_drained(Duration::MAX).unwrap(), "any timeout is accepted");
    let c = pool.shutdown(HANG_GUARD).unwrap().counters;
    assert_eq!((c.retried, c.completed), (2, 2));
}

/// A pool whose claims fail, with nothing to settle: each failed round is counted as a
/// failed claim, and no other transaction is opened for the settles it does not have.
fn a_failing_claim_with_nothing_to_settle_opens_no_other_transaction<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("claimable, but every claim fails");
    db.harness.fail_claims(&db.place, true);
    let before = db.commit_stats().transactions;
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .poll_interval(Duration::from_millis(2))
        .handler(|_| Outcome::Complete)
        .start()
        .unwrap();
    eventually(|| pool.counters().errors >= 5, "failed claims");
    assert_eq!(db.commit_stats().transactions, before, "a round that failed to claim committed nothing else");
    db.harness.fail_claims(&db.place, false);
    assert!(pool.wait_drained(HANG_GUARD).unwrap());
    let c = pool.shutdown(HANG_GUARD).unwrap().counters;
    assert_eq!((c.claimed, c.completed), (1, 1), "{c:?}");
    assert_eq!(db.job(id).unwrap().unwrap().state, JobState::Completed);
}

/// A handler that parks its job for a time the store refuses (zero, or over a year) gets an
/// exhaustion that says why, not a settle that fails and leaves the job running until its
/// lease runs out, to be run again.
fn a_park_out_of_range_exhausts_the_job_saying_why<H: Harness>(h: &H) {
    let db = Db::new(h);
    let ids = [db.add("zero"), db.add("centuries")];
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(1)
        .poll_interval(Duration::from_millis(5))
        .handler(|a| {
            let until = if a.payload() == b"zero" { Duration::ZERO } else { Duration::from_secs(400 * 24 * 3600) };
            Outcome::Park { until, reason: "awaiting approval".into() }
        })
        .start()
        .unwrap();
    assert!(pool.wait_idle(HANG_GUARD).unwrap(), "both attempts settled");
    let c = pool.shutdown(HANG_GUARD).unwrap().counters;
    assert_eq!((c.exhausted, c.parked, c.errors), (2, 0, 0), "{c:?}");
    for id in ids {
        let job = db.job(id).unwrap().unwrap();
        assert_eq!((job.state, job.attempt), (JobState::Exhausted, 1), "job {id}");
        let error = job.last_error.unwrap();
        assert!(error.contains("awaiting approval") && error.contains("park timeout"), "{error}");
    }
}
