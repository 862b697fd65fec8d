//! The SQLite store, SQLite's own code in one place: the readers' connection pool, the one
//! writer connection with group commit (`writer.rs`), per-connection PRAGMAs and the busy
//! handler, WAL checkpoints, the open sequence (validate, WAL, migrate: `migrate.rs` and
//! the `schema/sqlite/` migrations it embeds), the dialect SQL (`statements.rs`), the transitions of the
//! store contract (`jobs.rs`), the classification of SQLite's errors (`error.rs`),
//! online backups (`backup.rs`), and the watcher that wakes pools when another process
//! enqueues (`watch.rs`).

pub(crate) mod backup;
pub(crate) mod error;
mod jobs;
pub(crate) mod migrate;
pub(crate) mod options;
pub use options::{SqliteOptions, Synchronous};
#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod plan_tests;
pub(crate) mod statements;
mod watch;
mod writer;

use crate::error::{Error, Result};
use crate::store::scope::{enter_write, WriteFlag};
use crate::store::Settings;
use error::SqlContext;
use options::Location;
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{config::DbConfig, limits::Limit, Connection, OpenFlags};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Prepared statements kept per connection: more than the engine has (its named statements,
/// each size of `enqueue_rows`, `claim_rows` and `complete_rows`, the writer's transaction
/// statements), so that the cache, which evicts the least recently used, never compiles a
/// hot statement again because maintenance ran others in between.
const STATEMENT_CACHE: usize = 128;
/// The WAL is truncated back to this size after a checkpoint, so it cannot stay large.
const JOURNAL_SIZE_LIMIT: i64 = 64 << 20;

/// Wraps r2d2_sqlite's manager so that a connection returned in the middle of a
/// transaction is discarded instead of reused (r2d2_sqlite's own `has_broken` is always false).
#[derive(Debug)]
pub(crate) struct Manager(SqliteConnectionManager);

impl r2d2::ManageConnection for Manager {
    type Connection = Connection;
    type Error = rusqlite::Error;

    fn connect(&self) -> rusqlite::Result<Connection> {
        self.0.connect()
    }

    fn is_valid(&self, conn: &mut Connection) -> rusqlite::Result<()> {
        conn.execute_batch("")
    }

    fn has_broken(&self, conn: &mut Connection) -> bool {
        !conn.is_autocommit()
    }
}

thread_local! {
    /// How long (in ms, roughly one busy-handler call each) this thread's current statement
    /// may wait for another process's lock; set from the queue's busy timeout before every
    /// operation, and from the patience of a checkpoint.
    static BUSY_PATIENCE_MS: Cell<u64> = const { Cell::new(5_000) };
}

/// The busy handler of every pooled and writer connection: poll for another process's lock
/// every millisecond until the patience runs out. SQLite's own handler backs off to 100 ms
/// between polls, and against a process that writes continuously such a sparse poll almost
/// never finds the lock free, so the waiting process's writers starved past their timeout.
fn poll_busy(calls: i32) -> bool {
    if calls as u64 >= BUSY_PATIENCE_MS.with(Cell::get) {
        return false;
    }
    std::thread::sleep(Duration::from_millis(1));
    true
}

/// This thread's busy patience (see [`Patience`]).
pub(crate) fn patience() -> Duration {
    Duration::from_millis(BUSY_PATIENCE_MS.with(Cell::get))
}

/// Sets this thread's busy patience for the duration of one operation.
pub(crate) struct Patience(u64);

impl Patience {
    pub(crate) fn set(wait: Duration) -> Patience {
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        Patience(BUSY_PATIENCE_MS.with(|p| p.replace(ms)))
    }
}

impl Drop for Patience {
    fn drop(&mut self) {
        BUSY_PATIENCE_MS.with(|p| p.set(self.0));
    }
}

/// The SQLite store: one database file (or one in-memory database), WAL mode, readers'
/// connections in a pool and one writer connection with group commit. The default store of
/// [`Queue`](crate::Queue); opened by [`Queue::open`](crate::Queue::open) and
/// [`QueueBuilder`](crate::QueueBuilder).
pub struct SqliteStore {
    /// Readers' connections (file databases only; the in-memory queue reads through the
    /// writer's connection, its only one).
    readers: Option<r2d2::Pool<Manager>>,
    /// The one writer connection, with group commit (see `writer.rs`).
    writer: writer::Writer,
    busy_timeout: Duration,
    /// What opens the watcher's connection (file databases only: an in-memory database has
    /// no other connection to hear from).
    watch_manager: Option<Manager>,
    /// The watcher thread, started by the first [`Store::watch`](crate::store::Store::watch).
    watcher: parking_lot::Mutex<Option<watch::Watcher>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("in_memory", &self.readers.is_none()).finish()
    }
}

