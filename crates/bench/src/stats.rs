//! The `stats` step (`--only stats`, on either store): what one `Queue::stats()` call costs
//! with many settled rows kept, beside the whole-table count that `stats()` ran before the
//! settled states had kept counts, on the same rows in the same round.
//!
//! The rows are settled through the library (batched intake, batched claims, `complete_all`),
//! so that their counts are the ones the settle statements keep; a few pending and running
//! rows beside them give the live states something to count.

use crate::scenarios::{payload, Figure, Latency};
use crate::{CliResult, Context};
use fenceq::store::Store;
use fenceq::{NewJob, Queue};
use serde_json::json;
use std::time::{Duration, Instant};

/// The step's name, for `--only`.
pub(crate) const STEP: &str = "stats";

/// Calls timed per figure per round.
const CALLS: usize = 40;

/// Rows per intake batch, claim and settle while filling.
const FILL_BATCH: u32 = 1000;

/// Settles `rows` jobs of queue `bench` through the library, then leaves 1,000 pending and 32
/// running beside them.
fn fill<S: Store>(queue: &Queue<S>, rows: u64) -> CliResult<()> {
    let lease = Duration::from_secs(3600);
    crate::scenarios::in_batches(rows, u64::from(FILL_BATCH), |range| {
        let n = range.end - range.start;
        queue.enqueue_batch(range.map(|j| NewJob::new("bench", payload(j))))?;
        let mut claimed = 0;
        while claimed < n {
            let jobs = queue.claim_batch("bench", "fill", lease, (n - claimed) as u32)?;
            if jobs.is_empty() {
                return Err(crate::fail("the stats step's fill found no job to claim"));
            }
            claimed += jobs.len() as u64;
            let tokens: Vec<_> = jobs.iter().map(|j| j.token()).collect();
            for result in queue.complete_all(&tokens)? {
                result?;
            }
        }
        Ok(())
    })?;
    queue.enqueue_batch((0..1032).map(|j| NewJob::new("bench", payload(j))))?;
    queue.claim_batch("bench", "fill", lease, 32)?;
    let stats = queue.stats()?.queue("bench");
    if (stats.completed, stats.pending, stats.running) != (rows, 1000, 32) {
        return Err(crate::fail(format!("the stats step's fill left {stats:?}")));
    }
    Ok(())
}

/// What `stats()` ran before the settled states had kept counts: a count of the whole table by
/// queue and state (the same text on both stores; `now` is written in).
pub(crate) fn whole_table_count(now: i64) -> String {
    format!(
        "SELECT queue, state, acknowledged_at IS NOT NULL, count(*), min(run_at),
                sum(CASE WHEN state = 'running' AND lease_until <= {now} THEN 1 ELSE 0 END)
         FROM fenceq_jobs GROUP BY queue, state, acknowledged_at IS NOT NULL ORDER BY queue"
    )
}

/// Fills `queue` with `rows` settled jobs, runs `after_fill` if any (PostgreSQL: a vacuum, the
/// state autovacuum leaves the table in once it has caught up), then runs `rounds` rounds,
/// printing each figure as it is measured and the medians at the end.
pub(crate) fn run<S: Store>(
    queue: &Queue<S>,
    rows: u64,
    rounds: usize,
    after_fill: Option<&mut dyn FnMut() -> CliResult<()>>,
    whole_table: &mut dyn FnMut() -> CliResult<()>,
    ctx: &mut Context,
) -> CliResult<()> {
    let started = Instant::now();
    fill(queue, rows)?;
    let filled_secs = started.elapsed().as_secs_f64();
    if let Some(after_fill) = after_fill {
        after_fill()?;
    }
    let mut ratios = Vec::new();
    let mut p50s = (Vec::new(), Vec::new());
    for round in 1..=rounds.max(1) {
        let [stats, old] = round_of(queue, rows, whole_table)?;
        ratios.push(stats.value / old.value);
        p50s.0.push(stats.value);
        p50s.1.push(old.value);
        for figure in [stats, old] {
            if ctx.json() {
                let mut line = json!({"step": STEP, "round": round, "scenario": figure.scenario,
                                      "value": figure.value, "unit": figure.unit});
                for (k, v) in &figure.details {
                    line[k.as_str()] = json!(v);
                }
                ctx.out.record(&line)?;
            } else {
                let details: Vec<String> = figure.details.iter().map(|(k, v)| format!("{k} {v:.3}")).collect();
                ctx.out.line(format!(
                    "round {round}: {} {:.1} {} ({})",
                    figure.scenario,
                    figure.value,
                    figure.unit,
                    details.join(", ")
                ))?;
            }
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (stats_us, old_us, ratio) = (median(p50s.0), median(p50s.1), median(ratios));
    if ctx.json() {
        ctx.out.record(&json!({"summary": STEP, "settled_rows": rows, "rounds": rounds, "fill_secs": filled_secs,
                               "stats_p50_us_median": stats_us, "whole_table_count_p50_us_median": old_us,
                               "ratio_median": ratio}))?;
    } else {
        ctx.out.line(format!(
            "stats() at {rows} settled rows: p50 {stats_us:.1} µs (median of {rounds} rounds), \
             the whole-table count {old_us:.1} µs: {ratio:.4} × (filled in {filled_secs:.1} s)"
        ))?;
    }
    Ok(())
}

/// One round: `Queue::stats()` and then `whole_table` (the old statement, by the caller's own
/// connection), each called [`CALLS`] times; their p50 and p99 in µs.
fn round_of<S: Store>(
    queue: &Queue<S>,
    rows: u64,
    whole_table: &mut dyn FnMut() -> CliResult<()>,
) -> CliResult<[Figure; 2]> {
    let stats = time(&mut || queue.stats().map(drop).map_err(Into::into))?;
    let old = time(whole_table)?;
    Ok([
        Figure::of(format!("fenceq/stats/{rows}_settled"), stats.p50, "us_p50")
            .with("p99_us", stats.p99)
            .with("p50_ratio_to_whole_table_count", stats.p50 / old.p50),
        Figure::of(format!("whole_table_count/stats/{rows}_settled"), old.p50, "us_p50").with("p99_us", old.p99),
    ])
}

fn time(call: &mut dyn FnMut() -> CliResult<()>) -> CliResult<Latency> {
    let mut us = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        call()?;
        us.push(started.elapsed().as_secs_f64() * 1e6);
    }
    Ok(Latency::of(us))
}
