//! `fenceq-bench --db postgres://… --only long_horizon`: fenceq on PostgreSQL over minutes
//! at a fixed offered rate, through what production brings, phase by phase.
//!
//! One producer thread enqueues batches (up to [`MAX_BATCH`] jobs every [`TICK`], sized to
//! the offered rate, open-loop: a late batch is sent at once, never skipped) of
//! [`PAYLOAD_BYTES`]-byte payloads that carry the wall-clock instant read just before the
//! enqueue call, as the pickup step's do (so pickup latency includes the enqueue's own
//! commit). A pool of `--horizon-workers` workers runs a handler that records the pickup
//! latency (that instant to the handler's first line) and sleeps [`HANDLER_SLEEP`]. The
//! phases, one after the other under the same load:
//!
//! - clean;
//! - idle in transaction: another connection runs `BEGIN; SELECT txid_current();` and sits
//!   idle, holding an XID so that vacuum cannot remove what died after it, then rolls back;
//! - readers: [`READERS`] connections in `REPEATABLE READ` scan the jobs table again and
//!   again (a `count(*)` and a scan that reads every payload, in one transaction);
//! - recovery: clean again.
//!
//! Per phase it reports the offered, enqueued and completed rates, pickup p50/p95/p99/max
//! (HDR, by the phase the job was enqueued in), the enqueue call's p99, `Queue::stats()`
//! timed once a second (median, max), `pgstattuple`'s dead tuples every
//! [`PGSTATTUPLE_EVERY`] seconds, and at the phase's end the sizes of `fenceq_jobs` and each of
//! its indexes, with the autovacuum and checkpoint counts. A separate connection samples `pg_stat_activity` every [`SAMPLE_EVERY`]: the
//! wait events of the pool's busy backends (`wait_event_type:wait_event`; `CPU` and the
//! start of the statement for an active backend without one, `idle in transaction` between
//! the statements of a transaction, and for a lock wait the backends that hold it up) give
//! each phase's top [`TOP_WAITS`]. Every second whose jobs' pickup p99
//! exceeds [`SPIKE_P99`] is listed with the wait events sampled in it, so that a tail spike
//! can be placed in time.
//!
//! Nothing prunes during the run (the bench starts no maintenance), so settled rows
//! accumulate as in a deployment whose retention is days. The scenario runs in a fresh
//! schema of its own, dropped at the end; `pgstattuple` is created in the database (it is
//! PostgreSQL's contrib) if it is not there.

use crate::{fail, CliResult, Context, ResultExt};
use fenceq::diesel::connection::SimpleConnection;
use fenceq::diesel::sql_types::{BigInt, Double, Text};
use fenceq::diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
use fenceq::{NewJob, Outcome, PostgresStore, Queue, WorkerPool};
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The `--only` step that runs this scenario.
const STEP: &str = crate::report::LONG_HORIZON;
/// The queue the jobs go to.
const QUEUE: &str = "long_horizon";
/// Each job's payload: the enqueue instant (8 bytes), its phase (1 byte), then padding.
const PAYLOAD_BYTES: usize = 256;
/// How often the producer sends a batch at most rates.
const TICK: Duration = Duration::from_millis(25);
/// The largest batch per enqueue call; above `MAX_BATCH / TICK` the ticks come faster.
const MAX_BATCH: u64 = 128;
/// How long the handler works.
const HANDLER_SLEEP: Duration = Duration::from_millis(1);
/// The scanning connections of the readers phase.
const READERS: usize = 4;
/// How often `pg_stat_activity` is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);
/// How often `Queue::stats()` is timed (and `n_dead_tup` read).
const STATS_EVERY: Duration = Duration::from_secs(1);
/// How many of those seconds apart `pgstattuple` counts the dead tuples during a phase (it
/// reads the whole table, so not every second).
const PGSTATTUPLE_EVERY: u64 = 5;
/// A second whose jobs' pickup p99 is above this is listed as a spike.
const SPIKE_P99: Duration = Duration::from_millis(50);
/// Wait events reported per phase.
const TOP_WAITS: usize = 5;
/// Wait events reported per spike second.
const SPIKE_WAITS: usize = 3;
/// How long the pool may take to finish the jobs enqueued before the producer stopped.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);
/// The recovery goal: back to the clean phase's p99 within this long.
const RECOVERED_WITHIN: Duration = Duration::from_secs(30);
/// Below this many dead tuples (estimated) at a phase's end, the next one's halving time
/// is not reported.
const HALVING_FROM: i64 = 1_000;
/// The goals at 1,000 jobs/s with 16 workers.
const GOAL_CLEAN_DEAD_TUPLES: i64 = 10_000;
const GOAL_CLEAN_P99_MS: f64 = 50.0;
const GOAL_IDLE_P99_MS: f64 = 250.0;
const GOAL_STATS_MS: f64 = 5.0;

const CREATE_PGSTATTUPLE: &str = "CREATE EXTENSION IF NOT EXISTS pgstattuple";
const SERVER_SETTINGS: &str = "SELECT current_setting('server_version') AS version, \
     current_setting('server_version_num')::bigint AS version_num, current_setting('autovacuum') AS autovacuum";
/// Dead tuples and the heap's size, by reading every page of it.
const TABLE_DEAD_TUPLES: &str =
    "SELECT tuple_count, dead_tuple_count, dead_tuple_percent, table_len FROM pgstattuple($1::text::regclass)";
const TABLE_INDEX_SIZES: &str = "SELECT c.relname::text AS name, pg_relation_size(c.oid) AS bytes
     FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
     WHERE i.indrelid = $1::text::regclass ORDER BY c.relname";
/// The statistics' dead-tuple estimate (cheap: read every second) and vacuum's runs.
const TABLE_ACTIVITY: &str = "SELECT n_dead_tup, autovacuum_count FROM pg_stat_user_tables
     WHERE relid = $1::text::regclass";
