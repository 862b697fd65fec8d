//! The writer: one dedicated connection, group commit, and (at `synchronous=FULL`) a WAL
//! sync outside the write lock.
//!
//! There are two ways in.
//!
//! - [`Writer::submit`] takes an owned request (every hot path: intake, claims, settles,
//!   renewals). Requests queue in `pending`; the first thread to find no leader becomes the
//!   leader: it takes every pending request, runs each in its own savepoint of one
//!   `BEGIN IMMEDIATE` transaction, commits, hands the leadership to the first request that
//!   arrived meanwhile, and answers its members. Followers sleep on their own slot and never
//!   touch the connection, so a group of N requests costs one thread switch to the next
//!   leader, not N switches in a row through a mutex (LevelDB's writer queue, where the
//!   leader writes for its followers). One failed request is rolled back alone (its
//!   savepoint) and never fails its neighbours; every caller gets its own exact result, and
//!   only after the commit that made its work durable. The only failures a group shares are
//!   those that lose the whole transaction: a failed `COMMIT` (disk full, I/O), a statement
//!   after which SQLite rolled back by itself (checked with `is_autocommit`), a failed sync.
//! - [`Writer::write`] takes a borrowed closure (`with_ownership`, `complete_with`, operator
//!   writes): it runs on the caller's thread in a transaction of its own.
//!
//! The connection itself is held by one of them at a time: a leader's group, a `write`
//! closure, or `exclusive` work. A thread waiting for it waits without bound for fenceq's
//! own work (a group, a checkpoint, a backup), which always ends; but a caller's closure
//! (a `write` closure such as `Queue::transaction`'s, an in-memory queue's
//! `with_connection`) may itself wait for the waiting thread (a helper thread it joins),
//! and neither would ever go on: a wait for a closure is bounded by the busy timeout, as a
//! wait for another process's lock is, and then fails with `Busy` naming the holder.
//!
//! Two small waits make the groups large on few cores: a new leader yields its CPU once
//! before it takes its batch (the threads it just answered get to submit and join), and a
//! follower polls its slot for up to 100 µs before it parks (a parked thread wakes later
//! than a commit takes). Both are measured in `fenceq bench`; see their constants.
//!
//! At `synchronous=FULL` the writer connection itself runs at `NORMAL` (a commit writes the
//! WAL but does not sync it), and the leader syncs the WAL file after it has released the
//! connection: the next group executes while this one's sync is on its way to the disk, and
//! one sync covers every commit that finished before it started. A caller is still answered
//! only once a sync covering its commit has returned, exactly the promise of `FULL`. The
//! difference: another connection may read a commit up to one sync before it is durable.
//! A failed sync poisons the writer: the kernel may have dropped the dirty pages, so no
//! later sync could prove anything, and every later write fails until the queue is reopened.

use super::error::SqlContext;
use crate::error::{BusyCause, Error, Result};
use parking_lot::{Condvar, Mutex, MutexGuard};
use rusqlite::Connection;
use std::any::Any;
use std::fs::File;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Most requests one group transaction carries; the rest wait for the next leader.
const MAX_GROUP: usize = 256;
/// Pending requests from which a new leader starts at once instead of yielding first.
const GATHER_UNTIL: usize = 16;
/// How long a follower polls its slot before it parks; see [`spin_briefly`].
const SPIN_FOR: Duration = Duration::from_micros(100);

/// How often a thread waiting for the connection looks again at who holds it (it is woken
/// at once when the connection comes free; this only notices a new holder).
const HOLDER_RECHECK: Duration = Duration::from_millis(10);

/// Who holds the writer connection, for the threads that wait for it (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Holder {
    Nobody = 0,
    /// A leader running its group (fenceq's own statements).
    Group = 1,
    /// A `write` closure: an application's transaction or owned write, or an operator write.
    Transaction = 2,
    /// `exclusive` work that may run a caller's closure: reads of the in-memory queue,
    /// `with_connection` on it.
    Connection = 3,
    /// A checkpoint (bounded by its own patience).
    Checkpoint = 4,
    /// A backup of the in-memory queue (bounded by its time limit).
    Backup = 5,
}

