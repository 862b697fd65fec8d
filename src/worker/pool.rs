//! The worker pool: one dispatcher thread, worker threads that run the handler, and a
//! heartbeat thread that renews every in-flight lease in one transaction per round.
//!
//! The dispatcher settles and claims in one request: every attempt that finished since its
//! last round is settled, and as many jobs as there are free slots (workers plus prefetch)
//! are claimed, in the same group transaction. A finished attempt so costs one hand-off
//! (worker to dispatcher) and no transaction of its own, and a prefetched job is waiting
//! when a worker frees up.

use super::attempt::{Attempt, Lease, Outcome};
use super::prefetch::{Prefetch, Round};
use crate::error::{Error, Result};
use crate::job::{ClaimToken, Claimed, JobId, RetryPolicy};
use crate::queue::settle::{Settle, Settled};
use crate::queue::Queue;
use crate::store::sqlite::SqliteStore;
use crate::store::Store;
use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender, TryRecvError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Worker threads per pool. Defaults to 4.
pub const DEFAULT_WORKERS: usize = 4;
/// Lease per claim. Defaults to 30 seconds.
pub const DEFAULT_POOL_LEASE: Duration = Duration::from_secs(30);
/// Idle poll interval. Defaults to 1 second (an enqueue through the same `Queue` wakes the
/// pool at once; polling finds jobs enqueued by other processes and delayed jobs).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Most jobs a pool may prefetch; see [`WorkerPoolBuilder::prefetch`].
pub const MAX_PREFETCH: usize = 4096;
/// How long dropping a pool waits for in-flight attempts. Defaults to 10 seconds.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

type Handler<S> = Arc<dyn Fn(&mut Attempt<S>) -> Outcome + Send + Sync>;

/// Builder for a [`WorkerPool`]; see [`WorkerPool::builder`].
pub struct WorkerPoolBuilder<S: Store = SqliteStore> {
    queue: Queue<S>,
    queue_name: String,
    workers: usize,
    lease: Duration,
    renew_every: Option<Duration>,
    poll_interval: Duration,
    prefetch: Option<usize>,
    worker_id: String,
    retry_policy: RetryPolicy,
    handler: Option<Handler<S>>,
}

