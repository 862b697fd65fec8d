//! Limits: `limit set QUEUE [--rate N/T] [--group-rate N/T]... [--max-running N]` replaces a
//! queue's limits, `limit show [QUEUE]` prints them, `limit clear QUEUE` removes them. Stored in
//! the database: every process obeys them from the commit on. `set` and `clear` take
//! `--dry-run`, `--expect N` (counting queues: 1 when the queue's limits change, 0 when they
//! are so already) and `--backup PATH`.

use super::backup::BackupOpts;
use super::output::{self, table};
use super::store::CliStore;
use super::{ChangeOpts, CliResult, Context};
use clap::{Args, Subcommand};
use fenceq::{Limits, Queue, Rate};
use serde_json::{json, Value};

/// What `--expect` counts for `limit set` and `limit clear`.
const QUEUES: (&str, &str) = ("queue", "queues");

/// Arguments of `limit`.
#[derive(Debug, Args)]
pub struct LimitArgs {
    #[command(subcommand)]
    pub action: LimitAction,
}

/// What `limit` does.
#[derive(Debug, Subcommand)]
pub enum LimitAction {
    /// Replaces the queue's limits with these (at least one).
    ///
    /// --expect counts queues here: 1 when the queue's limits change, 0 when it has these
    /// already (group rates in any order). It is checked against the limits read just
    /// before the change.
    Set(LimitSetArgs),
    /// Prints one queue's limits, or every queue's that has some.
    Show(LimitShowArgs),
    /// Removes every limit of the queue.
    ///
    /// --expect counts queues here: 1 when the queue has limits to remove, 0 when it has
    /// none. It is checked against the limits read just before the change.
    Clear(LimitClearArgs),
}

/// Arguments of `limit set`.
#[derive(Debug, Args)]
pub struct LimitSetArgs {
    /// The queue.
    #[arg(value_name = "QUEUE")]
    pub queue: String,

    /// At most N claims of the queue in any window of T: N/T, T a number with ms, s, m or h
    /// (30/1s).
    #[arg(long, value_name = "N/T", value_parser = parse_rate)]
    pub rate: Option<Rate>,

    /// At most N claims of one group in any window of T; repeat it for several windows, all of
    /// which hold (--group-rate 1/1s --group-rate 20/60s).
    #[arg(long = "group-rate", value_name = "N/T", value_parser = parse_rate)]
    pub group_rates: Vec<Rate>,

    /// At most N running attempts of the queue, across every process.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(fenceq::MAX_LIMIT_COUNT)))]
    pub max_running: Option<u32>,

    #[command(flatten)]
    pub change: ChangeOpts,

    #[command(flatten)]
    pub backup: BackupOpts,
}

/// Arguments of `limit show`.
#[derive(Debug, Args)]
pub struct LimitShowArgs {
    /// Only this queue.
    #[arg(value_name = "QUEUE")]
    pub queue: Option<String>,
}

/// Arguments of `limit clear`.
#[derive(Debug, Args)]
pub struct LimitClearArgs {
    /// The queue.
    #[arg(value_name = "QUEUE")]
    pub queue: String,

    #[command(flatten)]
    pub change: ChangeOpts,

    #[command(flatten)]
    pub backup: BackupOpts,
}

fn parse_rate(text: &str) -> Result<Rate, String> {
    Rate::parse(text).map_err(|e| e.to_string())
}

