//! Group commit: concurrent writers share transactions, yet each request is all-or-nothing
//! on its own and a failed request never fails its neighbours.

mod common;

use common::*;
use fenceq::{Error, NewJob};
use std::sync::Barrier;

#[test]
fn failing_requests_inside_groups_roll_back_alone() {
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
