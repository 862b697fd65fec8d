//! The writer: one dedicated connection, and group commit.
//!
//! Threads of this process never meet in SQLite's sleeping busy handler: they queue on a
//! mutex for the one writer connection. While one thread runs its write, the others wait;
//! instead of committing after every request, the writer leaves the `BEGIN IMMEDIATE`
//! transaction open for the threads already queued behind it, and the last request of such
//! a group commits for all (LevelDB's leader/follower writer queue, with the mutex as the
//! queue). Each request after the first runs inside its own savepoint, so one failed request
//! is rolled back alone and never fails its neighbours; every caller still gets its own
//! exact result, and only after the commit that made it durable. The only failures shared by
//! a group are those that lose the whole transaction: a failed `COMMIT` (disk full, I/O) or a
//! statement after which SQLite rolled back by itself (checked with `is_autocommit`).

use crate::error::{Error, Result, SqlContext};
use parking_lot::{Condvar, Mutex, MutexGuard};
use rusqlite::Connection;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Most requests one group transaction carries before it commits regardless of who waits.
const MAX_GROUP: usize = 256;

/// The outcome of one group transaction, shared by its members. Members wait on the
/// group's own condition variable, not on the writer's mutex, so that waking a finished
/// group does not make its members queue again behind the next group's writers.
#[derive(Default)]
struct Group {
    outcome: OnceLock<std::result::Result<(), Error>>,
    done: Mutex<bool>,
    wake: Condvar,
}

impl Group {
    fn settle(&self, outcome: std::result::Result<(), Error>) {
        self.outcome.set(outcome).ok();
        *self.done.lock() = true;
        self.wake.notify_all();
    }

    fn wait(&self) -> &std::result::Result<(), Error> {
        let mut done = self.done.lock();
        while !*done {
            self.wake.wait(&mut done);
        }
        self.outcome.get().expect("set before done")
    }
}

struct State {
    conn: Connection,
    /// The open group transaction, if any.
    group: Option<Arc<Group>>,
    /// Requests in the open group whose work is in the transaction.
    members: usize,
}

pub(crate) struct Writer {
    state: Mutex<State>,
    /// Threads between announcing a request and holding the mutex.
    waiting: AtomicUsize,
    /// Transactions committed and the requests they carried (for `Queue::commit_stats`).
    transactions: AtomicU64,
    requests: AtomicU64,
    /// False for the in-memory queue, whose readers share the writer connection and so must
    /// never see an open group.
    grouping: bool,
}

impl Writer {
    pub(crate) fn new(conn: Connection, grouping: bool) -> Writer {
        Writer {
            state: Mutex::new(State { conn, group: None, members: 0 }),
            waiting: AtomicUsize::new(0),
            transactions: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            grouping,
        }
    }