const CHECKPOINTS_BEFORE_17: &str = "SELECT checkpoints_timed + checkpoints_req AS n FROM pg_stat_bgwriter";
const CHECKPOINTS_SINCE_17: &str = "SELECT num_timed + num_requested AS n FROM pg_stat_checkpointer";
/// The pool's busy backends (its `application_name`) and whether an autovacuum worker runs
/// in this database. A backend on the CPU (active without a wait event) names the start of
/// its statement; a lock wait names the start of the statement that waits and what holds it
/// up: each blocking backend's name, state and the start of its last statement.
const ACTIVITY_SAMPLE: &str = "SELECT (a.backend_type = 'autovacuum worker') AS autovacuum,
            CASE WHEN a.state = 'idle in transaction' THEN 'idle in transaction'
                 WHEN a.wait_event_type = 'Lock' THEN
                     'Lock:' || a.wait_event || ' (' || left(regexp_replace(a.query, '\\s+', ' ', 'g'), 40) || ')'
                     || ' behind ' || coalesce((
                         SELECT string_agg(DISTINCT
                                    CASE WHEN b.application_name = $1 THEN 'the pool' ELSE b.application_name END
                                    || ' ' || b.state || ' (' || left(regexp_replace(b.query, '\\s+', ' ', 'g'), 40) || ')',
                                    '; ')
                         FROM pg_stat_activity b WHERE b.pid = ANY (pg_blocking_pids(a.pid))), '?')
                 WHEN a.wait_event IS NULL THEN 'CPU (' || left(regexp_replace(a.query, '\\s+', ' ', 'g'), 50) || ')'
                 ELSE a.wait_event_type || ':' || a.wait_event END AS event
     FROM pg_stat_activity a
     WHERE a.datname = current_database()
       AND ((a.application_name = $1 AND a.state IN ('active', 'idle in transaction'))
            OR a.backend_type = 'autovacuum worker')";
const HOLDER_BEGIN: &str = "BEGIN; SELECT txid_current();";
const HOLDER_END: &str = "ROLLBACK";
const READER_BEGIN: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ";
const READER_COUNT: &str = "SELECT count(*) FROM fenceq_jobs";
const READER_SCAN: &str = "SELECT sum(length(payload)) FROM fenceq_jobs";
const READER_END: &str = "COMMIT";

/// The scenario's settings from the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Offered jobs per second.
    pub rate: u64,
    /// Workers of the pool.
    pub workers: usize,
    /// Seconds of each phase, in [`Phase::ALL`]'s order (0 leaves it out).
    pub phase_secs: [u64; 4],
    /// The pool's lease (its heartbeat renews every third of it).
    pub lease: Duration,
}

impl Settings {
    /// `--horizon-rate`, `--horizon-workers`, `--phase-secs` (one value for every phase,
    /// or four: clean, idle in transaction, readers, recovery) and `--horizon-lease-secs`.
    ///
    /// # Errors
    ///
    /// A `--phase-secs` of another length, or one whose phases are all 0.
    pub fn new(rate: u64, workers: u64, phase_secs: &[u64], lease_secs: u64) -> CliResult<Settings> {
        let phase_secs = match *phase_secs {
            [all] => [all; 4],
            [clean, idle, readers, recovery] => [clean, idle, readers, recovery],
            _ => {
                return Err(fail(
                    "--phase-secs: one value for every phase, or four (clean,idle_in_transaction,readers,recovery)",
                ))
            }
        };
        if phase_secs.iter().all(|&s| s == 0) {
            return Err(fail("--phase-secs: at least one phase longer than 0 s"));
        }
        Ok(Settings { rate, workers: workers as usize, phase_secs, lease: Duration::from_secs(lease_secs) })
    }

    fn total_secs(&self) -> u64 {
        self.phase_secs.iter().sum()
    }
}

/// A phase of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Clean,
    IdleInTransaction,
    Readers,
    Recovery,
}

impl Phase {
    const ALL: [Phase; 4] = [Phase::Clean, Phase::IdleInTransaction, Phase::Readers, Phase::Recovery];

    fn name(self) -> &'static str {
        match self {
            Phase::Clean => "clean",
            Phase::IdleInTransaction => "idle_in_transaction",
            Phase::Readers => "readers",
            Phase::Recovery => "recovery",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Phase::Clean => "clean",
            Phase::IdleInTransaction => "idle in tx",
            Phase::Readers => "4 RR readers",
            Phase::Recovery => "recovery",
        }
    }
}

// ------------------------------------------------------------------------------- results

/// One phase's figures.
struct PhaseResult {
    phase: Phase,
    /// When it started, since the run's start.
    started: Duration,
    /// How long it lasted (its end-of-phase reads included).
    secs: f64,
    enqueued: u64,
    completed: u64,
    /// Pickup latency of the jobs enqueued in it, µs.
    pickup: Percentiles,
    /// The enqueue call's duration, µs.
    enqueue_call: Percentiles,
    /// `Queue::stats()`, one call a second.
    stats_calls: Vec<Duration>,
    /// `n_dead_tup` once a second: (seconds into the phase, estimate).
    dead_estimates: Vec<(f64, i64)>,
    /// `pgstattuple`'s dead tuples every [`PGSTATTUPLE_EVERY`] seconds and at the end: the
    /// most it counted.
    dead_tuples_max: i64,
    /// At the phase's end.
    table: TableSnapshot,
    /// Autovacuum runs on the table and checkpoints during the phase.
    autovacuums: i64,
    checkpoints: i64,
    /// The readers' transactions completed (readers phase only).
    reader_scans: u64,
    /// The top wait events: (event, average backends in it per sample).
    waits: Vec<(String, f64)>,
    /// Share of samples during which an autovacuum worker ran in this database, %.
    autovacuum_busy_pct: f64,
    /// The pickup p99 of the jobs enqueued from [`RECOVERED_WITHIN`] into the phase on, ms.
    p99_after_ms: Option<f64>,
}

impl PhaseResult {
    fn enqueued_per_s(&self) -> f64 {
        self.enqueued as f64 / self.secs
    }

    fn completed_per_s(&self) -> f64 {
        self.completed as f64 / self.secs
    }

