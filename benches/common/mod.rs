//! Shared set-up for the criterion benches: a queue on a fresh temp file.
#![allow(dead_code)]

use fenceq::{NewJob, Queue};
use tempfile::TempDir;

/// ~100-byte payload, as in `fenceq bench`.
pub fn payload(i: u64) -> Vec<u8> {
    format!(
        "{{\"update_id\":{i:>12},\"message\":{{\"chat\":4711,\"text\":\"hello from the benchmark, job {i:>10}\"}}}}"
    )
    .into_bytes()
}

/// A queue on a fresh temp file (the directory lives as long as the returned guard).
pub fn queue() -> (Queue, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::builder().path(dir.path().join("bench.db")).pool_size(4).open().unwrap();
    (queue, dir)
}

/// A queue holding `jobs` pending jobs.
pub fn filled(jobs: u64) -> (Queue, TempDir) {
    let (queue, dir) = queue();
    let mut j = 0;
    while j < jobs {
        let end = (j + 5000).min(jobs);
        queue.enqueue_batch((j..end).map(|i| NewJob::new("bench", payload(i)))).unwrap();
        j = end;
    }
    (queue, dir)
}
