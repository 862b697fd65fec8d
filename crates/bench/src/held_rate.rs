//! A queue-wide rate held across processes: four OS processes, each a worker pool of eight
//! on one queue limited to `--rate-limit` starts per second, work through a backlog longer
//! than `--rate-secs` seconds of that rate. From every start's instant by the store's clock
//! (the claim's lease end less the lease, recorded by the handler and sent to the parent on
//! exit) the bench reports how close to the limit the processes came over the first
//! `--rate-secs` seconds (the backlog outlasts them, so work was pending all along), and
//! fails if any window of one second held more starts than the limit: that is the store's
//! guarantee, not a figure.
//!
//! Beside the windows, each handler records its own start by the same clock
//! (`Queue::now_ms`), and the bench reports the delay from each claim's instant
//! (`Claimed::claimed_at`, what the limit counted) to its handler's start: p50, p99 and max.
//! A provider counts requests, not claims: a handler that starts `d` after its claim sends
//! `d` later than the limit counted it, so this delay is the headroom a limit needs.
//!
//! The children are this bench's own executable, told their role by [`CHILD_ENV`]
//! (`main.rs` looks for it before parsing a command line).

use crate::scenarios::Figure;
use crate::{fail, BoxError, CliResult};
use fenceq::store::Store;
use fenceq::{Limits, Outcome, Queue, Rate, WorkerPool};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The environment variable that makes `fenceq-bench` a child of this scenario; its value
/// is the child's `Target::spec`.
pub const CHILD_ENV: &str = "FENCEQ_BENCH_HELD_RATE_CHILD";

const QUEUE: &str = "bench";
const PROCESSES: usize = 4;
const WORKERS: usize = 8;
/// Far longer than any handler runs: no start in the run is a reclaim.
const LEASE: Duration = Duration::from_secs(60);
/// The limit's window.
const WINDOW: Duration = Duration::from_secs(1);
/// The prefix of the line a child sends its starts on.
const MARK: &str = "@@held-rate ";

/// The database the parent and its children share.
#[derive(Debug, Clone)]
pub enum Target {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A scratch schema on a PostgreSQL server.
    #[cfg(feature = "postgres")]
    Postgres {
        /// The server's URL (it may hold a password: never printed).
        url: String,
        /// The scratch schema.
        schema: String,
    },
}

impl Target {
    /// One line a child opens the same database from.
    fn spec(&self) -> String {
        match self {
            Target::Sqlite(path) => format!("sqlite\t{}", path.display()),
            #[cfg(feature = "postgres")]
            Target::Postgres { url, schema } => format!("postgres\t{schema}\t{url}"),
        }
    }

    fn from_spec(spec: &str) -> CliResult<Target> {
        match spec.split_once('\t') {
            Some(("sqlite", path)) => Ok(Target::Sqlite(PathBuf::from(path))),
            #[cfg(feature = "postgres")]
            Some(("postgres", rest)) => {
                let (schema, url) = rest.split_once('\t').ok_or_else(|| fail("a child's spec without a URL"))?;
                Ok(Target::Postgres { url: url.to_string(), schema: schema.to_string() })
            }
            _ => Err(fail(format!("{CHILD_ENV}: not a spec this build opens"))),
        }
    }

    /// Runs `with` on a handle of the database (pool size fit for the workers).
    fn with_queue<T>(&self, with: impl WithQueue<T>) -> CliResult<T> {
        let pool = WORKERS as u32 + 2;
        match self {
            Target::Sqlite(path) => with.run(Queue::builder().path(path).pool_size(pool).open()?),
            #[cfg(feature = "postgres")]
            Target::Postgres { url, schema } => {
                with.run(Queue::builder().url(url.clone()).schema(schema.clone()).pool_size(pool).open_postgres()?)
            }
        }
    }
}

/// A call generic over the store (a closure cannot be).
trait WithQueue<T> {
    fn run<S: Store>(self, queue: Queue<S>) -> CliResult<T>;
}