impl Holder {
    fn from_u8(n: u8) -> Holder {
        match n {
            1 => Holder::Group,
            2 => Holder::Transaction,
            3 => Holder::Connection,
            4 => Holder::Checkpoint,
            5 => Holder::Backup,
            _ => Holder::Nobody,
        }
    }

    /// The `Busy` statement for a wait that ran out while this holder held the connection;
    /// `None` for a holder that is waited for without bound (fenceq's own work, which ends).
    fn runs_callers_code(self) -> Option<&'static str> {
        match self {
            Holder::Transaction => Some(
                "the queue's writer (another thread's write transaction held it past the busy timeout; \
                 a closure of Queue::transaction, with_ownership or complete_with that waits for this call \
                 would never end)",
            ),
            Holder::Connection => Some(
                "the in-memory queue's only connection (another thread's closure held it past the busy \
                 timeout; a with_connection closure that waits for this call would never end)",
            ),
            Holder::Nobody | Holder::Group | Holder::Checkpoint | Holder::Backup => None,
        }
    }
}

/// The writer connection, held; says so to the waiting threads until dropped.
pub(crate) struct Held<'w> {
    conn: MutexGuard<'w, Connection>,
    holder: &'w AtomicU8,
}

impl std::ops::Deref for Held<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // Before the guard (a field) unlocks: a waiter never sees a holder that left.
        self.holder.store(Holder::Nobody as u8, Ordering::Release);
    }
}

/// One submitted request, as its leader sees it.
trait Request: Send {
    /// Runs the work on the leader's connection and keeps its result; true on success (the
    /// work is then part of the open transaction).
    fn run(&mut self, conn: &Connection) -> bool;
    /// Fails the request without running it (or after its work was undone).
    fn fail(&mut self, error: Error);
    /// A copy of the request's own error, if it failed.
    fn failure(&self) -> Option<Error>;
    /// Answers the waiting thread: its own error if it failed, else `shared`, the fate of
    /// the transaction that carried its work.
    fn answer(self: Box<Self>, shared: Result<()>);
    /// Wakes the waiting thread to lead the next group.
    fn hand_lead(&self);
}

/// Where a submitting thread waits.
enum Turn<T> {
    Waiting,
    Lead,
    Answered(Result<T>),
    Panicked(Box<dyn Any + Send>),
}

struct Slot<T> {
    turn: Mutex<Turn<T>>,
    wake: Condvar,
    /// Set with every new turn: a hint for the waiter's spin (the turn itself is read under
    /// the mutex).
    ready: AtomicBool,
}

impl<T> Slot<T> {
    fn new() -> Arc<Slot<T>> {
        Arc::new(Slot { turn: Mutex::new(Turn::Waiting), wake: Condvar::new(), ready: AtomicBool::new(false) })
    }

    fn set(&self, turn: Turn<T>) {
        *self.turn.lock() = turn;
        self.ready.store(true, Ordering::Release);
        self.wake.notify_one();
    }
}

struct Submitted<T, F> {
    work: Option<F>,
    result: Option<Result<T>>,
    panic: Option<Box<dyn Any + Send>>,
    slot: Arc<Slot<T>>,
}

impl<T, F> Request for Submitted<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T> + Send + 'static,
{
    fn run(&mut self, conn: &Connection) -> bool {
        let Some(work) = self.work.take() else { return false };
        match catch_unwind(AssertUnwindSafe(|| work(conn))) {
            Ok(result) => {
                let ok = result.is_ok();
                self.result = Some(result);
                ok
            }
            Err(panic) => {
                self.panic = Some(panic);
                self.result = Some(Err(Error::domain("the write request panicked")));
                false
            }
        }
    }

    fn fail(&mut self, error: Error) {
        self.work = None;
        self.result = Some(Err(error));
    }

    fn failure(&self) -> Option<Error> {
        match &self.result {
            Some(Err(e)) => Some(e.clone()),
            _ => None,
        }
    }

    fn answer(self: Box<Self>, shared: Result<()>) {
        let this = *self;
        let turn = match (this.panic, this.result, shared) {
            (Some(panic), _, _) => Turn::Panicked(panic),
            (None, Some(Err(own)), _) => Turn::Answered(Err(own)),
            (None, Some(Ok(value)), Ok(())) => Turn::Answered(Ok(value)),
            (None, _, Err(shared)) => Turn::Answered(Err(shared)),
            (None, None, Ok(())) => Turn::Answered(Err(Error::domain("internal: a write was answered unrun"))),
        };
        this.slot.set(turn);
    }

