//! Groups held across OS processes, for fenceq's two store test binaries: four child
//! processes, each a worker pool of eight on one queue, work through 200 groups of 50 jobs
//! with handlers of random duration, optionally with one of them killed by SIGKILL mid-run.
//!
//! Each handler records its attempt in a domain table (`group_runs`: job, group, sequence
//! within the group, attempt, start and end in microseconds of the wall clock, process id)
//! inside its own completion's transaction (`Attempt::complete_with`), so only the attempt
//! that won the job writes a row. The checks read that table only, never the queue's own
//! counters: every job has exactly one row; within each group the rows ordered by start are
//! in enqueue order; no two rows of one group overlap (the end of one is at or before the
//! start of the next); every job ran. A job's end is taken inside the completion's
//! transaction, before its commit, and the group's next job can only be claimed after that
//! commit, so on one machine's clock the ends and starts of one group never interleave.
//!
//! The children are the calling test binary itself (`child_process`), with their role in
//! [`CHILD_ENV`]; all the processes share the machine's wall clock, which is why the times
//! are comparable across them. What differs per store (how a child opens the database, the
//! domain table's SQL) comes from a [`RunStore`], which each test binary implements in a
//! few lines.
//!
//! Sizes: [`JOBS_ENV`] (default 10,000) shrinks or grows a run; [`SEED_ENV`] replays the
//! handlers' durations of a run (the seed is printed).

use crate::fixture::{child_process, env_or, most_in_window, Rng};
use fenceq::store::Store;
use fenceq::{Error, JobId, JobState, ListFilter, NewJob, Outcome, Queue, RetryPolicy, WorkerPool};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The environment variable that carries a child's spec
/// (`index|lease_ms|seed|hang_after|sleep_min_us|sleep_max_us|store spec`).
pub const CHILD_ENV: &str = "FENCEQ_GROUP_PROCS_CHILD";
/// The environment variable that sizes a run (jobs in all; 200 groups while there are that many).
pub const JOBS_ENV: &str = "FENCEQ_GROUP_PROCS_JOBS";
/// The environment variable that fixes the handlers' seed.
pub const SEED_ENV: &str = "FENCEQ_GROUP_PROCS_SEED";

const QUEUE: &str = "q";
const PROCESSES: usize = 4;
const WORKERS: usize = 8;
const GROUPS: usize = 200;
/// Short, so that a killed process's claims come back within a couple of seconds; the
/// heartbeat renews every quarter of it, far longer than any handler runs.
const LEASE: Duration = Duration::from_secs(2);
/// The bound of a whole run: the children's pools, and the parent's wait for them.
const RUN_BOUND: Duration = Duration::from_secs(240);
/// The bound of a child pool's shutdown once its queue is drained.
const WAIT_BOUND: Duration = Duration::from_secs(60);
/// A job may be reclaimed many times on a slow machine; it must never run out of attempts.
const ATTEMPTS: u32 = 10_000;
const NO_BACKOFF: RetryPolicy = RetryPolicy { base: Duration::ZERO, max: Duration::ZERO, jitter: 0.0 };
/// The prefix of the lines a child prints for its parent (libtest may print `test … ` before
/// it on the same line).
const MARK: &str = "@@group-procs ";

/// One row of the domain table: the attempt that won a job, as its handler recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The job.
    pub job: i64,
    /// Its group.
    pub group: String,
    /// Its place in its group's enqueue order (0 first).
    pub seq: i64,
    /// The attempt that wrote the row.
    pub attempt: i64,
    /// When the handler started, in microseconds since the Unix epoch.
    pub start_us: i64,
    /// When the handler wrote the row, inside the completion's transaction.
    pub end_us: i64,
    /// When the attempt was claimed, in ms by the store's clock (its lease's end less the
    /// lease): what limits count.
    pub claimed_ms: i64,
    /// The process that ran it.
    pub pid: i64,
}

/// What the runs need from a store: a database the parent made and children can open from a
/// one-line spec, and the domain table `group_runs` in it.
pub trait RunStore: Sized {
    /// The store under test.
    type Store: Store;

    /// The spec a child opens the same database from (one line, no newline).
    fn spec(&self) -> String;

