//! claim + complete: one job at a time, and claim_batch(64) + complete_all.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fenceq::NewJob;
use std::time::Duration;

mod common;

const LEASE: Duration = Duration::from_secs(30);

fn claim_complete(c: &mut Criterion) {
    let mut group = c.benchmark_group("claim_complete");
    group.throughput(Throughput::Elements(1));
    group.bench_function("single", |b| {
        let (queue, _dir) = common::filled(10_000);
        b.iter(|| {
            let job = queue.claim("bench", "w", LEASE).unwrap().expect("refilled");
            queue.complete(&job.token()).unwrap();
            // Keep the queue at a constant depth.
            queue.enqueue(NewJob::new("bench", common::payload(0))).unwrap();
        });
    });
    group.throughput(Throughput::Elements(64));
    group.bench_with_input(BenchmarkId::new("batch", 64), &64u32, |b, &n| {
        let (queue, _dir) = common::filled(10_000);
        b.iter(|| {
            let jobs = queue.claim_batch("bench", "w", LEASE, n).unwrap();
            let tokens: Vec<_> = jobs.iter().map(|j| j.token()).collect();
            queue.complete_all(&tokens).unwrap();
            queue.enqueue_batch((0..n as u64).map(|i| NewJob::new("bench", common::payload(i)))).unwrap();
        });
    });
    group.finish();
}

criterion_group!(benches, claim_complete);
criterion_main!(benches);
