//! A queue's back-off (a provider's "retry after" for the whole queue, set by a handler's
//! `Outcome::RetryAfter` with the queue scope): `backoff show [QUEUE]` prints it, `backoff
//! clear QUEUE` lifts it before it ends. `clear` takes `--dry-run` and `--expect N` (counting
//! queues: 1 when it lifts a back-off, 0 when the queue is not backing off), `--backup PATH`,
//! `--by` and `--note` (recorded as the queue's last lift, which `backoff show QUEUE` prints).

use super::backup::BackupOpts;
use super::decision::DecisionOpts;
use super::output::{sanitize, when};
use super::store::CliStore;
use super::{ChangeOpts, CliResult, Context};
use clap::{Args, Subcommand};
use fenceq::{BackoffLift, QueueBackoff};
use serde_json::{json, Value};

/// Arguments of `backoff`.
#[derive(Debug, Args)]
pub struct BackoffArgs {
    #[command(subcommand)]
    pub action: BackoffAction,
}

/// What `backoff` does.
#[derive(Debug, Subcommand)]
pub enum BackoffAction {
    /// Prints the back-off of QUEUE (or of every queue backing off): until when no claim of
    /// it hands out anything, and why. With QUEUE, also its last lift (who lifted a back-off
    /// before it ended, when and why).
    Show {
        /// The queue (every queue backing off when left out).
        #[arg(value_name = "QUEUE")]
        queue: Option<String>,
    },
    /// Lifts the back-off of QUEUE before it ends: its due jobs are claimable again at once
    /// (worker pools of other processes find them at their next poll).
    ///
    /// --expect counts queues here: 1 when the command lifts a back-off, 0 when the queue is
    /// not backing off.
    Clear {
        /// The queue backing off.
        #[arg(value_name = "QUEUE")]
        queue: String,

        #[command(flatten)]
        change: ChangeOpts,

        #[command(flatten)]
        backup: BackupOpts,

        #[command(flatten)]
        decision: DecisionOpts,
    },
}

impl BackoffArgs {
    /// Shows or lifts a back-off.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        match self.action {
            BackoffAction::Show { queue: name } => {
                let queue = ctx.open_read_only::<S>()?;
                let backoffs = match &name {
                    Some(name) => queue.queue_backoff(name)?.into_iter().collect(),
                    None => queue.queue_backoffs()?,
                };
                let lift = match &name {
                    Some(name) => queue.last_backoff_lift(name)?,
                    None => None,
                };
                let now = queue.now_ms();
                if ctx.json() {
                    let list: Vec<Value> = backoffs.iter().map(|b| backoff_json(b, now)).collect();
                    let mut shown = json!({ "now": now, "queue": name, "backoffs": list });
                    if name.is_some() {
                        shown["last_lift"] = lift.as_ref().map_or(Value::Null, lift_json);
                    }
                    return Ok(ctx.out.document(&shown)?);
                }
                if backoffs.is_empty() {
                    let line = match &name {
                        Some(name) => format!("queue {} is not backing off", sanitize(name)),
                        None => "no queue is backing off".to_string(),
                    };
                    ctx.out.line(line)?;
                }
                for b in &backoffs {
                    ctx.out.line(line(b, now))?;
                }
                if let Some(lift) = &lift {
                    ctx.out.line(lift_line(lift, now))?;
                }
                Ok(())
            }
            BackoffAction::Clear { queue: name, change, backup, decision } => {
                let queue = ctx.open_for_change::<S>(&change)?;
                let before = queue.queue_backoff(&name)?;
                let would_change = u64::from(before.is_some());
                // As pause and unpause: one statement lifts it or finds nothing to lift.
                let lift = || decision.operator(&queue).clear_backoff(&name);
                let cleared = super::pause::change(ctx, (&change, &backup), would_change, lift)?;
                let now = queue.now_ms();
                if ctx.json() {
                    let last_lift = queue.last_backoff_lift(&name)?;
                    return Ok(ctx.change_document(json!({
                        "command": "backoff clear",
                        "dry_run": change.dry_run,
                        "queue": name,
                        "backoff": before.as_ref().map(|b| backoff_json(b, now)),
                        "last_lift": last_lift.as_ref().map_or(Value::Null, lift_json),
                        "would_change": would_change,
                        "changed": u64::from(cleared),
                    }))?);
                }
                let shown = sanitize(&name);
                let text = match (change.dry_run, cleared, &before) {
                    (false, true, _) => {
                        format!("lifted the back-off of queue {shown}: its due jobs are claimable again")
                    }
                    (true, _, Some(b)) => {
                        format!("dry run: would lift the back-off ({}); nothing was changed", line(b, now))
                    }
                    (dry, _, _) => {
                        let prefix = if dry { "dry run: " } else { "" };
                        format!("{prefix}queue {shown} is not backing off; nothing changed")
                    }
                };
                Ok(ctx.out.line(text)?)
            }
        }
    }
}

/// `queue telegram backs off until 2026-05-01T12:00:00.000Z (in 30s): 429`.
fn line(b: &QueueBackoff, now: i64) -> String {
    format!(
        "queue {} backs off until {} (set {}): {}",
        sanitize(&b.queue),
        when(Some(b.until), now),
        when(Some(b.since), now),
        sanitize(&b.reason)
    )
}

/// `last lifted 2026-05-01T12:00:00.000Z (5m ago) by alice: provider recovered (the back-off: 429)`.
fn lift_line(lift: &BackoffLift, now: i64) -> String {
    let by = lift.by.as_deref().map_or_else(|| "an unnamed caller".to_string(), sanitize);
    let mut text = format!("last lifted {} by {by}", when(Some(lift.at), now));
    if let Some(note) = &lift.note {
        text.push_str(&format!(": {}", sanitize(note)));
    }
    text.push_str(&format!(" (the back-off: {})", sanitize(&lift.reason)));
    text
}

/// A queue's last lift as JSON.
fn lift_json(lift: &BackoffLift) -> Value {
    json!({ "at": lift.at, "by": lift.by, "note": lift.note, "reason": lift.reason })
}

/// A queue's back-off as JSON.
pub fn backoff_json(b: &QueueBackoff, now: i64) -> Value {
    json!({
        "queue": b.queue,
        "until": b.until,
        "remaining_ms": b.until.saturating_sub(now).max(0),
        "reason": b.reason,
        "since": b.since,
    })
}
