//! T4: multi-thread, multi-process stress on a real WAL file (RELIABILITY.md §3 T4), checked
//! with the §2 definition of "nothing lost".
//!
//! On one file, with the wall clock and 50 ms leases: producers enqueue keyed jobs (single
//! and batched); pool A (8 workers) on one handle, pool B (4 workers) on a second handle,
//! and pool C (4 workers) in a child process (this binary, run with `--ignored --exact` on
//! the ignored entry point `stress_child`) work them with a
//! handler that writes its side effect through `Attempt::with_ownership`, sometimes sleeps
//! past its lease (a GC pause), retries or panics; two hand-written workers claim and settle
//! with `complete_with` without renewing; the maintenance thread reaps, prunes and
//! checkpoints every few tens of ms while a second maintenance loop does the same on the
//! other handle. A trigger logs every transition into `completed`, so double settlements
//! are visible even after pruning.
//!
//! After a full drain: lost = 0, unexpected = 0, duplicate rows = 0, double settlement = 0,
//! every settle in `settle_log` matches its row's final attempt, and no `Error::Busy` (or any
//! other error but a fenced `OwnershipLost`) reached a caller: `PoolCounters.errors == 0` in
//! every pool, and the producers, workers and maintenance loops count their own.
//!
//! `FENCEQ_STRESS_JOBS` (default 10,000) sizes the run.
//!
//! Also here: deterministic reproductions of what a panicking closure does to the writer.

use crate::support::{
    assert_integrity, child_process, complete_logged, create_replies, parse_counts, replies, Rng, HANG_GUARD,
    SETTLE_LOG,
};

use crossbeam_channel::bounded;
use fenceq::rusqlite::{Connection, OptionalExtension};
use fenceq::{
    Attempt, Error, JobId, MaintenanceConfig, NewJob, Outcome, PoolCounters, Queue, Retention, RetryPolicy, WorkerPool,
};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "FENCEQ_STRESS_CHILD";
const CHILD: &str = concat!(module_path!(), "::stress_child");
const LEASE: Duration = Duration::from_millis(50);
/// The bound of the whole run (the drain, the loops that run until it ends, the child pool's
/// wait for the stop file), not of one wait like `HANG_GUARD`: the 10,000 jobs take about
/// 10 s on an idle 2-core machine, and a larger `FENCEQ_STRESS_JOBS` needs the room.
const RUN_BOUND: Duration = Duration::from_secs(90);
const NO_BACKOFF: RetryPolicy = RetryPolicy { base: Duration::ZERO, max: Duration::ZERO, jitter: 0.0 };

/// With `SETTLE_LOG`, the hand-written workers' log.
const DOMAIN: &str = "
    CREATE TABLE effects (job INTEGER NOT NULL, attempt INTEGER NOT NULL, UNIQUE (job, attempt));
    CREATE TABLE finals (job INTEGER NOT NULL, attempt INTEGER NOT NULL, claim_id BLOB);
    CREATE TRIGGER finals_on_complete AFTER UPDATE OF state ON fenceq_jobs
    WHEN NEW.state = 'completed'
    BEGIN
        INSERT INTO finals (job, attempt, claim_id) VALUES (NEW.id, NEW.attempt, NEW.claim_id);
    END;";

/// Errors other than `OwnershipLost` that the handler's own `with_ownership` calls saw.
static HANDLER_ERRORS: AtomicU64 = AtomicU64::new(0);

fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish()
}

/// The pools' handler: a side effect fenced by `with_ownership`, sometimes a pause past the
/// lease, a retry or a panic (outside any transaction).
fn handler(a: &mut Attempt, salt: u64) -> Outcome {
    let token = a.token();
    let mut rng = Rng::new(salt ^ (token.id.0 as u64) << 8 ^ token.attempt as u64);
    match rng.below(100) {
        0..=79 => {}
        80..=91 => std::thread::sleep(Duration::from_millis(1 + rng.below(10))),
        _ => std::thread::sleep(Duration::from_millis(60 + rng.below(90))), // past the lease
    }
    let effect = a.with_ownership(|tx| {
        tx.execute("INSERT INTO effects (job, attempt) VALUES (?1, ?2)", [token.id.0, token.attempt.into()])?;
        Ok(())
    });
    match effect {
        Ok(()) => {}
        Err(Error::OwnershipLost { .. }) => return Outcome::retry("lost the job before the effect"),
        Err(e) => {
            eprintln!("with_ownership failed: {e:?}");
            HANDLER_ERRORS.fetch_add(1, Ordering::SeqCst);
            return Outcome::retry(format!("{e}"));
        }
    }
    match rng.below(100) {
        0..=89 => Outcome::Complete,
        90..=95 => Outcome::retry_after(Duration::ZERO, "transient"),
        _ => panic!("handler bug (outside any transaction)"),
    }
}