impl SqliteStore {
    /// Opens (and creates, validates, upgrades) the database the builder names.
    pub(crate) fn open(options: &SqliteOptions, settings: &Settings) -> Result<SqliteStore> {
        let access = if settings.read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
        };
        let flags = access | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let (readers, writer, watch_manager) = match &options.location {
            Location::File(path) => {
                check_regular(path, "database file")?;
                if settings.read_only || !settings.upgrade {
                    check_current(path, flags)?;
                } else {
                    create_parent(path)?;
                    create_private(path)?;
                    prepare_file(path, flags, settings.busy_timeout)?;
                }
                let manager = || {
                    SqliteConnectionManager::file(path).with_flags(flags).with_init(connection_init(options, settings))
                };
                let readers = r2d2::Pool::builder()
                    .thread_pool(crate::store::pool_threads())
                    .max_size(settings.pool_size)
                    .min_idle(Some(1))
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .connection_timeout(settings.busy_timeout + Duration::from_secs(25))
                    .build(Manager(manager()))?;
                let writer = r2d2::ManageConnection::connect(&Manager(manager())).sql("open writer")?;
                // At FULL the writer syncs the WAL itself, outside the write lock (writer.rs).
                let wal = match (options.synchronous, settings.read_only, writer.path()) {
                    (Synchronous::Full, false, Some(db)) if !db.is_empty() => {
                        writer.execute_batch("PRAGMA synchronous = NORMAL").sql("PRAGMA synchronous")?;
                        Some(PathBuf::from(format!("{db}-wal")))
                    }
                    _ => None,
                };
                (Some(readers), writer::Writer::new(writer, wal), Some(Manager(manager())))
            }
            Location::Memory => {
                let mut conn = Connection::open_in_memory().sql("open in memory")?;
                connection_init(options, settings)(&mut conn).sql("connection init")?;
                migrate::migrate(&mut conn, migrate::SCHEMA_VERSION)?;
                (None, writer::Writer::new(conn, None), None)
            }
        };
        Ok(SqliteStore {
            readers,
            writer,
            busy_timeout: settings.busy_timeout,
            watch_manager,
            watcher: parking_lot::Mutex::new(None),
        })
    }

    /// A connection for reads (autocommit statements; never a deferred write).
    fn run_read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let _patience = Patience::set(self.busy_timeout);
        match &self.readers {
            Some(pool) => f(&*pool.get()?),
            // The only connection: a nested call from inside `f` (or from inside this
            // thread's write) would wait for itself, so it is `NestedWrite` instead.
            None => {
                let _flag = WriteFlag::set()?;
                self.writer.exclusive(writer::Holder::Connection, f)
            }
        }
    }

    /// Runs `f` in a `BEGIN IMMEDIATE` transaction of its own on this thread and returns once
    /// that transaction has committed (see `writer.rs`).
    ///
    /// `f` returns at its first error, so no statement ever runs outside the transaction it
    /// belongs to; the writer checks `is_autocommit` after an error, because SQLite may have
    /// rolled the whole transaction back by itself.
    fn run_write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let _flag = enter_write()?;
        let _patience = Patience::set(self.busy_timeout);
        self.writer.write(f)
    }

    /// Like [`SqliteStore::run_write`] for owned work (the hot paths): the work may run on another
    /// thread of this process, the leader of its commit group, together with other threads'
    /// requests (see `writer.rs`).
    fn run_submit<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let _flag = WriteFlag::set()?;
        let _patience = Patience::set(self.busy_timeout);
        self.writer.submit(work)
    }

    /// Starts the watcher (once, for a file database) and adds `wake` to what it calls. A
    /// connection that cannot be opened leaves the pools polling, with a warning.
    fn run_watch(&self, wake: crate::store::Wake) {
        let Some(manager) = &self.watch_manager else { return };
        let mut watcher = self.watcher.lock();
        if watcher.is_none() {
            match r2d2::ManageConnection::connect(manager) {
                Ok(conn) => *watcher = Some(watch::Watcher::start(conn)),
                Err(e) => {
                    tracing::warn!("fenceq: no connection for the watcher ({e}); pools poll instead");
                    return;
                }
            }
        }
        if let Some(watcher) = watcher.as_ref() {
            watcher.add(wake);
        }
    }

    /// `PRAGMA wal_checkpoint(TRUNCATE)`, waiting at most `patience` for readers.
    pub(crate) fn checkpoint_wal(&self, patience: Duration) -> Result<crate::report::CheckpointReport> {
        let _flag = WriteFlag::set()?;
        let _patience = Patience::set(patience);
        let (busy, wal_pages, checkpointed_pages) = self.writer.checkpoint()?;
        Ok(crate::report::CheckpointReport { completed: busy == 0, wal_pages, checkpointed_pages })
    }
}