    fn stats_ms(&self) -> (f64, f64) {
        let mut calls = self.stats_calls.clone();
        calls.sort();
        let ms = |d: Option<&Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1_000.0);
        (ms(calls.get(calls.len() / 2)), ms(calls.last()))
    }

    fn dead_estimate_max(&self) -> i64 {
        self.dead_estimates.iter().map(|&(_, n)| n).max().unwrap_or(0)
    }

    /// Seconds into this phase until the dead-tuple estimate fell to half of what it was at
    /// the end of `previous` (the "took 30 s to halve after it ended"); `None` when
    /// it never did, or there was little to halve.
    fn dead_halved_after(&self, previous: Option<&PhaseResult>) -> Option<f64> {
        let before = previous?.dead_estimates.last()?.1;
        if before < HALVING_FROM {
            return None;
        }
        self.dead_estimates.iter().find(|&&(_, n)| n <= before / 2).map(|&(s, _)| s)
    }
}

/// p50/p95/p99/max of a histogram, µs.
#[derive(Debug, Clone, Copy, Default)]
struct Percentiles {
    p50: u64,
    p95: u64,
    p99: u64,
    max: u64,
    count: u64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            p50: h.value_at_quantile(0.5),
            p95: h.value_at_quantile(0.95),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
            count: h.len(),
        }
    }
}

/// The table at one instant.
#[derive(Debug, Clone, Default)]
struct TableSnapshot {
    /// Live rows (every state: nothing is pruned).
    rows: i64,
    dead_tuples: i64,
    dead_percent: f64,
    table_bytes: i64,
    /// Each index of `fenceq_jobs`: (name, bytes).
    indexes: Vec<(String, i64)>,
    autovacuum_count: i64,
    checkpoints: i64,
}

/// A second whose jobs' pickup p99 was above [`SPIKE_P99`].
struct Spike {
    /// Seconds since the run's start (the second the jobs were enqueued in).
    second: u64,
    phase: Phase,
    p99_ms: f64,
    max_ms: f64,
    jobs: u64,
    /// The wait events sampled in that second: (event, samples).
    waits: Vec<(String, u64)>,
}

// ------------------------------------------------------------------------------- shared

/// What the producer, the handler, the sampler and the controller share.
struct Shared {
    /// Wall-clock nanoseconds at the run's start (the payloads' clock).
    start_wall: u64,
    /// The run's start on the monotonic clock (the sampler's seconds).
    start: Instant,
    /// Index into [`Phase::ALL`] of the phase under way.
    phase: AtomicUsize,
    /// Tells the producer to stop.
    stop_producing: AtomicBool,
    /// Tells the sampler to stop.
    stop_sampling: AtomicBool,
    enqueued: AtomicU64,
    completed: AtomicU64,
    pickup: Mutex<Pickup>,
    waits: Mutex<Vec<SecondWaits>>,
}

/// Pickup latency, µs: per phase (by the job's enqueue phase) and per second (by the second
/// of the run it was enqueued in).
struct Pickup {
    phases: Vec<Histogram<u64>>,
    seconds: Vec<Histogram<u64>>,
}

/// What the sampler saw in one second of the run.
#[derive(Debug, Default, Clone)]
struct SecondWaits {
    samples: u64,
    autovacuum_samples: u64,
    events: HashMap<String, u64>,
}

/// Latency histograms in µs, up to 10 minutes.
fn histogram(digits: u8) -> CliResult<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 600_000_000, digits)?)
}

/// Nanoseconds since the Unix epoch on the wall clock (what the payloads carry).
fn wall_nanos() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

impl Shared {
    fn new(total_secs: u64) -> CliResult<Shared> {
        let phases = (0..Phase::ALL.len()).map(|_| histogram(3)).collect::<CliResult<_>>()?;
        // The run, the drain and a margin: a job's second never goes past the last bin.
        let seconds = (0..total_secs + DRAIN_LIMIT.as_secs() + 10).map(|_| histogram(2)).collect::<CliResult<_>>()?;
        Ok(Shared {
            start_wall: wall_nanos(),
            start: Instant::now(),
            phase: AtomicUsize::new(0),
            stop_producing: AtomicBool::new(false),
            stop_sampling: AtomicBool::new(false),
            enqueued: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            pickup: Mutex::new(Pickup { phases, seconds }),
            waits: Mutex::new(Vec::new()),
        })
    }

    /// The handler's first line: the job's pickup latency into its phase and its second.
    fn picked_up(&self, payload: &[u8]) {
        let now = wall_nanos();
        let sent = payload.get(..8).and_then(|b| b.try_into().ok()).map_or(now, u64::from_le_bytes);
        let phase = payload.get(8).map_or(0, |&p| p as usize).min(Phase::ALL.len() - 1);
        let us = (now.saturating_sub(sent) / 1_000).max(1);
        let second = (sent.saturating_sub(self.start_wall) / 1_000_000_000) as usize;
        if let Ok(mut pickup) = self.pickup.lock() {
            pickup.phases[phase].saturating_record(us);
            let last = pickup.seconds.len() - 1;
            pickup.seconds[second.min(last)].saturating_record(us);
        }
    }
}

// ------------------------------------------------------------------------------- run

/// Runs the scenario on `url` in a scratch schema from `scratch`, then prints its figures
/// (a table, or JSON lines with `--json`).
///
/// # Errors
///
/// The server's errors (among them a database where `pgstattuple` cannot be created), a
/// scratch schema that already exists, and jobs that the pool did not all complete within
/// [`DRAIN_LIMIT`] after the producer stopped.
pub fn run(
    scratch: &mut dyn FnMut(&str) -> CliResult<String>,
    url: &str,
    settings: &Settings,
    ctx: &mut Context,
) -> CliResult<()> {
    let schema = scratch(STEP)?;
    let mut control = connect(url, "fenceq_long_horizon_control")?;
    control
        .batch_execute(CREATE_PGSTATTUPLE)
        .context(|| "creating the pgstattuple extension (PostgreSQL's contrib) in the bench's database".to_string())?;
    let server = Server::read(&mut control)?;
    // The pool's connections carry a name of their own, so the sampler finds them.
    let application = format!("fenceq_long_horizon_{}", std::process::id());
    let queue_url = fenceq::ConnInfo::parse(url)?.set("application_name", &application).to_libpq();
    let queue = Queue::builder()
        .url(queue_url)
        .schema(schema.clone())
        .pool_size(settings.workers as u32 + 4)
        .open_postgres()?;
    let target = Target { url, relation: format!("\"{schema}\".fenceq_jobs"), schema: &schema, server: &server };
    let progress = ctx.out.progress(settings.total_secs(), "long horizon");
    let measured = measure(&queue, &mut control, &target, settings, &application, &progress);
    progress.finish_and_clear();
    let (phases, spikes) = measured?;
    if ctx.json() {
        for line in json_lines(&phases, &spikes, settings, &server) {
            ctx.out.record(&line)?;
        }
        return Ok(());
    }
    let db = ctx.db_display();
    print_report(ctx, &phases, &spikes, settings, &server, &db)
}

