//! Limits: `limit set QUEUE [--rate N/T] [--group-rate N/T]... [--max-running N]` replaces a
//! queue's limits, `limit show [QUEUE]` prints them, `limit clear QUEUE` removes them. Stored in
//! the database: every process obeys them from the commit on.

use super::output::{self, table};
use super::store::CliStore;
use super::{CliResult, Context};
use clap::{Args, Subcommand};
use fenceq::{Limits, Rate};
use serde_json::{json, Value};

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
    Set(LimitSetArgs),
    /// Prints one queue's limits, or every queue's that has some.
    Show(LimitShowArgs),
    /// Removes every limit of the queue.
    Clear(LimitQueueArg),
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
}

/// Arguments of `limit show`.
#[derive(Debug, Args)]
pub struct LimitShowArgs {
    /// Only this queue.
    #[arg(value_name = "QUEUE")]
    pub queue: Option<String>,
}

/// A queue, for `limit clear`.
#[derive(Debug, Args)]
pub struct LimitQueueArg {
    /// The queue.
    #[arg(value_name = "QUEUE")]
    pub queue: String,
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
                let queue = ctx.open_existing::<S>()?;
                queue.set_limits(&args.queue, &limits)?;
                print_one(ctx, &args.queue, &queue.limits(&args.queue)?, "now")
            }
            LimitAction::Clear(args) => {
                let queue = ctx.open_existing::<S>()?;
                queue.clear_limits(&args.queue)?;
                print_one(ctx, &args.queue, &Limits::default(), "now")
            }
            LimitAction::Show(args) => {
                let queue = ctx.open_read_only::<S>()?;
                match args.queue {
                    Some(name) => print_one(ctx, &name, &queue.limits(&name)?, ""),
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

fn print_one(ctx: &mut Context, queue: &str, limits: &Limits, now: &str) -> CliResult<()> {
    if ctx.json() {
        return Ok(ctx.out.document(&limits_json(queue, limits))?);
    }
    let verb = if now.is_empty() { "has" } else { "now has" };
    Ok(ctx.out.line(format!("queue {} {verb} {limits}", output::sanitize(queue)))?)
}

fn limits_json(queue: &str, limits: &Limits) -> Value {
    let rate = |r: &Rate| json!({ "count": r.count, "window_ms": r.per.as_millis() as u64, "text": r.to_string() });
    json!({
        "queue": queue,
        "rate": limits.rate.as_ref().map(rate),
        "group_rates": limits.group_rates.iter().map(rate).collect::<Vec<_>>(),
        "max_running": limits.max_running,
    })
}
