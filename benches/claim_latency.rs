//! Claim latency as the queue grows: 1k, 100k and 1M pending rows (flat, thanks to the
//! partial index; see the EXPLAIN QUERY PLAN test in src/store/jobs.rs).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use fenceq::NewJob;
use std::time::Duration;

mod common;

fn claim_latency(c: &mut Criterion) {
    let mut group = c.benchmark_group("claim_latency");
    group.sample_size(30);
    for pending in [1_000u64, 100_000, 1_000_000] {
        let (queue, _dir) = common::filled(pending);
        group.bench_with_input(BenchmarkId::from_parameter(pending), &pending, |b, _| {
            b.iter_custom(|iters| {
                let mut claiming = Duration::ZERO;
                for _ in 0..iters {
                    let started = std::time::Instant::now();
                    let job = queue.claim("bench", "w", Duration::from_secs(30)).unwrap().expect("refilled");
                    claiming += started.elapsed();
                    queue.complete(&job.token()).unwrap();
                    queue.enqueue(NewJob::new("bench", common::payload(0))).unwrap();
                }
                claiming
            });
        });
    }
    group.finish();
}

criterion_group!(benches, claim_latency);
criterion_main!(benches);
