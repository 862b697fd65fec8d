//! `fenceq demo`: runs the demo's scenario (`demo/scenario.rs`) and explains what happened,
//! or prints its figures as one JSON document with `--json`.

mod scenario;

use super::store::CliStore;
use super::{CliResult, Context};
use clap::Args;
use scenario::{DemoOptions, DemoSummary};
use serde_json::json;
use std::io::IsTerminal;

/// Options of `fenceq demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Distinct updates to record (every 7th is delivered twice).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(100..=1_000_000))]
    pub updates: u64,
    /// Worker threads in the pool.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub workers: u64,
}

impl DemoArgs {
    /// Runs the demo: in `--db` (an SQLite file, or a PostgreSQL URL and `--schema`), kept
    /// afterwards, else in a temporary SQLite file.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let options = DemoOptions {
            updates: self.updates,
            workers: self.workers as usize,
            progress: !ctx.json() && std::io::stderr().is_terminal(),
        };
        let summary = if ctx.db_given {
            scenario::check(&options)?;
            let queue = S::open_with(ctx, |builder| scenario::tune(builder, &options))?;
            scenario::run::<S>(&queue, ctx.db_display(), &options)?
        } else {
            scenario::run_temporary(&options)?
        };
        if ctx.json() {
            ctx.out.document(&to_json(&summary, ctx.db_given))?;
        } else {
            for line in explain(&summary, ctx.db_given.then(|| ctx.db_args())) {
                ctx.out.line(line)?;
            }
        }
        if !summary.adds_up() {
            return Err(super::fail("the demo's figures do not add up; this is a bug, please report it"));
        }
        Ok(())
    }
}

fn to_json(s: &DemoSummary, kept: bool) -> serde_json::Value {
    json!({
        "db": if kept { json!(s.db) } else { json!(null) },
        "queue": scenario::QUEUE,
        "deliveries": s.deliveries,
        "updates": s.updates,
        "duplicates_dropped": s.duplicates_dropped,
        "completed": s.completed,
        "retries": s.retries,
        "exhausted": s.exhausted,
        "acknowledged": s.acknowledged,
        "unknown": s.unknown,
        "stale_writes_rejected": s.stale_writes_rejected,
        "replies": s.replies,
        "attempts": s.attempts,
        "processing_ms": s.processing.as_millis() as u64,
        "intake_per_sec": s.intake_per_sec.round(),
        "jobs_per_sec": s.jobs_per_sec.round(),
        "flow": {
            "queue": scenario::REPLIES,
            "chats": s.flow.chats,
            "replies": s.flow.replies,
            "most_in_a_second": s.flow.most_in_a_second,
            "most_in_a_second_per_chat": s.flow.most_in_a_second_per_chat,
            "in_order": s.flow.in_order,
            "retry_after_ms": s.flow.retry_after_ms,
            "waited_ms": s.flow.waited_ms,
            "attempts_left_before": s.flow.attempts_left_before_and_after.0,
            "attempts_left_after": s.flow.attempts_left_before_and_after.1,
            "took_ms": s.flow.took.as_millis() as u64,
            "holds": s.flow.holds(),
        },
        "adds_up": s.adds_up(),
    })
}

fn explain(s: &DemoSummary, kept: Option<String>) -> Vec<String> {
    // The path as a field of a line: a line feed in it cannot write a line of its own.
    let db = if kept.is_some() {
        format!("{} (kept)", super::output::sanitize(&s.db))
    } else {
        "a temporary file (deleted)".to_string()
    };
    let kept = kept.map(|db| super::output::sanitize(&db));
    vec![
        format!("fenceq demo: a Telegram-style bot intake, worked end to end in {db}"),
        String::new(),
        "Intake".to_string(),
        format!("  {:>7} deliveries recorded from two webhook threads ({:.0}/s, one enqueue call each)", s.deliveries, s.intake_per_sec),
        format!("  {:>7} redeliveries dropped by idempotent intake (same queue + key = same job)", s.duplicates_dropped),
        format!("  {:>7} distinct updates became jobs", s.updates),
        String::new(),
        "Processing (a pool of worker threads; each reply commits with its completion, fenced by ownership)".to_string(),
        format!("  {:>7} completed, each with exactly one reply row ({} replies written)", s.completed, s.replies),
        format!("  {:>7} retries: transient 502s on a first attempt, and the doomed updates' early attempts", s.retries),
        format!("  {:>7} exhausted after 3 attempts (chat not found): durable records, now acknowledged ({})", s.exhausted, s.acknowledged),
        format!("  {:>7} unknown: a timeout after the send; left for a reconciler, never retried blindly", s.unknown),
        format!("  {:>7} stale writes rejected: a worker stalled past its lease on update 99, another", s.stale_writes_rejected),
        "          worker reclaimed and finished it, and the stalled worker's late reply and settle".to_string(),
        "          were refused by the fence {id, attempt, claim_id}".to_string(),
        format!("  {:>7} attempts in all; {:.0} jobs/s settled ({} ms)", s.attempts, s.jobs_per_sec, s.processing.as_millis()),
        String::new(),
        "Flow control (Telegram's limits and each chat's order, held by the store)".to_string(),
        format!(
            "  {:>7} replies into {} chats, a group per chat, under 30/1s overall and 1/1s, 20/60s per chat ({} ms)",
            s.flow.replies,
            s.flow.chats,
            s.flow.took.as_millis()
        ),
        format!(
            "  {:>7} most replies started in any second overall; {} in any second into one chat",
            s.flow.most_in_a_second, s.flow.most_in_a_second_per_chat
        ),
        format!(
            "  {:>7} every chat answered in order, one reply at a time",
            if s.flow.in_order { "yes" } else { "NO" }
        ),
        format!(
            "  {:>7} ms retry_after of a 429 honoured (the reply waited {} ms); attempts left {} before and {} after",
            s.flow.retry_after_ms, s.flow.waited_ms, s.flow.attempts_left_before_and_after.0, s.flow.attempts_left_before_and_after.1
        ),
        String::new(),
        format!(
            "Every delivery is accounted for: {} = {} jobs + {} duplicates; {} jobs = {} completed + {} exhausted + {} unknown. {}",
            s.deliveries,
            s.updates,
            s.duplicates_dropped,
            s.updates,
            s.completed,
            s.exhausted,
            s.unknown,
            if s.adds_up() { "OK" } else { "MISMATCH" }
        ),
        if let Some(db) = kept { format!("Inspect it: fenceq {db} stats") } else { "Keep the database with --db PATH, then inspect it with `fenceq --db PATH stats`.".to_string() },
    ]
}