impl<S: Store> std::fmt::Debug for WorkerPoolBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPoolBuilder")
            .field("queue_name", &self.queue_name)
            .field("workers", &self.workers)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl<S: Store> WorkerPoolBuilder<S> {
    /// Worker threads (1..=256). Defaults to 4.
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// The lease of every claim. Defaults to 30 seconds.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often the heartbeat renews in-flight leases. Defaults to a third of the lease;
    /// must be shorter than the lease.
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every);
        self
    }

    /// How long an idle dispatcher waits before looking again. Defaults to 1 second.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// Jobs claimed beyond the free workers (0..=4096), waiting in the pool for the next
    /// worker to finish, so that a worker never waits for a claim. Prefetched jobs are in
    /// flight like running ones: their leases are renewed while they wait (so a slow handler
    /// never costs a waiting job an attempt), and [`WorkerPool::shutdown`] lets them run. The
    /// price: while every worker of the pool is stuck in a handler, the prefetched jobs wait
    /// with them. Use 0 when handlers can hang, or when several pools share a queue and
    /// another could start the jobs sooner.
    ///
    /// Setting it fixes it. By default it follows the handlers, starting at twice the
    /// workers: it doubles (up to [`ADAPTIVE_PREFETCH_CEILING`](crate::ADAPTIVE_PREFETCH_CEILING))
    /// after a round that claimed all it asked for while attempts finished and no claimed
    /// job was left waiting for a worker, halves while more than half of it waits, and
    /// returns to twice the workers when a round finds fewer due jobs than it asked for.
    /// Fast handlers so get enough jobs per round to outrun a round's cost (on PostgreSQL
    /// each round waits for a WAL flush), while handlers that block finish nothing and keep
    /// the pool at twice its workers.
    pub fn prefetch(mut self, jobs: usize) -> Self {
        self.prefetch = Some(jobs);
        self
    }

    /// The worker id the pool's claims record (in the job's `worker` column and in the
    /// reaper's "lease expired (worker ..)" error). Every claim of the pool is made by its
    /// dispatcher under this one id; a live lease is never handed out again, not even to the
    /// same id. At most 128 bytes, no NUL. Defaults to `"{queue}-{pid}"`, the queue name cut
    /// (at a char boundary) so that the id fits.
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = id.into();
        self
    }

    /// The old name of [`WorkerPoolBuilder::worker_id`]: the pool claims under exactly this
    /// id (it never was a prefix of per-thread ids).
    #[deprecated(since = "0.1.0", note = "the pool claims under one id: use `worker_id`")]
    pub fn worker_prefix(self, prefix: impl Into<String>) -> Self {
        self.worker_id(prefix)
    }

    /// The backoff for `Outcome::Retry { after: None, .. }` and for panics.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry_policy = policy;
        self
    }

    /// The function that works one attempt. It runs on a worker thread; a panic is caught
    /// and the attempt retried with the panic message as its error.
    pub fn handler(mut self, handler: impl Fn(&mut Attempt<S>) -> Outcome + Send + Sync + 'static) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// Starts the threads.
    ///
    /// Every setting a claim depends on is checked by the queue's own claim validation, so
    /// that a pool that starts can claim: what would fail every claim fails here.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when no handler was set or a setting is out of range: workers outside
    /// 1..=256; a queue name or worker id that is empty, longer than 128 bytes or holds a
    /// NUL; a lease outside 1 ms..=24 h; `renew_every` zero or not shorter than the lease;
    /// a prefetch over 4,096; a zero poll interval.
    pub fn start(self) -> Result<WorkerPool<S>> {
        let handler = self.handler.clone().ok_or_else(|| Error::invalid("handler", "set one with .handler(..)"))?;
        if self.workers == 0 || self.workers > 256 {
            return Err(Error::invalid("workers", format!("{} is not in 1..=256", self.workers)));
        }
        crate::validate::check_claim(&self.queue_name, &self.worker_id, self.lease, 1)?;
        let renew_every = self.renew_every.unwrap_or(self.lease / 3);
        if renew_every.is_zero() || renew_every >= self.lease {
            return Err(Error::invalid("renew_every", "must be shorter than the lease and not zero"));
        }
        if self.prefetch.is_some_and(|jobs| jobs > MAX_PREFETCH) {
            return Err(Error::invalid("prefetch", format!("more than {MAX_PREFETCH} jobs")));
        }
        if self.poll_interval.is_zero() {
            return Err(Error::invalid("poll_interval", "must not be zero"));
        }
        WorkerPool::start(self, handler, renew_every)
    }
}

/// Counters of one pool, as [`WorkerPool::counters`] returns them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// Attempts claimed.
    pub claimed: u64,
    /// Attempts completed.
    pub completed: u64,
    /// Attempts sent back to pending.
    pub retried: u64,
    /// Attempts exhausted (by `Outcome::Exhaust`, or a retry with no attempts left).
    pub exhausted: u64,
    /// Attempts marked unknown.
    pub unknown: u64,
    /// Attempts parked.
    pub parked: u64,
    /// Handler panics (each retried).
    pub panicked: u64,
    /// Settles rejected because the attempt no longer owned its job (the fence at work).
    pub stale_settles_rejected: u64,
    /// Lease renewals rejected.
    pub renewals_failed: u64,
    /// Settles or claims that failed for another reason (logged).
    pub errors: u64,
}

