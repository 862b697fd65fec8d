//! The pool's builder ([`WorkerPool::builder`], [`WorkerPoolBuilder`]): its settings, their
//! defaults and limits, and the checks `start` makes so that a pool that starts can claim.
//!
//! Apart from the running pool: what a pool may be configured with, and what starting one
//! refuses, read in one place; the pool itself only takes the checked settings.

use super::attempt::{Attempt, Outcome};
use super::pool::WorkerPool;
use super::shared::{Handler, PoolSettings};
use crate::error::{Error, Result};
use crate::job::{RetryPolicy, DEFAULT_MAX_SNOOZES};
use crate::queue::Queue;
use crate::store::DefaultStore;
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;

/// Worker threads per pool. Defaults to 4.
pub(crate) const DEFAULT_WORKERS: usize = 4;
/// Lease per claim. Defaults to 30 seconds.
pub(crate) const DEFAULT_POOL_LEASE: Duration = Duration::from_secs(30);
/// Idle poll interval. Defaults to 1 second (an enqueue through the same `Queue` wakes the
/// pool at once; polling finds jobs enqueued by other processes and delayed jobs).
pub(crate) const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Most jobs a pool may prefetch; see [`WorkerPoolBuilder::prefetch`].
pub const MAX_PREFETCH: usize = 4096;
/// Most rounds a pool may have in flight; see [`WorkerPoolBuilder::rounds_in_flight`].
pub const MAX_ROUNDS_IN_FLIGHT: usize = 8;

/// Builder for a [`WorkerPool`]; see [`WorkerPool::builder`].
///
/// ## Defaults
///
/// - 4 workers
/// - a lease of 30 seconds, renewed every third of it
/// - an idle poll every second (an enqueue through the same `Queue` wakes the pool at once)
/// - prefetch: twice the workers, adaptive (see [`WorkerPoolBuilder::prefetch`])
/// - rounds in flight: the store's (1 on SQLite, 2 on PostgreSQL; see
///   [`WorkerPoolBuilder::rounds_in_flight`])
/// - worker id `"{queue}-{pid}"`
/// - [`RetryPolicy::default`]
/// - at most 100 snoozes per job ([`DEFAULT_MAX_SNOOZES`]; see [`WorkerPoolBuilder::max_snoozes`])
/// - dropping the pool waits up to 10 seconds for in-flight attempts
pub struct WorkerPoolBuilder<S: Store = DefaultStore> {
    pub(super) queue: Queue<S>,
    pub(super) queue_name: String,
    pub(super) workers: usize,
    pub(super) lease: Duration,
    renew_every: Option<Duration>,
    pub(super) poll_interval: Duration,
    pub(super) prefetch: Option<usize>,
    pub(super) rounds_in_flight: usize,
    pub(super) worker_id: String,
    pub(super) retry_policy: RetryPolicy,
    pub(super) max_snoozes: u32,
    pub(super) max_start_delay: Option<Duration>,
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
    ///
    /// [`PoolCounters::dropped_lost`]: super::PoolCounters::dropped_lost
    pub fn prefetch(mut self, jobs: usize) -> Self {
        self.prefetch = Some(jobs);
        self
    }

