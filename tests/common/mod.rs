//! Fixtures shared by the integration tests: a queue on its own temp file with a manual clock.
#![allow(dead_code)]

use fenceq::{Claimed, ManualClock, NewJob, Queue};
use std::time::Duration;
use tempfile::TempDir;

/// The manual clock's start: 2023-11-14, far from zero so that subtractions stay positive.
pub const T0: i64 = 1_700_000_000_000;
pub const LEASE: Duration = Duration::from_secs(30);

pub struct TestQueue {
    pub queue: Queue,
    pub clock: ManualClock,
    pub dir: TempDir,
}

impl std::ops::Deref for TestQueue {
    type Target = Queue;
    fn deref(&self) -> &Queue {
        &self.queue
    }
}

impl TestQueue {
    pub fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("queue.db")
    }

    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Enqueues a job with `payload` on queue "q" and returns its id.
    pub fn add(&self, payload: &str) -> fenceq::JobId {
        self.queue.enqueue(NewJob::new("q", payload.as_bytes().to_vec())).unwrap().id()
    }

    /// Claims the next job of "q" as `worker` under the default lease; panics when none is due.
    pub fn take(&self, worker: &str) -> Claimed {
        self.queue.claim("q", worker, LEASE).unwrap().expect("a claimable job")
    }

    /// Opens a second handle on the same file and clock.
    pub fn reopen(&self) -> Queue {
        Queue::builder().path(self.path()).clock(self.clock.clone()).open().unwrap()
    }
}

/// A queue on a fresh temp file, with a manual clock at `T0`.
pub fn temp_queue() -> TestQueue {
    temp_queue_with(|b| b)
}

pub fn temp_queue_with(configure: impl FnOnce(fenceq::QueueBuilder) -> fenceq::QueueBuilder) -> TestQueue {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let builder = Queue::builder().path(dir.path().join("queue.db")).clock(clock.clone());
    let queue = configure(builder).open().unwrap();
    TestQueue { queue, clock, dir }
}

/// Counts rows by state through a raw connection (independent of the engine's own queries).
pub fn raw_count(path: &std::path::Path, state: &str) -> i64 {
    let conn = fenceq::rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT count(*) FROM fenceq_jobs WHERE state = ?1", [state], |r| r.get(0)).unwrap()
}

/// One row's (id, state, attempt, claim_id, lease_until, last_error).
pub type RowSnapshot = (i64, String, i64, Option<Vec<u8>>, Option<i64>, Option<String>);

/// A snapshot of every row (id, state, attempt, claim_id, lease_until, last_error), to assert
/// that a rejected call changed nothing.
pub fn snapshot(path: &std::path::Path) -> Vec<RowSnapshot> {
    let conn = fenceq::rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT id, state, attempt, claim_id, lease_until, last_error FROM fenceq_jobs ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}
