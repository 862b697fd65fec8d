//! The bench's measurements: fenceq through its public API, and raw rusqlite loops over a
//! queue-shaped table on the same disk, in the same process and run. Each function measures
//! one thing once; `rounds.rs` decides the order, repeats them in interleaved rounds and
//! computes the ratios. `tests/smoke.rs` runs every scenario at a small size through
//! the binary (`fenceq-bench --json`).

use crate::{fail, CliResult, ResultExt};
use fenceq::rusqlite::{self, params, Connection};
use fenceq::{CommitStats, NewJob, Outcome, Queue, Synchronous, WorkerPool};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// ~100-byte payload, as in the side-by-side runs of other queues.
pub fn payload(i: u64) -> Vec<u8> {
    format!(
        "{{\"update_id\":{i:>12},\"message\":{{\"chat\":4711,\"text\":\"hello from the benchmark, job {i:>10}\"}}}}"
    )
    .into_bytes()
}

/// The raw loops' table: the columns a queue needs and the two indexes its intake and claim
/// need (the unique key, the pending partial index), AUTOINCREMENT ids, nothing else.
const RAW_SCHEMA: &str = "
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, key TEXT, payload BLOB NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending', attempt INTEGER NOT NULL DEFAULT 0,
        claim_id BLOB, lease_until INTEGER, run_at INTEGER NOT NULL);
    CREATE UNIQUE INDEX jobs_key ON jobs (queue, key) WHERE key IS NOT NULL;
    CREATE INDEX jobs_claim ON jobs (queue, run_at, id) WHERE state = 'pending';";

const RAW_INSERT: &str = "INSERT INTO jobs (queue, key, payload, run_at) VALUES ('q', ?1, ?2, 0)";

/// Claims the oldest pending job (the raw loop's one-job claim).
const RAW_CLAIM_ONE: &str = "
    UPDATE jobs SET state = 'running', attempt = attempt + 1, claim_id = randomblob(16), lease_until = 30000
    WHERE id = (SELECT id FROM jobs WHERE queue = 'q' AND state = 'pending' AND run_at <= 1
                ORDER BY run_at, id LIMIT 1)
    RETURNING id, attempt, claim_id, payload";

/// Claims up to 64 of the oldest pending jobs in one statement, returning what a worker needs.
const RAW_CLAIM_64: &str = "
    UPDATE jobs SET state = 'running', attempt = attempt + 1, claim_id = randomblob(16), lease_until = 30000
    WHERE id IN (SELECT id FROM jobs WHERE queue = 'q' AND state = 'pending' AND run_at <= 1
                 ORDER BY run_at, id LIMIT 64)
    RETURNING id, attempt, claim_id, payload";

/// Settles one claimed job, guarded by its claim as a fenced queue's settle must be.
const RAW_SETTLE: &str = "
    UPDATE jobs SET state = 'completed', lease_until = NULL
    WHERE id = ?1 AND attempt = ?2 AND claim_id = ?3 AND state = 'running'";

/// The raw loops' table with the least a fenced queue keeps beyond them: the worker, the
/// attempt budget and the settle time, the CHECKs that tie a running row to its lease and
/// claim id, the lease index (reclaim and reaping without a scan) and the settled index
/// (retention without a scan). No other column, state or index.
const RAW_GUARDED_SCHEMA: &str = "
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, key TEXT, payload BLOB NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending', attempt INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL DEFAULT 3, claim_id BLOB, worker TEXT, lease_until INTEGER,
        run_at INTEGER NOT NULL, settled_at INTEGER,
        CHECK (state = 'pending' OR state = 'running' OR state = 'completed'),
        CHECK ((state = 'running') = (lease_until IS NOT NULL AND worker IS NOT NULL)),
        CHECK (attempt <= max_attempts),
        CHECK (claim_id IS NOT NULL OR state <> 'running'));
    CREATE UNIQUE INDEX jobs_key ON jobs (queue, key) WHERE key IS NOT NULL;
    CREATE INDEX jobs_claim ON jobs (queue, run_at, id) WHERE state = 'pending';
    CREATE INDEX jobs_lease ON jobs (queue, lease_until) WHERE state = 'running';
    CREATE INDEX jobs_settled ON jobs (settled_at) WHERE state = 'completed';";