fn start_pool(q: &Queue, workers: usize, prefix: &str, salt: u64) -> WorkerPool {
    WorkerPool::builder(q.clone(), "q")
        .workers(workers)
        .lease(LEASE)
        .renew_every(Duration::from_millis(35))
        .poll_interval(Duration::from_millis(10))
        .retry_policy(NO_BACKOFF)
        .worker_id(prefix)
        .handler(move |a| handler(a, salt))
        .start()
        .unwrap()
}

fn open(path: &Path) -> Queue {
    Queue::builder().path(path).pool_size(4).open().unwrap()
}

fn format_counters(c: &PoolCounters) -> String {
    format!(
        "claimed={} completed={} retried={} exhausted={} panicked={} stale={} renewals_failed={} errors={}",
        c.claimed,
        c.completed,
        c.retried,
        c.exhausted,
        c.panicked,
        c.stale_settles_rejected,
        c.renewals_failed,
        c.errors
    )
}

// ------------------------------------------------------------------------ child pool

/// Child side: pool C on the same file until the stop file appears (bounded), then prints
/// its counters.
#[test]
#[ignore = "child process of stress_on_a_wal_file_loses_nothing_settles_once_and_never_surfaces_busy; run by it with --ignored --exact"]
fn stress_child() {
    let spec = std::env::var(CHILD_ENV).expect("run by the stress test, which sets FENCEQ_STRESS_CHILD");
    let (path, stop) = spec.split_once('|').unwrap();
    let q = open(Path::new(path));
    let pool = start_pool(&q, 4, "child", seed());
    println!("\nCHILD-STARTED");
    let bound = Instant::now() + RUN_BOUND;
    while !Path::new(stop).exists() && Instant::now() < bound {
        std::thread::sleep(Duration::from_millis(20));
    }
    let report = pool.shutdown(Duration::from_secs(30)).unwrap();
    let c = report.counters;
    println!(
        "\nCHILD {} still_running={} handler_errors={}",
        format_counters(&c),
        report.still_running.len(),
        HANDLER_ERRORS.load(Ordering::SeqCst)
    );
}

// ------------------------------------------------------------------------ the stress run

#[derive(Default)]
struct CallerErrors {
    errors: Mutex<Vec<String>>,
}

impl CallerErrors {
    fn record(&self, who: &str, e: &Error) {
        self.errors.lock().unwrap().push(format!("{who}: {e:?}"));
    }
}

