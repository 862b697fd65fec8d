//! What the PostgreSQL store must do beyond the conformance kit: the row lock of an owned
//! write against claimers and reapers of other handles, many handles claiming at once, the
//! schema upgrade under concurrent openers, a newer schema refused, an aborted transaction
//! never reported as committed, lock timeouts, a lost connection replaced, and passwords
//! kept out of errors.
//!
//! Each test runs in a schema of its own on the server named by `FENCEQ_POSTGRES_URL`
//! (`scripts/postgres start`); without one the tests say they skipped, except under
//! `CI=true`, where they fail.

use fenceq::diesel;
use fenceq::diesel::connection::SimpleConnection;
use fenceq::diesel::sql_types::{BigInt, Integer, Text};
use fenceq::diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
use fenceq::store::{ClaimRequest, ScheduleTick, Store};
use fenceq::{Error, ManualClock, NewJob, PostgresStore, Queue, SCHEMA_VERSION};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use crate::support;
use crate::support::{server, LEASE, T0};

/// One test's schema (dropped at the end), its queues on an injected clock.
struct Scratch {
    base: support::Scratch,
    clock: ManualClock,
}

impl std::ops::Deref for Scratch {
    type Target = support::Scratch;

    fn deref(&self) -> &support::Scratch {
        &self.base
    }
}

impl Scratch {
    fn new() -> Option<Scratch> {
        Some(Scratch { base: support::Scratch::new()?, clock: ManualClock::new(T0) })
    }

    fn builder(&self) -> fenceq::QueueBuilder<fenceq::PostgresOptions> {
        self.base.builder().clock(self.clock.clone())
    }

    fn open(&self) -> Queue<PostgresStore> {
        self.builder().open_postgres().expect("open the test schema")
    }
}

#[derive(QueryableByName)]
struct N {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

fn scalar(conn: &mut PgConnection, sql: &str) -> i64 {
    sql_query(sql).get_result::<N>(conn).unwrap().n
}

/// PostgreSQL answers the `COMMIT` of an aborted transaction with a rollback and no error:
/// a closure that swallowed a failed statement must not be told its write committed.
#[test]
fn a_closure_that_swallows_a_failed_statement_gets_transaction_lost_and_nothing_commits() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
    let job = q.claim("q", "w", LEASE).unwrap().unwrap();
    let err = q
        .complete_with(&job.token(), |tx| {
            let failed = sql_query("SELECT 1 / 0").execute(&mut *tx.conn());
            assert!(failed.is_err());
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(err, Error::TransactionLost), "{err:?}");
    assert_eq!(q.job(job.id()).unwrap().unwrap().state, fenceq::JobState::Running, "the completion rolled back");
    q.complete(&job.token()).unwrap();
}

#[test]
fn a_schema_newer_than_the_build_is_refused_and_left_untouched() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
    drop(q);
    let mut raw = s.raw();
    raw.batch_execute("INSERT INTO fenceq_schema_version (version, name) VALUES (99, 'from the future')").unwrap();
    let err = s.builder().open_postgres().unwrap_err();
    assert!(matches!(err, Error::SchemaTooNew { found: 99, supported: SCHEMA_VERSION }), "{err:?}");
    assert_eq!(scalar(&mut raw, "SELECT count(*) AS n FROM fenceq_schema_version"), SCHEMA_VERSION + 1);
    assert_eq!(scalar(&mut raw, "SELECT count(*) AS n FROM fenceq_jobs"), 1);
}

