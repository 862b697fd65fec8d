//! T5: the kill -9 crash loop (RELIABILITY.md §3 T5, harness recipe in §4).
//!
//! The child is this test binary, run with `--ignored --exact` on the ignored entry point
//! `crash_child` (its spec in `FENCEQ_CRASH_CHILD`): it opens the
//! queue (sometimes an old-schema file, so the kill can land inside the upgrade), enqueues
//! keyed jobs in batches, claims, completes with a domain write in the same transaction
//! (`complete_with` inserting into `settle_log`), retries or abandons some claims, and prints
//! `ACK enq <key>` / `ACK done <id> <attempt>` only after the call returned `Ok`. The parent
//! SIGKILLs it after a random 20–200 ms (10% of the time after 0–10 ms, to hit the open or
//! the upgrade), then checks the file with a raw connection: `integrity_check = ok`, every
//! ACKed enqueue present exactly once, every ACKed completion still completed at its attempt
//! with its domain row, no running row without claim id, worker or lease. Every segment of
//! kills ends with a reap on an advanced clock, a full drain and the §2 checks.
//!
//! This proves survival of an application crash only, not of a power loss.
//!
//! `FENCEQ_CRASH_KILLS=1000 cargo test --test sqlite crash:: -- --nocapture` runs the soak;
//! `FENCEQ_CRASH_SEED=<n>` replays a seed (printed at the start).

use crate::support::{assert_integrity, child_process, complete_logged, wall_ms, Rng, SETTLE_LOG, T0};
use fenceq::rusqlite::{Connection, OptionalExtension};
use fenceq::{Error, ManualClock, NewJob, Queue, SCHEMA_VERSION};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "FENCEQ_CRASH_CHILD";
const CHILD: &str = concat!(module_path!(), "::crash_child");
const DEFAULT_KILLS: u64 = 100;
/// Kills per file; every segment ends with a drain and the §2 checks.
const SEGMENT: u64 = 50;
/// Every this many kills (and at a segment's end) all ACKs so far are re-verified.
const FULL_CHECK_EVERY: u64 = 10;
const CHILD_LEASE: Duration = Duration::from_secs(30);

// ------------------------------------------------------------------------ the child