#[test]
fn stress_on_a_wal_file_loses_nothing_settles_once_and_never_surfaces_busy() {
    let jobs: u64 = std::env::var("FENCEQ_STRESS_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000) / 2 * 2;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stress.db");
    let stop_file = dir.path().join("stop");
    let q1 = open(&path);
    Connection::open(&path).unwrap().execute_batch(&format!("{SETTLE_LOG}; {DOMAIN}")).unwrap();
    let q2 = open(&path);
    let errors = Arc::new(CallerErrors::default());

    // Pool C in another process.
    let mut child = child_process(CHILD)
        .env(CHILD_ENV, format!("{}|{}", path.display(), stop_file.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let child_out = child.stdout.take().unwrap();
    let child_reader = std::thread::spawn(move || {
        BufReader::new(child_out).lines().map_while(Result::ok).filter(|l| l.starts_with("CHILD")).collect::<Vec<_>>()
    });
    let child_err = child.stderr.take().unwrap();
    let child_err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(child_err), &mut s);
        s
    });

    let pool_a = start_pool(&q1, 8, "pool-a", seed());
    let pool_b = start_pool(&q2, 4, "pool-b", seed() ^ 1);
    let maintenance = q1
        .start_maintenance(MaintenanceConfig {
            reap_every: Duration::from_millis(25),
            prune_every: Duration::from_millis(100),
            retention: Retention { older_than: Duration::from_millis(200), batch_size: 50 },
            checkpoint_every: Duration::from_millis(100),
            ..MaintenanceConfig::default()
        })
        .unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let manual_settles = Arc::new(AtomicU64::new(0));
    let manual_stale = Arc::new(AtomicU64::new(0));
    let submitted: Arc<Mutex<HashSet<String>>> = Arc::default();
    let acked: Arc<Mutex<HashMap<String, JobId>>> = Arc::default();
    let mut threads = Vec::new();

    // Two producers, alternating single and batched intake, some keys submitted twice.
    for p in 0..2u64 {
        let (q, errors, submitted, acked) = (q1.clone(), errors.clone(), submitted.clone(), acked.clone());
        threads.push(std::thread::spawn(move || {
            let mut rng = Rng::new(seed() ^ p);
            let mut n = 0;
            // This producer's keys that were enqueued again after pruning: their latest job.
            let mut latest: HashMap<String, JobId> = HashMap::new();
            let mut again = 0u64;
            while n < jobs / 2 {
                let size = (1 + rng.below(20)).min(jobs / 2 - n);
                let keys: Vec<String> = (n..n + size).map(|i| format!("p{p}-{i}")).collect();
                n += size;
                submitted.lock().unwrap().extend(keys.iter().cloned());
                let result = if size == 1 {
                    q.enqueue(NewJob::new("q", keys[0].as_bytes().to_vec()).key(keys[0].clone())).map(|e| vec![e])
                } else {
                    q.enqueue_batch(keys.iter().map(|k| NewJob::new("q", k.as_bytes().to_vec()).key(k.clone())))
                };
                match result {
                    Ok(results) => {
                        let mut acked = acked.lock().unwrap();
                        for (key, e) in keys.iter().zip(results) {
                            assert!(!e.is_duplicate(), "{key} was new");
                            acked.insert(key.clone(), e.id());
                        }
                    }
                    Err(e) => errors.record("producer", &e),
                }
                // A retried submission of an earlier key: a duplicate of the key's latest job,
                // or, once that job was settled and pruned (the dedup horizon), a new job
                // with a higher id, which later resubmissions must then find.
                if rng.below(5) == 0 {
                    let key = format!("p{p}-{}", rng.below(n));
                    let known = latest.get(&key).copied().or_else(|| acked.lock().unwrap().get(&key).copied());
                    match (q.enqueue(NewJob::new("q", key.as_bytes().to_vec()).key(key.clone())), known) {
                        (Ok(e), Some(id)) if e.id() == id && e.is_duplicate() => {}
                        (Ok(e), Some(id)) if !e.is_duplicate() && e.id() > id => {
                            again += 1;
                            acked.lock().unwrap().insert(format!("{key}#again{again}"), e.id());
                            latest.insert(key, e.id());
                        }
                        (Ok(e), known) => panic!("resubmitted {key}: {e:?}, latest known {known:?}"),
                        (Err(e), _) => errors.record("producer resubmit", &e),
                    }
                }
            }
        }));
    }

    // Two hand-written workers on the second handle: claim, maybe stall past the lease
    // without renewing, complete with a domain write in the same transaction.
    for w in 0..2u64 {
        let (q, errors, done) = (q2.clone(), errors.clone(), done.clone());
        let (settles, stale) = (manual_settles.clone(), manual_stale.clone());
        threads.push(std::thread::spawn(move || {
            let mut rng = Rng::new(seed() ^ (w + 10));
            let worker = format!("manual-{w}");
            let bound = Instant::now() + RUN_BOUND;
            while !done.load(Ordering::SeqCst) && Instant::now() < bound {
                let batch = match q.claim_batch("q", &worker, LEASE, 4) {
                    Ok(b) => b,
                    Err(e) => {
                        errors.record("manual claim", &e);
                        continue;
                    }
                };
                if batch.is_empty() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                for job in batch {
                    if rng.below(10) == 0 {
                        std::thread::sleep(LEASE + Duration::from_millis(10 + rng.below(40)));
                    }
                    match complete_logged(&q, &job.token()) {
                        Ok(()) => settles.fetch_add(1, Ordering::SeqCst),
                        Err(Error::OwnershipLost { .. }) => stale.fetch_add(1, Ordering::SeqCst),
                        Err(e) => {
                            errors.record("manual complete_with", &e);
                            0
                        }
                    };
                }
            }
        }));
    }

    // A second maintenance loop on the other handle, with its errors counted.
    {
        let (q, errors, done) = (q2.clone(), errors.clone(), done.clone());
        threads.push(std::thread::spawn(move || {
            let retention = Retention { older_than: Duration::from_millis(300), batch_size: 20 };
            let bound = Instant::now() + RUN_BOUND;
            while !done.load(Ordering::SeqCst) && Instant::now() < bound {
                if let Err(e) = q.reap() {
                    errors.record("reap", &e);
                }
                if let Err(e) = q.prune(&retention) {
                    errors.record("prune", &e);
                }
                if let Err(e) = q.checkpoint() {
                    errors.record("checkpoint", &e);
                }
                std::thread::sleep(Duration::from_millis(30));
            }
        }));
    }

    // Wait for the producers, then for the drain.
    let producers: Vec<_> = threads.drain(..2).collect();
    for p in producers {
        p.join().unwrap();
    }
    let bound = Instant::now() + RUN_BOUND;
    loop {
        let s = q1.stats().unwrap().queue("q");
        if s.pending + s.running + s.waiting == 0 {
            break;
        }
        assert!(Instant::now() < bound, "the drain did not finish: {s:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    done.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    std::fs::write(&stop_file, b"stop").unwrap();
    let report_a = pool_a.shutdown(Duration::from_secs(30)).unwrap();
    let report_b = pool_b.shutdown(Duration::from_secs(30)).unwrap();
    maintenance.stop();
    let status = child.wait().unwrap();
    let child_lines = child_reader.join().unwrap();
    let child_stderr = child_err_reader.join().unwrap();
    assert!(status.success(), "child pool failed: {status:?}\n{child_stderr}");
    let child_counters =
        parse_counts(child_lines.iter().find(|l| l.starts_with("CHILD ")).expect("the child's counters line"));

    // ---- checks
    let errors = errors.errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "errors reached callers: {errors:?}");
    for (name, report) in [("A", &report_a), ("B", &report_b)] {
        assert!(report.still_running.is_empty(), "pool {name} left {:?}", report.still_running);
        assert_eq!(report.counters.errors, 0, "pool {name}: {}", format_counters(&report.counters));
        // Every panic is one of the handler's deliberate ones (a failed with_ownership would
        // also panic, so this bounds them): retried, never lost.
        assert!(report.counters.panicked <= report.counters.claimed);
    }
    assert_eq!(child_counters["errors"], 0, "child pool: {child_lines:?}");
    assert_eq!(child_counters["still_running"], 0);
    assert_eq!(child_counters["handler_errors"], 0, "the child's handlers saw errors: {child_stderr}");
    assert_eq!(HANDLER_ERRORS.load(Ordering::SeqCst), 0, "the handlers' with_ownership calls saw errors");

    let conn = Connection::open(&path).unwrap();
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
    assert_integrity(&conn);
    assert_eq!(count("SELECT count(*) FROM fenceq_jobs WHERE state IN ('pending', 'running', 'waiting')"), 0);
    let acked = acked.lock().unwrap().clone();
    let submitted = submitted.lock().unwrap().clone();
    let mut row_of = conn.prepare("SELECT key, state FROM fenceq_jobs WHERE id = ?1").unwrap();
    let mut final_of = conn.prepare("SELECT count(*) FROM finals WHERE job = ?1").unwrap();
    let (mut pruned, mut present) = (0, 0);
    for (key, id) in &acked {
        let row: Option<(String, String)> =
            row_of.query_row([id.0], |r| Ok((r.get(0)?, r.get(1)?))).optional().unwrap();
        match row {
            Some((k, state)) => {
                present += 1;
                assert_eq!(Some(k.as_str()), key.split("#again").next(), "job {id}'s key");
                assert!(state == "completed" || state == "exhausted", "{key} ended {state}");
            }
            None => {
                // Gone: only through pruning after completion (the trigger's log survives it).
                let n: i64 = final_of.query_row([id.0], |r| r.get(0)).unwrap();
                assert_eq!(n, 1, "lost: ACKed {key} (job {id}) has no row and was never completed");
                pruned += 1;
            }
        }
    }
    // unexpected = 0 and duplicates = 0.
    let mut keys = conn.prepare("SELECT key FROM fenceq_jobs").unwrap();
    let mut seen = HashSet::new();
    for key in keys.query_map([], |r| r.get::<_, String>(0)).unwrap() {
        let key = key.unwrap();
        assert!(submitted.contains(&key), "unexpected row {key}");
        assert!(seen.insert(key.clone()), "duplicate rows for {key}");
    }
    // Double settlement = 0: one completion per job ever, and it carried the row's final
    // attempt and claim id.
    assert_eq!(count("SELECT count(*) FROM (SELECT job FROM finals GROUP BY job HAVING count(*) > 1)"), 0);
    assert_eq!(
        count("SELECT count(*) FROM finals f JOIN fenceq_jobs j ON j.id = f.job WHERE j.attempt <> f.attempt OR j.claim_id IS NOT f.claim_id"),
        0
    );
    // Every hand-written settle matches the completion the trigger saw.
    assert_eq!(
        count("SELECT count(*) FROM settle_log s LEFT JOIN finals f ON f.job = s.job AND f.attempt = s.attempt WHERE f.job IS NULL"),
        0
    );
    assert_eq!(count("SELECT count(*) FROM settle_log"), manual_settles.load(Ordering::SeqCst) as i64);
    // Every completion by a pool had its fenced side effect at the completing attempt.
    assert_eq!(
        count("SELECT count(*) FROM finals f WHERE NOT EXISTS (SELECT 1 FROM settle_log s WHERE s.job = f.job AND s.attempt = f.attempt)
               AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.job = f.job AND e.attempt = f.attempt)"),
        0
    );
    let redelivered = count("SELECT count(*) FROM (SELECT job FROM effects GROUP BY job HAVING count(*) > 1)");
    let completed = count("SELECT count(*) FROM finals");
    let stale_total = report_a.counters.stale_settles_rejected
        + report_b.counters.stale_settles_rejected
        + child_counters["stale"]
        + manual_stale.load(Ordering::SeqCst);
    println!(
        "stress: {} jobs ACKed ({present} rows left, {pruned} pruned after completion), {completed} completions, \
         {} exhausted, {redelivered} jobs redelivered, {stale_total} stale settles rejected, {} manual settles, {:.1?}\n  \
         pool A {}\n  pool B {}\n  child {}",
        acked.len(),
        count("SELECT count(*) FROM fenceq_jobs WHERE state = 'exhausted'"),
        manual_settles.load(Ordering::SeqCst),
        started.elapsed(),
        format_counters(&report_a.counters),
        format_counters(&report_b.counters),
        child_lines.last().unwrap(),
    );
    assert_eq!(acked.keys().filter(|k| !k.contains("#again")).count() as u64, jobs);
    assert!(child_counters["claimed"] > 0, "the child pool took part");
}

