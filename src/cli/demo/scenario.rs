//! The demo's scenario: a realistic bot intake worked end to end through fenceq's public API,
//! with every figure accounted for. `tests/demo.rs` runs it through the binary
//! (`fenceq --json demo`) and checks the figures add up.

use crate::cli::store::CliStore;
use crate::cli::{fail, CliResult};
use fenceq::{
    Attempt, Enqueued, Error, JobState, MaintenanceConfig, NewJob, Outcome, Queue, Retention, SqliteStore, WorkerPool,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The queue the demo works.
pub const QUEUE: &str = "telegram";
/// Update ids with these remainders (mod 10) fail once with a transient error.
const TRANSIENT_EVERY: u64 = 10;
/// Every update id divisible by this fails every attempt and is exhausted.
const POISON_EVERY: u64 = 500;
/// The update whose outcome is ambiguous.
const AMBIGUOUS_UPDATE: u64 = 42;
/// The update a stalled worker holds past its lease.
const STALLED_UPDATE: u64 = 99;
/// The stalled worker's lease.
const STALLED_LEASE: Duration = Duration::from_millis(300);

/// Demo settings.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Distinct updates to record.
    pub updates: u64,
    /// Worker threads.
    pub workers: usize,
    /// Draw progress bars (stderr).
    pub progress: bool,
}

/// What the demo did; every recorded delivery is accounted for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DemoSummary {
    /// Where the database is (deleted afterwards unless `--db` was given), as the CLI shows
    /// it (a URL without its password).
    pub db: String,
    /// Deliveries recorded (updates plus redeliveries).
    pub deliveries: u64,
    /// Distinct updates (jobs created).
    pub updates: u64,
    /// Redeliveries dropped by idempotent intake.
    pub duplicates_dropped: u64,
    /// Jobs completed.
    pub completed: u64,
    /// Attempts retried after a transient failure.
    pub retries: u64,
    /// Jobs exhausted (awaiting acknowledgement until the demo acknowledged them).
    pub exhausted: u64,
    /// Exhaustions the demo acknowledged.
    pub acknowledged: u64,
    /// Jobs whose outcome is unknown (left for a reconciler).
    pub unknown: u64,
    /// Late writes rejected by the fence (the stalled worker's reply and settle).
    pub stale_writes_rejected: u64,
    /// Replies in the domain table (exactly one per completed update).
    pub replies: u64,
    /// Attempts claimed by the pool.
    pub attempts: u64,
    /// Time from the pool's start until every job settled.
    pub processing: Duration,
    /// Deliveries recorded per second.
    pub intake_per_sec: f64,
    /// Jobs settled per second by the pool.
    pub jobs_per_sec: f64,
}

impl DemoSummary {
    /// True when every figure adds up: deliveries = updates + duplicates, updates =
    /// completed + exhausted + unknown, one reply per completed update, every exhaustion
    /// acknowledged.
    pub fn adds_up(&self) -> bool {
        self.deliveries == self.updates + self.duplicates_dropped
            && self.updates == self.completed + self.exhausted + self.unknown
            && self.replies == self.completed
            && self.acknowledged == self.exhausted
    }
}

fn bar(show: bool, len: u64, what: &str) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    let style = indicatif::ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} {per_sec}")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(what.to_string());
    bar
}

/// Checks the demo's settings before anything is opened or created.
///
/// # Errors
///
/// Fewer than 100 updates, or no worker.
pub fn check(options: &DemoOptions) -> CliResult<()> {
    if options.updates < 100 || options.workers == 0 {
        return Err(fail("the demo needs at least 100 updates and one worker"));
    }
    Ok(())
}

/// The queue settings the demo runs with: a connection per worker and two more, 3 attempts.
pub fn tune<O: fenceq::store::StoreOptions>(
    builder: fenceq::QueueBuilder<O>,
    options: &DemoOptions,
) -> fenceq::QueueBuilder<O> {
    builder.pool_size(options.workers as u32 + 2).max_attempts(3)
}

