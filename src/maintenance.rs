//! The maintenance thread: reaps stale leases and expired waits every minute, prunes old
//! terminal rows every hour, checkpoints the WAL every few seconds, and stops promptly when
//! told (it never sleeps through a stop).

use crate::config::Retention;
use crate::error::Result;
use crate::queue::Queue;
use crate::report::{PruneReport, ReapReport};
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
    pub checkpoint: crate::report::CheckpointReport,
}

/// A running maintenance thread; stops on drop or [`Maintenance::stop`].
#[derive(Debug)]
pub struct Maintenance {
    queue: Queue,
    config: MaintenanceConfig,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Queue {
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
    pub fn start_maintenance(&self, config: MaintenanceConfig) -> Result<Maintenance> {
        if config.reap_every.is_zero() || config.prune_every.is_zero() || config.checkpoint_every.is_zero() {
            return Err(crate::Error::invalid("maintenance interval", "must not be zero"));
        }
        config.retention.check()?;
        let (stop, stopped) = bounded::<()>(0);
        let queue = self.clone();
        let thread = std::thread::Builder::new().name("fenceq-maintenance".into()).spawn(move || {
            let reap = tick(config.reap_every);
            let prune = tick(config.prune_every);
            let checkpoint = tick(config.checkpoint_every);
            loop {
                select! {
                    recv(stopped) -> _ => return,
                    recv(reap) -> _ => log_reap(queue.reap()),
                    recv(prune) -> _ => log_prune(queue.prune(&config.retention)),
                    recv(checkpoint) -> _ => log_checkpoint(queue.checkpoint()),
                }
            }
        })?;
        Ok(Maintenance { queue: self.clone(), config, stop: Some(stop), thread: Some(thread) })
    }
}

impl Maintenance {
    /// One reap, one prune and one checkpoint now, on the calling thread (for tests and the
    /// CLI).
    pub fn run_once(&self) -> Result<MaintenanceReport> {
        let reaped = self.queue.reap()?;
        let pruned = self.queue.prune(&self.config.retention)?;
        let checkpoint = self.queue.checkpoint()?;
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

impl Drop for Maintenance {
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

fn log_checkpoint(result: Result<crate::report::CheckpointReport>) {
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