// ------------------------------------------------------------------------ panics in closures

fn domain_queue() -> (tempfile::TempDir, PathBuf, Queue) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    let q = Queue::open(&path).unwrap();
    create_replies(&path);
    (dir, path, q)
}

/// A domain write whose closure panics must not commit, not even with the next write of
/// the process.
#[test]
fn a_panicking_closure_commits_nothing() {
    let (_dir, path, q) = domain_queue();
    q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
    let job = q.claim("q", "w", Duration::from_secs(30)).unwrap().unwrap();
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        q.with_ownership::<()>(&job.token(), |tx| {
            tx.execute("INSERT INTO replies (job) VALUES (1)", [])?;
            panic!("domain bug");
        })
    }));
    assert!(panicked.is_err());
    q.enqueue(NewJob::new("q", b"next".to_vec())).unwrap(); // the process's next write
    assert_eq!(replies(&path), 0, "the panicked closure's insert was committed by the next write");
    q.complete(&job.token()).unwrap();
    assert_eq!(replies(&path), 0);
}

/// After a panicking closure the database must not stay write-locked: another process's
/// writer gets the lock within its busy timeout.
#[test]
fn a_panicking_closure_does_not_keep_the_database_locked() {
    let (_dir, path, q) = domain_queue();
    q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
    let job = q.claim("q", "w", Duration::from_secs(30)).unwrap().unwrap();
    let _ = catch_unwind(AssertUnwindSafe(|| q.complete_with::<()>(&job.token(), |_| panic!("domain bug"))));
    let other = Connection::open(&path).unwrap();
    other.busy_timeout(Duration::from_secs(2)).unwrap();
    other
        .execute_batch("BEGIN IMMEDIATE; INSERT INTO replies (job) VALUES (2); COMMIT;")
        .expect("another writer gets the lock");
}