#[derive(Default)]
struct Counters {
    claimed: AtomicU64,
    completed: AtomicU64,
    retried: AtomicU64,
    exhausted: AtomicU64,
    unknown: AtomicU64,
    parked: AtomicU64,
    panicked: AtomicU64,
    stale_settles_rejected: AtomicU64,
    renewals_failed: AtomicU64,
    errors: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> PoolCounters {
        let get = |c: &AtomicU64| c.load(Ordering::SeqCst);
        PoolCounters {
            claimed: get(&self.claimed),
            completed: get(&self.completed),
            retried: get(&self.retried),
            exhausted: get(&self.exhausted),
            unknown: get(&self.unknown),
            parked: get(&self.parked),
            panicked: get(&self.panicked),
            stale_settles_rejected: get(&self.stale_settles_rejected),
            renewals_failed: get(&self.renewals_failed),
            errors: get(&self.errors),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::SeqCst);
}

/// What [`WorkerPool::shutdown`] saw.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShutdownReport {
    /// Jobs whose attempts were still running when the timeout passed. Their leases are no
    /// longer renewed, so they become reclaimable when the leases run out.
    pub still_running: Vec<JobId>,
    /// The counters at shutdown.
    pub counters: PoolCounters,
}

/// State shared by the pool's threads.
struct Shared<S: Store> {
    queue: Queue<S>,
    queue_name: String,
    lease: Duration,
    retry_policy: RetryPolicy,
    handler: Handler<S>,
    counters: Counters,
    /// Claimed and not yet settled, by claim: the pool may hold a new claim of a job whose
    /// older attempt (its lease expired) is still running in a stalled worker.
    in_flight: Mutex<HashMap<ClaimToken, Arc<Lease>>>,
    stopping: AtomicBool,
    /// Dispatcher rounds that settled attempts, so far; `round_done` is notified after each.
    rounds: Mutex<u64>,
    round_done: parking_lot::Condvar,
    poll_interval: Duration,
}

/// A running pool of worker threads for one queue; see the crate docs for an example.
///
/// Dropping the pool shuts it down, waiting up to [`DEFAULT_SHUTDOWN_TIMEOUT`].
pub struct WorkerPool<S: Store = SqliteStore> {
    shared: Arc<Shared<S>>,
    stop_dispatch: Option<Sender<()>>,
    stop_heartbeat: Option<Sender<()>>,
    exited: Receiver<()>,
    threads: Vec<JoinHandle<()>>,
    workers: usize,
    stopped: bool,
}

impl<S: Store> std::fmt::Debug for WorkerPool<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool").field("queue", &self.shared.queue_name).field("workers", &self.workers).finish()
    }
}

impl<S: Store> WorkerPool<S> {
    /// A builder for a pool working `queue_name` on `queue`.
    ///
    /// ```
    /// use fenceq::{NewJob, Outcome, Queue, WorkerPool};
    /// use std::time::Duration;
    /// let queue = Queue::open_in_memory()?;
    /// queue.enqueue(NewJob::new("telegram", b"hi".to_vec()))?;
    /// let pool = WorkerPool::builder(queue.clone(), "telegram")
    ///     .workers(2)
    ///     .lease(Duration::from_secs(30))
    ///     .handler(|attempt| {
    ///         if attempt.payload().is_empty() { return Outcome::Exhaust("empty".into()) }
    ///         Outcome::Complete
    ///     })
    ///     .start()?;
    /// # for _ in 0..500 { if pool.counters().completed == 1 { break } std::thread::sleep(Duration::from_millis(10)); }
    /// let report = pool.shutdown(Duration::from_secs(5))?;
    /// assert!(report.still_running.is_empty());
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    pub fn builder(queue: Queue<S>, queue_name: impl Into<String>) -> WorkerPoolBuilder<S> {
        let queue_name = queue_name.into();
        WorkerPoolBuilder {
            worker_id: default_worker_id(&queue_name, std::process::id()),
            queue,
            queue_name,
            workers: DEFAULT_WORKERS,
            lease: DEFAULT_POOL_LEASE,
            renew_every: None,
            poll_interval: DEFAULT_POLL_INTERVAL,
            prefetch: None,
            retry_policy: RetryPolicy::default(),
            handler: None,
        }
    }

