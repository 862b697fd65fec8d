//! Retention: completed and cancelled rows, and acknowledged exhaustions, are deleted once
//! older than the retention horizon, in batches.

use super::in_batches;
use crate::clock::duration_ms;
use crate::config::Retention;
use crate::error::Result;
use crate::queue::Queue;
use crate::report::PruneReport;
use crate::store::DefaultStore;
use crate::store::{Batch, Store};
use crate::validate::check_expected;

/// Retention as a service: the maintenance thread runs it every
/// [`prune_every`](crate::MaintenanceConfig::prune_every); a test or a command runs it once.
#[derive(Debug)]
pub struct Pruner<S: Store = DefaultStore> {
    queue: Queue<S>,
    retention: Retention,
}

impl<S: Store> Pruner<S> {
    /// Prunes `queue` by `retention`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `retention.batch_size` is not in 1..=100,000.
    pub fn new(queue: Queue<S>, retention: Retention) -> Result<Self> {
        retention.check()?;
        Ok(Pruner { queue, retention })
    }

    /// One pass now, on the calling thread: [`Queue::prune`].
    ///
    /// # Errors
    ///
    /// Those of [`Queue::prune`].
    pub fn run_once(&self) -> Result<PruneReport> {
        self.queue.prune(&self.retention)
    }
}

impl<S: Store> Queue<S> {
    /// Deletes completed and cancelled rows settled, and acknowledged exhaustions
    /// acknowledged, longer than `retention.older_than` ago, in batches. Never deletes
    /// pending, running, waiting, unknown or unacknowledged exhausted rows. A pruned key may
    /// be enqueued again as a new job (with a new, never reused id).
    ///
    /// # Errors
    ///
    /// `InvalidInput` (nothing deleted) when `retention.batch_size` is not in 1..=100,000.
    /// Storage errors: `Busy`, `StorageFull`, `ReadOnly`; `NestedWrite` from inside a
    /// closure holding the queue's transaction (or an in-memory queue's `with_connection`).
    /// Batches committed before a storage error stay deleted. `SettledCountsShort` (SQLite)
    /// when a batch meets rows the counts `stats` reads never had: that batch deletes
    /// nothing; repair with [`Queue::recount_settled`].
    pub fn prune(&self, retention: &Retention) -> Result<PruneReport> {
        retention.check()?;
        let horizon = self.store_now()?.saturating_sub(duration_ms(retention.older_than));
        let size = retention.batch_size;
        let (settled, _) = in_batches(self, size, |tx| S::prune_settled(tx, Batch { until: horizon, limit: size }))?;
        let (acknowledged, _) =
            in_batches(self, size, |tx| S::prune_acknowledged(tx, Batch { until: horizon, limit: size }))?;
        // Transactions that deleted something (the last, empty look of each pass is not one).
        let batches = settled.div_ceil(u64::from(size)) + acknowledged.div_ceil(u64::from(size));
        Ok(PruneReport { settled, acknowledged, batches })
    }

    /// [`Queue::prune`] as one transaction that must delete exactly `expected` rows, or
    /// nothing (see [`Queue::reap_expecting`]); `retention.batch_size` is not used.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `retention.batch_size` is not in 1..=100,000 (checked although
    /// it is not used here), `CountMismatch` (nothing deleted). Storage errors: `Busy`,
    /// `StorageFull`, `ReadOnly`; `NestedWrite` from inside a closure holding the queue's
    /// transaction (or an in-memory queue's `with_connection`).
    pub fn prune_expecting(&self, retention: &Retention, expected: u64) -> Result<PruneReport> {
        retention.check()?;
        let horizon = self.store_now()?.saturating_sub(duration_ms(retention.older_than));
        crate::queue::retry::retry_conflicts(|| {
            self.store().write(|tx| {
                let settled = S::prune_settled(tx, Batch { until: horizon, limit: u32::MAX })?;
                let acknowledged = S::prune_acknowledged(tx, Batch { until: horizon, limit: u32::MAX })?;
                let report = PruneReport { settled, acknowledged, batches: u64::from(settled + acknowledged > 0) };
                check_expected("prune", Some(expected), report.deleted())?;
                Ok(report)
            })
        })
    }

    /// What [`Queue::prune`] would delete at the clock's now, without deleting anything.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a retention `prune` would refuse (a batch size outside
    /// 1..=100,000). Read errors:
    /// `Pool` (no pooled connection came free in time), `Busy`; on an in-memory queue,
    /// `NestedWrite` from inside a closure holding its transaction or connection.
    pub fn prune_preview(&self, retention: &Retention) -> Result<PruneReport> {
        retention.check()?;
        let horizon = self.store_now()?.saturating_sub(duration_ms(retention.older_than));
        let (settled, acknowledged) = self.store().read(|tx| S::prune_preview(tx, horizon))?;
        Ok(PruneReport { settled, acknowledged, batches: 0 })
    }
}
