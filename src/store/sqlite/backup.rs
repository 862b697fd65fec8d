//! Online backups of an SQLite database through SQLite's backup API
//! (<https://sqlite.org/backup.html>): the copy, step by step, from one snapshot of the
//! source; and the target file, written beside its final name and published only whole.
//!
//! The source. In WAL mode (every file fenceq opens writable) the source connection opens
//! one read transaction and every step copies from that snapshot, so the copy is the
//! database at that instant whatever commits meanwhile, and WAL readers never block
//! writers. (SQLite restarts a step-wise copy whenever another connection commits between
//! steps; a held snapshot sees no such commit.) In a rollback-journal mode (a file no fenceq
//! ever opened writable) a read transaction would block every writer for the whole copy, so
//! there each step takes its own shared lock, writers commit between steps, and SQLite
//! restarts the copy after each such commit; the time limit bounds the attempt. The
//! in-memory queue's only connection is the source, held by the caller for the whole copy.
//!
//! The target. Pages go to a temporary file created owner-only (0600) in the target's
//! directory, without a journal (a failed copy is deleted, never recovered), which is synced
//! once at the end and then linked to the target name (a hard link fails if the name exists,
//! so nothing is ever overwritten unless `replace` asks for a rename), and the directory is
//! synced. Every failure removes the temporary file: the target path only ever holds a
//! complete backup.

use super::error::SqlContext;
use super::statements::{BACKUP_SNAPSHOT_BEGIN, BACKUP_SNAPSHOT_END, BACKUP_SNAPSHOT_READ};
use super::{check_regular, kind_of, naming, poll_busy, Patience, SqliteStore};
use crate::error::{Error, Result};
use crate::maintenance::BackupOptions;
use crate::report::BackupReport;
use crate::store::scope::WriteFlag;
use crate::store::settings::DEFAULT_BUSY_TIMEOUT;
use crate::validate::check_backup;
use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The pause between steps on a rollback-journal source, so that writers waiting for its
/// shared lock get in (SQLite's own example pauses 250 ms; a fenceq process polls every 1 ms).
const ROLLBACK_PAUSE: Duration = Duration::from_millis(10);
/// The pause before a step that found a lock taken is tried again.
const BUSY_PAUSE: Duration = Duration::from_millis(1);

impl SqliteStore {
    /// Backs the store's database up to `target`: from a reader connection of the pool (a
    /// snapshot, beside the writer), or from the in-memory database's only connection.
    pub(crate) fn backup(&self, target: &Path, options: &BackupOptions) -> Result<BackupReport> {
        check_backup(options)?;
        match &self.readers {
            Some(pool) => {
                let _patience = Patience::set(self.busy_timeout);
                copy(&*pool.get()?, target, options)
            }
            None => {
                let _flag = WriteFlag::set()?;
                self.writer.exclusive(super::writer::Holder::Backup, |conn| copy(conn, target, options))
            }
        }
    }
}