    fn hand_lead(&self) {
        self.slot.set(Turn::Lead);
    }
}

/// Requests waiting for a leader. Invariant: when `leading` is false, `requests` is empty.
#[derive(Default)]
struct Pending {
    requests: Vec<Box<dyn Request>>,
    leading: bool,
}

/// The WAL sync of a `FULL` queue (see the module docs).
struct WalSync {
    path: PathBuf,
    state: Mutex<SyncState>,
    /// Why the writer is poisoned, after a failed sync (read without waiting for a sync).
    failed: OnceLock<String>,
    /// Syncs made (for `Queue::commit_stats`).
    syncs: AtomicU64,
}

#[derive(Default)]
struct SyncState {
    file: Option<File>,
    /// Commits (by sequence number) known durable.
    synced: u64,
}

pub(crate) struct Writer {
    conn: Mutex<Connection>,
    /// Who holds `conn` (a [`Holder`]).
    holder: AtomicU8,
    pending: Mutex<Pending>,
    /// Commits so far (the sequence number of the latest).
    committed: AtomicU64,
    /// Requests carried by those commits (for `Queue::commit_stats`).
    requests: AtomicU64,
    wal_sync: Option<WalSync>,
}

impl Writer {
    /// A writer on `conn`. With `wal` (a file queue at `FULL`), `conn` must run at
    /// `synchronous=NORMAL`: the writer syncs the WAL file at that path itself.
    pub(crate) fn new(conn: Connection, wal: Option<PathBuf>) -> Writer {
        Writer {
            conn: Mutex::new(conn),
            holder: AtomicU8::new(Holder::Nobody as u8),
            pending: Mutex::default(),
            committed: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            wal_sync: wal.map(|path| WalSync {
                path,
                state: Mutex::default(),
                failed: OnceLock::new(),
                syncs: AtomicU64::new(0),
            }),
        }
    }

