//! Limits, for every store: a queue's rate, its groups' rates and its running limit are stored
//! with the queue's data (another handle obeys them, they survive a reopen), and a claim never
//! hands out a job that would break one: in any window of length T by the store's clock at
//! most N attempts of the key start, checked here from the starts the claims themselves
//! returned, under a seeded random workload. A job held back stays pending with its attempts;
//! bad limits change nothing.

use crate::fixture::HANG_GUARD;
use crate::fixture::{most_in_window, Db, Rng, LEASE, T0};
use crate::harness::Harness;
use crate::Rule;
use fenceq::{Claimed, Error, JobState, Limits, NewJob, Outcome, Rate, Throttled, WorkerPool};
use std::collections::HashMap;
use std::sync::mpsc;
use std::time::Duration;

/// Every rule of limits.
pub fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        a_queue_rate_admits_n_starts_per_window_and_holds_the_rest_pending,
        a_running_limit_caps_running_attempts_and_reopens_as_they_settle,
        group_rates_hold_per_group_and_other_groups_go_meanwhile,
        a_reclaim_after_an_expired_lease_counts_as_a_start,
        a_claim_whose_instant_is_older_than_a_recorded_start_starts_after_it,
        a_replayed_job_started_again_at_the_same_instant_counts_twice,
        limits_are_stored_seen_by_another_handle_and_cleared,
        bad_limits_are_refused_and_nothing_is_stored,
        under_random_load_no_window_ever_holds_more_starts_than_its_limit,
        stats_shows_due_jobs_a_limit_holds_back_and_when_it_opens,
        stats_shows_group_heads_waiting_out_their_groups_rate,
        a_group_that_started_earlier_is_claimed_first_once_both_rates_open,
        a_pool_claims_a_rate_limited_queues_jobs_only_for_idle_workers,
        a_claims_instant_is_the_one_its_rate_counted,
        a_job_taken_up_after_the_pools_max_start_delay_is_handed_back_and_claimed_again,
    ]
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn claim_all<H: Harness>(db: &Db<'_, H>) -> Vec<Claimed> {
    db.claim_batch("q", "w", LEASE, 100).unwrap()
}

fn a_queue_rate_admits_n_starts_per_window_and_holds_the_rest_pending<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.set_limits("q", &Limits { rate: Some(Rate::new(3, ms(1000))), ..Limits::default() }).unwrap();
    let ids: Vec<_> = (0..10).map(|n| db.add(&format!("job {n}"))).collect();
    assert_eq!(claim_all(&db).len(), 3, "three starts in the window");
    assert!(claim_all(&db).is_empty(), "the window is spent");
    db.advance(ms(999));
    assert!(claim_all(&db).is_empty(), "still inside the window");
    for id in &ids[3..] {
        let job = db.job(*id).unwrap().unwrap();
        assert_eq!((job.state, job.attempt), (JobState::Pending, 0), "held back, no attempt spent");
    }
    db.advance(ms(1));
    let next = claim_all(&db);
    assert_eq!(next.iter().map(|c| c.id()).collect::<Vec<_>>(), ids[3..6], "the next three, in claim order");
    // One at a time: each claim counts the starts before it.
    db.advance(ms(1000));
    assert_eq!(db.claim("q", "w", LEASE).unwrap().map(|c| c.id()), Some(ids[6]));
    assert_eq!(claim_all(&db).len(), 2);
    assert!(db.claim("q", "w", LEASE).unwrap().is_none());
    // Other queues are not limited.
    for n in 0..5 {
        db.enqueue(NewJob::new("other", format!("{n}").into_bytes())).unwrap();
    }
    assert_eq!(db.claim_batch("other", "w", LEASE, 10).unwrap().len(), 5);
}

fn a_running_limit_caps_running_attempts_and_reopens_as_they_settle<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.set_limits("q", &Limits { max_running: Some(2), ..Limits::default() }).unwrap();
    for n in 0..5 {
        db.add(&format!("job {n}"));
    }
    let running = claim_all(&db);
    assert_eq!(running.len(), 2);
    assert!(claim_all(&db).is_empty(), "two are running");
    db.complete(&running[0].token()).unwrap();
    assert_eq!(claim_all(&db).len(), 1, "one settled, one more may run");
    db.exhaust(&running[1].token(), "gave up").unwrap();
    assert_eq!(claim_all(&db).len(), 1);
    assert!(claim_all(&db).is_empty());
    assert_eq!(db.count("running"), 2);
}

