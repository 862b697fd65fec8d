//! The `Queue` handle, what every store shares above the seam: the handle itself, its clock
//! and limits, the wakers of this process's worker pools, and the caller's transactions.
//! Each group of operations has its own file: intake, claims and owned writes, settles,
//! exhaustions and unknowns (with the operator's changes), paused queues, inspection, the
//! registry of periodic jobs (feature `schedule`); reaping, pruning, checkpoints and
//! enqueueing the periodic jobs' ticks are the maintenance services' (`maintenance/`).
//!
//! Every operation validates its input (`validate.rs`), runs the store's transitions inside
//! one transaction of the store (`Store::submit` for the hot paths, `Store::write` when a
//! caller's closure runs), and turns what the transitions report into the public result
//! (`fence.rs` says what a guarded miss means).

mod backoff;
mod claims;
mod exhaustions;
pub(crate) mod fence;
mod groups;
mod inspect;
pub(crate) mod intake;
mod intake_group;
mod limits;
pub(crate) mod operator;
mod pause;
pub(crate) mod retry;
#[cfg(feature = "schedule")]
pub(crate) mod schedules;
pub(crate) mod settle;

pub use inspect::ListFilter;

use crate::clock::Clock;
use crate::config::QueueBuilder;
use crate::error::Result;
use crate::report::CommitStats;
use crate::store::DefaultStore;
use crate::store::{scope, Store};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use std::path::Path;
use std::sync::Arc;

/// A handle to one queue database: cheap to clone, `Send + Sync`, shared by threads.
///
/// ```
/// use fenceq::{NewJob, Queue};
/// use std::time::Duration;
/// let queue = Queue::open_in_memory()?;
/// queue.enqueue(NewJob::new("telegram", b"hello".to_vec()).key("update:1"))?;
/// let job = queue.claim("telegram", "worker-1", Duration::from_secs(30))?.expect("a due job");
/// queue.complete(&job.token())?;
/// # Ok::<(), fenceq::Error>(())
/// ```
pub struct Queue<S: Store = DefaultStore> {
    pub(crate) shared: Arc<Shared<S>>,
}

/// What every clone of one `Queue` shares.
#[derive(Debug)]
pub(crate) struct Shared<S> {
    pub(crate) store: S,
    pub(crate) clock: Arc<dyn Clock>,
    /// The limits every operation checks before it touches the store.
    pub(crate) max_payload: usize,
    pub(crate) max_attempts: u32,
    /// Concurrent `enqueue` calls sharing a statement, where the store asks for it.
    pub(crate) intake: intake_group::IntakeGroup,
    /// Shared with the store's watcher ([`Store::watch`]), which holds it weakly.
    wakers: Arc<Mutex<Vec<Waker>>>,
    /// Whether the store's watcher was registered (once, with the first pool).
    watched: std::sync::Once,
    /// Per queue, when a limit that held its jobs back at this handle's last claim opens
    /// again (the store's clock): how long a pool of it sleeps.
    limit_opens: Mutex<std::collections::HashMap<String, i64>>,
    /// The periodic jobs registered on this handle, by name (`schedules.rs`).
    #[cfg(feature = "schedule")]
    pub(crate) schedules: Mutex<std::collections::BTreeMap<String, Arc<schedules::Periodic>>>,
}

impl<S: Store> Shared<S> {
    /// Keeps what a claim of `queue` said about its limits, and hands on its jobs.
    pub(crate) fn claimed(&self, queue: &str, claims: crate::store::Claims) -> Vec<crate::job::Claimed> {
        let mut opens = self.limit_opens.lock();
        match claims.limit_opens_at {
            Some(at) => {
                opens.insert(queue.to_string(), at);
            }
            None => {
                opens.remove(queue);
            }
        }
        claims.jobs
    }

    /// When a limit that held `queue`'s jobs back at the last claim opens again, if one did.
    pub(crate) fn limit_opens_at(&self, queue: &str) -> Option<i64> {
        self.limit_opens.lock().get(queue).copied()
    }

    /// The store's estimate of now outside a transaction ([`Store::now_estimate`]), for
    /// advisory uses only.
    pub(crate) fn now(&self) -> i64 {
        self.store.now_estimate(&*self.clock)
    }

    /// The instant `tx` judges time by ([`Store::now`]): the queue's clock, or on
    /// PostgreSQL with the system clock, the server's.
    pub(crate) fn now_in(&self, tx: &S::Tx) -> Result<i64> {
        S::now(tx, &*self.clock)
    }

