//! Pickup latency: from a job's enqueue to the first line of its handler, at a fixed offered
//! rate, for a producer in the pool's own process and for one in another OS process.
//!
//! What users feel at low load is not throughput but how long a job waits between its commit
//! and its handler. Each job carries the wall-clock instant (`SystemTime`, nanoseconds since
//! the Unix epoch: `CLOCK_REALTIME`, the one clock two processes on one machine share) read
//! just before its `enqueue` call; the handler's first line reads the same clock and records
//! the difference in an HDR histogram. The figure therefore includes the enqueue's own
//! commit, which is what a producer waits for anyway.
//!
//! The producer is open-loop: job `i` is enqueued at `start + i / rate` (at once when it is
//! late), whatever the pool does, so a slow pickup cannot slow the offered rate down. The
//! pool keeps the default poll interval, so a wake-up that does not arrive shows as the poll
//! interval in the figures. The other process is this same binary run with the hidden
//! `--pickup-producer` argument ([`producer`]), spawned directly (no shell), the database in
//! its environment ([`DB_VARIABLE`]: a PostgreSQL URL may hold a password, which a command
//! line would show to every user of the machine).

use crate::scenarios::Figure;
use crate::{fail, CliResult, ResultExt};
use fenceq::store::Store;
use fenceq::{NewJob, Outcome, Queue, WorkerPool};
use hdrhistogram::Histogram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The queue the pickup jobs go to.
const QUEUE: &str = "pickup";
/// The offered rates, jobs/s, and how many jobs each one offers in a run of the default
/// `--jobs` (20,000): 8 s at 5/s (each job comes to a file quiet since the last one's
/// settle), 3 s at 100/s, 2 s at 2,000/s; a smaller `--jobs` offers fewer.
pub const RATES: [(u64, u64); 3] = [(5, 40), (100, 300), (2_000, 4_000)];
/// The environment variable that names the other process's database: an SQLite file, or a
/// PostgreSQL URL and schema as `URL#SCHEMA`.
pub const DB_VARIABLE: &str = "FENCEQ_BENCH_PICKUP_DB";
/// The `--jobs` at which each rate offers the jobs [`RATES`] names.
const FULL_SIZE: u64 = 20_000;

/// Nanoseconds since the Unix epoch on the wall clock both processes read.
fn wall_nanos() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// Enqueues `jobs` jobs at `rate` jobs/s, each carrying the instant just before its enqueue.
pub fn produce<S: Store>(queue: &Queue<S>, rate: u64, jobs: u64) -> CliResult<()> {
    let start = Instant::now();
    for j in 0..jobs {
        let due = start + Duration::from_nanos(j * 1_000_000_000 / rate);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        queue.enqueue(NewJob::new(QUEUE, wall_nanos().to_le_bytes().to_vec()))?;
    }
    Ok(())
}

/// Where the producer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Producer {
    /// A thread of the pool's process, on the pool's own queue handle.
    SameProcess,
    /// Another OS process, on a queue handle of its own.
    OtherProcess,
}

impl Producer {
    /// Both, in the order each rate measures them.
    pub const BOTH: [Producer; 2] = [Producer::SameProcess, Producer::OtherProcess];

    fn name(self) -> &'static str {
        match self {
            Producer::SameProcess => "same_process",
            Producer::OtherProcess => "other_process",
        }
    }
}

/// One figure: a pool of `workers` on `queue` (opened on `db`) while `producer` offers `jobs`
/// jobs at `rate` jobs/s. `store` names the store in the scenario's name.
pub fn measure<S: Store>(
    (store, queue, db): (&str, &Queue<S>, &str),
    workers: usize,
    producer: Producer,
    (rate, jobs): (u64, u64),
) -> CliResult<Figure> {
    let histogram = Arc::new(Mutex::new(Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?));
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
    let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let pool = {
        let histogram = histogram.clone();
        let seen = seen.clone();
        WorkerPool::builder(queue.clone(), QUEUE)
            .workers(workers)
            .handler(move |attempt| {
                let now = wall_nanos();
                let sent = attempt.payload().try_into().map(u64::from_le_bytes).unwrap_or(now);
                let _ = histogram.lock().map(|mut h| h.saturating_record(now.saturating_sub(sent).max(1)));
                if seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1 == jobs {
                    let _ = done_tx.try_send(());
                }
                Outcome::Complete
            })
            .start()?
    };
    let fed = match producer {
        Producer::SameProcess => produce(queue, rate, jobs),
        Producer::OtherProcess => spawn_producer(db, rate, jobs),
    };
    let finished = fed.and_then(|()| {
        done_rx
            .recv_timeout(Duration::from_secs(120))
            .map_err(|_| fail("the pickup jobs did not finish within 2 minutes"))
    });
    pool.shutdown(Duration::from_secs(30))?;
    finished?;
    let h = histogram.lock().map_err(|_| fail("a pickup handler panicked"))?;
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1_000.0;
    Ok(Figure::of(format!("pickup/{store}/{}/{rate}_per_s", producer.name()), us(0.5), "us_p50")
        .with("p95_us", us(0.95))
        .with("p99_us", us(0.99))
        .with("max_us", h.max() as f64 / 1_000.0)
        .with("picked_up", h.len() as f64))
}