    /// Runs `f` in a `BEGIN IMMEDIATE` transaction (its own savepoint inside a group) and
    /// returns once the transaction holding its work has committed.
    ///
    /// A request that panics is rolled back like a failed one (its savepoint, or the whole
    /// transaction when it was alone), the group's other work still commits, and the panic
    /// then continues on the caller's thread: a panicking closure never leaves a transaction
    /// open for the next writer to commit by accident.
    pub(crate) fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let mut panic = None;
        let result = self.write_guarded(|conn: &Connection| {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(conn))) {
                Ok(result) => result,
                Err(payload) => {
                    panic = Some(payload);
                    Err(Error::domain("the write request panicked"))
                }
            }
        });
        if let Some(payload) = panic {
            std::panic::resume_unwind(payload);
        }
        result
    }

    fn write_guarded<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut st = self.state.lock();
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        if st.group.is_none() {
            st.conn.execute_batch("BEGIN IMMEDIATE").sql("BEGIN IMMEDIATE")?;
            st.group = Some(Arc::new(Group::default()));
            st.members = 0;
        }
        let group = st.group.clone().expect("opened above");
        let first = st.members == 0;
        let result = if first { f(&st.conn) } else { in_savepoint(&st.conn, f) };
        let mine = match result {
            Ok(value) => {
                st.members += 1;
                Ok(value)
            }
            Err(e) if st.conn.is_autocommit() => {
                // SQLite rolled the whole transaction back (disk full, I/O error in the
                // middle): every member's work is gone, so every member fails.
                self.finish(&mut st, Err(e.replicate()));
                return Err(e);
            }
            Err(e) if first => {
                // Nobody else's work is in the transaction: roll it back whole.
                let rollback = st.conn.execute_batch("ROLLBACK").sql("ROLLBACK");
                st.group = None;
                group.settle(rollback.map_err(|r| r.replicate()));
                return Err(e);
            }
            // A later request failed alone (its savepoint is rolled back); the group's
            // earlier work stays and still needs a commit.
            Err(e) => Err(e),
        };
        if !self.grouping || st.members >= MAX_GROUP || self.waiting.load(Ordering::SeqCst) == 0 {
            return match self.commit(&mut st) {
                Ok(()) => mine,
                Err(e) => Err(e),
            };
        }
        // Leave the transaction open for the requests queued behind this one; the last of
        // them commits and wakes everyone in the group.
        drop(st);
        match group.wait() {
            Ok(()) => mine,
            Err(e) => Err(mine.err().unwrap_or_else(|| e.replicate())),
        }
    }

    /// Closes the open group with `outcome` and wakes its waiting members.
    fn finish(&self, st: &mut MutexGuard<'_, State>, outcome: std::result::Result<(), Error>) {
        if let Some(group) = st.group.take() {
            group.settle(outcome);
        }
        st.members = 0;
    }

    /// Commits the open group (its members' work is all in it) and wakes them.
    fn commit(&self, st: &mut MutexGuard<'_, State>) -> Result<()> {
        let commit = st.conn.execute_batch("COMMIT").sql("COMMIT");
        if commit.is_ok() {
            self.transactions.fetch_add(1, Ordering::Relaxed);
            self.requests.fetch_add(st.members as u64, Ordering::Relaxed);
        }
        if commit.is_err() && !st.conn.is_autocommit() {
            // COMMIT can fail and leave the transaction open (busy); never reuse it.
            let _ = st.conn.execute_batch("ROLLBACK");
        }
        self.finish_with(st, commit)
    }

    /// `finish` with `result`, handing the original error back to the caller.
    fn finish_with(&self, st: &mut MutexGuard<'_, State>, result: Result<()>) -> Result<()> {
        match result {
            Ok(()) => {
                self.finish(st, Ok(()));
                Ok(())
            }
            Err(e) => {
                self.finish(st, Err(e.replicate()));
                Err(e)
            }
        }
    }

    /// (transactions committed, requests they carried) since open.
    pub(crate) fn commit_stats(&self) -> (u64, u64) {
        (self.transactions.load(Ordering::Relaxed), self.requests.load(Ordering::Relaxed))
    }

    /// Runs `f` on the writer connection with no transaction open (reads of the in-memory
    /// queue, checkpoints). An open group is committed first.
    pub(crate) fn exclusive<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut st = self.state.lock();
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        if st.group.is_some() {
            // A group is only left open with members in it (a failed first request rolls
            // back at once), so this commits their work.
            self.commit(&mut st)?;
        }
        f(&st.conn)
    }

    /// `PRAGMA wal_checkpoint(TRUNCATE)` on the writer connection, waiting (through the busy
    /// handler) as long as the caller's patience for readers; this process's writers queue
    /// behind it meanwhile.
    pub(crate) fn checkpoint(&self) -> Result<(i64, i64, i64)> {
        self.exclusive(|conn| {
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
            })
            .sql("PRAGMA wal_checkpoint(TRUNCATE)")
        })
    }
}

/// Runs `f` inside `SAVEPOINT fenceq_request`: released on success, rolled back alone on
/// failure so that the group's other work stays.
fn in_savepoint<T>(conn: &Connection, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    conn.prepare_cached("SAVEPOINT fenceq_request").and_then(|mut s| s.execute([])).sql("SAVEPOINT")?;
    match f(conn) {
        Ok(value) => {
            conn.prepare_cached("RELEASE fenceq_request").and_then(|mut s| s.execute([])).sql("RELEASE")?;
            Ok(value)
        }
        Err(e) => {
            if !conn.is_autocommit() {
                let undone = conn
                    .prepare_cached("ROLLBACK TO fenceq_request")
                    .and_then(|mut s| s.execute([]))
                    .and_then(|_| conn.prepare_cached("RELEASE fenceq_request")?.execute([]));
                if undone.is_err() {
                    // The request's partial work cannot be undone alone: undo everything,
                    // which the caller sees as `is_autocommit` and fails the whole group.
                    let _ = conn.execute_batch("ROLLBACK");
                }
            }
            Err(e)
        }
    }
}