fn group_rates_hold_per_group_and_other_groups_go_meanwhile<H: Harness>(h: &H) {
    let db = Db::new(h);
    let limits = Limits { group_rates: vec![Rate::new(1, ms(1000)), Rate::new(2, ms(10_000))], ..Limits::default() };
    db.set_limits("q", &limits).unwrap();
    for n in 0..4 {
        db.enqueue(NewJob::new("q", format!("a{n}").into_bytes()).group("a")).unwrap();
    }
    db.enqueue(NewJob::new("q", b"b0".to_vec()).group("b")).unwrap();
    db.add("no group");
    let payloads =
        |claims: &[Claimed]| claims.iter().map(|c| String::from_utf8(c.payload.clone()).unwrap()).collect::<Vec<_>>();
    let first = claim_all(&db);
    assert_eq!(payloads(&first), ["a0", "b0", "no group"]);
    for c in &first {
        db.complete(&c.token()).unwrap();
    }
    assert!(claim_all(&db).is_empty(), "a's next job waits out 1/1s");
    let a1 = db.job(first[0].id()).unwrap().unwrap().id.0 + 1;
    let job = db.job(fenceq::JobId(a1)).unwrap().unwrap();
    assert_eq!((job.state, job.attempt), (JobState::Pending, 0), "waiting for a rate costs no attempt");
    db.advance(ms(1000));
    let second = claim_all(&db);
    assert_eq!(payloads(&second), ["a1"]);
    db.complete(&second[0].token()).unwrap();
    db.advance(ms(1000));
    assert!(claim_all(&db).is_empty(), "2/10s: a has started twice in the last 10 s");
    db.advance(ms(7_999));
    assert!(claim_all(&db).is_empty(), "the first start is 9.999 s old");
    db.advance(ms(1));
    assert_eq!(payloads(&claim_all(&db)), ["a2"], "the 10 s window opened");
}

fn a_reclaim_after_an_expired_lease_counts_as_a_start<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.add("only");
    let lost = claim_all(&db);
    assert_eq!(lost.len(), 1);
    db.set_limits("q", &Limits { rate: Some(Rate::new(1, LEASE * 2)), ..Limits::default() }).unwrap();
    db.advance(LEASE);
    assert_eq!(claim_all(&db).len(), 1, "the claim before the limit was not recorded");
    db.advance(LEASE);
    assert!(claim_all(&db).is_empty(), "the reclaim counted: the window holds one start");
    db.advance(LEASE);
    assert_eq!(claim_all(&db).len(), 1, "reclaimed again once the window passed");
}

/// A claim reads its instant before it waits for the queue's limit lock (on PostgreSQL the
/// server's clock, read by its first statement), so a claim that waited can carry an instant
/// older than a start recorded meanwhile, and older than the instant up to which that claim
/// forgot the starts its window no longer needs. Here the clock goes back to play that claim:
/// it must not count a window whose earlier starts are forgotten, so it starts at the latest
/// recorded start instead (its lease moved on as much), and no window of the rate ever holds
/// more than its count.
fn a_claim_whose_instant_is_older_than_a_recorded_start_starts_after_it<H: Harness>(h: &H) {
    let db = Db::new(h);
    let rate = Rate::new(2, ms(1000));
    db.set_limits("q", &Limits { rate: Some(rate), ..Limits::default() }).unwrap();
    for n in 0..6 {
        db.add(&format!("job {n}"));
    }
    let mut starts: Vec<i64> = Vec::new();
    let lease_ms = LEASE.as_millis() as i64;
    let mut claim = |most: u32, expect: usize, what: &str| {
        let claimed = db.claim_batch("q", "w", LEASE, most).unwrap();
        assert_eq!(claimed.len(), expect, "{what}");
        starts.extend(claimed.iter().map(|c| c.lease_until - lease_ms));
        claimed
    };
    claim(100, 2, "two starts at T0");
    // A claim of one, 1,001 ms on, forgets both: they are out of its window.
    db.advance(ms(1001));
    claim(1, 1, "one start at T0 + 1001");
    // A claim whose instant was read half a second before that one.
    db.clock.set(T0 + 500);
    let late = claim(100, 1, "room for one more beside the start at T0 + 1001");
    assert_eq!(late[0].lease_until, T0 + 1001 + lease_ms, "it starts at the latest recorded start, not before it");
    let mut all = starts.clone();
    let most = most_in_window(&mut all, 1000);
    assert!(most <= 2, "{most} starts in one window of the rate 2/1s: {starts:?}");
    assert!(claim_all(&db).is_empty(), "the window from T0 + 1001 holds two starts");
}