impl Drop for SqliteStore {
    /// Stops the watcher thread and waits for it (the last handle of the queue is gone).
    fn drop(&mut self) {
        if let Some(watcher) = self.watcher.lock().take() {
            watcher.stop();
        }
    }
}

/// PRAGMAs and limits for every pooled connection (they are per connection, never in a
/// migration): busy timeout, synchronous, foreign keys, WAL size limit, page limit.
pub(crate) fn connection_init(
    options: &SqliteOptions,
    settings: &Settings,
) -> impl Fn(&mut Connection) -> rusqlite::Result<()> + Send + Sync + 'static {
    let synchronous = options.synchronous.pragma();
    let max_page_count = options.max_page_count;
    let max_length = (settings.max_payload.saturating_mul(2)).max(64 << 20).min(i32::MAX as usize) as i32;
    move |conn: &mut Connection| {
        conn.busy_handler(Some(poll_busy))?;
        // Plans that never depend on bound values: otherwise SQLite compiles a statement
        // again at every run after a new binding of such a value (it does for `LIMIT ?`, and
        // every claim paid a full re-prepare). Our plans are pinned by tests anyway.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
        conn.execute_batch(&format!(
            "PRAGMA synchronous = {synchronous};
             PRAGMA foreign_keys = ON;
             PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT};"
        ))?;
        if let Some(pages) = max_page_count {
            conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))?;
        }
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, max_length)?;
        Ok(())
    }
}

fn create_parent(path: &Path) -> Result<()> {
    if path.to_string_lossy().starts_with("file:") {
        return Ok(());
    }
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.exists() => std::fs::create_dir_all(dir).map_err(|e| {
            naming_io(e, format!("creating the directory {} for the database {}", dir.display(), path.display()))
        }),
        _ => Ok(()),
    }
}

/// Creates a missing database file before SQLite does, so that it is owner-only (mode 0600:
/// payloads are often users' messages; SQLite gives its `-wal` and `-shm` files the same
/// mode), and makes its directory entry durable: SQLite never syncs the directory after
/// creating a main database file, so a power loss could lose a file whose every commit was
/// synced. A file that exists (or that a racing process just created) is left as it is.
/// Every failure names the file and what was being done (the file system's own error
/// names neither).
fn create_private(path: &Path) -> Result<()> {
    if path.to_string_lossy().starts_with("file:") || path.exists() {
        return Ok(());
    }
    let shown = path.display();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(file) => file.sync_all().map_err(|e| naming_io(e, format!("syncing the new database file {shown}")))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(naming_io(e, format!("creating the database file {shown}"))),
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| naming_io(e, format!("syncing the directory {} after creating {shown}", dir.display())))
}

