//! The queue builder (the settings every store reads, and the chosen store's own options),
//! and the retention policy.

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::store::default::{DefaultOptions, Synchronous};
use crate::store::{Settings, StoreOptions};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long terminal rows are kept before pruning.
pub(crate) const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Rows deleted per prune transaction, so that a large prune never holds the write lock long.
pub(crate) const DEFAULT_PRUNE_BATCH: u32 = 1_000;

/// Builder for a [`Queue`](crate::Queue): the settings every store reads, and the store's
/// own options `O`, which decide which store [`open`](QueueBuilder::open) opens (SQLite's
/// [`SqliteOptions`](crate::SqliteOptions) unless [`store`](QueueBuilder::store) names
/// others).
///
/// ## Defaults
///
/// - store: SQLite, in memory until [`path`](QueueBuilder::path) names a file (see
///   [`SqliteOptions`](crate::SqliteOptions) for its own defaults)
/// - pool size: 4 connections (on SQLite, readers beside the one writer; on PostgreSQL the
///   pool holds up to twice as many)
/// - busy timeout: 5 seconds
/// - clock: [`SystemClock`](crate::SystemClock)
/// - payload limit: 1 MiB
/// - attempts per job: 5
/// - read-only: false; upgrade: true
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
pub struct QueueBuilder<O: StoreOptions = DefaultOptions> {
    /// The store's own options.
    pub(crate) options: O,
    /// What every store reads.
    pub(crate) settings: Settings,
}

impl Default for QueueBuilder {
    fn default() -> Self {
        QueueBuilder::with_options(DefaultOptions::default())
    }
}

impl<O: StoreOptions> QueueBuilder<O> {
    /// A builder with the default settings and the store options `options` (as
    /// `Queue::builder().store(options)`).
    pub fn with_options(options: O) -> Self {
        QueueBuilder { options, settings: Settings::default() }
    }

    /// Opens the queue on the store `options` name instead, keeping every setting made so
    /// far that all stores read.
    pub fn store<P: StoreOptions>(self, options: P) -> QueueBuilder<P> {
        QueueBuilder { options, settings: self.settings }
    }

    /// Connections in the store's pool (1..=64). On SQLite, reader connections (the writer
    /// has one of its own; an in-memory queue has a single connection whatever this says).
    /// On PostgreSQL the pool holds up to twice this many.
    pub fn pool_size(mut self, size: u32) -> Self {
        self.settings.pool_size = size;
        self
    }

    /// How long a write waits for another process's lock before failing with `Busy`.
    ///
    /// On SQLite it also bounds a call's wait for the queue's writer while another thread's
    /// closure holds it (`Queue::transaction`, `with_ownership`, `complete_with`, an
    /// in-memory queue's `with_connection`), since a closure that waits for that call would
    /// never end; fenceq's own group commits are waited for without this bound. On
    /// PostgreSQL it is each session's `lock_timeout`, and with the connect timeout it
    /// bounds the wait for a pooled connection.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.settings.busy_timeout = timeout;
        self
    }

    /// The clock every lease and deadline reads (a [`ManualClock`](crate::ManualClock) in
    /// tests). On PostgreSQL this is for tests only: with the default system clock every
    /// host measures time by the database server's clock, and an injected clock replaces
    /// that for every host that uses it (see [`Clock`]).
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.settings.clock = Arc::new(clock);
        self
    }

    /// The largest payload `enqueue` accepts, in bytes.
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.settings.max_payload = bytes;
        self
    }

    /// Attempts per job when `NewJob::max_attempts` is not set.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.settings.max_attempts = attempts;
        self
    }

    /// Opens an existing database for reading only (inspection tools): nothing is created,
    /// switched or upgraded, and every write fails with `ReadOnly`. A database at an older
    /// schema version is refused with `SchemaTooOld` instead of being upgraded.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.settings.read_only = read_only;
        self
    }

    /// Whether `open` creates a missing database and upgrades an older schema (the default,
    /// true). With false, a database at an older schema (or without one) is refused with
    /// `SchemaTooOld` and left untouched, and a missing one is not created: for operator
    /// tools that change rows, which must not upgrade a database under a running older
    /// application (`fenceq migrate` is the explicit upgrade).
    pub fn upgrade(mut self, upgrade: bool) -> Self {
        self.settings.upgrade = upgrade;
        self
    }

    /// Opens the queue on the store the options name, applying pending schema upgrades.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for bad settings (a pool size outside 1..=64, a payload limit outside
    /// 1 byte..=512 MiB, an attempt budget out of range, a busy timeout over an hour, or a
    /// store option its store refuses), and the store's errors while opening.
    ///
    /// On SQLite: `InvalidInput` for a path that names a directory, a FIFO, a device or
    /// anything else that is not a regular file (never opened), and for an in-memory queue
    /// opened read-only; `NotADatabase`, `SchemaTooNew`, `SchemaTooOld` (read only, or
    /// without [`QueueBuilder::upgrade`]), `ReadOnly`, `Busy`; `Io`, naming the file and
    /// what failed, when a new file or its directory cannot be created.
    ///
    /// On PostgreSQL: see `PostgresOptions` (feature `postgres`).
    pub fn open(self) -> Result<crate::Queue<O::Store>> {
        self.validate()?;
        let store = self.options.open_store(&self.settings)?;
        let Settings { clock, max_payload, max_attempts, .. } = self.settings;
        Ok(crate::Queue::from_parts(store, clock, max_payload, max_attempts))
    }

    /// The checks of the settings every store reads.
    fn validate(&self) -> Result<()> {
        let Settings { pool_size, max_payload, max_attempts, busy_timeout, .. } = self.settings;
        if pool_size == 0 || pool_size > 64 {
            return Err(Error::invalid("pool size", format!("{} is not in 1..=64", pool_size)));
        }
        if max_payload == 0 || max_payload > 512 << 20 {
            return Err(Error::invalid("payload limit", format!("{} is not in 1..=512 MiB", max_payload)));
        }
        crate::validate::check_attempts(max_attempts)?;
        if busy_timeout > Duration::from_secs(3600) {
            return Err(Error::invalid("busy timeout", "longer than an hour"));
        }
        Ok(())
    }
}

/// The default store's own options, set through the builder as before stores had options of
/// their own (see [`SqliteOptions`](crate::SqliteOptions)).
impl QueueBuilder<DefaultOptions> {
    /// The database file (created with its directory if missing). Without a path the queue
    /// is in memory. A `file:` URI is accepted too (for example `file:bot.db?mode=ro`).
    pub fn path(mut self, path: impl Into<PathBuf>) -> Self {
        self.options = self.options.path(path);
        self
    }

    /// The durability setting; see [`Synchronous`].
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.options = self.options.synchronous(synchronous);
        self
    }

    /// Caps the database at this many pages on every pooled connection (`PRAGMA
    /// max_page_count`), so a runaway producer gets `StorageFull` before the disk does.
    pub fn max_page_count(mut self, pages: u64) -> Self {
        self.options = self.options.max_page_count(pages);
        self
    }
}

/// What `prune` deletes: completed and cancelled jobs settled, and acknowledged exhaustions
/// acknowledged, longer than `older_than` ago. Unknown, pending, running, waiting and
/// unacknowledged exhausted jobs are never pruned.
///
/// Pruning also ends a key's deduplication: once its row is gone, the same key may be
/// enqueued again as a new job.
///
/// ## Defaults
///
/// - rows older than 7 days
/// - 1,000 rows per delete transaction
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