/// `RAW_CLAIM_64` on `RAW_GUARDED_SCHEMA`'s table (a running row has a worker and a lease).
const RAW_CLAIM_64_GUARDED: &str = "
    UPDATE jobs SET state = 'running', attempt = attempt + 1, claim_id = randomblob(16), worker = 'w',
           lease_until = 30000
    WHERE id IN (SELECT id FROM jobs WHERE queue = 'q' AND state = 'pending' AND run_at <= 1
                 ORDER BY run_at, id LIMIT 64)
    RETURNING id, attempt, claim_id, payload";

/// `RAW_SETTLE` on `RAW_GUARDED_SCHEMA`'s table.
const RAW_SETTLE_GUARDED: &str = "
    UPDATE jobs SET state = 'completed', lease_until = NULL, settled_at = 2
    WHERE id = ?1 AND attempt = ?2 AND claim_id = ?3 AND state = 'running'";

/// `RAW_CLAIM_64` on fenceq's table: the columns its CHECKs require of a running row
/// (worker, lease) and the claim order of its index, nothing of fenceq's guards beyond them.
const RAW_CLAIM_64_FENCEQ_TABLE: &str = "
    UPDATE fenceq_jobs SET state = 'running', attempt = attempt + 1, claim_id = randomblob(16), worker = 'w',
           lease_until = 9000000000000
    WHERE id IN (SELECT id FROM fenceq_jobs
                 WHERE queue = 'bench' AND state = 'pending' AND group_held = 0 AND run_at <= 9000000000000
                 ORDER BY priority DESC, run_at, id LIMIT 64)
    RETURNING id, attempt, claim_id, payload";

/// `RAW_INSERT` on fenceq's table (its required columns; no key conflict clause, as the raw).
const RAW_INSERT_FENCEQ_TABLE: &str = "
    INSERT INTO fenceq_jobs (queue, key, payload, run_at, max_attempts, created_at) VALUES ('bench', ?1, ?2, 0, 3, 0)";

/// `RAW_CLAIM_ONE` on fenceq's table.
const RAW_CLAIM_ONE_FENCEQ_TABLE: &str = "
    UPDATE fenceq_jobs SET state = 'running', attempt = attempt + 1, claim_id = randomblob(16), worker = 'w',
           lease_until = 9000000000000
    WHERE id = (SELECT id FROM fenceq_jobs
                WHERE queue = 'bench' AND state = 'pending' AND group_held = 0 AND run_at <= 9000000000000
                ORDER BY priority DESC, run_at, id LIMIT 1)
    RETURNING id, attempt, claim_id, payload";

/// `RAW_SETTLE` on fenceq's table (a completed row carries its settle time).
const RAW_SETTLE_FENCEQ_TABLE: &str = "
    UPDATE fenceq_jobs SET state = 'completed', lease_until = NULL, settled_at = 9000000000000
    WHERE id = ?1 AND attempt = ?2 AND claim_id = ?3 AND state = 'running'";

/// One measured figure of one round.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// Scenario name.
    pub scenario: String,
    /// Jobs (or operations) per second; for latency scenarios, microseconds.
    pub value: f64,
    /// Unit of `value`.
    pub unit: &'static str,
    /// Extra key/value details (p99, grouping, RSS).
    pub details: Vec<(String, f64)>,
}

impl Figure {
    /// A throughput figure.
    pub fn rate(scenario: impl Into<String>, jobs_per_s: f64) -> Figure {
        Figure { scenario: scenario.into(), value: jobs_per_s, unit: "jobs/s", details: Vec::new() }
    }

    /// A figure in another unit.
    pub fn of(scenario: impl Into<String>, value: f64, unit: &'static str) -> Figure {
        Figure { scenario: scenario.into(), value, unit, details: Vec::new() }
    }

    /// The figure with one more detail.
    pub fn with(mut self, key: &str, value: f64) -> Figure {
        self.details.push((key.to_string(), value));
        self
    }

