//! The worker pool: one dispatcher thread, round threads that run its requests, worker
//! threads that run the handler, and a heartbeat thread that renews every in-flight lease,
//! one short transaction each.
//!
//! The dispatcher settles and claims in one request: every attempt that finished since its
//! last round is settled, and as many jobs as there are free slots (workers plus prefetch)
//! are claimed, in the same group transaction. A finished attempt so costs one hand-off
//! (worker to dispatcher) and no transaction of its own, and a prefetched job is waiting
//! when a worker frees up. Up to the pool's rounds in flight run at once, one per round
//! thread, so that on a server store the next round's settles and claim need not wait for
//! the last round's commit.
//!
//! This file holds the running pool, the handle an application keeps: starting its threads,
//! its counters and in-flight jobs, the waits for an idle or drained queue, and the
//! shutdown. What runs on the threads has a file per concern, each depending on the state
//! they share (`shared.rs`) rather than on this handle: the dispatcher (`dispatch.rs`), the
//! workers (`execute.rs`), the settle path the dispatcher calls (`settle.rs`) and the
//! heartbeat (`heartbeat.rs`); the builder is `builder.rs`.

use super::attempt::Lease;
use super::counters::{Counters, PoolCounters};
use super::dispatch::{dispatch, run_rounds, DispatchChannels, RoundRequest, RoundReturned, Rounds};
use super::execute::{run_worker, Finished};
use super::heartbeat::heartbeat;
use super::prefetch::Prefetch;
use super::settle::SettleRules;
use super::shared::{PoolSettings, Shared};
use crate::error::Result;
use crate::job::{ClaimToken, Claimed, JobId, JobState};
use crate::queue::Queue;
use crate::store::DefaultStore;
use crate::store::{PageRequest, Store};
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long dropping a pool waits for in-flight attempts. Defaults to 10 seconds.
pub(crate) const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

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

/// A running pool of worker threads for one queue; see the crate docs for an example.
///
/// Dropping the pool shuts it down, waiting up to 10 seconds for in-flight attempts.
pub struct WorkerPool<S: Store = DefaultStore> {
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
    pub(super) fn start(settings: PoolSettings<S>) -> Result<WorkerPool<S>> {
        let (handler, renew_every) = (settings.handler.clone(), settings.renew_every);
        let shared = Arc::new(Shared {
            queue: settings.queue.clone(),
            queue_name: settings.queue_name.clone(),
            lease: settings.lease,
            rules: SettleRules { retry_policy: settings.retry_policy, max_snoozes: settings.max_snoozes },
            handler,
            counters: Counters::default(),
            in_flight: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            rounds: Mutex::new(0),
            round_done: parking_lot::Condvar::new(),
            poll_interval: settings.poll_interval,
            max_start_delay_ms: settings.max_start_delay.map(crate::clock::duration_ms),
            backoff_until: AtomicI64::new(0),
        });
        let workers = settings.workers;
        let prefetch = Prefetch::new(settings.prefetch, workers);
        // Claimed jobs never exceed the slots, so sending one never blocks the dispatcher.
        let (job_tx, job_rx) = bounded::<(Claimed, Arc<Lease>)>(workers + prefetch.most());
        let (stop_dispatch, stop_dispatch_rx) = bounded::<()>(0);
        let (stop_heartbeat, stop_heartbeat_rx) = bounded::<()>(0);
        let (exited_tx, exited) = unbounded::<()>();
        let (handed_back_tx, handed_back) = bounded::<Vec<JobId>>(1);
        let (finished_tx, finished_rx) = unbounded::<(ClaimToken, Finished)>();
        let wake = settings.queue.subscribe(&settings.queue_name);
        let rounds_in_flight = settings.rounds_in_flight;
        let mut threads = Vec::with_capacity(workers + rounds_in_flight + 2);

        for n in 0..workers {
            let shared = shared.clone();
            let jobs = job_rx.clone();
            let exited = exited_tx.clone();
            let finished = finished_tx.clone();
            threads.push(spawn(&format!("fenceq-worker-{n}"), move || {
                run_worker(&shared, &jobs, &finished);
                let _ = exited.send(());
            })?);
        }
        drop(job_rx);
        drop(finished_tx);
        let rounds = if rounds_in_flight == 1 {
            Rounds::Inline
        } else {
            // The channel holds as many rounds as may be in flight, one per round thread.
            let (send, rounds_rx) = bounded::<RoundRequest>(rounds_in_flight);
            let (returned_tx, returned) = unbounded::<RoundReturned>();
            // Each ends once the dispatcher has ended (dropping the round channel); the
            // dispatcher ends only once no round is in flight.
            for n in 0..rounds_in_flight {
                let shared = shared.clone();
                let worker = settings.worker_id.clone();
                let (rounds, returned) = (rounds_rx.clone(), returned_tx.clone());
                threads.push(spawn(&format!("fenceq-round-{n}"), move || {
                    run_rounds(&shared, &worker, &rounds, &returned);
                })?);
            }
            Rounds::Threads { send, returned }
        };
        {
            let shared = shared.clone();
            let exited = exited_tx.clone();
            let worker = settings.worker_id.clone();
            let poll = settings.poll_interval;
            let channels = DispatchChannels {
                jobs: job_tx,
                finished: finished_rx,
                wake,
                stop: stop_dispatch_rx,
                handed_back: handed_back_tx,
                rounds,
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
    /// own handlers included, and neither do the pending jobs of a paused queue or of one
    /// backing off ([`Queue::queue_backoff`](crate::Queue::queue_backoff)); jobs another
    /// process adds do, once they are due. Checks after
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
                Ok(S::list(tx, Some(queue), Some(JobState::Pending), PageRequest { after: 0, limit: 1 })?.is_empty())
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
        // Closing the channel wakes the dispatcher, which (once its rounds in flight have
        // returned) hands the held jobs back, drops the job sender (so workers end once the
        // attempts they run are done) and ends after settling the last of them.
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

fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    Ok(std::thread::Builder::new().name(name.to_string()).spawn(body)?)
}
