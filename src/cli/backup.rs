//! Backups: `fenceq backup OUT`, and `--backup PATH`, which every command that changes rows
//! takes so that a backup comes before the change without a second command (an operator's
//! runbook would otherwise take one by hand before each change to production rows).
//!
//! Both copy the file with [`fenceq::SqliteStore::backup_file`]: read-only, consistent while the
//! application keeps writing, at any schema version (so `migrate --backup` keeps the file as
//! it was before the upgrade), to a new owner-only file that appears only once it is whole.

use super::output::human_duration;
use super::{check_existing, fail, parse_duration, CliResult, Context, ResultExt};
use clap::Args;
use fenceq::{BackupOptions, BackupReport};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Arguments of `backup`.
#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The backup file to write: a new file (an existing one is refused unless --replace),
    /// in an existing directory.
    #[arg(value_name = "OUT")]
    pub out: PathBuf,

    /// Replace OUT if it exists, atomically (the old file stays whole until the new one has
    /// replaced it).
    #[arg(long)]
    pub replace: bool,

    /// Give up, writing nothing, if the copy takes longer than this: a number with a unit,
    /// ms, s, m or h (30s, 10m, 2h; at most a day).
    #[arg(long, value_name = "AGE", default_value = "10m", value_parser = parse_duration)]
    pub time_limit: Duration,
}

impl BackupArgs {
    /// Writes the backup and reports it.
    pub fn run(self, ctx: &mut Context) -> CliResult<()> {
        if is_server_url(&ctx.db) {
            return Err(fail(
                "--db is a PostgreSQL URL: a PostgreSQL queue is backed up by its server, not by fenceq; \
                 use pg_dump (e.g. `pg_dump --format=custom --file=queue.dump \"$DATABASE_URL\"`) or the \
                 server's base backups. `fenceq backup` copies SQLite database files",
            ));
        }
        check_existing(&ctx.db)?;
        let options = BackupOptions { replace: self.replace, time_limit: self.time_limit, ..BackupOptions::default() };
        let report = fenceq::SqliteStore::backup_file(&ctx.db, &self.out, &options)?;
        if ctx.json() {
            let document = json!({
                "command": "backup",
                "db": ctx.db.display().to_string(),
                "backup": backup_json(&report),
            });
            return Ok(ctx.out.document(&document)?);
        }
        let line = format!("backed up {} to {}: {}", path_field(&ctx.db), path_field(&report.path), describe(&report));
        Ok(ctx.out.line(line)?)
    }
}

/// `--backup PATH`, flattened into every command that changes rows.
#[derive(Debug, Clone, Args)]
pub struct BackupOpts {
    /// Before changing anything, back the database up to PATH (a new file; an existing one
    /// is refused), as `fenceq backup PATH` does.
    ///
    /// The backup is taken once the command's checks have passed (the file, its schema, the
    /// arguments, the job's state, --expect against a preview), just before the change, which
    /// checks them again in its own transaction. If the backup fails, the command fails and
    /// changes nothing. If the change is still refused (something changed in between), the
    /// backup is kept. A dry run takes no backup. SQLite files only: with a postgres://
    /// --db it is refused (back the server up with pg_dump first).
    #[arg(long, value_name = "PATH")]
    pub backup: Option<PathBuf>,
}

impl BackupOpts {
    /// True when a backup will be taken (`--backup` without `--dry-run`): the command then
    /// checks its guards read-only first, so that a refused change costs no backup.
    pub fn wanted(&self, dry_run: bool) -> bool {
        self.backup.is_some() && !dry_run
    }

    /// Refuses `--backup` on a PostgreSQL URL (with or without --dry-run), before anything
    /// connects: it copies SQLite files only.
    ///
    /// # Errors
    ///
    /// `--backup` given with a `postgres://` `--db`.
    pub fn check_store(&self, ctx: &Context) -> CliResult<()> {
        if self.backup.is_some() && ctx.is_postgres() {
            return Err(fail(
                "--backup copies SQLite database files; back a PostgreSQL queue up with pg_dump \
                 (or the server's base backups) first, then run the command without --backup; nothing was changed",
            ));
        }
        Ok(())
    }

    /// Takes the backup `--backup` asks for (none for a dry run) and prints what it wrote
    /// (with --json, the command's document carries it as `backup`).
    pub fn take(&self, ctx: &mut Context, dry_run: bool) -> CliResult<()> {
        let Some(path) = &self.backup else { return Ok(()) };
        if dry_run {
            return Ok(());
        }
        self.check_store(ctx)?;
        if !ctx.db.exists() {
            let db = ctx.db.display();
            return Err(fail(format!("--backup: no database at {db} to back up; nothing was changed")));
        }
        let report = fenceq::SqliteStore::backup_file(&ctx.db, path, &BackupOptions::default())
            .context(|| "--backup failed; nothing was changed".to_string())?;
        if !ctx.json() {
            let line = format!(
                "backed up {} to {} before the change: {}",
                path_field(&ctx.db),
                path_field(&report.path),
                describe(&report)
            );
            ctx.out.line(line)?;
        }
        ctx.backup = Some(report);
        Ok(())
    }
}

/// A backup in a command's JSON document (`null` when none was taken).
pub fn backup_json(report: &BackupReport) -> Value {
    json!({
        "path": report.path.display().to_string(),
        "pages": report.pages,
        "bytes": report.bytes,
        "steps": report.steps,
        "elapsed_ms": u64::try_from(report.elapsed.as_millis()).unwrap_or(u64::MAX),
    })
}

/// A path as a field of a line (a line feed in a file name escaped, as names are).
fn path_field(path: &Path) -> String {
    super::output::sanitize(&path.display().to_string())
}

/// `N pages, N bytes, in 12ms`.
fn describe(report: &BackupReport) -> String {
    let ms = u64::try_from(report.elapsed.as_millis()).unwrap_or(u64::MAX);
    format!("{} pages, {} bytes, in {}", report.pages, report.bytes, human_duration(ms))
}

/// True for a `postgres://` or `postgresql://` URL given where a database file belongs.
pub fn is_server_url(path: &Path) -> bool {
    let text = path.to_string_lossy().to_ascii_lowercase();
    text.starts_with("postgres://") || text.starts_with("postgresql://")
}