/// Runs this binary as the other process's producer on `db` and waits for it.
fn spawn_producer(db: &str, rate: u64, jobs: u64) -> CliResult<()> {
    let exe = std::env::current_exe()?;
    let status = Command::new(&exe)
        .arg("--pickup-producer")
        .arg(format!("{rate}:{jobs}"))
        .env(DB_VARIABLE, db)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .context(|| format!("running {} as the pickup producer", exe.display()))?;
    if !status.success() {
        return Err(fail(format!("the pickup producer process failed ({status})")));
    }
    Ok(())
}

/// The other process's side (`--pickup-producer RATE:JOBS`): opens the queue on the database
/// [`DB_VARIABLE`] names and produces.
pub fn producer(spec: &str) -> CliResult<()> {
    let parsed = spec.split_once(':').and_then(|(rate, jobs)| Some((rate.parse().ok()?, jobs.parse().ok()?)));
    let Some((rate, jobs)) = parsed.filter(|&(rate, _): &(u64, u64)| rate > 0) else {
        return Err(fail("--pickup-producer RATE:JOBS (a rate above 0)"));
    };
    let db = std::env::var(DB_VARIABLE).map_err(|_| fail(format!("--pickup-producer needs {DB_VARIABLE}")))?;
    if fenceq::is_connection_string(&db) {
        #[cfg(feature = "postgres")]
        {
            let (url, schema) = db.rsplit_once('#').ok_or_else(|| fail(format!("{DB_VARIABLE}: URL#SCHEMA")))?;
            let queue = Queue::builder().url(url.to_string()).schema(schema.to_string()).open_postgres()?;
            return produce(&queue, rate, jobs);
        }
        #[cfg(not(feature = "postgres"))]
        return Err(fail("--pickup-producer: a PostgreSQL URL needs the `postgres` feature"));
    }
    produce(&Queue::open(Path::new(&db))?, rate, jobs)
}

/// The jobs each rate offers in a run of `jobs` (`--jobs`): [`RATES`] scaled down below
/// [`FULL_SIZE`], at least 5.
pub fn rates(jobs: u64) -> [(u64, u64); 3] {
    RATES.map(|(rate, n)| (rate, (n * jobs.min(FULL_SIZE) / FULL_SIZE).max(5)))
}

/// What a pool that waits costs while nothing happens: the share of one core the whole
/// process used over `idle` with one pool of `workers` waiting on `queue`, and the share of
/// the store's watcher thread alone (`fenceq-watch`), from the kernel's per-thread CPU time
/// (`/proc/self/task/*/schedstat`, nanoseconds). `None` where there is no such file.
pub fn idle_cost<S: Store>(store: &str, queue: &Queue<S>, workers: usize, idle: Duration) -> CliResult<Option<Figure>> {
    let pool = WorkerPool::builder(queue.clone(), QUEUE).workers(workers).handler(|_| Outcome::Complete).start()?;
    // Past the pool's start-up and first claim.
    std::thread::sleep(Duration::from_millis(100));
    let before = thread_cpu();
    let started = Instant::now();
    std::thread::sleep(idle);
    let after = thread_cpu();
    let elapsed = started.elapsed().as_nanos() as f64;
    pool.shutdown(Duration::from_secs(30))?;
    let (Some(before), Some(after)) = (before, after) else { return Ok(None) };
    let used = |name: Option<&str>| -> f64 {
        let of = |cpu: &[(String, String, u64)]| -> u64 {
            cpu.iter().filter(|(_, comm, _)| name.is_none_or(|n| comm == n)).map(|(_, _, ns)| ns).sum()
        };
        of(&after).saturating_sub(of(&before)) as f64 * 100.0 / elapsed
    };
    Ok(Some(
        Figure::of(format!("pickup/{store}/idle_cpu"), used(None), "pct_core")
            .with("watcher_pct_core", used(Some("fenceq-watch")))
            .with("idle_s", idle.as_secs_f64()),
    ))
}