    /// Runs `work` in a group transaction (its own savepoint) led by whichever thread of
    /// this process leads, and returns once the transaction holding it has committed (and,
    /// at `FULL`, been synced). A request that panics is rolled back alone and the panic
    /// continues on the caller's thread.
    pub(crate) fn submit<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let slot = Slot::new();
        let request = Box::new(Submitted { work: Some(work), result: None, panic: None, slot: slot.clone() });
        let lead = {
            let mut pending = self.pending.lock();
            pending.requests.push(request);
            !std::mem::replace(&mut pending.leading, true)
        };
        if lead {
            self.lead();
        }
        loop {
            spin_briefly(&slot.ready);
            slot.ready.store(false, Ordering::Relaxed);
            let mut turn = slot.turn.lock();
            match std::mem::replace(&mut *turn, Turn::Waiting) {
                Turn::Answered(result) => return result,
                Turn::Panicked(panic) => resume_unwind(panic),
                Turn::Lead => {
                    drop(turn);
                    self.lead();
                }
                Turn::Waiting => slot.wake.wait(&mut turn),
            }
        }
    }

    /// Leads one group: takes the pending requests (this thread's own is the first), runs
    /// and commits them, hands the leadership on, syncs, and answers every member.
    fn lead(&self) {
        if self.pending.lock().requests.len() < GATHER_UNTIL {
            // Let the threads just answered (or woken) run first: they submit and join this
            // group instead of forming their own transaction right after it. Measured with
            // `fenceq bench` on 2 cores: end to end +25 to +40% (requests per transaction
            // 2.1 → 4.1), the 16 FULL callers +30%, a lone caller unchanged (nothing else
            // to run, the yield returns at once); yielding twice gained nothing more.
            std::thread::yield_now();
        }
        let conn = match self.lock(Holder::Group) {
            Ok(conn) => conn,
            Err(e) => return self.fail_group(&e),
        };
        let batch = self.take_batch();
        let (answered, carried, commit) = self.run_group(&conn, batch);
        drop(conn);
        self.hand_on();
        let shared = commit.and_then(|seq| self.sync_through(seq));
        for request in carried {
            let shared = shared.as_ref().map(|_| ()).map_err(Error::clone);
            request.answer(shared);
        }
        for (request, shared) in answered {
            request.answer(shared);
        }
    }

    /// The requests of the next group (the leader's own is the first).
    fn take_batch(&self) -> Vec<Box<dyn Request>> {
        let mut pending = self.pending.lock();
        let take = pending.requests.len().min(MAX_GROUP);
        pending.requests.drain(..take).collect()
    }

    /// Hands the leadership to the first request that arrived meanwhile, if any.
    fn hand_on(&self) {
        let mut pending = self.pending.lock();
        match pending.requests.first() {
            Some(next) => next.hand_lead(),
            None => pending.leading = false,
        }
    }

    /// Answers a group whose leader could not get the connection with `error`, unrun.
    fn fail_group(&self, error: &Error) {
        let batch = self.take_batch();
        self.hand_on();
        for mut request in batch {
            request.fail(error.clone());
            request.answer(Ok(()));
        }
    }

    /// Takes the connection for `by`. Waits without bound while fenceq's own work holds it,
    /// and at most this thread's busy patience in all while a caller's closure does (see the
    /// module docs): then `Busy`, naming the holder.
    fn lock(&self, by: Holder) -> Result<Held<'_>> {
        let patience = super::patience();
        let mut waited = Duration::ZERO;
        loop {
            let holder = Holder::from_u8(self.holder.load(Ordering::Acquire));
            let busy = holder.runs_callers_code();
            let slice = match busy {
                Some(statement) => match patience.checked_sub(waited).filter(|left| !left.is_zero()) {
                    Some(left) => left.min(HOLDER_RECHECK),
                    None => return Err(Error::Busy { statement, cause: BusyCause::WriterHeld }),
                },
                None => HOLDER_RECHECK,
            };
            let started = Instant::now();
            if let Some(conn) = self.conn.try_lock_for(slice) {
                self.holder.store(by as u8, Ordering::Release);
                return Ok(Held { conn, holder: &self.holder });
            }
            if busy.is_some() {
                waited += started.elapsed();
            }
        }
    }

    /// Runs `batch` in one transaction (in more than one only when SQLite lost one midway).
    /// Returns the requests already answerable (failed ones, and ones whose transaction was
    /// lost), the ones the final commit carried, and that commit's sequence number.
    #[allow(clippy::type_complexity)]
    fn run_group(
        &self,
        conn: &Connection,
        batch: Vec<Box<dyn Request>>,
    ) -> (Vec<(Box<dyn Request>, Result<()>)>, Vec<Box<dyn Request>>, Result<u64>) {
        let mut answered = Vec::new();
        let mut carried: Vec<Box<dyn Request>> = Vec::with_capacity(batch.len());
        let mut open = false;
        // A failed BEGIN (busy past the timeout, poisoned) fails the rest of the batch: each
        // retrying it would wait out the busy timeout again.
        let mut cannot_begin: Option<Error> = None;
        for mut request in batch {
            if !open && cannot_begin.is_none() {
                match self.check_usable().and_then(|()| exec(conn, "BEGIN IMMEDIATE")) {
                    Ok(()) => open = true,
                    Err(e) => cannot_begin = Some(e),
                }
            }
            if let Some(e) = &cannot_begin {
                request.fail(e.clone());
                answered.push((request, Ok(())));
                continue;
            }
            let ok = if carried.is_empty() { request.run(conn) } else { run_in_savepoint(conn, &mut *request) };
            if ok {
                carried.push(request);
                continue;
            }
            if conn.is_autocommit() {
                // SQLite rolled the whole transaction back (disk full, I/O error in the
                // middle): the work carried so far is gone, so those requests fail too.
                let cause = request.failure().unwrap_or_else(|| Error::domain("the transaction was lost"));
                answered.extend(carried.drain(..).map(|r| (r, Err(cause.clone()))));
                open = false;
            } else if carried.is_empty() {
                // It ran first, without a savepoint: undo its partial work with the
                // transaction, which carries nobody else's.
                let _ = exec(conn, "ROLLBACK");
                open = false;
            }
            answered.push((request, Ok(())));
        }
        if !open {
            return (answered, carried, Ok(0));
        }
        let commit = self.commit(conn, carried.len());
        (answered, carried, commit)
    }

    /// Commits the open transaction, which carries `requests` requests; returns the
    /// commit's sequence number. A failed `COMMIT` never leaves the transaction open.
    fn commit(&self, conn: &Connection, requests: usize) -> Result<u64> {
        let commit = exec(conn, "COMMIT");
        if commit.is_err() && !conn.is_autocommit() {
            // COMMIT can fail and leave the transaction open (busy); never reuse it.
            let _ = conn.execute_batch("ROLLBACK");
        }
        commit?;
        self.requests.fetch_add(requests as u64, Ordering::Relaxed);
        Ok(self.committed.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// Runs `f` in a `BEGIN IMMEDIATE` transaction of its own, on this thread, and returns
    /// once it has committed (and, at `FULL`, been synced). A panicking `f` is rolled back
    /// and the panic continues: no transaction is ever left open for the next writer.
    pub(crate) fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.check_usable()?;
        let conn = self.lock(Holder::Transaction)?;
        exec(&conn, "BEGIN IMMEDIATE")?;
        let rollback = |conn: &Connection| {
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
        };
        let value = match catch_unwind(AssertUnwindSafe(|| f(&conn))) {
            // SQLite rolled the transaction back by itself and the closure carried on:
            // nothing of the transaction is left to commit.
            Ok(Ok(_)) if conn.is_autocommit() => return Err(Error::TransactionLost),
            Ok(Ok(value)) => value,
            Ok(Err(e)) => {
                rollback(&conn);
                return Err(e);
            }
            Err(panic) => {
                rollback(&conn);
                drop(conn);
                resume_unwind(panic);
            }
        };
        let seq = self.commit(&conn, 1)?;
        drop(conn);
        self.sync_through(seq)?;
        Ok(value)
    }

    /// Makes commit `seq` durable: at `FULL`, syncs the WAL unless a sync that started after
    /// that commit has already returned. One sync covers every commit finished before it.
    fn sync_through(&self, seq: u64) -> Result<()> {
        let Some(wal) = &self.wal_sync else { return Ok(()) };
        let mut state = wal.state.lock();
        if let Some(failed) = wal.failed.get() {
            return Err(poisoned(failed));
        }
        if state.synced >= seq {
            return Ok(());
        }
        let covered = self.committed.load(Ordering::SeqCst);
        let synced = match &state.file {
            Some(file) => file.sync_data(),
            None => File::open(&wal.path).and_then(|file| {
                let synced = file.sync_data();
                state.file = Some(file);
                synced
            }),
        };
        match synced {
            Ok(()) => {
                wal.syncs.fetch_add(1, Ordering::Relaxed);
                state.synced = covered;
                Ok(())
            }
            Err(e) => {
                let why = format!("syncing {} failed: {e}", wal.path.display());
                tracing::error!(%why, "the writer is poisoned: reopen the queue");
                let why = wal.failed.get_or_init(|| why);
                Err(poisoned(why))
            }
        }
    }

    /// `Err` once a sync has failed.
    fn check_usable(&self) -> Result<()> {
        match &self.wal_sync {
            Some(wal) => match wal.failed.get() {
                Some(failed) => Err(poisoned(failed)),
                None => Ok(()),
            },
            None => Ok(()),
        }
    }

    /// (transactions committed, requests they carried, WAL syncs) since open.
    pub(crate) fn commit_stats(&self) -> (u64, u64, u64) {
        let syncs = self.wal_sync.as_ref().map_or(0, |wal| wal.syncs.load(Ordering::Relaxed));
        (self.committed.load(Ordering::Relaxed), self.requests.load(Ordering::Relaxed), syncs)
    }

    /// Runs `f` on the writer connection with no transaction open (reads of the in-memory
    /// queue, checkpoints), as `by`. No transaction is ever open while the connection is free.
    pub(crate) fn exclusive<T>(&self, by: Holder, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self.lock(by)?;
        f(&conn)
    }

    /// `PRAGMA wal_checkpoint(TRUNCATE)` on the writer connection, waiting (through the busy
    /// handler) as long as the caller's patience for readers; this process's writers queue
    /// behind it meanwhile.
    ///
    /// A poisoned writer refuses: the frames a checkpoint would copy into the database are
    /// the ones whose sync failed, and the kernel may have dropped them.
    pub(crate) fn checkpoint(&self) -> Result<(i64, i64, i64)> {
        self.check_usable()?;
        self.exclusive(Holder::Checkpoint, |conn| {
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
            })
            .sql("PRAGMA wal_checkpoint(TRUNCATE)")
        })
    }
}