/// An `Io` error that says what was done to which file (`doing`), keeping the error's kind.
fn naming_io(e: std::io::Error, doing: String) -> Error {
    Error::from(std::io::Error::new(e.kind(), format!("{doing}: {e}")))
}

/// Refuses a database path that names anything but a regular file (a directory, a FIFO, a
/// device, a socket) before SQLite opens it: SQLite would block forever opening or reading
/// a FIFO, read a character device such as `/dev/null` as an empty database and then fail
/// to write it, leaving a `-journal` file beside it. A path that does not exist (or cannot
/// be inspected) passes: opening or creating it reports what is wrong. A symbolic link is
/// judged by what it points to. `what` names the argument in the error.
pub(crate) fn check_regular(path: &Path, what: &'static str) -> Result<()> {
    let Some(file) = file_of(path) else { return Ok(()) };
    let Ok(metadata) = std::fs::metadata(&file) else { return Ok(()) };
    if metadata.is_file() {
        return Ok(());
    }
    let kind = kind_of(&metadata.file_type());
    let why = if kind == "directory" { "" } else { ": a database is a regular file" };
    Err(Error::invalid(what, format!("{} is a {kind}, not a database file{why}", path.display())))
}

/// What a file that is not a regular file is, in words.
fn kind_of(file_type: &std::fs::FileType) -> &'static str {
    if file_type.is_dir() {
        return "directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "FIFO (named pipe)";
        }
        if file_type.is_char_device() {
            return "character device";
        }
        if file_type.is_block_device() {
            return "block device";
        }
        if file_type.is_socket() {
            return "socket";
        }
    }
    "special file"
}

/// The file a database path names: the path itself, or the file of a `file:` URI (percent
/// escapes decoded, the query dropped); `None` for an in-memory URI.
fn file_of(path: &Path) -> Option<PathBuf> {
    let text = path.to_str().unwrap_or_default();
    let Some(uri) = text.strip_prefix("file:") else { return Some(path.to_path_buf()) };
    let (name, query) = uri.split_once('?').unwrap_or((uri, ""));
    let name = name.split('#').next().unwrap_or_default();
    // `file://host/path`: SQLite accepts only an empty host or `localhost`.
    let name = match name.strip_prefix("//") {
        Some(rest) => rest.strip_prefix("localhost").unwrap_or(rest),
        None => name,
    };
    let in_memory = name.is_empty() || name == ":memory:" || query.split('&').any(|p| p == "mode=memory");
    if in_memory {
        return None;
    }
    Some(PathBuf::from(percent_decoded(name)?))
}

/// `%XX` escapes decoded (as SQLite decodes a URI's file name); `None` if the result is not
/// UTF-8 or an escape is malformed (SQLite then reports the name itself).
fn percent_decoded(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

/// Puts `path` into a `NotADatabase` error (SQLite's own error does not name the file).
fn naming(path: &Path) -> impl Fn(Error) -> Error + '_ {
    move |e| match e {
        Error::NotADatabase { .. } => Error::NotADatabase { path: path.display().to_string() },
        other => other,
    }
}

/// For a read-only open (or one that must not upgrade): the file must exist and be at
/// exactly this build's schema.
fn check_current(path: &Path, flags: OpenFlags) -> Result<()> {
    let with_path = naming(path);
    // Never creates the file: a check that changes nothing.
    let flags = flags.difference(OpenFlags::SQLITE_OPEN_CREATE);
    let conn = Connection::open_with_flags(path, flags).sql("open read-only").map_err(&with_path)?;
    let found = migrate::check_not_newer(&conn).map_err(&with_path)?;
    if found < migrate::SCHEMA_VERSION {
        return Err(Error::SchemaTooOld { found, supported: migrate::SCHEMA_VERSION });
    }
    Ok(())
}