impl super::SqliteStore {
    /// Backs up the SQLite database file at `source` to the new file `target` without opening a
    /// queue on it: read-only, at any schema version, never upgrading or otherwise changing the
    /// file (what `fenceq migrate --backup` needs before an upgrade). Consistent while other
    /// processes keep writing, exactly as [`Queue::backup_with`](crate::Queue::backup_with),
    /// whose target rules and settings it shares.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("bot.db");
    /// # fenceq::Queue::open(&path)?;
    /// let options = fenceq::BackupOptions::default();
    /// let report = fenceq::SqliteStore::backup_file(&path, dir.path().join("before-upgrade.db"), &options)?;
    /// assert_eq!(fenceq::SqliteStore::schema_version_of(&report.path)?, fenceq::SCHEMA_VERSION);
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Those of [`Queue::backup_with`](crate::Queue::backup_with) (the target is checked before
    /// the source is opened), and `InvalidInput` when there is no file at `source` or it is a
    /// directory, a FIFO, a device or anything else that is not a regular file (never opened:
    /// SQLite would block reading a FIFO); `NotADatabase` (naming `source`) for a file
    /// that is not an SQLite database; `Busy` when another process held a lock on it past the
    /// default busy timeout.
    pub fn backup_file(
        source: impl AsRef<Path>,
        target: impl AsRef<Path>,
        options: &BackupOptions,
    ) -> Result<BackupReport> {
        let (source, target) = (source.as_ref(), target.as_ref());
        check_backup(options)?;
        if !source.exists() {
            return Err(Error::invalid("backup source", format!("no database at {}", source.display())));
        }
        check_regular(source, "backup source")?;
        // Before the source is opened: opening a WAL database creates its `-wal` and `-shm`.
        check_target(target, Some(source), options.replace)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(source, flags).sql("open backup source").map_err(naming(source))?;
        conn.busy_handler(Some(poll_busy)).sql("busy handler")?;
        let _patience = Patience::set(DEFAULT_BUSY_TIMEOUT);
        copy(&conn, target, options).map_err(naming(source))
    }
}

/// Copies the database of `source` to `target` (see the module docs).
fn copy(source: &Connection, target: &Path, options: &BackupOptions) -> Result<BackupReport> {
    let started = Instant::now();
    check_target(target, source.path().filter(|p| !p.is_empty()).map(Path::new), options.replace)?;
    let temp = TempFile::create(target)?;
    let mut dest =
        Connection::open_with_flags(temp.path(), OpenFlags::SQLITE_OPEN_READ_WRITE).sql("open backup target")?;
    // No journal: a failed copy is deleted, never rolled back; one sync at the end.
    dest.query_row("PRAGMA journal_mode = OFF", [], |_| Ok(())).sql("PRAGMA journal_mode")?;
    dest.execute_batch("PRAGMA synchronous = OFF").sql("PRAGMA synchronous")?;
    let mode: String = source.query_row("PRAGMA journal_mode", [], |row| row.get(0)).sql("PRAGMA journal_mode")?;
    let snapshot = if mode.eq_ignore_ascii_case("wal") { Some(Snapshot::begin(source)?) } else { None };
    let (pages, steps) = run_steps(source, &mut dest, options, snapshot.is_some(), started)?;
    drop(snapshot);
    dest.close().map_err(|(_, e)| Error::sqlite("close backup target", e))?;
    let bytes = temp.publish(target, options.replace)?;
    Ok(BackupReport { path: target.to_path_buf(), pages, bytes, steps, elapsed: started.elapsed() })
}

/// The steps of one copy; returns (pages, steps).
fn run_steps(
    source: &Connection,
    dest: &mut Connection,
    options: &BackupOptions,
    snapshot: bool,
    started: Instant,
) -> Result<(u64, u64)> {
    let backup = Backup::new(source, dest).sql("backup init")?;
    let per_step = i32::try_from(options.pages_per_step).unwrap_or(i32::MAX);
    let mut steps = 0_u64;
    loop {
        let step = backup.step(per_step).sql("backup step")?;
        steps += 1;
        let progress = backup.progress();
        let total = u64::try_from(progress.pagecount).unwrap_or(0);
        if step == StepResult::Done {
            return Ok((total, steps));
        }
        if started.elapsed() >= options.time_limit {
            let copied = total.saturating_sub(u64::try_from(progress.remaining).unwrap_or(0));
            return Err(Error::BackupTimedOut { limit: options.time_limit, copied_pages: copied, total_pages: total });
        }
        match step {
            StepResult::More if snapshot => {}
            StepResult::More => std::thread::sleep(ROLLBACK_PAUSE),
            // A lock was taken (another process's write lock on a rollback source, or its
            // WAL recovery): try again shortly, within the time limit.
            _ => std::thread::sleep(BUSY_PAUSE),
        }
    }
}

/// One read transaction on the source for the whole copy (a WAL snapshot); ended on drop,
/// so that a pooled connection goes back to the pool without it.
struct Snapshot<'c>(&'c Connection);

impl<'c> Snapshot<'c> {
    fn begin(conn: &'c Connection) -> Result<Snapshot<'c>> {
        conn.execute_batch(BACKUP_SNAPSHOT_BEGIN).sql("BACKUP_SNAPSHOT_BEGIN")?;
        let snapshot = Snapshot(conn);
        // The transaction reads nothing until its first statement: this one fixes the snapshot.
        conn.query_row(BACKUP_SNAPSHOT_READ, [], |_| Ok(())).sql("BACKUP_SNAPSHOT_READ")?;
        Ok(snapshot)
    }
}

impl Drop for Snapshot<'_> {
    fn drop(&mut self) {
        // A read transaction has nothing to undo; a connection still inside one is discarded
        // by the pool instead of reused (`Manager::has_broken`).
        if let Err(e) = self.0.execute_batch(BACKUP_SNAPSHOT_END) {
            tracing::warn!(error = %e, "ending the backup's read transaction failed");
        }
    }
}

