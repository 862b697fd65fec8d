//! Operators' and reconcilers' changes of a job (resolve, replay, cancel, acknowledge): each
//! one guarded by the job's state or exact token in its statement, and each one recorded on
//! the job's row (`Job::decision`: what, when, by whom, why) in the same transaction, as
//! row-level evidence of who decided.

use crate::error::{Error, Result};
use crate::job::{ClaimToken, JobId, JobState, Resolution};
use crate::queue::{check_expected, check_name, Queue, MAX_ERROR_LEN};
use crate::store::jobs::{self, Decided};
use rusqlite::Connection;

/// A handle for changes made on someone's behalf: every change through it records `by` and
/// the note on the job's row. Made by [`Queue::operator`]; cheap, borrow-only.
#[derive(Debug, Clone)]
pub struct Operator<'q> {
    queue: &'q Queue,
    by: Option<String>,
    note: Option<String>,
}

impl<'q> Operator<'q> {
    pub(crate) fn new(queue: &'q Queue, by: Option<String>) -> Operator<'q> {
        Operator { queue, by, note: None }
    }

    /// Why: a note recorded with every change made through this handle.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// The decision to record for `action`, once `by` and the note are checked.
    fn decided(&self, action: &'static str) -> Result<Decided<'_>> {
        if let Some(by) = &self.by {
            check_name("operator name", by)?;
        }
        if let Some(note) = &self.note {
            if note.len() > MAX_ERROR_LEN || note.contains('\0') {
                return Err(Error::invalid(
                    "decision note",
                    format!("{} bytes is over {MAX_ERROR_LEN}, or it holds a NUL byte", note.len()),
                ));
            }
        }
        Ok(Decided { action, by: self.by.as_deref(), note: self.note.as_deref() })
    }

    fn now(&self) -> i64 {
        self.queue.store.now()
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
        write: impl FnOnce(&Connection) -> Result<T>,
    ) -> Result<T> {
        let decided = self.decided(resolution.decision())?;
        let statement = match resolution {
            Resolution::Complete => jobs::JOB_RESOLVE_COMPLETE,
            Resolution::Retry => jobs::JOB_RESOLVE_RETRY,
            Resolution::Exhaust => jobs::JOB_RESOLVE_EXHAUST,
        };
        self.queue.write_waking(|tx| {
            let now = self.now();
            jobs::job_write_identified(tx, statement, decided.action, token, JobState::Unknown, now, Some(&decided))?;
            // (The writer refuses to commit a transaction SQLite rolled back meanwhile.)
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
        self.queue.store.write(|tx| jobs::job_replay(tx, id, self.now(), &decided))
    }

    /// [`Queue::cancel`], recording the decision.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::cancel`] and [`Operator::resolve`] (the name and note).
    pub fn cancel(&self, id: JobId) -> Result<JobState> {
        let decided = self.decided("cancel")?;
        self.queue.store.write(|tx| jobs::job_cancel(tx, id, self.now(), &decided))
    }

    /// [`Queue::acknowledge`], recording the decision (a repeat changes nothing, not even
    /// the record).
    ///
    /// # Errors
    ///
    /// Those of [`Queue::acknowledge`] and [`Operator::resolve`] (the name and note).
    pub fn acknowledge(&self, token: &ClaimToken) -> Result<()> {
        let decided = self.decided("acknowledge")?;
        self.queue.store.write(|tx| {
            let statement = jobs::JOB_ACKNOWLEDGE;
            let now = self.now();
            jobs::job_write_identified(tx, statement, "acknowledge", token, JobState::Exhausted, now, Some(&decided))
        })
    }

    /// [`Queue::acknowledge_job`], recording the decision.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::acknowledge_job`] and [`Operator::resolve`] (the name and note).
    pub fn acknowledge_job(&self, id: JobId, expected: Option<u64>) -> Result<bool> {
        let decided = self.decided("acknowledge")?;
        self.queue.store.write(|tx| {
            let changed = jobs::job_acknowledge_id(tx, id, self.now(), &decided)?;
            check_expected("acknowledge", expected, u64::from(changed))?;
            Ok(changed)
        })
    }

    /// [`Queue::acknowledge_all`], recording the decision on every row it acknowledges.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::acknowledge_all`] and [`Operator::resolve`] (the name and note).
    pub fn acknowledge_all(&self, queue: &str, expected: Option<u64>) -> Result<Vec<JobId>> {
        check_name("queue name", queue)?;
        let decided = self.decided("acknowledge")?;
        self.queue.store.write(|tx| {
            let ids = jobs::job_acknowledge_queue(tx, queue, self.now(), &decided)?;
            check_expected("acknowledge", expected, ids.len() as u64)?;
            Ok(ids)
        })
    }
}