    /// How many of the dispatcher's rounds may be in flight at once (1..=8). A round settles
    /// the attempts that finished since the last one and claims jobs for the free slots, in
    /// one request of one transaction. While the queue has a backlog (the last round got
    /// every job it asked for), with more than one in flight the attempts that finish while
    /// a round waits for the store are settled, and their slots filled, by the next round at
    /// once, each round on a thread and a connection of its own; otherwise the dispatcher
    /// runs one round at a time itself, which hands a new job to a worker soonest. Rounds in
    /// flight never claim more than the free slots between them, and a shutdown waits for
    /// them before it hands the held jobs back.
    ///
    /// Defaults to the store's: 2 on PostgreSQL, where the server works on two rounds side
    /// by side (with one, a busy pool's rate is what one server backend does per job, while
    /// the pool's own thread waits); 1 on SQLite, whose one writer runs every request in
    /// turn. Each round in flight holds one of the queue's connections while it runs.
    pub fn rounds_in_flight(mut self, rounds: usize) -> Self {
        self.rounds_in_flight = rounds;
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

    /// How many times a job may be put back without spending an attempt
    /// ([`Outcome::Snooze`], [`Outcome::RetryAfter`]): a handler's snooze of a job snoozed
    /// that many times already exhausts it instead (a durable exhaustion, to be
    /// acknowledged), with an error that says it was snoozed that many times, the cap, so
    /// that a handler cannot snooze a job forever unnoticed. 0 exhausts at the first snooze.
    /// Counted per job ([`Job::snoozes`](crate::Job::snoozes)), across pools and processes;
    /// a replay starts it again. Defaults to 100 ([`DEFAULT_MAX_SNOOZES`]).
    pub fn max_snoozes(mut self, max_snoozes: u32) -> Self {
        self.max_snoozes = max_snoozes;
        self
    }

    /// The longest a claimed job may wait between its claim's instant
    /// ([`Claimed::claimed_at`](crate::Claimed::claimed_at), what the queue's rates count)
    /// and its handler's start; a worker that takes one up later hands it back unstarted
    /// instead (pending again at once, no attempt spent, counted in
    /// [`PoolCounters::released_late`](crate::PoolCounters::released_late)), and the next
    /// claim counts a start of its own. With a rate lengthened by this bound (a provider's
    /// 30 a second set as 30 per 1,050 ms with a bound of 50 ms), the handlers' own starts
    /// keep the provider's rate, measured where the provider looks, whatever a loaded
    /// machine does to the threads in between (see the guide, "Limits where the provider
    /// looks"). None by default: every claimed job starts, however late.
    ///
    /// # Errors
    ///
    /// [`WorkerPoolBuilder::start`] refuses a bound of zero or longer than the lease
    /// (`InvalidInput`).
    pub fn max_start_delay(mut self, bound: Duration) -> Self {
        self.max_start_delay = Some(bound);
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
    /// a prefetch over 4,096; rounds in flight outside 1..=8; a zero poll interval.
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
        if self.rounds_in_flight == 0 || self.rounds_in_flight > MAX_ROUNDS_IN_FLIGHT {
            return Err(Error::invalid(
                "rounds_in_flight",
                format!("{} is not in 1..={MAX_ROUNDS_IN_FLIGHT}", self.rounds_in_flight),
            ));
        }
        if self.poll_interval.is_zero() {
            return Err(Error::invalid("poll_interval", "must not be zero"));
        }
        if self.max_start_delay.is_some_and(|bound| bound.is_zero() || bound > self.lease) {
            return Err(Error::invalid("max_start_delay", "must not be zero nor longer than the lease"));
        }
        WorkerPool::start(PoolSettings {
            queue: self.queue,
            queue_name: self.queue_name,
            workers: self.workers,
            lease: self.lease,
            renew_every,
            poll_interval: self.poll_interval,
            prefetch: self.prefetch,
            rounds_in_flight: self.rounds_in_flight,
            worker_id: self.worker_id,
            retry_policy: self.retry_policy,
            max_snoozes: self.max_snoozes,
            max_start_delay: self.max_start_delay,
            handler,
        })
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
            rounds_in_flight: S::POOL_ROUNDS_IN_FLIGHT,
            retry_policy: RetryPolicy::default(),
            max_snoozes: DEFAULT_MAX_SNOOZES,
            max_start_delay: None,
            handler: None,
        }
    }
}

/// `{queue}-{pid}`, the queue name cut at a char boundary so that the id fits in
/// `MAX_NAME_LEN` bytes.
fn default_worker_id(queue: &str, pid: u32) -> String {
    let suffix = format!("-{pid}");
    let mut end = queue.len().min(crate::validate::MAX_NAME_LEN.saturating_sub(suffix.len()));
    while !queue.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{suffix}", &queue[..end])
}