/// Found by the reference model: a replay restarts a job's attempt counter, so a replayed job
/// claimed again within the same millisecond starts the same (job, attempt) a second time.
/// SQLite's starts log was keyed by (queue, at, job, attempt) and refused the second start
/// with a constraint error, failing the claim; keyed by the claim id, both starts count.
fn a_replayed_job_started_again_at_the_same_instant_counts_twice<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.set_limits("q", &Limits { rate: Some(Rate::new(2, LEASE)), ..Limits::default() }).unwrap();
    let id = db.add("replayed");
    let first = db.claim("q", "w", LEASE).unwrap().expect("the first start");
    db.exhaust(&first.token(), "gave up").unwrap();
    db.replay(id).unwrap();
    let again = db.claim("q", "w", LEASE).unwrap().expect("the same job starts again at the same instant");
    assert_eq!((again.id(), again.token().attempt), (id, first.token().attempt), "the same attempt number");
    db.add("next");
    assert!(db.claim("q", "w", LEASE).unwrap().is_none(), "both starts count: the window of 2 is full");
    db.advance(LEASE);
    assert!(db.claim("q", "w", LEASE).unwrap().is_some(), "the window opened");
}

fn limits_are_stored_seen_by_another_handle_and_cleared<H: Harness>(h: &H) {
    let db = Db::new(h);
    assert!(db.limits("q").unwrap().is_empty());
    let limits = Limits {
        rate: Some(Rate::parse("30/1s").unwrap()),
        group_rates: vec![Rate::parse("1/1s").unwrap(), Rate::parse("20/60s").unwrap()],
        max_running: Some(4),
    };
    db.set_limits("q", &limits).unwrap();
    let other = db.reopen();
    assert_eq!(other.limits("q").unwrap(), limits);
    assert_eq!(other.all_limits().unwrap(), [("q".to_string(), limits.clone())]);
    other.set_limits("q", &Limits { max_running: Some(1), ..Limits::default() }).unwrap();
    db.add("a");
    db.add("b");
    assert_eq!(claim_all(&db).len(), 1, "the other handle's limit holds here");
    db.clear_limits("q").unwrap();
    assert!(other.limits("q").unwrap().is_empty());
    assert!(other.all_limits().unwrap().is_empty());
    assert_eq!(claim_all(&db).len(), 1, "cleared");
}

fn bad_limits_are_refused_and_nothing_is_stored<H: Harness>(h: &H) {
    let db = Db::new(h);
    let second = Duration::from_secs(1);
    let bad = [
        Limits { rate: Some(Rate::new(0, second)), ..Limits::default() },
        Limits { rate: Some(Rate::new(1, Duration::ZERO)), ..Limits::default() },
        Limits { rate: Some(Rate::new(1, Duration::from_secs(3600 * 24 * 365 * 100))), ..Limits::default() },
        Limits { group_rates: vec![Rate::new(1, second), Rate::new(2, second)], ..Limits::default() },
        Limits { max_running: Some(0), ..Limits::default() },
        Limits { max_running: Some(2_000_000), ..Limits::default() },
    ];
    for limits in &bad {
        assert!(matches!(db.set_limits("q", limits), Err(Error::InvalidInput { .. })), "{limits:?}");
    }
    assert!(matches!(db.set_limits("", &Limits::default()), Err(Error::InvalidInput { .. })));
    assert!(db.all_limits().unwrap().is_empty(), "nothing stored");
    for text in ["30/0s", "abc", "0/1s", "30/100y"] {
        assert!(matches!(Rate::parse(text), Err(Error::InvalidInput { .. })), "{text}");
    }
}