    fn start(builder: WorkerPoolBuilder<S>, handler: Handler<S>, renew_every: Duration) -> Result<WorkerPool<S>> {
        let shared = Arc::new(Shared {
            queue: builder.queue.clone(),
            queue_name: builder.queue_name.clone(),
            lease: builder.lease,
            retry_policy: builder.retry_policy,
            handler,
            counters: Counters::default(),
            in_flight: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            rounds: Mutex::new(0),
            round_done: parking_lot::Condvar::new(),
            poll_interval: builder.poll_interval,
        });
        let workers = builder.workers;
        let prefetch = Prefetch::new(builder.prefetch, workers);
        // Claimed jobs never exceed the slots, so sending one never blocks the dispatcher.
        let (job_tx, job_rx) = bounded::<Claimed>(workers + prefetch.most());
        let (stop_dispatch, stop_dispatch_rx) = bounded::<()>(0);
        let (stop_heartbeat, stop_heartbeat_rx) = bounded::<()>(0);
        let (exited_tx, exited) = unbounded::<()>();
        let (finished_tx, finished_rx) = unbounded::<(ClaimToken, Finished)>();
        let wake = builder.queue.subscribe(&builder.queue_name);
        let mut threads = Vec::with_capacity(workers + 2);

        for n in 0..workers {
            let shared = shared.clone();
            let jobs = job_rx.clone();
            let exited = exited_tx.clone();
            let finished = finished_tx.clone();
            threads.push(spawn(&format!("fenceq-worker-{n}"), move || {
                for claimed in jobs.iter() {
                    let token = claimed.token;
                    let outcome = work(&shared, claimed);
                    let _ = finished.send((token, outcome));
                }
                let _ = exited.send(());
            })?);
        }
        drop(job_rx);
        drop(finished_tx);
        {
            let shared = shared.clone();
            let exited = exited_tx.clone();
            let worker = builder.worker_id.clone();
            let poll = builder.poll_interval;
            let channels = DispatchChannels { jobs: job_tx, finished: finished_rx, wake, stop: stop_dispatch_rx };
            threads.push(spawn("fenceq-dispatcher", move || {
                dispatch(&shared, &worker, (workers, prefetch), poll, channels);
                let _ = exited.send(());
            })?);
        }
        {
            let shared = shared.clone();
            threads.push(spawn("fenceq-heartbeat", move || heartbeat(&shared, renew_every, stop_heartbeat_rx))?);
        }
        Ok(WorkerPool {
            shared,
            stop_dispatch: Some(stop_dispatch),
            stop_heartbeat: Some(stop_heartbeat),
            exited,
            threads,
            workers,
            stopped: false,
        })
    }

    /// The pool's counters now.
    pub fn counters(&self) -> PoolCounters {
        self.shared.counters.snapshot()
    }

    /// Jobs this pool has claimed and not yet settled: running, or prefetched and waiting
    /// for a worker.
    pub fn in_flight(&self) -> Vec<JobId> {
        let mut ids: Vec<JobId> = self.shared.in_flight.lock().keys().map(|token| token.id).collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// Waits until the pool's queue has nothing due and nothing running (no pending job whose
    /// time has come, no running job of any worker or process, nothing in this pool's hands),
    /// or until `timeout` passes: for scripts, tests and graceful restarts. Returns true when
    /// the queue went idle, false on the timeout. Jobs delayed into the future do not count;
    /// jobs another process adds do, once they are due. Checks after every round that
    /// settled something, and at least every poll interval.
    ///
    /// ```
    /// # use fenceq::{NewJob, Outcome, Queue, WorkerPool};
    /// # use std::time::Duration;
    /// let queue = Queue::open_in_memory()?;
    /// let pool = WorkerPool::builder(queue.clone(), "q").handler(|_| Outcome::Complete).start()?;
    /// queue.enqueue_batch((0..10).map(|n| NewJob::new("q", vec![n])))?;
    /// assert!(pool.wait_idle(Duration::from_secs(10))?);
    /// assert_eq!(pool.shutdown(Duration::from_secs(5))?.counters.completed, 10);
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The read that counts due and running jobs can fail: `Pool`, `Busy`, or `NestedWrite`
    /// when called from inside one of this queue's closures.
    pub fn wait_idle(&self, timeout: Duration) -> Result<bool> {
        let shared = &self.shared;
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let seen = *shared.rounds.lock();
            if shared.in_flight.lock().is_empty() && shared.queue.due_or_running(&shared.queue_name)? == 0 {
                return Ok(true);
            }
            let now = Instant::now();
            let wait = match deadline {
                Some(deadline) if deadline <= now => return Ok(false),
                Some(deadline) => (deadline - now).min(shared.poll_interval),
                None => shared.poll_interval,
            };
            let mut rounds = shared.rounds.lock();
            if *rounds == seen {
                shared.round_done.wait_for(&mut rounds, wait);
            }
        }
    }

