//! The bench's scenarios: throughput and latency measured through fenceq's public API side by
//! side with a raw rusqlite baseline on the same disk, in the same process and run.
//! `tests/bench_smoke.rs` runs every scenario at a small size through the binary
//! (`fenceq --json bench`).

use crate::cli::{fail, CliResult, ResultExt};
use fenceq::rusqlite::{self, params, Connection};
use fenceq::{CommitStats, NewJob, Outcome, Queue, Synchronous, WorkerPool};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bench settings.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Jobs per throughput scenario.
    pub jobs: u64,
    /// Worker threads of the end-to-end pool.
    pub workers: usize,
    /// Durability setting of the end-to-end scenario.
    pub sync: Synchronous,
    /// Pending rows for the large claim-latency measurement.
    pub latency_rows: u64,
    /// Where the scratch databases go.
    pub dir: std::path::PathBuf,
}

/// One measured scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// Scenario name.
    pub scenario: String,
    /// Jobs (or operations) per second; for latency scenarios, p50 in microseconds.
    pub value: f64,
    /// Unit of `value`.
    pub unit: &'static str,
    /// Extra key/value details (ratios, p99, RSS).
    pub details: Vec<(String, f64)>,
}

/// ~100-byte payload, as in the baseline.
fn payload(i: u64) -> Vec<u8> {
    format!(
        "{{\"update_id\":{i:>12},\"message\":{{\"chat\":4711,\"text\":\"hello from the benchmark, job {i:>10}\"}}}}"
    )
    .into_bytes()
}

const RAW_SCHEMA: &str = "
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, key TEXT, payload BLOB NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending', attempt INTEGER NOT NULL DEFAULT 0,
        claim_id BLOB, lease_until INTEGER, run_at INTEGER NOT NULL);
    CREATE UNIQUE INDEX jobs_key ON jobs (queue, key) WHERE key IS NOT NULL;
    CREATE INDEX jobs_claim ON jobs (queue, run_at, id) WHERE state = 'pending';";

fn raw_connection(path: &Path, sync: Synchronous) -> CliResult<Connection> {
    let conn = Connection::open(path).context(|| format!("opening the raw baseline {}", path.display()))?;
    conn.execute_batch(&format!("PRAGMA journal_mode = WAL; PRAGMA synchronous = {}; {RAW_SCHEMA}", sync.pragma()))
        .context(|| "creating the raw baseline's schema".to_string())?;
    Ok(conn)
}

/// The raw baseline: enqueue, claim and settle every job through plain rusqlite on a
/// queue-shaped table, `per_tx` operations per transaction (one phase per operation kind).
/// Returns jobs/s end to end.
pub fn raw_baseline(path: &Path, jobs: u64, per_tx: u64, sync: Synchronous) -> CliResult<f64> {
    let mut conn = raw_connection(path, sync)?;
    let started = Instant::now();
    let mut next = 0u64;
    in_transactions(&mut conn, jobs, per_tx, |tx| {
        next += 1;
        tx.prepare_cached("INSERT INTO jobs (queue, key, payload, run_at) VALUES ('q', ?1, ?2, 0)")?
            .execute(params![format!("k{next}"), payload(next)])?;
        Ok(())
    })?;
    let mut ids = Vec::with_capacity(jobs as usize);
    in_transactions(&mut conn, jobs, per_tx, |tx| {
        let id: i64 = tx
            .prepare_cached(
                "UPDATE jobs SET state = 'running', attempt = attempt + 1, claim_id = randomblob(16),
                        lease_until = 30000
                 WHERE id = (SELECT id FROM jobs WHERE queue = 'q' AND state = 'pending' AND run_at <= 1
                             ORDER BY run_at, id LIMIT 1)
                 RETURNING id",
            )?
            .query_row([], |r| r.get(0))?;
        ids.push(id);
        Ok(())
    })?;
    let mut settle = ids.into_iter();
    in_transactions(&mut conn, jobs, per_tx, |tx| {
        let id = settle.next().unwrap_or_default();
        tx.prepare_cached(
            "UPDATE jobs SET state = 'completed', lease_until = NULL WHERE id = ?1 AND state = 'running'",
        )?
        .execute([id])?;
        Ok(())
    })?;
    Ok(jobs as f64 / started.elapsed().as_secs_f64())
}