/// A handler that panics inside `Attempt::with_ownership` in a pool: the pool retries the
/// job, and the panicked write must not be committed with that retry.
#[test]
fn a_pool_handler_panicking_inside_with_ownership_commits_nothing() {
    let (_dir, path, q) = domain_queue();
    q.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(2)).unwrap();
    let (seen_tx, seen) = bounded(4);
    let pool = WorkerPool::builder(q.clone(), "q")
        .workers(1)
        .retry_policy(NO_BACKOFF)
        .poll_interval(Duration::from_millis(10))
        .handler(move |a| {
            seen_tx.send(a.attempt()).unwrap();
            if a.attempt() == 1 {
                let _ = a.with_ownership::<()>(|tx| {
                    tx.execute("INSERT INTO replies (job) VALUES (1)", [])?;
                    panic!("handler bug inside the domain write");
                });
            }
            Outcome::Complete
        })
        .start()
        .unwrap();
    assert_eq!(seen.recv_timeout(HANG_GUARD).unwrap(), 1);
    assert_eq!(seen.recv_timeout(HANG_GUARD).unwrap(), 2, "the panicked attempt was retried");
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert_eq!((report.counters.panicked, report.counters.completed), (1, 1));
    assert_eq!(replies(&path), 0, "the panicked attempt's insert was committed");
}

