//! Which clock measures time on PostgreSQL: with the host's wall clock (the default
//! `SystemClock`), every lease, `run_at` and extension is the database server's clock, for
//! every host, so hosts whose clocks are minutes off still agree on every lease; an
//! injected clock (tests) is used as it is.
//!
//! A skewed host is simulated the way production code would see one: a `Clock` that is the
//! system clock moved by an offset, and still says it is the host's clock
//! (`Clock::is_host_clock`), like a machine whose wall clock is wrong. Every test below
//! fails if the store judged leases by the host's clock instead of the server's.
//!
//! Each test runs in a schema of its own on the server named by `FENCEQ_POSTGRES_URL`
//! (`scripts/postgres start`); without one the tests say they skipped, except under
//! `CI=true`, where they fail.

use fenceq::diesel::sql_types::BigInt;
use fenceq::diesel::{sql_query, PgConnection, QueryableByName, RunQueryDsl};
use fenceq::{
    BackoffScope, Clock, Error, LostReason, ManualClock, NewJob, Outcome, PostgresStore, Queue, Retried, Snooze,
    SystemClock, WorkerPool,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::support::{scalar, with_application_name, Scratch};

const MINUTES_10: i64 = 10 * 60 * 1000;
const LEASE: Duration = Duration::from_secs(60);
/// How far fenceq's time may trail the server's clock: it is a reading of the server's clock
/// (at most a second old) extended on the host's monotonic clock, so it lags by that
/// reading's reply time (tens of microseconds here; the bound leaves room for a loaded
/// machine). It never leads: every upper bound below is exact.
const READ_LAG_MS: i64 = 5;

/// A host whose wall clock is off by its field, in ms (positive: fast). It is the host's clock as far
/// as anyone can tell, as the wrong clock of a real machine is.
#[derive(Debug)]
struct SkewedHostClock(i64);

impl Clock for SkewedHostClock {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms() + self.0
    }

    fn is_host_clock(&self) -> bool {
        true
    }
}

/// A handle on the test's schema from a host whose clock is `skew_ms` off.
fn host(s: &Scratch, skew_ms: i64) -> Queue<PostgresStore> {
    s.builder().clock(SkewedHostClock(skew_ms)).open_postgres().expect("open the test schema")
}