    /// A claim judged by the queue's clock read afresh ([`Store::claim_fresh`]): a claim must
    /// find due what other processes made due.
    ///
    /// Each claim's instant ([`Claimed::claimed_at`](crate::Claimed::claimed_at)) is read
    /// off its lease: every store grants a claim's lease from the instant it judged the
    /// claim by (the one its limits count), for exactly the lease's length.
    pub(crate) fn claim_in(&self, tx: &S::Tx, request: crate::store::FreshClaim<'_>) -> Result<crate::store::Claims> {
        let lease_ms = request.lease_ms;
        let mut claims = S::claim_fresh(tx, &*self.clock, request)?;
        for job in &mut claims.jobs {
            job.claimed_at = job.lease_until.saturating_sub(lease_ms);
        }
        Ok(claims)
    }
}

/// A worker pool's wake-up channel for one queue.
type Waker = (String, Sender<()>);

/// Wakes the pools of `queue` (of every queue for `None`), forgetting pools that are gone.
fn wake_in(wakers: &Mutex<Vec<Waker>>, queue: Option<&str>) {
    wakers.lock().retain(|(q, tx)| {
        queue.is_some_and(|queue| q != queue)
            || !matches!(tx.try_send(()), Err(crossbeam_channel::TrySendError::Disconnected(_)))
    });
}

impl<S: Store> Clone for Queue<S> {
    fn clone(&self) -> Self {
        Queue { shared: self.shared.clone() }
    }
}

impl<S: Store> std::fmt::Debug for Queue<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("store", &self.shared.store).finish_non_exhaustive()
    }
}

const _: fn() = || {
    fn check<T: Clone + Send + Sync>() {}
    check::<Queue>();
};

/// Opening a queue on the default store, SQLite.
impl Queue {
    /// Opens (creating if needed) the queue database at `path` with default settings.
    ///
    /// # Errors
    ///
    /// `NotADatabase`, `SchemaTooNew` (the file is left untouched), `ReadOnly`, `Busy`;
    /// `InvalidInput` when `path` names a directory, a FIFO, a device or anything else that
    /// is not a regular file; `Io` (naming the file and what failed) when the file or its
    /// directory cannot be created, `Pool` when the reader connections cannot be opened.
    pub fn open(path: impl AsRef<Path>) -> Result<Queue> {
        Queue::builder().path(path.as_ref()).open()
    }

    /// An in-memory queue (one shared connection), for tests and throwaway work.
    ///
    /// # Errors
    ///
    /// No input can make it fail (the default settings are valid): only an SQLite failure
    /// creating the database, such as `OutOfMemory`.
    pub fn open_in_memory() -> Result<Queue> {
        Queue::builder().open()
    }

    /// A builder for every setting; see [`QueueBuilder`].
    pub fn builder() -> QueueBuilder {
        QueueBuilder::default()
    }
}

impl<S: Store> Queue<S> {
    /// A queue on an open store (every store's opener ends here).
    pub(crate) fn from_parts(store: S, clock: Arc<dyn Clock>, max_payload: usize, max_attempts: u32) -> Queue<S> {
        let shared = Shared {
            store,
            clock,
            max_payload,
            max_attempts,
            intake: intake_group::IntakeGroup::default(),
            wakers: Arc::default(),
            watched: std::sync::Once::new(),
            limit_opens: Mutex::new(std::collections::HashMap::new()),
            #[cfg(feature = "schedule")]
            schedules: Mutex::default(),
        };
        Queue { shared: Arc::new(shared) }
    }

    pub(crate) fn store(&self) -> &S {
        &self.shared.store
    }

    /// The clock's now, in ms since the epoch. On PostgreSQL with the default system clock
    /// it is the server's clock, as last measured (see [`Clock`](crate::Clock)): an estimate,
    /// while every decision the queue makes reads the server's clock in its transaction.
    pub fn now_ms(&self) -> i64 {
        self.shared.now()
    }

    /// The instant the store judges time by inside `tx` (ms since the epoch): the queue's
    /// clock, or on PostgreSQL with the system clock the server's, as the transaction reads
    /// it. Inside an owned write ([`Queue::with_ownership`], [`Queue::complete_with`], a
    /// handler's [`Attempt::settle_with`](crate::Attempt::settle_with)) this is the clock the
    /// lease, the limits and [`Claimed::claimed_at`](crate::Claimed::claimed_at) are on, so a
    /// record of "sent at" is comparable with them (a host's own clock may differ).
    ///
    /// # Errors
    ///
    /// On PostgreSQL, the server's error when the transaction cannot read its clock (the
    /// connection lost, the transaction aborted).
    pub fn now_in(&self, tx: &S::Tx) -> Result<i64> {
        self.shared.now_in(tx)
    }

    /// The instant the store judges time by, read in a transaction of its own (the clock's
    /// now; on PostgreSQL with the system clock, the server's).
    pub(crate) fn store_now(&self) -> Result<i64> {
        self.store().read(|tx| self.shared.now_in(tx))
    }