    /// Stops claiming, lets in-flight attempts finish within `timeout` (their leases are
    /// renewed meanwhile) and reports what was left running. Blocks up to `timeout`. A
    /// second call is a no-op.
    pub fn shutdown(mut self, timeout: Duration) -> Result<ShutdownReport> {
        Ok(self.stop(timeout))
    }

    fn stop(&mut self, timeout: Duration) -> ShutdownReport {
        if self.stopped {
            return ShutdownReport { still_running: Vec::new(), counters: self.counters() };
        }
        self.stopped = true;
        // `None`: a timeout too long to add to now (`Duration::MAX`) waits without one.
        let deadline = Instant::now().checked_add(timeout);
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Closing the channel stops the dispatcher claiming; it drops the job sender, so
        // workers end once the attempts they hold are done, and it ends after settling the
        // last of them.
        drop(self.stop_dispatch.take());
        let mut exited = 0;
        while exited < self.workers + 1 {
            let next = match deadline {
                Some(deadline) => self.exited.recv_deadline(deadline).map_err(drop),
                None => self.exited.recv().map_err(drop),
            };
            match next {
                Ok(()) => exited += 1,
                Err(()) => break,
            }
        }
        let still_running = self.in_flight();
        drop(self.stop_heartbeat.take());
        if exited == self.workers + 1 {
            for thread in self.threads.drain(..) {
                let _ = thread.join();
            }
        } else {
            tracing::warn!(queue = %self.shared.queue_name, still_running = ?still_running,
                "worker pool shut down with attempts still running; their leases will expire");
        }
        ShutdownReport { still_running, counters: self.counters() }
    }
}

impl<S: Store> Drop for WorkerPool<S> {
    fn drop(&mut self) {
        self.stop(DEFAULT_SHUTDOWN_TIMEOUT);
    }
}

/// `{queue}-{pid}`, the queue name cut at a char boundary so that the id fits in
/// `MAX_NAME_LEN` bytes.
fn default_worker_id(queue: &str, pid: u32) -> String {
    let suffix = format!("-{pid}");
    let mut end = queue.len().min(crate::config::MAX_NAME_LEN.saturating_sub(suffix.len()));
    while !queue.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{suffix}", &queue[..end])
}

fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    Ok(std::thread::Builder::new().name(name.to_string()).spawn(body)?)
}

/// The dispatcher's channels.
struct DispatchChannels {
    /// Claimed jobs to the workers (dropped when the pool stops).
    jobs: Sender<Claimed>,
    /// Finished attempts from the workers (disconnected once every worker has ended).
    finished: Receiver<(ClaimToken, Finished)>,
    /// An enqueue to this queue through the same `Queue`.
    wake: Receiver<()>,
    /// Closed when the pool stops.
    stop: Receiver<()>,
}

