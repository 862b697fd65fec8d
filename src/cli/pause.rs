//! Pausing and unpausing a queue: `pause`, `unpause`. Each takes `--dry-run`, `--expect N`
//! (counting queues: 1 when the command changes the queue, 0 when it is that way already),
//! `--backup PATH`, `--by` and `--note` (recorded on the queue's row).

use super::backup::BackupOpts;
use super::decision::DecisionOpts;
use super::output::{sanitize, when};
use super::store::CliStore;
use super::{plural, ChangeOpts, CliResult, Context};
use clap::Args;
use fenceq::{PausedQueue, Queue};
use serde_json::{json, Value};

/// What `--expect` counts for these commands.
const QUEUES: (&str, &str) = ("queue", "queues");

/// Arguments of `pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The queue to pause (it need not have jobs).
    #[arg(value_name = "QUEUE")]
    pub queue: String,

    #[command(flatten)]
    pub change: ChangeOpts,

    #[command(flatten)]
    pub backup: BackupOpts,

    #[command(flatten)]
    pub decision: DecisionOpts,
}

/// Arguments of `unpause`.
#[derive(Debug, Args)]
pub struct UnpauseArgs {
    /// The paused queue to unpause.
    #[arg(value_name = "QUEUE")]
    pub queue: String,

    #[command(flatten)]
    pub change: ChangeOpts,

    #[command(flatten)]
    pub backup: BackupOpts,

    #[command(flatten)]
    pub decision: DecisionOpts,
}

impl PauseArgs {
    /// Pauses the queue (or previews it, on a read-only connection).
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let queue = ctx.open_for_change::<S>(&self.change)?;
        let before = pause_of(&queue, &self.queue)?;
        let would_change = u64::from(before.is_none());
        let pause = || self.decision.operator(&queue).pause(&self.queue);
        let changed = change(ctx, (&self.change, &self.backup), would_change, pause)?;
        let after = if self.change.dry_run { before.clone() } else { pause_of(&queue, &self.queue)? };
        let pending = queue.stats()?.queue(&self.queue).pending;
        let held = format!("{pending} pending {} held", plural(pending, "job", "jobs"));
        let now = queue.now_ms();
        // A real run says what its statement did (another process may have paused the queue
        // between the preview and the change); a dry run what the preview found.
        let found = if self.change.dry_run { &before } else { &after };
        let name = sanitize(&self.queue);
        let line = match (self.change.dry_run, changed, found) {
            (false, true, _) => format!(
                "paused queue {name}: claims of it find nothing until `fenceq unpause {name}`; enqueues still land, \
                 running attempts finish ({held})"
            ),
            (true, _, None) => format!("dry run: would pause queue {name} ({held}); nothing was changed"),
            (dry, _, pause) => {
                let prefix = if dry { "dry run: " } else { "" };
                let record = pause.as_ref().map_or_else(|| "unpaused meanwhile".to_string(), |p| record(p, now));
                format!("{prefix}queue {name} is already paused ({record}; {held}); nothing changed")
            }
        };
        let result = Changed { command: "pause", queue: &self.queue, after, pending, would_change, changed, now };
        result.print(ctx, &self.change, line)
    }
}

impl UnpauseArgs {
    /// Unpauses the queue (or previews it, on a read-only connection).
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let queue = ctx.open_for_change::<S>(&self.change)?;
        let before = pause_of(&queue, &self.queue)?;
        let would_change = u64::from(before.is_some());
        let unpause = || self.decision.operator(&queue).unpause(&self.queue);
        let changed = change(ctx, (&self.change, &self.backup), would_change, unpause)?;
        let after = if self.change.dry_run { before.clone() } else { pause_of(&queue, &self.queue)? };
        let pending = queue.stats()?.queue(&self.queue).pending;
        let jobs = format!("{pending} pending {}", plural(pending, "job", "jobs"));
        let now = queue.now_ms();
        let name = sanitize(&self.queue);
        let line = match (self.change.dry_run, changed, &before) {
            (false, true, _) => format!(
                "unpaused queue {name}: its {jobs} are claimable again (worker pools find them at their next poll)"
            ),
            (true, _, Some(pause)) => {
                format!("dry run: would unpause queue {name} ({}; {jobs}); nothing was changed", record(pause, now))
            }
            (dry, _, _) => {
                let prefix = if dry { "dry run: " } else { "" };
                format!("{prefix}queue {name} is not paused; nothing changed")
            }
        };
        let result = Changed { command: "unpause", queue: &self.queue, after, pending, would_change, changed, now };
        result.print(ctx, &self.change, line)
    }
}