    /// The database a [`RunStore::spec`] names, in a child.
    fn from_spec(spec: &str) -> Self;

    /// A queue handle on the database, with the system clock.
    fn open(&self) -> Queue<Self::Store>;

    /// Creates the domain table `group_runs (job, grp, seq, attempt, start_us, end_us, pid)`.
    fn create_runs(&self);

    /// Inserts `run` into `group_runs` inside the caller's transaction `tx`.
    ///
    /// # Errors
    ///
    /// The store's error, as `fenceq::Error`.
    fn insert_run(tx: &<Self::Store as Store>::Tx, run: &Run) -> fenceq::Result<()>;

    /// Returns once nothing the killed child `pid` sent can still change the database (bounded;
    /// panics past the bound). On a server, a statement the child sent before it died (its
    /// last `COMMIT`) may still be running in its session, and land after the kill.
    fn wait_until_gone(&self, pid: u32);

    /// How many rows `group_runs` has.
    fn count_runs(&self) -> i64;

    /// Every row of `group_runs`.
    fn runs(&self) -> Vec<Run>;
}

fn wall_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64
}

// ------------------------------------------------------------------------ the child

static DONE: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);
static OTHER_ERRORS: AtomicU64 = AtomicU64::new(0);

/// A child's side, called by the test binary's ignored child entry: a pool of eight on the
/// queue until the queue has nothing due or running (bounded), then its counters on stdout.
///
/// A child with a `hang_after` above 0 is the one to be killed: once it has completed that
/// many jobs, each of its workers stops in its next handler, holding the job (the heartbeat
/// keeps the lease), and says so on stdout, until the parent kills the process. So the kill
/// always finds jobs held, and lands in the middle of their handlers.
///
/// # Panics
///
/// Without [`CHILD_ENV`] (a bare `--ignored` run), or when the queue is not drained in time.
pub fn child<T: RunStore>() {
    let spec = std::env::var(CHILD_ENV).expect("run by a group_processes test, which sets FENCEQ_GROUP_PROCS_CHILD");
    let mut parts = spec.splitn(7, '|');
    let mut next = || parts.next().expect("index|lease_ms|seed|hang_after|sleep_min_us|sleep_max_us|store spec");
    let index: usize = next().parse().unwrap();
    let lease = Duration::from_millis(next().parse().unwrap());
    let seed: u64 = next().parse().unwrap();
    let hang_after: u64 = next().parse().unwrap();
    let sleep_min_us: u64 = next().parse().unwrap();
    let sleep_max_us: u64 = next().parse().unwrap();
    let target = T::from_spec(next());
    let queue = target.open();
    let pid = std::process::id() as i64;
    let pool = WorkerPool::builder(queue.clone(), QUEUE)
        .workers(WORKERS)
        .lease(lease)
        .renew_every(lease / 4)
        .poll_interval(Duration::from_millis(20))
        .retry_policy(NO_BACKOFF)
        .worker_id(format!("proc-{index}"))
        .handler(move |a| {
            let start_us = wall_us();
            let token = a.token();
            let claimed_ms = a.job().lease_until - lease.as_millis() as i64;
            if hang_after > 0 && DONE.load(Ordering::SeqCst) >= hang_after {
                println!("\n{MARK}HOLD {index} {} {}", token.id.0, token.attempt);
                let bound = Instant::now() + RUN_BOUND;
                while Instant::now() < bound {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            let text = String::from_utf8(a.payload().to_vec()).unwrap();
            let (group, seq) = text.rsplit_once('#').expect("payload group#seq");
            // The workload's duration, the same for this process's seed and this attempt.
            let mut rng = Rng::new(seed ^ (token.id.0 as u64) << 16 ^ u64::from(token.attempt));
            std::thread::sleep(Duration::from_micros(sleep_min_us + rng.below(sleep_max_us - sleep_min_us + 1)));
            let written = a.complete_with(|tx| {
                let run = Run {
                    job: token.id.0,
                    group: group.to_string(),
                    seq: seq.parse().unwrap(),
                    attempt: token.attempt.into(),
                    start_us,
                    end_us: wall_us(),
                    claimed_ms,
                    pid,
                };
                T::insert_run(tx, &run)
            });
            match written {
                Ok(()) => {
                    DONE.fetch_add(1, Ordering::SeqCst);
                    Outcome::Complete
                }
                Err(Error::OwnershipLost { .. }) => {
                    // Another attempt won the job (a lease lost on a slow machine); the
                    // pool's own settle of this outcome is refused as well.
                    REFUSED.fetch_add(1, Ordering::SeqCst);
                    Outcome::Complete
                }
                Err(e) => {
                    OTHER_ERRORS.fetch_add(1, Ordering::SeqCst);
                    eprintln!("child {index}: complete_with of {token:?}: {e:?}");
                    Outcome::retry_after(Duration::ZERO, e.to_string())
                }
            }
        })
        .start()
        .unwrap_or_else(|e| panic!("child {index}: the pool did not start: {e:?}"));
    println!("\n{MARK}STARTED {index}");
    let bound = Instant::now() + RUN_BOUND;
    // Drained, not idle: under group rates a spent group's head waits with a later `run_at`,
    // so a moment with nothing due and nothing running is not the end of the work.
    loop {
        match pool.wait_drained(Duration::from_secs(1)) {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => eprintln!("child {index}: wait_drained: {e:?}"),
        }
        assert!(Instant::now() < bound, "child {index}: the queue was not drained in {RUN_BOUND:?}");
    }
    let report = pool.shutdown(WAIT_BOUND).unwrap();
    let c = report.counters;
    println!(
        "\n{MARK}SUMMARY {index} claimed={} completed={} refused={} other_errors={} stale={} renewals_failed={} \
         errors={} still_running={}",
        c.claimed,
        c.completed,
        REFUSED.load(Ordering::SeqCst),
        OTHER_ERRORS.load(Ordering::SeqCst),
        c.stale_settles_rejected,
        c.renewals_failed,
        c.errors,
        report.still_running.len(),
    );
}

// ------------------------------------------------------------------------ the parent

/// A child process and the marked lines of its stdout, read as they come.
struct Worker {
    index: usize,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl Worker {
    fn spawn(entry: &str, index: usize, seed: u64, hang_after: usize, sleep_us: (u64, u64), spec: &str) -> Worker {
        let (min, max) = sleep_us;
        let mut child = child_process(entry)
            .env(CHILD_ENV, format!("{index}|{}|{seed}|{hang_after}|{min}|{max}|{spec}", LEASE.as_millis()))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn a child of the test binary");
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(at) = line.find(MARK) {
                    sink.lock().unwrap().push(line[at + MARK.len()..].to_string());
                }
            }
        });
        Worker { index, child, lines, reader: Some(reader) }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits for the child to end (killing it and failing at `deadline`), and returns its
    /// summary line; panics unless it exited successfully.
    fn finish(mut self, deadline: Instant) -> String {
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("child {} did not end within the run's bound; its lines: {:?}", self.index, self.lines());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        let lines = self.lines();
        assert!(status.success(), "child {} failed: {status:?}; its lines: {lines:?}", self.index);
        lines
            .into_iter()
            .find(|l| l.starts_with("SUMMARY"))
            .unwrap_or_else(|| panic!("child {}: no summary", self.index))
    }

    /// SIGKILL (std's `kill` on Unix): the whole process, its heartbeat and every worker.
    fn kill(mut self) -> u32 {
        let pid = self.child.id();
        self.child.kill().expect("SIGKILL the child");
        let status = self.child.wait().unwrap();
        assert!(!status.success(), "the killed child exited on its own: {status:?}");
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        pid
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

fn wait_for(what: &str, bound: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !done() {
        assert!(Instant::now() < deadline, "timed out after {bound:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The jobs `worker` holds running, as (id, attempt).
fn held_by<S: Store>(queue: &Queue<S>, worker: &str) -> Vec<(JobId, u32)> {
    let filter = ListFilter { queue: Some(QUEUE.into()), state: Some(JobState::Running), after: None, limit: 10_000 };
    let running = queue.list(&filter).expect("list the running jobs");
    running.into_iter().filter(|j| j.worker.as_deref() == Some(worker)).map(|j| (j.id, j.attempt)).collect()
}

/// What a run exercises, besides the order of every group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// 200 groups of 50 jobs ([`JOBS_ENV`] sizes it), handlers of 0 to 2 ms; with `kill`, one
    /// process is SIGKILLed in the middle of its handlers.
    Ordering {
        /// Kill one process mid-run (a replacement takes its place).
        kill: bool,
    },
    /// 40 groups of 15 jobs under the queue's limits [`RATE`] and [`GROUP_RATES`]: no window of
    /// the store's clock holds more starts than a limit allows, and the queue's rate is
    /// reached (at least 90 % of it while work is pending).
    Rates,
    /// 160 groups of one job under a running limit of [`MAX_RUNNING`], handlers of 40 to 60
    /// ms: never more handlers at once than the limit, and the limit reached.
    Running,
}

/// The queue-wide rate of [`Scenario::Rates`]: Telegram's 30 messages a second.
pub const RATE: (u32, u64) = (30, 1_000);
/// The group rates of [`Scenario::Rates`]: 1 a second and 20 a minute into one chat.
pub const GROUP_RATES: [(u32, u64); 2] = [(1, 1_000), (20, 60_000)];
/// The running limit of [`Scenario::Running`], across the four processes' 32 workers.
pub const MAX_RUNNING: u32 = 5;

/// The most intervals `[start, end]` that overlap at any instant.
fn most_at_once(intervals: &[(i64, i64)]) -> usize {
    let mut edges: Vec<(i64, i32)> = intervals.iter().flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
    // An end at the same instant as a start comes first: touching is not overlapping.
    edges.sort_unstable();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

/// Runs `scenario` on `target` (a fresh database): enqueues the groups' jobs (and sets the
/// queue's limits), runs four child processes (`entry`: the test binary's ignored child,
/// whose test calls [`child`]), then checks the domain table. With
/// `Scenario::Ordering { kill: true }` one of them is SIGKILLed in the middle of its handlers
/// once it has done its share of a quarter of the jobs (a replacement takes its place).
/// Returns a line saying what ran and how long it took.
///
/// # Panics
///
/// On any check that fails, and when a wait passes its bound.
pub fn run<T: RunStore>(target: &T, entry: &str, scenario: Scenario) -> String {
    let kill = scenario == Scenario::Ordering { kill: true };
    let (jobs, groups, sleep_us) = match scenario {
        Scenario::Ordering { .. } => {
            let jobs = env_or(JOBS_ENV, 10_000).max(1);
            (jobs, GROUPS.min(jobs), (0, 2_000))
        }
        Scenario::Rates => (600, 40, (0, 2_000)),
        Scenario::Running => (160, 160, (40_000, 60_000)),
    };
    let per_group = jobs / groups;
    let total = groups * per_group;
    let seed = std::env::var(SEED_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| wall_us() as u64);
    let begun = Instant::now();
    // The queue first: on a server, opening creates the schema the domain table goes in.
    let queue = target.open();
    target.create_runs();
    let limits = match scenario {
        Scenario::Ordering { .. } => fenceq::Limits::default(),
        Scenario::Rates => fenceq::Limits {
            rate: Some(fenceq::Rate::new(RATE.0, Duration::from_millis(RATE.1))),
            group_rates: GROUP_RATES.iter().map(|&(n, ms)| fenceq::Rate::new(n, Duration::from_millis(ms))).collect(),
            max_running: None,
        },
        Scenario::Running => fenceq::Limits { max_running: Some(MAX_RUNNING), ..fenceq::Limits::default() },
    };
    queue.set_limits(QUEUE, &limits).unwrap();
    // Enqueue order within a group is id order: all groups' first jobs, then their seconds…
    let order: Vec<(String, i64)> =
        (0..per_group as i64).flat_map(|seq| (0..groups).map(move |g| (format!("chat:{g}"), seq))).collect();
    let mut ids: HashMap<(String, i64), i64> = HashMap::new();
    for chunk in order.chunks(1_000) {
        let batch = chunk.iter().map(|(group, seq)| {
            NewJob::new(QUEUE, format!("{group}#{seq}").into_bytes()).group(group.clone()).max_attempts(ATTEMPTS)
        });
        for (key, e) in chunk.iter().zip(queue.enqueue_batch(batch).unwrap()) {
            ids.insert(key.clone(), e.id().0);
        }
    }
    let enqueued = begun.elapsed();
    let started = Instant::now();
    let spec = target.spec();
    let victim = 1;
    let hang_after = if kill { (total / 4 / PROCESSES).max(1) } else { 0 };
    let mut workers: Vec<Worker> = (0..PROCESSES)
        .map(|i| Worker::spawn(entry, i, seed, if i == victim { hang_after } else { 0 }, sleep_us, &spec))
        .collect();

    let mut killed = None;
    if kill {
        let worker = format!("proc-{victim}");
        // Its share of a quarter of the run: bounded like the run, not like one step of it.
        wait_for(&format!("{worker} to hold a job in a stopped handler"), RUN_BOUND, || {
            workers[victim].lines().iter().any(|l| l.starts_with("HOLD"))
        });
        let pid = workers.remove(victim).kill();
        target.wait_until_gone(pid);
        // What it held when it died: now nothing can change these claims but a reclaim.
        let orphans = held_by(&queue, &worker);
        assert!(!orphans.is_empty(), "{worker} was killed in a handler, yet holds no job");
        let done_at_kill = target.count_runs();
        workers.push(Worker::spawn(entry, PROCESSES, seed, 0, sleep_us, &spec));
        killed = Some((pid as i64, orphans, done_at_kill));
    }

    let deadline = Instant::now() + RUN_BOUND;
    let summaries: Vec<String> = workers.into_iter().map(|w| w.finish(deadline)).collect();
    let elapsed = started.elapsed();

    // ---- checks, from the domain table only
    let runs = target.runs();
    let mut by_job: HashMap<i64, &Run> = HashMap::new();
    for run in &runs {
        assert!(by_job.insert(run.job, run).is_none(), "job {} has two rows: {run:?}", run.job);
    }
    let mut by_group: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
    for ((group, seq), id) in &ids {
        let run = by_job.get(id).unwrap_or_else(|| panic!("lost: job {id} ({group} #{seq}) has no row"));
        assert_eq!((run.group.as_str(), run.seq), (group.as_str(), *seq), "job {id}'s row");
        by_group.entry(run.group.as_str()).or_default().push(run);
    }
    assert_eq!(runs.len(), total, "one row per job, and none of another job");
    for (group, rows) in &mut by_group {
        rows.sort_by_key(|r| (r.start_us, r.seq));
        let order: Vec<i64> = rows.iter().map(|r| r.seq).collect();
        assert_eq!(order, (0..per_group as i64).collect::<Vec<_>>(), "{group}: started in enqueue order");
        for pair in rows.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert!(a.start_us <= a.end_us, "{group}: a row ends before it starts: {a:?}");
            assert!(a.job < b.job, "{group}: enqueue order is id order: {a:?} then {b:?}");
            assert!(
                a.end_us <= b.start_us && a.start_us < b.start_us,
                "{group}: two jobs ran at once: {a:?} and {b:?}"
            );
        }
    }
    let processes: BTreeMap<i64, usize> = runs.iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.pid).or_default() += 1;
        m
    });
    let reclaimed = runs.iter().filter(|r| r.attempt > 1).count();
    let mut line = format!(
        "{total} jobs in {groups} groups, {PROCESSES} processes x {WORKERS} workers, seed {seed}: \
         enqueued in {enqueued:.1?}, {elapsed:.1?} from spawn to the last exit; rows per process {:?}; \
         {reclaimed} won by a later attempt",
        processes.values().collect::<Vec<_>>(),
    );
    if let Some((pid, orphans, done_at_kill)) = killed {
        assert!(processes.contains_key(&pid), "the killed process completed jobs before it died");
        for (id, attempt) in &orphans {
            let run = by_job[&id.0];
            assert!(
                run.pid != pid && run.attempt > i64::from(*attempt),
                "job {id} held by the killed process: reclaimed by a later attempt elsewhere: {run:?}"
            );
        }
        line.push_str(&format!(
            "; killed process {pid} after {done_at_kill} rows holding {} jobs, each reclaimed and run before its \
             group's next",
            orphans.len()
        ));
    }
    match scenario {
        Scenario::Ordering { .. } => {}
        Scenario::Rates => line.push_str(&check_rates(&runs)),
        Scenario::Running => line.push_str(&check_running(&runs)),
    }
    for summary in &summaries {
        line.push_str(&format!("\n  {summary}"));
        for counter in ["other_errors", "errors", "still_running"] {
            assert!(summary.contains(&format!(" {counter}=0")), "a child counted {counter}: {summary}");
        }
    }
    line
}

/// [`Scenario::Rates`]: from the claims' instants by the store's clock, no window of a limit
/// holds more starts than it allows, and the queue's rate was reached.
fn check_rates(runs: &[Run]) -> String {
    let mut all: Vec<i64> = runs.iter().map(|r| r.claimed_ms).collect();
    let most = most_in_window(&mut all, RATE.1 as i64);
    assert!(most <= RATE.0 as usize, "{most} starts in one window of {} ms, over the rate's {}", RATE.1, RATE.0);
    let mut by_group: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for run in runs {
        by_group.entry(run.group.as_str()).or_default().push(run.claimed_ms);
    }
    let mut group_most = [0usize; GROUP_RATES.len()];
    for (group, times) in &mut by_group {
        for (i, &(count, window)) in GROUP_RATES.iter().enumerate() {
            let most = most_in_window(times, window as i64);
            assert!(most <= count as usize, "{group}: {most} starts in one window of {window} ms, over {count}");
            group_most[i] = group_most[i].max(most);
        }
    }
    // While work was pending (from the first claim to the last), at least 90 % of the rate.
    let (first, last) = (all[0], all[all.len() - 1]);
    let achieved = all.len() as f64 * RATE.1 as f64 / (last - first + RATE.1 as i64) as f64;
    assert!(
        achieved >= 0.9 * f64::from(RATE.0),
        "{achieved:.1} starts per window while work was pending, under 90 % of {}; {}",
        RATE.0,
        rate_profile(&all, RATE.1 as i64)
    );
    format!(
        "; limits held: at most {most} starts in any {} ms (limit {}), per group at most {group_most:?} \
         (limits {GROUP_RATES:?}); {achieved:.1} per window achieved over {} ms; {}",
        RATE.1,
        RATE.0,
        last - first,
        rate_profile(&all, RATE.1 as i64)
    )
}

/// Where a run's starts went, for a rate that was not reached: the starts in each window
/// from the first, and the longest gaps between consecutive starts with their instants.
fn rate_profile(sorted: &[i64], window: i64) -> String {
    let first = sorted[0];
    let mut per_window: Vec<usize> = Vec::new();
    for &at in sorted {
        let slot = ((at - first) / window) as usize;
        if per_window.len() <= slot {
            per_window.resize(slot + 1, 0);
        }
        per_window[slot] += 1;
    }
    let mut gaps: Vec<(i64, i64)> = sorted.windows(2).map(|w| (w[1] - w[0], w[0] - first)).collect();
    gaps.sort_unstable_by(|a, b| b.cmp(a));
    gaps.truncate(5);
    format!("starts per window from the first: {per_window:?}; longest gaps (ms, at ms): {gaps:?}")
}

/// [`Scenario::Running`]: never more handlers at once than the running limit, and the limit
/// reached. A handler runs inside its attempt's claim, so handlers at once never exceed the
/// attempts running at once.
fn check_running(runs: &[Run]) -> String {
    let intervals: Vec<(i64, i64)> = runs.iter().map(|r| (r.start_us, r.end_us)).collect();
    let most = most_at_once(&intervals);
    assert!(most <= MAX_RUNNING as usize, "{most} handlers ran at once, over the running limit {MAX_RUNNING}");
    assert_eq!(most, MAX_RUNNING as usize, "the running limit was never reached by 32 workers");
    format!("; at most {most} handlers at once (running limit {MAX_RUNNING}, 32 workers)")
}