/// Child side: works on the queue until killed (bounded at 30 s).
#[test]
#[ignore = "child process of the kill -9 tests below; run by them with --ignored --exact"]
fn crash_child() {
    let spec = std::env::var(CHILD_ENV).expect("run by the kill -9 tests, which set FENCEQ_CRASH_CHILD");
    let parts: Vec<&str> = spec.split('|').collect();
    let path = PathBuf::from(parts[0]);
    let iteration: u64 = parts[1].parse().unwrap();
    let previous: Option<u64> = parts[2].parse().ok();
    let seed: u64 = parts[3].parse().unwrap();
    let mut rng = Rng::new(seed ^ iteration.wrapping_mul(0x1000_0001));
    let mut out = std::io::stdout().lock();
    let q = Queue::open(&path).unwrap_or_else(|e| panic!("child open: {e:?}"));
    // libtest prints "test crash_child ... " without a newline first.
    writeln!(out, "\nOPENED").unwrap();
    let worker = format!("child-{iteration}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0u64;
    while Instant::now() < deadline {
        let size = 1 + rng.below(12);
        let keys: Vec<String> = (0..size).map(|i| format!("i{iteration}-{}", n + i)).collect();
        n += size;
        q.enqueue_batch(keys.iter().map(|k| NewJob::new("q", k.as_bytes().to_vec()).key(k.clone())))
            .unwrap_or_else(|e| panic!("child enqueue_batch: {e:?}"));
        for key in &keys {
            writeln!(out, "ACK enq {key}").unwrap();
        }
        // A producer retrying an intake whose ACK the previous crash swallowed.
        if let (Some(prev), 0) = (previous, rng.below(3)) {
            let key = format!("i{prev}-{}", rng.below(40));
            q.enqueue(NewJob::new("q", key.as_bytes().to_vec()).key(key.clone()))
                .unwrap_or_else(|e| panic!("child enqueue: {e:?}"));
            writeln!(out, "ACK enq {key}").unwrap();
        }
        let claimed = q
            .claim_batch("q", &worker, CHILD_LEASE, 1 + rng.below(8) as u32)
            .unwrap_or_else(|e| panic!("child claim: {e:?}"));
        for job in claimed {
            let token = job.token();
            match rng.below(10) {
                0..=6 => {
                    complete_logged(&q, &token).unwrap_or_else(|e| panic!("child complete_with: {e:?}"));
                    writeln!(out, "ACK done {} {}", token.id.0, token.attempt).unwrap();
                }
                7 | 8 => {
                    q.retry(&token, Duration::ZERO, "child retry").unwrap_or_else(|e| panic!("child retry: {e:?}"));
                }
                _ => {} // abandoned: stays running under a live lease until a reaper or reclaim
            }
        }
    }
    std::process::exit(0);
}

// ------------------------------------------------------------------------ the parent

/// What the children acknowledged on one file.
#[derive(Default)]
struct Acks {
    keys: HashSet<String>,
    /// Completed job id → the attempt that completed it.
    done: HashMap<i64, u32>,
}

#[derive(Default, Debug)]
struct Totals {
    kills: u64,
    acked_enqueues: u64,
    acked_completions: u64,
    before_open: u64,
    mid_upgrade: u64,
    upgrade_before_open: u64,
    upgrade_kills: u64,
    drained: u64,
    reaped: u64,
    max_rows_per_file: u64,
}

struct Run {
    stdout: Vec<String>,
}

/// Spawns the child on `path`, kills it after `delay`, returns the complete lines it printed.
fn run_and_kill(path: &Path, iteration: u64, previous: Option<u64>, seed: u64, delay: Duration) -> Run {
    let stderr_path = path.with_extension(format!("stderr-{iteration}"));
    let stderr = std::fs::File::create(&stderr_path).unwrap();
    let prev = previous.map_or_else(|| "-".to_string(), |p| p.to_string());
    let mut child = child_process(CHILD)
        .env(CHILD_ENV, format!("{}|{iteration}|{prev}|{seed}", path.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut lines = Vec::new();
        let mut line = String::new();
        // Bounded: the child ends (killed, or its own 30 s bound) and the pipe closes.
        while reader.read_line(&mut line).unwrap_or(0) > 0 {
            if line.ends_with('\n') {
                lines.push(line.trim_end().to_string());
            }
            line.clear();
        }
        lines
    });
    std::thread::sleep(delay);
    child.kill().unwrap();
    let status = child.wait().unwrap();
    let stdout = reader.join().unwrap();
    if status.signal() != Some(9) {
        let err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        panic!("iteration {iteration}: the child was not killed but ended with {status:?}; stderr:\n{err}");
    }
    let _ = std::fs::remove_file(&stderr_path);
    Run { stdout }
}

fn record(acks: &mut Acks, run: &Run, totals: &mut Totals) -> (Vec<String>, Vec<(i64, u32)>) {
    let (mut keys, mut done) = (Vec::new(), Vec::new());
    for line in &run.stdout {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["ACK", "enq", key] => {
                totals.acked_enqueues += 1;
                acks.keys.insert(key.to_string());
                keys.push(key.to_string());
            }
            ["ACK", "done", id, attempt] => {
                totals.acked_completions += 1;
                let (id, attempt): (i64, u32) = (id.parse().unwrap(), attempt.parse().unwrap());
                let previous = acks.done.insert(id, attempt);
                assert!(previous.is_none(), "job {id} was ACKed as completed twice ({previous:?} and {attempt})");
                done.push((id, attempt));
            }
            _ => {}
        }
    }
    (keys, done)
}

