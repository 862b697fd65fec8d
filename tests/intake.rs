//! Idempotent intake: one row per (queue, key) while the row exists, also under contention;
//! batches are all-or-nothing; `enqueue_tx` commits with the caller's transaction.

mod common;

use common::*;
use fenceq::{Enqueued, Error, NewJob};
use std::collections::HashSet;

#[test]
fn the_same_key_enqueued_twice_makes_one_row() {
    let q = temp_queue();
    let first = q.enqueue(NewJob::new("q", b"v1".to_vec()).key("update:4711")).unwrap();
    let second = q.enqueue(NewJob::new("q", b"v2".to_vec()).key("update:4711")).unwrap();
    assert!(matches!(first, Enqueued::New(_)));
    assert_eq!(second, Enqueued::Duplicate(first.id()));
    assert_eq!(q.job(first.id()).unwrap().unwrap().payload, b"v1", "the duplicate changed nothing");
    // The same key on another queue is another job.
    assert!(!q.enqueue(NewJob::new("other", b"v".to_vec()).key("update:4711")).unwrap().is_duplicate());
    assert_eq!(raw_count(&q.path(), "pending"), 2);
}

#[test]
fn the_same_key_from_many_threads_at_once_makes_one_row() {
    let q = temp_queue();
    let barrier = std::sync::Barrier::new(8);
    let results: Vec<Vec<Enqueued>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let q = q.queue.clone();
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    (0..200)
                        .map(|i| {
                            q.enqueue(NewJob::new("q", format!("{t}").into_bytes()).key(format!("event:{}", i % 50)))
                                .unwrap()
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all: Vec<Enqueued> = results.into_iter().flatten().collect();
    let new: Vec<_> = all.iter().filter(|e| !e.is_duplicate()).collect();
    assert_eq!(new.len(), 50, "exactly one new row per key");
    let ids: HashSet<_> = all.iter().map(|e| e.id()).collect();
    assert_eq!(ids.len(), 50, "every caller got the id of the one row");
    assert_eq!(raw_count(&q.path(), "pending"), 50);
}

#[test]
fn a_batch_is_one_transaction_and_dedups_within_itself() {
    let q = temp_queue();
    let existing = q.enqueue(NewJob::new("q", b"x".to_vec()).key("a")).unwrap().id();
    let results = q
        .enqueue_batch(vec![
            NewJob::new("q", b"1".to_vec()).key("a"),
            NewJob::new("q", b"2".to_vec()).key("b"),
            NewJob::new("q", b"3".to_vec()).key("b"),
            NewJob::new("q", b"4".to_vec()),
        ])
        .unwrap();
    assert_eq!(results[0], Enqueued::Duplicate(existing));
    assert!(matches!(results[1], Enqueued::New(_)));
    assert_eq!(results[2], Enqueued::Duplicate(results[1].id()));
    assert!(matches!(results[3], Enqueued::New(_)));
}

#[test]
fn a_batch_with_one_bad_job_adds_nothing() {
    let q = temp_queue();
    let err =
        q.enqueue_batch(vec![NewJob::new("q", b"ok".to_vec()), NewJob::new("", b"no queue".to_vec())]).unwrap_err();
    assert!(matches!(err, Error::InvalidInput { what: "queue name", .. }), "{err}");
    assert_eq!(raw_count(&q.path(), "pending"), 0);
}

#[test]
fn enqueue_tx_commits_or_rolls_back_with_the_callers_transaction() {
    let q = temp_queue();
    let mut conn = fenceq::rusqlite::Connection::open(q.path()).unwrap();
    conn.execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)").unwrap();
    {
        let tx = conn.transaction_with_behavior(fenceq::rusqlite::TransactionBehavior::Immediate).unwrap();
        tx.execute("INSERT INTO orders (item) VALUES ('book')", []).unwrap();
        q.enqueue_tx(&tx, NewJob::new("q", b"ship order 1".to_vec()).key("order:1")).unwrap();
        // dropped without commit: rolled back
    }
    assert_eq!(raw_count(&q.path(), "pending"), 0);
    let tx = conn.transaction_with_behavior(fenceq::rusqlite::TransactionBehavior::Immediate).unwrap();
    tx.execute("INSERT INTO orders (item) VALUES ('book')", []).unwrap();
    let id = q.enqueue_tx(&tx, NewJob::new("q", b"ship order 1".to_vec()).key("order:1")).unwrap().id();
    tx.commit().unwrap();
    assert_eq!(q.take("w").id(), id);
}
