//! T11: idempotent intake under contention (RELIABILITY.md §3 T11), and the dedup horizon.
//!
//! The same 1,000 provider event ids are submitted by 8 threads (on two handles, so two
//! writers compete inside this process) and 2 processes (this binary, run with `--ignored
//! --exact` on the ignored entry point `intake_child`, its spec in `FENCEQ_INTAKE_CHILD`),
//! each in its own order, half of them one by one and half in
//! batches, all released at one instant: 10,000 contended submissions. Exactly one row per
//! event id, exactly one caller told `New`, every caller given the same id, and the stored
//! payload is the one of the caller that was told `New`.
//!
//! The dedup horizon: a key deduplicates while its row exists, in every state, settled or
//! not; once retention prunes the row, the same key is a new job with a new, greater id (and
//! the old token cannot touch it). Retries after a crash-before-ACK are exercised in
//! tests/sqlite/crash.rs (children resubmit keys of the previous, killed child).

use crate::support::*;
use fenceq::{Enqueued, Error, JobId, JobState, NewJob, Queue, Retention};
use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "FENCEQ_INTAKE_CHILD";
const CHILD: &str = concat!(module_path!(), "::intake_child");
const KEYS: usize = 1000;
const THREADS: usize = 8;
const PROCESSES: usize = 2;

/// One submitter's pass over every key, in an order of its own (a seeded shuffle), one by
/// one or in batches of ten. Returns (key index, new?, id).
fn submit_all(q: &Queue, submitter: &str, seed: u64, batched: bool, start: i64) -> Vec<(usize, bool, JobId)> {
    let mut order: Vec<usize> = (0..KEYS).collect();
    let mut rng = Rng::new(seed);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let job = |k: usize| NewJob::new("events", submitter.as_bytes().to_vec()).key(format!("evt-{k}"));
    spin_until(start);
    let mut out = Vec::with_capacity(KEYS);
    for chunk in order.chunks(if batched { 10 } else { 1 }) {
        let results: Vec<Enqueued> = if batched {
            q.enqueue_batch(chunk.iter().map(|&k| job(k))).unwrap_or_else(|e| panic!("{submitter}: {e:?}"))
        } else {
            vec![q.enqueue(job(chunk[0])).unwrap_or_else(|e| panic!("{submitter}: {e:?}"))]
        };
        for (&k, e) in chunk.iter().zip(results) {
            out.push((k, !e.is_duplicate(), e.id()));
        }
    }
    out
}

/// Child side: one submitter process; prints one line per submission.
#[test]
#[ignore = "child process of ten_thousand_contended_submissions_make_one_row_per_event_and_one_answer; run by it with --ignored --exact"]
fn intake_child() {
    let spec = std::env::var(CHILD_ENV).expect("run by the contended-intake test, which sets FENCEQ_INTAKE_CHILD");
    let parts: Vec<&str> = spec.split('|').collect();
    let (path, start, index) = (parts[0], parts[1].parse().unwrap(), parts[2].parse::<u64>().unwrap());
    let q = Queue::open(path).unwrap();
    let name = format!("process-{index}");
    let results = submit_all(&q, &name, 1000 + index, index.is_multiple_of(2), start);
    let mut out = String::from("\n");
    for (k, new, id) in results {
        out.push_str(&format!("R {k} {} {}\n", u8::from(new), id.0));
    }
    print!("{out}");
}