/// What the scenario holds: the queue's rate (starts per second), the seconds measured, and
/// how many groups the jobs go into (0: none).
#[derive(Debug, Clone, Copy)]
pub struct HeldRate {
    /// Starts per second.
    pub limit: u32,
    /// Seconds measured.
    pub secs: u64,
    /// Groups of the jobs, each with a rate as high as the queue's (0: no groups).
    pub groups: u32,
}

/// The scenario's result: how close the processes came to the limit, and the most starts any
/// window held. Fails if a window held more than the limit, or a job did not run once.
///
/// # Errors
///
/// The store's errors, a child that failed or outran its bound, a job that did not start
/// exactly once, and a window over the limit.
pub fn run(target: &Target, held: HeldRate) -> CliResult<Figure> {
    let HeldRate { limit, secs, groups } = held;
    // One more second of backlog than is measured: work is pending through the whole run.
    let jobs = u64::from(limit) * (secs + 1);
    target.with_queue(Prepare { limit, jobs, groups })?;
    let bound = Duration::from_secs(secs * 4 + 120);
    let deadline = Instant::now() + bound;
    let children: Vec<Worker> = (0..PROCESSES).map(|_| Worker::spawn(target)).collect::<CliResult<_>>()?;
    let mut starts = Vec::with_capacity(jobs as usize);
    let mut delays = Vec::with_capacity(jobs as usize);
    let mut failed = None;
    for child in children {
        match child.finish(deadline) {
            Ok(theirs) => {
                for Start { claimed_at, handler_at } in theirs {
                    starts.push(claimed_at);
                    delays.push(handler_at - claimed_at);
                }
            }
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    if starts.len() as u64 != jobs {
        return Err(fail(format!("{} starts recorded for {jobs} jobs: each should start once", starts.len())));
    }
    let window_ms = WINDOW.as_millis() as i64;
    let most = fenceq_conformance::most_in_window(&mut starts, window_ms);
    if most > limit as usize {
        return Err(fail(format!("{most} starts in one window of {window_ms} ms, over the limit of {limit}")));
    }
    let first = starts[0];
    let measured = secs as i64 * 1000;
    let in_run = starts.iter().filter(|&&at| at < first + measured).count();
    let held = 100.0 * in_run as f64 / (f64::from(limit) * secs as f64);
    let in_groups = if groups > 0 { format!("_{groups}_groups") } else { String::new() };
    delays.sort_unstable();
    let delay = |q: f64| delays[((delays.len() - 1) as f64 * q).round() as usize] as f64;
    Ok(Figure::of(
        format!("fenceq/flow/rate_{limit}_per_s_{PROCESSES}_processes_{secs}_s{in_groups}"),
        held,
        "%_of_limit",
    )
    .with("starts_in_run", in_run as f64)
    .with("most_in_any_1s", most as f64)
    .with("limit", f64::from(limit))
    .with("claim_to_handler_p50_ms", delay(0.5))
    .with("claim_to_handler_p99_ms", delay(0.99))
    .with("claim_to_handler_max_ms", delay(1.0)))
}

/// One start as a child records it: the claim's instant (what the limit counted) and its
/// handler's start, both by the store's clock (ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Start {
    claimed_at: i64,
    handler_at: i64,
}

impl Start {
    fn to_text(self) -> String {
        format!("{}:{}", self.claimed_at, self.handler_at)
    }

    fn parse(text: &str) -> CliResult<Start> {
        let (claimed, started) = text.split_once(':').ok_or_else(|| fail(format!("a child's start {text:?}")))?;
        let number = |s: &str| s.parse::<i64>().map_err(|e| fail(format!("a child's start {text:?}: {e}")));
        Ok(Start { claimed_at: number(claimed)?, handler_at: number(started)? })
    }
}

/// The parent's set-up: the queue's rate (and its groups'), then the backlog.
struct Prepare {
    limit: u32,
    jobs: u64,
    groups: u32,
}

impl WithQueue<()> for Prepare {
    fn run<S: Store>(self, queue: Queue<S>) -> CliResult<()> {
        let rate = Rate::new(self.limit, WINDOW);
        let group_rates = if self.groups > 0 { vec![rate] } else { Vec::new() };
        queue.set_limits(QUEUE, &Limits { rate: Some(rate), group_rates, ..Limits::default() })?;
        let groups = u64::from(self.groups);
        let job = |j: u64| match groups {
            0 => crate::scenarios::job(j),
            _ => crate::scenarios::job(j).group(format!("g{}", j % groups)),
        };
        crate::scenarios::in_batches(self.jobs, 1000, |range| {
            queue.enqueue_batch(range.map(job))?;
            Ok(())
        })
    }
}

/// A child process and the thread reading its stdout.
struct Worker {
    child: Child,
    reader: Option<JoinHandle<String>>,
}

impl Worker {
    fn spawn(target: &Target) -> CliResult<Worker> {
        let exe = std::env::current_exe().map_err(|e| fail(format!("the bench's own executable: {e}")))?;
        let mut child = Command::new(exe)
            .env(CHILD_ENV, target.spec())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| fail(format!("spawn a child of the bench: {e}")))?;
        let mut stdout = child.stdout.take().ok_or_else(|| fail("a child without stdout"))?;
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stdout.read_to_string(&mut text);
            text
        });
        Ok(Worker { child, reader: Some(reader) })
    }

    /// Waits for the child (killing it at `deadline`) and returns the starts it sent.
    fn finish(mut self, deadline: Instant) -> CliResult<Vec<Start>> {
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            if Instant::now() >= deadline {
                return Err(fail("a child of the held-rate scenario outran its bound (killed)"));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let text = self.reader.take().map(|r| r.join().unwrap_or_default()).unwrap_or_default();
        if !status.success() {
            return Err(fail(format!("a child of the held-rate scenario failed: {status}")));
        }
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(MARK))
            .ok_or_else(|| fail("a child of the held-rate scenario sent no starts"))?;
        line.split(',').filter(|s| !s.is_empty()).map(Start::parse).collect()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A run that failed half-way leaves no child behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A child's side: a pool of eight on the queue until nothing is due or running, then the
/// instant of every start it made, by the store's clock, on stdout.
///
/// # Errors
///
/// A spec this build cannot open, the store's errors, a queue that did not go idle in time.
pub fn child(spec: &str) -> Result<(), BoxError> {
    let target = Target::from_spec(spec)?;
    let starts = target.with_queue(Work)?;
    let text: Vec<String> = starts.iter().map(|start| start.to_text()).collect();
    println!("{MARK}{}", text.join(","));
    Ok(())
}

/// A child's pool.
struct Work;

impl WithQueue<Vec<Start>> for Work {
    fn run<S: Store>(self, queue: Queue<S>) -> CliResult<Vec<Start>> {
        let starts = Arc::new(Mutex::new(Vec::new()));
        let recorded = starts.clone();
        let pool = WorkerPool::builder(queue, QUEUE)
            .workers(WORKERS)
            .lease(LEASE)
            .handler(move |attempt| {
                // First thing, as a handler calling the provider would.
                let handler_at = attempt.queue().now_ms();
                let start = Start { claimed_at: attempt.job().claimed_at, handler_at };
                recorded.lock().unwrap_or_else(|e| e.into_inner()).push(start);
                Outcome::Complete
            })
            .start()?;
        let bound = Instant::now() + Duration::from_secs(3600);
        while !pool.wait_idle(Duration::from_secs(1))? {
            if Instant::now() >= bound {
                return Err(fail("the held-rate queue did not go idle within an hour"));
            }
        }
        pool.shutdown(Duration::from_secs(60))?;
        let starts = std::mem::take(&mut *starts.lock().unwrap_or_else(|e| e.into_inner()));
        Ok(starts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_round_trip() {
        let start = Start { claimed_at: 1_700_000_000_123, handler_at: 1_700_000_000_125 };
        assert_eq!(Start::parse(&start.to_text()).unwrap(), start);
        assert!(Start::parse("12").is_err());
    }

    #[test]
    fn specs_round_trip() {
        let spec = Target::Sqlite(PathBuf::from("/tmp/x y.db")).spec();
        assert!(matches!(Target::from_spec(&spec), Ok(Target::Sqlite(p)) if p == std::path::Path::new("/tmp/x y.db")));
        assert!(Target::from_spec("mysql\tx").is_err());
    }
}