/// A seeded random workload of claims, settles, retries and clock steps over a queue with a
/// rate, two group rates and a running limit: every start the claims returned is recorded,
/// and no window of any limit ever holds more than its count.
fn under_random_load_no_window_ever_holds_more_starts_than_its_limit<H: Harness>(h: &H) {
    let db = Db::new(h);
    let limits = Limits {
        rate: Some(Rate::new(5, ms(100))),
        group_rates: vec![Rate::new(1, ms(50)), Rate::new(3, ms(400))],
        max_running: Some(4),
    };
    db.set_limits("q", &limits).unwrap();
    let mut rng = Rng::new(24);
    let mut now = 0i64;
    let mut starts: Vec<(i64, Option<String>)> = Vec::new();
    let mut running: Vec<Claimed> = Vec::new();
    for n in 0..120 {
        let job = NewJob::new("q", format!("{n}").into_bytes());
        let job = if n % 4 == 3 { job } else { job.group(format!("g{}", n % 5)) };
        db.enqueue(job).unwrap();
    }
    for _ in 0..600 {
        match rng.below(4) {
            0 => {
                let step = 1 + rng.below(40);
                db.advance(ms(step));
                now += step as i64;
            }
            1 if !running.is_empty() => {
                let c = running.remove(rng.below(running.len() as u64) as usize);
                if rng.below(3) == 0 {
                    let _ = db.retry(&c.token(), ms(rng.below(60)), "again");
                } else {
                    db.complete(&c.token()).unwrap();
                }
            }
            _ => {
                let got = db.claim_batch("q", "w", LEASE, 1 + rng.below(6) as u32).unwrap();
                assert!(running.len() + got.len() <= 4, "running limit: {} + {}", running.len(), got.len());
                starts.extend(got.iter().map(|c| (now, c.group.clone())));
                running.extend(got);
            }
        }
    }
    assert!(starts.len() >= 40, "the workload started enough jobs to mean something: {}", starts.len());
    let mut all: Vec<i64> = starts.iter().map(|(t, _)| *t).collect();
    assert!(most_in_window(&mut all, 100) <= 5, "queue rate broken");
    let mut by_group: HashMap<String, Vec<i64>> = HashMap::new();
    for (t, g) in &starts {
        if let Some(g) = g {
            by_group.entry(g.clone()).or_default().push(*t);
        }
    }
    for (group, times) in &mut by_group {
        assert!(most_in_window(times, 50) <= 1, "group {group}: 1/50ms broken: {times:?}");
        assert!(most_in_window(times, 400) <= 3, "group {group}: 3/400ms broken: {times:?}");
    }
}

/// `stats` says when a queue-wide limit holds due jobs back: how many, and when its rate
/// opens (none while the running limit holds them); nothing once the limit has room.
fn stats_shows_due_jobs_a_limit_holds_back_and_when_it_opens<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.set_limits("q", &Limits { rate: Some(Rate::new(2, ms(1000))), ..Limits::default() }).unwrap();
    for n in 0..5 {
        db.add(&format!("job {n}"));
    }
    assert_eq!(db.stats().unwrap().queue("q").throttled, None, "the rate has room");
    let first = claim_all(&db);
    assert_eq!(first.len(), 2);
    let stats = db.stats().unwrap().queue("q");
    let queue_wide = |due, opens_at| Throttled { due, opens_at, group_heads: 0, group_heads_open_at: None };
    assert_eq!(stats.throttled, Some(queue_wide(3, Some(T0 + 1000))));
    assert_eq!(stats.pending, 3, "held back, still pending");
    db.advance(ms(1000));
    assert_eq!(db.stats().unwrap().queue("q").throttled, None, "the window opened");
    db.set_limits("q", &Limits { max_running: Some(2), ..Limits::default() }).unwrap();
    assert_eq!(db.stats().unwrap().queue("q").throttled, Some(queue_wide(3, None)));
    for c in &first {
        db.complete(&c.token()).unwrap();
    }
    assert_eq!(db.stats().unwrap().queue("q").throttled, None);
}

