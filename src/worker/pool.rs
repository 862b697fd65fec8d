//! The worker pool: one dispatcher thread that claims in batches sized to free slots, worker
//! threads that run the handler, a settler thread that settles the outcomes of many workers
//! in one transaction, and a heartbeat thread that renews every in-flight lease in one
//! transaction per round.

use super::attempt::{Attempt, Lease, Outcome};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::job::{ClaimToken, Claimed, JobId, RetryPolicy};
use crate::queue::{Queue, Settle, Settled};
use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender};
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
/// How long dropping a pool waits for in-flight attempts. Defaults to 10 seconds.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

type Handler = Arc<dyn Fn(&mut Attempt) -> Outcome + Send + Sync>;

/// Builder for a [`WorkerPool`]; see [`WorkerPool::builder`].
pub struct WorkerPoolBuilder {
    queue: Queue,
    queue_name: String,
    workers: usize,
    lease: Duration,
    renew_every: Option<Duration>,
    poll_interval: Duration,
    worker_prefix: String,
    retry_policy: RetryPolicy,
    handler: Option<Handler>,
}

impl std::fmt::Debug for WorkerPoolBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPoolBuilder")
            .field("queue_name", &self.queue_name)
            .field("workers", &self.workers)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl WorkerPoolBuilder {
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

    /// Worker ids are `{prefix}-{n}`. Defaults to `"{queue}-{pid}"`.
    pub fn worker_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.worker_prefix = prefix.into();
        self
    }

    /// The backoff for `Outcome::Retry { after: None, .. }` and for panics.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry_policy = policy;
        self
    }

    /// The function that works one attempt. It runs on a worker thread; a panic is caught
    /// and the attempt retried with the panic message as its error.
    pub fn handler(mut self, handler: impl Fn(&mut Attempt) -> Outcome + Send + Sync + 'static) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// Starts the threads.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when no handler was set or a setting is out of range.
    pub fn start(self) -> Result<WorkerPool> {
        let handler = self.handler.clone().ok_or_else(|| Error::invalid("handler", "set one with .handler(..)"))?;
        if self.workers == 0 || self.workers > 256 {
            return Err(Error::invalid("workers", format!("{} is not in 1..=256", self.workers)));
        }
        if self.lease.is_zero() || self.lease > crate::config::MAX_LEASE {
            return Err(Error::invalid("lease", format!("{:?} is out of range", self.lease)));
        }
        let renew_every = self.renew_every.unwrap_or(self.lease / 3);
        if renew_every.is_zero() || renew_every >= self.lease {
            return Err(Error::invalid("renew_every", "must be shorter than the lease and not zero"));
        }
        if self.poll_interval.is_zero() {
            return Err(Error::invalid("poll_interval", "must not be zero"));
        }
        if self.queue_name.is_empty() || self.queue_name.len() > crate::config::MAX_NAME_LEN {
            return Err(Error::invalid("queue name", "must be 1..=128 bytes"));
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
struct Shared {
    queue: Queue,
    queue_name: String,
    lease: Duration,
    retry_policy: RetryPolicy,
    clock: Arc<dyn Clock>,
    handler: Handler,
    counters: Counters,
    in_flight: Mutex<HashMap<JobId, (ClaimToken, Arc<Lease>)>>,
    stopping: AtomicBool,
}

/// A running pool of worker threads for one queue; see the crate docs for an example.
///
/// Dropping the pool shuts it down, waiting up to [`DEFAULT_SHUTDOWN_TIMEOUT`].
pub struct WorkerPool {
    shared: Arc<Shared>,
    stop_dispatch: Option<Sender<()>>,
    stop_heartbeat: Option<Sender<()>>,
    exited: Receiver<()>,
    threads: Vec<JoinHandle<()>>,
    workers: usize,
    stopped: bool,
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool").field("queue", &self.shared.queue_name).field("workers", &self.workers).finish()
    }
}

impl WorkerPool {
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
    pub fn builder(queue: Queue, queue_name: impl Into<String>) -> WorkerPoolBuilder {
        let queue_name = queue_name.into();
        WorkerPoolBuilder {
            worker_prefix: format!("{queue_name}-{}", std::process::id()),
            queue,
            queue_name,
            workers: DEFAULT_WORKERS,
            lease: DEFAULT_POOL_LEASE,
            renew_every: None,
            poll_interval: DEFAULT_POLL_INTERVAL,
            retry_policy: RetryPolicy::default(),
            handler: None,
        }
    }

    fn start(builder: WorkerPoolBuilder, handler: Handler, renew_every: Duration) -> Result<WorkerPool> {
        let shared = Arc::new(Shared {
            clock: builder.queue.clock(),
            queue: builder.queue.clone(),
            queue_name: builder.queue_name.clone(),
            lease: builder.lease,
            retry_policy: builder.retry_policy,
            handler,
            counters: Counters::default(),
            in_flight: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
        });
        let workers = builder.workers;
        let (job_tx, job_rx) = bounded::<Claimed>(workers);
        let (done_tx, done_rx) = unbounded::<()>();
        let (stop_dispatch, stop_dispatch_rx) = bounded::<()>(0);
        let (stop_heartbeat, stop_heartbeat_rx) = bounded::<()>(0);
        let (exited_tx, exited) = unbounded::<()>();
        let (settle_tx, settle_rx) = unbounded::<(ClaimToken, Outcome)>();
        let wake = builder.queue.subscribe(&builder.queue_name);
        let mut threads = Vec::with_capacity(workers + 2);

        for n in 0..workers {
            let shared = shared.clone();
            let jobs = job_rx.clone();
            let done = done_tx.clone();
            let exited = exited_tx.clone();
            let settle = settle_tx.clone();
            threads.push(spawn(&format!("fenceq-worker-{n}"), move || {
                for claimed in jobs.iter() {
                    let token = claimed.token;
                    let outcome = work(&shared, claimed);
                    let _ = settle.send((token, outcome));
                    let _ = done.send(());
                }
                let _ = exited.send(());
            })?);
        }
        drop(job_rx);
        drop(settle_tx);
        {
            let shared = shared.clone();
            let exited = exited_tx.clone();
            threads.push(spawn("fenceq-settler", move || {
                settler(&shared, settle_rx);
                let _ = exited.send(());
            })?);
        }
        {
            let shared = shared.clone();
            let worker = format!("{}-{}", builder.worker_prefix, 0);
            let poll = builder.poll_interval;
            threads.push(spawn("fenceq-dispatcher", move || {
                dispatch(&shared, &worker, workers, poll, job_tx, done_rx, wake, stop_dispatch_rx)
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

    /// Jobs whose attempts are running now.
    pub fn in_flight(&self) -> Vec<JobId> {
        let mut ids: Vec<JobId> = self.shared.in_flight.lock().keys().copied().collect();
        ids.sort();
        ids
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
        let deadline = Instant::now() + timeout;
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Closing the channel stops the dispatcher; it drops the job sender, so workers end
        // once the attempts they hold are settled.
        drop(self.stop_dispatch.take());
        // Workers end once the attempts they hold are done; the settler ends after settling
        // the last of them.
        let mut exited = 0;
        while exited < self.workers + 1 {
            match self.exited.recv_deadline(deadline) {
                Ok(()) => exited += 1,
                Err(_) => break,
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

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.stop(DEFAULT_SHUTDOWN_TIMEOUT);
    }
}

fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    Ok(std::thread::Builder::new().name(name.to_string()).spawn(body)?)
}

/// Claims batches sized to free worker slots and hands them over; sleeps until an enqueue
/// wakes it, a slot frees up, the poll interval passes, or the pool stops.
#[allow(clippy::too_many_arguments)]
fn dispatch(
    shared: &Shared,
    worker: &str,
    slots: usize,
    poll: Duration,
    jobs: Sender<Claimed>,
    done: Receiver<()>,
    wake: Receiver<()>,
    stop: Receiver<()>,
) {
    let mut busy = 0usize;
    loop {
        while done.try_recv().is_ok() {
            busy -= 1;
        }
        let free = slots - busy;
        let mut claimed_any = false;
        if free > 0 {
            match shared.queue.claim_batch(&shared.queue_name, worker, shared.lease, free as u32) {
                Ok(batch) => {
                    claimed_any = !batch.is_empty();
                    for claimed in batch {
                        bump(&shared.counters.claimed);
                        let lease = Arc::new(Lease { until: claimed.lease_until.into(), lost: AtomicBool::new(false) });
                        shared.in_flight.lock().insert(claimed.token.id, (claimed.token, lease));
                        busy += 1;
                        // A worker is free for every claimed job, so this does not block long.
                        if jobs.send(claimed).is_err() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    bump(&shared.counters.errors);
                    tracing::error!(queue = %shared.queue_name, error = %e, "claim failed");
                }
            }
        }
        if claimed_any && busy < slots {
            continue; // there may be more due jobs
        }
        select! {
            recv(stop) -> _ => return,
            recv(done) -> _ => busy -= 1,
            recv(wake) -> _ => {}
            default(poll) => {}
        }
    }
}

/// Works one attempt: runs the handler, catching a panic as a retry.
fn work(shared: &Shared, claimed: Claimed) -> Outcome {
    let id = claimed.token.id;
    let Some(lease) = shared.in_flight.lock().get(&id).map(|(_, lease)| lease.clone()) else {
        return Outcome::retry("internal: attempt not registered");
    };
    let token = claimed.token;
    let mut attempt = Attempt { claimed, lease, queue: shared.queue.clone(), clock: shared.clock.clone() };
    match catch_unwind(AssertUnwindSafe(|| (shared.handler)(&mut attempt))) {
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

/// Settles the outcomes of all workers, as many per transaction as have arrived, until every
/// worker has gone.
fn settler(shared: &Shared, outcomes: Receiver<(ClaimToken, Outcome)>) {
    while let Ok(first) = outcomes.recv() {
        let mut batch = vec![first];
        while batch.len() < SETTLE_BATCH {
            match outcomes.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        settle(shared, &batch);
        let mut in_flight = shared.in_flight.lock();
        for (token, _) in &batch {
            in_flight.remove(&token.id);
        }
    }
}

fn settle(shared: &Shared, batch: &[(ClaimToken, Outcome)]) {
    let c = &shared.counters;
    let items: Vec<(ClaimToken, Settle<'_>)> = batch
        .iter()
        .map(|(token, outcome)| {
            let settle = match outcome {
                Outcome::Complete => Settle::Complete,
                Outcome::Retry { after, error } => Settle::Retry {
                    delay: after.unwrap_or_else(|| shared.retry_policy.next_delay(token.attempt)),
                    error,
                },
                Outcome::Exhaust(error) => Settle::Exhaust(error),
                Outcome::Unknown(evidence) => Settle::Unknown(evidence),
                Outcome::Park { until, reason } => Settle::Park { timeout: *until, reason },
            };
            (*token, settle)
        })
        .collect();
    let results = match shared.queue.settle_many(&items) {
        Ok(results) => results,
        Err(e) => {
            c.errors.fetch_add(batch.len() as u64, Ordering::SeqCst);
            tracing::error!(queue = %shared.queue_name, jobs = batch.len(), error = %e,
                "settle failed; the leases will expire and the jobs be reclaimed");
            return;
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
            Err(e) => {
                bump(&c.errors);
                tracing::error!(job = %token.id, attempt = token.attempt, error = %e, "settle failed");
            }
        }
    }
}

/// Renews every in-flight lease in one transaction per round until told to stop.
fn heartbeat(shared: &Shared, every: Duration, stop: Receiver<()>) {
    loop {
        select! {
            recv(stop) -> _ => return,
            default(every) => {}
        }
        let in_flight: Vec<(ClaimToken, Arc<Lease>)> =
            shared.in_flight.lock().values().filter(|(_, l)| !l.lost.load(Ordering::SeqCst)).cloned().collect();
        if in_flight.is_empty() {
            continue;
        }
        let tokens: Vec<ClaimToken> = in_flight.iter().map(|(t, _)| *t).collect();
        match shared.queue.renew_all(&tokens, shared.lease) {
            Ok(results) => {
                for ((token, lease), result) in in_flight.iter().zip(results) {
                    match result {
                        Ok(until) => lease.until.store(until, Ordering::SeqCst),
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