/// Polls `ready` for up to [`SPIN_FOR`] (yielding the CPU between rounds of 64 polls)
/// before the caller parks. A parked follower wakes later than a `NORMAL` commit takes, so
/// followers that park come back too late to join the next group, and nearly every
/// transaction carried one request. Measured with `fenceq bench` on 2 cores: requests per
/// transaction 1.2 → 2.0 and end to end +20% (30 µs gained little, 300 µs no more than
/// 100 µs); the 16 FULL callers +15% (250 and 500 µs less), though their answers wait for
/// a sync of the disk.
fn spin_briefly(ready: &AtomicBool) {
    let until = Instant::now() + SPIN_FOR;
    loop {
        for _ in 0..64 {
            if ready.load(Ordering::Acquire) {
                return;
            }
            std::hint::spin_loop();
        }
        if Instant::now() >= until {
            return;
        }
        std::thread::yield_now();
    }
}

fn poisoned(why: &str) -> Error {
    Error::from(std::io::Error::other(format!("{why}; no write is durable any more until the queue is reopened")))
}

/// One cached statement without results (transaction control).
pub(super) fn exec(conn: &Connection, statement: &'static str) -> Result<()> {
    conn.prepare_cached(statement).and_then(|mut s| s.execute([])).map(drop).sql(statement)
}

