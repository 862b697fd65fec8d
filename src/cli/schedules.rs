//! `schedules`: the periodic jobs the database records (what each is, where its ticks go,
//! its latest and next tick), as the processes that registered them recorded them. This
//! build need not have the `schedule` feature: it shows the definitions, it never parses them.

use super::output::{self, table, when};
use super::store::CliStore;
use super::{plural, CliResult, Context};
use clap::Args;
use fenceq::ScheduleRecord;
use serde_json::{json, Value};

/// Arguments of `schedules`.
#[derive(Debug, Args)]
pub struct SchedulesArgs {}

impl SchedulesArgs {
    /// Prints the schedules.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let queue = ctx.open_read_only::<S>()?;
        let now = queue.now_ms();
        let schedules = queue.schedule_records()?;
        if ctx.json() {
            for schedule in &schedules {
                ctx.out.record(&schedule_json(schedule, now))?;
            }
            return Ok(());
        }
        if schedules.is_empty() {
            return Ok(ctx.out.line("no schedules recorded")?);
        }
        let mut t = table(&["NAME", "SCHEDULE", "QUEUE", "LAST TICK", "NEXT TICK", "RECORDED"]);
        for schedule in &schedules {
            t.add_row(vec![
                output::sanitize(&schedule.name),
                output::cell(schedule.definition.as_deref(), 64),
                output::cell(schedule.queue.as_deref(), 48),
                when(schedule.last_tick, now),
                next_tick(schedule, now),
                when(schedule.recorded_at, now),
            ]);
        }
        ctx.out.table(&t)?;
        let n = schedules.len() as u64;
        let overdue = schedules.iter().filter(|s| is_overdue(s, now)).count() as u64;
        let mut summary = format!("{n} {}", plural(n, "schedule", "schedules"));
        if overdue > 0 {
            summary.push_str(&format!(
                "; {overdue} overdue: no process with {} registered has run its scheduler since the next tick came due",
                plural(overdue, "it", "them")
            ));
        }
        Ok(ctx.out.line(summary)?)
    }
}

/// How long after its next tick a schedule counts as overdue: a maintenance thread runs the
/// scheduler every few seconds by default, so a minute late means none is running it.
pub(crate) const OVERDUE_AFTER_MS: i64 = 60_000;

/// True when the recorded next tick is over [`OVERDUE_AFTER_MS`] in the past.
pub(crate) fn is_overdue(schedule: &ScheduleRecord, now: i64) -> bool {
    schedule.next_tick.is_some_and(|next| now.saturating_sub(next) > OVERDUE_AFTER_MS)
}

/// The next tick for people: its time, or why there is none.
fn next_tick(schedule: &ScheduleRecord, now: i64) -> String {
    match (schedule.next_tick, &schedule.definition) {
        (Some(next), _) => when(Some(next), now),
        (None, Some(_)) => "never".to_string(),
        (None, None) => "- (recorded by an older build)".to_string(),
    }
}

fn schedule_json(schedule: &ScheduleRecord, now: i64) -> Value {
    json!({
        "name": schedule.name,
        "definition": schedule.definition,
        "queue": schedule.queue,
        "last_tick": schedule.last_tick,
        "next_tick": schedule.next_tick,
        "recorded_at": schedule.recorded_at,
        "overdue": is_overdue(schedule, now),
    })
}