/// A group whose rate is spent has its next head deferred until the rate opens: by the claim
/// that spent it (the job held behind the claimed one), or by a claim that reads a head of
/// the spent group (a job enqueued after its group emptied). `stats` counts such heads as
/// throttled, with the instant they are due, while other groups go on; once the rate opens
/// they are no longer counted.
fn stats_shows_group_heads_waiting_out_their_groups_rate<H: Harness>(h: &H) {
    let db = Db::new(h);
    let group_rate = Rate::new(1, ms(1000));
    db.set_limits("q", &Limits { group_rates: vec![group_rate], ..Limits::default() }).unwrap();
    for (group, n) in [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0)] {
        db.enqueue(NewJob::new("q", format!("{group}{n}").into_bytes()).group(group)).unwrap();
    }
    let first = claim_all(&db);
    assert_eq!(first.len(), 3, "one head of each group");
    for c in &first {
        db.complete(&c.token()).unwrap();
    }
    let deferred_by_claim = Throttled { due: 0, opens_at: None, group_heads: 2, group_heads_open_at: Some(T0 + 1000) };
    assert_eq!(
        db.stats().unwrap().queue("q").throttled,
        Some(deferred_by_claim),
        "the claim that spent a's and b's rates deferred the jobs held behind their heads"
    );
    db.enqueue(NewJob::new("q", b"c1".to_vec()).group("c")).unwrap();
    db.advance(ms(10));
    assert!(claim_all(&db).is_empty(), "a's, b's and c's rates are spent: c1 is deferred as it is read");
    let throttled = db.stats().unwrap().queue("q").throttled.expect("three heads wait out their groups' rate");
    assert_eq!(
        throttled,
        Throttled { due: 0, opens_at: None, group_heads: 3, group_heads_open_at: Some(T0 + 1000) },
        "deferred until the rate opens"
    );
    db.advance(ms(990));
    assert_eq!(db.stats().unwrap().queue("q").throttled, None, "the rates opened");
    assert_eq!(claim_all(&db).len(), 3);
}

/// Groups whose rates are spent wait in the order they last started: once two groups' rates
/// have opened, the group that started earlier is claimed first, whether or not a claim read
/// its head while its rate was spent. (A head released at its enqueue instant and never read
/// would otherwise sort before every head a claim had deferred, and a group served more
/// recently would pass one that waited longer: under a queue rate that cannot serve every
/// group each window, some groups would fall ever further behind.)
fn a_group_that_started_earlier_is_claimed_first_once_both_rates_open<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.set_limits("q", &Limits { group_rates: vec![Rate::new(1, ms(1000))], ..Limits::default() }).unwrap();
    let mut ids = HashMap::new();
    for name in ["a0", "a1", "b0", "b1"] {
        let job = db.enqueue(NewJob::new("q", name.as_bytes().to_vec()).group(&name[..1])).unwrap();
        ids.insert(job.id(), name);
    }
    let claim_one = |db: &Db<'_, H>| {
        let claimed = db.claim("q", "w", LEASE).unwrap().expect("a job is claimable");
        db.complete(&claimed.token()).unwrap();
        ids[&claimed.id()]
    };
    assert_eq!(claim_one(&db), "a0");
    db.advance(ms(10));
    assert_eq!(claim_one(&db), "b0", "a's rate is spent: b goes meanwhile");
    db.advance(ms(1000));
    assert_eq!(claim_one(&db), "a1", "both rates opened: a started 10 ms before b");
    assert_eq!(claim_one(&db), "b1", "then b, whose rate opened too");
}

