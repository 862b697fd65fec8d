//! The demo's scenario: a realistic bot intake worked end to end through fenceq's public API,
//! with every figure accounted for. `tests/demo.rs` runs it through the binary
//! (`fenceq --json demo`) and checks the figures add up.

use crate::cli::store::CliStore;
use crate::cli::{fail, CliResult};
use fenceq::{
    Attempt, BackoffScope, Enqueued, Error, JobState, Limits, MaintenanceConfig, NewJob, Outcome, Queue, Rate,
    Retention, SqliteStore, WorkerPool,
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

/// The queue of the replies the flow-control part sends, under Telegram's limits.
pub const REPLIES: &str = "telegram-replies";
/// Chats in the flow-control part's burst, and replies into each.
const CHATS: u64 = 6;
const REPLIES_PER_CHAT: u64 = 3;
/// The chat whose second reply first meets a 429 with `retry_after`.
const RATE_LIMITED_CHAT: u64 = 2;
/// The lease of the flow-control part's pool: a reply's start is its lease's end less this.
const REPLY_LEASE: Duration = Duration::from_secs(10);

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
    /// The flow-control part: replies sent into a burst of chats under the limits.
    pub flow: FlowSummary,
}

/// What the flow-control part did: replies into a few chats under Telegram's limits (30 a
/// second overall, 1 a second and 20 a minute into one chat), one 429 honoured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlowSummary {
    /// Chats in the burst.
    pub chats: u64,
    /// Replies sent (completed).
    pub replies: u64,
    /// The most replies started in any one second, overall (by the store's clock).
    pub most_in_a_second: u64,
    /// The most replies started in any one second into one chat.
    pub most_in_a_second_per_chat: u64,
    /// Whether every chat's replies started in the order they were enqueued, one at a time.
    pub in_order: bool,
    /// The 429's `retry_after`.
    pub retry_after_ms: u64,
    /// How long the rate-limited reply waited between its 429 and its send (at least
    /// `retry_after_ms`: honoured).
    pub waited_ms: u64,
    /// The rate-limited reply's attempts left before and after the 429 (equal: none spent).
    pub attempts_left_before_and_after: (u32, u32),
    /// Time the burst took.
    pub took: Duration,
}

impl FlowSummary {
    /// True when the limits held, every chat was answered in order, and the 429 cost no
    /// attempt.
    pub fn holds(&self) -> bool {
        self.replies == self.chats * REPLIES_PER_CHAT
            && self.most_in_a_second <= 30
            && self.most_in_a_second_per_chat <= 1
            && self.in_order
            && self.retry_after_ms > 0
            && self.waited_ms >= self.retry_after_ms
            && self.attempts_left_before_and_after.0 == self.attempts_left_before_and_after.1
    }
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
            && self.flow.holds()
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
    summary.flow = flow_control(queue, options)?;
    Ok(summary)
}

/// One reply the flow-control part sent: its chat, its place in the chat, when it started
/// (its claim, by the store's clock) and the attempt.
#[derive(Debug, Clone, Copy)]
struct Sent {
    chat: u64,
    seq: u64,
    started_ms: i64,
}

