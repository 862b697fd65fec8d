//! Paused queues: a queue whose claims find nothing until it is unpaused, while everything
//! else goes on (enqueues land, running attempts renew and settle, the reaper reaps expired
//! leases). The pause is a row in the database, so every handle, every process and the CLI
//! see it; changes made through [`Queue::operator`] record who paused and why.

use super::operator::Operator;
use super::Queue;
use crate::error::Result;
use crate::report::PausedQueue;
use crate::store::Store;
use crate::validate::check_name;

impl<S: Store> Queue<S> {
    /// Pauses `queue`: from the commit on, claims of it (`claim`, `claim_batch`, every
    /// worker pool of it, in every process) find nothing, until [`Queue::unpause`].
    /// Everything else goes on: enqueues land (and wait), attempts already claimed renew and
    /// settle as usual (a pool finishes the ones it holds, prefetched ones included), and
    /// the reaper still returns expired leases of the queue to pending (they are claimed
    /// once it is unpaused), so no attempt is stuck. Other queues are not affected.
    ///
    /// A queue exists by name: one with no jobs can be paused, and jobs enqueued to it later
    /// wait. Returns true when this call paused the queue, false when it was paused already
    /// (idempotent: a repeat changes nothing, not even the record of who paused it).
    ///
    /// ```
    /// # use fenceq::{NewJob, Queue};
    /// # use std::time::Duration;
    /// let queue = Queue::open_in_memory()?;
    /// assert!(queue.operator("alice").note("telegram API outage").pause("telegram")?);
    /// queue.enqueue(NewJob::new("telegram", b"update".to_vec()))?;          // still lands
    /// assert!(queue.claim("telegram", "worker-1", Duration::from_secs(30))?.is_none());
    /// assert_eq!(queue.paused_queues()?[0].by.as_deref(), Some("alice"));
    /// assert!(!queue.pause("telegram")?);                                    // paused already
    /// assert!(queue.unpause("telegram")?);                                  // wakes its pools
    /// assert!(queue.claim("telegram", "worker-1", Duration::from_secs(30))?.is_some());
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name is empty, longer than 128 bytes or contains a NUL
    /// byte (nothing changes). Storage errors: `Busy`, `StorageFull`, `ReadOnly`;
    /// `NestedWrite` from inside a closure holding the queue's transaction (or an in-memory
    /// queue's `with_connection`).
    pub fn pause(&self, queue: &str) -> Result<bool> {
        Operator::new(self, None).pause(queue)
    }

    /// Unpauses `queue`: its due jobs are claimable again, in the usual order. This
    /// process's worker pools of the queue are woken at once; pools of other processes find
    /// the jobs at their next poll. Returns true when the queue was paused, false when it
    /// was not (nothing changes).
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name is empty, longer than 128 bytes or contains a NUL
    /// byte (nothing changes). Storage errors: `Busy`, `StorageFull`, `ReadOnly`;
    /// `NestedWrite` from inside a closure holding the queue's transaction (or an in-memory
    /// queue's `with_connection`).
    pub fn unpause(&self, queue: &str) -> Result<bool> {
        Operator::new(self, None).unpause(queue)
    }

    /// True while `queue` is paused (by any handle or process). Advisory: it can change
    /// right after; the claim checks the pause itself, in its own transaction.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name is empty, longer than 128 bytes or contains a NUL
    /// byte. Read errors: `Pool` (no pooled connection came free in time), `Busy`; on an
    /// in-memory queue, `NestedWrite` from inside a closure holding its transaction or
    /// connection.
    pub fn is_paused(&self, queue: &str) -> Result<bool> {
        check_name("queue name", queue)?;
        self.store().read(|tx| S::queue_pause(tx, queue)).map(|pause| pause.is_some())
    }

    /// Every paused queue, by name, with who paused it, when and why.
    ///
    /// # Errors
    ///
    /// Only read errors: `Pool` (no pooled connection came free in time), `Busy`; on an
    /// in-memory queue, `NestedWrite` from inside a closure holding its transaction or
    /// connection.
    pub fn paused_queues(&self) -> Result<Vec<PausedQueue>> {
        self.store().read(S::paused_queues)
    }
}
