//! Builder settings, their defaults, and the retention policy.

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Reader connections in the pool (the writer has one connection of its own). Defaults to 4.
pub const DEFAULT_POOL_SIZE: u32 = 4;
/// How long a write waits for another process's write lock. Defaults to 5 seconds.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest payload accepted. Defaults to 1 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 1 << 20;
/// Attempts per job unless `NewJob::max_attempts` says otherwise. Defaults to 5.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// Longest queue name and worker id, in bytes.
pub const MAX_NAME_LEN: usize = 128;
/// Longest idempotency key, in bytes.
pub const MAX_KEY_LEN: usize = 512;
/// Longest lease a claim or renewal may ask for.
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 3600);
/// Largest attempt budget.
pub const MAX_ATTEMPTS_LIMIT: u32 = 10_000;
/// How long terminal rows are kept before pruning. Defaults to 7 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Rows deleted per prune transaction, so that a large prune never holds the write lock long.
pub const DEFAULT_PRUNE_BATCH: u32 = 1_000;

/// SQLite's `synchronous` setting: what survives a power loss.
///
/// In WAL mode both settings survive an application crash (a killed process) with every
/// committed change. `Normal` may lose the most recent commits on a power loss or OS crash
/// (the file stays consistent); `Full` makes every acknowledged write survive those too, at
/// the price of an fsync of the WAL.
///
/// At `Full` the queue's writer syncs the WAL file itself, outside its write lock: the next
/// group of writes runs while this one's sync is on its way to the disk, and one sync covers
/// every commit that finished before it started. A call still returns `Ok` only after a sync
/// covering its commit has returned. Two consequences:
///
/// - another connection can read a commit up to one sync before it is durable (a power loss
///   in that window loses a write that nobody was told had succeeded, but someone may have
///   seen it); every write of this queue, claims included, is answered only after the sync,
///   so a worker never acts on a job whose intake could still be lost;
/// - a failed sync (`Error::Io`) poisons the queue handle: the kernel may have dropped the
///   unsynced pages, so no later sync could prove anything, and every later write fails with
///   `Error::Io` until the queue is reopened. The failed write itself may or may not have
///   reached the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// `synchronous=NORMAL` (the default).
    #[default]
    Normal,
    /// Every acknowledged write is synced to the disk (see above).
    Full,
}

impl Synchronous {
    /// The PRAGMA value (`NORMAL` or `FULL`).
    pub fn pragma(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// Where the queue lives.
#[derive(Debug, Clone)]
pub(crate) enum Location {
    File(PathBuf),
    Memory,
}

/// Builder for a [`Queue`](crate::Queue).
///
/// ## Defaults
///
/// - pool size: [`DEFAULT_POOL_SIZE`]
/// - synchronous: [`Synchronous::Normal`]
/// - busy timeout: [`DEFAULT_BUSY_TIMEOUT`]
/// - clock: [`SystemClock`]
/// - payload limit: [`DEFAULT_MAX_PAYLOAD`]
/// - attempts per job: [`DEFAULT_MAX_ATTEMPTS`]
/// - connect timeout (PostgreSQL): the URL's `connect_timeout`, else
///   `POSTGRES_CONNECT_TIMEOUT` (10 seconds)
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use fenceq::{Queue, Synchronous};
/// let queue = Queue::builder()
///     .path(dir.path().join("bot.db"))
///     .pool_size(8)
///     .synchronous(Synchronous::Full)
///     .open()?;
/// # Ok::<(), fenceq::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct QueueBuilder {
    pub(crate) location: Location,
    pub(crate) pool_size: u32,
    pub(crate) synchronous: Synchronous,
    pub(crate) busy_timeout: Duration,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) max_payload: usize,
    pub(crate) max_attempts: u32,
    pub(crate) max_page_count: Option<u64>,
    pub(crate) read_only: bool,
    pub(crate) upgrade: bool,
    /// The PostgreSQL server (`QueueBuilder::url`), shown without its password.
    #[cfg(feature = "postgres")]
    pub(crate) url: Option<crate::store::postgres::Url>,
    /// The PostgreSQL schema (`QueueBuilder::schema`).
    #[cfg(feature = "postgres")]
    pub(crate) schema: Option<String>,
    /// How long opening a PostgreSQL connection may take (`QueueBuilder::connect_timeout`;
    /// `None`: the URL's `connect_timeout`, else `POSTGRES_CONNECT_TIMEOUT`).
    #[cfg(feature = "postgres")]
    pub(crate) connect_timeout: Option<Duration>,
}

impl Default for QueueBuilder {
    fn default() -> Self {
        QueueBuilder {
            location: Location::Memory,
            pool_size: DEFAULT_POOL_SIZE,
            synchronous: Synchronous::Normal,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            clock: Arc::new(SystemClock),
            max_payload: DEFAULT_MAX_PAYLOAD,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            max_page_count: None,
            read_only: false,
            upgrade: true,
            #[cfg(feature = "postgres")]
            url: None,
            #[cfg(feature = "postgres")]
            schema: None,
            #[cfg(feature = "postgres")]
            connect_timeout: None,
        }
    }
}