    /// The figure with how the writes were grouped.
    fn grouped(self, stats: CommitStats) -> Figure {
        let per_sync = stats.requests as f64 / stats.wal_syncs.max(1) as f64;
        let figure = self.with("requests_per_tx", stats.requests_per_transaction());
        if stats.wal_syncs > 0 {
            figure.with("requests_per_sync", per_sync)
        } else {
            figure
        }
    }
}

/// Elapsed microseconds, sorted, summarised.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
}

impl Latency {
    pub(crate) fn of(mut micros: Vec<f64>) -> Latency {
        micros.sort_by(f64::total_cmp);
        let at = |q: f64| micros.get(((micros.len().max(1) - 1) as f64 * q).round() as usize).copied().unwrap_or(0.0);
        Latency { p50: at(0.5), p99: at(0.99) }
    }
}

fn raw_connection(path: &Path, sync: Synchronous) -> CliResult<Connection> {
    raw_connection_with(path, sync, RAW_SCHEMA)
}

/// A raw connection in WAL at `sync` on a new database holding `schema`.
fn raw_connection_with(path: &Path, sync: Synchronous, schema: &str) -> CliResult<Connection> {
    let conn = Connection::open(path).context(|| format!("opening the raw baseline {}", path.display()))?;
    conn.execute_batch(&format!("PRAGMA journal_mode = WAL; PRAGMA synchronous = {}; {schema}", sync.pragma()))
        .context(|| "creating the raw baseline's schema".to_string())?;
    Ok(conn)
}

/// A raw connection at `sync` to the database at `path`, which fenceq created (and may
/// have filled): the raw loops on fenceq's own table.
fn raw_connection_to_fenceq_table(path: &Path, sync: Synchronous) -> CliResult<Connection> {
    let conn = Connection::open(path).context(|| format!("opening {}", path.display()))?;
    conn.execute_batch(&format!("PRAGMA synchronous = {}", sync.pragma()))
        .context(|| "the raw loop on fenceq's table".to_string())?;
    Ok(conn)
}

/// `jobs` pending rows in a raw table (`RAW_INSERT`, 5,000 per transaction).
fn raw_fill(conn: &mut Connection, jobs: u64) -> CliResult<()> {
    raw_insert(conn, RAW_INSERT, jobs, 5000, &mut Vec::new())
}

/// `jobs` pending rows through `insert` (key, payload), `per_tx` per transaction; see
/// `in_transactions` for `micros`.
fn raw_insert(conn: &mut Connection, insert: &str, jobs: u64, per_tx: u64, micros: &mut Vec<f64>) -> CliResult<()> {
    let mut next = 0u64;
    in_transactions(conn, jobs, per_tx, micros, |tx| {
        next += 1;
        tx.prepare_cached(insert)?.execute(params![format!("k{next}"), payload(next)])?;
        Ok(())
    })?;
    Ok(())
}

/// What one raw queue loop measured: its intake, its claim-and-settle pass, both together,
/// and (with one operation per transaction) the latency of one insert's commit.
#[derive(Debug, Clone, Copy)]
pub struct RawLoop {
    pub intake: f64,
    pub process: f64,
    pub end_to_end: f64,
    pub insert_commit: Latency,
}

/// The raw queue loop: insert every job, then claim and settle every job (claims in one
/// phase, settles in the next), `per_tx` operations per `BEGIN IMMEDIATE` transaction, on
/// one connection (SQLite has one writer, so more threads would only queue for its lock).
pub fn raw_loop(path: &Path, jobs: u64, per_tx: u64, sync: Synchronous) -> CliResult<RawLoop> {
    let mut conn = raw_connection(path, sync)?;
    raw_loop_with(&mut conn, jobs, per_tx, [RAW_INSERT, RAW_CLAIM_ONE, RAW_SETTLE])
}

/// The raw queue loop, statement for statement, on fenceq's own table as fenceq creates it
/// (every column, CHECK and partial index): what the table alone costs the raw loop.
pub fn raw_loop_on_fenceq_table(path: &Path, jobs: u64, per_tx: u64, sync: Synchronous) -> CliResult<RawLoop> {
    drop(open(path, sync, 2)?);
    let mut conn = raw_connection_to_fenceq_table(path, sync)?;
    raw_loop_with(
        &mut conn,
        jobs,
        per_tx,
        [RAW_INSERT_FENCEQ_TABLE, RAW_CLAIM_ONE_FENCEQ_TABLE, RAW_SETTLE_FENCEQ_TABLE],
    )
}