/// Runs `op` `count` times, `per_tx` calls per IMMEDIATE transaction.
fn in_transactions(
    conn: &mut Connection,
    count: u64,
    per_tx: u64,
    mut op: impl FnMut(&Connection) -> rusqlite::Result<()>,
) -> CliResult<()> {
    let raw = || "the raw baseline".to_string();
    let mut done = 0;
    while done < count {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).context(raw)?;
        let n = per_tx.min(count - done);
        for _ in 0..n {
            op(&tx).context(raw)?;
        }
        tx.commit().context(raw)?;
        done += n;
    }
    Ok(())
}

/// Raw single-row INSERTs, one commit per call, from one thread (the FULL baseline).
pub fn raw_enqueue_per_commit(path: &Path, jobs: u64, sync: Synchronous) -> CliResult<f64> {
    let conn = raw_connection(path, sync)?;
    let started = Instant::now();
    for j in 0..jobs {
        conn.prepare_cached("INSERT INTO jobs (queue, key, payload, run_at) VALUES ('q', ?1, ?2, 0)")
            .and_then(|mut insert| insert.execute(params![format!("k{j}"), payload(j)]))
            .context(|| "the raw baseline".to_string())?;
    }
    Ok(jobs as f64 / started.elapsed().as_secs_f64())
}

fn open(path: &Path, sync: Synchronous, pool: u32) -> CliResult<Queue> {
    Ok(Queue::builder().path(path).synchronous(sync).pool_size(pool).open()?)
}

/// End to end through the public API: `producers` threads call `enqueue` once per job while
/// a `workers`-thread pool completes every job. Returns jobs/s and how the writes were grouped.
pub fn end_to_end(
    path: &Path,
    jobs: u64,
    producers: u64,
    workers: usize,
    sync: Synchronous,
) -> CliResult<(f64, CommitStats)> {
    let queue = open(path, sync, workers as u32 + 2)?;
    let completed = Arc::new(AtomicU64::new(0));
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
    let started = Instant::now();
    let pool = {
        let completed = completed.clone();
        WorkerPool::builder(queue.clone(), "bench")
            .workers(workers)
            .poll_interval(Duration::from_millis(50))
            .handler(move |_| {
                if completed.fetch_add(1, Ordering::Relaxed) + 1 == jobs {
                    let _ = done_tx.try_send(());
                }
                Outcome::Complete
            })
            .start()?
    };
    enqueue_from_threads(&queue, jobs, producers)?;
    done_rx
        .recv_timeout(Duration::from_secs(600))
        .map_err(|_| fail("the bench's jobs did not finish within 10 minutes"))?;
    // Every handler returned; the last settles commit before shutdown returns.
    let counters = pool.shutdown(Duration::from_secs(60))?.counters;
    let elapsed = started.elapsed();
    if counters.completed != jobs {
        return Err(fail(format!("the bench completed {} of {jobs} jobs", counters.completed)));
    }
    Ok((jobs as f64 / elapsed.as_secs_f64(), queue.commit_stats()))
}

/// `threads` threads calling `enqueue` once per job, `jobs` in all (keys `k{n}`).
fn enqueue_from_threads(queue: &Queue, jobs: u64, threads: u64) -> CliResult<()> {
    std::thread::scope(|s| -> CliResult<()> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> CliResult<()> {
                    let mut j = t;
                    while j < jobs {
                        queue.enqueue(NewJob::new("bench", payload(j)).key(format!("k{j}")))?;
                        j += threads;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().expect("enqueue thread panicked"))
    })
}

/// `callers` threads calling `enqueue` (one job per call). Returns jobs/s and how the
/// writes were grouped.
pub fn concurrent_enqueue(path: &Path, jobs: u64, callers: u64, sync: Synchronous) -> CliResult<(f64, CommitStats)> {
    let queue = open(path, sync, 4)?;
    let started = Instant::now();
    enqueue_from_threads(&queue, jobs, callers)?;
    Ok((jobs as f64 / started.elapsed().as_secs_f64(), queue.commit_stats()))
}

