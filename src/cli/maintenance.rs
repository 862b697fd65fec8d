//! Maintenance passes and the schema: `reap`, `prune`, `migrate`. Each takes `--backup PATH`
//! (see [`BackupOpts`]).

use super::backup::BackupOpts;
use super::store::CliStore;
use super::{fail, parse_duration, plural, ChangeOpts, CliResult, Context};
use clap::Args;
use fenceq::{PruneReport, Queue, ReapReport, Retention, SCHEMA_VERSION};
use indicatif::ProgressBar;
use serde_json::json;
use std::time::Duration;

// ------------------------------------------------------------------------------- reap

/// Arguments of `reap`.
#[derive(Debug, Args)]
pub struct ReapArgs {
    #[command(flatten)]
    pub change: ChangeOpts,

    #[command(flatten)]
    pub backup: BackupOpts,
}

impl ReapArgs {
    /// Runs one reaper pass (or previews it, on a read-only connection).
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let queue = ctx.open_for_change::<S>(&self.change)?;
        let dry = self.change.dry_run;
        if let (true, Some(_)) = (self.backup.wanted(dry), self.change.expect) {
            // --expect checked before the backup (and again by the change's own transaction).
            self.change.check(queue.reap_preview()?.total())?;
        }
        self.backup.take(ctx, dry)?;
        // A real run reports what its statements changed: with --expect the count and the
        // change are one transaction, rolled back on a mismatch.
        let report = match (dry, self.change.expect) {
            (true, _) => {
                let preview = queue.reap_preview()?;
                self.change.check(preview.total())?;
                preview
            }
            (false, Some(expected)) => self.change.guarded(queue.reap_expecting(expected))?,
            (false, None) => queue.reap()?,
        };
        if ctx.json() {
            return Ok(ctx.change_document(json!({
                "command": "reap",
                "dry_run": dry,
                "requeued": report.requeued,
                "exhausted": report.exhausted,
                "waits_expired": report.waits_expired,
                "would_change": report.total(),
                "changed": if dry { 0 } else { report.total() },
            }))?);
        }
        let line = if dry {
            format!("dry run: would reap {}; nothing was changed", describe_reap(&report))
        } else {
            format!("reaped {}", describe_reap(&report))
        };
        Ok(ctx.out.line(line)?)
    }
}

fn describe_reap(report: &ReapReport) -> String {
    let n = report.total();
    format!(
        "{n} {}: {} back to pending (lease expired), {} exhausted (lease expired, no attempts left), \
         {} exhausted (wait past its deadline)",
        plural(n, "job", "jobs"),
        report.requeued,
        report.exhausted,
        report.waits_expired,
    )
}

// ------------------------------------------------------------------------------- prune

/// Arguments of `prune`.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Delete terminal rows settled (or acknowledged) longer ago than this: a number with a
    /// unit, ms, s, m, h, d or w (30s, 15m, 12h, 7d).
    #[arg(long, value_name = "AGE", default_value = "7d", value_parser = parse_duration)]
    pub older_than: Duration,

    #[command(flatten)]
    pub change: ChangeOpts,

    #[command(flatten)]
    pub backup: BackupOpts,
}

impl PruneArgs {
    /// Runs one retention pass (or previews it, on a read-only connection).
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let queue = ctx.open_for_change::<S>(&self.change)?;
        let retention = Retention::older_than(self.older_than);
        let dry = self.change.dry_run;
        if let (true, Some(_)) = (self.backup.wanted(dry), self.change.expect) {
            // --expect checked before the backup (and again by the change's own transaction).
            self.change.check(queue.prune_preview(&retention)?.deleted())?;
        }
        self.backup.take(ctx, dry)?;
        let report = match (dry, self.change.expect) {
            (true, _) => {
                let preview = queue.prune_preview(&retention)?;
                self.change.check(preview.deleted())?;
                preview
            }
            // One transaction that counts and deletes, rolled back on a mismatch.
            (false, Some(expected)) => self.change.guarded(queue.prune_expecting(&retention, expected))?,
            (false, None) => {
                // The preview only sizes the progress bar; the report is what was deleted.
                let total = queue.prune_preview(&retention)?.deleted();
                let bar = ctx.out.progress(total, "pruning");
                if bar.is_hidden() || total <= u64::from(retention.batch_size) {
                    queue.prune(&retention)?
                } else {
                    prune_with_progress(&queue, &retention, total, bar)?
                }
            }
        };
        let age = compact_duration(self.older_than);
        if ctx.json() {
            return Ok(ctx.change_document(json!({
                "command": "prune",
                "dry_run": dry,
                "older_than_ms": u64::try_from(self.older_than.as_millis()).unwrap_or(u64::MAX),
                "settled": report.settled,
                "acknowledged": report.acknowledged,
                "batches": report.batches,
                "would_change": report.deleted(),
                "changed": if dry { 0 } else { report.deleted() },
            }))?);
        }
        let n = report.deleted();
        let what = format!(
            "{n} {} older than {age}: {} completed or cancelled, {} acknowledged {}",
            plural(n, "job", "jobs"),
            report.settled,
            report.acknowledged,
            plural(report.acknowledged, "exhaustion", "exhaustions"),
        );
        let line =
            if dry { format!("dry run: would prune {what}; nothing was changed") } else { format!("pruned {what}") };
        Ok(ctx.out.line(line)?)
    }
}