/// A pool on a queue with a rate claims only as many jobs as it has idle workers: a rate
/// counts claims, and a prefetched job would start later than its count. Without a rate the
/// same pool prefetches (the control: twice its workers beyond them).
fn a_pool_claims_a_rate_limited_queues_jobs_only_for_idle_workers<H: Harness>(h: &H) {
    for limited in [true, false] {
        let db = Db::new(h);
        if limited {
            db.set_limits("q", &Limits { rate: Some(Rate::new(1000, Duration::from_secs(1))), ..Limits::default() })
                .unwrap();
        }
        for j in 0..10 {
            db.add(&format!("job {j}"));
        }
        let (started_tx, started) = mpsc::channel::<()>();
        let (go_tx, go) = mpsc::channel::<()>();
        let go = std::sync::Mutex::new(go);
        let pool = WorkerPool::builder(db.queue.clone(), "q")
            .workers(1)
            .handler(move |_| {
                started_tx.send(()).unwrap();
                let _ = go.lock().unwrap().recv_timeout(HANG_GUARD);
                Outcome::Complete
            })
            .start()
            .unwrap();
        started.recv_timeout(HANG_GUARD).unwrap();
        // The round that claimed the running job claimed every job it would hold, and none
        // is claimed while the one worker is busy.
        let held = pool.in_flight().len();
        let running = db.stats().unwrap().queue("q").running;
        drop(go_tx);
        pool.shutdown(HANG_GUARD).unwrap();
        if limited {
            assert_eq!((held, running), (1, 1), "a rate-limited queue's pool claimed ahead of its workers");
        } else {
            assert_eq!((held, running), (3, 3), "the control: without a rate the pool prefetches");
        }
    }
}

/// `Claimed::claimed_at` is the instant the queue's rate counted the start at: claims at
/// three instants, the rate's window judged from them.
fn a_claims_instant_is_the_one_its_rate_counted<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.set_limits("q", &Limits { rate: Some(Rate::new(2, ms(1000))), ..Limits::default() }).unwrap();
    for j in 0..3 {
        db.add(&format!("job {j}"));
    }
    let first = db.take("w");
    db.advance(ms(400));
    let second = db.take("w");
    assert_eq!((first.claimed_at, second.claimed_at), (T0, T0 + 400));
    db.advance(ms(599));
    assert!(db.claim("q", "w", LEASE).unwrap().is_none(), "two starts counted in the last 1000 ms");
    db.advance(ms(1));
    let third = db.take("w");
    assert_eq!(third.claimed_at, T0 + 1000, "the window opened at the first claim's instant + 1000 ms");
}

/// `WorkerPoolBuilder::max_start_delay`: jobs claimed ahead that a worker takes up later than
/// the bound after their claim are handed back unstarted (no attempt spent) and claimed
/// again; no handler starts later than the bound after the claim it runs under.
fn a_job_taken_up_after_the_pools_max_start_delay_is_handed_back_and_claimed_again<H: Harness>(h: &H) {
    let db = Db::new(h);
    let ids: Vec<_> = (0..3).map(|j| db.add(&format!("job {j}"))).collect();
    let (started_tx, started) = mpsc::channel::<(fenceq::JobId, i64)>();
    let (go_tx, go) = mpsc::channel::<()>();
    let go = std::sync::Mutex::new(go);
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(1)
        .prefetch(2)
        .max_start_delay(ms(50))
        .handler(move |attempt| {
            let delay = attempt.queue().now_ms() - attempt.job().claimed_at;
            started_tx.send((attempt.token().id, delay)).unwrap();
            if attempt.token().id.0 == 1 {
                let _ = go.lock().unwrap().recv_timeout(HANG_GUARD);
            }
            Outcome::Complete
        })
        .start()
        .unwrap();
    assert_eq!(started.recv_timeout(HANG_GUARD).unwrap(), (ids[0], 0));
    assert_eq!(pool.in_flight(), ids, "one running, two claimed ahead");
    db.advance(ms(100));
    drop(go_tx);
    for _ in 1..3 {
        let (id, delay) = started.recv_timeout(HANG_GUARD).unwrap();
        assert!(ids.contains(&id));
        assert_eq!(delay, 0, "{id:?} started under a claim {delay} ms old");
    }
    assert!(pool.wait_idle(HANG_GUARD).unwrap());
    let c = pool.shutdown(HANG_GUARD).unwrap().counters;
    assert_eq!((c.claimed, c.released_late, c.completed, c.errors), (5, 2, 3, 0));
    // Each spent the one attempt it ran, as the job that never waited did.
    let left = |id: fenceq::JobId| db.job(id).unwrap().map(|j| (j.state, j.max_attempts - j.attempt));
    for id in &ids[1..] {
        assert_eq!(left(*id), left(ids[0]), "{id:?}");
    }
}
