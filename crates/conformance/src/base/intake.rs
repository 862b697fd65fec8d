//! Idempotent intake: one row per (queue, key) while the row exists, also under contention;
//! batches are all-or-nothing and dedupe within themselves; `enqueue_tx` commits or rolls
//! back with the caller's transaction.

use crate::fixture::Db;
use crate::harness::Harness;
use crate::Rule;
use fenceq::{Enqueued, Error, NewJob};
use std::collections::HashSet;

/// The rules of this file.
pub(super) fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        the_same_key_enqueued_twice_makes_one_row,
        the_same_key_from_many_threads_at_once_makes_one_row,
        a_batch_is_one_transaction_and_dedups_within_itself,
        a_batch_with_one_bad_job_adds_nothing,
        a_large_batch_answers_as_one_call_per_job_would,
        enqueue_tx_commits_or_rolls_back_with_the_callers_transaction,
    ]
}

fn the_same_key_enqueued_twice_makes_one_row<H: Harness>(h: &H) {
    let db = Db::new(h);
    let first = db.enqueue(NewJob::new("q", b"v1".to_vec()).key("update:4711")).unwrap();
    let second = db.enqueue(NewJob::new("q", b"v2".to_vec()).key("update:4711")).unwrap();
    assert!(matches!(first, Enqueued::New(_)));
    assert_eq!(second, Enqueued::Duplicate(first.id()));
    assert_eq!(db.job(first.id()).unwrap().unwrap().payload, b"v1", "the duplicate changed nothing");
    // The same key on another queue is another job.
    assert!(!db.enqueue(NewJob::new("other", b"v".to_vec()).key("update:4711")).unwrap().is_duplicate());
    assert_eq!(db.count("pending"), 2);
}

fn the_same_key_from_many_threads_at_once_makes_one_row<H: Harness>(h: &H) {
    let db = Db::new(h);
    let barrier = std::sync::Barrier::new(8);
    let results: Vec<Vec<Enqueued>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let q = db.queue.clone();
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
    assert_eq!(db.count("pending"), 50);
}

fn a_batch_is_one_transaction_and_dedups_within_itself<H: Harness>(h: &H) {
    let db = Db::new(h);
    let existing = db.enqueue(NewJob::new("q", b"x".to_vec()).key("a")).unwrap().id();
    let results = db
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

/// Batches of the sizes a store may insert several rows at a time with (and sizes around
/// them): each job gets its own row with its own fields, and duplicates (of a row already
/// there, or of an earlier job of the same batch) answer `Duplicate` with the right id.
fn a_large_batch_answers_as_one_call_per_job_would<H: Harness>(h: &H) {
    let db = Db::new(h);
    let job = |n: usize| {
        NewJob::new("q", format!("payload {n}").into_bytes())
            .key(format!("k{n}"))
            .priority((n % 5) as i32)
            .max_attempts(1 + (n % 4) as u32)
            .delay(std::time::Duration::from_millis((n % 3) as u64 * 1000))
    };
    let check = |n: usize, result: &Enqueued| {
        let row = db.job(result.id()).unwrap().unwrap();
        assert_eq!(
            (row.payload.clone(), row.key.clone(), row.priority, row.max_attempts),
            (format!("payload {n}").into_bytes(), Some(format!("k{n}")), (n % 5) as i32, 1 + (n % 4) as u32),
            "job {n}"
        );
        assert_eq!(row.run_at - row.created_at, (n % 3) as i64 * 1000, "job {n}");
    };
    let mut next = 0;
    let mut seen = HashSet::new();
    for size in [9, 10, 11, 100, 101, 237, 1000] {
        let results = db.enqueue_batch((next..next + size).map(job)).unwrap();
        assert_eq!(results.len(), size);
        for (i, result) in results.iter().enumerate() {
            assert!(matches!(result, Enqueued::New(_)), "batch of {size}, job {i}: {result:?}");
            assert!(seen.insert(result.id()), "every job has its own row");
            check(next + i, result);
        }
        next += size;
    }
    // 150 jobs: job 120 has the key of a row already there, job 130 the key of job 5.
    let before = db.enqueue(job(100_000)).unwrap().id();
    let jobs: Vec<NewJob> = (0..150)
        .map(|i| match i {
            120 => job(100_000),
            130 => job(next + 5),
            _ => job(next + i),
        })
        .collect();
    let results = db.enqueue_batch(jobs).unwrap();
    assert_eq!(results[120], Enqueued::Duplicate(before));
    assert_eq!(results[130], Enqueued::Duplicate(results[5].id()));
    for (i, result) in results.iter().enumerate().filter(|(i, _)| *i != 120 && *i != 130) {
        assert!(matches!(result, Enqueued::New(_)), "job {i}: {result:?}");
        assert!(seen.insert(result.id()), "every job has its own row");
        check(next + i, result);
    }
    assert_eq!(db.count("pending"), (next + 150 - 2 + 1) as i64);
}

fn a_batch_with_one_bad_job_adds_nothing<H: Harness>(h: &H) {
    let db = Db::new(h);
    let err =
        db.enqueue_batch(vec![NewJob::new("q", b"ok".to_vec()), NewJob::new("", b"no queue".to_vec())]).unwrap_err();
    assert!(matches!(err, Error::InvalidInput { what: "queue name", .. }), "{err}");
    assert_eq!(db.count("pending"), 0);
}

/// The application's own transaction (another connection than the queue's) writes its
/// domain row and enqueues the job that goes with it: both roll back together, then both
/// commit together.
fn enqueue_tx_commits_or_rolls_back_with_the_callers_transaction<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.create_replies();
    let job = || NewJob::new("q", b"ship order 1".to_vec()).key("order:1");
    db.harness.foreign_transaction(&db.place, false, &mut |tx| {
        H::insert_reply(tx, 1, 0, "book").unwrap();
        db.enqueue_tx(tx, job()).unwrap();
        // rolled back
    });
    assert_eq!(db.count("pending"), 0);
    assert!(db.replies().is_empty(), "the domain write rolled back with the job");
    let mut id = None;
    db.harness.foreign_transaction(&db.place, true, &mut |tx| {
        H::insert_reply(tx, 1, 0, "book").unwrap();
        id = Some(db.enqueue_tx(tx, job()).unwrap().id());
    });
    assert_eq!(db.take("w").id(), id.unwrap());
    assert_eq!(db.replies(), [(1, 0, "book".to_string())], "the domain write committed with the job");
}
