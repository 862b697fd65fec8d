//! T3's stale-worker races that are SQLite's own (RELIABILITY.md §3 T3): a completion racing
//! the reaper while the reaper waits on SQLite's single write lock, held by another
//! connection or by the engine's own `complete_with`. The backend-generic T3 scenarios
//! (expire, reap and reclaim; a replay; a pruned max id; a settle racing the reaper in both
//! orders without a lock; the reaper's exhaustion of a last attempt) are rules of the
//! conformance kit's `fenced` level (`crates/conformance/src/fenced/stale_workers.rs`).

use crate::support::*;
use crossbeam_channel::bounded;
use fenceq::rusqlite::{Connection, TransactionBehavior};
use fenceq::{JobState, ManualClock, Queue};
use std::time::Duration;

/// A second handle on the same file with its own clock (another process's view of time).
fn handle_with_clock(q: &TestQueue, now: i64) -> (Queue, ManualClock) {
    let clock = ManualClock::new(now);
    (Queue::builder().path(q.path()).clock(clock.clone()).open().unwrap(), clock)
}

/// A second connection (another process's fenceq) holds the write lock and completes the
/// job by its exact token while the reaper waits for the lock; once it commits, the reaper's
/// transaction sees the completion and changes nothing.
#[test]
fn a_reaper_waiting_on_another_connections_write_lock_does_not_overwrite_its_completion() {
    let q = temp_queue();
    let id = q.add("job");
    let owner = q.take("owner");
    let (reaper, _) = handle_with_clock(&q, T0 + LEASE.as_millis() as i64 + 1);
    assert_eq!(reaper.reap_preview().unwrap().requeued, 1);

    let (locked_tx, locked) = bounded(1);
    let (commit_tx, commit) = bounded::<()>(1);
    let path = q.path();
    let token = owner.token();
    let holder = std::thread::spawn(move || {
        let mut conn = Connection::open(&path).unwrap();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        // The engine's own completion guard, written by hand: exact token and a live lease at
        // the owner's clock (T0 + 1).
        let changed = tx
            .execute(
                "UPDATE fenceq_jobs SET state = 'completed', lease_until = NULL, settled_at = ?4
                 WHERE id = ?1 AND attempt = ?2 AND claim_id = ?3 AND state = 'running' AND lease_until > ?4",
                fenceq::rusqlite::params![token.id.0, token.attempt, token.claim_id.0.as_bytes().as_slice(), T0 + 1],
            )
            .unwrap();
        locked_tx.send(changed).unwrap();
        commit.recv_timeout(HANG_GUARD).unwrap();
        tx.commit().unwrap();
    });
    assert_eq!(locked.recv_timeout(HANG_GUARD).unwrap(), 1, "the owner's guarded completion matched");

    let (reaped_tx, reaped) = bounded(1);
    let reaper_thread = std::thread::spawn(move || reaped_tx.send(reaper.reap()).unwrap());
    // The reaper cannot finish while the lock is held (its busy timeout is 5 s).
    assert!(
        reaped.recv_timeout(Duration::from_millis(300)).is_err(),
        "the reaper must wait for the other connection's write lock"
    );
    commit_tx.send(()).unwrap();
    holder.join().unwrap();
    let report = reaped.recv_timeout(HANG_GUARD).unwrap().unwrap();
    reaper_thread.join().unwrap();
    assert_eq!(report.total(), 0, "the reaper's guarded UPDATE saw the committed completion");
    let job = q.job(id).unwrap().unwrap();
    assert_eq!((job.state, job.attempt, job.lease_until), (JobState::Completed, 1, None));
}

/// The engine's own `complete_with` holds the write lock (its closure is paused) while a
/// reaper in another handle waits: the completion commits and the reaper changes nothing.
#[test]
fn a_reaper_waiting_on_an_engine_completion_in_progress_changes_nothing() {
    let q = temp_queue();
    create_replies(&q.path());
    let id = q.add("job");
    let owner = q.take("owner");
    let (reaper, _) = handle_with_clock(&q, T0 + LEASE.as_millis() as i64 + 1);
    assert_eq!(reaper.reap_preview().unwrap().requeued, 1);

    let (inside_tx, inside) = bounded(1);
    let (go_tx, go) = bounded::<()>(1);
    let worker = q.queue.clone();
    let token = owner.token();
    let completing = std::thread::spawn(move || {
        worker.complete_with(&token, |tx| {
            tx.execute("INSERT INTO replies VALUES (?1, ?2)", [token.id.0, 1])?;
            inside_tx.send(()).unwrap();
            go.recv_timeout(HANG_GUARD).unwrap();
            Ok(())
        })
    });
    inside.recv_timeout(HANG_GUARD).unwrap();
    let (reaped_tx, reaped) = bounded(1);
    let reaper_thread = std::thread::spawn(move || reaped_tx.send(reaper.reap()).unwrap());
    assert!(reaped.recv_timeout(Duration::from_millis(300)).is_err(), "the reaper waits for the lock");
    go_tx.send(()).unwrap();
    completing.join().unwrap().unwrap();
    assert_eq!(reaped.recv_timeout(HANG_GUARD).unwrap().unwrap().total(), 0);
    reaper_thread.join().unwrap();
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Completed);
    assert_eq!(reply_rows(&q.path()), vec![(id.0, 1)]);
}
