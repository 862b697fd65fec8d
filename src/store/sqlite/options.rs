//! SQLite's own settings: where the database lives, what survives a power loss, and a cap
//! on its size. The settings every store reads (clock, limits, pool size, busy timeout,
//! read-only, upgrade) are the builder's [`Settings`].

use crate::error::{Error, Result};
use crate::store::{Settings, StoreOptions};
use std::path::PathBuf;

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
#[derive(Debug, Clone, Default)]
pub(crate) enum Location {
    File(PathBuf),
    #[default]
    Memory,
}

/// The SQLite store's own settings, the default store's: a
/// [`QueueBuilder`](crate::QueueBuilder) starts with them, and its `path`, `synchronous`
/// and `max_page_count` set them.
///
/// ## Defaults
///
/// - location: in memory (one shared connection), until a path is given
/// - synchronous: [`Synchronous::Normal`]
/// - page limit: none (SQLite's own maximum)
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use fenceq::{Queue, SqliteOptions, Synchronous};
/// let options = SqliteOptions::default().path(dir.path().join("bot.db")).synchronous(Synchronous::Full);
/// let queue = Queue::builder().store(options).pool_size(8).open()?;
/// # Ok::<(), fenceq::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct SqliteOptions {
    pub(crate) location: Location,
    pub(crate) synchronous: Synchronous,
    pub(crate) max_page_count: Option<u64>,
}

impl SqliteOptions {
    /// The database file (created with its directory if missing). Without a path the queue
    /// is in memory. A `file:` URI is accepted too (for example `file:bot.db?mode=ro`).
    pub fn path(mut self, path: impl Into<PathBuf>) -> Self {
        self.location = Location::File(path.into());
        self
    }

    /// The durability setting; see [`Synchronous`].
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Caps the database at this many pages on every pooled connection (`PRAGMA
    /// max_page_count`), so a runaway producer gets `StorageFull` before the disk does.
    pub fn max_page_count(mut self, pages: u64) -> Self {
        self.max_page_count = Some(pages);
        self
    }
}

impl StoreOptions for SqliteOptions {
    type Store = super::SqliteStore;

    fn open_store(&self, settings: &Settings) -> Result<super::SqliteStore> {
        if settings.read_only && matches!(self.location, Location::Memory) {
            return Err(Error::invalid("read only", "an in-memory queue cannot be opened read-only"));
        }
        super::SqliteStore::open(self, settings)
    }
}