/// Refuses a target that exists (unless `replace`), is a directory or anything else that
/// is not a regular file or a symbolic link, has no file name, or is the source database or
/// one of its companion files (whether that file exists or not).
fn check_target(target: &Path, source: Option<&Path>, replace: bool) -> Result<()> {
    let refuse = |reason: String| Err(Error::invalid("backup target", reason));
    let shown = target.display();
    if target.file_name().is_none() {
        return refuse(format!("{shown:?} has no file name"));
    }
    if target.is_dir() {
        return refuse(format!("{shown} is a directory; name the backup file"));
    }
    if let Some(source) = source {
        if let Some(part) = part_of(target, source) {
            return refuse(format!("{shown} is the database being backed up{part}"));
        }
    }
    let found = target.symlink_metadata().ok();
    if let Some(metadata) = &found {
        let file_type = metadata.file_type();
        if !file_type.is_file() && !file_type.is_symlink() {
            // Replacing it would replace a device or a pipe (`/dev/null`) with a file.
            let kind = kind_of(&file_type);
            return refuse(format!("{shown} is a {kind}; a backup is written only as a regular file"));
        }
    }
    if found.is_some() && !replace {
        return refuse(format!("{shown} already exists; a backup never overwrites a file unless told to replace it"));
    }
    Ok(())
}

/// Whether `target` names the database file `source` (`Some("")`) or its `-wal`, `-shm` or
/// `-journal` file (`Some` of words saying which), compared by the canonical path of the
/// target's directory and its file name (the name itself is not resolved: replacing a
/// symbolic link replaces the link). A companion file need not exist: SQLite takes any file
/// of that name for the database's own (a `-journal` for a hot journal, which it rolls back
/// into the database and deletes).
fn part_of(target: &Path, source: &Path) -> Option<&'static str> {
    let name = target.file_name()?;
    let target = fs::canonicalize(parent_of(target)).ok()?.join(name);
    // The database by its canonical path, and by its own name in its canonical directory
    // (a database reached through a symbolic link), where SQLite may put its files.
    let mut spellings = Vec::with_capacity(2);
    spellings.extend(fs::canonicalize(source).ok());
    if let (Ok(dir), Some(name)) = (fs::canonicalize(parent_of(source)), source.file_name()) {
        spellings.push(dir.join(name));
    }
    let parts = [
        ("", ""),
        ("-wal", " (its -wal file, which SQLite would take for the database's own)"),
        ("-shm", " (its -shm file, which SQLite would take for the database's own)"),
        ("-journal", " (its -journal file, which SQLite would take for a hot journal of the database)"),
    ];
    parts.into_iter().find_map(|(suffix, says)| {
        let hit = spellings.iter().any(|db| {
            let mut companion = db.clone().into_os_string();
            companion.push(suffix);
            target == Path::new(&companion)
        });
        hit.then_some(says)
    })
}

/// The directory of `path` (`.` for a bare file name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// The temporary file a backup is written to, in the target's directory; removed on drop
/// unless it was published.
struct TempFile {
    path: PathBuf,
    published: bool,
}

impl TempFile {
    /// Creates `.NAME.PID-N.fenceq-backup` beside `target`, owner-only and new.
    fn create(target: &Path) -> Result<TempFile> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = target.file_name().unwrap_or_default();
        let failed =
            |source| Error::BackupWrite { path: target.display().to_string(), source: std::sync::Arc::new(source) };
        // A name left by a crashed backup of the same pid is skipped, never reused.
        for _ in 0..100 {
            let mut temp = OsString::from(".");
            temp.push(name);
            temp.push(format!(".{}-{}.fenceq-backup", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
            let path = parent_of(target).join(temp);
            let mut options = OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            match options.open(&path) {
                Ok(_) => return Ok(TempFile { path, published: false }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(failed(e)),
            }
        }
        Err(failed(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "no free temporary file name")))
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Syncs the copy, gives it the target's name (a link that refuses an existing name, or
    /// with `replace` a rename that replaces it), syncs the directory; returns its size.
    fn publish(mut self, target: &Path, replace: bool) -> Result<u64> {
        let failed =
            |source| Error::BackupWrite { path: target.display().to_string(), source: std::sync::Arc::new(source) };
        let file = File::open(&self.path).map_err(failed)?;
        file.sync_all().map_err(failed)?;
        let bytes = file.metadata().map_err(failed)?.len();
        if replace {
            fs::rename(&self.path, target).map_err(failed)?;
        } else {
            match fs::hard_link(&self.path, target) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let reason = format!("{} appeared while the backup ran; nothing was overwritten", target.display());
                    return Err(Error::invalid("backup target", reason));
                }
                Err(e) => return Err(failed(e)),
            }
            if let Err(e) = fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %e, "removing the backup's temporary name failed");
            }
        }
        self.published = true;
        File::open(parent_of(target)).and_then(|dir| dir.sync_all()).map_err(failed)?;
        Ok(bytes)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.published {
            let _ = fs::remove_file(&self.path);
        }
    }
}