/// Where the scenario runs.
struct Target<'a> {
    url: &'a str,
    /// `"schema".fenceq_jobs`, for `regclass`.
    relation: String,
    schema: &'a str,
    server: &'a Server,
}

/// The server's version and autovacuum setting, printed with the figures.
struct Server {
    version: String,
    version_num: i64,
    autovacuum: String,
}

impl Server {
    fn read(conn: &mut PgConnection) -> CliResult<Server> {
        #[derive(QueryableByName)]
        struct Row {
            #[diesel(sql_type = Text)]
            version: String,
            #[diesel(sql_type = BigInt)]
            version_num: i64,
            #[diesel(sql_type = Text)]
            autovacuum: String,
        }
        let row: Row = sql_query(SERVER_SETTINGS).get_result(conn).map_err(db)?;
        Ok(Server { version: row.version, version_num: row.version_num, autovacuum: row.autovacuum })
    }
}

/// The producer, the pool and the sampler under the phases, one after the other; then the
/// drain. Returns each phase's figures and the spike seconds.
fn measure(
    queue: &Queue<PostgresStore>,
    control: &mut PgConnection,
    target: &Target,
    settings: &Settings,
    application: &str,
    progress: &indicatif::ProgressBar,
) -> CliResult<(Vec<PhaseResult>, Vec<Spike>)> {
    let shared = Arc::new(Shared::new(settings.total_secs())?);
    let pool = {
        let shared = shared.clone();
        WorkerPool::builder(queue.clone(), QUEUE)
            .workers(settings.workers)
            .lease(settings.lease)
            .handler(move |attempt| {
                shared.picked_up(attempt.payload());
                std::thread::sleep(HANDLER_SLEEP);
                shared.completed.fetch_add(1, Ordering::Relaxed);
                Outcome::Complete
            })
            .start()?
    };
    let sampler = {
        let (shared, url, application) = (shared.clone(), target.url.to_string(), application.to_string());
        std::thread::spawn(move || sample(&shared, &url, &application))
    };
    let producer = {
        let (shared, queue, rate) = (shared.clone(), queue.clone(), settings.rate);
        std::thread::spawn(move || produce(&shared, &queue, rate))
    };
    let phases = run_phases(queue, control, target, settings, &shared, progress);
    // Whatever happened, stop every thread before returning.
    shared.stop_producing.store(true, Ordering::Relaxed);
    let produced = producer.join().map_err(|_| fail("the long-horizon producer panicked")).and_then(|r| r);
    let drained = drain(&shared);
    let stopped = pool.shutdown(Duration::from_secs(30));
    shared.stop_sampling.store(true, Ordering::Relaxed);
    let sampled = sampler.join().map_err(|_| fail("the long-horizon sampler panicked")).and_then(|r| r);
    let mut phases = phases?;
    let enqueue_calls = produced?;
    drained?;
    stopped?;
    sampled?;
    let pickup = shared.pickup.lock().map_err(|_| fail("a long-horizon handler panicked"))?;
    let waits = shared.waits.lock().map_err(|_| fail("the long-horizon sampler panicked"))?;
    for result in &mut phases {
        let index = Phase::ALL.iter().position(|&p| p == result.phase).unwrap_or(0);
        result.pickup = Percentiles::of(&pickup.phases[index]);
        result.enqueue_call = Percentiles::of(&enqueue_calls[index]);
        let seconds = seconds_of(result);
        let mut total = SecondWaits::default();
        for second in seconds.clone().filter_map(|s| waits.get(s as usize)) {
            total.samples += second.samples;
            total.autovacuum_samples += second.autovacuum_samples;
            for (event, n) in &second.events {
                *total.events.entry(event.clone()).or_default() += n;
            }
        }
        result.waits = top(&total.events, TOP_WAITS)
            .into_iter()
            .map(|(event, n)| (event, n as f64 / total.samples.max(1) as f64))
            .collect();
        result.autovacuum_busy_pct = total.autovacuum_samples as f64 * 100.0 / total.samples.max(1) as f64;
        let after = seconds.start + RECOVERED_WITHIN.as_secs();
        if after < seconds.end {
            let mut merged = histogram(2)?;
            for s in after..seconds.end {
                merged.add(&pickup.seconds[s as usize])?;
            }
            result.p99_after_ms = (!merged.is_empty()).then(|| ms(merged.value_at_quantile(0.99)));
        }
    }
    let mut spikes = Vec::new();
    for (second, h) in pickup.seconds.iter().enumerate() {
        let p99 = if h.is_empty() { 0 } else { h.value_at_quantile(0.99) };
        if p99 <= SPIKE_P99.as_micros() as u64 {
            continue;
        }
        let second = second as u64;
        let phase = phases
            .iter()
            .find(|p| seconds_of(p).contains(&second))
            .or_else(|| phases.last())
            .map_or(Phase::Clean, |p| p.phase);
        let events = waits.get(second as usize).map(|w| top(&w.events, SPIKE_WAITS)).unwrap_or_default();
        spikes.push(Spike { second, phase, p99_ms: ms(p99), max_ms: ms(h.max()), jobs: h.len(), waits: events });
    }
    Ok((phases, spikes))
}

/// The whole seconds of the run a phase covers (a second belongs to the phase it starts in).
fn seconds_of(result: &PhaseResult) -> std::ops::Range<u64> {
    let start = result.started.as_secs_f64().ceil() as u64;
    let end = (result.started.as_secs_f64() + result.secs).ceil() as u64;
    start..end
}

