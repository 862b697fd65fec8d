//! Queue back-off: a provider's "retry after" for a whole queue
//! ([`BackoffScope::Queue`](crate::BackoffScope::Queue)), stored with the queue's data like a
//! pause with an end, so that no claim of the queue, in any process or handle, hands out
//! anything before it ends. A handler sets it (`Outcome::RetryAfter`, [`Queue::snooze`]);
//! it ends by itself, or an operator lifts it early ([`Queue::clear_backoff`]).

use super::Queue;
use crate::error::Result;
use crate::report::{BackoffLift, QueueBackoff};
use crate::store::Store;
use crate::validate::check_name;

impl<S: Store> Queue<S> {
    /// The back-off of `queue` while it lasts (by the store's clock: PostgreSQL's server
    /// clock), with when it ends and why: until then its claims find nothing. Advisory: it
    /// can change right after; the claim checks the back-off itself, in its own statement.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name is empty, longer than 128 bytes or contains a NUL
    /// byte. Read errors: `Pool` (no pooled connection came free in time), `Busy`; on an
    /// in-memory queue, `NestedWrite` from inside a closure holding its transaction or
    /// connection.
    pub fn queue_backoff(&self, queue: &str) -> Result<Option<QueueBackoff>> {
        check_name("queue name", queue)?;
        self.store().read(|tx| {
            let now = self.shared.now_in(tx)?;
            S::queue_backoff(tx, queue, now)
        })
    }

    /// Every queue backing off now, by name.
    ///
    /// # Errors
    ///
    /// Only read errors: `Pool` (no pooled connection came free in time), `Busy`; on an
    /// in-memory queue, `NestedWrite` from inside a closure holding its transaction or
    /// connection.
    pub fn queue_backoffs(&self) -> Result<Vec<QueueBackoff>> {
        self.store().read(|tx| {
            let now = self.shared.now_in(tx)?;
            S::queue_backoffs(tx, now)
        })
    }

    /// Lifts the back-off of `queue` before it ends (an operator who knows the provider
    /// recovered): its due jobs are claimable again at once. This process's worker pools of
    /// the queue are woken; pools of other processes find the jobs at their next poll (on
    /// PostgreSQL, at once: their listeners are woken). Returns true when the queue was
    /// backing off, false when it was not (nothing changes). The lift is recorded without a
    /// name ([`Queue::last_backoff_lift`]); [`Operator::clear_backoff`](crate::Operator::clear_backoff)
    /// records who lifted it and why.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name is empty, longer than 128 bytes or contains a NUL
    /// byte (nothing changes). Storage errors: `Busy`, `StorageFull`, `ReadOnly`;
    /// `NestedWrite` from inside a closure holding the queue's transaction (or an in-memory
    /// queue's `with_connection`).
    pub fn clear_backoff(&self, queue: &str) -> Result<bool> {
        self.unnamed().clear_backoff(queue)
    }

    /// The last lift of `queue`'s back-off before it ended ([`Queue::clear_backoff`],
    /// [`Operator::clear_backoff`](crate::Operator::clear_backoff)): when, by whom, why, and
    /// the reason of the back-off lifted. `None` when none was ever lifted early. A later lift
    /// replaces it; a back-off that simply ends records nothing.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name is empty, longer than 128 bytes or contains a NUL
    /// byte. Read errors: `Pool` (no pooled connection came free in time), `Busy`; on an
    /// in-memory queue, `NestedWrite` from inside a closure holding its transaction or
    /// connection.
    pub fn last_backoff_lift(&self, queue: &str) -> Result<Option<BackoffLift>> {
        check_name("queue name", queue)?;
        self.store().read(|tx| S::last_backoff_lift(tx, queue))
    }
}
