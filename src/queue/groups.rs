//! Groups: one job of a (queue, group) at a time, in enqueue order, held by the store so that
//! every pool, handle and process obeys it. A job names its group at intake
//! ([`NewJob::group`](crate::NewJob::group)); the store keeps the group's later jobs out of
//! the claim (`held_by_group`) until the head lets go of it. What lets go is the queue's
//! [`GroupPolicy`], stored in the database like a pause.

use super::retry::retry_conflicts;
use super::Queue;
use crate::error::Result;
use crate::job::GroupPolicy;
use crate::report::GroupSummary;
use crate::store::{GroupsRequest, Store};
use crate::validate::{check_group, check_limit, check_name};

impl<S: Store> Queue<S> {
    /// Sets what a failed head does to the groups of `queue`, for every process from the
    /// commit on. Switching to [`GroupPolicy::ContinueAfterFailure`] hands each group whose
    /// head is `unknown` or an unacknowledged exhaustion to its next job at once; switching
    /// back to [`GroupPolicy::StopOnFailure`] stops no job that already started.
    ///
    /// ```
    /// # use fenceq::{GroupPolicy, NewJob, Queue};
    /// # use std::time::Duration;
    /// let queue = Queue::open_in_memory()?;
    /// queue.enqueue(NewJob::new("telegram", b"hello".to_vec()).group("chat:42"))?;
    /// queue.enqueue(NewJob::new("telegram", b"how are you?".to_vec()).group("chat:42"))?;
    /// let first = queue.claim("telegram", "w", Duration::from_secs(30))?.unwrap();
    /// queue.mark_unknown(&first.token(), "timed out after sending")?;
    /// // The conversation stops at a message whose fate is not known...
    /// assert!(queue.claim("telegram", "w", Duration::from_secs(30))?.is_none());
    /// // ...unless the queue says a failed head no longer blocks.
    /// queue.set_group_policy("telegram", GroupPolicy::ContinueAfterFailure)?;
    /// assert_eq!(queue.claim("telegram", "w", Duration::from_secs(30))?.unwrap().payload, b"how are you?");
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name is empty, longer than 128 bytes or contains a NUL
    /// byte (nothing changes). Storage errors: `Busy`, `StorageFull`, `ReadOnly`;
    /// `NestedWrite` from inside a closure holding the queue's transaction.
    pub fn set_group_policy(&self, queue: &str, policy: GroupPolicy) -> Result<()> {
        check_name("queue name", queue)?;
        retry_conflicts(|| self.store().write(|tx| S::set_group_policy(tx, queue, policy, self.shared.now_in(tx)?)))?;
        // After the commit: a released group's next job is claimable.
        self.wake(queue);
        Ok(())
    }

    /// The group policy of `queue` ([`GroupPolicy::StopOnFailure`] unless set).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a bad queue name. Read errors: `Pool`, `Busy`; on an in-memory
    /// queue, `NestedWrite` from inside a closure holding its transaction or connection.
    pub fn group_policy(&self, queue: &str) -> Result<GroupPolicy> {
        check_name("queue name", queue)?;
        self.store().read(|tx| S::group_policy(tx, queue))
    }

    /// One page of the groups that have live jobs (pending, running, waiting, `unknown` or
    /// exhausted), of `queue` or of every queue, in (queue, group) order after `after` (the
    /// last (queue, group) of the previous page): each group's head and how many jobs wait
    /// behind it. [`GroupSummary::blocked`] says why a group cannot go on.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `limit` is not in 1..=10,000, or a queue or group name is invalid.
    /// Read errors: `Pool`, `Busy`; on an in-memory queue, `NestedWrite` from inside a
    /// closure holding its transaction or connection.
    pub fn groups(&self, queue: Option<&str>, after: Option<(&str, &str)>, limit: u32) -> Result<Vec<GroupSummary>> {
        check_limit(limit)?;
        if let Some(queue) = queue {
            check_name("queue name", queue)?;
        }
        if let Some((queue, group)) = after {
            check_name("queue name", queue)?;
            check_group(group)?;
        }
        let after = after.unwrap_or(("", ""));
        self.store().read(|tx| S::groups(tx, GroupsRequest { queue, after, limit }))
    }
}