/// Eight handles (separate pools, as separate processes would have) open a schema left at
/// version 1 with rows in it, all at once: every open succeeds, each version is applied
/// once, and every row is intact.
#[test]
fn eight_openers_of_an_old_schema_all_succeed_with_one_schema_and_every_row() {
    let Some(s) = Scratch::new() else { return };
    let mut raw = PgConnection::establish(&s.url).unwrap();
    raw.batch_execute(&format!("CREATE SCHEMA \"{0}\"; SET search_path TO \"{0}\"", s.schema)).unwrap();
    raw.batch_execute(include_str!("../../schema/postgres/0001_create_jobs.sql")).unwrap();
    raw.batch_execute(
        "CREATE TABLE fenceq_schema_version (version BIGINT PRIMARY KEY, name TEXT NOT NULL,
                                             applied_at TIMESTAMPTZ NOT NULL DEFAULT now());
         INSERT INTO fenceq_schema_version (version, name) VALUES (1, 'create_jobs');
         INSERT INTO fenceq_jobs (queue, payload, run_at, max_attempts, created_at)
         SELECT 'q', 'old', 0, 3, 0 FROM generate_series(1, 50);
         INSERT INTO fenceq_jobs (queue, payload, state, worker, lease_until, attempt, run_at, max_attempts, created_at)
         VALUES ('q', 'claimed by an old build', 'running', 'w', 1, 1, 0, 3, 0)",
    )
    .unwrap();
    let barrier = Arc::new(Barrier::new(8));
    let openers: Vec<_> = (0..8)
        .map(|_| {
            let (builder, barrier) = (s.builder(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                builder.open_postgres().map(|q| q.schema_version().unwrap())
            })
        })
        .collect();
    for opener in openers {
        assert_eq!(opener.join().unwrap().expect("every opener succeeds"), SCHEMA_VERSION);
    }
    let mut raw = s.raw();
    assert_eq!(scalar(&mut raw, "SELECT count(*) AS n FROM fenceq_schema_version"), SCHEMA_VERSION);
    assert_eq!(scalar(&mut raw, "SELECT count(*) AS n FROM fenceq_jobs"), 51);
    assert_eq!(scalar(&mut raw, "SELECT count(*) AS n FROM fenceq_jobs WHERE claim_id IS NOT NULL"), 1);
    // The old build's claim can no longer settle, and the job is claimable once its lease
    // (long expired) is reclaimed.
    let q = s.open();
    let claimed = q.claim_batch("q", "w", LEASE, 100).unwrap();
    assert_eq!(claimed.len(), 51);
}

/// Eight handles claim from one queue at once: every job is handed out exactly once while
/// its lease lives (`FOR UPDATE SKIP LOCKED`, and the re-check of a row changed meanwhile).
#[test]
fn many_handles_claiming_at_once_never_share_a_live_lease() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    q.enqueue_batch((0..400).map(|i| NewJob::new("q", format!("{i}").into_bytes()))).unwrap();
    let barrier = Arc::new(Barrier::new(8));
    let claimers: Vec<_> = (0..8)
        .map(|w| {
            let (q, barrier) = (s.open(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut mine = Vec::new();
                loop {
                    let batch = q.claim_batch("q", &format!("w{w}"), LEASE, 1 + (w % 3)).unwrap();
                    if batch.is_empty() {
                        return mine;
                    }
                    mine.extend(batch.iter().map(|c| c.id()));
                }
            })
        })
        .collect();
    let mut all: Vec<_> = claimers.into_iter().flat_map(|c| c.join().unwrap()).collect();
    assert_eq!(all.len(), 400, "every job claimed");
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 400, "no job claimed twice");
}