/// Settles finished attempts and claims jobs for free slots (workers plus prefetch), in one
/// request per round; sleeps until an attempt finishes, an enqueue wakes it, the poll interval passes,
/// or the pool stops. After the stop it claims nothing more and returns once every worker
/// has ended and its last attempt is settled.
fn dispatch<S: Store>(
    shared: &Shared<S>,
    worker: &str,
    (workers, mut prefetch): (usize, Prefetch),
    poll: Duration,
    channels: DispatchChannels,
) {
    let DispatchChannels { jobs, finished, wake, stop } = channels;
    let mut jobs = Some(jobs);
    let mut busy = 0usize;
    let mut done: Vec<(ClaimToken, Finished)> = Vec::new();
    let mut workers_gone = false;
    loop {
        while done.len() < SETTLE_BATCH {
            match finished.try_recv() {
                Ok(attempt) => done.push(attempt),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    workers_gone = true;
                    break;
                }
            }
        }
        busy -= done.len();
        let finished_now = done.len();
        // The prefetch may have shrunk below what the workers still hold.
        let free = if jobs.is_some() { (workers + prefetch.now()).saturating_sub(busy) } else { 0 };
        let settled_any = !done.is_empty();
        let claimed = settle_and_claim(shared, worker, std::mem::take(&mut done), free);
        if settled_any {
            *shared.rounds.lock() += 1;
            shared.round_done.notify_all();
        }
        if let Some(jobs) = &jobs {
            // Judged before this round's claims join the jobs still waiting to start.
            prefetch.after_round(Round {
                finished: finished_now,
                asked: free,
                claimed: claimed.len(),
                waiting: jobs.len(),
            });
        }
        let slots = workers + prefetch.now();
        let claimed_any = !claimed.is_empty();
        for claimed in claimed {
            busy += 1;
            // A worker is free for every claimed job, so this does not block long.
            if jobs.as_ref().is_some_and(|jobs| jobs.send(claimed).is_err()) {
                return;
            }
        }
        if workers_gone && jobs.is_none() {
            return;
        }
        if claimed_any && busy < slots {
            continue; // there may be more due jobs
        }
        if jobs.is_none() {
            // Stopping: only finished attempts matter now.
            match finished.recv() {
                Ok(attempt) => done.push(attempt),
                Err(_) => workers_gone = true,
            }
            continue;
        }
        select! {
            recv(stop) -> _ => jobs = None, // workers end once the job channel is dropped
            recv(finished) -> attempt => match attempt {
                Ok(attempt) => done.push(attempt),
                Err(_) => workers_gone = true,
            },
            recv(wake) -> _ => {}
            default(poll) => {}
        }
    }
}

/// How an attempt finished, as the dispatcher sees it.
#[derive(Debug)]
enum Finished {
    /// Settle it with this outcome.
    Settle(Outcome),
    /// The handler completed it itself (`Attempt::complete_with`): nothing left to settle.
    CompletedByHandler,
}

/// Works one attempt: runs the handler, catching a panic as a retry.
fn work<S: Store>(shared: &Shared<S>, claimed: Claimed) -> Finished {
    let id = claimed.token.id;
    let Some(lease) = shared.in_flight.lock().get(&claimed.token).cloned() else {
        return Finished::Settle(Outcome::retry("internal: attempt not registered"));
    };
    let token = claimed.token;
    let mut attempt = Attempt { claimed, lease, queue: shared.queue.clone() };
    let outcome = run_handler(shared, &mut attempt);
    if attempt.lease.completed.load(Ordering::SeqCst) {
        if outcome != Outcome::Complete {
            tracing::warn!(job = %id, attempt = token.attempt, ?outcome,
                "the handler completed the job with complete_with and then returned another outcome; \
                 the job stays completed");
        }
        return Finished::CompletedByHandler;
    }
    Finished::Settle(outcome)
}

