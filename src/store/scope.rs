//! This thread's write scope, shared by every store: whether it is inside a queue's write
//! transaction (a nested queue write would wait for itself, so it is `NestedWrite`
//! instead), and which queues `enqueue_tx` added jobs to in that transaction (their pools
//! are woken once it has committed).

use crate::error::{Error, Result};
use std::cell::{Cell, RefCell};

thread_local! {
    /// Set while this thread runs a write transaction of some queue (or holds the only
    /// connection of an in-memory queue).
    static IN_WRITE: Cell<bool> = const { Cell::new(false) };
    /// Queues that `enqueue_tx` added jobs to inside this thread's open write transaction.
    static ENQUEUED_IN_WRITE: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// True while this thread runs a write transaction of some queue.
pub(crate) fn in_write() -> bool {
    IN_WRITE.with(Cell::get)
}

/// Records that a job of `queue` was added inside this thread's open write transaction.
pub(crate) fn note_enqueued_in_write(queue: &str) {
    ENQUEUED_IN_WRITE.with(|q| {
        let mut queues = q.borrow_mut();
        if !queues.iter().any(|known| known == queue) {
            queues.push(queue.to_string());
        }
    });
}

/// Takes the queues recorded by [`note_enqueued_in_write`] since the last call.
pub(crate) fn take_enqueued_in_write() -> Vec<String> {
    ENQUEUED_IN_WRITE.with(|q| std::mem::take(&mut *q.borrow_mut()))
}

/// Marks this thread as inside a write until dropped; `NestedWrite` when it already is.
pub(crate) struct WriteFlag;

impl WriteFlag {
    pub(crate) fn set() -> Result<WriteFlag> {
        if IN_WRITE.with(|f| f.replace(true)) {
            return Err(Error::NestedWrite);
        }
        Ok(WriteFlag)
    }
}

/// [`WriteFlag::set`] for a transaction that runs a caller's closure: it also forgets the
/// queues noted by an earlier transaction of this thread that never reached its commit.
pub(crate) fn enter_write() -> Result<WriteFlag> {
    let flag = WriteFlag::set()?;
    take_enqueued_in_write();
    Ok(flag)
}

impl Drop for WriteFlag {
    fn drop(&mut self) {
        IN_WRITE.with(|f| f.set(false));
    }
}