impl QueueBuilder {
    /// The database file (created with its directory if missing). Without a path the queue
    /// is in memory. A `file:` URI is accepted too (for example `file:bot.db?mode=ro`).
    pub fn path(mut self, path: impl Into<PathBuf>) -> Self {
        self.location = Location::File(path.into());
        self
    }

    /// Reader connections (at least 1; the writer has one of its own). An in-memory queue
    /// has a single connection whatever this says.
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// The durability setting; see [`Synchronous`].
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// How long a write waits for another process's lock before failing with `Busy`. On
    /// SQLite it also bounds a call's wait for the queue's writer while another thread's
    /// closure holds it (`Queue::transaction`, `with_ownership`, `complete_with`, an
    /// in-memory queue's `with_connection`), since a closure that waits for that call would
    /// never end; fenceq's own group commits are waited for without this bound.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// The clock every lease and deadline reads (a [`ManualClock`](crate::ManualClock) in
    /// tests). On PostgreSQL this is for tests only: with the default system clock every
    /// host measures time by the database server's clock, and an injected clock replaces
    /// that for every host that uses it (see [`Clock`]).
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The largest payload `enqueue` accepts, in bytes.
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// Attempts per job when `NewJob::max_attempts` is not set.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Caps the database at this many pages on every pooled connection (`PRAGMA
    /// max_page_count`), so a runaway producer gets `StorageFull` before the disk does.
    pub fn max_page_count(mut self, pages: u64) -> Self {
        self.max_page_count = Some(pages);
        self
    }

    /// Opens an existing database for reading only (inspection tools): nothing is created,
    /// switched or upgraded, and every write fails with `ReadOnly`. A database at an older
    /// schema version is refused with `SchemaTooOld` instead of being upgraded.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Whether `open` creates a missing database and upgrades an older schema (the default,
    /// true). With false, a file at an older schema (or without one) is refused with
    /// `SchemaTooOld` and left untouched, and a missing file is not created: for operator
    /// tools that change rows, which must not upgrade a file under a running older
    /// application (`fenceq migrate` is the explicit upgrade).
    pub fn upgrade(mut self, upgrade: bool) -> Self {
        self.upgrade = upgrade;
        self
    }

    /// Opens the queue, applying pending schema upgrades.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for bad settings, and for a path that names a directory, a FIFO, a
    /// device or anything else that is not a regular file (never opened); `NotADatabase`,
    /// `SchemaTooNew`, `SchemaTooOld` (read only, or without [`QueueBuilder::upgrade`]),
    /// `ReadOnly`, `Busy`; `Io`, naming the file and what failed, when a new file or its
    /// directory cannot be created.
    pub fn open(self) -> Result<crate::Queue> {
        self.validate()?;
        let store = crate::store::sqlite::SqliteStore::open(&self)?;
        Ok(crate::Queue::from_parts(store, self.clock.clone(), self.max_payload, self.max_attempts))
    }

    fn validate(&self) -> Result<()> {
        self.validate_common()?;
        if self.read_only && matches!(self.location, Location::Memory) {
            return Err(Error::invalid("read only", "an in-memory queue cannot be opened read-only"));
        }
        Ok(())
    }

    /// The checks of settings every store reads.
    pub(crate) fn validate_common(&self) -> Result<()> {
        if self.pool_size == 0 || self.pool_size > 64 {
            return Err(Error::invalid("pool size", format!("{} is not in 1..=64", self.pool_size)));
        }
        if self.max_payload == 0 || self.max_payload > 512 << 20 {
            return Err(Error::invalid("payload limit", format!("{} is not in 1..=512 MiB", self.max_payload)));
        }
        crate::validate::check_attempts(self.max_attempts)?;
        if self.busy_timeout > Duration::from_secs(3600) {
            return Err(Error::invalid("busy timeout", "longer than an hour"));
        }
        Ok(())
    }
}

/// What `prune` deletes: completed and cancelled jobs settled, and acknowledged exhaustions
/// acknowledged, longer than `older_than` ago. Unknown, pending, running, waiting and
/// unacknowledged exhausted jobs are never pruned.
///
/// Pruning also ends a key's deduplication: once its row is gone, the same key may be
/// enqueued again as a new job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Age after settling (or acknowledging) at which a row may be deleted. Defaults to 7 days.
    pub older_than: Duration,
    /// Rows per delete transaction. Defaults to 1,000.
    pub batch_size: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Retention { older_than: DEFAULT_RETENTION, batch_size: DEFAULT_PRUNE_BATCH }
    }
}

impl Retention {
    /// Deletes rows older than `older_than`, in default batches.
    pub fn older_than(older_than: Duration) -> Self {
        Retention { older_than, ..Retention::default() }
    }

    /// `InvalidInput` unless the batch size is in 1..=100,000.
    pub(crate) fn check(&self) -> crate::Result<()> {
        crate::validate::check_prune_batch(self.batch_size)
    }
}
