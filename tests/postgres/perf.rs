//! The PostgreSQL store's throughput: an `#[ignore]`d figure printer that runs fenceq beside
//! a raw diesel loop on the same server, in interleaved rounds (not a timed assertion):
//!
//! ```text
//! eval "$(scripts/postgres env)"
//! FENCEQ_BENCH_JOBS=5000 FENCEQ_BENCH_ROUNDS=3 cargo test --release --features postgres \
//!     --test postgres -- --ignored --nocapture perf::print_throughput_beside_a_raw_loop
//! ```
//!
//! It runs in a schema of its own on the server named by `FENCEQ_POSTGRES_URL`
//! (`scripts/postgres start`); without one it says it skipped. The claim's plan is tested in
//! the store's unit tests (`store::postgres::plan_tests`).

use fenceq::diesel::connection::SimpleConnection;
use fenceq::diesel::sql_types::{BigInt, Binary, Text};
use fenceq::diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
use fenceq::{NewJob, PostgresStore, Queue};
use std::time::{Duration, Instant};

use crate::support::{env_or, Scratch};

const LEASE: Duration = Duration::from_secs(60);

/// A handle on the test's schema with `pool_size` connections.
fn open(s: &Scratch, pool_size: u32) -> Queue<PostgresStore> {
    s.builder().pool_size(pool_size).open_postgres().expect("open the test schema")
}

// ---------------------------------------------------------------- figures (ignored)

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn rate(n: usize, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

const PAYLOAD: &[u8] = &[b'x'; 100];

fn raw_enqueue(conn: &mut PgConnection, n: usize, per_tx: usize) -> f64 {
    let started = Instant::now();
    let mut done = 0;
    while done < n {
        let take = per_tx.min(n - done);
        conn.transaction(|conn| {
            for _ in 0..take {
                sql_query("INSERT INTO raw_jobs (queue, payload) VALUES ($1, $2)")
                    .bind::<Text, _>("raw")
                    .bind::<Binary, _>(PAYLOAD)
                    .execute(conn)?;
            }
            Ok::<_, fenceq::diesel::result::Error>(())
        })
        .unwrap();
        done += take;
    }
    rate(n, started.elapsed())
}

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

/// One claim and one completion per transaction each (raw SQL, `SKIP LOCKED`).
fn raw_process(conn: &mut PgConnection, n: usize) -> f64 {
    let started = Instant::now();
    for _ in 0..n {
        let id = conn
            .transaction(|conn| {
                sql_query(
                    "UPDATE raw_jobs SET state = 'running' WHERE id = (SELECT id FROM raw_jobs WHERE state = 'pending'
                     ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id",
                )
                .get_result::<Id>(conn)
            })
            .unwrap()
            .id;
        conn.transaction(|conn| {
            sql_query("UPDATE raw_jobs SET state = 'completed' WHERE id = $1").bind::<BigInt, _>(id).execute(conn)
        })
        .unwrap();
    }
    rate(n, started.elapsed())
}

fn fill(q: &Queue<PostgresStore>, queue: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        q.enqueue_batch(chunk.iter().map(|_| NewJob::new(queue, PAYLOAD.to_vec()))).unwrap();
    }
}

/// `workers` threads each claim one job and complete it until `n` are done.
fn process(q: &Queue<PostgresStore>, queue: &str, n: usize, workers: usize, batch: u32) -> f64 {
    let done = std::sync::atomic::AtomicUsize::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for w in 0..workers {
            let (q, done) = (q.clone(), &done);
            scope.spawn(move || {
                let worker = format!("w{w}");
                while done.load(std::sync::atomic::Ordering::Relaxed) < n {
                    let jobs = q.claim_batch(queue, &worker, LEASE, batch).unwrap();
                    if jobs.is_empty() {
                        break;
                    }
                    if batch == 1 {
                        q.complete(&jobs[0].token()).unwrap();
                    } else {
                        let tokens: Vec<_> = jobs.iter().map(|j| j.token()).collect();
                        for r in q.complete_all(&tokens).unwrap() {
                            r.unwrap();
                        }
                    }
                    done.fetch_add(jobs.len(), std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    rate(done.into_inner(), started.elapsed())
}

/// `producers` threads each enqueue `n / producers` jobs one call at a time.
fn enqueue_each(q: &Queue<PostgresStore>, queue: &str, n: usize, producers: usize) -> f64 {
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..producers {
            let q = q.clone();
            scope.spawn(move || {
                for _ in 0..n / producers {
                    q.enqueue(NewJob::new(queue, PAYLOAD.to_vec())).unwrap();
                }
            });
        }
    });
    rate(n / producers * producers, started.elapsed())
}

fn enqueue_batches(q: &Queue<PostgresStore>, queue: &str, n: usize) -> f64 {
    let started = Instant::now();
    for _ in 0..n / 100 {
        q.enqueue_batch((0..100).map(|_| NewJob::new(queue, PAYLOAD.to_vec()))).unwrap();
    }
    rate(n / 100 * 100, started.elapsed())
}

/// Prints jobs/s of fenceq beside a raw diesel loop on the same server, interleaved
/// rounds, the median of each. Not an assertion: the figures are for the report.
#[test]
#[ignore = "prints figures; run by hand (see the module docs)"]
fn print_throughput_beside_a_raw_loop() {
    let Some(s) = Scratch::new() else { return };
    let n = env_or("FENCEQ_BENCH_JOBS", 2000);
    let rounds = env_or("FENCEQ_BENCH_ROUNDS", 3);
    let q = open(&s, 8);
    let mut raw = s.raw();
    raw.batch_execute(
        "CREATE TABLE raw_jobs (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, queue TEXT NOT NULL,
                                payload BYTEA NOT NULL, state TEXT NOT NULL DEFAULT 'pending');
         CREATE INDEX raw_jobs_pending ON raw_jobs (id) WHERE state = 'pending';",
    )
    .unwrap();
    let columns = [
        "raw enqueue 1/tx",
        "raw enqueue 100/tx",
        "raw claim+complete 1/tx",
        "enqueue 1/call",
        "enqueue 1/call x4 threads",
        "enqueue batch of 100",
        "process W=1",
        "process W=4",
        "process W=4 batch 100",
    ];
    let mut figures: Vec<Vec<f64>> = vec![Vec::new(); columns.len()];
    for round in 0..rounds {
        let queue = format!("bench{round}");
        figures[0].push(raw_enqueue(&mut raw, n, 1));
        figures[3].push(enqueue_each(&q, &queue, n, 1));
        figures[1].push(raw_enqueue(&mut raw, n, 100));
        figures[4].push(enqueue_each(&q, &queue, n, 4));
        figures[5].push(enqueue_batches(&q, &queue, n));
        figures[2].push(raw_process(&mut raw, n));
        // 3n jobs are pending now; process them in three parts.
        figures[6].push(process(&q, &queue, n, 1, 1));
        figures[7].push(process(&q, &queue, n, 4, 1));
        fill(&q, &queue, n);
        figures[8].push(process(&q, &queue, 2 * n, 4, 100));
        raw.batch_execute("TRUNCATE raw_jobs").unwrap();
    }
    println!("jobs/s, median of {rounds} interleaved rounds of {n} jobs (payload 100 bytes):");
    for (name, values) in columns.iter().zip(figures) {
        let shown: Vec<String> = values.iter().map(|v| format!("{v:.0}")).collect();
        println!("  {name:<28} {:>8.0}   ({})", median(values), shown.join(", "));
    }
    let stats = q.commit_stats();
    println!("commit stats: {stats:?}");
}
