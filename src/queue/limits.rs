//! Rate and concurrency limits of a queue, stored in the database: every process and handle
//! obeys the same limits from the commit on, and they survive restarts (see `crate::limits`).

use super::retry::retry_conflicts;
use super::Queue;
use crate::error::Result;
use crate::limits::Limits;
use crate::store::Store;
use crate::validate::check_name;

impl<S: Store> Queue<S> {
    /// Replaces every limit of `queue` with `limits`, for every process from the commit on:
    /// a claim hands out no job that would break one. `Limits::default()` clears them.
    ///
    /// In any interval of length T by the store's clock (PostgreSQL: the server's), at most
    /// N attempts of the queue (of one group of it, for a group rate) start; with
    /// `max_running`, at most so many attempts of the queue run at once. A job held back
    /// waits as `pending`, which costs no attempt; a pool of the queue sleeps until the limit
    /// opens. Jobs without a group are not counted by group rates.
    ///
    /// ```
    /// # use fenceq::{Limits, NewJob, Queue, Rate};
    /// # use std::time::Duration;
    /// let queue = Queue::open_in_memory()?;
    /// // Telegram: 30 messages a second overall, 1 a second and 20 a minute into one chat.
    /// queue.set_limits("telegram", &Limits {
    ///     rate: Some(Rate::parse("30/1s")?),
    ///     group_rates: vec![Rate::parse("1/1s")?, Rate::parse("20/60s")?],
    ///     max_running: None,
    /// })?;
    /// queue.enqueue(NewJob::new("telegram", b"hello".to_vec()).group("chat:42"))?;
    /// queue.enqueue(NewJob::new("telegram", b"again".to_vec()).group("chat:42"))?;
    /// let first = queue.claim("telegram", "w", Duration::from_secs(30))?.unwrap();
    /// queue.complete(&first.token())?;
    /// // The chat's next message waits out its 1/1s (no attempt is spent).
    /// assert!(queue.claim("telegram", "w", Duration::from_secs(30))?.is_none());
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a bad queue name, a count of 0 or above 1,000,000, a window of 0,
    /// under a millisecond's precision or longer than a day, or two group rates with the same
    /// window (nothing is stored). Storage errors: `Busy`, `StorageFull`, `ReadOnly`;
    /// `NestedWrite` from inside a closure holding the queue's transaction.
    pub fn set_limits(&self, queue: &str, limits: &Limits) -> Result<()> {
        check_name("queue name", queue)?;
        limits.check()?;
        retry_conflicts(|| self.store().write(|tx| S::set_limits(tx, queue, limits, self.shared.now_in(tx)?)))?;
        // A loosened limit may let this handle's pools claim at once.
        self.wake(queue);
        Ok(())
    }

    /// Clears every limit of `queue` (as `set_limits` with no limit).
    ///
    /// # Errors
    ///
    /// Those of [`Queue::set_limits`].
    pub fn clear_limits(&self, queue: &str) -> Result<()> {
        self.set_limits(queue, &Limits::default())
    }

    /// `queue`'s limits (empty when it has none).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a bad queue name. Read errors: `Pool`, `Busy`; on an in-memory
    /// queue, `NestedWrite` from inside a closure holding its transaction or connection.
    pub fn limits(&self, queue: &str) -> Result<Limits> {
        check_name("queue name", queue)?;
        self.store().read(|tx| S::limits(tx, queue))
    }

    /// Every queue that has limits, by name, with them.
    ///
    /// # Errors
    ///
    /// Read errors: `Pool`, `Busy`; on an in-memory queue, `NestedWrite` from inside a
    /// closure holding its transaction or connection.
    pub fn all_limits(&self) -> Result<Vec<(String, Limits)>> {
        self.store().read(|tx| S::all_limits(tx))
    }
}