#[test]
fn ten_thousand_contended_submissions_make_one_row_per_event_and_one_answer() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("intake.db");
    let handles = [Queue::open(&path).unwrap(), Queue::open(&path).unwrap()];
    let start = wall_ms() + 400;
    let children: Vec<_> = (0..PROCESSES)
        .map(|i| {
            child_process(CHILD)
                .env(CHILD_ENV, format!("{}|{start}|{i}", path.display()))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // submitter name → its results
    let mut all: HashMap<String, Vec<(usize, bool, JobId)>> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let q = &handles[t % 2];
                s.spawn(move || {
                    let name = format!("thread-{t}");
                    let results = submit_all(q, &name, t as u64, t % 2 == 1, start);
                    (name, results)
                })
            })
            .collect();
        threads.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child {i}: {:?}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
        let results: Vec<(usize, bool, JobId)> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("R "))
            .map(|l| {
                let w: Vec<&str> = l.split(' ').collect();
                (w[0].parse().unwrap(), w[1] == "1", JobId(w[2].parse().unwrap()))
            })
            .collect();
        all.insert(format!("process-{i}"), results);
    }
    let submissions: usize = all.values().map(Vec::len).sum();
    assert_eq!(submissions, KEYS * (THREADS + PROCESSES));

    // Per key: one id for everybody, exactly one `New`.
    let mut id_of: HashMap<usize, JobId> = HashMap::new();
    let mut winner: HashMap<usize, String> = HashMap::new();
    for (submitter, results) in &all {
        assert_eq!(results.len(), KEYS, "{submitter} submitted every key once");
        for &(k, new, id) in results {
            let first = *id_of.entry(k).or_insert(id);
            assert_eq!(first, id, "evt-{k}: {submitter} was given {id}, another caller {first}");
            if new {
                let previous = winner.insert(k, submitter.clone());
                assert!(previous.is_none(), "evt-{k}: both {previous:?} and {submitter} were told New");
            }
        }
    }
    assert_eq!(winner.len(), KEYS, "every key was New for exactly one caller");

    // The table: one row per event id, with the winner's payload, and nothing else.
    let conn = fenceq::rusqlite::Connection::open(&path).unwrap();
    let mut stmt = conn.prepare("SELECT id, key, payload FROM fenceq_jobs").unwrap();
    let rows: Vec<(i64, String, Vec<u8>)> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(rows.len(), KEYS, "0 duplicate rows");
    for (id, key, payload) in rows {
        let k: usize = key.strip_prefix("evt-").unwrap().parse().unwrap();
        assert_eq!(id_of[&k], JobId(id), "{key}");
        assert_eq!(String::from_utf8(payload).unwrap(), winner[&k], "{key}: the stored payload is the winner's");
    }
    let mut wins: HashMap<&str, usize> = HashMap::new();
    for w in winner.values() {
        *wins.entry(w.as_str()).or_default() += 1;
    }
    println!(
        "intake contention: {submissions} submissions, {KEYS} rows, New per submitter {wins:?}, {:.1?}",
        started.elapsed()
    );
}

/// The dedup horizon, documented: a key deduplicates for as long as its row exists, in every
/// state (pending, running, completed, exhausted, acknowledged); the settled row keeps
/// deduplicating until retention prunes it. After that the same key is a new job, with a
/// new, greater id, and the old row's token cannot touch it. Applications that need a longer
/// horizon keep the retention longer than the provider's redelivery window.
#[test]
fn the_dedup_horizon_is_the_life_of_the_row() {
    let q = temp_queue();
    let job = || NewJob::new("events", b"update 4711".to_vec()).key("update:4711");
    let first = q.enqueue(job()).unwrap();
    assert!(!first.is_duplicate());
    let id = first.id();
    assert_eq!(q.enqueue(job()).unwrap(), Enqueued::Duplicate(id), "pending");
    let claimed = q.claim("events", "w", LEASE).unwrap().unwrap();
    assert_eq!(q.enqueue(job()).unwrap(), Enqueued::Duplicate(id), "running");
    q.complete(&claimed.token()).unwrap();
    assert_eq!(q.enqueue(job()).unwrap(), Enqueued::Duplicate(id), "completed");
    // Still a duplicate one second before the retention horizon passes.
    let retention = Retention::older_than(Duration::from_secs(24 * 3600));
    q.advance(Duration::from_secs(24 * 3600 - 1));
    assert_eq!(q.prune(&retention).unwrap().deleted(), 0);
    assert_eq!(q.enqueue(job()).unwrap(), Enqueued::Duplicate(id), "settled, inside retention");
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Completed, "a duplicate changes nothing");
    // Pruned: the horizon has passed and the key is new again.
    q.advance(Duration::from_secs(1));
    assert_eq!(q.prune(&retention).unwrap().settled, 1);
    let again = q.enqueue(job()).unwrap();
    assert!(matches!(again, Enqueued::New(new) if new > id), "{again:?}");
    assert!(matches!(q.complete(&claimed.token()), Err(Error::OwnershipLost { .. })));
    let reclaimed = q.claim("events", "w", LEASE).unwrap().unwrap();
    assert_eq!((reclaimed.id(), reclaimed.token.attempt), (again.id(), 1));

    // An exhausted row deduplicates until it is acknowledged and pruned.
    let dead = q.enqueue(NewJob::new("events", b"x".to_vec()).key("update:9").max_attempts(1)).unwrap().id();
    while let Some(j) = q.claim("events", "w", LEASE).unwrap() {
        if j.id() == dead {
            q.exhaust(&j.token(), "gave up").unwrap();
        } else {
            q.complete(&j.token()).unwrap();
        }
    }
    q.advance(Duration::from_secs(30 * 24 * 3600));
    q.prune(&retention).unwrap();
    let dup = q.enqueue(NewJob::new("events", b"x".to_vec()).key("update:9")).unwrap();
    assert_eq!(dup, Enqueued::Duplicate(dead), "unacknowledged exhaustions are never pruned");
    let token = q.job(dead).unwrap().unwrap().token().unwrap();
    q.acknowledge(&token).unwrap();
    q.advance(Duration::from_secs(24 * 3600));
    assert_eq!(q.prune(&retention).unwrap().acknowledged, 1);
    assert!(!q.enqueue(NewJob::new("events", b"x".to_vec()).key("update:9")).unwrap().is_duplicate());
}