/// Runs `request` inside `SAVEPOINT fenceq_request`: released on success, rolled back alone
/// on failure so that the group's other work stays. When even that cannot be undone, the
/// whole transaction is rolled back (the leader sees `is_autocommit`).
fn run_in_savepoint(conn: &Connection, request: &mut dyn Request) -> bool {
    if let Err(e) = exec(conn, "SAVEPOINT fenceq_request") {
        request.fail(e);
        return false;
    }
    if request.run(conn) {
        match exec(conn, "RELEASE fenceq_request") {
            Ok(()) => return true,
            Err(e) => {
                request.fail(e);
                let _ = conn.execute_batch("ROLLBACK");
                return false;
            }
        }
    }
    if !conn.is_autocommit() {
        let undone = exec(conn, "ROLLBACK TO fenceq_request").and_then(|()| exec(conn, "RELEASE fenceq_request"));
        if undone.is_err() {
            let _ = conn.execute_batch("ROLLBACK");
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer() -> Writer {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (n INTEGER UNIQUE)").unwrap();
        Writer::new(conn, None)
    }

    /// Queues `work` as a follower would, without waiting; the returned slot gets the answer.
    fn queue_request<T: Send + 'static>(
        w: &Writer,
        work: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Arc<Slot<T>> {
        let slot = Slot::new();
        let mut pending = w.pending.lock();
        pending.requests.push(Box::new(Submitted { work: Some(work), result: None, panic: None, slot: slot.clone() }));
        pending.leading = true;
        slot
    }

    fn insert(conn: &Connection, n: i64) -> Result<()> {
        conn.execute("INSERT INTO t VALUES (?1)", [n]).map(drop).sql("insert")
    }

    fn rows(w: &Writer) -> Vec<i64> {
        w.exclusive(Holder::Connection, |c| {
            let mut s = c.prepare("SELECT n FROM t ORDER BY n").sql("select")?;
            let rows = s.query_map([], |r| r.get(0)).sql("select")?.collect::<rusqlite::Result<Vec<i64>>>();
            rows.sql("select")
        })
        .unwrap()
    }

    fn answer<T>(slot: &Slot<T>) -> Turn<T> {
        std::mem::replace(&mut *slot.turn.lock(), Turn::Waiting)
    }

    #[test]
    fn a_group_commits_once_and_a_failed_member_rolls_back_alone() {
        let w = writer();
        let first = queue_request(&w, |c| insert(c, 1));
        // Writes 2, then fails on the duplicate 1: its savepoint undoes the 2 as well.
        let failing = queue_request(&w, |c| insert(c, 2).and_then(|()| insert(c, 1)));
        let last = queue_request(&w, |c| insert(c, 3));
        w.lead();
        assert!(matches!(answer(&first), Turn::Answered(Ok(()))));
        assert!(matches!(answer(&failing), Turn::Answered(Err(_))));
        assert!(matches!(answer(&last), Turn::Answered(Ok(()))));
        assert_eq!(rows(&w), vec![1, 3]);
        assert_eq!(w.commit_stats(), (1, 2, 0), "one transaction carried both successful requests");
        assert!(!w.pending.lock().leading, "nobody left to lead");
    }

    #[test]
    fn a_failed_first_member_does_not_take_the_group_down() {
        let w = writer();
        w.exclusive(Holder::Connection, |c| insert(c, 1)).unwrap();
        // Runs first (no savepoint): writes 5, then fails; the whole transaction goes.
        let failing = queue_request(&w, |c| insert(c, 5).and_then(|()| insert(c, 1)));
        let next = queue_request(&w, |c| insert(c, 6));
        w.lead();
        assert!(matches!(answer(&failing), Turn::Answered(Err(_))));
        assert!(matches!(answer(&next), Turn::Answered(Ok(()))));
        assert_eq!(rows(&w), vec![1, 6]);
    }

    #[test]
    fn a_panicking_member_is_rolled_back_and_its_panic_goes_back_to_its_thread() {
        let w = writer();
        let before = queue_request(&w, |c| insert(c, 1));
        let panicking = queue_request(&w, |c| -> Result<()> {
            insert(c, 2)?;
            panic!("boom")
        });
        let after = queue_request(&w, |c| insert(c, 3));
        w.lead();
        assert!(matches!(answer(&before), Turn::Answered(Ok(()))));
        assert!(matches!(answer(&panicking), Turn::Panicked(_)));
        assert!(matches!(answer(&after), Turn::Answered(Ok(()))));
        assert_eq!(rows(&w), vec![1, 3]);
    }

    #[test]
    fn past_the_group_limit_the_first_waiting_request_is_handed_the_lead() {
        let w = writer();
        let slots: Vec<_> = (0..MAX_GROUP as i64 + 2).map(|n| queue_request(&w, move |c| insert(c, n))).collect();
        w.lead();
        assert!(slots[..MAX_GROUP].iter().all(|s| matches!(answer(s), Turn::Answered(Ok(())))));
        assert!(matches!(answer(&slots[MAX_GROUP]), Turn::Lead), "the next in line leads");
        assert!(matches!(answer(&slots[MAX_GROUP + 1]), Turn::Waiting), "the rest wait for it");
        w.lead();
        assert!(matches!(answer(&slots[MAX_GROUP]), Turn::Answered(Ok(()))));
        assert!(matches!(answer(&slots[MAX_GROUP + 1]), Turn::Answered(Ok(()))));
        assert_eq!(rows(&w).len(), MAX_GROUP + 2);
        assert_eq!(w.commit_stats().0, 2);
    }

    #[test]
    fn a_busy_begin_fails_the_whole_batch_at_once() {
        // Counts BEGIN attempts that met the lock; gives up at once.
        static BUSY_CALLS: AtomicU64 = AtomicU64::new(0);
        fn give_up(_: i32) -> bool {
            BUSY_CALLS.fetch_add(1, Ordering::SeqCst);
            false
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("busy.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (n INTEGER UNIQUE)").unwrap();
        conn.busy_handler(Some(give_up)).unwrap();
        let w = Writer::new(conn, None);
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let slots: Vec<_> = (0..20).map(|n| queue_request(&w, move |c| insert(c, n))).collect();
        w.lead();
        assert_eq!(BUSY_CALLS.load(Ordering::SeqCst), 1, "one busy wait for the batch, not one per request");
        for slot in &slots {
            assert!(matches!(answer(slot), Turn::Answered(Err(Error::Busy { .. }))));
        }
        other.execute_batch("ROLLBACK").unwrap();
    }
}
