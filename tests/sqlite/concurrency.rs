//! Many threads on one queue file: no job is handed to two claims, every job settles once.

use crate::support::*;
use fenceq::{JobId, NewJob};
use std::collections::HashMap;

#[test]
fn ten_threads_claiming_ten_thousand_jobs_never_share_one_and_settle_each_once() {
    const JOBS: usize = 10_000;
    let q = temp_queue_with(|b| b.pool_size(8));
    for chunk in (0..JOBS).collect::<Vec<_>>().chunks(1000) {
        q.enqueue_batch(chunk.iter().map(|i| NewJob::new("q", format!("{i}").into_bytes()))).unwrap();
    }
    let per_thread: Vec<Vec<JobId>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..10)
            .map(|t| {
                let q = q.queue.clone();
                s.spawn(move || {
                    let worker = format!("worker-{t}");
                    let mut done = Vec::new();
                    // Bounded: each round claims at least one job or stops.
                    for _ in 0..JOBS {
                        let Some(job) = q.claim("q", &worker, LEASE).unwrap() else { break };
                        q.complete(&job.token()).unwrap();
                        done.push(job.id());
                    }
                    done
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut settled: HashMap<JobId, usize> = HashMap::new();
    for id in per_thread.iter().flatten() {
        *settled.entry(*id).or_default() += 1;
    }
    assert_eq!(settled.len(), JOBS, "every job settled");
    assert!(settled.values().all(|&n| n == 1), "no job settled twice");
    assert!(per_thread.iter().filter(|d| !d.is_empty()).count() > 1, "the work was shared");
    assert_eq!(raw_count(&q.path(), "completed"), JOBS as i64);
}
