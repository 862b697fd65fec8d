//! The PostgreSQL server itself killed with SIGKILL mid-load and restarted (RELIABILITY.md §3
//! T15), on a throwaway cluster of this test's own (`scripts/postgres` with
//! `FENCEQ_POSTGRES_DIR` pointing elsewhere), so that the server the other tests use is never
//! touched. fsync and synchronous_commit are on (checked).
//!
//! One application (this process): a producer enqueues keyed jobs one by one and in batches
//! of ten, through one `Queue`, and a worker pool on it completes each with a `settle_log`
//! row in the completion's transaction. Every enqueue and completion that returned `Ok` is
//! recorded. Mid-load, `scripts/postgres kill` SIGKILLs the postmaster and all its
//! processes; a call made while the server is down must fail with a clear, typed error;
//! `scripts/postgres restart` starts it again (crash recovery, same port). The same producer,
//! queue and pool then finish the work without being reopened, and the server shows: every
//! acknowledged intake present exactly once, every acknowledged completion completed at its
//! attempt with its domain row, every job completed exactly once.
//!
//! Skipped (with the reason) where initdb and pg_ctl are not installed, except under
//! `CI=true`, where that fails.

use crate::support::*;
use fenceq::diesel::connection::SimpleConnection;
use fenceq::diesel::sql_types::Text;
use fenceq::diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
use fenceq::{Error, NewJob, Outcome, PostgresStore, Queue, RetryPolicy, WorkerPool};
use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const JOBS: usize = 3_000;
const BOUND: Duration = Duration::from_secs(120);
const NO_BACKOFF: RetryPolicy = RetryPolicy { base: Duration::ZERO, max: Duration::ZERO, jitter: 0.0 };

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/postgres")
}

/// A cluster of this test's own (`scripts/postgres` in a directory of its own), or `None`
/// (skipped) without PostgreSQL's programs.
fn own_server() -> Option<ScriptedServer> {
    let found = Command::new(script()).arg("bin").output().expect("run scripts/postgres");
    if !found.status.success() {
        let why = String::from_utf8_lossy(&found.stderr).trim().to_string();
        assert!(!ci(), "CI=true requires the server-kill test, but: {why}");
        eprintln!("skipped: {why}");
        return None;
    }
    Some(ScriptedServer::start("postgres", "FENCEQ_POSTGRES_DIR"))
}

/// The server's log, for its crash recovery.
fn log_of(server: &ScriptedServer) -> String {
    std::fs::read_to_string(server.dir.join("server.log")).unwrap_or_default()
}

#[derive(QueryableByName)]
struct Setting {
    #[diesel(sql_type = Text)]
    setting: String,
}

fn setting(conn: &mut PgConnection, name: &str) -> String {
    sql_query("SELECT setting FROM pg_settings WHERE name = $1")
        .bind::<Text, _>(name)
        .get_result::<Setting>(conn)
        .unwrap()
        .setting
}

/// An error with its sources, as one line.
fn chain(e: &Error) -> String {
    let mut shown = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        shown.push_str(&format!(": {s}"));
        source = s.source();
    }
    shown
}

/// What a call may say while the server is down or just came back: no connection could be
/// had (`Unavailable`, with the server's refusal inside), or the one it had broke
/// (`ConnectionLost`).
fn is_down_error(e: &Error) -> bool {
    matches!(e, Error::Unavailable { .. } | Error::ConnectionLost { .. })
}

/// Everything the application saw, acknowledged or refused.
#[derive(Default)]
struct Seen {
    /// Keys whose enqueue returned `Ok`, and whether that was before the kill.
    keys: Vec<(String, bool)>,
    /// (job, attempt) of every completion that returned `Ok`, and whether before the kill.
    done: Vec<(i64, i32, bool)>,
    /// Errors the producer and the handlers got, as `variant: chain`.
    errors: Vec<String>,
}