/// While an owned write holds its row lock, another handle's claim skips the job and the
/// reaper leaves it, even after the lease's nominal end; the write's commit extends the
/// lease, so the owner can still settle.
#[test]
fn an_owned_write_holds_off_reclaim_and_reap_until_it_commits() {
    let Some(s) = Scratch::new() else { return };
    let owner = s.open();
    let other = s.open();
    owner.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
    let job = owner.claim("q", "w1", LEASE).unwrap().unwrap();
    let (locked_tx, locked_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let token = job.token();
    let writer = std::thread::spawn(move || {
        owner
            .with_ownership(&token, |_tx| {
                locked_tx.send(()).unwrap();
                done_rx.recv_timeout(Duration::from_secs(30)).unwrap();
                Ok(())
            })
            .unwrap();
        owner
    });
    locked_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    s.clock.advance(LEASE + Duration::from_secs(1));
    assert!(other.claim("q", "w2", LEASE).unwrap().is_none(), "the locked row is skipped");
    assert_eq!(other.reap().unwrap().requeued, 0, "and not reaped");
    done_tx.send(()).unwrap();
    let owner = writer.join().unwrap();
    assert!(other.claim("q", "w2", LEASE).unwrap().is_none(), "the commit extended the lease");
    owner.complete(&job.token()).unwrap();
}

/// A row lock held by another transaction past the busy timeout (the session's
/// `lock_timeout`) fails the call with `Busy` instead of waiting forever.
#[test]
fn a_row_lock_held_past_the_busy_timeout_is_busy() {
    let Some(s) = Scratch::new() else { return };
    let q = s.builder().busy_timeout(Duration::from_millis(200)).open_postgres().unwrap();
    q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
    let job = q.claim("q", "w", LEASE).unwrap().unwrap();
    let mut raw = s.raw();
    raw.batch_execute(&format!("BEGIN; SELECT * FROM fenceq_jobs WHERE id = {} FOR UPDATE", job.id().0)).unwrap();
    let started = Instant::now();
    let err = q.complete(&job.token()).unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    raw.batch_execute("ROLLBACK").unwrap();
    q.complete(&job.token()).unwrap();
}

/// A completion commits before its group's hand-over; when the hand-over then fails (the
/// group's row held by another session past the busy timeout), the completion answers `Ok`
/// (it committed), and a job enqueued into the group afterwards waits behind the one already
/// held: the reaper's sweep hands the group to the older job first.
#[test]
fn a_group_hand_over_that_fails_after_its_completion_answers_ok_and_keeps_the_order() {
    let Some(s) = Scratch::new() else { return };
    let q = s.builder().busy_timeout(Duration::from_millis(200)).open_postgres().unwrap();
    let a = q.enqueue(NewJob::new("q", b"a".to_vec()).group("chat")).unwrap().id();
    let b = q.enqueue(NewJob::new("q", b"b".to_vec()).group("chat")).unwrap().id();
    let head = q.claim("q", "w", LEASE).unwrap().expect("a is the group's head");
    assert_eq!(head.id(), a);

    let mut raw = s.raw();
    raw.batch_execute("BEGIN; SELECT * FROM fenceq_groups WHERE queue = 'q' AND group_name = 'chat' FOR UPDATE")
        .unwrap();
    let settled = q.complete(&head.token());
    raw.batch_execute("ROLLBACK").unwrap();
    assert!(settled.is_ok(), "a completion that committed answered {settled:?}");
    assert_eq!(q.job(a).unwrap().unwrap().state, fenceq::JobState::Completed);

    let c = q.enqueue(NewJob::new("q", b"c".to_vec()).group("chat")).unwrap().id();
    let next = q.claim("q", "w", LEASE).unwrap().map(|job| job.id());
    assert!(next.is_none(), "claimed {next:?} while {b:?} waits its turn (c is {c:?})");

    q.reap().unwrap();
    let order: Vec<_> = (0..2)
        .map(|_| {
            let job = q.claim("q", "w", LEASE).unwrap().expect("the group's next job");
            q.complete(&job.token()).unwrap();
            job.id()
        })
        .collect();
    assert_eq!(order, [b, c]);
}

/// Connections the server ended (a restart, an administrator) are replaced by the pool: the
/// next call works without reopening the queue.
#[test]
fn connections_the_server_ended_are_replaced() {
    let Some(s) = Scratch::new() else { return };
    let name = format!("fenceq_test_{}", uuid::Uuid::new_v4().simple());
    let separator = if s.url.contains('?') { '&' } else { '?' };
    let q = Queue::builder()
        .url(format!("{}{separator}application_name={name}", s.url))
        .schema(s.schema.clone())
        .clock(s.clock.clone())
        .open_postgres()
        .unwrap();
    q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
    let mut raw = s.raw();
    #[derive(QueryableByName)]
    struct Ended {
        #[diesel(sql_type = Integer)]
        pid: i32,
    }
    // Materialized, so that only this queue's backends are ended: in one `WHERE` the planner
    // may call `pg_terminate_backend` before it tests the name, on every session.
    let ended = sql_query(
        "WITH mine AS MATERIALIZED (SELECT pid FROM pg_stat_activity WHERE application_name = $1)
         SELECT pid FROM mine WHERE pg_terminate_backend(pid)",
    )
    .bind::<Text, _>(&name)
    .load::<Ended>(&mut raw)
    .unwrap();
    assert!(!ended.is_empty(), "the queue's connections were ended");
    // `pg_terminate_backend` only signals. An ended backend sends its `FATAL`, leaves
    // `pg_stat_activity`, and closes its socket only as its process exits: the pool's
    // check-out test sees the end of the stream, not the `FATAL`. On a loaded machine a
    // claim sent before that exit is lost mid-statement (`ConnectionLost`), which is not
    // what this test is about. Wait, bounded, until every ended backend's process is a zombie
    // or gone (its files closed), for a server on this machine as the tests' own; elsewhere
    // there is nothing to watch.
    let still_running = |pid: i32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
        stat.contains("(postgres)") && !matches!(state, Some('Z' | 'X'))
    };
    let gone = (0..1_000).any(|_| {
        ended.iter().all(|e| !still_running(e.pid)) || {
            std::thread::sleep(Duration::from_millis(10));
            false
        }
    });
    assert!(gone, "the ended backends' processes exited within 10 s");
    let job = q.claim("q", "w", LEASE).unwrap().expect("the pool reconnected");
    q.complete(&job.token()).unwrap();
}

