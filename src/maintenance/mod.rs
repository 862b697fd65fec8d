//! Maintenance: three services, each runnable once without a thread ([`Reaper`],
//! [`Pruner`], [`Checkpointer`], one file each; with the `schedule` feature a fourth, the
//! `Scheduler` of periodic jobs), and the thread that only schedules them: it reaps stale
//! leases and expired waits every minute, prunes old terminal rows every hour, checkpoints
//! the WAL every few seconds, enqueues the periodic jobs' due ticks every few seconds, and
//! stops promptly when told (it never sleeps through a stop).

mod backup;
mod checkpoint;
mod reaper;
mod retention;
#[cfg(feature = "schedule")]
mod scheduler;

pub use backup::BackupOptions;
pub(crate) use backup::{DEFAULT_BACKUP_PAGES_PER_STEP, DEFAULT_BACKUP_TIME_LIMIT};
pub use checkpoint::Checkpointer;
pub(crate) use checkpoint::DEFAULT_CHECKPOINT_PATIENCE;
pub use reaper::Reaper;
pub use retention::Pruner;
#[cfg(feature = "schedule")]
pub use scheduler::Scheduler;

use crate::config::Retention;
use crate::error::Result;
use crate::queue::Queue;
use crate::report::{CheckpointReport, PruneReport, ReapReport, ScheduleReport};
use crate::store::DefaultStore;
use crate::store::Store;
use crate::validate::check_interval;
use crossbeam_channel::{bounded, select, tick, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the reaper runs. Defaults to 1 minute.
pub(crate) const DEFAULT_REAP_EVERY: Duration = Duration::from_secs(60);
/// How often the WAL is checkpointed and truncated. Defaults to 5 seconds.
pub(crate) const DEFAULT_CHECKPOINT_EVERY: Duration = Duration::from_secs(5);
/// How often retention runs. Defaults to 1 hour.
pub(crate) const DEFAULT_PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// How often the periodic jobs' due ticks are enqueued (feature `schedule`). Defaults to 5
/// seconds.
pub(crate) const DEFAULT_SCHEDULE_EVERY: Duration = Duration::from_secs(5);

/// Settings of the maintenance thread.
///
/// ## Defaults
///
/// - reap every 1 minute
/// - prune every hour, with [`Retention`]'s defaults (7 days, batches of 1,000 rows)
/// - checkpoint the WAL every 5 seconds (SQLite)
/// - enqueue periodic jobs' due ticks every 5 seconds (feature `schedule`)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaintenanceConfig {
    /// Reap interval. Defaults to 1 minute.
    pub reap_every: Duration,
    /// Prune interval. Defaults to 1 hour.
    pub prune_every: Duration,
    /// What pruning deletes. Defaults to 7 days' retention.
    pub retention: Retention,
    /// WAL checkpoint interval (see [`Queue::checkpoint`]). Defaults to 5 seconds.
    pub checkpoint_every: Duration,
    /// How often the periodic jobs registered on the queue (feature `schedule`) have their
    /// latest due tick enqueued: a tick's job is enqueued at most this long after its time.
    /// Unused without the feature, but still checked (the field is there either way, so
    /// that turning the feature on never breaks a struct literal). Defaults to 5 seconds.
    pub schedule_every: Duration,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            reap_every: DEFAULT_REAP_EVERY,
            prune_every: DEFAULT_PRUNE_EVERY,
            retention: Retention::default(),
            checkpoint_every: DEFAULT_CHECKPOINT_EVERY,
            schedule_every: DEFAULT_SCHEDULE_EVERY,
        }
    }
}

/// What one maintenance pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    /// The reap.
    pub reaped: ReapReport,
    /// The prune.
    pub pruned: PruneReport,
    /// The checkpoint.
    pub checkpoint: CheckpointReport,
    /// The periodic jobs' ticks (feature `schedule`; zero without it).
    pub scheduled: ScheduleReport,
}

/// A running maintenance thread; stops on drop or [`Maintenance::stop`].
#[derive(Debug)]
pub struct Maintenance<S: Store = DefaultStore> {
    services: Services<S>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// The services of one queue.
#[derive(Debug)]
struct Services<S: Store> {
    reaper: Reaper<S>,
    pruner: Pruner<S>,
    checkpointer: Checkpointer<S>,
    #[cfg(feature = "schedule")]
    scheduler: Scheduler<S>,
}

impl<S: Store> Services<S> {
    /// The scheduler's pass; nothing to do without the `schedule` feature.
    fn run_schedules(&self) -> Result<ScheduleReport> {
        #[cfg(feature = "schedule")]
        return self.scheduler.run_once();
        #[cfg(not(feature = "schedule"))]
        Ok(ScheduleReport::default())
    }

