//! Operators' and reconcilers' changes of a job (resolve, replay, cancel, acknowledge): each
//! one guarded by the job's state or exact token in its statement, and each one recorded on
//! the job's row (`Job::decision`: what, when, by whom, why) in the same transaction, as
//! row-level evidence of who decided. Pausing and unpausing a queue record themselves the
//! same way on the queue's row (`PausedQueue`).

use super::fence;
use super::retry::retry_conflicts;
use super::Queue;
use crate::error::{Error, Result};
use crate::job::{ClaimToken, JobId, JobState, Resolution};
use crate::store::DefaultStore;
use crate::store::{Decided, JobDecision, QueueDecision, Store, TokenAt};
use crate::validate::{check_expected, check_name, check_note, show_nul};

/// A handle for changes made on someone's behalf: every change through it records `by` and
/// the note on the job's row (or, for a pause, the queue's). Made by [`Queue::operator`];
/// cheap, borrow-only.
#[derive(Debug, Clone)]
pub struct Operator<'q, S: Store = DefaultStore> {
    queue: &'q Queue<S>,
    by: Option<String>,
    note: Option<String>,
}

impl<'q, S: Store> Operator<'q, S> {
    pub(crate) fn new(queue: &'q Queue<S>, by: Option<String>) -> Operator<'q, S> {
        Operator { queue, by, note: None }
    }

    /// Why: a note recorded with every change made through this handle. A NUL byte in it is
    /// stored as [`NUL_SHOWN_AS`](crate::NUL_SHOWN_AS), as in every stored text.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        let note = note.into();
        self.note = Some(match show_nul(&note) {
            std::borrow::Cow::Borrowed(_) => note,
            std::borrow::Cow::Owned(shown) => shown,
        });
        self
    }