    /// Runs `f` in a write transaction of the queue's and commits what it did: the
    /// application's domain writes beside the queue, and jobs added with
    /// [`Queue::enqueue_tx`] (the outbox pattern). Returning `Err` (or panicking) rolls
    /// everything back. Pools of the queues it enqueued to are woken after the commit.
    ///
    /// On SQLite: a `BEGIN IMMEDIATE` transaction on the queue's own writer, so the outbox
    /// needs no second writer of the file. On PostgreSQL: a `READ COMMITTED` transaction on a
    /// pooled connection (the closure gets a `PgTx`).
    ///
    /// ```
    /// # use fenceq::{NewJob, Queue};
    /// let queue = Queue::open_in_memory()?;
    /// queue.transaction(|tx| {
    ///     tx.execute_batch("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY)")?;
    ///     tx.execute("INSERT INTO orders (id) VALUES (7)", [])?;
    ///     queue.enqueue_tx(tx, NewJob::new("emails", b"order 7 confirmed".to_vec()).key("order:7"))
    /// })?;
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// Keep the closure short. On SQLite it holds the file's only write lock, so no lease of
    /// this process can be renewed while it runs; on PostgreSQL it holds its rows' locks and
    /// a pooled connection. Inside it, use the transaction it gets, never the queue's own
    /// write methods.
    ///
    /// # Errors
    ///
    /// The closure's own error; `NestedWrite` for a queue write from inside it (or for this
    /// call from inside another queue closure); `TransactionLost` when the store rolled the
    /// transaction back while the closure carried on; `Busy` when another process held the
    /// write lock (on PostgreSQL, a row lock) past the busy timeout, or (on SQLite) another
    /// thread's closure held the queue's writer that long; `ConnectionLost` (on PostgreSQL)
    /// when the server went away; `StorageFull`, `ReadOnly` when the database cannot be
    /// written. A queue call made on another thread while this closure runs waits for the
    /// closure: if the closure waits for that call, the call fails with `Busy` after the
    /// busy timeout, naming the closure's transaction, instead of both waiting forever.
    pub fn transaction<T>(&self, f: impl FnOnce(&S::Tx) -> Result<T>) -> Result<T> {
        self.write_waking(f)
    }

    /// [`Store::write`], then wakes the pools of the queues `enqueue_tx` added to in it.
    pub(crate) fn write_waking<T>(&self, f: impl FnOnce(&S::Tx) -> Result<T>) -> Result<T> {
        let result = self.store().write(f);
        let queues = scope::take_enqueued_in_write();
        if result.is_ok() {
            queues.iter().for_each(|q| self.wake(q));
        }
        result
    }

    /// Registers a wake-up channel for `queue` (the worker pool's dispatcher).
    pub(crate) fn subscribe(&self, queue: &str) -> Receiver<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.shared.wakers.lock().push((queue.to_string(), tx));
        self.shared.watched.call_once(|| {
            let wakers = Arc::downgrade(&self.shared.wakers);
            self.store().watch(Arc::new(move |queue: Option<&str>| {
                if let Some(wakers) = wakers.upgrade() {
                    wake_in(&wakers, queue);
                }
            }));
        });
        rx
    }

    pub(crate) fn wake(&self, queue: &str) {
        wake_in(&self.shared.wakers, Some(queue));
    }

    /// How this handle's writes were grouped into transactions so far. On SQLite, group
    /// commit combines concurrent writers of one process into one `BEGIN IMMEDIATE`
    /// transaction on the queue's writer; on PostgreSQL, concurrent `enqueue` calls of one
    /// handle share one statement and commit (intake groups), and every other write is a
    /// transaction of its own.
    pub fn commit_stats(&self) -> CommitStats {
        let mut stats = self.store().commit_stats();
        // Callers whose enqueue rode in another caller's transaction (`intake_group.rs`).
        stats.requests += self.shared.intake.joined();
        stats
    }

    /// The schema version of the open database (equal to [`SCHEMA_VERSION`](crate::SCHEMA_VERSION)
    /// once open has upgraded it).
    ///
    /// # Errors
    ///
    /// Only read errors: `Pool` (no pooled connection came free in time), `Busy`; on an
    /// in-memory queue, `NestedWrite` from inside a closure holding its transaction or
    /// connection.
    pub fn schema_version(&self) -> Result<i64> {
        self.store().read(S::schema_version)
    }

    /// Runs `f` on one of the queue's pooled connections: for the application's own reads
    /// and schema (domain tables beside the queue). Writes made here do not take the
    /// queue's in-process write lock; prefer [`Queue::with_ownership`] for domain writes.
    ///
    /// # Errors
    ///
    /// The closure's own error (the store's errors typed as for any statement); `Pool` when
    /// no pooled connection came free in time. On an in-memory queue the closure holds the
    /// queue's only connection: this call from inside a closure holding the queue's
    /// transaction or connection is `NestedWrite`, and so is any queue call inside the
    /// closure that needs a connection of its own.
    pub fn with_connection<T>(&self, f: impl FnOnce(&S::Tx) -> Result<T>) -> Result<T> {
        self.store().read(f)
    }
}