/// The checks after every kill: integrity, the ACKs given, claim columns of running rows,
/// completions and their domain rows committed together.
fn check_after_kill(path: &Path, keys: &[String], done: &[(i64, u32)], context: &str) -> u64 {
    let conn = Connection::open(path).unwrap();
    assert_integrity(&conn);
    let mut by_key = conn.prepare("SELECT count(*) FROM fenceq_jobs WHERE queue = 'q' AND key = ?1").unwrap();
    for key in keys {
        let n: i64 = by_key.query_row([key], |r| r.get(0)).unwrap();
        assert_eq!(n, 1, "{context}: ACKed key {key} has {n} rows");
    }
    let mut by_id = conn.prepare("SELECT state, attempt FROM fenceq_jobs WHERE id = ?1").unwrap();
    let mut logged = conn.prepare("SELECT count(*) FROM settle_log WHERE job = ?1 AND attempt = ?2").unwrap();
    for &(id, attempt) in done {
        let row: Option<(String, u32)> = by_id.query_row([id], |r| Ok((r.get(0)?, r.get(1)?))).optional().unwrap();
        assert_eq!(row, Some(("completed".to_string(), attempt)), "{context}: ACKed completion of job {id}");
        let n: i64 = logged.query_row([id, attempt.into()], |r| r.get(0)).unwrap();
        assert_eq!(n, 1, "{context}: the domain row of job {id}'s completion");
    }
    // A level-1 file (an upgrade not yet applied) has no claim id column yet.
    let claim = if columns(&conn).iter().any(|c| c == "claim_id") { "claim_id IS NULL OR " } else { "" };
    let broken: i64 = conn
        .query_row(
            &format!(
                "SELECT count(*) FROM fenceq_jobs
                 WHERE state = 'running' AND ({claim}lease_until IS NULL OR worker IS NULL)"
            ),
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(broken, 0, "{context}: a running row without its claim");
    // complete_with: the completion and the domain row commit together or not at all.
    let completed_without_log: i64 = conn
        .query_row(
            "SELECT count(*) FROM fenceq_jobs j WHERE j.state = 'completed' AND j.queue = 'q'
             AND NOT EXISTS (SELECT 1 FROM settle_log s WHERE s.job = j.id AND s.attempt = j.attempt)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let log_without_completion: i64 = conn
        .query_row(
            "SELECT count(*) FROM settle_log s LEFT JOIN fenceq_jobs j ON j.id = s.job
             WHERE j.state IS NOT 'completed' OR j.attempt <> s.attempt",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!((completed_without_log, log_without_completion), (0, 0), "{context}: complete_with atomicity");
    conn.query_row("SELECT count(*) FROM fenceq_jobs", [], |r| r.get::<_, i64>(0)).unwrap() as u64
}

/// Reap on a clock a day ahead, drain every job with `complete_with`, then apply §2.
fn drain_and_check(path: &Path, acks: &Acks, iterations: std::ops::Range<u64>, totals: &mut Totals) {
    let clock = ManualClock::new(wall_ms() + 24 * 3600 * 1000);
    let q = Queue::builder().path(path).clock(clock.clone()).open().unwrap();
    let reaped = q.reap().unwrap();
    totals.reaped += reaped.total();
    for _ in 0..100_000 {
        let batch = q.claim_batch("q", "drain", CHILD_LEASE, 500).unwrap();
        if batch.is_empty() {
            break;
        }
        for job in batch {
            let token = job.token();
            complete_logged(&q, &token).unwrap();
            totals.drained += 1;
        }
    }
    drop(q);
    let conn = Connection::open(path).unwrap();
    assert_integrity(&conn);
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
    assert_eq!(count("SELECT count(*) FROM fenceq_jobs WHERE state IN ('pending', 'running', 'waiting')"), 0);
    // lost = 0: every ACKed key has exactly one row, and it is terminal.
    let mut rows: HashMap<String, (i64, String, u32)> = HashMap::new();
    let mut stmt = conn.prepare("SELECT key, id, state, attempt FROM fenceq_jobs WHERE queue = 'q'").unwrap();
    let all = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).unwrap();
    for row in all {
        let (key, id, state, attempt) = row.unwrap();
        // duplicates = 0 (the unique index promises it; check the rows themselves).
        assert!(rows.insert(key.clone(), (id, state, attempt)).is_none(), "duplicate rows for key {key}");
    }
    totals.max_rows_per_file = totals.max_rows_per_file.max(rows.len() as u64);
    let lost: Vec<&String> = acks.keys.iter().filter(|k| !rows.contains_key(*k)).collect();
    assert!(lost.is_empty(), "lost {} ACKed intakes, e.g. {:?}", lost.len(), &lost[..lost.len().min(5)]);
    for (key, (_, state, _)) in &rows {
        assert!(state == "completed" || state == "exhausted", "key {key} ended {state}");
    }
    // unexpected = 0: every row's key was submitted by one of this file's children.
    let unexpected: Vec<&String> = rows
        .keys()
        .filter(|k| {
            let iteration = k.strip_prefix('i').and_then(|s| s.split_once('-')).and_then(|(i, _)| i.parse().ok());
            !iteration.is_some_and(|i: u64| iterations.contains(&i))
        })
        .collect();
    assert!(unexpected.is_empty(), "unexpected rows: {unexpected:?}");
    // Every acknowledged settle is durable, at the attempt that was acknowledged.
    let by_id: HashMap<i64, (&String, u32)> = rows.iter().map(|(_, (id, s, a))| (*id, (s, *a))).collect();
    for (id, attempt) in &acks.done {
        assert_eq!(by_id.get(id), Some(&(&"completed".to_string(), *attempt)), "ACKed completion of job {id}");
    }
    // Double settlement = 0: at most one completion per job (and per (job, attempt), which the
    // UNIQUE constraint holds), and every completed row has exactly its own domain row.
    assert_eq!(count("SELECT count(*) FROM (SELECT job FROM settle_log GROUP BY job HAVING count(*) > 1)"), 0);
    assert_eq!(
        count("SELECT count(*) FROM fenceq_jobs WHERE state = 'completed'"),
        count("SELECT count(*) FROM settle_log s JOIN fenceq_jobs j ON j.id = s.job AND j.attempt = s.attempt AND j.state = 'completed'")
    );
    assert_eq!(
        count("SELECT count(*) FROM settle_log"),
        count("SELECT count(*) FROM fenceq_jobs WHERE state = 'completed'")
    );
}

/// A database as a build of schema `version` left it, with three rows and the domain table.
fn old_database(path: &Path, version: usize) {
    crate::support::old_database(path, version, "old").execute_batch(SETTLE_LOG).unwrap();
}

fn columns(conn: &Connection) -> Vec<String> {
    let mut stmt = conn.prepare("SELECT name FROM pragma_table_info('fenceq_jobs')").unwrap();
    stmt.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
}

fn old_rows(conn: &Connection) -> Vec<(String, Vec<u8>)> {
    let mut stmt = conn.prepare("SELECT key, payload FROM fenceq_jobs WHERE queue = 'old' ORDER BY id").unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().collect::<Result<_, _>>().unwrap()
}

/// A kill aimed at the open and the schema upgrade of an old file: afterwards the version
/// and the columns agree (each migration is atomic), the old rows are intact, and the
/// engine finishes the upgrade.
fn upgrade_iteration(dir: &Path, iteration: u64, seed: u64, rng: &mut Rng, totals: &mut Totals) {
    let path = dir.join(format!("old-{iteration}.db"));
    let version = 1 + rng.below(2) as usize;
    old_database(&path, version);
    let delay = Duration::from_millis(rng.below(15));
    let run = run_and_kill(&path, iteration, None, seed, delay);
    totals.kills += 1;
    totals.upgrade_kills += 1;
    let mut acks = Acks::default();
    let (keys, done) = record(&mut acks, &run, totals);
    let opened = run.stdout.iter().any(|l| l == "OPENED");
    {
        let conn = Connection::open(&path).unwrap();
        assert_integrity(&conn);
        let found: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert!((version as i64..=SCHEMA_VERSION).contains(&found), "user_version {found}");
        let cols = columns(&conn);
        let has = |c: &str| cols.iter().filter(|x| *x == c).count();
        assert_eq!(has("claim_id"), usize::from(found >= 2), "claim_id at version {found}: {cols:?}");
        assert_eq!(has("exhausted_at"), usize::from(found >= 3), "exhausted_at at version {found}: {cols:?}");
        assert_eq!(has("acknowledged_at"), usize::from(found >= 3), "acknowledged_at at version {found}");
        if found > version as i64 && found < SCHEMA_VERSION {
            totals.mid_upgrade += 1;
        }
        if !opened {
            totals.before_open += 1;
            totals.upgrade_before_open += 1;
        }
        assert_eq!(
            old_rows(&conn),
            vec![("k-pending".into(), vec![1]), ("k-running".into(), vec![2]), ("k-completed".into(), vec![3])]
        );
    }
    check_after_kill(&path, &keys, &done, &format!("upgrade iteration {iteration}"));
    let q = Queue::builder().path(&path).clock(ManualClock::new(T0)).open().unwrap();
    assert_eq!(q.schema_version().unwrap(), SCHEMA_VERSION);
    drop(q);
    let conn = Connection::open(&path).unwrap();
    assert_integrity(&conn);
    assert_eq!(old_rows(&conn).len(), 3);
    drop(conn);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

#[test]
fn kill_nine_at_random_points_loses_no_acknowledged_change() {
    let kills: u64 = std::env::var("FENCEQ_CRASH_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_KILLS);
    let seed: u64 =
        std::env::var("FENCEQ_CRASH_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| wall_ms() as u64);
    println!("crash loop: {kills} kills, seed {seed} (FENCEQ_CRASH_SEED={seed} replays the choices)");
    let started = Instant::now();
    let mut rng = Rng::new(seed);
    let mut totals = Totals::default();
    let mut iteration = 0u64;
    while totals.kills < kills {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        Queue::open(&path).unwrap();
        Connection::open(&path).unwrap().execute_batch(SETTLE_LOG).unwrap();
        let mut acks = Acks::default();
        let first = iteration;
        let mut previous = None;
        let segment_end = (totals.kills + SEGMENT).min(kills);
        while totals.kills < segment_end {
            iteration += 1;
            if iteration.is_multiple_of(10) {
                upgrade_iteration(dir.path(), iteration, seed, &mut rng, &mut totals);
                continue;
            }
            let delay = if rng.below(10) == 0 { rng.below(11) } else { 20 + rng.below(181) };
            let run = run_and_kill(&path, iteration, previous, seed, Duration::from_millis(delay));
            totals.kills += 1;
            if !run.stdout.iter().any(|l| l == "OPENED") {
                totals.before_open += 1;
            }
            let (keys, done) = record(&mut acks, &run, &mut totals);
            let context = format!("iteration {iteration} (killed after {delay} ms)");
            if iteration % FULL_CHECK_EVERY == 1 {
                let keys: Vec<String> = acks.keys.iter().cloned().collect();
                let done: Vec<(i64, u32)> = acks.done.iter().map(|(i, a)| (*i, *a)).collect();
                check_after_kill(&path, &keys, &done, &context);
            } else {
                check_after_kill(&path, &keys, &done, &context);
            }
            previous = Some(iteration);
        }
        drain_and_check(&path, &acks, first + 1..iteration + 1, &mut totals);
    }
    let elapsed = started.elapsed();
    println!("crash loop done in {elapsed:.1?}: {totals:#?}");
    assert!(totals.acked_enqueues > 0 && totals.acked_completions > 0, "the children made progress: {totals:?}");
    assert!(totals.kills >= kills);
}

/// The error a stale ACK would have shown is typed: a completion presented again after a
/// crash (the child's token, replayed by a restarted process) is `OwnershipLost`.
#[test]
fn a_completion_acknowledged_before_a_crash_cannot_be_settled_again_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    Queue::open(&path).unwrap();
    Connection::open(&path).unwrap().execute_batch(SETTLE_LOG).unwrap();
    let run = run_and_kill(&path, 1, None, 7, Duration::from_millis(150));
    let mut acks = Acks::default();
    let mut totals = Totals::default();
    record(&mut acks, &run, &mut totals);
    let q = Queue::open(&path).unwrap();
    let mut checked = 0;
    for (&id, _) in acks.done.iter().take(20) {
        let job = q.job(fenceq::JobId(id)).unwrap().unwrap();
        let token = job.token().unwrap();
        assert!(matches!(q.complete(&token), Err(Error::OwnershipLost { .. })));
        checked += 1;
    }
    assert!(checked > 0 || acks.done.is_empty());
}