/// The `n` most frequent events, most frequent first (ties by name).
fn top(events: &HashMap<String, u64>, n: usize) -> Vec<(String, u64)> {
    let mut sorted: Vec<(String, u64)> = events.iter().map(|(e, &c)| (e.clone(), c)).collect();
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    sorted.truncate(n);
    sorted
}

fn ms(us: u64) -> f64 {
    us as f64 / 1_000.0
}

/// The controller: each phase with its interference, `stats()` and `n_dead_tup` once a
/// second, the table's snapshot at its end.
fn run_phases(
    queue: &Queue<PostgresStore>,
    control: &mut PgConnection,
    target: &Target,
    settings: &Settings,
    shared: &Shared,
    progress: &indicatif::ProgressBar,
) -> CliResult<Vec<PhaseResult>> {
    let mut before = snapshot(control, target)?;
    let mut results = Vec::new();
    for (index, &phase) in Phase::ALL.iter().enumerate() {
        let secs = settings.phase_secs[index];
        if secs == 0 {
            continue;
        }
        progress.set_message(phase.label());
        let started = shared.start.elapsed();
        let (enqueued, completed) = (shared.enqueued.load(Ordering::Relaxed), shared.completed.load(Ordering::Relaxed));
        shared.phase.store(index, Ordering::Relaxed);
        let interference = Interference::start(phase, target)?;
        let end = Instant::now() + Duration::from_secs(secs);
        let mut stats_calls = Vec::new();
        let mut dead_estimates = Vec::new();
        let mut dead_tuples_max = 0;
        let mut next = Instant::now();
        let mut tick = 0;
        while next < end {
            sleep_until(next);
            let called = Instant::now();
            queue.stats()?;
            stats_calls.push(called.elapsed());
            let activity = table_activity(control, target)?;
            dead_estimates.push(((shared.start.elapsed() - started).as_secs_f64(), activity.n_dead_tup));
            if tick % PGSTATTUPLE_EVERY == PGSTATTUPLE_EVERY - 1 {
                dead_tuples_max = dead_tuples_max.max(heap(control, target)?.dead_tuple_count);
            }
            tick += 1;
            progress.set_position(shared.start.elapsed().as_secs());
            next = (next + STATS_EVERY).max(Instant::now());
        }
        sleep_until(end);
        // Read while the phase's interference still holds: its worst.
        let table = snapshot(control, target)?;
        let reader_scans = interference.finish()?;
        let ended = shared.start.elapsed();
        results.push(PhaseResult {
            phase,
            started,
            secs: (ended - started).as_secs_f64(),
            enqueued: shared.enqueued.load(Ordering::Relaxed) - enqueued,
            completed: shared.completed.load(Ordering::Relaxed) - completed,
            pickup: Percentiles::default(),
            enqueue_call: Percentiles::default(),
            stats_calls,
            dead_estimates,
            dead_tuples_max: dead_tuples_max.max(table.dead_tuples),
            autovacuums: table.autovacuum_count - before.autovacuum_count,
            checkpoints: table.checkpoints - before.checkpoints,
            table: table.clone(),
            reader_scans,
            waits: Vec::new(),
            autovacuum_busy_pct: 0.0,
            p99_after_ms: None,
        });
        before = table;
    }
    Ok(results)
}

fn sleep_until(deadline: Instant) {
    if let Some(wait) = deadline.checked_duration_since(Instant::now()) {
        std::thread::sleep(wait);
    }
}