    fn new(queue: &Queue<S>, retention: Retention) -> Result<Services<S>> {
        Ok(Services {
            reaper: Reaper::new(queue.clone()),
            pruner: Pruner::new(queue.clone(), retention)?,
            checkpointer: Checkpointer::new(queue.clone()),
            #[cfg(feature = "schedule")]
            scheduler: Scheduler::new(queue.clone()),
        })
    }
}

impl<S: Store> Queue<S> {
    /// Starts the maintenance thread.
    ///
    /// ```
    /// # let queue = fenceq::Queue::open_in_memory()?;
    /// let maintenance = queue.start_maintenance(fenceq::MaintenanceConfig::default())?;
    /// maintenance.stop(); // or drop it
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero interval (`schedule_every` included, with or without the
    /// `schedule` feature) or a retention batch outside 1..=100,000 (which every prune would
    /// refuse).
    pub fn start_maintenance(&self, config: MaintenanceConfig) -> Result<Maintenance<S>> {
        check_interval(config.reap_every)?;
        check_interval(config.prune_every)?;
        check_interval(config.checkpoint_every)?;
        check_interval(config.schedule_every)?;
        let (stop, stopped) = bounded::<()>(0);
        let services = Services::new(self, config.retention)?;
        let scheduled = Services::new(self, config.retention)?;
        let thread = std::thread::Builder::new().name("fenceq-maintenance".into()).spawn(move || {
            let reap = tick(config.reap_every);
            let prune = tick(config.prune_every);
            let checkpoint = tick(config.checkpoint_every);
            // Without the feature, a channel that never delivers.
            #[cfg(feature = "schedule")]
            let schedule = tick(config.schedule_every);
            #[cfg(not(feature = "schedule"))]
            let schedule = crossbeam_channel::never::<std::time::Instant>();
            loop {
                select! {
                    recv(stopped) -> _ => return,
                    recv(reap) -> _ => log_reap(scheduled.reaper.run_once()),
                    recv(prune) -> _ => log_prune(scheduled.pruner.run_once()),
                    recv(checkpoint) -> _ => log_checkpoint(scheduled.checkpointer.run_once()),
                    recv(schedule) -> _ => log_schedule(scheduled.run_schedules()),
                }
            }
        })?;
        Ok(Maintenance { services, stop: Some(stop), thread: Some(thread) })
    }
}

/// Runs the reap, prune or checkpoint pass `batch` in a transaction of its own, again and
/// again until one changes fewer than `size` rows; returns the rows changed and the
/// transactions run (so that no pass holds the write lock long).
fn in_batches<S: Store>(
    queue: &Queue<S>,
    size: u32,
    mut batch: impl FnMut(&S::Tx) -> Result<u64>,
) -> Result<(u64, u64)> {
    let (mut changed, mut transactions) = (0, 0);
    loop {
        let rows = crate::queue::retry::retry_conflicts(|| queue.store().write(&mut batch))?;
        changed += rows;
        transactions += 1;
        if rows < u64::from(size) {
            return Ok((changed, transactions));
        }
    }
}

impl<S: Store> Maintenance<S> {
    /// One reap, one prune, one checkpoint and (feature `schedule`) one scheduler pass now,
    /// on the calling thread (for tests and the CLI).
    ///
    /// # Errors
    ///
    /// The first error of the services ([`Queue::reap`], [`Queue::prune`],
    /// [`Queue::checkpoint`], `Queue::enqueue_schedules`); the passes before it stay done.
    pub fn run_once(&self) -> Result<MaintenanceReport> {
        let reaped = self.services.reaper.run_once()?;
        let pruned = self.services.pruner.run_once()?;
        let checkpoint = self.services.checkpointer.run_once()?;
        let scheduled = self.services.run_schedules()?;
        Ok(MaintenanceReport { reaped, pruned, checkpoint, scheduled })
    }

    /// Stops the thread and waits for it (at most the length of one pass in progress).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl<S: Store> Drop for Maintenance<S> {
    fn drop(&mut self) {
        self.halt();
    }
}

fn log_reap(result: Result<ReapReport>) {
    match result {
        Ok(r) if r.total() > 0 => tracing::info!(
            requeued = r.requeued,
            exhausted = r.exhausted,
            waits_expired = r.waits_expired,
            "reaped stale leases"
        ),
        Ok(_) => tracing::debug!("reap: nothing stale"),
        Err(e) => tracing::error!(error = %e, "reap failed"),
    }
}

fn log_checkpoint(result: Result<CheckpointReport>) {
    match result {
        Ok(r) if r.completed => {
            tracing::debug!(wal_pages = r.wal_pages, checkpointed = r.checkpointed_pages, "checkpoint")
        }
        Ok(r) => tracing::info!(wal_pages = r.wal_pages, "checkpoint could not finish (readers); retrying next round"),
        Err(e) => tracing::error!(error = %e, "checkpoint failed"),
    }
}

fn log_schedule(result: Result<ScheduleReport>) {
    match result {
        Ok(r) if r.enqueued + r.duplicates > 0 => {
            tracing::info!(enqueued = r.enqueued, duplicates = r.duplicates, "enqueued periodic jobs")
        }
        Ok(_) => tracing::debug!("schedules: nothing due"),
        Err(e) => tracing::error!(error = %e, "enqueueing periodic jobs failed"),
    }
}

fn log_prune(result: Result<PruneReport>) {
    match result {
        Ok(r) => tracing::info!(settled = r.settled, acknowledged = r.acknowledged, batches = r.batches, "pruned"),
        Err(e) => tracing::error!(error = %e, "prune failed"),
    }
}
