//! End to end through the pool: 4 producers calling enqueue per job, a 4-worker pool
//! completing every job (the `fenceq/end_to_end/4_producers` scenario of `fenceq bench`,
//! written out here against the public API, as the bench's own code is a program of its own,
//! `crates/bench`).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fenceq::{NewJob, Outcome, Queue, WorkerPool};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

const JOBS: u64 = 2000;
const PRODUCERS: u64 = 4;
const WORKERS: usize = 4;

/// Enqueues `JOBS` jobs from `PRODUCERS` threads while a `WORKERS`-thread pool completes them;
/// returns once every job is completed and the pool is shut down.
fn end_to_end(path: &Path) {
    let queue = Queue::builder().path(path).pool_size(WORKERS as u32 + 2).open().unwrap();
    let completed = Arc::new(AtomicU64::new(0));
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
    let pool = {
        let completed = completed.clone();
        WorkerPool::builder(queue.clone(), "bench")
            .workers(WORKERS)
            .poll_interval(Duration::from_millis(50))
            .handler(move |_| {
                if completed.fetch_add(1, Ordering::Relaxed) + 1 == JOBS {
                    let _ = done_tx.try_send(());
                }
                Outcome::Complete
            })
            .start()
            .unwrap()
    };
    std::thread::scope(|s| {
        for t in 0..PRODUCERS {
            let queue = &queue;
            s.spawn(move || {
                for j in (t..JOBS).step_by(PRODUCERS as usize) {
                    queue.enqueue(NewJob::new("bench", common::payload(j)).key(format!("k{j}"))).unwrap();
                }
            });
        }
    });
    done_rx.recv_timeout(Duration::from_secs(600)).expect("the jobs did not finish");
    let counters = pool.shutdown(Duration::from_secs(60)).unwrap().counters;
    assert_eq!(counters.completed, JOBS);
}

fn pool(c: &mut Criterion) {
    let mut group = c.benchmark_group("pool");
    group.sample_size(10);
    group.throughput(Throughput::Elements(JOBS));
    group.bench_function("end_to_end/4_producers/4_workers", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir().unwrap();
                let started = Instant::now();
                end_to_end(&dir.path().join("e2e.db"));
                total += started.elapsed();
            }
            total
        });
    });
    group.finish();
}

criterion_group!(benches, pool);
criterion_main!(benches);
