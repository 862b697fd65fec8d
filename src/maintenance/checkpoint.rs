//! Checkpoints: the store's own file upkeep. On SQLite, the WAL is copied back into the
//! database and truncated, so that readers whose transactions overlap without a break cannot
//! make it grow without bound; a store without such a file has nothing to do.

use crate::error::Result;
use crate::queue::Queue;
use crate::report::CheckpointReport;
use crate::store::DefaultStore;
use crate::store::Store;
use crate::validate::check_patience;
use std::time::Duration;

/// How long a checkpoint waits for readers to leave the old WAL. Defaults to 500 ms: longer
/// than a typical read transaction, short enough that writers never stall long.
pub(crate) const DEFAULT_CHECKPOINT_PATIENCE: Duration = Duration::from_millis(500);

/// Checkpoints as a service: the maintenance thread runs it every
/// [`checkpoint_every`](crate::MaintenanceConfig::checkpoint_every); a test or a command
/// runs it once.
///
/// ## Defaults
///
/// - patience: 500 ms, how long a checkpoint waits for readers to leave the old WAL
#[derive(Debug)]
pub struct Checkpointer<S: Store = DefaultStore> {
    queue: Queue<S>,
    patience: Duration,
}

impl<S: Store> Checkpointer<S> {
    /// Checkpoints `queue`, waiting at most [`DEFAULT_CHECKPOINT_PATIENCE`](crate::DEFAULT_CHECKPOINT_PATIENCE) for readers.
    pub fn new(queue: Queue<S>) -> Self {
        Checkpointer { queue, patience: DEFAULT_CHECKPOINT_PATIENCE }
    }

    /// One checkpoint now, on the calling thread. A store with no file upkeep reports a
    /// completed checkpoint of no pages.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::checkpoint`].
    pub fn run_once(&self) -> Result<CheckpointReport> {
        let report = self.queue.store().checkpoint(self.patience)?;
        Ok(report.unwrap_or(CheckpointReport { completed: true, wal_pages: 0, checkpointed_pages: 0 }))
    }
}

/// Checkpoints of the SQLite store's WAL.
impl Queue {
    /// Copies the WAL back into the database and truncates it, waiting at most
    /// [`DEFAULT_CHECKPOINT_PATIENCE`](crate::DEFAULT_CHECKPOINT_PATIENCE) for readers to move off the old WAL (this process's
    /// writers queue meanwhile). Readers whose transactions overlap without a break starve
    /// SQLite's automatic checkpoints and let the WAL grow without bound; the maintenance
    /// thread runs this every few seconds.
    ///
    /// # Errors
    ///
    /// Readers that outlast the patience are not an error: the report says the checkpoint
    /// did not complete. `NestedWrite` from inside a closure holding the queue's
    /// transaction (or an in-memory queue's `with_connection`); `ReadOnly` on a queue
    /// opened read-only; any other SQLite error of the checkpoint (`Sqlite`, `Corrupt`).
    pub fn checkpoint(&self) -> Result<CheckpointReport> {
        self.checkpoint_with(DEFAULT_CHECKPOINT_PATIENCE)
    }

    /// [`Queue::checkpoint`] waiting at most `patience`: longer than the longest read
    /// transaction, or the checkpoint cannot finish while readers overlap back to back.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `patience` is longer than a minute. Readers that outlast
    /// `patience` are not an error: the report says the checkpoint did not complete.
    /// `NestedWrite` from inside a closure holding the queue's transaction (or an in-memory
    /// queue's `with_connection`); `ReadOnly` on a queue opened read-only; any other SQLite
    /// error of the checkpoint (`Sqlite`, `Corrupt`).
    pub fn checkpoint_with(&self, patience: Duration) -> Result<CheckpointReport> {
        check_patience(patience)?;
        self.store().checkpoint_wal(patience)
    }
}
