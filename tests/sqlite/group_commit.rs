//! Group commit: concurrent writers share transactions, yet each request is all-or-nothing
//! on its own and a failed request never fails its neighbours. (The leader's bookkeeping is
//! unit-tested deterministically in `src/store/writer.rs`; these run real threads.)

use crate::support::*;
use fenceq::{Error, NewJob};
use std::sync::Barrier;

#[test]
fn failing_closure_writes_roll_back_alone_under_concurrency() {
    let q = temp_queue_with(|b| b.pool_size(4));
    fenceq::rusqlite::Connection::open(q.path())
        .unwrap()
        .execute_batch("CREATE TABLE notes (job INTEGER, n INTEGER UNIQUE)")
        .unwrap();
    const THREADS: usize = 12;
    const PER_THREAD: usize = 150;
    q.enqueue_batch((0..THREADS * PER_THREAD).map(|i| NewJob::new("q", format!("{i}").into_bytes()))).unwrap();
    let claims = q.claim_batch("q", "w", LEASE, (THREADS * PER_THREAD) as u32).unwrap();
    let barrier = Barrier::new(THREADS);
    let outcomes: Vec<(usize, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = claims
            .chunks(PER_THREAD)
            .enumerate()
            .map(|(t, chunk)| {
                let (q, barrier) = (&q.queue, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let (mut ok, mut failed) = (0, 0);
                    for (i, job) in chunk.iter().enumerate() {
                        let n = (t * PER_THREAD + i) as i64;
                        let result = q.complete_with(&job.token(), |tx| {
                            tx.execute("INSERT INTO notes VALUES (?1, ?2)", (job.id().0, n))?;
                            if n % 3 == 0 {
                                // Fails after its domain write and its settle: both must vanish.
                                return Err(Error::domain("refused"));
                            }
                            if n % 3 == 1 {
                                // A constraint violation inside the request.
                                tx.execute("INSERT INTO notes VALUES (?1, ?2)", (job.id().0, n))?;
                            }
                            Ok(())
                        });
                        match result {
                            Ok(()) => ok += 1,
                            Err(_) => failed += 1,
                        }
                    }
                    (ok, failed)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok: usize = outcomes.iter().map(|o| o.0).sum();
    let failed: usize = outcomes.iter().map(|o| o.1).sum();
    let total = THREADS * PER_THREAD;
    assert_eq!(ok, total / 3, "only the n % 3 == 2 requests succeed");
    assert_eq!(failed, total - total / 3);
    let conn = fenceq::rusqlite::Connection::open(q.path()).unwrap();
    let notes: i64 = conn.query_row("SELECT count(*) FROM notes", [], |r| r.get(0)).unwrap();
    let wrong: i64 = conn.query_row("SELECT count(*) FROM notes WHERE n % 3 <> 2", [], |r| r.get(0)).unwrap();
    assert_eq!((notes, wrong), (ok as i64, 0), "failed requests left no domain write");
    assert_eq!(raw_count(&q.path(), "completed"), ok as i64, "and no settle");
    assert_eq!(raw_count(&q.path(), "running"), (total - ok) as i64);
}

#[test]
fn failing_batches_inside_groups_roll_back_alone() {
    let q = temp_queue();
    // Refuses a payload of "bad" after the batch's earlier inserts have run.
    fenceq::rusqlite::Connection::open(q.path())
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER refuse_bad BEFORE INSERT ON fenceq_jobs WHEN NEW.payload = CAST('bad' AS BLOB)
             BEGIN SELECT RAISE(ABORT, 'refused'); END;",
        )
        .unwrap();
    const THREADS: usize = 12;
    const CALLS: usize = 60;
    let barrier = Barrier::new(THREADS);
    let refused: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (q, barrier) = (&q.queue, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let mut refused = 0;
                    for i in 0..CALLS {
                        let bad = (t + i) % 4 == 0;
                        let jobs = (0..3).map(|k| {
                            let payload = if bad && k == 2 { b"bad".to_vec() } else { b"ok".to_vec() };
                            NewJob::new("q", payload).key(format!("{t}:{i}:{k}"))
                        });
                        match q.enqueue_batch(jobs) {
                            Ok(done) => assert!(!bad && done.len() == 3),
                            Err(e) => {
                                assert!(bad, "only refused batches fail: {e}");
                                refused += 1;
                            }
                        }
                    }
                    refused
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(refused, THREADS * CALLS / 4);
    let conn = fenceq::rusqlite::Connection::open(q.path()).unwrap();
    let rows: i64 = conn.query_row("SELECT count(*) FROM fenceq_jobs", [], |r| r.get(0)).unwrap();
    assert_eq!(rows as usize, (THREADS * CALLS - refused) * 3, "a refused batch left none of its rows");
    let stats = q.commit_stats();
    println!("{stats:?}");
    assert!(stats.requests >= (THREADS * CALLS - refused) as u64);
}

#[test]
fn every_concurrent_caller_gets_its_own_result() {
    let q = temp_queue();
    let barrier = Barrier::new(16);
    let results: Vec<Vec<fenceq::Enqueued>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|t| {
                let (q, barrier) = (&q.queue, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    (0..100)
                        .map(|i| q.enqueue(NewJob::new("q", b"x".to_vec()).key(format!("{t}:{i}"))).unwrap())
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (t, mine) in results.iter().enumerate() {
        for (i, enqueued) in mine.iter().enumerate() {
            let job = q.job(enqueued.id()).unwrap().unwrap();
            assert_eq!(job.key, Some(format!("{t}:{i}")), "the id returned is the caller's own row");
        }
    }
}

#[test]
fn at_full_every_answer_follows_a_sync_of_the_wal_and_one_sync_covers_many_commits() {
    let q = temp_queue_with(|b| b.synchronous(fenceq::Synchronous::Full));
    let barrier = Barrier::new(8);
    std::thread::scope(|s| {
        for t in 0..8 {
            let (q, barrier) = (&q.queue, &barrier);
            s.spawn(move || {
                barrier.wait();
                for i in 0..50 {
                    q.enqueue(NewJob::new("q", b"x".to_vec()).key(format!("{t}:{i}"))).unwrap();
                }
            });
        }
    });
    let stats = q.commit_stats();
    assert_eq!(stats.requests, 400);
    assert!(stats.wal_syncs >= 1, "the writer syncs the WAL itself at FULL: {stats:?}");
    assert!(stats.wal_syncs <= stats.transactions, "never more syncs than commits: {stats:?}");
    assert_eq!(raw_count(&q.path(), "pending"), 400);
    let normal = temp_queue();
    normal.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
    assert_eq!(normal.commit_stats().wal_syncs, 0, "NORMAL leaves syncing to checkpoints");
}

#[test]
fn a_failed_wal_sync_poisons_the_writer_until_the_queue_is_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    let q = fenceq::Queue::builder().path(&path).synchronous(fenceq::Synchronous::Full).open().unwrap();
    // The writer opens the WAL for syncing at its first commit; with the file gone (SQLite
    // keeps writing through its own descriptor) that open fails as a failed sync would.
    std::fs::remove_file(format!("{}-wal", path.display())).unwrap();
    let first = q.enqueue(NewJob::new("q", b"a".to_vec()).key("a"));
    assert!(matches!(first, Err(Error::Io(_))), "the unsynced write is not acknowledged: {first:?}");
    for key in ["b", "c"] {
        match q.enqueue(NewJob::new("q", b"x".to_vec()).key(key)) {
            Err(Error::Io(e)) => assert!(e.to_string().contains("reopened"), "{e}"),
            other => panic!("a poisoned writer must refuse writes, got {other:?}"),
        }
    }
    let claim = q.claim("q", "w", LEASE);
    assert!(matches!(claim, Err(Error::Io(_))), "claims are writes too: {claim:?}");
    drop(q);
    let reopened = fenceq::Queue::open(&path).unwrap();
    for key in ["b", "c"] {
        let again = reopened.enqueue(NewJob::new("q", b"x".to_vec()).key(key)).unwrap();
        assert!(matches!(again, fenceq::Enqueued::New(_)), "a refused write never ran: {again:?}");
    }
}