#[derive(QueryableByName)]
struct N {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The server's clock, in ms since the epoch (rounded down, as fenceq reads it).
fn server_ms(conn: &mut PgConnection) -> i64 {
    sql_query("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS n")
        .get_result::<N>(conn)
        .unwrap()
        .n
}

/// Runs `f`, and returns what it returned with the server's clock just before and after.
fn between<T>(raw: &mut PgConnection, f: impl FnOnce() -> T) -> (i64, T, i64) {
    let before = server_ms(raw);
    let value = f();
    let after = server_ms(raw);
    (before, value, after)
}

/// Waits (bounded) until the server's clock has passed `ms`.
fn until_the_server_passes(raw: &mut PgConnection, ms: i64) {
    let give_up = Instant::now() + Duration::from_secs(30);
    while server_ms(raw) <= ms {
        assert!(Instant::now() < give_up, "the server's clock did not pass {ms} within 30 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn lease_until_of(q: &Queue<PostgresStore>, id: fenceq::JobId) -> i64 {
    q.job(id).unwrap().unwrap().lease_until.expect("a running job has a lease")
}

/// A host ten minutes fast would see every other host's live lease as expired if it judged
/// by its own clock; by the server's, the lease is live for every host, and its end is the
/// server's now plus the lease, whichever host's clock granted it.
#[test]
fn a_host_whose_clock_is_minutes_fast_cannot_take_a_live_lease_another_host_holds() {
    let Some(s) = Scratch::new() else { return };
    let fast = host(&s, MINUTES_10);
    let mut raw = s.raw();
    for (holder_skew, name) in [(-MINUTES_10, "slow"), (0, "on time"), (MINUTES_10, "fast too")] {
        let holder = host(&s, holder_skew);
        let id = holder.enqueue(NewJob::new("q", name.as_bytes().to_vec())).unwrap().id();
        let (before, claimed, after) = between(&mut raw, || holder.claim("q", name, LEASE).unwrap().unwrap());
        assert!(fast.claim("q", "fast", LEASE).unwrap().is_none(), "{name}: the fast host takes no live lease");
        assert_eq!(fast.reap_preview().unwrap().requeued, 0, "{name}: nor would its reaper");
        assert_eq!(fast.reap().unwrap().requeued, 0, "{name}: nor does it");
        assert!(fast.owns(&claimed.token()).unwrap(), "{name}: the holder's lease is live for the fast host");

        let lease_ms = LEASE.as_millis() as i64;
        assert!(
            (before + lease_ms - READ_LAG_MS..=after + lease_ms).contains(&claimed.lease_until),
            "{name}: the lease ends {} ms after the server's now, not the lease's {lease_ms}",
            claimed.lease_until - before
        );
        assert_eq!(claimed.lease_until, lease_until_of(&holder, id), "{name}: the claim returns the row's end");
        holder.complete(&claimed.token()).unwrap();
    }
}

/// A claim reads the server's clock inside its own statement, not in a round trip before
/// it: sixteen claims (and their settles) on one connection run the store's clock read only
/// when its reading has aged out (once a second), where each claim used to run it. Each
/// lease still ends the lease's length after the server's clock at the claim.
#[test]
fn a_claim_reads_the_servers_clock_in_its_own_statement() {
    let Some(s) = Scratch::new() else { return };
    let q = s.builder().pool_size(1).open_postgres().unwrap();
    let mut raw = s.raw();
    let lease_ms = LEASE.as_millis() as i64;
    let started = Instant::now();
    for i in 0..16 {
        q.enqueue(NewJob::new("q", vec![i])).unwrap();
        let (before, claimed, after) = between(&mut raw, || q.claim("q", "w", LEASE).unwrap().expect("the job"));
        assert!(
            (before + lease_ms - READ_LAG_MS..=after + lease_ms).contains(&claimed.lease_until),
            "claim {i}: the lease ends {} ms after the server's now, not the lease's {lease_ms}",
            claimed.lease_until - before
        );
        q.complete(&claimed.token()).unwrap();
    }
    let elapsed_s = started.elapsed().as_secs() as i64;
    let reads = q
        .with_connection(|tx| {
            Ok(scalar(
                &mut tx.conn(),
                "SELECT coalesce(sum(custom_plans + generic_plans), 0)::bigint AS n FROM pg_prepared_statements
                 WHERE statement LIKE '%clock_timestamp%' AND statement NOT LIKE '%fenceq_jobs%'",
            ))
        })
        .unwrap();
    assert!(
        reads <= 1 + elapsed_s,
        "16 claims in {elapsed_s} s ran the store's own clock read {reads} times (one, and one more per second)"
    );
}

/// A host ten minutes slow would keep renewing and settling a lease long after it ended if
/// it judged by its own clock; by the server's, a lease that ended is over for every host.
#[test]
fn a_host_whose_clock_is_minutes_slow_cannot_keep_a_lease_alive_past_its_server_measured_end() {
    let Some(s) = Scratch::new() else { return };
    let on_time = host(&s, 0);
    let slow = host(&s, -MINUTES_10);
    let mut raw = s.raw();
    let id = on_time.enqueue(NewJob::new("q", b"x".to_vec())).unwrap().id();
    let claimed = on_time.claim("q", "on-time", Duration::from_millis(300)).unwrap().unwrap();
    let token = claimed.token();
    until_the_server_passes(&mut raw, claimed.lease_until);

    assert!(!slow.owns(&token).unwrap(), "the lease ended by the server's clock");
    let expired = |e: Error| matches!(e, Error::OwnershipLost { reason: LostReason::LeaseExpired, .. });
    let renewed = slow.renew(&token, LEASE).unwrap_err();
    assert!(expired(renewed), "a renewal from the slow host is refused");
    let ran = AtomicBool::new(false);
    let written = slow.with_ownership(&token, |_| {
        ran.store(true, Ordering::SeqCst);
        Ok(())
    });
    assert!(expired(written.unwrap_err()), "an owned write from the slow host is refused");
    assert!(!ran.load(Ordering::SeqCst), "and its closure never ran");
    assert!(expired(slow.complete(&token).unwrap_err()), "so is its completion");
    assert_eq!(lease_until_of(&slow, id), claimed.lease_until, "nothing moved the lease");

    let fast = host(&s, MINUTES_10);
    let reclaimed = fast.claim("q", "fast", LEASE).unwrap().expect("the expired lease is reclaimable at once");
    assert_eq!(reclaimed.token.attempt, 2);
    assert!(slow.claim("q", "slow", LEASE).unwrap().is_none(), "and the new lease is live for the slow host");
}

/// What a skewed host computes from the time (a renewal's end, an owned write's extension,
/// a retry's `run_at`) is the server's now plus the length, and what it is handed back is
/// the row's value: no host clock mixed in.
#[test]
fn renewals_extensions_and_retries_from_skewed_hosts_are_measured_from_the_servers_now() {
    let Some(s) = Scratch::new() else { return };
    let mut raw = s.raw();
    let lease_ms = LEASE.as_millis() as i64;
    for skew in [-MINUTES_10, MINUTES_10] {
        let host = host(&s, skew);
        let id = host.enqueue(NewJob::new("q", b"x".to_vec())).unwrap().id();
        let claimed = host.claim("q", "w", Duration::from_secs(5)).unwrap().unwrap();

        let (before, until, after) = between(&mut raw, || host.renew(&claimed.token(), LEASE).unwrap());
        assert!(
            (before + lease_ms - READ_LAG_MS..=after + lease_ms).contains(&until),
            "skew {skew}: renewed to {}",
            until - before
        );
        assert_eq!(until, lease_until_of(&host, id), "skew {skew}: renew returns the row's end");

        // An owned write's commit extends the lease from the commit by the lease's length.
        host.renew(&claimed.token(), Duration::from_secs(5)).unwrap();
        let (before, (), after) = between(&mut raw, || host.with_ownership(&claimed.token(), |_| Ok(())).unwrap());
        let extended = lease_until_of(&host, id);
        assert!(
            (before + 5_000 - READ_LAG_MS..=after + 5_000).contains(&extended),
            "skew {skew}: extended to {}",
            extended - before
        );

        let (before, retried, after) =
            between(&mut raw, || host.retry(&claimed.token(), Duration::from_secs(90), "later").unwrap());
        let fenceq::Retried::Scheduled(run_at) = retried else { panic!("attempts were left") };
        assert!(
            (before + 90_000 - READ_LAG_MS..=after + 90_000).contains(&run_at),
            "skew {skew}: run_at {}",
            run_at - before
        );
        assert_eq!(run_at, host.job(id).unwrap().unwrap().run_at, "skew {skew}: retry returns the row's run_at");
    }
}

/// A transaction that lasts is judged at each statement's own instant, not at its start
/// (PostgreSQL's `now()`): an owned write whose closure outlasted the lease's nominal end
/// still commits (its row lock held off every reclaim) and extends the lease from its
/// commit, not from when it began.
#[test]
fn a_long_owned_write_extends_the_lease_from_its_commit_not_its_start() {
    let Some(s) = Scratch::new() else { return };
    let host = host(&s, -MINUTES_10);
    let id = host.enqueue(NewJob::new("q", b"x".to_vec())).unwrap().id();
    let claimed = host.claim("q", "w", Duration::from_millis(400)).unwrap().unwrap();
    let mut raw = s.raw();
    let closure_end = host
        .with_ownership(&claimed.token(), |_| {
            until_the_server_passes(&mut raw, claimed.lease_until + 200);
            Ok(server_ms(&mut raw))
        })
        .unwrap();
    let extended = lease_until_of(&host, id);
    // From the transaction's start it would end 600 ms or more before `closure_end + 400`;
    // from the commit, within the server read's round trip of it (fenceq's time may lag the
    // server's by that, never lead it).
    let from_commit = closure_end + 400;
    assert!(
        (from_commit - 100..from_commit + 1_000).contains(&extended),
        "extended to {} ms after the closure ended",
        extended - closure_end
    );
    host.complete(&claimed.token()).unwrap();
}

/// `Queue::now_ms` and the pool's advisory `owner_lost` use the server's clock as last
/// measured, so a fast host's handler is not told a live lease ran out.
#[test]
fn a_skewed_hosts_now_ms_and_owner_lost_follow_the_servers_clock() {
    let Some(s) = Scratch::new() else { return };
    let mut raw = s.raw();
    for skew in [-MINUTES_10, MINUTES_10] {
        let host = host(&s, skew);
        let (before, now, after) = between(&mut raw, || host.now_ms());
        // An estimate: the offset was measured on another connection, a moment earlier.
        assert!((before - 1_000..=after + 1_000).contains(&now), "skew {skew}: now_ms is {} off", now - before);

        host.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
        let (lost_tx, lost_rx) = mpsc::channel();
        let lost_tx = Arc::new(std::sync::Mutex::new(lost_tx));
        let pool = WorkerPool::builder(host.clone(), "q")
            .workers(1)
            .lease(LEASE)
            .handler(move |attempt| {
                lost_tx.lock().unwrap().send(attempt.owner_lost()).unwrap();
                Outcome::Complete
            })
            .start()
            .unwrap();
        let lost = lost_rx.recv_timeout(Duration::from_secs(30)).expect("the handler ran");
        assert!(!lost, "skew {skew}: a fresh 60 s lease is not lost");
        let report = pool.shutdown(Duration::from_secs(30)).unwrap();
        assert_eq!(report.counters.completed, 1);
    }
}

/// An injected clock (tests) is used as it is: the lease ends exactly at its now plus the
/// lease, nowhere near the server's clock (the conformance kit relies on it).
#[test]
fn an_injected_clock_is_used_as_it_is() {
    let Some(s) = Scratch::new() else { return };
    let clock = ManualClock::new(1_000_000);
    let q = Queue::builder().url(s.url.clone()).schema(s.schema.clone()).clock(clock.clone()).open_postgres().unwrap();
    assert_eq!(q.now_ms(), 1_000_000);
    let id = q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap().id();
    let claimed = q.claim("q", "w", LEASE).unwrap().unwrap();
    assert_eq!(claimed.lease_until, 1_000_000 + 60_000);
    clock.advance(LEASE);
    assert!(q.claim("q", "w2", LEASE).unwrap().is_some(), "the injected clock ended the lease");
    assert_eq!(q.job(id).unwrap().unwrap().created_at, 1_000_000);
}

/// A queue's back-off ends at an instant of the server's clock, whoever set it and whoever
/// claims: set through a host ten minutes slow, it still closes the queue to a host ten
/// minutes fast until the server's clock passes it, and opens it to the slow one once it has.
#[test]
fn a_queue_backoff_ends_by_the_servers_clock_whatever_the_hosts_say() {
    let Some(s) = Scratch::new() else { return };
    let mut raw = s.raw();
    let (fast, slow) = (host(&s, MINUTES_10), host(&s, -MINUTES_10));
    fast.enqueue(NewJob::new("q", b"first".to_vec())).unwrap();
    let second = fast.enqueue(NewJob::new("q", b"second".to_vec())).unwrap().id();
    let token = slow.claim("q", "w", LEASE).unwrap().expect("due").token();
    let snooze = Snooze::new(Duration::from_secs(5)).scope(BackoffScope::Queue).reason("429");
    let (before, snoozed, after) = between(&mut raw, || slow.snooze(&token, snooze).unwrap());
    let Retried::Scheduled(until) = snoozed else { panic!("snoozed: {snoozed:?}") };
    assert!((before + 5_000 - READ_LAG_MS..=after + 5_000).contains(&until), "{before} {until} {after}");
    assert_eq!(fast.queue_backoff("q").unwrap().map(|b| (b.until, b.reason)), Some((until, "429".to_string())));
    assert!(fast.claim("q", "w", LEASE).unwrap().is_none(), "ten minutes ahead, and still closed");
    assert!(server_ms(&mut raw) < until, "the claim above ran before the back-off's end");
    until_the_server_passes(&mut raw, until);
    let claimed = slow.claim("q", "w", LEASE).unwrap().expect("open once the server's clock passed it");
    assert_eq!(claimed.id(), second);
}

/// A limited claim records its jobs' start (what the rates count, `Claimed::claimed_at`) at
/// an instant read after its wait for the queue's lock, which serialises the limited claims
/// of every process: read before the wait, a claim queued behind another process's counted
/// a start older than its own by the wait, and its handler started that much later than the
/// rate had counted it.
#[test]
fn a_limited_claim_counts_its_start_after_its_wait_for_the_queues_lock() {
    let Some(s) = Scratch::new() else { return };
    let name = format!("fenceq_wait_{}", &s.schema[s.schema.len() - 8..]);
    let q =
        Queue::builder().url(with_application_name(&s.url, &name)).schema(s.schema.clone()).open_postgres().unwrap();
    q.set_limits(
        "q",
        &fenceq::Limits { rate: Some(fenceq::Rate::new(100, Duration::from_secs(1))), ..Default::default() },
    )
    .unwrap();
    let id = q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap().id();
    let mut raw = s.raw();
    sql_query("BEGIN").execute(&mut raw).unwrap();
    sql_query("SELECT 1 FROM fenceq_queue_flow WHERE queue = 'q' FOR UPDATE").execute(&mut raw).unwrap();
    let claimer = q.clone();
    let claim = std::thread::spawn(move || claimer.claim("q", "w", LEASE));
    // Bounded: until the claim waits for the lock the raw session holds.
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let sql = format!(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = '{name}' AND wait_event_type = 'Lock'"
        );
        if scalar(&mut raw, &sql) > 0 {
            break;
        }
        assert!(Instant::now() < give_up, "the claim never waited for the queue's lock");
        std::thread::sleep(Duration::from_millis(5));
    }
    let released = server_ms(&mut raw);
    sql_query("COMMIT").execute(&mut raw).unwrap();
    let claimed = claim.join().unwrap().unwrap().expect("the job, once the lock is free");
    assert_eq!(claimed.id(), id);
    assert!(
        claimed.claimed_at >= released,
        "the claim counted its start {} ms before it had the queue's lock",
        released - claimed.claimed_at
    );
    let start = scalar(&mut raw, "SELECT max(at) AS n FROM fenceq_starts WHERE queue = 'q'");
    assert_eq!(start, claimed.claimed_at, "the recorded start is the claim's instant");
}