/// Runs the handler, catching a panic as a retry.
fn run_handler<S: Store>(shared: &Shared<S>, attempt: &mut Attempt<S>) -> Outcome {
    let (id, token) = (attempt.claimed.token.id, attempt.claimed.token);
    match catch_unwind(AssertUnwindSafe(|| (shared.handler)(attempt))) {
        Ok(outcome) => outcome,
        Err(panic) => {
            bump(&shared.counters.panicked);
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".into());
            tracing::warn!(job = %id, attempt = token.attempt, %message, "handler panicked; retrying");
            Outcome::retry(format!("handler panicked: {message}"))
        }
    }
}

/// Most outcomes settled in one transaction.
const SETTLE_BATCH: usize = 512;

/// Settles `batch` and claims up to `free` jobs in one request; registers the claims as in
/// flight and returns them. When the combined request fails, the settles are tried again
/// alone, so a failing claim never costs the finished attempts their outcomes.
fn settle_and_claim<S: Store>(
    shared: &Shared<S>,
    worker: &str,
    finished: Vec<(ClaimToken, Finished)>,
    free: usize,
) -> Vec<Claimed> {
    if finished.is_empty() && free == 0 {
        return Vec::new();
    }
    // A finished attempt needs no more renewals; forgotten before its settle commits, so
    // that a heartbeat round racing the settle knows a failed renewal of it is no loss.
    forget(shared, &finished);
    let c = &shared.counters;
    let batch: Vec<(ClaimToken, Outcome)> = finished
        .into_iter()
        .filter_map(|(token, finished)| match finished {
            Finished::Settle(outcome) => Some((token, outcome)),
            // Its completion committed with the handler's write.
            Finished::CompletedByHandler => {
                bump(&c.completed);
                None
            }
        })
        .collect();
    if batch.is_empty() && free == 0 {
        return Vec::new();
    }
    let (results, claimed) = match shared.queue.settle_and_claim(
        settles(shared, &batch),
        &shared.queue_name,
        worker,
        shared.lease,
        free as u32,
    ) {
        Ok(both) => both,
        Err(e) => {
            bump(&c.errors);
            if may_have_committed(&e) {
                tracing::error!(queue = %shared.queue_name, jobs = batch.len(), error = %e,
                    "claim outcome unknown: the connection broke while the round committed; settling again \
                     (a settle that did commit is refused as no longer owned)");
            } else {
                tracing::error!(queue = %shared.queue_name, error = %e, "claim failed");
            }
            match shared.queue.settle_many(settles(shared, &batch)) {
                Ok(results) => (results, Vec::new()),
                Err(e) => {
                    c.errors.fetch_add(batch.len() as u64, Ordering::SeqCst);
                    if may_have_committed(&e) {
                        tracing::error!(queue = %shared.queue_name, jobs = batch.len(), error = %e,
                            "settle outcome unknown: the connection broke while it committed, so the jobs may be \
                             settled; if not, the leases will expire and the jobs be reclaimed");
                    } else {
                        tracing::error!(queue = %shared.queue_name, jobs = batch.len(), error = %e,
                            "settle failed; the leases will expire and the jobs be reclaimed");
                    }
                    return Vec::new();
                }
            }
        }
    };
    for ((token, _), result) in batch.iter().zip(results) {
        match result {
            Ok(Settled::Completed) => bump(&c.completed),
            Ok(Settled::Retried(_)) => bump(&c.retried),
            Ok(Settled::Exhausted) => bump(&c.exhausted),
            Ok(Settled::Unknown) => bump(&c.unknown),
            Ok(Settled::Parked) => bump(&c.parked),
            Err(Error::OwnershipLost { reason, .. }) => {
                bump(&c.stale_settles_rejected);
                tracing::warn!(job = %token.id, attempt = token.attempt, claim = %token.claim_id, %reason,
                    "settle rejected: the attempt no longer owns its job");
            }
            Err(e) if may_have_committed(&e) => {
                bump(&c.errors);
                tracing::error!(job = %token.id, attempt = token.attempt, error = %e,
                    "settle outcome unknown: the connection broke while it committed, so the job may be settled");
            }
            Err(e) => {
                bump(&c.errors);
                tracing::error!(job = %token.id, attempt = token.attempt, error = %e, "settle failed");
            }
        }
    }
    let mut in_flight = shared.in_flight.lock();
    for claimed in &claimed {
        bump(&c.claimed);
        let lease = Arc::new(Lease {
            until: claimed.lease_until.into(),
            lost: AtomicBool::new(false),
            completed: AtomicBool::new(false),
            completing: AtomicBool::new(false),
        });
        in_flight.insert(claimed.token, lease);
    }
    claimed
}