/// A writer waiting in an open group must be answered even when the request that follows it
/// in the group panics.
#[test]
fn a_group_member_is_answered_when_the_next_member_panics() {
    let (_dir, path, q) = domain_queue();
    for i in 0..2 {
        q.enqueue(NewJob::new("q", vec![i]).key(format!("k{i}"))).unwrap();
    }
    let first = q.claim("q", "w", Duration::from_secs(30)).unwrap().unwrap();
    let second = q.claim("q", "w", Duration::from_secs(30)).unwrap().unwrap();
    let (inside_tx, inside) = bounded(1);
    let (answered_tx, answered) = bounded(1);
    let qa = q.clone();
    // A: the group's first request; it holds the writer until B is queued behind it.
    let a = std::thread::spawn(move || {
        let r = qa.with_ownership(&first.token(), |tx| {
            tx.execute("INSERT INTO replies (job) VALUES (1)", [])?;
            inside_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(300)); // lets B queue on the writer
            Ok(())
        });
        answered_tx.send(r.is_ok()).unwrap();
    });
    inside.recv_timeout(HANG_GUARD).unwrap();
    let qb = q.clone();
    let b = std::thread::spawn(move || {
        let _ = catch_unwind(AssertUnwindSafe(|| qb.with_ownership::<()>(&second.token(), |_| panic!("domain bug"))));
    });
    b.join().unwrap();
    let result = answered.recv_timeout(Duration::from_secs(10));
    // Unblock A either way before asserting, so the test ends.
    q.enqueue(NewJob::new("q", b"unblock".to_vec())).unwrap();
    a.join().unwrap();
    assert_eq!(result, Ok(true), "A was not answered while no other write came");
    assert_eq!(replies(&path), 1);
}