/// Runs the demo in a temporary SQLite file, deleted afterwards.
pub fn run_temporary(options: &DemoOptions) -> CliResult<DemoSummary> {
    check(options)?;
    let dir = std::env::temp_dir().join(format!("fenceq-demo-{}", uuid::Uuid::new_v4()));
    let path = dir.join("demo.db");
    let result = tune(fenceq::Queue::builder().path(&path), options)
        .open()
        .map_err(Into::into)
        .and_then(|queue| run::<SqliteStore>(&queue, path.display().to_string(), options));
    let _ = std::fs::remove_dir_all(dir);
    result
}

/// Runs the demo on `queue` (opened with [`tune`]), which `db` names: intake with
/// redeliveries, a worker pool with transient failures, exhaustions, one ambiguous outcome
/// and one stalled worker, then acknowledgement.
pub fn run<S: CliStore>(queue: &Queue<S>, db: String, options: &DemoOptions) -> CliResult<DemoSummary> {
    check(options)?;
    S::demo_create_replies(queue)?;
    let mut summary = DemoSummary { db, ..DemoSummary::default() };
    let already = queue.stats()?.queue(QUEUE).total();
    if already > 0 {
        let fresh = if S::NAME == "SQLite" { "a new path" } else { "a new --schema" };
        return Err(fail(format!("{} already holds {already} demo jobs; use {fresh}", summary.db)));
    }

    // 1. Intake: two webhook threads deliver every update; every 7th is delivered twice.
    let started = Instant::now();
    let deliveries: Vec<u64> =
        (1..=options.updates).flat_map(|id| if id.is_multiple_of(7) { vec![id, id] } else { vec![id] }).collect();
    let intake_bar = bar(options.progress, deliveries.len() as u64, "recording");
    let duplicates = AtomicU64::new(0);
    std::thread::scope(|s| -> CliResult<()> {
        let handles: Vec<_> = deliveries
            .chunks(deliveries.len().div_ceil(2))
            .map(|chunk| {
                let (queue, duplicates, intake_bar) = (&queue, &duplicates, &intake_bar);
                s.spawn(move || -> CliResult<()> {
                    for &id in chunk {
                        let body = format!(r#"{{"update_id":{id},"message":{{"text":"hello {id}"}}}}"#);
                        let priority = if id == STALLED_UPDATE { 10 } else { 0 };
                        let job = NewJob::new(QUEUE, body.into_bytes()).key(format!("update:{id}")).priority(priority);
                        if let Enqueued::Duplicate(_) = queue.enqueue(job)? {
                            duplicates.fetch_add(1, Ordering::Relaxed);
                        }
                        intake_bar.inc(1);
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().expect("intake thread panicked"))
    })?;
    intake_bar.finish_and_clear();
    summary.deliveries = deliveries.len() as u64;
    summary.duplicates_dropped = duplicates.into_inner();
    summary.updates = queue.stats()?.queue(QUEUE).total();
    summary.intake_per_sec = summary.deliveries as f64 / started.elapsed().as_secs_f64();

    // 2. A worker stalls: it claims the stalled update first, then freezes past its lease.
    let stalled =
        queue.claim(QUEUE, "stalled-worker", STALLED_LEASE)?.ok_or_else(|| fail("the demo found nothing to claim"))?;
    let stale_rejections = Arc::new(AtomicU64::new(0));

    // 3. The pool works everything, including the stalled update once its lease runs out.
    let processing = Instant::now();
    let work_bar = bar(options.progress, summary.updates, "processing");
    let pool = {
        let work_bar = work_bar.clone();
        WorkerPool::builder(queue.clone(), QUEUE)
            .workers(options.workers)
            .lease(Duration::from_secs(10))
            .poll_interval(Duration::from_millis(20))
            .handler(move |attempt| {
                let outcome = handle_update::<S>(attempt);
                if !matches!(outcome, Outcome::Retry { .. }) || attempt.attempt() >= attempt.job().max_attempts {
                    work_bar.inc(1);
                }
                outcome
            })
            .start()?
    };
    let maintenance = queue.start_maintenance(MaintenanceConfig {
        reap_every: Duration::from_millis(250),
        prune_every: Duration::from_secs(3600),
        retention: Retention::default(),
        ..MaintenanceConfig::default()
    })?;
    let stalled_thread = {
        let queue = queue.clone();
        let stale_rejections = stale_rejections.clone();
        std::thread::spawn(move || -> CliResult<()> {
            // The pause: until another worker has finished this very update.
            let deadline = Instant::now() + Duration::from_secs(60);
            while queue.job(stalled.id())?.is_some_and(|j| j.state != JobState::Completed) && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            let token = stalled.token();
            let reply = queue.with_ownership(&token, |tx| {
                S::demo_insert_reply(tx, STALLED_UPDATE as i64, i64::from(token.attempt), "late reply")
            });
            let settle = queue.complete(&token);
            for result in [reply, settle] {
                match result {
                    Err(Error::OwnershipLost { .. }) => {
                        stale_rejections.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(()) => return Err(fail("the fence let a stale write through")),
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(())
        })
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let stats = queue.stats()?.queue(QUEUE);
        if stats.pending + stats.running == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(fail("the demo's jobs did not settle within 5 minutes"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    summary.processing = processing.elapsed();
    work_bar.finish_and_clear();
    stalled_thread.join().expect("stalled worker panicked")?;
    let counters = pool.shutdown(Duration::from_secs(10))?.counters;
    maintenance.stop();

    // 4. An operator acknowledges every exhaustion (after alerting someone).
    let mut cursor = None;
    loop {
        let page = queue.exhaustions(cursor, 100)?;
        for exhaustion in &page.items {
            queue.acknowledge(&exhaustion.token)?;
            summary.acknowledged += 1;
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }

    let stats = queue.stats()?.queue(QUEUE);
    summary.completed = stats.completed;
    summary.exhausted = stats.exhausted_acknowledged + stats.exhausted_unacknowledged;
    summary.unknown = stats.unknown;
    summary.retries = counters.retried;
    summary.attempts = counters.claimed + 1; // plus the stalled worker's claim
    summary.stale_writes_rejected = stale_rejections.load(Ordering::SeqCst) + counters.stale_settles_rejected;
    summary.replies = S::demo_count_replies(queue)?;
    summary.jobs_per_sec = summary.updates as f64 / summary.processing.as_secs_f64();
    Ok(summary)
}

/// What the bot does with one update: reply, with the reply row and the completion committed
/// in one transaction fenced by ownership (`Attempt::complete_with`), with deterministic
/// trouble mixed in.
fn handle_update<S: CliStore>(attempt: &mut Attempt<S>) -> Outcome {
    let id: u64 =
        attempt.key().and_then(|k| k.strip_prefix("update:")).and_then(|n| n.parse().ok()).unwrap_or_default();
    if id.is_multiple_of(POISON_EVERY) {
        return Outcome::retry_after(Duration::from_millis(5), format!("telegram 400: chat {id} not found"));
    }
    if id == AMBIGUOUS_UPDATE {
        return Outcome::Unknown("read timeout after the request was sent: the reply may have gone out".into());
    }
    if id % TRANSIENT_EVERY == 3 && attempt.attempt() == 1 {
        return Outcome::retry_after(Duration::from_millis(5), "telegram 502 bad gateway");
    }
    let token = attempt.token();
    let reply = attempt.complete_with(|tx| S::demo_insert_reply(tx, id as i64, i64::from(token.attempt), "hello back"));
    match reply {
        Ok(()) => Outcome::Complete, // already settled with the reply
        Err(e) => Outcome::retry(e.to_string()),
    }
}