    /// The decision to record for `action`, once `by` and the note are checked.
    fn decided(&self, action: &'static str) -> Result<Decided<'_>> {
        if let Some(by) = &self.by {
            check_name("operator name", by)?;
        }
        if let Some(note) = &self.note {
            check_note(note)?;
        }
        Ok(Decided { action, by: self.by.as_deref(), note: self.note.as_deref() })
    }

    fn now(&self, tx: &S::Tx) -> Result<i64> {
        self.queue.shared.now_in(tx)
    }

    /// [`Queue::resolve`], recording the decision.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::resolve`]; `InvalidInput` for an operator name that is empty,
    /// longer than 128 bytes or holds a NUL byte, or a note over 4,096 bytes.
    pub fn resolve(&self, token: &ClaimToken, resolution: Resolution) -> Result<()> {
        self.resolve_with(token, resolution, |_| Ok(()))
    }

    /// [`Queue::resolve_with`], recording the decision.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::resolve_with`] and [`Operator::resolve`].
    pub fn resolve_with<T>(
        &self,
        token: &ClaimToken,
        resolution: Resolution,
        write: impl FnOnce(&S::Tx) -> Result<T>,
    ) -> Result<T> {
        let decided = self.decided(resolution.decision())?;
        self.queue.write_waking(|tx| {
            let now = self.now(tx)?;
            let resolved = S::resolve_if_unknown(tx, TokenAt { token, now }, resolution, &decided)?;
            fence::identified::<S>(tx, token, JobState::Unknown, now, decided.action, resolved)?;
            // (The writer refuses to commit a transaction the store rolled back meanwhile.)
            write(tx)
        })
    }

    /// [`Queue::replay`], recording the decision.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::replay`] and [`Operator::resolve`] (the name and note).
    pub fn replay(&self, id: JobId) -> Result<()> {
        let decided = self.decided("replay")?;
        retry_conflicts(|| {
            self.queue.store().write(|tx| {
                let replayed = S::replay_if_exhausted(tx, JobDecision { id, now: self.now(tx)?, decided })?;
                fence::by_id::<S>(tx, id, "replay", "exhausted", replayed)
            })
        })
    }

    /// [`Queue::cancel`], recording the decision.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::cancel`] and [`Operator::resolve`] (the name and note).
    pub fn cancel(&self, id: JobId) -> Result<JobState> {
        let decided = self.decided("cancel")?;
        retry_conflicts(|| {
            self.queue.store().write(|tx| {
                let before = S::identity(tx, id)?.map(|current| current.state);
                let cancelled = S::cancel_if_active(tx, JobDecision { id, now: self.now(tx)?, decided })?;
                fence::by_id::<S>(tx, id, "cancel", "pending, waiting or running", cancelled)?;
                before.ok_or_else(|| Error::domain("internal: a cancelled job had no row"))
            })
        })
    }

    /// [`Queue::acknowledge`], recording the decision (a repeat changes nothing, not even
    /// the record).
    ///
    /// # Errors
    ///
    /// Those of [`Queue::acknowledge`] and [`Operator::resolve`] (the name and note).
    pub fn acknowledge(&self, token: &ClaimToken) -> Result<()> {
        let decided = self.decided("acknowledge")?;
        retry_conflicts(|| {
            self.queue.store().write(|tx| {
                let now = self.now(tx)?;
                let acknowledged = S::acknowledge_if_exhausted(tx, TokenAt { token, now }, &decided)?;
                fence::identified::<S>(tx, token, JobState::Exhausted, now, "acknowledge", acknowledged)
            })
        })
    }

    /// [`Queue::acknowledge_job`], recording the decision.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::acknowledge_job`] and [`Operator::resolve`] (the name and note).
    pub fn acknowledge_job(&self, id: JobId, expected: Option<u64>) -> Result<bool> {
        let decided = self.decided("acknowledge")?;
        retry_conflicts(|| {
            self.queue.store().write(|tx| {
                let acknowledged =
                    S::acknowledge_job_if_unacknowledged(tx, JobDecision { id, now: self.now(tx)?, decided })?;
                let changed = match fence::by_id::<S>(tx, id, "acknowledge", "exhausted", acknowledged) {
                    Ok(()) => true,
                    // Exhausted, so acknowledged already: a repeat changes nothing.
                    Err(Error::InvalidState { state: JobState::Exhausted, .. }) => false,
                    Err(e) => return Err(e),
                };
                check_expected("acknowledge", expected, u64::from(changed))?;
                Ok(changed)
            })
        })
    }

    /// [`Queue::pause`], recording who paused the queue and why ([`PausedQueue`](crate::PausedQueue)).
    /// A queue paused already keeps its first record.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::pause`] and [`Operator::resolve`] (the name and note).
    pub fn pause(&self, queue: &str) -> Result<bool> {
        check_name("queue name", queue)?;
        let decided = self.decided("pause")?;
        retry_conflicts(|| {
            self.queue.store().write(|tx| S::pause_queue(tx, QueueDecision { queue, now: self.now(tx)?, decided }))
        })
    }

    /// [`Queue::unpause`], recording who unpaused the queue and why on its row in place of
    /// the pause.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::unpause`] and [`Operator::resolve`] (the name and note).
    pub fn unpause(&self, queue: &str) -> Result<bool> {
        check_name("queue name", queue)?;
        let decided = self.decided("unpause")?;
        let unpaused = retry_conflicts(|| {
            self.queue.store().write(|tx| S::unpause_queue(tx, QueueDecision { queue, now: self.now(tx)?, decided }))
        })?;
        if unpaused {
            // After the commit: a woken pool's claim must see the queue unpaused.
            self.queue.wake(queue);
        }
        Ok(unpaused)
    }

    /// [`Queue::clear_backoff`], recording who lifted the back-off and why
    /// ([`Queue::last_backoff_lift`]).
    ///
    /// # Errors
    ///
    /// Those of [`Queue::clear_backoff`] and [`Operator::resolve`] (the name and note).
    pub fn clear_backoff(&self, queue: &str) -> Result<bool> {
        check_name("queue name", queue)?;
        let decided = self.decided("clear backoff")?;
        let cleared = retry_conflicts(|| {
            self.queue
                .store()
                .write(|tx| S::clear_queue_backoff(tx, QueueDecision { queue, now: self.now(tx)?, decided }))
        })?;
        if cleared {
            // After the commit: a woken pool's claim must see the back-off gone.
            self.queue.wake(queue);
        }
        Ok(cleared)
    }

    /// [`Queue::acknowledge_all`], recording the decision on every row it acknowledges.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::acknowledge_all`] and [`Operator::resolve`] (the name and note).
    pub fn acknowledge_all(&self, queue: &str, expected: Option<u64>) -> Result<Vec<JobId>> {
        check_name("queue name", queue)?;
        let decided = self.decided("acknowledge")?;
        retry_conflicts(|| {
            self.queue.store().write(|tx| {
                let ids = S::acknowledge_all(tx, QueueDecision { queue, now: self.now(tx)?, decided })?;
                check_expected("acknowledge", expected, ids.len() as u64)?;
                Ok(ids)
            })
        })
    }
}
