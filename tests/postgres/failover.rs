//! A real failover under load: a pg_auto_failover formation of this test's own
//! (`scripts/postgres-ha`: a monitor and two nodes, synchronous replication), the queue on its
//! formation URL (both nodes, `target_session_attrs=read-write`), two producer threads
//! enqueueing keyed jobs and a pool of four workers whose handler writes one domain row per
//! job inside `complete_with`; mid-load every process of the primary's node is killed, the
//! monitor promotes the standby, and the same queue handle carries on. Skips without
//! `pg_autoctl` (Debian's `postgresql-15-auto-failover`; `scripts/postgres-ha install`), and
//! fails under `CI=true` without it.

use crate::support::*;
use fenceq::diesel::{sql_query, Connection, PgConnection, RunQueryDsl};
use fenceq::{Error, NewJob, Outcome, PostgresStore, Queue, RetryPolicy, WorkerPool};
use std::collections::{BTreeMap, HashSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KEYS: usize = 600;
const BOUND: Duration = Duration::from_secs(180);
const NO_BACKOFF: RetryPolicy = RetryPolicy { base: Duration::ZERO, max: Duration::ZERO, jitter: 0.0 };

/// A formation of this test's own (`scripts/postgres-ha` in a directory of its own), or
/// `None` (skipped) without `pg_autoctl`.
fn own_formation() -> Option<ScriptedServer> {
    if Command::new("pg_autoctl").arg("--version").output().is_err() {
        assert!(!ci(), "CI=true requires the failover test, but pg_autoctl is not installed");
        eprintln!("skipped: pg_autoctl is not installed (scripts/postgres-ha install)");
        return None;
    }
    Some(ScriptedServer::start("postgres-ha", "FENCEQ_POSTGRES_HA_DIR"))
}

/// What the application saw.
#[derive(Default)]
struct Seen {
    /// Keys whose enqueue returned `Ok`.
    keys: Vec<String>,
    /// Completions (`complete_with` returned `Ok`): job ids.
    done: Vec<i64>,
    /// Errors by kind (`Unavailable`, `ConnectionLost`, `ConnectionLost (commit unknown)`, ...).
    errors: BTreeMap<String, usize>,
    /// From the kill to the first intake and the first completion that returned `Ok`.
    first_intake_after: Option<Duration>,
    first_done_after: Option<Duration>,
    /// The latest intake that returned `Ok`, and the longest time between two of them: the
    /// write outage as the producers saw it.
    last_intake: Option<Instant>,
    longest_gap: Duration,
}

fn kind(e: &Error) -> String {
    match e {
        Error::Unavailable { .. } => "Unavailable".into(),
        Error::ConnectionLost { commit_unknown: true, .. } => "ConnectionLost (commit unknown)".into(),
        Error::ConnectionLost { .. } => "ConnectionLost".into(),
        Error::Busy { .. } => "Busy".into(),
        other => format!("other: {other}"),
    }
}

#[test]
fn a_failover_under_load_loses_no_acknowledged_intake_and_completes_every_job_once() {
    under_load_through("kill-primary");
}

/// A planned switchover (`pg_autoctl perform switchover`) under the same load: the same
/// guarantees, and the figures of what the application saw.
#[test]
fn a_switchover_under_load_loses_no_acknowledged_intake_and_completes_every_job_once() {
    under_load_through("switchover");
}

/// The load, `action` (a verb of `scripts/postgres-ha`) after a quarter of the intakes, and
/// the checks of what the new primary has.
fn under_load_through(action: &str) {
    let Some(formation) = own_formation() else { return };
    let q: Queue<PostgresStore> = Queue::builder()
        .url(formation.url.clone())
        .busy_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(3))
        .open_postgres()
        .unwrap();
    let mut raw = PgConnection::establish(&formation.url).unwrap();
    sql_query("CREATE TABLE done_rows (job_id bigint NOT NULL, attempt int NOT NULL)").execute(&mut raw).unwrap();
    drop(raw);

    let seen = Arc::new(Mutex::new(Seen::default()));
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let pool = {
        let (seen, killed_at) = (seen.clone(), killed_at.clone());
        WorkerPool::builder(q.clone(), "q")
            .workers(4)
            .lease(Duration::from_secs(3))
            .renew_every(Duration::from_millis(500))
            .poll_interval(Duration::from_millis(100))
            .retry_policy(NO_BACKOFF)
            .handler(move |a| {
                let token = a.token();
                // diesel's error through `?`: typed as the store types its own (a lost
                // connection is `ConnectionLost`), not an opaque domain error.
                let write = |tx: &fenceq::PgTx| -> fenceq::Result<()> {
                    sql_query(format!("INSERT INTO done_rows VALUES ({}, {})", token.id.0, token.attempt))
                        .execute(&mut *tx.conn())?;
                    Ok(())
                };
                match a.complete_with(write) {
                    Ok(()) => {
                        let mut seen = seen.lock().unwrap();
                        seen.done.push(token.id.0);
                        if let (Some(at), None) = (*killed_at.lock().unwrap(), seen.first_done_after) {
                            seen.first_done_after = Some(at.elapsed());
                        }
                        Outcome::Complete
                    }
                    // A stale attempt: its lease ran out while no primary could be reached.
                    Err(Error::OwnershipLost { .. }) => Outcome::Complete,
                    Err(e) => {
                        *seen.lock().unwrap().errors.entry(format!("complete_with: {}", kind(&e))).or_default() += 1;
                        Outcome::retry_after(Duration::ZERO, e.to_string())
                    }
                }
            })
            .start()
            .unwrap()
    };

    // Two producers; each key until its enqueue returned Ok (a failed call is retried with the
    // same key, so an intake whose commit outlived its connection is found, not doubled).
    let producers: Vec<_> = (0..2)
        .map(|p| {
            let (q, seen, killed_at) = (q.clone(), seen.clone(), killed_at.clone());
            std::thread::spawn(move || {
                let deadline = Instant::now() + BOUND;
                for i in 0..KEYS / 2 {
                    let key = format!("p{p}-{i}");
                    loop {
                        match q.enqueue(NewJob::new("q", key.as_bytes().to_vec()).key(key.clone())) {
                            Ok(_) => {
                                let mut seen = seen.lock().unwrap();
                                seen.keys.push(key.clone());
                                if let Some(last) = seen.last_intake.replace(Instant::now()) {
                                    seen.longest_gap = seen.longest_gap.max(last.elapsed());
                                }
                                if let (Some(at), None) = (*killed_at.lock().unwrap(), seen.first_intake_after) {
                                    seen.first_intake_after = Some(at.elapsed());
                                }
                                break;
                            }
                            Err(e) => {
                                let retryable = e.is_retryable() || matches!(e, Error::ConnectionLost { .. });
                                *seen.lock().unwrap().errors.entry(format!("enqueue: {}", kind(&e))).or_default() += 1;
                                assert!(retryable, "an error a keyed retry cannot get past: {e:?}");
                                assert!(Instant::now() < deadline, "the producer gave up: {e}");
                            }
                        }
                    }
                }
            })
        })
        .collect();

    wait_for("a quarter of the intakes before the kill", BOUND, || {
        let seen = seen.lock().unwrap();
        seen.keys.len() >= KEYS / 4 && !seen.done.is_empty()
    });
    // Timed from the moment the script returns: after `kill-primary` every process of the
    // primary's node is gone, so a commit that returns Ok afterwards is the new primary's;
    // `switchover` returns once the new primary has its standby (writes resumed before that,
    // which the longest gap between intakes shows).
    let killed = formation.run(action);
    *killed_at.lock().unwrap() = Some(Instant::now());
    let node = String::from_utf8_lossy(&killed.stdout).trim().to_string();
    for producer in producers {
        producer.join().expect("the producers finished");
    }
    assert!(pool.wait_drained(BOUND).unwrap(), "the pool finished every job");
    let report = pool.shutdown(Duration::from_secs(30)).unwrap();

    // What the new primary has.
    let mut raw = PgConnection::establish(&formation.url).unwrap();
    let seen = seen.lock().unwrap();
    let stored: HashSet<String> = fenceq::diesel::sql_query("SELECT key AS value FROM fenceq_jobs")
        .load::<Text>(&mut raw)
        .unwrap()
        .into_iter()
        .map(|t| t.value)
        .collect();
    let lost: Vec<&String> = seen.keys.iter().filter(|k| !stored.contains(*k)).collect();
    assert!(lost.is_empty(), "acknowledged intakes lost in the failover: {lost:?}");
    assert_eq!(seen.keys.len(), KEYS, "every key acknowledged once");
    assert_eq!(scalar(&mut raw, "SELECT count(*) AS n FROM fenceq_jobs"), KEYS as i64, "one job per key");
    assert_eq!(
        scalar(&mut raw, "SELECT count(*) AS n FROM fenceq_jobs WHERE state = 'completed'"),
        KEYS as i64,
        "every job completed; none running, pending or lost"
    );
    assert_eq!(scalar(&mut raw, "SELECT count(*) AS n FROM done_rows"), KEYS as i64, "one domain row per job");
    assert_eq!(
        scalar(&mut raw, "SELECT count(DISTINCT job_id) AS n FROM done_rows"),
        KEYS as i64,
        "no job's domain row written twice"
    );
    let unclear: Vec<&String> = seen.errors.keys().filter(|k| k.contains("other")).collect();
    assert!(unclear.is_empty(), "errors that do not say the server is gone: {unclear:?}");
    println!(
        "{action} ({node}): longest gap between intakes {:?}; first intake after it in {:?}, first completion in {:?}; \
         errors seen: {:?}; \
         pool: claimed {} completed {} stale {} errors {}",
        seen.longest_gap,
        seen.first_intake_after,
        seen.first_done_after,
        seen.errors,
        report.counters.claimed,
        report.counters.completed,
        report.counters.stale_settles_rejected,
        report.counters.errors,
    );
}

#[derive(fenceq::diesel::QueryableByName)]
struct Text {
    #[diesel(sql_type = fenceq::diesel::sql_types::Text)]
    value: String,
}