/// `raw_loop` on `conn` with `[insert, claim one, settle]` (the shapes of `RAW_INSERT`,
/// `RAW_CLAIM_ONE` and `RAW_SETTLE`).
fn raw_loop_with(
    conn: &mut Connection,
    jobs: u64,
    per_tx: u64,
    [insert, claim, settle]: [&str; 3],
) -> CliResult<RawLoop> {
    let mut micros = Vec::with_capacity(if per_tx == 1 { jobs as usize } else { 0 });
    let started = Instant::now();
    raw_insert(conn, insert, jobs, per_tx, &mut micros)?;
    let intake = started.elapsed();
    let processing = Instant::now();
    let mut claimed = Vec::with_capacity(jobs as usize);
    in_transactions(conn, jobs, per_tx, &mut Vec::new(), |tx| {
        let (id, attempt, claim_id, _payload): (i64, i64, Vec<u8>, Vec<u8>) =
            tx.prepare_cached(claim)?.query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
        claimed.push((id, attempt, claim_id));
        Ok(())
    })?;
    let mut settled = claimed.into_iter();
    in_transactions(conn, jobs, per_tx, &mut Vec::new(), |tx| {
        let (id, attempt, claim_id) = settled.next().unwrap_or_default();
        tx.prepare_cached(settle)?.execute(params![id, attempt, claim_id])?;
        Ok(())
    })?;
    let process = processing.elapsed();
    let total = started.elapsed();
    let rate = |d: Duration| jobs as f64 / d.as_secs_f64();
    Ok(RawLoop {
        intake: rate(intake),
        process: rate(process),
        end_to_end: rate(total),
        insert_commit: Latency::of(micros),
    })
}

/// Runs `op` `count` times, `per_tx` calls per IMMEDIATE transaction; with one call per
/// transaction, pushes each transaction's microseconds (begin to commit) onto `micros`.
fn in_transactions(
    conn: &mut Connection,
    count: u64,
    per_tx: u64,
    micros: &mut Vec<f64>,
    mut op: impl FnMut(&Connection) -> rusqlite::Result<()>,
) -> CliResult<()> {
    let raw = || "the raw baseline".to_string();
    let mut done = 0;
    while done < count {
        let started = Instant::now();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).context(raw)?;
        let n = per_tx.min(count - done);
        for _ in 0..n {
            op(&tx).context(raw)?;
        }
        tx.commit().context(raw)?;
        if per_tx == 1 {
            micros.push(started.elapsed().as_secs_f64() * 1e6);
        }
        done += n;
    }
    Ok(())
}

/// The raw batched claim-and-settle loop: `jobs` pending rows (inserted untimed), then one
/// transaction claiming 64 and one settling those 64, until none are left. Jobs/s.
pub fn raw_claim_64_settle_64(path: &Path, jobs: u64) -> CliResult<f64> {
    let mut conn = raw_connection(path, Synchronous::Normal)?;
    raw_fill(&mut conn, jobs)?;
    raw_claim_and_settle(&mut conn, jobs, RAW_CLAIM_64, RAW_SETTLE)
}

/// The raw loop's claims and settles, statement for statement, on fenceq's own table as
/// fenceq creates it (every column, CHECK and partial index), filled by `enqueue_batch`:
/// what the table alone costs the raw loop, apart from anything fenceq's code does.
pub fn raw_claim_64_settle_64_on_fenceq_table(path: &Path, jobs: u64) -> CliResult<f64> {
    fill(&open(path, Synchronous::Normal, 2)?, jobs)?;
    let mut conn = raw_connection_to_fenceq_table(path, Synchronous::Normal)?;
    raw_claim_and_settle(&mut conn, jobs, RAW_CLAIM_64_FENCEQ_TABLE, RAW_SETTLE_FENCEQ_TABLE)
}