/// Validates a database file and brings it to the current schema with one connection,
/// before any pooled connection exists: a file that is not a database, or is newer than
/// this build, is refused before anything is written to it.
fn prepare_file(path: &Path, flags: OpenFlags, busy_timeout: Duration) -> Result<()> {
    let with_path = naming(path);
    let mut conn = Connection::open_with_flags(path, flags).sql("open").map_err(&with_path)?;
    conn.busy_timeout(busy_timeout).sql("busy_timeout")?;
    // The first read of the file: garbage fails here with NotADatabase.
    migrate::check_not_newer(&conn).map_err(&with_path)?;
    migrate::enable_wal(&conn, busy_timeout).map_err(&with_path)?;
    migrate::migrate(&mut conn, migrate::SCHEMA_VERSION).map_err(&with_path)?;
    Ok(())
}

/// What can be done with an SQLite database file without a queue open on it, and the
/// ownership check for a transaction of the application's own.
impl SqliteStore {
    /// The schema version of the database file at `path` (0 for a new or empty file), read
    /// without changing anything: the file is opened read-only and not upgraded.
    ///
    /// # Errors
    ///
    /// A missing file is `Ok(0)`, not an error. `InvalidInput` for a path that names a
    /// directory, a FIFO, a device or anything else that is not a regular file (never
    /// opened: reading a FIFO would block). `NotADatabase` (naming the file) for a file that is
    /// not an SQLite database; otherwise the SQLite error of the read-only open or read (a file
    /// that cannot be opened is `Sqlite`; a file another process holds locked is `Busy`).
    pub fn schema_version_of(path: impl AsRef<Path>) -> Result<i64> {
        let path = path.as_ref();
        if !path.exists() {
            return Ok(0);
        }
        check_regular(path, "database file")?;
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).sql("open read-only")?;
        migrate::user_version(&conn).map_err(naming(path))
    }

    /// True when `token` owns its job at `at`, checked inside a transaction the caller opened
    /// (ideally `BEGIN IMMEDIATE`, so that no reclaim can commit between this check and the
    /// caller's commit).
    ///
    /// # Errors
    ///
    /// A token that does not own its job is `Ok(false)`, never `OwnershipLost`. Only the SQLite
    /// error of its query on `conn`, typed as for any statement (`Busy`, or `Sqlite` when
    /// `conn` has no fenceq schema).
    pub fn owns_in(conn: &Connection, token: &crate::ClaimToken, at: i64) -> Result<bool> {
        <SqliteStore as crate::store::Store>::owns(conn, crate::store::TokenAt { token, now: at })
    }
}

/// The schema version of the database file at `path`: see [`SqliteStore::schema_version_of`].
///
/// # Errors
///
/// As [`SqliteStore::schema_version_of`].
#[deprecated(since = "0.1.0", note = "an SQLite item, now on its store: use `SqliteStore::schema_version_of`")]
pub fn schema_version_of(path: impl AsRef<Path>) -> Result<i64> {
    SqliteStore::schema_version_of(path)
}

/// Whether `token` owns its job at `at`: see [`SqliteStore::owns_in`].
///
/// # Errors
///
/// As [`SqliteStore::owns_in`].
#[deprecated(since = "0.1.0", note = "an SQLite item, now on its store: use `SqliteStore::owns_in`")]
pub fn owns_in(conn: &Connection, token: &crate::ClaimToken, at: i64) -> Result<bool> {
    SqliteStore::owns_in(conn, token, at)
}

/// Backs up the database file at `source`: see [`SqliteStore::backup_file`].
///
/// # Errors
///
/// As [`SqliteStore::backup_file`].
#[deprecated(since = "0.1.0", note = "an SQLite item, now on its store: use `SqliteStore::backup_file`")]
pub fn backup_file(
    source: impl AsRef<Path>,
    target: impl AsRef<Path>,
    options: &crate::BackupOptions,
) -> Result<crate::BackupReport> {
    SqliteStore::backup_file(source, target, options)
}