fn record_error(seen: &Mutex<Seen>, during: &str, e: &Error) {
    let kind = match e {
        Error::Unavailable { .. } => "Unavailable",
        Error::ConnectionLost { .. } => "ConnectionLost",
        _ => "other",
    };
    seen.lock().unwrap().errors.push(format!("{kind} ({during}): {} / {e:?}", chain(e)));
}

#[test]
fn the_server_killed_with_sigkill_and_restarted_mid_load_loses_nothing_acknowledged_and_the_pool_carries_on() {
    let Some(server) = own_server() else { return };
    let started = Instant::now();
    let mut raw = PgConnection::establish(&server.url).unwrap();
    for name in ["fsync", "synchronous_commit", "full_page_writes"] {
        assert_eq!(setting(&mut raw, name), "on", "{name} must be on for this test");
    }
    // A short busy timeout: a call that cannot get a connection gives up after it plus the
    // connect timeout (10 s), instead of 15 s.
    let q: Queue<PostgresStore> =
        Queue::builder().url(server.url.clone()).busy_timeout(Duration::from_millis(500)).open_postgres().unwrap();
    create_domain_tables(&mut raw, "public");
    drop(raw);

    let seen = Arc::new(Mutex::new(Seen::default()));
    let killed = Arc::new(AtomicBool::new(false));
    let pool = {
        let (seen, killed) = (seen.clone(), killed.clone());
        WorkerPool::builder(q.clone(), "q")
            .workers(4)
            .lease(Duration::from_secs(1))
            .renew_every(Duration::from_millis(250))
            .poll_interval(Duration::from_millis(50))
            .retry_policy(NO_BACKOFF)
            .handler(move |a| {
                let token = a.token();
                match a.complete_with(|tx| log_settle(tx, &token, 0)) {
                    Ok(()) => {
                        let before = !killed.load(Ordering::SeqCst);
                        seen.lock().unwrap().done.push((token.id.0, token.attempt as i32, before));
                        Outcome::Complete
                    }
                    // A stale attempt (its lease ran out while the server was down).
                    Err(Error::OwnershipLost { .. }) => Outcome::Complete,
                    Err(e) => {
                        record_error(&seen, "complete_with", &e);
                        Outcome::retry_after(Duration::ZERO, e.to_string())
                    }
                }
            })
            .start()
            .unwrap()
    };

    // The producer: every key until its enqueue returned Ok (a failed call is retried with
    // the same key, so an intake whose commit outlived its connection is not doubled).
    let producer = {
        let (q, seen, killed) = (q.clone(), seen.clone(), killed.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + BOUND;
            let mut n = 0;
            while n < JOBS {
                let keys: Vec<String> =
                    (n..(n + if n % 100 < 50 { 1 } else { 10 }).min(JOBS)).map(|i| format!("k-{i}")).collect();
                let result = if keys.len() == 1 {
                    q.enqueue(job(&keys[0])).map(drop)
                } else {
                    q.enqueue_batch(keys.iter().map(|k| job(k))).map(drop)
                };
                match result {
                    Ok(()) => {
                        let before = !killed.load(Ordering::SeqCst);
                        seen.lock().unwrap().keys.extend(keys.iter().map(|k| (k.clone(), before)));
                        n += keys.len();
                    }
                    Err(e) => {
                        record_error(&seen, "enqueue", &e);
                        assert!(Instant::now() < deadline, "the producer gave up: {}", chain(&e));
                    }
                }
            }
        })
    };

    wait_for("load before the kill", BOUND, || {
        let seen = seen.lock().unwrap();
        seen.keys.len() >= 600 && seen.done.len() >= 200
    });
    let (keys_before, done_before) = {
        let seen = seen.lock().unwrap();
        (seen.keys.len(), seen.done.len())
    };
    killed.store(true, Ordering::SeqCst);
    server.run("kill");

    // While it is down, a call fails, with a typed error that says why.
    let probe_started = Instant::now();
    let err = q.enqueue(job("k-probe")).expect_err("an enqueue while the server is down");
    let probe_took = probe_started.elapsed();
    let said = chain(&err);
    assert!(is_down_error(&err), "{said} / {err:?}");
    assert!(
        said.contains("Connection refused") || said.contains("connection to the postgresql server"),
        "the error says the server cannot be reached: {said}"
    );
    assert!(probe_took < Duration::from_secs(30), "the failing call returned after {probe_took:?}");

    server.run("restart");
    let log = log_of(&server);
    assert!(
        log.contains("not properly shut down") || log.contains("automatic recovery"),
        "no crash recovery in:\n{log}"
    );
    // The same queue takes the probe's intake now: each refused call is a retryable error,
    // and the pool's connections come back within a bound (its reconnects back off, and a
    // loaded machine slows the server's recovery, so the bound is in time, not in tries).
    let deadline = Instant::now() + BOUND;
    loop {
        match q.enqueue(job("k-probe")) {
            Ok(_) => break,
            Err(e) => {
                assert!(is_down_error(&e), "{}", chain(&e));
                assert!(
                    Instant::now() < deadline,
                    "the queue does not work {BOUND:?} after the restart: {}",
                    chain(&e)
                );
            }
        }
    }
    seen.lock().unwrap().keys.push(("k-probe".into(), false));
    producer.join().expect("the producer finished");
    assert!(pool.wait_idle(BOUND).unwrap(), "the pool finished the remaining jobs");
    let report = pool.shutdown(Duration::from_secs(30)).unwrap();

    // What the server has, after the crash and the restart.
    let mut raw = PgConnection::establish(&server.url).unwrap();
    #[derive(QueryableByName)]
    struct Key {
        #[diesel(sql_type = Text)]
        key: String,
    }
    let keys: Vec<String> = sql_query("SELECT key FROM fenceq_jobs ORDER BY id")
        .load::<Key>(&mut raw)
        .unwrap()
        .into_iter()
        .map(|k| k.key)
        .collect();
    let stored: HashSet<&String> = keys.iter().collect();
    assert_eq!(stored.len(), keys.len(), "no key stored twice");
    let seen = seen.lock().unwrap();
    let lost_keys: Vec<&String> = seen.keys.iter().map(|(k, _)| k).filter(|k| !stored.contains(k)).collect();
    assert!(lost_keys.is_empty(), "acknowledged intakes lost: {lost_keys:?}");
    assert_eq!(keys.len(), JOBS + 1, "every key, and nothing else");
    let completed = attempts(&mut raw, "SELECT id, attempt FROM fenceq_jobs WHERE state = 'completed'");
    let completed: HashSet<(i64, i32)> = completed.into_iter().map(|a| (a.id, a.attempt)).collect();
    let logged = attempts(&mut raw, "SELECT job_id AS id, attempt FROM settle_log");
    let logged: HashSet<(i64, i32)> = logged.into_iter().map(|a| (a.id, a.attempt)).collect();
    let lost_done: Vec<_> =
        seen.done.iter().filter(|(id, a, _)| !completed.contains(&(*id, *a)) || !logged.contains(&(*id, *a))).collect();
    assert!(lost_done.is_empty(), "acknowledged completions lost: {lost_done:?}");
    let ledger = ledger(&mut raw);
    let all = JOBS as i64 + 1;
    assert_eq!(ledger, Ledger { jobs: all, completed: all, ..Ledger::default() }, "lost or settled twice");

    // The crash was mid-load, and the same pool and producer carried on after it.
    let (keys_after, done_after) =
        (seen.keys.iter().filter(|k| !k.1).count(), seen.done.iter().filter(|d| !d.2).count());
    assert!(keys_before > 0 && done_before > 0, "acknowledged before the kill: {keys_before} / {done_before}");
    assert!(keys_after > 0 && done_after > 0, "acknowledged after the kill: {keys_after} / {done_after}");
    let unclear: Vec<&String> =
        seen.errors.iter().filter(|e| !e.starts_with("Unavailable") && !e.starts_with("ConnectionLost")).collect();
    assert!(unclear.is_empty(), "errors that do not say the connection is gone: {unclear:#?}");
    let c = report.counters;
    println!("errors the application saw (first 5): {:#?}", &seen.errors[..seen.errors.len().min(5)]);
    println!(
        "server SIGKILL mid-load: acknowledged before the kill {keys_before} intakes, {done_before} completions; \
         after {keys_after} / {done_after}; the probe failed after {probe_took:.1?} with {said:?}; {} errors while down \
         ({} Unavailable, {} ConnectionLost); pool: claimed {} completed {} stale {} errors {}; 0 lost, 0 settled twice; {:.1?}",
        seen.errors.len(),
        seen.errors.iter().filter(|e| e.starts_with("Unavailable")).count(),
        seen.errors.iter().filter(|e| e.starts_with("ConnectionLost")).count(),
        c.claimed,
        c.completed,
        c.stale_settles_rejected,
        c.errors,
        started.elapsed()
    );
}