#[test]
fn passwords_never_appear_in_errors_or_debug_output() {
    let Some(_) = server() else { return };
    let builder = Queue::builder().url("postgres://fenceq:pw-s3cret-42@127.0.0.1:1/none").busy_timeout(Duration::ZERO);
    assert!(!format!("{builder:?}").contains("pw-s3cret-42"));
    let err = builder.open_postgres().unwrap_err();
    let mut shown = format!("{err} / {err:?}");
    let mut source = std::error::Error::source(&err);
    while let Some(e) = source {
        shown.push_str(&format!(" / {e}"));
        source = e.source();
    }
    assert!(matches!(err, Error::Unavailable { .. }), "{shown}");
    assert!(!shown.contains("pw-s3cret-42"), "{shown}");
}

/// A committed write leaves its connection clean (diesel's transaction manager back at depth
/// 0), so the pool reuses it instead of discarding it and connecting again.
#[test]
fn committed_writes_reuse_their_pooled_connections() {
    let Some(s) = Scratch::new() else { return };
    let q = s.builder().pool_size(1).open_postgres().unwrap();
    let mut pids = Vec::new();
    for i in 0..20 {
        let pid = q
            .transaction(|tx| {
                q.enqueue_tx(tx, NewJob::new("q", format!("{i}").into_bytes()))?;
                let pid = scalar(&mut tx.conn(), "SELECT pg_backend_pid()::bigint AS n");
                Ok(pid)
            })
            .unwrap();
        pids.push(pid);
    }
    pids.sort_unstable();
    pids.dedup();
    assert!(pids.len() <= 2, "a connection per write: {} distinct backends", pids.len());
}

/// Job rows the current transaction has read so far (sequential and index fetches).
fn jobs_read_in(tx: &fenceq::PgTx) -> i64 {
    sql_query(
        "SELECT (coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0))::bigint AS n
         FROM pg_stat_xact_user_tables WHERE relid = 'fenceq_jobs'::regclass",
    )
    .get_result::<N>(&mut *tx.conn())
    .unwrap()
    .n
}

/// A pause on one handle holds on every other (separate pools, as separate processes): their
/// claims find nothing and read no job row (the pause is one lookup before the jobs' scan);
/// enqueues go on; after the unpause the same claim takes the jobs.
#[test]
fn a_paused_queue_claims_nothing_on_any_handle_and_its_claim_reads_no_job() {
    let Some(s) = Scratch::new() else { return };
    let (a, b) = (s.open(), s.open());
    for i in 0..200 {
        a.enqueue(NewJob::new("q", format!("{i}").into_bytes())).unwrap();
    }
    assert!(a.pause("q").unwrap());
    assert!(!a.pause("q").unwrap(), "a repeat changes nothing");
    assert!(b.is_paused("q").unwrap());
    b.enqueue(NewJob::new("q", b"while paused".to_vec())).unwrap();
    // What one claim reads of the jobs, in a transaction of its own: (claimed, rows read).
    let claim_in_tx = |q: &Queue<PostgresStore>, limit: u32| {
        let now = q.now_ms();
        q.transaction(|tx| {
            let claimed = PostgresStore::claim(
                tx,
                ClaimRequest { queue: "q", worker: "w", now, lease_until: now + 30_000, limit },
            )?;
            Ok((claimed.jobs.len(), jobs_read_in(tx)))
        })
        .unwrap()
    };
    assert_eq!(claim_in_tx(&b, 64), (0, 0), "a paused claim reads no job");
    assert!(b.claim("q", "w", LEASE).unwrap().is_none());
    assert!(b.claim("other", "w", LEASE).unwrap().is_none(), "other queues are not paused");
    assert!(b.unpause("q").unwrap());
    assert!(!a.unpause("q").unwrap());
    let (claimed, read) = claim_in_tx(&b, 1);
    assert!(claimed == 1 && read > 0, "the same claim reads jobs once unpaused: {read}");
    assert_eq!(a.claim_batch("q", "w", LEASE, 64).unwrap().len(), 64);
    assert!(a.paused_queues().unwrap().is_empty());
}

