//! The reaper: expired leases go back to pending (or are exhausted when no attempts are
//! left), and parked jobs past their deadline are exhausted.

use super::in_batches;
use crate::error::Result;
use crate::queue::Queue;
use crate::report::ReapReport;
use crate::store::DefaultStore;
use crate::store::{Batch, Store};
use crate::validate::check_expected;

/// Rows changed per reaper transaction.
const REAP_BATCH: u32 = 1_000;

/// The reaper as a service: the maintenance thread runs it every
/// [`reap_every`](crate::MaintenanceConfig::reap_every); a test or a command runs it once.
#[derive(Debug)]
pub struct Reaper<S: Store = DefaultStore> {
    queue: Queue<S>,
}

impl<S: Store> Reaper<S> {
    /// The reaper of `queue`.
    pub fn new(queue: Queue<S>) -> Self {
        Reaper { queue }
    }

    /// One pass now, on the calling thread: [`Queue::reap`].
    ///
    /// # Errors
    ///
    /// Those of [`Queue::reap`].
    pub fn run_once(&self) -> Result<ReapReport> {
        self.queue.reap()
    }
}

impl<S: Store> Queue<S> {
    /// Expired leases go back to pending (or are exhausted when no attempts are left) and
    /// parked jobs past their deadline are exhausted, in batches of 1,000 per transaction.
    /// Claims reclaim expired leases by themselves; the reaper keeps `running` honest and
    /// turns abandoned last attempts into exhaustions. It reaps every queue, a paused one too
    /// (whose claims reclaim nothing), so that no attempt of a paused queue stays stuck.
    ///
    /// # Errors
    ///
    /// No input or job state makes it fail, only storage errors: `Busy`, `StorageFull`,
    /// `ReadOnly`, and `NestedWrite` from inside a closure holding the queue's transaction
    /// (or an in-memory queue's `with_connection`). Batches committed before the error stay
    /// committed.
    pub fn reap(&self) -> Result<ReapReport> {
        let mut report = ReapReport::default();
        in_batches(self, REAP_BATCH, |tx| {
            let (requeued, exhausted) =
                S::reap_expired(tx, Batch { until: self.shared.now_in(tx)?, limit: REAP_BATCH })?;
            report.requeued += requeued;
            report.exhausted += exhausted;
            Ok(requeued + exhausted)
        })?;
        report.waits_expired = in_batches(self, REAP_BATCH, |tx| {
            S::reap_waiting(tx, Batch { until: self.shared.now_in(tx)?, limit: REAP_BATCH })
        })?
        .0;
        Ok(report)
    }

    /// [`Queue::reap`] as one transaction that must change exactly `expected` jobs: the
    /// count and the change are the same statements at the same clock reading, and if the
    /// count differs nothing changes (a conditional, fail-closed operator change).
    /// Holds the write lock for the whole pass, unlike `reap`'s batches.
    ///
    /// # Errors
    ///
    /// `CountMismatch` (nothing changed) when the pass would change another number of jobs.
    /// Storage errors: `Busy`, `StorageFull`, `ReadOnly`; `NestedWrite` from inside a
    /// closure holding the queue's transaction (or an in-memory queue's `with_connection`).
    pub fn reap_expecting(&self, expected: u64) -> Result<ReapReport> {
        crate::queue::retry::retry_conflicts(|| {
            self.store().write(|tx| {
                let now = self.shared.now_in(tx)?;
                let (requeued, exhausted) = S::reap_expired(tx, Batch { until: now, limit: u32::MAX })?;
                let waits_expired = S::reap_waiting(tx, Batch { until: now, limit: u32::MAX })?;
                let report = ReapReport { requeued, exhausted, waits_expired };
                check_expected("reap", Some(expected), report.total())?;
                Ok(report)
            })
        })
    }

    /// What [`Queue::reap`] would change at the clock's now, without changing anything.
    ///
    /// # Errors
    ///
    /// Only read errors: `Pool` (no pooled connection came free in time), `Busy`; on an
    /// in-memory queue, `NestedWrite` from inside a closure holding its transaction or
    /// connection.
    pub fn reap_preview(&self) -> Result<ReapReport> {
        self.store().read(|tx| S::reap_preview(tx, self.shared.now_in(tx)?))
    }
}