fn job(key: &str) -> NewJob {
    NewJob::new("q", key.as_bytes().to_vec()).key(key).max_attempts(10_000)
}

#[derive(QueryableByName)]
struct Pid {
    #[diesel(sql_type = fenceq::diesel::sql_types::Integer)]
    pid: i32,
}

/// The pid of a session of `app` whose commit waits for a synchronous standby, if one does.
fn waiting_for_standby(raw: &mut PgConnection, app: &str) -> Option<i32> {
    sql_query("SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'SyncRep'")
        .bind::<Text, _>(app)
        .load::<Pid>(raw)
        .unwrap()
        .first()
        .map(|p| p.pid)
}

/// Runs `call` (given a fresh try number each time) while every commit waits for a standby
/// that does not exist, ends the session of the first commit seen waiting (it has committed
/// on the server; its client never hears so), lets commits through again and returns what
/// `call` answered. A try whose commit did not wait (the server had not yet read its new
/// setting) is made again, at most ten times.
fn with_the_commit_lost<T: Send + 'static>(
    raw: &mut PgConnection,
    app: &str,
    call: impl Fn(u32) -> T + Send + Sync + 'static,
) -> T {
    let call = Arc::new(call);
    raw.batch_execute("ALTER SYSTEM SET synchronous_standby_names = 'fenceq_no_such_standby'").unwrap();
    raw.batch_execute("SELECT pg_reload_conf()").unwrap();
    for attempt in 0..10 {
        let (tx, answered) = std::sync::mpsc::channel();
        let call = call.clone();
        std::thread::spawn(move || tx.send(call(attempt)).unwrap());
        let deadline = Instant::now() + Duration::from_secs(30);
        let ended = loop {
            if let Ok(answer) = answered.try_recv() {
                break Err(answer); // committed without waiting: the setting was not read yet
            }
            if let Some(pid) = waiting_for_standby(raw, app) {
                raw.batch_execute(&format!("SELECT pg_terminate_backend({pid})")).unwrap();
                break Ok(());
            }
            assert!(Instant::now() < deadline, "no commit of {app} waited for the standby");
            std::thread::sleep(Duration::from_millis(5));
        };
        if ended.is_ok() {
            raw.batch_execute("ALTER SYSTEM RESET synchronous_standby_names").unwrap();
            raw.batch_execute("SELECT pg_reload_conf()").unwrap();
            return answered.recv_timeout(BOUND).expect("the call answered once commits went through");
        }
    }
    panic!("no commit of {app} waited for the standby in ten tries");
}