/// The raw loop on `RAW_GUARDED_SCHEMA`'s table, filled as the raw loop's: what the least
/// guarded table costs the same statements.
pub fn raw_claim_64_settle_64_guarded_table(path: &Path, jobs: u64) -> CliResult<f64> {
    let mut conn = raw_connection_with(path, Synchronous::Normal, RAW_GUARDED_SCHEMA)?;
    raw_fill(&mut conn, jobs)?;
    raw_claim_and_settle(&mut conn, jobs, RAW_CLAIM_64_GUARDED, RAW_SETTLE_GUARDED)
}

/// Claims 64 jobs per transaction with `claim` (returning id, attempt, claim id, payload)
/// and settles each with `settle` (id, attempt, claim id) in one transaction, until none is
/// left; jobs/s.
fn raw_claim_and_settle(conn: &mut Connection, jobs: u64, claim: &str, settle: &str) -> CliResult<f64> {
    let raw = || "the raw baseline".to_string();
    let started = Instant::now();
    let mut done = 0u64;
    loop {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).context(raw)?;
        let batch: Vec<(i64, i64, Vec<u8>, Vec<u8>)> = tx
            .prepare_cached(claim)
            .and_then(|mut claim| claim.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?.collect())
            .context(raw)?;
        tx.commit().context(raw)?;
        if batch.is_empty() {
            break;
        }
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).context(raw)?;
        for (id, attempt, claim_id, _payload) in &batch {
            let settled = tx.prepare_cached(settle).and_then(|mut s| s.execute(params![id, attempt, claim_id]));
            if settled.context(raw)? != 1 {
                return Err(fail(format!("the raw loop could not settle job {id}")));
            }
        }
        tx.commit().context(raw)?;
        done += batch.len() as u64;
    }
    if done != jobs {
        return Err(fail(format!("the raw loop settled {done} of {jobs} jobs")));
    }
    Ok(done as f64 / started.elapsed().as_secs_f64())
}

/// How the raw table's ids are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawIds {
    /// `INTEGER PRIMARY KEY AUTOINCREMENT`, as the raw loops' table has it.
    Autoincrement,
    /// `INTEGER PRIMARY KEY`: the largest id plus one, a pruned newest id handed out again.
    Plain,
}

/// Raw single-row INSERTs, one autocommit statement each, from one thread: the cheapest raw
/// intake (no `BEGIN`, no `COMMIT` statement), and the `FULL` baseline (one commit, so one
/// sync, per job). `ids` says whether the raw table's ids come from AUTOINCREMENT (whose
/// sequence row each commit rewrites) or are SQLite's plain largest-plus-one.
pub fn raw_enqueue_per_commit(path: &Path, jobs: u64, sync: Synchronous, ids: RawIds) -> CliResult<f64> {
    let conn = match ids {
        RawIds::Autoincrement => raw_connection(path, sync)?,
        RawIds::Plain => raw_connection_with(path, sync, &RAW_SCHEMA.replacen(" AUTOINCREMENT", "", 1))?,
    };
    let started = Instant::now();
    for j in 0..jobs {
        conn.prepare_cached(RAW_INSERT)
            .and_then(|mut insert| insert.execute(params![format!("k{j}"), payload(j)]))
            .context(|| "the raw baseline".to_string())?;
    }
    Ok(jobs as f64 / started.elapsed().as_secs_f64())
}

pub fn open(path: &Path, sync: Synchronous, pool: u32) -> CliResult<Queue> {
    Ok(Queue::builder().path(path).synchronous(sync).pool_size(pool).open()?)
}

/// Job `j` of a scenario: queue `bench`, key `k{j}`, [`payload`]`(j)`.
pub fn job(j: u64) -> NewJob {
    NewJob::new("bench", payload(j)).key(format!("k{j}"))
}

/// Job `j` without its key: what a queue without idempotent intake (plainjob's `add`)
/// writes, so no entry in the key's index and no lookup of it.
pub fn job_without_key(j: u64) -> NewJob {
    NewJob::new("bench", payload(j))
}