/// How the engine settles each finished attempt (built again for the rare retry of a
/// failed round rather than cloned every round).
fn settles<S: Store>(shared: &Shared<S>, batch: &[(ClaimToken, Outcome)]) -> Vec<(ClaimToken, Settle)> {
    batch
        .iter()
        .map(|(token, outcome)| {
            let settle = match outcome {
                Outcome::Complete => Settle::Complete,
                Outcome::Retry { after, error } => Settle::Retry {
                    delay: after.unwrap_or_else(|| shared.retry_policy.next_delay(token.attempt)),
                    error: error.clone(),
                },
                Outcome::Exhaust(error) => Settle::Exhaust(error.clone()),
                Outcome::Unknown(evidence) => Settle::Unknown(evidence.clone()),
                Outcome::Park { until, reason } => Settle::Park { timeout: *until, reason: reason.clone() },
            };
            (*token, settle)
        })
        .collect()
}

/// Drops settled (or given up) attempts from the in-flight set the heartbeat renews.
fn forget<S: Store>(shared: &Shared<S>, batch: &[(ClaimToken, Finished)]) {
    let mut in_flight = shared.in_flight.lock();
    for (token, _) in batch {
        in_flight.remove(token);
    }
}

/// Renews every in-flight lease in one transaction per round until told to stop.
fn heartbeat<S: Store>(shared: &Shared<S>, every: Duration, stop: Receiver<()>) {
    loop {
        select! {
            recv(stop) -> _ => return,
            default(every) => {}
        }
        let in_flight: Vec<(ClaimToken, Arc<Lease>)> = shared
            .in_flight
            .lock()
            .iter()
            .filter(|(_, lease)| !lease.lost.load(Ordering::SeqCst) && !lease.completed.load(Ordering::SeqCst))
            .map(|(token, lease)| (*token, lease.clone()))
            .collect();
        if in_flight.is_empty() {
            continue;
        }
        let tokens: Vec<ClaimToken> = in_flight.iter().map(|(t, _)| *t).collect();
        match shared.queue.renew_all(&tokens, shared.lease) {
            Ok(results) => {
                for ((token, lease), result) in in_flight.iter().zip(results) {
                    match result {
                        Ok(until) => lease.until.store(until, Ordering::SeqCst),
                        // Settled (or being or been completed by its handler) while this round
                        // ran: nothing was lost. `completing` is read first: the handler sets
                        // `completed` before it clears `completing`, so one of the two is seen.
                        Err(_)
                            if lease.completing.load(Ordering::SeqCst)
                                || lease.completed.load(Ordering::SeqCst)
                                || !shared.in_flight.lock().contains_key(token) => {}
                        Err(e) => {
                            lease.lost.store(true, Ordering::SeqCst);
                            bump(&shared.counters.renewals_failed);
                            tracing::warn!(job = %token.id, attempt = token.attempt, error = %e, "lease lost");
                        }
                    }
                }
            }
            Err(e) => {
                bump(&shared.counters.errors);
                tracing::error!(queue = %shared.queue_name, error = %e, "heartbeat round failed");
            }
        }
    }
}

/// True for an error after which the work may have committed (PostgreSQL's `ConnectionLost`
/// while committing): a settle's outcome is then unknown, not failed.
fn may_have_committed(e: &Error) -> bool {
    #[cfg(feature = "postgres")]
    if let Error::ConnectionLost { commit_unknown, .. } = e {
        return *commit_unknown;
    }
    let _ = e;
    false
}