/// Eight handles race to record the same tick of one schedule, each in its own transaction:
/// exactly one wins (and would enqueue the tick's job); an earlier or equal tick never wins
/// afterwards, a later one does.
#[test]
fn eight_handles_racing_for_one_schedule_tick_record_it_once() {
    let Some(s) = Scratch::new() else { return };
    let handles: Vec<Queue<PostgresStore>> = (0..8).map(|_| s.open()).collect();
    let barrier = Arc::new(Barrier::new(handles.len()));
    let tick = T0 - 1_000;
    let racers: Vec<_> = handles
        .iter()
        .cloned()
        .map(|q| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                q.transaction(|tx| {
                    PostgresStore::advance_schedule_if_later(
                        tx,
                        ScheduleTick { name: "every-minute", tick, now: T0, next: None },
                    )
                })
                .unwrap()
            })
        })
        .collect();
    let won = racers.into_iter().map(|r| r.join().unwrap()).filter(|won| *won).count();
    assert_eq!(won, 1, "exactly one racer records the tick");
    let q = &handles[0];
    let last =
        |q: &Queue<PostgresStore>| q.transaction(|tx| PostgresStore::schedule_last_tick(tx, "every-minute")).unwrap();
    assert_eq!(last(q), Some(tick));
    for earlier in [tick, tick - 60_000] {
        assert!(!q
            .transaction(|tx| PostgresStore::advance_schedule_if_later(
                tx,
                ScheduleTick { name: "every-minute", tick: earlier, now: T0, next: None }
            ))
            .unwrap());
    }
    assert!(q
        .transaction(|tx| PostgresStore::advance_schedule_if_later(
            tx,
            ScheduleTick { name: "every-minute", tick: tick + 60_000, now: T0, next: None }
        ))
        .unwrap());
    assert_eq!(last(&handles[7]), Some(tick + 60_000));
    assert_eq!(q.transaction(|tx| PostgresStore::schedule_last_tick(tx, "never-ran")).unwrap(), None);
}

/// `complete_all` is one statement on PostgreSQL; each token still gets what its own
/// `complete` would have got, in order: a repeat of a token, a forged claim id and an
/// expired lease are `OwnershipLost`, the others complete.
#[test]
fn complete_all_answers_each_token_as_its_own_call_would() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    for i in 0..3 {
        q.enqueue(NewJob::new("q", format!("{i}").into_bytes())).unwrap();
    }
    let jobs = q.claim_batch("q", "w", LEASE, 2).unwrap();
    let (a, b) = (jobs[0].token(), jobs[1].token());
    let forged = fenceq::ClaimToken { claim_id: fenceq::ClaimId(uuid::Uuid::new_v4()), ..b };
    let late = q.claim("q", "w", Duration::from_millis(10)).unwrap().unwrap().token();
    s.clock.advance(Duration::from_millis(20));
    let results = q.complete_all(&[a, a, forged, b, late]).unwrap();
    let lost: Vec<bool> = results.iter().map(|r| matches!(r, Err(Error::OwnershipLost { .. }))).collect();
    assert_eq!(lost, [false, true, true, false, true], "{results:?}");
    assert_eq!(q.job(a.id).unwrap().unwrap().state, fenceq::JobState::Completed);
    assert_eq!(q.job(late.id).unwrap().unwrap().state, fenceq::JobState::Running, "an expired lease is not completed");
}

/// Runs `call` on a thread of its own while a raw transaction holds the row of job `id`:
/// once the server reports the call's backend waiting for that transaction (polled,
/// bounded), `while_held` runs on the raw transaction (the clock moves on; it may renew
/// the lease) and that transaction commits. Returns what the call returned.
fn blocked_on_the_row<R: Send + 'static>(
    s: &Scratch,
    id: fenceq::JobId,
    while_held: impl FnOnce(&mut PgConnection),
    call: impl FnOnce() -> R + Send + 'static,
) -> R {
    let mut holder = s.raw();
    let holder_pid = scalar(&mut holder, "SELECT pg_backend_pid()::bigint AS n");
    holder.batch_execute(&format!("BEGIN; SELECT id FROM fenceq_jobs WHERE id = {} FOR UPDATE", id.0)).unwrap();
    let call = std::thread::spawn(call);
    let mut watcher = s.raw();
    support::wait_for("the call to wait for the held row", Duration::from_secs(30), || {
        let blocked =
            format!("SELECT count(*) AS n FROM pg_stat_activity WHERE {holder_pid} = ANY(pg_blocking_pids(pid))");
        scalar(&mut watcher, &blocked) > 0
    });
    while_held(&mut holder);
    holder.batch_execute("COMMIT").unwrap();
    call.join().expect("the call did not panic")
}

