//! The worker pool: one dispatcher thread, worker threads that run the handler, and a
//! heartbeat thread that renews every in-flight lease in one transaction per round.
//!
//! The dispatcher settles and claims in one request: every attempt that finished since its
//! last round is settled, and as many jobs as there are free slots (workers plus prefetch)
//! are claimed, in the same group transaction. A finished attempt so costs one hand-off
//! (worker to dispatcher) and no transaction of its own, and a prefetched job is waiting
//! when a worker frees up.

use super::attempt::{Attempt, Lease, Outcome, DROPPED, HANDED_BACK, STARTED};
use super::prefetch::{Prefetch, Round};
use crate::error::{Error, LostReason, Result};
use crate::job::{ClaimToken, Claimed, JobId, JobState, RetryPolicy};
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
    /// never costs a waiting job an attempt). A prefetched job is never started once its
    /// lease is known lost (a renewal failed, or the lease ran out by the queue's clock):
    /// the pool drops it unstarted ([`PoolCounters::dropped_lost`]), and whoever reclaims the
    /// job runs it. [`WorkerPool::shutdown`] starts none of them: it hands them back
    /// unstarted, due at once, their attempt not counted. The price: while every worker of
    /// the pool is stuck in a handler, the prefetched jobs wait with them. Use 0 when handlers can hang, or when several pools share a queue and
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
    /// Prefetched jobs dropped unstarted because their lease was lost before a worker took
    /// them (a renewal failed, or the lease ran out by the queue's clock), and held jobs a
    /// shutdown could not hand back because another claim had them already: this pool never
    /// started them, and whoever holds or reclaims the job runs it (logged as a warning).
    pub dropped_lost: u64,
    /// Prefetched jobs a shutdown handed back unstarted (see [`ShutdownReport::handed_back`]).
    pub handed_back: u64,
    /// Outcomes whose text (a retry's error, an exhaustion's, an unknown's evidence, a
    /// park's reason) the store refused: each was settled as the handler said, with the text
    /// escaped to printable ASCII (or, refused again, replaced by a note), and logged at
    /// error level with its job id and the store's error.
    pub texts_replaced: u64,
    /// Settles, claims, hand-backs and heartbeat rounds that failed for another reason,
    /// counted once per job a settle or hand-back failed for, and logged at error level with
    /// the job ids. A job whose settle failed stays running until its lease runs out, then
    /// is claimed again.
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
    dropped_lost: AtomicU64,
    handed_back: AtomicU64,
    texts_replaced: AtomicU64,
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
            dropped_lost: get(&self.dropped_lost),
            handed_back: get(&self.handed_back),
            texts_replaced: get(&self.texts_replaced),
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
    /// Prefetched jobs no worker had started when the shutdown began: handed back to the
    /// queue unstarted, claimable at once, the attempt given back to the job's budget. By
    /// id.
    pub handed_back: Vec<JobId>,
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
    /// Set when a shutdown begins: from then on no worker starts a held job, and the
    /// dispatcher claims nothing more and hands the held jobs back.
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
    /// The jobs the dispatcher handed back once it saw the shutdown.
    handed_back: Receiver<Vec<JobId>>,
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
        let (job_tx, job_rx) = bounded::<(Claimed, Arc<Lease>)>(workers + prefetch.most());
        let (stop_dispatch, stop_dispatch_rx) = bounded::<()>(0);
        let (stop_heartbeat, stop_heartbeat_rx) = bounded::<()>(0);
        let (exited_tx, exited) = unbounded::<()>();
        let (handed_back_tx, handed_back) = bounded::<Vec<JobId>>(1);
        let (finished_tx, finished_rx) = unbounded::<(ClaimToken, Finished)>();
        let wake = builder.queue.subscribe(&builder.queue_name);
        let mut threads = Vec::with_capacity(workers + 2);

        for n in 0..workers {
            let shared = shared.clone();
            let jobs = job_rx.clone();
            let exited = exited_tx.clone();
            let finished = finished_tx.clone();
            threads.push(spawn(&format!("fenceq-worker-{n}"), move || {
                for (claimed, lease) in jobs.iter() {
                    let token = claimed.token;
                    match begin(&shared, &claimed, &lease) {
                        Begin::Start => {
                            let outcome = work(&shared, claimed, lease);
                            let _ = finished.send((token, outcome));
                        }
                        Begin::Drop => {
                            let _ = finished.send((token, Finished::Dropped));
                        }
                        // The shutdown hands it back.
                        Begin::Leave => {}
                    }
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
            let channels = DispatchChannels {
                jobs: job_tx,
                finished: finished_rx,
                wake,
                stop: stop_dispatch_rx,
                handed_back: handed_back_tx,
            };
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
            handed_back,
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
    /// or until `timeout` passes. Returns true when the queue went idle, false on the
    /// timeout. Jobs delayed into the future do not count, retries scheduled by this pool's
    /// own handlers included; jobs another process adds do, once they are due. Checks after
    /// every round that settled something, and at least every poll interval.
    ///
    /// Use it to wait for the work that is due now (a test step, a health check that the
    /// pool keeps up). To wait until the pool has run everything it ever will, later
    /// retries too (a script's end, a batch job, a graceful restart), use
    /// [`WorkerPool::wait_drained`].
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
        let queue = &self.shared.queue_name;
        self.wait_until(timeout, |q| q.due_or_running(queue).map(|n| n == 0))
    }

    /// Waits until the pool's queue holds nothing this pool would ever run: no pending job,
    /// due now or delayed (a retry scheduled for later counts until it has run), none held
    /// back by a pause of the queue, no running job of any worker or process, and nothing in
    /// this pool's hands; or until `timeout` passes. Returns true when the queue is drained,
    /// false on the timeout. Parked jobs (`waiting`) do not count: only a resume makes them
    /// pending again. Checks after every round that settled something, and at least every
    /// poll interval.
    ///
    /// Use it where the work must be finished, not just caught up with: the end of a script
    /// or batch run, before a shutdown that must leave nothing behind. It waits out every
    /// retry's delay, so give it a timeout longer than the retry policy's delays (or loop
    /// on it). [`WorkerPool::wait_idle`] returns as soon as nothing is due.
    ///
    /// ```
    /// # use fenceq::{NewJob, Outcome, Queue, WorkerPool};
    /// # use std::time::Duration;
    /// let queue = Queue::open_in_memory()?;
    /// let pool = WorkerPool::builder(queue.clone(), "q")
    ///     .poll_interval(Duration::from_millis(10))
    ///     .handler(|attempt| match attempt.attempt() {
    ///         1 => Outcome::retry_after(Duration::from_millis(50), "flaky upstream"),
    ///         _ => Outcome::Complete,
    ///     })
    ///     .start()?;
    /// queue.enqueue(NewJob::new("q", b"x".to_vec()))?;
    /// assert!(pool.wait_drained(Duration::from_secs(10))?);
    /// let report = pool.shutdown(Duration::from_secs(5))?;
    /// assert_eq!((report.counters.retried, report.counters.completed), (1, 1));
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The read that counts pending and running jobs can fail: `Pool`, `Busy`, or
    /// `NestedWrite` when called from inside one of this queue's closures.
    pub fn wait_drained(&self, timeout: Duration) -> Result<bool> {
        let queue = self.shared.queue_name.as_str();
        self.wait_until(timeout, |q| {
            q.store().read(|tx| {
                // Every pending job is due at the end of time, unless the queue is paused.
                if S::due_or_running(tx, queue, i64::MAX)? > 0 {
                    return Ok(false);
                }
                if S::queue_pause(tx, queue)?.is_none() {
                    return Ok(true);
                }
                Ok(S::list(tx, Some(queue), Some(JobState::Pending), 0, 1)?.is_empty())
            })
        })
    }

    /// Waits until nothing is in this pool's hands and `queue_done` says so, or `timeout`.
    fn wait_until(&self, timeout: Duration, queue_done: impl Fn(&Queue<S>) -> Result<bool>) -> Result<bool> {
        let shared = &self.shared;
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let seen = *shared.rounds.lock();
            if shared.in_flight.lock().is_empty() && queue_done(&shared.queue)? {
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

    /// Stops claiming, hands the prefetched jobs no worker has started back to the queue,
    /// lets the running attempts finish within `timeout` (their leases are renewed
    /// meanwhile) and reports what was left running. Once it begins, no held job is
    /// started; it returns after the held ones were handed back (claimable at once, by any
    /// pool or process, the attempt not counted against the job: one transaction, which it
    /// waits for whatever the timeout) and at most `timeout` after that for the running
    /// attempts. A second call is a no-op. A hand-back the store refused is counted in
    /// [`PoolCounters::errors`] and logged: those jobs, never started, become claimable when
    /// their leases run out.
    pub fn shutdown(mut self, timeout: Duration) -> Result<ShutdownReport> {
        Ok(self.stop(timeout))
    }

    fn stop(&mut self, timeout: Duration) -> ShutdownReport {
        if self.stopped {
            return ShutdownReport { counters: self.counters(), ..ShutdownReport::default() };
        }
        self.stopped = true;
        // Read before anything is handed back: no held job starts from here on (workers read
        // it before they start one), and the dispatcher claims nothing more.
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Closing the channel wakes the dispatcher, which hands the held jobs back, drops the
        // job sender (so workers end once the attempts they run are done) and ends after
        // settling the last of them.
        drop(self.stop_dispatch.take());
        // Not bounded by `timeout`: a held job left claimed would wait out its lease unrun.
        // (Ends at once if the dispatcher is gone.)
        let mut handed_back = self.handed_back.recv().unwrap_or_default();
        handed_back.sort();
        // `None`: a timeout too long to add to now (`Duration::MAX`) waits without one.
        let deadline = Instant::now().checked_add(timeout);
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
        ShutdownReport { still_running, handed_back, counters: self.counters() }
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
    /// Claimed jobs to the workers, each with its lease (dropped when the pool stops).
    jobs: Sender<(Claimed, Arc<Lease>)>,
    /// Finished attempts from the workers (disconnected once every worker has ended).
    finished: Receiver<(ClaimToken, Finished)>,
    /// An enqueue to this queue through the same `Queue`.
    wake: Receiver<()>,
    /// Closed when the pool stops.
    stop: Receiver<()>,
    /// The jobs handed back when the pool stopped, to the shutdown.
    handed_back: Sender<Vec<JobId>>,
}

/// Settles finished attempts and claims jobs for free slots (workers plus prefetch), in one
/// request per round; sleeps until an attempt finishes, an enqueue wakes it, the poll
/// interval passes, or the pool stops. Once the pool is stopping it claims nothing more,
/// hands back the held jobs no worker started, and returns once every worker has ended and
/// its last attempt is settled.
fn dispatch<S: Store>(
    shared: &Shared<S>,
    worker: &str,
    (workers, mut prefetch): (usize, Prefetch),
    poll: Duration,
    channels: DispatchChannels,
) {
    let DispatchChannels { jobs, finished, wake, stop, handed_back } = channels;
    let mut jobs = Some(jobs);
    let mut busy = 0usize;
    let mut done: Vec<(ClaimToken, Finished)> = Vec::new();
    let mut workers_gone = false;
    loop {
        if jobs.is_some() && shared.stopping.load(Ordering::SeqCst) {
            // Workers end once the job channel is dropped and they have skipped what it holds.
            jobs = None;
            let (taken, back) = hand_back(shared);
            busy -= taken;
            let _ = handed_back.send(back);
        }
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
            recv(stop) -> _ => {} // `stopping` is set: the next round hands the held jobs back
            recv(finished) -> attempt => match attempt {
                Ok(attempt) => done.push(attempt),
                Err(_) => workers_gone = true,
            },
            recv(wake) -> _ => {}
            default(poll) => {}
        }
    }
}

/// Hands back every held job no worker has started (a worker that takes one afterwards
/// skips it), in one transaction. Returns how many held jobs it took out of the pool's hands,
/// and the ids of those the queue took back (a held job whose lease another claim has taken
/// stays with that claim). Run by the dispatcher once the pool is stopping and it has
/// stopped claiming, so that no claim joins the held jobs afterwards.
fn hand_back<S: Store>(shared: &Shared<S>) -> (usize, Vec<JobId>) {
    let held: Vec<ClaimToken> = {
        let mut in_flight = shared.in_flight.lock();
        // Each held claim leaves `HELD` once: here, or in the worker that starts or drops it.
        let held: Vec<ClaimToken> =
            in_flight.iter().filter(|(_, lease)| lease.leave_held(HANDED_BACK)).map(|(token, _)| *token).collect();
        // Forgotten before the release commits: the heartbeat no longer renews them, and a
        // renewal racing the release is no lost lease.
        for token in &held {
            in_flight.remove(token);
        }
        held
    };
    if held.is_empty() {
        return (0, Vec::new());
    }
    let c = &shared.counters;
    let mut back = Vec::with_capacity(held.len());
    match shared.queue.release_all(&held) {
        Ok(results) => {
            for (token, result) in held.iter().zip(results) {
                match result {
                    Ok(()) => back.push(token.id),
                    Err(e) => {
                        bump(&c.dropped_lost);
                        tracing::warn!(job = %token.id, attempt = token.attempt, error = %e,
                            "a held job was not handed back: its lease was lost before the shutdown; not started");
                    }
                }
            }
            c.handed_back.fetch_add(back.len() as u64, Ordering::SeqCst);
            if !back.is_empty() {
                // Other pools of this handle may take them at once.
                shared.queue.wake(&shared.queue_name);
            }
        }
        Err(e) => {
            c.errors.fetch_add(held.len() as u64, Ordering::SeqCst);
            let jobs: Vec<JobId> = held.iter().map(|token| token.id).collect();
            tracing::error!(queue = %shared.queue_name, ?jobs, error = %e,
                "could not hand the held jobs back; not started, they are claimable once their leases run out");
        }
    }
    (held.len(), back)
}

/// How an attempt finished, as the dispatcher sees it.
#[derive(Debug)]
enum Finished {
    /// Settle it with this outcome.
    Settle(Outcome),
    /// The handler completed it itself (`Attempt::complete_with`): nothing left to settle.
    CompletedByHandler,
    /// Never started: its lease was lost while it was held. Nothing to settle.
    Dropped,
}

/// What a worker does with a claim it took from the channel.
enum Begin {
    /// Run the handler.
    Start,
    /// Drop it unstarted: its lease is lost.
    Drop,
    /// Leave it: the shutdown hands it back (or has).
    Leave,
}

/// Decides, right before a worker would run the handler, whether it may: not once the pool
/// is stopping, and not once the lease is known lost (a renewal failed, or it ran out by the
/// queue's clock: another claimer may hold the job already).
fn begin<S: Store>(shared: &Shared<S>, claimed: &Claimed, lease: &Lease) -> Begin {
    if shared.stopping.load(Ordering::SeqCst) {
        return Begin::Leave;
    }
    let lost = lease.lost.load(Ordering::SeqCst) || shared.queue.now_ms() >= lease.until.load(Ordering::SeqCst);
    if lost {
        if !lease.leave_held(DROPPED) {
            return Begin::Leave;
        }
        let token = claimed.token;
        tracing::warn!(job = %token.id, attempt = token.attempt, claim = %token.claim_id,
            "a prefetched job's lease was lost before a worker took it; dropped unstarted");
        return Begin::Drop;
    }
    if lease.leave_held(STARTED) {
        Begin::Start
    } else {
        Begin::Leave
    }
}

/// Works one attempt: runs the handler, catching a panic as a retry.
fn work<S: Store>(shared: &Shared<S>, claimed: Claimed, lease: Arc<Lease>) -> Finished {
    let id = claimed.token.id;
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

/// Settles `finished` and claims up to `free` jobs in one request; registers the claims as
/// in flight and returns them.
///
/// When the combined request fails, the settles are tried again in one transaction of their
/// own, so that a failing claim never costs the finished attempts their outcomes. When that
/// fails too because the store refused a statement (not for its own trouble: the
/// connection, the disk, a lock), one outcome failed the whole batch: each is then settled
/// alone (see `settle_alone`), so that one outcome the store refuses never fails its
/// neighbours, and the claim is made on its own.
fn settle_and_claim<S: Store>(
    shared: &Shared<S>,
    worker: &str,
    finished: Vec<(ClaimToken, Finished)>,
    free: usize,
) -> Vec<(Claimed, Arc<Lease>)> {
    if finished.is_empty() && free == 0 {
        return Vec::new();
    }
    // A finished attempt needs no more renewals; forgotten before its settle commits, so
    // that a heartbeat round racing the settle knows a failed renewal of it is no loss.
    forget(shared, &finished);
    let c = &shared.counters;
    let mut batch: Vec<(ClaimToken, Outcome)> = Vec::with_capacity(finished.len());
    for (token, finished) in finished {
        match finished {
            Finished::Settle(outcome) => batch.push((token, outcome)),
            // Its completion committed with the handler's write.
            Finished::CompletedByHandler => bump(&c.completed),
            // Logged by the worker that dropped it.
            Finished::Dropped => bump(&c.dropped_lost),
        }
    }
    if batch.is_empty() && free == 0 {
        return Vec::new();
    }
    let claim_failed = |e: &Error| {
        bump(&c.errors);
        if may_have_committed(e) {
            tracing::error!(queue = %shared.queue_name, jobs = batch.len(), error = %e,
                "claim outcome unknown: the connection broke while the round committed; settling again \
                 (a settle that did commit is refused as no longer owned)");
        } else {
            tracing::error!(queue = %shared.queue_name, error = %e, "claim failed");
        }
    };
    let claimed = match shared.queue.settle_and_claim(
        settles(shared, &batch),
        &shared.queue_name,
        worker,
        shared.lease,
        free as u32,
    ) {
        Ok((results, claimed)) => {
            tally(shared, &batch, results);
            claimed
        }
        // Nothing was to be settled: the claim failed, and that is all there is to say.
        Err(e) if batch.is_empty() => {
            claim_failed(&e);
            return Vec::new();
        }
        Err(e) => match shared.queue.settle_many(settles(shared, &batch)) {
            Ok(results) => {
                claim_failed(&e);
                tally(shared, &batch, results);
                Vec::new()
            }
            // The store's own trouble (the connection, the disk, a lock): each alone would
            // fail the same way, after waiting as long.
            Err(e) if !refused_row(&e) => {
                c.errors.fetch_add(batch.len() as u64, Ordering::SeqCst);
                let jobs: Vec<JobId> = batch.iter().map(|(token, _)| token.id).collect();
                if may_have_committed(&e) {
                    tracing::error!(queue = %shared.queue_name, ?jobs, error = %e,
                        "settle outcome unknown: the connection broke while it committed, so the jobs may be \
                         settled; if not, their leases run out and they are claimed again");
                } else {
                    tracing::error!(queue = %shared.queue_name, ?jobs, error = %e,
                        "settles failed; the jobs stay running until their leases run out, then are claimed again");
                }
                return Vec::new();
            }
            Err(e) => {
                tracing::warn!(queue = %shared.queue_name, jobs = batch.len(), error = %e,
                    "a round's settles failed together; settling each alone");
                if !settle_alone(shared, &batch) || free == 0 {
                    return Vec::new();
                }
                match shared.queue.claim_batch(&shared.queue_name, worker, shared.lease, free as u32) {
                    Ok(claimed) => claimed,
                    Err(e) => {
                        claim_failed(&e);
                        return Vec::new();
                    }
                }
            }
        },
    };
    let mut in_flight = shared.in_flight.lock();
    claimed
        .into_iter()
        .map(|claimed| {
            bump(&c.claimed);
            let lease = Arc::new(Lease::held(claimed.lease_until));
            in_flight.insert(claimed.token, lease.clone());
            (claimed, lease)
        })
        .collect()
}

/// Counts (and logs) what each settle of `batch` did.
fn tally<S: Store>(shared: &Shared<S>, batch: &[(ClaimToken, Outcome)], results: Vec<Result<Settled>>) {
    for ((token, outcome), result) in batch.iter().zip(results) {
        tally_one(shared, token, outcome, result);
    }
}

fn tally_one<S: Store>(shared: &Shared<S>, token: &ClaimToken, outcome: &Outcome, result: Result<Settled>) {
    let c = &shared.counters;
    match result {
        Ok(Settled::Completed) => bump(&c.completed),
        Ok(Settled::Retried(_)) => bump(&c.retried),
        Ok(Settled::Exhausted) => bump(&c.exhausted),
        Ok(Settled::Unknown) => bump(&c.unknown),
        Ok(Settled::Parked) => bump(&c.parked),
        // The row still carries this exact claim and is completed: the handler completed it
        // with the attempt's own token (`Queue::complete_with`), and the settle came second.
        Err(Error::OwnershipLost { reason: LostReason::NotRunning(JobState::Completed), .. }) => {
            bump(&c.completed);
            if *outcome != Outcome::Complete {
                tracing::warn!(job = %token.id, attempt = token.attempt, ?outcome,
                    "the handler completed the job with its own token and then returned another outcome; \
                     the job stays completed");
            }
        }
        Err(Error::OwnershipLost { reason, .. }) => {
            bump(&c.stale_settles_rejected);
            tracing::warn!(job = %token.id, attempt = token.attempt, claim = %token.claim_id, %reason,
                "settle rejected: the attempt no longer owns its job");
        }
        Err(e) if may_have_committed(&e) => {
            bump(&c.errors);
            tracing::error!(job = %token.id, attempt = token.attempt, ?outcome, error = %e,
                "settle outcome unknown: the connection broke while it committed, so the job may be settled");
        }
        Err(e) => {
            bump(&c.errors);
            tracing::error!(job = %token.id, attempt = token.attempt, ?outcome, error = %e,
                "settle failed; the job stays running until its lease runs out, then is claimed again");
        }
    }
}

/// Settles each outcome of `batch` in a transaction of its own, after the batch failed as a
/// whole. An outcome whose text the store refused is settled as the handler said with the
/// text escaped (`settle_replacing_text`). Once a settle fails for a reason of the store's
/// rather than its own row's (the connection, the disk, a lock), the rest would fail the
/// same way: they are counted and logged, not tried. Returns false in that case.
fn settle_alone<S: Store>(shared: &Shared<S>, batch: &[(ClaimToken, Outcome)]) -> bool {
    let mut store_failed: Option<String> = None;
    let mut not_tried: Vec<JobId> = Vec::new();
    for (token, outcome) in batch {
        if store_failed.is_some() {
            not_tried.push(token.id);
            continue;
        }
        let result = match shared.queue.settle(token, settle_of(shared, token, outcome)) {
            Err(e) if refused_row(&e) => settle_replacing_text(shared, token, outcome, e),
            other => other,
        };
        if let Err(e) = &result {
            if !refused_row(e) && !matches!(e, Error::OwnershipLost { .. } | Error::InvalidInput { .. }) {
                store_failed = Some(e.to_string());
            }
        }
        tally_one(shared, token, outcome, result);
    }
    if let Some(error) = store_failed {
        if !not_tried.is_empty() {
            shared.counters.errors.fetch_add(not_tried.len() as u64, Ordering::SeqCst);
            tracing::error!(queue = %shared.queue_name, jobs = ?not_tried, %error,
                "settles not written; the jobs stay running until their leases run out, then are claimed again");
        }
        return false;
    }
    true
}

/// Settles an outcome whose settle the store refused as it was, with its text replaced:
/// first escaped to printable ASCII (a person still reads what the handler said), then, if
/// that is refused too, a note alone. The outcome itself never changes: an unknown stays
/// unknown (its side effect may have happened), a retry stays a retry. `refused` is the
/// store's error for the original, returned when the outcome has no text to replace or
/// every replacement is refused too.
fn settle_replacing_text<S: Store>(
    shared: &Shared<S>,
    token: &ClaimToken,
    outcome: &Outcome,
    refused: Error,
) -> Result<Settled> {
    let text = match outcome {
        Outcome::Retry { error: text, .. } | Outcome::Exhaust(text) | Outcome::Unknown(text) => text,
        Outcome::Park { reason, .. } => reason,
        Outcome::Complete => return Err(refused),
    };
    let replacements = [
        format!("{REPLACED_TEXT}; escaped: {}", text.escape_default()),
        format!("{REPLACED_TEXT}; see the worker's log"),
    ];
    for replacement in replacements {
        match shared.queue.settle(token, settle_of(shared, token, &with_text(outcome, replacement))) {
            Err(e) if refused_row(&e) => continue,
            Ok(settled) => {
                bump(&shared.counters.texts_replaced);
                tracing::error!(job = %token.id, attempt = token.attempt, ?outcome, error = %refused,
                    "the store refused the outcome's text; settled with the text replaced");
                return Ok(settled);
            }
            Err(e) => return Err(e),
        }
    }
    Err(refused)
}

/// What a replaced outcome text begins with.
const REPLACED_TEXT: &str = "[fenceq: the store refused this text]";

/// `outcome` with its text replaced by `text`.
fn with_text(outcome: &Outcome, text: String) -> Outcome {
    match outcome {
        Outcome::Complete => Outcome::Complete,
        Outcome::Retry { after, .. } => Outcome::Retry { after: *after, error: text },
        Outcome::Exhaust(_) => Outcome::Exhaust(text),
        Outcome::Unknown(_) => Outcome::Unknown(text),
        Outcome::Park { until, .. } => Outcome::Park { until: *until, reason: text },
    }
}

/// True for an error of the statement itself (a constraint, an application's trigger, a
/// value the store cannot hold), which another row's settle would not meet; false for the
/// store's own trouble (the connection, the disk, a lock) and for the fence's refusals.
fn refused_row(e: &Error) -> bool {
    #[cfg(feature = "postgres")]
    if matches!(e, Error::Postgres { .. }) {
        return true;
    }
    matches!(e, Error::Sqlite { .. } | Error::TooBig { .. })
}

/// How the engine settles each finished attempt (built again for the rare retry of a
/// failed round rather than cloned every round).
fn settles<S: Store>(shared: &Shared<S>, batch: &[(ClaimToken, Outcome)]) -> Vec<(ClaimToken, Settle)> {
    batch.iter().map(|(token, outcome)| (*token, settle_of(shared, token, outcome))).collect()
}

fn settle_of<S: Store>(shared: &Shared<S>, token: &ClaimToken, outcome: &Outcome) -> Settle {
    match outcome {
        Outcome::Complete => Settle::Complete,
        Outcome::Retry { after, error } => Settle::Retry {
            delay: after.unwrap_or_else(|| shared.retry_policy.next_delay(token.attempt)),
            error: error.clone(),
        },
        Outcome::Exhaust(error) => Settle::Exhaust(error.clone()),
        Outcome::Unknown(evidence) => Settle::Unknown(evidence.clone()),
        Outcome::Park { until, reason } => Settle::Park { timeout: *until, reason: reason.clone() },
    }
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
            .filter(|(_, lease)| {
                !lease.lost.load(Ordering::SeqCst) && !lease.completed.load(Ordering::SeqCst) && !lease.let_go()
            })
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
                        // Settled (or being or been completed by its handler, or handed back)
                        // while this round ran: nothing was lost. `completing` is read first:
                        // the handler sets `completed` before it clears `completing`, so one
                        // of the two is seen.
                        Err(_)
                            if lease.completing.load(Ordering::SeqCst)
                                || lease.completed.load(Ordering::SeqCst)
                                || lease.let_go()
                                || !shared.in_flight.lock().contains_key(token) => {}
                        // The row still carries this exact claim and is completed: the handler
                        // completed it with the attempt's own token (`Queue::complete_with`).
                        Err(Error::OwnershipLost { reason: LostReason::NotRunning(JobState::Completed), .. }) => {
                            lease.completed.store(true, Ordering::SeqCst);
                        }
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
