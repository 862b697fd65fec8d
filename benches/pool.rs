//! End to end through the pool: 4 producers calling enqueue per job, a 4-worker pool
//! completing every job.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

mod common;

fn pool(c: &mut Criterion) {
    const JOBS: u64 = 2000;
    let mut group = c.benchmark_group("pool");
    group.sample_size(10);
    group.throughput(Throughput::Elements(JOBS));
    group.bench_function("end_to_end/4_producers/4_workers", |b| {
        b.iter_custom(|iters| {
            let mut total = std::time::Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir().unwrap();
                let started = std::time::Instant::now();
                fenceq::bench::end_to_end(&dir.path().join("e2e.db"), JOBS, 4, 4, fenceq::Synchronous::Normal).unwrap();
                total += started.elapsed();
            }
            total
        });
    });
    group.finish();
}

criterion_group!(benches, pool);
criterion_main!(benches);
