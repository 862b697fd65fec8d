//! enqueue: one call per job, and enqueue_batch.

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use fenceq::NewJob;

mod common;

fn enqueue(c: &mut Criterion) {
    let mut group = c.benchmark_group("enqueue");
    group.throughput(Throughput::Elements(1));
    group.bench_function("single", |b| {
        let (queue, _dir) = common::queue();
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            queue.enqueue(NewJob::new("bench", common::payload(i)).key(format!("k{i}"))).unwrap()
        });
    });
    for batch in [100u64, 1000] {
        group.throughput(Throughput::Elements(batch));
        group.bench_with_input(BenchmarkId::new("batch", batch), &batch, |b, &batch| {
            let (queue, _dir) = common::queue();
            let mut i = 0u64;
            b.iter_batched(
                || {
                    let jobs: Vec<NewJob> =
                        (i..i + batch).map(|j| NewJob::new("bench", common::payload(j)).key(format!("k{j}"))).collect();
                    i += batch;
                    jobs
                },
                |jobs| queue.enqueue_batch(jobs).unwrap(),
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, enqueue);
criterion_main!(benches);
