//! The base lifecycle on SQLite's in-memory queue (one shared connection). Every
//! backend-generic lifecycle test is a rule of the conformance kit's base level
//! (`crates/conformance/src/base/lifecycle.rs`, run by `tests/conformance.rs`).

mod common;

use common::*;
use fenceq::NewJob;

#[test]
fn the_in_memory_queue_works_from_several_threads() {
    let q = fenceq::Queue::open_in_memory().unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let q = q.clone();
            s.spawn(move || {
                for i in 0..25 {
                    q.enqueue(NewJob::new("q", format!("{t}-{i}").into_bytes())).unwrap();
                }
            });
        }
    });
    let mut done = 0;
    while let Some(job) = q.claim("q", "w", LEASE).unwrap() {
        q.complete(&job.token()).unwrap();
        done += 1;
    }
    assert_eq!(done, 100);
}