/// Waits (bounded) until the pool has completed every job the producer enqueued.
fn drain(shared: &Shared) -> CliResult<()> {
    let deadline = Instant::now() + DRAIN_LIMIT;
    loop {
        let (enqueued, completed) = (shared.enqueued.load(Ordering::Relaxed), shared.completed.load(Ordering::Relaxed));
        if completed >= enqueued {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(fail(format!(
                "the long-horizon pool completed {completed} of {enqueued} jobs within {} s of the producer's stop",
                DRAIN_LIMIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ------------------------------------------------------------------------------- threads

/// The producer: open-loop at `rate`, a batch whenever a batch's worth of jobs is due (up to
/// [`MAX_BATCH`] at once when it is late). Returns the enqueue calls' durations per phase.
fn produce(shared: &Shared, queue: &Queue<PostgresStore>, rate: u64) -> CliResult<Vec<Histogram<u64>>> {
    let batch = (rate * TICK.as_millis() as u64).div_ceil(1_000).clamp(1, MAX_BATCH);
    let mut calls = (0..Phase::ALL.len()).map(|_| histogram(3)).collect::<CliResult<Vec<_>>>()?;
    let start = Instant::now();
    let mut sent: u64 = 0;
    while !shared.stop_producing.load(Ordering::Relaxed) {
        sleep_until(start + Duration::from_nanos((sent + batch) * 1_000_000_000 / rate));
        let due = (start.elapsed().as_nanos() * rate as u128 / 1_000_000_000) as u64;
        let n = due.saturating_sub(sent).min(MAX_BATCH);
        if n == 0 {
            continue;
        }
        let phase = shared.phase.load(Ordering::Relaxed);
        let mut payload = vec![0u8; PAYLOAD_BYTES];
        payload[..8].copy_from_slice(&wall_nanos().to_le_bytes());
        payload[8] = phase as u8;
        let called = Instant::now();
        queue.enqueue_batch((0..n).map(|_| NewJob::new(QUEUE, payload.clone())))?;
        calls[phase].saturating_record((called.elapsed().as_micros() as u64).max(1));
        shared.enqueued.fetch_add(n, Ordering::Relaxed);
        sent += n;
    }
    Ok(calls)
}

/// The sampler: the pool's busy backends' wait events every [`SAMPLE_EVERY`], by second.
fn sample(shared: &Shared, url: &str, application: &str) -> CliResult<()> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = fenceq::diesel::sql_types::Bool)]
        autovacuum: bool,
        #[diesel(sql_type = Text)]
        event: String,
    }
    let mut conn = connect(url, "fenceq_long_horizon_sampler")?;
    let mut next = Instant::now();
    while !shared.stop_sampling.load(Ordering::Relaxed) {
        sleep_until(next);
        let rows: Vec<Row> = sql_query(ACTIVITY_SAMPLE).bind::<Text, _>(application).load(&mut conn).map_err(db)?;
        let second = shared.start.elapsed().as_secs() as usize;
        let mut waits = shared.waits.lock().map_err(|_| fail("the long-horizon sampler's lock"))?;
        if waits.len() <= second {
            waits.resize(second + 1, SecondWaits::default());
        }
        let bin = &mut waits[second];
        bin.samples += 1;
        if rows.iter().any(|r| r.autovacuum) {
            bin.autovacuum_samples += 1;
        }
        for row in rows.into_iter().filter(|r| !r.autovacuum) {
            *bin.events.entry(row.event).or_default() += 1;
        }
        next = (next + SAMPLE_EVERY).max(Instant::now());
    }
    Ok(())
}

/// What a phase runs beside the load.
enum Interference {
    Nothing,
    /// The connection holding an XID in an idle transaction.
    Holder(PgConnection),
    /// The scanning connections' threads and their stop flag.
    Readers(Arc<AtomicBool>, Vec<JoinHandle<CliResult<u64>>>),
}

impl Interference {
    fn start(phase: Phase, target: &Target) -> CliResult<Interference> {
        match phase {
            Phase::Clean | Phase::Recovery => Ok(Interference::Nothing),
            Phase::IdleInTransaction => {
                let mut conn = connect(target.url, "fenceq_long_horizon_holder")?;
                conn.batch_execute(HOLDER_BEGIN).map_err(db)?;
                Ok(Interference::Holder(conn))
            }
            Phase::Readers => {
                let stop = Arc::new(AtomicBool::new(false));
                let mut threads = Vec::new();
                for _ in 0..READERS {
                    let mut conn = connect(target.url, "fenceq_long_horizon_reader")?;
                    conn.batch_execute(&format!("SET search_path TO \"{}\"", target.schema)).map_err(db)?;
                    let stop = stop.clone();
                    threads.push(std::thread::spawn(move || -> CliResult<u64> {
                        // At least one transaction, however short the phase.
                        let mut scans = 0;
                        loop {
                            conn.batch_execute(READER_BEGIN).map_err(db)?;
                            conn.batch_execute(READER_COUNT).map_err(db)?;
                            conn.batch_execute(READER_SCAN).map_err(db)?;
                            conn.batch_execute(READER_END).map_err(db)?;
                            scans += 1;
                            if stop.load(Ordering::Relaxed) {
                                return Ok(scans);
                            }
                        }
                    }));
                }
                Ok(Interference::Readers(stop, threads))
            }
        }
    }

    /// Ends it; returns the readers' completed transactions (0 for the others).
    fn finish(self) -> CliResult<u64> {
        match self {
            Interference::Nothing => Ok(0),
            Interference::Holder(mut conn) => {
                conn.batch_execute(HOLDER_END).map_err(db)?;
                Ok(0)
            }
            Interference::Readers(stop, threads) => {
                stop.store(true, Ordering::Relaxed);
                let mut scans = 0;
                for thread in threads {
                    scans += thread.join().map_err(|_| fail("a long-horizon reader panicked"))??;
                }
                Ok(scans)
            }
        }
    }
}

// ------------------------------------------------------------------------------- server reads

/// A plain connection (not fenceq's), named `application` in `pg_stat_activity`.
fn connect(url: &str, application: &str) -> CliResult<PgConnection> {
    let url = fenceq::ConnInfo::parse(url)?.set("application_name", application).to_libpq();
    // The error names the server's reason, never the URL (it may hold a password).
    let mut conn = PgConnection::establish(&url).map_err(|e| fail(format!("the long-horizon connection: {e}")))?;
    conn.batch_execute("SET statement_timeout = '600s'").map_err(db)?;
    Ok(conn)
}

/// What the scenario's own statements fail with.
fn db(e: fenceq::diesel::result::Error) -> crate::BoxError {
    fail(format!("the long-horizon scenario: {e}"))
}

#[derive(QueryableByName)]
struct Activity {
    #[diesel(sql_type = BigInt)]
    n_dead_tup: i64,
    #[diesel(sql_type = BigInt)]
    autovacuum_count: i64,
}

fn table_activity(conn: &mut PgConnection, target: &Target) -> CliResult<Activity> {
    sql_query(TABLE_ACTIVITY).bind::<Text, _>(&target.relation).get_result(conn).map_err(db)
}

/// `pgstattuple`'s reading of the heap.
#[derive(QueryableByName)]
struct Heap {
    #[diesel(sql_type = BigInt)]
    tuple_count: i64,
    #[diesel(sql_type = BigInt)]
    dead_tuple_count: i64,
    #[diesel(sql_type = Double)]
    dead_tuple_percent: f64,
    #[diesel(sql_type = BigInt)]
    table_len: i64,
}

fn heap(conn: &mut PgConnection, target: &Target) -> CliResult<Heap> {
    sql_query(TABLE_DEAD_TUPLES).bind::<Text, _>(&target.relation).get_result(conn).map_err(db)
}

/// `pgstattuple`, the index sizes and the counters at this instant.
fn snapshot(conn: &mut PgConnection, target: &Target) -> CliResult<TableSnapshot> {
    #[derive(QueryableByName)]
    struct Index {
        #[diesel(sql_type = Text)]
        name: String,
        #[diesel(sql_type = BigInt)]
        bytes: i64,
    }
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let dead = heap(conn, target)?;
    let indexes: Vec<Index> = sql_query(TABLE_INDEX_SIZES).bind::<Text, _>(&target.relation).load(conn).map_err(db)?;
    let activity = table_activity(conn, target)?;
    let checkpoints = if target.server.version_num >= 170_000 { CHECKPOINTS_SINCE_17 } else { CHECKPOINTS_BEFORE_17 };
    let checkpoints: Count = sql_query(checkpoints).get_result(conn).map_err(db)?;
    Ok(TableSnapshot {
        rows: dead.tuple_count,
        dead_tuples: dead.dead_tuple_count,
        dead_percent: dead.dead_tuple_percent,
        table_bytes: dead.table_len,
        indexes: indexes.into_iter().map(|i| (i.name, i.bytes)).collect(),
        autovacuum_count: activity.autovacuum_count,
        checkpoints: checkpoints.n,
    })
}

// ------------------------------------------------------------------------------- report

/// One goal of the issue, against this run.
struct Goal {
    name: &'static str,
    value: f64,
    target: String,
    met: bool,
}

fn goals(phases: &[PhaseResult]) -> Vec<Goal> {
    let find = |phase: Phase| phases.iter().find(|p| p.phase == phase);
    let mut goals = Vec::new();
    let clean = find(Phase::Clean);
    if let Some(clean) = clean {
        let dead = clean.dead_tuples_max;
        goals.push(Goal {
            name: "clean: dead tuples, most pgstattuple counted",
            value: dead as f64,
            target: format!("≤ {GOAL_CLEAN_DEAD_TUPLES}"),
            met: dead <= GOAL_CLEAN_DEAD_TUPLES,
        });
        let p99 = ms(clean.pickup.p99);
        goals.push(Goal {
            name: "clean: pickup p99 ms",
            value: p99,
            target: format!("< {GOAL_CLEAN_P99_MS}"),
            met: p99 < GOAL_CLEAN_P99_MS,
        });
    }
    if let Some(idle) = find(Phase::IdleInTransaction) {
        let p99 = ms(idle.pickup.p99);
        goals.push(Goal {
            name: "idle in transaction: pickup p99 ms",
            value: p99,
            target: format!("< {GOAL_IDLE_P99_MS}"),
            met: p99 < GOAL_IDLE_P99_MS,
        });
    }
    if let (Some(clean), Some(recovery)) = (clean, find(Phase::Recovery)) {
        if let Some(after) = recovery.p99_after_ms {
            let clean_p99 = ms(clean.pickup.p99);
            goals.push(Goal {
                name: "recovery: pickup p99 ms from its 30th second on",
                value: after,
                target: format!("≤ clean p99 ({clean_p99:.1})"),
                met: after <= clean_p99,
            });
        }
    }
    let worst = phases.iter().map(|p| p.stats_ms().0).fold(0.0, f64::max);
    goals.push(Goal {
        name: "stats(): the slowest phase's median ms",
        value: worst,
        target: format!("< {GOAL_STATS_MS} (at 1,000,000 settled rows)"),
        met: worst < GOAL_STATS_MS,
    });
    goals
}

/// Every JSON line carries the run's settings.
fn settings_json(settings: &Settings, server: &Server) -> Value {
    json!({
        "offered_per_s": settings.rate,
        "workers": settings.workers,
        "phase_secs": settings.phase_secs,
        "lease_secs": settings.lease.as_secs(),
        "server_version": server.version,
        "autovacuum": server.autovacuum,
    })
}

/// One line per phase metric, one per index size and wait event, one per spike second, one
/// per goal.
fn json_lines(phases: &[PhaseResult], spikes: &[Spike], settings: &Settings, server: &Server) -> Vec<Value> {
    let mut lines = Vec::new();
    let figure = |phase: Phase, metric: &str, value: f64, unit: &str| {
        let mut line = settings_json(settings, server);
        line["scenario"] = json!(format!("postgres/{STEP}/{}/{metric}", phase.name()));
        line["phase"] = json!(phase.name());
        line["value"] = json!((value * 1000.0).round() / 1000.0);
        line["unit"] = json!(unit);
        line
    };
    for (i, p) in phases.iter().enumerate() {
        let (stats_median, stats_max) = p.stats_ms();
        let mut metrics = vec![
            ("seconds", p.secs, "s"),
            ("offered", settings.rate as f64, "jobs/s"),
            ("enqueued", p.enqueued_per_s(), "jobs/s"),
            ("completed", p.completed_per_s(), "jobs/s"),
            ("pickup_p50", ms(p.pickup.p50), "ms"),
            ("pickup_p95", ms(p.pickup.p95), "ms"),
            ("pickup_p99", ms(p.pickup.p99), "ms"),
            ("pickup_max", ms(p.pickup.max), "ms"),
            ("picked_up", p.pickup.count as f64, "jobs"),
            ("enqueue_call_p99", ms(p.enqueue_call.p99), "ms"),
            ("stats_median", stats_median, "ms"),
            ("stats_max", stats_max, "ms"),
            ("rows", p.table.rows as f64, "rows"),
            ("dead_tuples", p.table.dead_tuples as f64, "tuples"),
            ("dead_tuples_max", p.dead_tuples_max as f64, "tuples"),
            ("dead_tuple_percent", p.table.dead_percent, "%"),
            ("table_bytes", p.table.table_bytes as f64, "bytes"),
            ("n_dead_tup_max", p.dead_estimate_max() as f64, "tuples"),
            ("autovacuums", p.autovacuums as f64, "runs"),
            ("checkpoints", p.checkpoints as f64, "checkpoints"),
            ("autovacuum_busy", p.autovacuum_busy_pct, "% of samples"),
        ];
        if p.phase == Phase::Readers {
            metrics.push(("reader_transactions", p.reader_scans as f64, "transactions"));
        }
        if let Some(after) = p.p99_after_ms {
            metrics.push(("pickup_p99_after_30s", after, "ms"));
        }
        if let Some(halved) = p.dead_halved_after(i.checked_sub(1).map(|i| &phases[i])) {
            metrics.push(("n_dead_tup_halved_after", halved, "s"));
        }
        for (metric, value, unit) in metrics {
            lines.push(figure(p.phase, metric, value, unit));
        }
        for (name, bytes) in &p.table.indexes {
            let mut line = figure(p.phase, &format!("index_bytes/{name}"), *bytes as f64, "bytes");
            line["index"] = json!(name);
            lines.push(line);
        }
        for (rank, (event, backends)) in p.waits.iter().enumerate() {
            let mut line = figure(p.phase, &format!("wait_event/{}", rank + 1), *backends, "backends per sample");
            line["wait_event"] = json!(event);
            lines.push(line);
        }
    }
    for s in spikes {
        let mut line = figure(s.phase, "spike_second", s.p99_ms, "ms p99");
        line["second"] = json!(s.second);
        line["max_ms"] = json!(s.max_ms);
        line["jobs"] = json!(s.jobs);
        line["wait_events"] = json!(s.waits.iter().map(|(e, n)| json!({"event": e, "samples": n})).collect::<Vec<_>>());
        lines.push(line);
    }
    for goal in goals(phases) {
        let mut line = settings_json(settings, server);
        line["summary"] = json!("goal");
        line["goal"] = json!(goal.name);
        line["value"] = json!((goal.value * 1000.0).round() / 1000.0);
        line["target"] = json!(goal.target);
        line["met"] = json!(goal.met);
        lines.push(line);
    }
    lines
}

fn mb(bytes: i64) -> String {
    format!("{:.1}", bytes as f64 / 1_048_576.0)
}

fn print_report(
    ctx: &mut Context,
    phases: &[PhaseResult],
    spikes: &[Spike],
    settings: &Settings,
    server: &Server,
    db: &str,
) -> CliResult<()> {
    let mut header = vec![String::new()];
    header.extend(phases.iter().map(|p| p.phase.label().to_string()));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = crate::output::table(&header);
    let row = |label: &str, cell: &dyn Fn(&PhaseResult) -> String| {
        let mut line = vec![label.to_string()];
        line.extend(phases.iter().map(cell));
        line
    };
    let one = |v: f64| format!("{v:.1}");
    table.add_row(row("seconds", &|p| format!("{:.0}", p.secs)));
    table.add_row(row("offered jobs/s", &|_| settings.rate.to_string()));
    table.add_row(row("enqueued jobs/s", &|p| format!("{:.0}", p.enqueued_per_s())));
    table.add_row(row("completed jobs/s", &|p| format!("{:.0}", p.completed_per_s())));
    table.add_row(row("pickup p50 ms", &|p| one(ms(p.pickup.p50))));
    table.add_row(row("pickup p95 ms", &|p| one(ms(p.pickup.p95))));
    table.add_row(row("pickup p99 ms", &|p| one(ms(p.pickup.p99))));
    table.add_row(row("pickup max ms", &|p| one(ms(p.pickup.max))));
    table.add_row(row("pickup p99 ms from 30 s on", &|p| p.p99_after_ms.map_or_else(String::new, one)));
    table.add_row(row("enqueue call p99 ms", &|p| one(ms(p.enqueue_call.p99))));
    table.add_row(row("stats() median ms", &|p| one(p.stats_ms().0)));
    table.add_row(row("stats() max ms", &|p| one(p.stats_ms().1)));
    table.add_row(row("rows at the end", &|p| p.table.rows.to_string()));
    table.add_row(row("dead tuples at the end (pgstattuple)", &|p| p.table.dead_tuples.to_string()));
    table.add_row(row("dead tuples, most counted (every 5 s)", &|p| p.dead_tuples_max.to_string()));
    table.add_row(row("dead tuple %", &|p| one(p.table.dead_percent)));
    table.add_row(row("n_dead_tup max (stats)", &|p| p.dead_estimate_max().to_string()));
    table.add_row(row("n_dead_tup halved after s", &|p| {
        let previous = phases.iter().position(|q| q.phase == p.phase).and_then(|i| i.checked_sub(1));
        p.dead_halved_after(previous.map(|i| &phases[i])).map_or_else(String::new, |s| format!("{s:.0}"))
    }));
    table.add_row(row("table MB", &|p| mb(p.table.table_bytes)));
    let names: Vec<String> =
        phases.first().map(|p| p.table.indexes.iter().map(|(n, _)| n.clone()).collect()).unwrap_or_default();
    for name in &names {
        table.add_row(row(&format!("{name} MB"), &|p| {
            p.table.indexes.iter().find(|(n, _)| n == name).map_or_else(String::new, |(_, b)| mb(*b))
        }));
    }
    table.add_row(row("autovacuum runs", &|p| p.autovacuums.to_string()));
    table.add_row(row("autovacuum busy % of samples", &|p| one(p.autovacuum_busy_pct)));
    table.add_row(row("checkpoints", &|p| p.checkpoints.to_string()));
    table.add_row(row("reader transactions", &|p| {
        if p.phase == Phase::Readers {
            p.reader_scans.to_string()
        } else {
            String::new()
        }
    }));
    ctx.out.table(&table)?;
    ctx.out.line("top wait events of the pool's busy backends (average backends per sample):")?;
    for p in phases {
        let waits: Vec<String> = p.waits.iter().map(|(e, n)| format!("{e} {n:.2}")).collect();
        ctx.out.line(format!("  {}: {}", p.phase.label(), waits.join(", ")))?;
    }
    ctx.out.line(format!("seconds whose pickup p99 exceeded {} ms: {}", SPIKE_P99.as_millis(), spikes.len()))?;
    for s in spikes {
        let waits: Vec<String> = s.waits.iter().map(|(e, n)| format!("{e} {n}")).collect();
        ctx.out.line(format!(
            "  {} s ({}): p99 {:.1} ms, max {:.1} ms, {} jobs; waits: {}",
            s.second,
            s.phase.label(),
            s.p99_ms,
            s.max_ms,
            s.jobs,
            waits.join(", ")
        ))?;
    }
    let mut table = crate::output::table(&["goal", "this run", "target", "met"]);
    for goal in goals(phases) {
        table.add_row(vec![
            goal.name.to_string(),
            format!("{:.1}", goal.value),
            goal.target,
            if goal.met { "yes".to_string() } else { "NO".to_string() },
        ]);
    }
    ctx.out.table(&table)?;
    ctx.out.line(format!(
        "offered {} jobs/s, {} workers (lease {} s), handler {} ms, payload {} B, batches of up to {} every {} ms; \
         on {db} (PostgreSQL {}, autovacuum={}); nothing pruned during the run",
        settings.rate,
        settings.workers,
        settings.lease.as_secs(),
        HANDLER_SLEEP.as_millis(),
        PAYLOAD_BYTES,
        MAX_BATCH,
        TICK.as_millis(),
        server.version,
        server.autovacuum
    ))?;
    Ok(())
}