fn lease_expired<T: std::fmt::Debug>(result: &fenceq::Result<T>) -> bool {
    matches!(result, Err(Error::OwnershipLost { reason: fenceq::LostReason::LeaseExpired, .. }))
}

/// An owned call of the queue on a token: its name and the call.
type OwnedCall = (&'static str, fn(&Queue<PostgresStore>, &fenceq::ClaimToken) -> fenceq::Result<()>);

fn domain_row(tx: &fenceq::PgTx, token: &fenceq::ClaimToken) -> fenceq::Result<()> {
    sql_query(format!("INSERT INTO domain_rows (job) VALUES ({})", token.id.0)).execute(&mut *tx.conn())?;
    Ok(())
}

fn other_token(q: &Queue<PostgresStore>) -> fenceq::ClaimToken {
    q.enqueue(NewJob::new("other", b"o".to_vec())).unwrap();
    q.claim("other", "w", Duration::from_secs(3600)).unwrap().unwrap().token()
}

/// Every owned path of the queue: the owned writes (whose domain row goes in `domain_rows`),
/// each settle, and `complete_all` alone and beside a free neighbour.
fn owned_calls() -> Vec<OwnedCall> {
    vec![
        ("with_ownership", |q, t| q.with_ownership(t, |tx| domain_row(tx, t))),
        ("complete_with", |q, t| q.complete_with(t, |tx| domain_row(tx, t))),
        ("complete", |q, t| q.complete(t)),
        ("retry", |q, t| q.retry(t, Duration::ZERO, "again").map(drop)),
        ("exhaust", |q, t| q.exhaust(t, "no")),
        ("mark_unknown", |q, t| q.mark_unknown(t, "maybe")),
        ("park", |q, t| q.park(t, Duration::from_secs(60), "wait")),
        ("complete_all", |q, t| q.complete_all(&[*t])?.pop().expect("one result")),
        ("complete_all of two", |q, t| {
            // The other token's row is free: the held one must not fail its neighbour.
            let mut results = q.complete_all(&[*t, other_token(q)])?;
            assert!(results[1].is_ok(), "the free neighbour completed: {:?}", results[1]);
            results.swap_remove(0)
        }),
    ]
}

/// Every owned write judges the lease at the instant it holds the job's row, not at an
/// instant taken before it waited for the row: with another transaction holding the row
/// while the clock moved past the lease (10 s lease, 15 s later), `with_ownership`,
/// `complete_with`, each settle and `complete_all` refuse with `LeaseExpired` (as `renew`
/// does), and nothing of them is written: no domain row, the job still running.
#[test]
fn every_owned_write_judges_the_lease_once_it_holds_the_row() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    let mut raw = s.raw();
    raw.batch_execute("CREATE TABLE domain_rows (job bigint NOT NULL)").unwrap();
    let lease = Duration::from_secs(10);
    let past_the_lease = Duration::from_secs(15);
    let mut wrong = Vec::new();
    for (name, call) in owned_calls() {
        // A queue of each call's own: the jobs of earlier calls expire as the clock moves.
        let queue = format!("q-{}", name.replace(' ', "-"));
        q.enqueue(NewJob::new(&queue, name.as_bytes().to_vec())).unwrap();
        let token = q.claim(&queue, "w", lease).unwrap().unwrap().token();
        let caller = q.clone();
        let result =
            blocked_on_the_row(&s, token.id, |_| s.clock.advance(past_the_lease), move || call(&caller, &token));
        if !lease_expired(&result) {
            wrong.push(format!("{name}: a lease that ended while it waited for the row gave {result:?}"));
        }
        let written = scalar(&mut raw, &format!("SELECT count(*) AS n FROM domain_rows WHERE job = {}", token.id.0));
        let job = q.job(token.id).unwrap().unwrap();
        if written != 0 || (job.state, job.attempt) != (fenceq::JobState::Running, 1) {
            wrong.push(format!("{name} wrote: {written} domain rows, the job {:?}", job.state));
        }
        if lease_expired(&result) {
            assert!(q.claim(&queue, "w2", lease).unwrap().is_some(), "{name}: the job is claimable again");
        } else {
            let _ = q.cancel(token.id);
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// `PostgresStore::owns_in` in the queue's transaction judges the lease at the end of its
/// wait for the row: its `at` (the caller's now as it called) moved on by the wait. The
/// lease had 200 ms left at `at` and the row was held for longer: not owned, and the
/// caller's write that depended on it did not happen.
#[test]
fn owns_in_judges_the_lease_at_the_end_of_its_wait_for_the_row() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    let mut raw = s.raw();
    raw.batch_execute("CREATE TABLE domain_rows (job bigint NOT NULL)").unwrap();
    q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
    let token = q.claim("q", "w", Duration::from_secs(10)).unwrap().unwrap().token();
    let at = T0 + 9_800;
    let caller = q.clone();
    let held_for = Duration::from_millis(400);
    let owned = blocked_on_the_row(
        &s,
        token.id,
        // Time passing while the row is held (the order is the server's report of the wait).
        |_| std::thread::sleep(held_for),
        move || {
            caller.transaction(|tx| {
                let owned = PostgresStore::owns_in(&mut tx.conn(), &token, at)?;
                if owned {
                    sql_query(format!("INSERT INTO domain_rows (job) VALUES ({})", token.id.0))
                        .execute(&mut *tx.conn())?;
                }
                Ok(owned)
            })
        },
    );
    assert!(!owned.unwrap(), "a lease with 200 ms left at `at` was judged live after a wait of {held_for:?}");
    assert_eq!(scalar(&mut raw, "SELECT count(*) AS n FROM domain_rows"), 0);
    // Without a wait, the same `at` finds the lease live.
    let live = q.transaction(|tx| PostgresStore::owns_in(&mut tx.conn(), &token, at)).unwrap();
    assert!(live);
}

/// The other side of the same rule: the transaction that held the row was the owner's
/// renewal (it moved the lease on, and committed) while the clock passed the old lease's
/// end. Judged once the row is free, the renewed lease lives: every owned path succeeds.
#[test]
fn every_owned_write_that_waited_for_a_renewal_is_judged_by_the_renewed_lease() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    let mut raw = s.raw();
    raw.batch_execute("CREATE TABLE domain_rows (job bigint NOT NULL)").unwrap();
    let lease = Duration::from_secs(10);
    let mut wrong = Vec::new();
    for (name, call) in owned_calls() {
        let queue = format!("q-{}", name.replace(' ', "-"));
        q.enqueue(NewJob::new(&queue, name.as_bytes().to_vec())).unwrap();
        let token = q.claim(&queue, "w", lease).unwrap().unwrap().token();
        let caller = q.clone();
        let renew = |holder: &mut PgConnection| {
            s.clock.advance(Duration::from_secs(15));
            let until = fenceq::Clock::now_ms(&s.clock) + 60_000;
            holder
                .batch_execute(&format!("UPDATE fenceq_jobs SET lease_until = {until} WHERE id = {}", token.id.0))
                .unwrap();
        };
        let result = blocked_on_the_row(&s, token.id, renew, move || call(&caller, &token));
        if let Err(e) = result {
            wrong.push(format!("{name}: refused after the renewal it waited for: {e:?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[derive(QueryableByName, Debug, PartialEq)]
struct SettledCount {
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Text)]
    state: String,
    #[diesel(sql_type = BigInt)]
    count: i64,
}

/// The kept counts of settled rows, summed over their shards, against a count of the rows.
fn kept_and_counted(raw: &mut PgConnection) -> (Vec<SettledCount>, Vec<SettledCount>) {
    let kept = sql_query(
        "SELECT queue, state, sum(count)::bigint AS count FROM fenceq_settled_counts
         GROUP BY queue, state HAVING sum(count) <> 0 ORDER BY queue, state",
    )
    .load(raw)
    .unwrap();
    let counted = sql_query(
        "SELECT queue, CASE WHEN state = 'exhausted' THEN 'acknowledged' ELSE state END AS state, count(*) AS count
         FROM fenceq_jobs
         WHERE state IN ('completed', 'cancelled') OR (state = 'exhausted' AND acknowledged_at IS NOT NULL)
         GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .load(raw)
    .unwrap();
    (kept, counted)
}

/// Schema 13 (`settled_counts`): `stats()` reads the settled states from counts the
/// statements keep, not from the rows. The rows an older build settled are counted once by
/// the upgrade, so `stats()` is the same across it; afterwards every statement that settles,
/// acknowledges, replays or prunes keeps the counts equal to a count of the rows.
#[test]
fn schema_13_counts_the_settled_rows_written_before_it_and_every_settle_after() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    let one_attempt = |queue: &str| NewJob::new(queue, b"x".to_vec()).max_attempts(1);
    for queue in ["q", "r"] {
        for _ in 0..6 {
            q.enqueue(one_attempt(queue)).unwrap();
        }
    }
    // In q: three completed (one of them through the batched settle), one cancelled, two
    // exhausted, one of them acknowledged. In r: one completed, one cancelled.
    let jobs = q.claim_batch("q", "w", LEASE, 6).unwrap();
    q.complete(&jobs[0].token()).unwrap();
    q.complete_all(&[jobs[1].token(), jobs[2].token()]).unwrap();
    q.cancel(jobs[3].id()).unwrap();
    q.exhaust(&jobs[4].token(), "gave up").unwrap();
    q.exhaust(&jobs[5].token(), "gave up").unwrap();
    q.acknowledge(&jobs[5].token()).unwrap();
    q.acknowledge(&jobs[5].token()).unwrap(); // a repeat counts nothing
    let r = q.claim_batch("r", "w", LEASE, 2).unwrap();
    q.complete(&r[0].token()).unwrap();
    q.cancel(r[1].id()).unwrap();
    let before = q.stats().unwrap();
    assert_eq!(
        (before.queue("q").completed, before.queue("q").cancelled, before.queue("q").exhausted_acknowledged),
        (3, 1, 1)
    );
    assert_eq!((before.queue("q").exhausted_unacknowledged, before.queue("r").pending), (1, 4));
    let mut raw = s.raw();
    let (kept, counted) = kept_and_counted(&mut raw);
    assert_eq!(kept, counted);
    drop(q);

    // What a build of schema 12 leaves: the same rows, no counts.
    raw.batch_execute(
        "DROP TABLE fenceq_settled_counts;
         DROP FUNCTION fenceq_claim_grouped; DROP FUNCTION fenceq_group_opens_at; DROP FUNCTION fenceq_claim;
         DROP FUNCTION fenceq_stats;
         DROP TABLE fenceq_attempts;
         DELETE FROM fenceq_schema_version WHERE version >= 13",
    )
    .unwrap();
    let q = s.open();
    assert_eq!(q.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(q.stats().unwrap(), before, "the upgrade counted the rows settled before it");
    let (kept, counted) = kept_and_counted(&mut raw);
    assert_eq!(kept, counted);

    // After it: a replay of the acknowledged exhaustion and an acknowledgement of the other,
    // a resolved unknown, then retention deletes every settled row.
    q.replay(jobs[5].id()).unwrap();
    q.acknowledge_all("q", None).unwrap();
    let unknown = q.claim("r", "w", LEASE).unwrap().unwrap();
    q.mark_unknown(&unknown.token(), "timed out").unwrap();
    q.resolve(&unknown.token(), fenceq::Resolution::Complete).unwrap();
    let (kept, counted) = kept_and_counted(&mut raw);
    assert_eq!(kept, counted);
    let stats = q.stats().unwrap();
    assert_eq!((stats.queue("q").exhausted_acknowledged, stats.queue("q").pending), (1, 1));
    assert_eq!(stats.queue("r").completed, 2);
    s.clock.advance(Duration::from_secs(3600));
    let pruned = q.prune(&fenceq::Retention { older_than: Duration::from_secs(60), batch_size: 2 }).unwrap();
    assert_eq!(pruned.settled + pruned.acknowledged, 8, "{pruned:?}");
    let (kept, counted) = kept_and_counted(&mut raw);
    assert_eq!((kept, counted), (vec![], vec![]));
    let stats = q.stats().unwrap();
    assert_eq!((stats.queue("q").completed, stats.queue("r").cancelled, stats.queue("q").pending), (0, 0, 1));

    // Counts left short (as by a process of an older build settling after the upgrade) are
    // repaired by a recount.
    let job = q.claim("q", "w", LEASE).unwrap().unwrap();
    q.complete(&job.token()).unwrap();
    raw.batch_execute("DELETE FROM fenceq_settled_counts").unwrap();
    assert_eq!(q.stats().unwrap().queue("q").completed, 0);
    assert_eq!(q.recount_settled().unwrap(), 1);
    assert_eq!(q.stats().unwrap().queue("q").completed, 1);
    let (kept, counted) = kept_and_counted(&mut raw);
    assert_eq!(kept, counted);
}