impl LimitArgs {
    /// Runs the action.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        match self.action {
            LimitAction::Set(args) => {
                let limits = Limits { rate: args.rate, group_rates: args.group_rates, max_running: args.max_running };
                if limits.is_empty() {
                    return Err(super::fail(
                        "limit set needs at least one of --rate, --group-rate, --max-running (`fenceq limit clear` removes them)",
                    ));
                }
                let change = LimitChange { command: "limit set", queue: &args.queue, limits };
                change.run::<S>(ctx, &args.change, &args.backup)
            }
            LimitAction::Clear(args) => {
                let change = LimitChange { command: "limit clear", queue: &args.queue, limits: Limits::default() };
                change.run::<S>(ctx, &args.change, &args.backup)
            }
            LimitAction::Show(args) => {
                let queue = ctx.open_read_only::<S>()?;
                match args.queue {
                    Some(name) => {
                        let limits = queue.limits(&name)?;
                        if ctx.json() {
                            return Ok(ctx.out.document(&limits_json(&name, &limits))?);
                        }
                        Ok(ctx.out.line(format!("queue {} has {limits}", output::sanitize(&name)))?)
                    }
                    None => {
                        let all = queue.all_limits()?;
                        if ctx.json() {
                            for (name, limits) in &all {
                                ctx.out.record(&limits_json(name, limits))?;
                            }
                            return Ok(());
                        }
                        if all.is_empty() {
                            return Ok(ctx.out.line("no queue has limits")?);
                        }
                        let mut t = table(&["QUEUE", "LIMITS"]);
                        for (name, limits) in &all {
                            t.add_row(vec![output::sanitize(name), limits.to_string()]);
                        }
                        Ok(ctx.out.table(&t)?)
                    }
                }
            }
        }
    }
}

/// `limit set` or `limit clear`: the queue's limits replaced by `limits` (none, for clear).
struct LimitChange<'a> {
    command: &'static str,
    queue: &'a str,
    limits: Limits,
}

impl LimitChange<'_> {
    /// Makes the change (or previews it, on a read-only connection) and reports it.
    fn run<S: CliStore>(&self, ctx: &mut Context, change: &ChangeOpts, backup: &BackupOpts) -> CliResult<()> {
        // Refused as the change would refuse it (the name, a count, a window), before anything
        // is read or backed up: on a throwaway queue, as enqueue's preview does.
        Queue::open_in_memory()?.set_limits(self.queue, &self.limits)?;
        let queue = ctx.open_for_change::<S>(change)?;
        let before = queue.limits(self.queue)?;
        let would_change = u64::from(normalized(&before) != normalized(&self.limits));
        change.check_counted(would_change, QUEUES)?;
        let dry = change.dry_run;
        if !dry {
            // The checks above have passed; nothing is changed before the backup.
            backup.take(ctx, false)?;
            if would_change == 1 {
                queue.set_limits(self.queue, &self.limits)?;
            }
        }
        let after = if dry { self.limits.clone() } else { queue.limits(self.queue)? };
        if ctx.json() {
            let mut document = limits_json(self.queue, &after);
            document["command"] = json!(self.command);
            document["dry_run"] = json!(dry);
            document["before"] = limit_fields(&before);
            document["would_change"] = json!(would_change);
            document["changed"] = json!(if dry { 0 } else { would_change });
            return Ok(ctx.change_document(document)?);
        }
        let name = output::sanitize(self.queue);
        let line = match (dry, would_change) {
            (true, 1) => format!("dry run: queue {name} would have {after} (it has {before}); nothing was changed"),
            (false, 1) => format!("queue {name} now has {after} (it had {before})"),
            (dry, _) => {
                let prefix = if dry { "dry run: " } else { "" };
                format!("{prefix}queue {name} has {before} already; nothing changed")
            }
        };
        Ok(ctx.out.line(line)?)
    }
}

/// Limits in one order, to compare (the group rates' order means nothing).
fn normalized(limits: &Limits) -> Limits {
    let mut limits = limits.clone();
    limits.group_rates.sort_by_key(|rate| (rate.per, rate.count));
    limits
}

fn limits_json(queue: &str, limits: &Limits) -> Value {
    let mut value = json!({ "queue": queue });
    if let (Value::Object(object), Value::Object(fields)) = (&mut value, limit_fields(limits)) {
        object.extend(fields);
    }
    value
}

/// A queue's limits as JSON fields: `rate`, `group_rates`, `max_running`.
fn limit_fields(limits: &Limits) -> Value {
    let rate = |r: &Rate| json!({ "count": r.count, "window_ms": r.per.as_millis() as u64, "text": r.to_string() });
    json!({
        "rate": limits.rate.as_ref().map(rate),
        "group_rates": limits.group_rates.iter().map(rate).collect::<Vec<_>>(),
        "max_running": limits.max_running,
    })
}