/// `enqueue_batch` in batches of 1,000. Returns jobs/s.
pub fn batch_enqueue(path: &Path, jobs: u64) -> CliResult<f64> {
    let queue = open(path, Synchronous::Normal, 2)?;
    let started = Instant::now();
    let mut j = 0;
    while j < jobs {
        let end = (j + 1000).min(jobs);
        queue.enqueue_batch((j..end).map(|i| NewJob::new("bench", payload(i)).key(format!("k{i}"))))?;
        j = end;
    }
    Ok(jobs as f64 / started.elapsed().as_secs_f64())
}

/// `claim_batch(64)` then `complete_all` of the batch, on `jobs` pending jobs. Returns jobs/s.
pub fn claim_batch_settle(path: &Path, jobs: u64) -> CliResult<f64> {
    let queue = open(path, Synchronous::Normal, 2)?;
    fill(&queue, jobs)?;
    let started = Instant::now();
    let mut done = 0;
    while done < jobs {
        let batch = queue.claim_batch("bench", "w", Duration::from_secs(30), 64)?;
        if batch.is_empty() {
            break;
        }
        let tokens: Vec<_> = batch.iter().map(|c| c.token).collect();
        for result in queue.complete_all(&tokens)? {
            result?;
        }
        done += batch.len() as u64;
    }
    Ok(done as f64 / started.elapsed().as_secs_f64())
}

fn fill(queue: &Queue, jobs: u64) -> CliResult<()> {
    let mut j = 0;
    while j < jobs {
        let end = (j + 5000).min(jobs);
        queue.enqueue_batch((j..end).map(|i| NewJob::new("bench", payload(i))))?;
        j = end;
    }
    Ok(())
}

/// p50 and p99 of `claim` (each followed by a `complete`, not timed) with `pending` rows
/// waiting, over `samples` claims. Returns microseconds.
pub fn claim_latency(path: &Path, pending: u64, samples: usize) -> CliResult<(f64, f64)> {
    let queue = open(path, Synchronous::Normal, 2)?;
    fill(&queue, pending)?;
    let mut micros = Vec::with_capacity(samples);
    for _ in 0..samples {
        let started = Instant::now();
        let job =
            queue.claim("bench", "w", Duration::from_secs(30))?.ok_or_else(|| fail("the bench's queue is empty"))?;
        micros.push(started.elapsed().as_secs_f64() * 1e6);
        queue.complete(&job.token())?;
        queue.enqueue(NewJob::new("bench", payload(0)))?; // keep the queue at `pending` rows
    }
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| micros[((micros.len() - 1) as f64 * q).round() as usize];
    Ok((at(0.5), at(0.99)))
}

/// Fills `jobs` pending jobs in batches and works through all of them with
/// `claim_batch(64)` + `complete_all`, returning jobs/s of the whole pass (for the RSS figure).
pub fn work_through(path: &Path, jobs: u64) -> CliResult<f64> {
    let started = Instant::now();
    claim_batch_settle(path, jobs)?;
    Ok(jobs as f64 / started.elapsed().as_secs_f64())
}