/// Each thread of this process: its id, its name and the CPU time it used (ns).
fn thread_cpu() -> Option<Vec<(String, String, u64)>> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default().trim().to_string();
        let Ok(stat) = std::fs::read_to_string(path.join("schedstat")) else { continue };
        let ns = stat.split_whitespace().next()?.parse().ok()?;
        threads.push((path.file_name()?.to_string_lossy().into_owned(), comm, ns));
    }
    Some(threads)
}

/// The pickup step on SQLite: every rate, the producer in this process then in another, each
/// on a fresh file; then the idle cost of a waiting pool (10 s in a run of the default
/// `--jobs`, less in a smaller one).
pub fn sqlite_round(
    (jobs, workers): (u64, usize),
    fresh: &dyn Fn(&str) -> std::path::PathBuf,
    out: &mut dyn FnMut(Figure) -> CliResult<()>,
) -> CliResult<()> {
    for rates in rates(jobs) {
        for producer in Producer::BOTH {
            let path = fresh(&format!("pickup_{}_{}", producer.name(), rates.0));
            let queue = Queue::open(&path)?;
            out(measure(("sqlite", &queue, &path.to_string_lossy()), workers, producer, rates)?)?;
        }
    }
    let idle = Duration::from_millis(10_000 * jobs.min(FULL_SIZE) / FULL_SIZE).max(Duration::from_millis(500));
    if let Some(figure) = idle_cost("sqlite", &Queue::open(fresh("pickup_idle"))?, workers, idle)? {
        out(figure)?;
    }
    Ok(())
}

/// The pickup step on PostgreSQL (`--db postgres://... --only pickup`): every rate, the
/// producer in this process then in another, each on a fresh scratch schema (`scratch`), in
/// `rounds` rounds on `url`; a JSON line per figure with `--json`, then (or else) the medians
/// of the rounds.
#[cfg(feature = "postgres")]
pub fn postgres_rounds(
    scratch: &mut dyn FnMut(&str) -> CliResult<String>,
    (url, jobs, workers, rounds): (&str, u64, usize, usize),
    ctx: &mut crate::Context,
) -> CliResult<()> {
    use serde_json::{json, Value};
    let mut figures: Vec<Figure> = Vec::new();
    for round in 1..=rounds {
        for rates in rates(jobs) {
            for producer in Producer::BOTH {
                let which = if producer == Producer::SameProcess { 's' } else { 'o' };
                let schema = scratch(&format!("pu{which}{}_{round}", rates.0))?;
                let queue = Queue::builder()
                    .url(url.to_string())
                    .schema(schema.clone())
                    .pool_size(workers as u32 + 2)
                    .open_postgres()?;
                let figure = measure(("postgres", &queue, &format!("{url}#{schema}")), workers, producer, rates)?;
                if ctx.json() {
                    let mut line = json!({"round": round, "scenario": figure.scenario, "value": figure.value, "unit": figure.unit, "jobs": jobs, "workers": workers});
                    for (key, value) in &figure.details {
                        line[key] = Value::from(*value);
                    }
                    ctx.out.record(&line)?;
                }
                figures.push(figure);
            }
        }
    }
    let mut names: Vec<&str> = Vec::new();
    for f in &figures {
        if !names.contains(&f.scenario.as_str()) {
            names.push(&f.scenario);
        }
    }
    let median = |name: &str, key: Option<&str>| {
        let values: Vec<f64> = figures
            .iter()
            .filter(|f| f.scenario == name)
            .filter_map(|f| match key {
                None => Some(f.value),
                Some(key) => f.details.iter().find(|(k, _)| k == key).map(|(_, v)| *v),
            })
            .collect();
        crate::rounds::Spread::of(&values).median
    };
    if ctx.json() {
        for name in names {
            ctx.out.record(&json!({"summary": "figure", "scenario": name, "median": median(name, None),
                "p95_us": median(name, Some("p95_us")), "p99_us": median(name, Some("p99_us")), "rounds_measured": rounds}))?;
        }
        return Ok(());
    }
    let mut table = crate::output::table(&["scenario", "p50 µs", "p95 µs", "p99 µs", "max µs"]);
    for name in names {
        let cell = |key| format!("{:.0}", median(name, key));
        table.add_row(vec![
            name.to_string(),
            cell(None),
            cell(Some("p95_us")),
            cell(Some("p99_us")),
            cell(Some("max_us")),
        ]);
    }
    ctx.out.table(&table)?;
    ctx.out.line(format!("pickup latency, medians of {rounds} rounds; workers={workers}"))?;
    Ok(())
}