/// Step 5, flow control: a burst of replies into a few chats, under Telegram's limits held by the
/// store (30/1s overall, 1/1s and 20/60s per chat), each chat's replies in order (a group per
/// chat), and one 429 with `retry_after` honoured as a group back-off that spends no attempt.
fn flow_control<S: CliStore>(queue: &Queue<S>, options: &DemoOptions) -> CliResult<FlowSummary> {
    let second = Duration::from_secs(1);
    queue.set_limits(
        REPLIES,
        &Limits {
            rate: Some(Rate::new(30, second)),
            group_rates: vec![Rate::new(1, second), Rate::new(20, 60 * second)],
            max_running: None,
        },
    )?;
    let mut limited_job = None;
    for seq in 0..REPLIES_PER_CHAT {
        for chat in 0..CHATS {
            let body = format!("{chat}:{seq}");
            let job = NewJob::new(REPLIES, body.into_bytes()).group(format!("chat:{chat}")).max_attempts(3);
            let id = queue.enqueue(job)?.id();
            if chat == RATE_LIMITED_CHAT && seq == 1 {
                limited_job = Some(id);
            }
        }
    }
    let limited_job = limited_job.ok_or_else(|| fail("the demo enqueued no rate-limited reply"))?;
    // Its attempts left while it waits, before any claim.
    let before = queue.job(limited_job)?.map(|j| j.max_attempts - j.attempt).unwrap_or_default();
    let sent: Arc<parking_lot::Mutex<Vec<Sent>>> = Arc::default();
    // When the rate-limited reply met its 429 (0 until then), by the store's clock.
    let limited_at = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let retry_after = Duration::from_millis(1500);
    let started = Instant::now();
    let pool = {
        let (sent, limited_at) = (sent.clone(), limited_at.clone());
        WorkerPool::builder(queue.clone(), REPLIES)
            .workers(options.workers)
            .lease(REPLY_LEASE)
            .poll_interval(Duration::from_millis(20))
            .handler(move |attempt| {
                let text = String::from_utf8_lossy(&attempt.job().payload).to_string();
                let (chat, seq) = text.split_once(':').unwrap_or(("0", "0"));
                let (chat, seq): (u64, u64) = (chat.parse().unwrap_or(0), seq.parse().unwrap_or(0));
                let started_ms = attempt.job().lease_until - REPLY_LEASE.as_millis() as i64;
                if chat == RATE_LIMITED_CHAT && seq == 1 && limited_at.load(Ordering::SeqCst) == 0 {
                    // Telegram: 429 Too Many Requests, retry_after. The chat waits; no attempt is spent.
                    limited_at.store(started_ms, Ordering::SeqCst);
                    return Outcome::provider_backoff(retry_after, BackoffScope::Group);
                }
                sent.lock().push(Sent { chat, seq, started_ms });
                Outcome::Complete
            })
            .start()?
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while queue.stats()?.queue(REPLIES).completed < CHATS * REPLIES_PER_CHAT {
        if Instant::now() > deadline {
            return Err(fail("the demo's replies were not all sent within a minute"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = started.elapsed();
    pool.shutdown(Duration::from_secs(10))?;
    let job = queue.job(limited_job)?.ok_or_else(|| fail("the rate-limited reply is gone"))?;
    // The reply's own claim spent one attempt; the 429's attempt was given back.
    let after = job.max_attempts - job.attempt + 1;
    let sent = sent.lock().clone();
    Ok(FlowSummary {
        chats: CHATS,
        replies: sent.len() as u64,
        most_in_a_second: most_in_window(sent.iter().map(|s| s.started_ms), 1000),
        most_in_a_second_per_chat: (0..CHATS)
            .map(|chat| most_in_window(sent.iter().filter(|s| s.chat == chat).map(|s| s.started_ms), 1000))
            .max()
            .unwrap_or(0),
        in_order: (0..CHATS).all(|chat| {
            let mut mine: Vec<Sent> = sent.iter().filter(|s| s.chat == chat).copied().collect();
            mine.sort_by_key(|s| s.started_ms);
            mine.iter().map(|s| s.seq).eq(0..REPLIES_PER_CHAT)
        }),
        retry_after_ms: retry_after.as_millis() as u64,
        waited_ms: sent
            .iter()
            .find(|s| s.chat == RATE_LIMITED_CHAT && s.seq == 1)
            .map_or(0, |s| s.started_ms - limited_at.load(Ordering::SeqCst))
            .max(0) as u64,
        attempts_left_before_and_after: (before, after),
        took,
    })
}

/// The most of `times` (ms) in any window `[t, t + window)`.
fn most_in_window(times: impl Iterator<Item = i64>, window: i64) -> u64 {
    let mut times: Vec<i64> = times.collect();
    times.sort_unstable();
    let mut most = 0;
    let mut first = 0;
    for last in 0..times.len() {
        while times[last] - times[first] >= window {
            first += 1;
        }
        most = most.max(last - first + 1);
    }
    most as u64
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