/// Median time of one durable small write on the disk under `dir`: a 4 KiB write into a
/// file, then `fdatasync` (what a `FULL` commit of one small transaction costs at least).
/// Returns microseconds.
pub fn sync_latency(dir: &Path, samples: usize) -> CliResult<f64> {
    use std::io::{Seek, SeekFrom, Write};
    let path = dir.join("sync-probe");
    let mut file = std::fs::OpenOptions::new().create(true).truncate(true).read(true).write(true).open(&path)?;
    let page = [0x5a_u8; 4096];
    let mut micros = Vec::with_capacity(samples);
    for i in 0..samples {
        file.seek(SeekFrom::Start((i % 256) as u64 * 4096))?;
        file.write_all(&page)?;
        let started = Instant::now();
        file.sync_data()?;
        micros.push(started.elapsed().as_secs_f64() * 1e6);
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    micros.sort_by(f64::total_cmp);
    Ok(micros[micros.len() / 2])
}

/// Peak resident set size of this process so far, in MiB (Linux; 0 elsewhere).
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(str::to_string))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<f64>().ok()))
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Runs every scenario, calling `report` with each figure as soon as it is measured (a failed
/// report stops the run).
pub fn run(options: &BenchOptions, mut report: impl FnMut(&Figure) -> CliResult<()>) -> CliResult<Vec<Figure>> {
    let dir = &options.dir;
    std::fs::create_dir_all(dir)?;
    let fresh = |name: &str| -> std::path::PathBuf {
        let path = dir.join(format!("{name}.db"));
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        path
    };
    let n = options.jobs;
    let mut figures: Vec<Figure> = Vec::new();
    let mut push = |figure: Figure, figures: &mut Vec<Figure>| -> CliResult<()> {
        report(&figure)?;
        figures.push(figure);
        Ok(())
    };
    let simple = |scenario: &str, value: f64, details: Vec<(String, f64)>| Figure {
        scenario: scenario.to_string(),
        value,
        unit: "jobs/s",
        details,
    };

    let raw_1 = raw_baseline(&fresh("raw_1"), n, 1, options.sync)?;
    push(simple("raw_sqlite/1_op_per_tx", raw_1, vec![]), &mut figures)?;
    let raw_100 = raw_baseline(&fresh("raw_100"), n, 100, options.sync)?;
    push(simple("raw_sqlite/100_ops_per_tx", raw_100, vec![]), &mut figures)?;

    let (e2e, grouping) = end_to_end(&fresh("e2e"), n, 4, options.workers, options.sync)?;
    push(
        simple(
            "fenceq/end_to_end/4_producers",
            e2e,
            vec![
                ("ratio_to_raw_100".into(), e2e / raw_100),
                ("ratio_to_raw_1".into(), e2e / raw_1),
                ("requests_per_tx".into(), grouping.requests_per_transaction()),
            ],
        ),
        &mut figures,
    )?;

    let full_n = (n / 4).max(1000);
    let sync_us = sync_latency(dir, 500)?;
    push(
        Figure { scenario: "disk/fdatasync_4k".into(), value: sync_us, unit: "us_p50", details: vec![] },
        &mut figures,
    )?;
    let raw_full = raw_enqueue_per_commit(&fresh("raw_full"), full_n, Synchronous::Full)?;
    push(simple("raw_sqlite/full/enqueue_1_per_commit", raw_full, vec![]), &mut figures)?;
    const CALLERS: u64 = 16;
    let (full16, grouping) = concurrent_enqueue(&fresh("full16"), full_n, CALLERS, Synchronous::Full)?;
    // Each caller waits for the sync covering its own write, so one sync carries at most one
    // write per caller: no design exceeds CALLERS writes per sync of this disk.
    let ceiling = CALLERS as f64 * 1e6 / sync_us;
    push(
        simple(
            "fenceq/full/enqueue_16_callers",
            full16,
            vec![
                ("ratio_to_raw_full".into(), full16 / raw_full),
                ("requests_per_tx".into(), grouping.requests_per_transaction()),
                ("requests_per_sync".into(), grouping.requests as f64 / grouping.wal_syncs.max(1) as f64),
                ("sync_bound_ratio_ceiling".into(), ceiling / raw_full),
            ],
        ),
        &mut figures,
    )?;

    let batch = batch_enqueue(&fresh("batch"), n * 5)?;
    push(simple("fenceq/enqueue_batch_1000", batch, vec![]), &mut figures)?;
    let claim64 = claim_batch_settle(&fresh("claim64"), n * 2)?;
    push(simple("fenceq/claim_batch_64+complete_all", claim64, vec![]), &mut figures)?;

    let (small_p50, small_p99) = claim_latency(&fresh("lat_small"), 1000, 2000)?;
    let (big_p50, big_p99) = claim_latency(&fresh("lat_big"), options.latency_rows, 2000)?;
    push(
        Figure {
            scenario: format!("fenceq/claim_latency/{}_vs_1000_pending", options.latency_rows),
            value: big_p50,
            unit: "us_p50",
            details: vec![
                ("p99_us".into(), big_p99),
                ("small_p50_us".into(), small_p50),
                ("small_p99_us".into(), small_p99),
                ("p50_ratio".into(), big_p50 / small_p50),
                ("p99_ratio".into(), big_p99 / small_p99),
            ],
        },
        &mut figures,
    )?;
    let through = work_through(&fresh("through"), options.latency_rows)?;
    push(simple(&format!("fenceq/work_through_{}_jobs", options.latency_rows), through, vec![]), &mut figures)?;
    push(
        Figure {
            scenario: "process/peak_rss".into(),
            value: peak_rss_mib(),
            unit: "MiB",
            details: vec![("jobs_worked_through".into(), options.latency_rows as f64)],
        },
        &mut figures,
    )?;
    Ok(figures)
}