/// The queue's pause, if it is paused (refusing a bad queue name with the library's error).
fn pause_of<S: CliStore>(queue: &Queue<S>, name: &str) -> CliResult<Option<PausedQueue>> {
    if !queue.is_paused(name)? {
        return Ok(None);
    }
    Ok(queue.paused_queues()?.into_iter().find(|p| p.queue == name))
}

/// Makes the change unless it is a dry run or `--expect` rules it out; returns whether it
/// changed the queue. The change is one row, changed or not by one statement: an `--expect`
/// the preview cannot meet changes nothing, `--expect 0` never calls it (it would change
/// nothing or break the expectation), and `--expect 1` fails, having changed nothing, when
/// the statement found the queue changed already by someone else. `--backup` is taken once
/// those checks have passed, before the statement (by every run that is not a dry run).
pub(crate) fn change(
    ctx: &mut Context,
    (opts, backup): (&ChangeOpts, &BackupOpts),
    would_change: u64,
    make: impl FnOnce() -> fenceq::Result<bool>,
) -> CliResult<bool> {
    if opts.dry_run || opts.expect.is_some_and(|n| n != would_change) || opts.expect == Some(0) {
        opts.check_counted(would_change, QUEUES)?;
        backup.take(ctx, opts.dry_run)?;
        return Ok(false);
    }
    backup.take(ctx, false)?;
    let changed = make()?;
    opts.check_counted(u64::from(changed), QUEUES)?;
    Ok(changed)
}

/// `since 2026-05-01T12:00:00.000Z (5m ago) by alice: outage`.
fn record(pause: &PausedQueue, now: i64) -> String {
    let by = pause.by.as_deref().map_or_else(|| "an unnamed caller".to_string(), sanitize);
    let mut text = format!("paused since {} by {by}", when(Some(pause.since), now));
    if let Some(note) = &pause.note {
        text.push_str(&format!(": {}", sanitize(note)));
    }
    text
}

/// A queue's pause as JSON (`null` when it is not paused).
pub fn pause_json(pause: Option<&PausedQueue>, now: i64) -> Value {
    pause.map_or(
        Value::Null,
        |p| json!({ "since": p.since, "age_ms": now.saturating_sub(p.since), "by": p.by, "note": p.note }),
    )
}

/// What `pause` or `unpause` did (or, in a dry run, would do).
struct Changed<'a> {
    command: &'static str,
    queue: &'a str,
    /// The queue's pause after the command (in a dry run: as it is).
    after: Option<PausedQueue>,
    /// Its pending jobs.
    pending: u64,
    would_change: u64,
    changed: bool,
    now: i64,
}

impl Changed<'_> {
    /// Prints `line`, or with `--json` one document.
    fn print(&self, ctx: &mut Context, change: &ChangeOpts, line: String) -> CliResult<()> {
        if ctx.json() {
            return Ok(ctx.change_document(json!({
                "command": self.command,
                "dry_run": change.dry_run,
                "queue": self.queue,
                "paused": self.after.is_some(),
                "pause": pause_json(self.after.as_ref(), self.now),
                "pending": self.pending,
                "would_change": self.would_change,
                "changed": u64::from(self.changed),
            }))?);
        }
        Ok(ctx.out.line(line)?)
    }
}
