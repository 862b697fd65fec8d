//! Maintenance: three services, each runnable once without a thread ([`Reaper`],
//! [`Pruner`], [`Checkpointer`], one file each), and the thread that only schedules them: it
//! reaps stale leases and expired waits every minute, prunes old terminal rows every hour,
//! checkpoints the WAL every few seconds, and stops promptly when told (it never sleeps
//! through a stop).

mod backup;
mod checkpoint;
mod reaper;
mod retention;

pub use backup::{BackupOptions, DEFAULT_BACKUP_PAGES_PER_STEP, DEFAULT_BACKUP_TIME_LIMIT};
pub use checkpoint::{Checkpointer, DEFAULT_CHECKPOINT_PATIENCE};
pub use reaper::Reaper;
pub use retention::Pruner;

use crate::config::Retention;
use crate::error::Result;
use crate::queue::Queue;
use crate::report::{CheckpointReport, PruneReport, ReapReport};
use crate::store::sqlite::SqliteStore;
use crate::store::Store;
use crate::validate::check_interval;
use crossbeam_channel::{bounded, select, tick, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the reaper runs. Defaults to 1 minute.
pub const DEFAULT_REAP_EVERY: Duration = Duration::from_secs(60);
/// How often the WAL is checkpointed and truncated. Defaults to 5 seconds.
pub const DEFAULT_CHECKPOINT_EVERY: Duration = Duration::from_secs(5);
/// How often retention runs. Defaults to 1 hour.
pub const DEFAULT_PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Settings of the maintenance thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaintenanceConfig {
    /// Reap interval. Defaults to [`DEFAULT_REAP_EVERY`].
    pub reap_every: Duration,
    /// Prune interval. Defaults to [`DEFAULT_PRUNE_EVERY`].
    pub prune_every: Duration,
    /// What pruning deletes. Defaults to 7 days' retention.
    pub retention: Retention,
    /// WAL checkpoint interval (see [`Queue::checkpoint`]). Defaults to
    /// [`DEFAULT_CHECKPOINT_EVERY`].
    pub checkpoint_every: Duration,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            reap_every: DEFAULT_REAP_EVERY,
            prune_every: DEFAULT_PRUNE_EVERY,
            retention: Retention::default(),
            checkpoint_every: DEFAULT_CHECKPOINT_EVERY,
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
}

/// A running maintenance thread; stops on drop or [`Maintenance::stop`].
#[derive(Debug)]
pub struct Maintenance<S: Store = SqliteStore> {
    services: Services<S>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// The three services of one queue.
#[derive(Debug)]
struct Services<S: Store> {
    reaper: Reaper<S>,
    pruner: Pruner<S>,
    checkpointer: Checkpointer<S>,
}

impl<S: Store> Services<S> {
    fn new(queue: &Queue<S>, retention: Retention) -> Result<Services<S>> {
        Ok(Services {
            reaper: Reaper::new(queue.clone()),
            pruner: Pruner::new(queue.clone(), retention)?,
            checkpointer: Checkpointer::new(queue.clone()),
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
    /// `InvalidInput` for a zero interval or a retention batch outside 1..=100,000 (which
    /// every prune would refuse).
    pub fn start_maintenance(&self, config: MaintenanceConfig) -> Result<Maintenance<S>> {
        check_interval(config.reap_every)?;
        check_interval(config.prune_every)?;
        check_interval(config.checkpoint_every)?;
        let (stop, stopped) = bounded::<()>(0);
        let services = Services::new(self, config.retention)?;
        let scheduled = Services::new(self, config.retention)?;
        let thread = std::thread::Builder::new().name("fenceq-maintenance".into()).spawn(move || {
            let reap = tick(config.reap_every);
            let prune = tick(config.prune_every);
            let checkpoint = tick(config.checkpoint_every);
            loop {
                select! {
                    recv(stopped) -> _ => return,
                    recv(reap) -> _ => log_reap(scheduled.reaper.run_once()),
                    recv(prune) -> _ => log_prune(scheduled.pruner.run_once()),
                    recv(checkpoint) -> _ => log_checkpoint(scheduled.checkpointer.run_once()),
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
        let rows = queue.store().write(&mut batch)?;
        changed += rows;
        transactions += 1;
        if rows < u64::from(size) {
            return Ok((changed, transactions));
        }
    }
}

impl<S: Store> Maintenance<S> {
    /// One reap, one prune and one checkpoint now, on the calling thread (for tests and the
    /// CLI).
    ///
    /// # Errors
    ///
    /// The first error of the three services ([`Queue::reap`], [`Queue::prune`],
    /// [`Queue::checkpoint`]); the passes before it stay done.
    pub fn run_once(&self) -> Result<MaintenanceReport> {
        let reaped = self.services.reaper.run_once()?;
        let pruned = self.services.pruner.run_once()?;
        let checkpoint = self.services.checkpointer.run_once()?;
        Ok(MaintenanceReport { reaped, pruned, checkpoint })
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

fn log_prune(result: Result<PruneReport>) {
    match result {
        Ok(r) => tracing::info!(settled = r.settled, acknowledged = r.acknowledged, batches = r.batches, "pruned"),
        Err(e) => tracing::error!(error = %e, "prune failed"),
    }
}