/// Runs the prune on a second thread and moves the bar by what is left to prune.
/// `Queue::prune` deletes in batches but reports only at the end, so the main thread counts
/// the rows still prunable (a read, which WAL lets run beside the deleting writes).
fn prune_with_progress<S: CliStore>(
    queue: &Queue<S>,
    retention: &Retention,
    total: u64,
    bar: ProgressBar,
) -> CliResult<PruneReport> {
    let result = std::thread::scope(|scope| {
        let worker = scope.spawn(|| queue.prune(retention));
        while !worker.is_finished() {
            std::thread::sleep(Duration::from_millis(200));
            if let Ok(left) = queue.prune_preview(retention) {
                bar.set_position(total.saturating_sub(left.deleted()));
            }
        }
        worker.join()
    });
    bar.finish_and_clear();
    match result {
        Ok(report) => Ok(report?),
        Err(_) => Err(fail("the prune thread stopped unexpectedly")),
    }
}

/// A duration in its largest whole unit up to days: `7d`, `12h`, `15m`, `30s`, `250ms`.
pub fn compact_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms == 0 {
        return "0s".to_string();
    }
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

// ------------------------------------------------------------------------------- migrate

/// Arguments of `migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Print the file's schema version and the one it would be upgraded to; change nothing.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub backup: BackupOpts,
}

impl MigrateArgs {
    /// Creates or upgrades the database.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let found = S::version_of(ctx)?;
        // On PostgreSQL the database is the server's; the queue exists from version 1 on.
        let existed = match found {
            None => false,
            Some(0) => !ctx.is_postgres(),
            Some(_) => true,
        };
        let before = found.unwrap_or(0);
        if !ctx.json() {
            let state = match found {
                None => " (no database file yet)",
                Some(0) if ctx.is_postgres() => " (no fenceq tables yet)",
                _ => "",
            };
            ctx.out.line(format!("schema version before: {before}{state}"))?;
        }
        if before > SCHEMA_VERSION {
            return Err(fail(format!(
                "database schema version {before} is newer than this fenceq supports ({SCHEMA_VERSION}); upgrade fenceq"
            )));
        }
        // The file as it was before the upgrade (any schema version backs up).
        self.backup.take(ctx, self.dry_run)?;
        let after = if self.dry_run { before } else { ctx.open_or_create::<S>()?.schema_version()? };
        if ctx.json() {
            return Ok(ctx.change_document(json!({
                "command": "migrate",
                "dry_run": self.dry_run,
                "path": ctx.db_display(),
                "created": !existed && !self.dry_run,
                "before": before,
                "after": after,
                "supported": SCHEMA_VERSION,
            }))?);
        }
        let line = match (self.dry_run, existed, before == SCHEMA_VERSION) {
            (true, _, true) => "dry run: already current; nothing to do".to_string(),
            (true, false, _) if ctx.is_postgres() => {
                format!("dry run: would create the queue's tables at schema version {SCHEMA_VERSION}")
            }
            (true, false, _) => format!("dry run: would create the database at schema version {SCHEMA_VERSION}"),
            (true, true, _) => format!("dry run: would upgrade to schema version {SCHEMA_VERSION}"),
            (false, _, _) => {
                let action = match (existed, before == after) {
                    (false, _) => " (created)",
                    (true, true) => " (already current)",
                    (true, false) => " (upgraded)",
                };
                format!("schema version after: {after}{action}")
            }
        };
        ctx.out.line(line)?;
        Ok(ctx.out.line(format!("this fenceq supports schema version {SCHEMA_VERSION}"))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_in_their_largest_unit() {
        assert_eq!(compact_duration(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(compact_duration(Duration::from_secs(3 * 86_400)), "3d");
        assert_eq!(compact_duration(Duration::from_secs(43_200)), "12h");
        assert_eq!(compact_duration(Duration::from_secs(90)), "90s");
        assert_eq!(compact_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(compact_duration(Duration::ZERO), "0s");
    }
}
