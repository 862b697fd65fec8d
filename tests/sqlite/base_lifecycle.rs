//! The base lifecycle on SQLite's in-memory queue (one shared connection). Every
//! backend-generic lifecycle test is a rule of the conformance kit's base level
//! (`crates/conformance/src/base/lifecycle.rs`, run by `tests/conformance.rs`).

use crate::support::*;
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

/// `UnknownOutcome::reason`, the field's old name, still builds and holds the evidence.
#[test]
#[allow(deprecated)]
fn unknown_outcomes_keep_the_deprecated_reason_beside_the_evidence() {
    let queue = fenceq::Queue::open_in_memory().unwrap();
    queue.enqueue(fenceq::NewJob::new("q", b"x".to_vec())).unwrap();
    let claim = queue.claim("q", "w", std::time::Duration::from_secs(30)).unwrap().unwrap();
    queue.mark_unknown(&claim.token, "timed out after sending").unwrap();
    let unknown = queue.unknowns(None, 10).unwrap().items.remove(0);
    assert_eq!(unknown.evidence.as_deref(), Some("timed out after sending"));
    assert_eq!(unknown.reason, unknown.evidence);
}