/// One thread calling `enqueue` once per job. Jobs/s and the latency of each call.
pub fn enqueue_one_per_call(queue: &Queue, jobs: u64) -> CliResult<(f64, Latency)> {
    enqueue_one_per_call_of(queue, jobs, job)
}

/// As [`enqueue_one_per_call`], each job made by `make`.
pub fn enqueue_one_per_call_of(queue: &Queue, jobs: u64, make: impl Fn(u64) -> NewJob) -> CliResult<(f64, Latency)> {
    let mut micros = Vec::with_capacity(jobs as usize);
    let started = Instant::now();
    for j in 0..jobs {
        let call = Instant::now();
        queue.enqueue(make(j))?;
        micros.push(call.elapsed().as_secs_f64() * 1e6);
    }
    Ok((jobs as f64 / started.elapsed().as_secs_f64(), Latency::of(micros)))
}

/// Runs `each` on the job numbers `0..jobs` in consecutive ranges of `batch` (the last one
/// shorter), in order, stopping at the first error.
pub fn in_batches(jobs: u64, batch: u64, mut each: impl FnMut(std::ops::Range<u64>) -> CliResult<()>) -> CliResult<()> {
    let mut j = 0;
    while j < jobs {
        let end = (j + batch).min(jobs);
        each(j..end)?;
        j = end;
    }
    Ok(())
}

/// One thread calling `enqueue_batch` with `batch` jobs per call, on either store. Jobs/s.
pub fn enqueue_in_batches<S: fenceq::store::Store>(queue: &Queue<S>, jobs: u64, batch: u64) -> CliResult<f64> {
    let started = Instant::now();
    in_batches(jobs, batch, |range| {
        queue.enqueue_batch(range.map(job))?;
        Ok(())
    })?;
    Ok(jobs as f64 / started.elapsed().as_secs_f64())
}

/// A `workers`-thread pool started on `queue` completing `jobs` jobs (already enqueued, or
/// enqueued meanwhile by `feed` on this thread), on either store. Jobs/s from the pool's
/// start to the last completion. The pool is shut down whether or not `feed` succeeded.
pub fn pool_completes<S: fenceq::store::Store>(
    queue: &Queue<S>,
    jobs: u64,
    workers: usize,
    feed: impl FnOnce() -> CliResult<()>,
) -> CliResult<f64> {
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
    let finished = feed().and_then(|()| {
        done_rx
            .recv_timeout(Duration::from_secs(600))
            .map_err(|_| fail("the bench's jobs did not finish within 10 minutes"))
    });
    // Every handler returned; the last settles commit before shutdown returns.
    let counters = pool.shutdown(Duration::from_secs(60))?.counters;
    let elapsed = started.elapsed();
    finished?;
    if counters.completed != jobs {
        return Err(fail(format!("the bench completed {} of {jobs} jobs", counters.completed)));
    }
    Ok(jobs as f64 / elapsed.as_secs_f64())
}

/// A pool of `workers` working through the `jobs` jobs already waiting in `queue`. Jobs/s.
pub fn process(queue: &Queue, jobs: u64, workers: usize) -> CliResult<f64> {
    pool_completes(queue, jobs, workers, || Ok(()))
}

/// End to end through the public API: `producers` threads call `enqueue` once per job while
/// a `workers`-thread pool completes every job. Jobs/s and how the writes were grouped.
pub fn end_to_end(path: &Path, jobs: u64, producers: u64, workers: usize, sync: Synchronous) -> CliResult<Figure> {
    let queue = open(path, sync, workers as u32 + 2)?;
    let rate = pool_completes(&queue, jobs, workers, || enqueue_from_threads(&queue, jobs, producers))?;
    Ok(Figure::rate(String::new(), rate).grouped(queue.commit_stats()))
}

/// `threads` threads calling `enqueue` once per job, `jobs` in all (keys `k{n}`), on either
/// store.
pub fn enqueue_from_threads<S: fenceq::store::Store>(queue: &Queue<S>, jobs: u64, threads: u64) -> CliResult<()> {
    std::thread::scope(|s| -> CliResult<()> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> CliResult<()> {
                    let mut j = t;
                    while j < jobs {
                        queue.enqueue(job(j))?;
                        j += threads;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().expect("enqueue thread panicked"))
    })
}

