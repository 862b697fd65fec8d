//! Online backups: a complete, consistent copy of the queue's database, written while the
//! queue keeps working. On SQLite it is the store's own job (SQLite's online backup API, in
//! `store/sqlite/backup.rs`); on a server store (PostgreSQL) backups are the server's job
//! (`pg_dump`, its base backups), so there is no such method there.

use crate::error::Result;
use crate::queue::Queue;
use crate::report::BackupReport;
use std::path::Path;
use std::time::Duration;

/// Pages one backup step copies. Defaults to 1,024 (4 MiB at SQLite's default page size):
/// large enough that a step's fixed cost does not matter, small enough that a step never
/// holds anything long.
pub(crate) const DEFAULT_BACKUP_PAGES_PER_STEP: u32 = 1024;

/// How long a backup may take in all before it gives up. Defaults to 10 minutes (tens of
/// gigabytes on an ordinary disk).
pub(crate) const DEFAULT_BACKUP_TIME_LIMIT: Duration = Duration::from_secs(600);

/// How a backup copies and where it may write. Build it from [`BackupOptions::default`] and
/// change the fields you need.
///
/// ## Defaults
///
/// - 1,024 pages per step
/// - a time limit of 10 minutes in all
/// - an existing target is refused (`replace: false`)
///
/// ```
/// let options = fenceq::BackupOptions { replace: true, ..fenceq::BackupOptions::default() };
/// # assert_eq!(options.time_limit, std::time::Duration::from_secs(600));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupOptions {
    /// Pages copied per step, in 1..=1,048,576. Defaults to 1,024.
    pub pages_per_step: u32,
    /// The longest the whole backup may take, between 1 ms and a day; past it the backup stops
    /// with [`Error::BackupTimedOut`](crate::Error::BackupTimedOut) and leaves nothing behind.
    /// Defaults to 10 minutes.
    pub time_limit: Duration,
    /// Replace an existing file at the target path (atomically: the old file stays whole until
    /// the new one has replaced it). Defaults to false: an existing target is refused, so that
    /// a backup never destroys an older one by accident.
    pub replace: bool,
}

impl Default for BackupOptions {
    fn default() -> Self {
        BackupOptions {
            pages_per_step: DEFAULT_BACKUP_PAGES_PER_STEP,
            time_limit: DEFAULT_BACKUP_TIME_LIMIT,
            replace: false,
        }
    }
}

/// Online backups of the SQLite store.
impl Queue {
    /// Writes a complete, consistent copy of the queue's database to the new file `target`
    /// while the queue keeps working: writers (of this and other processes) go on committing
    /// during the copy, and the copy is the database as it was at one instant (every commit
    /// before it, none after). The file is an ordinary SQLite database that
    /// [`Queue::open`] opens: restoring is putting it in place of the database while nothing
    /// has it open (or opening the backup directly). Takes the defaults of
    /// [`BackupOptions`]; see [`Queue::backup_with`] for the details.
    ///
    /// ```
    /// use fenceq::{NewJob, Queue};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let queue = Queue::open(dir.path().join("bot.db"))?;
    /// queue.enqueue(NewJob::new("telegram", b"hello".to_vec()).key("update:1"))?;
    ///
    /// let report = queue.backup(dir.path().join("bot-backup.db"))?;
    /// let restored = Queue::open(&report.path)?;
    /// assert_eq!(restored.stats()?.queue("telegram").pending, 1);
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// The backup is SQLite's: a queue on a server store (PostgreSQL) is backed up by the
    /// server, with `pg_dump` or the server's base backups, not through fenceq.
    ///
    /// # Errors
    ///
    /// Those of [`Queue::backup_with`].
    pub fn backup(&self, target: impl AsRef<Path>) -> Result<BackupReport> {
        self.backup_with(target, &BackupOptions::default())
    }

    /// [`Queue::backup`] with settings: pages per step, a time limit, and whether an existing
    /// target may be replaced.
    ///
    /// How it stays consistent without stopping writers: the copy reads every page from one
    /// read transaction (a WAL snapshot), step by step, and WAL readers never block writers.
    /// (Without the snapshot, SQLite would restart a step-wise copy after every commit of
    /// another connection, and a busy queue's backup might never finish.) While the copy runs
    /// the WAL cannot be checkpointed past its snapshot, so it grows with what is written
    /// meanwhile; the next checkpoint after the backup truncates it. An in-memory queue's
    /// only connection is the source, held for the whole copy: its writers wait meanwhile.
    ///
    /// The target: the pages go to a temporary file beside it (`.NAME.PID-N.fenceq-backup`,
    /// owner-only, mode 0600), which is synced and then linked to the target name, and the
    /// directory is synced: a reader of the target never sees a partial file, and a crash
    /// leaves at most the temporary file. Without [`replace`](BackupOptions::replace) the
    /// link fails if the name exists (checked first, and again atomically by the link);
    /// with it a rename replaces the old file atomically. The target's directory must exist
    /// and allow hard links (every Unix file system does).
    ///
    /// # Errors
    ///
    /// Every error leaves nothing at the target path and changes nothing in the queue.
    /// `InvalidInput` for settings out of range, a target that exists (unless `replace`), is
    /// a directory or anything else that is neither a regular file nor a symbolic link (a
    /// FIFO, a device: never replaced), has no file name, or is the queue's own database or
    /// its `-wal`, `-shm` or `-journal` file, whether that file exists or not (SQLite takes
    /// a file of such a name for the database's own: a `-journal` for a hot journal, which
    /// it rolls back into the database and deletes); `BackupWrite` (naming the target) when the target's directory is
    /// missing or not writable or the file cannot be synced or linked; `BackupTimedOut` when
    /// the copy outlasts the time limit; `StorageFull` when the disk fills during the copy;
    /// `Pool` when no reader connection came free in time; `NestedWrite` on an in-memory
    /// queue from inside a closure holding its transaction or connection; any other SQLite
    /// error of the copy (`Sqlite`, `Corrupt`).
    pub fn backup_with(&self, target: impl AsRef<Path>, options: &BackupOptions) -> Result<BackupReport> {
        self.store().backup(target.as_ref(), options)
    }
}