fn rows_with_payload(raw: &mut PgConnection, payload: &str) -> i64 {
    scalar(raw, &format!("SELECT count(*) AS n FROM fenceq_jobs WHERE payload = convert_to('{payload}', 'UTF8')"))
}

/// A commit that lands on the server while its connection is lost (what a failover does to a
/// commit waiting for its synchronous standby): the queue runs a keyed intake again by its
/// key and answers `Duplicate` with the job the lost commit added; `complete_with` reads the
/// job's row and answers with its closure's value; an intake without a key gets
/// `ConnectionLost` with `commit_unknown`, never a second job.
#[test]
fn a_commit_whose_outcome_was_lost_is_answered_where_the_queue_can_tell() {
    let Some(server) = own_server() else { return };
    let app = "fenceq_lost_commit";
    let q: Queue<PostgresStore> =
        Queue::builder().url(with_application_name(&server.url, app)).open_postgres().unwrap();
    let mut raw = PgConnection::establish(&server.url).unwrap();

    // One keyed job.
    let answer = {
        let q = q.clone();
        with_the_commit_lost(&mut raw, app, move |n| q.enqueue(job(&format!("lost-{n}"))))
    };
    let enqueued = answer.expect("a keyed intake whose commit was lost is answered");
    let key = sql_query(format!("SELECT key AS text FROM fenceq_jobs WHERE id = {}", enqueued.id().0))
        .load::<TextRow>(&mut raw)
        .unwrap();
    assert!(matches!(enqueued, fenceq::Enqueued::Duplicate(_)), "the lost commit landed: {enqueued:?}");
    assert_eq!(key.len(), 1, "the answer names the job the lost commit added");
    assert_eq!(rows_with_payload(&mut raw, &key[0].text), 1, "one job for the key");

    // A keyed batch.
    let answer = {
        let q = q.clone();
        with_the_commit_lost(&mut raw, app, move |n| q.enqueue_batch((0..3).map(|i| job(&format!("batch-{n}-{i}")))))
    };
    let enqueued = answer.expect("a keyed batch whose commit was lost is answered");
    assert_eq!(enqueued.len(), 3);
    assert!(enqueued.iter().all(|e| matches!(e, fenceq::Enqueued::Duplicate(_))), "{enqueued:?}");

    // A completion with a domain write: the call reads the row on a new connection and
    // answers with the closure's value, the completion and the write both there once.
    create_domain_tables(&mut raw, "public");
    let tokens: Vec<fenceq::ClaimToken> = (0..10)
        .map(|n| {
            q.enqueue(job(&format!("done-{n}"))).unwrap();
            q.claim("q", "w", Duration::from_secs(600)).unwrap().expect("the job just added").token()
        })
        .collect();
    let answer = {
        let q = q.clone();
        with_the_commit_lost(&mut raw, app, move |n| {
            let token = tokens[n as usize];
            (token, q.complete_with(&token, |tx| log_settle(tx, &token, 0).map(|()| token.id.0)))
        })
    };
    let (token, answer) = answer;
    assert_eq!(answer.expect("a completion whose commit was lost is answered"), token.id.0);
    let state = sql_query(format!("SELECT state AS text FROM fenceq_jobs WHERE id = {}", token.id.0))
        .load::<TextRow>(&mut raw)
        .unwrap();
    assert_eq!(state[0].text, "completed");
    let logged = scalar(&mut raw, &format!("SELECT count(*) AS n FROM settle_log WHERE job_id = {}", token.id.0));
    assert_eq!(logged, 1, "the domain write committed with the completion, once");

    // No key: the outcome stays unknown to the caller, and the job is not added twice.
    let answer = {
        let q = q.clone();
        with_the_commit_lost(&mut raw, app, move |n| {
            let payload = format!("unkeyed-{n}");
            (q.enqueue(NewJob::new("q", payload.clone().into_bytes())), payload)
        })
    };
    let (answer, payload) = answer;
    let err = answer.expect_err("an intake without a key whose commit was lost");
    assert!(matches!(err, Error::ConnectionLost { commit_unknown: true, .. }), "{err:?}");
    assert!(!err.is_retryable());
    assert_eq!(rows_with_payload(&mut raw, &payload), 1, "the lost commit landed, once");
}

#[derive(QueryableByName)]
struct TextRow {
    #[diesel(sql_type = Text)]
    text: String,
}