/// `callers` threads calling `enqueue` (one job per call). Jobs/s and how the writes were
/// grouped.
pub fn concurrent_enqueue(path: &Path, jobs: u64, callers: u64, sync: Synchronous) -> CliResult<Figure> {
    let queue = open(path, sync, 4)?;
    let started = Instant::now();
    enqueue_from_threads(&queue, jobs, callers)?;
    let rate = jobs as f64 / started.elapsed().as_secs_f64();
    Ok(Figure::rate(String::new(), rate).grouped(queue.commit_stats()))
}

/// `claim_batch(64)` then `complete_all` of the batch, on `jobs` pending jobs. Jobs/s.
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
    if done != jobs {
        return Err(fail(format!("the bench settled {done} of {jobs} jobs")));
    }
    Ok(done as f64 / started.elapsed().as_secs_f64())
}

fn fill(queue: &Queue, jobs: u64) -> CliResult<()> {
    in_batches(jobs, 5000, |range| {
        queue.enqueue_batch(range.map(|i| NewJob::new("bench", payload(i))))?;
        Ok(())
    })
}

/// A queue kept at a number of pending jobs, for claim-latency samples.
pub struct LatencyQueue {
    queue: Queue,
    /// Job `i` is in group `i % groups` (no groups without).
    groups: Option<u64>,
    /// The next job's number.
    next: std::cell::Cell<u64>,
}

impl LatencyQueue {
    /// A queue at `path` with `pending` due jobs.
    pub fn filled(path: &Path, pending: u64) -> CliResult<LatencyQueue> {
        let queue = open(path, Synchronous::Normal, 2)?;
        fill(&queue, pending)?;
        Ok(LatencyQueue { queue, groups: None, next: pending.into() })
    }

    /// A queue at `path` whose `pending` jobs are spread over `groups` groups (job `i` in group
    /// `i % groups`): only each group's head is claimable, the rest are held back.
    pub fn grouped(path: &Path, pending: u64, groups: u64) -> CliResult<LatencyQueue> {
        let latency = LatencyQueue { queue: open(path, Synchronous::Normal, 2)?, groups: Some(groups), next: 0.into() };
        in_batches(pending, 5000, |range| {
            latency.queue.enqueue_batch(range.map(|i| latency.job(i)))?;
            Ok(())
        })?;
        latency.next.set(pending);
        Ok(latency)
    }

    fn job(&self, i: u64) -> NewJob {
        let job = NewJob::new("bench", payload(i));
        match self.groups {
            Some(groups) => job.group(format!("g{}", i % groups)),
            None => job,
        }
    }

    /// p50 and p99 of `samples` calls of `claim` (each followed by a `complete` and an
    /// `enqueue`, not timed, so that as many jobs stay pending).
    pub fn claims(&self, samples: usize) -> CliResult<Latency> {
        let queue = &self.queue;
        let mut micros = Vec::with_capacity(samples);
        for _ in 0..samples {
            let started = Instant::now();
            let job = queue
                .claim("bench", "w", Duration::from_secs(30))?
                .ok_or_else(|| fail("the bench's queue is empty"))?;
            micros.push(started.elapsed().as_secs_f64() * 1e6);
            queue.complete(&job.token())?;
            queue.enqueue(self.job(self.next.get()))?; // keep the queue at `pending` rows
            self.next.set(self.next.get() + 1);
        }
        Ok(Latency::of(micros))
    }
}

/// Limits a bench's pool never reaches: a rate and a running limit far above what it does,
/// so that every claim takes the limited path and counts.
pub fn limits_never_reached() -> fenceq::Limits {
    fenceq::Limits {
        rate: Some(fenceq::Rate::new(fenceq::MAX_LIMIT_COUNT, Duration::from_secs(1))),
        group_rates: Vec::new(),
        max_running: Some(fenceq::MAX_LIMIT_COUNT),
    }
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
    Ok(Latency::of(micros).p50)
}

/// Peak resident set size of this process so far, in MiB (Linux; 0 elsewhere).
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(str::to_string))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<f64>().ok()))
        .map_or(0.0, |kb| kb / 1024.0)
}
