//! The SQLite bench's options and its report: the rounds' figures as JSON lines, or tables
//! at the end. The plan of rounds and ratios is in `rounds.rs`, the measurements in
//! `scenarios.rs` and `guards.rs`; a PostgreSQL `--db` goes to `postgres.rs` instead.

use crate::rounds::{self, BenchOptions, Report, Spread, STEPS};
use crate::scenarios::Figure;
use crate::{fail, guards, CliResult, Context};
use clap::{Args, ValueEnum};
use fenceq::Synchronous;
use serde_json::{json, Value};

/// The durability setting, as the command line spells it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SyncArg {
    /// synchronous=NORMAL (survives an application crash).
    Normal,
    /// synchronous=FULL (survives a power loss; one fsync per commit).
    Full,
}

/// The `--only` step of the long-horizon scenario (PostgreSQL only: `long_horizon.rs`).
pub(crate) const LONG_HORIZON: &str = "long_horizon";

/// The bench's own options (beside `--db`, `--schema` and `--json`).
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Jobs per throughput scenario (batch scenarios use a multiple).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1000..=10_000_000))]
    pub jobs: u64,
    /// Worker threads of the pools.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub workers: u64,
    /// Durability setting of the raw loops and the one-producer, pool and end-to-end
    /// scenarios (the FULL scenarios always run at FULL; SQLite only: on PostgreSQL
    /// durability is the server's synchronous_commit).
    #[arg(long, value_enum, default_value_t = SyncArg::Normal)]
    pub sync: SyncArg,
    /// Pending rows for the large claim-latency measurement (compared with 1,000), and jobs
    /// worked through for the peak-RSS figure (measured once, after the rounds; SQLite only).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1000..=10_000_000))]
    pub latency_rows: u64,
    /// The queue-wide rate of the held-rate step (starts per second, four processes of
    /// eight workers; measured once, after the rounds).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(10..=100_000))]
    pub rate_limit: u32,
    /// Seconds of the held-rate step over which the achieved rate is measured (the backlog
    /// lasts one second longer).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub rate_secs: u64,
    /// Groups of the held-rate step's jobs (0: none). With groups, the jobs go round-robin
    /// into that many groups and each group has a rate as high as the queue's, which never
    /// holds a job back alone: every claim takes the claim of a queue with group rates.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub rate_groups: u32,
    /// Interleaved rounds: every ratio is computed within a round, and the report gives the
    /// median and spread (min, max) over the rounds.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub rounds: u64,
    /// Run only these steps (comma-separated): intake, pool, end_to_end, webhook, claim,
    /// batch_1000, full, guards, latency, flow (the pool under limits it never reaches; with
    /// latency, the claim on a queue of groups), rate (a rate held by four processes), pickup
    /// (enqueue to handler at a fixed rate, the producer in this process and in another),
    /// long_horizon (PostgreSQL only, never in a run without --only: minutes of a fixed rate
    /// through a clean phase, an idle-in-transaction session, readers and a recovery).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Measure only these schema variants in the guards step (comma-separated; all when
    /// omitted): one variant per run lets `valgrind --tool=callgrind
    /// --toggle-collect='*guards::measure*'` count its instructions per phase.
    #[arg(long, value_delimiter = ',')]
    pub guard: Vec<String>,
    /// The stats step's settled rows (`--only stats`, on either store): `Queue::stats()` with
    /// this many completed jobs kept, beside the whole-table count it ran before.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1000..=10_000_000))]
    pub stats_rows: u64,
    /// The long_horizon step's offered rate, jobs/s (one producer, batched).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub horizon_rate: u64,
    /// The long_horizon step's workers (one pool).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub horizon_workers: u64,
    /// The long_horizon step's phases, seconds: clean,idle_in_transaction,readers,recovery
    /// (one value for every phase; 0 leaves a phase out).
    #[arg(long, value_delimiter = ',', default_values_t = [60, 90, 60, 60],
          value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub phase_secs: Vec<u64>,
    /// The long_horizon step's lease, seconds (the pool's heartbeat renews every third of it;
    /// the pool's default is 30).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub horizon_lease_secs: u64,
}

impl BenchArgs {
    /// Runs every round; with --json one JSON line per figure of each round as it is
    /// measured, then one line per summary; else tables at the end.
    pub fn run(self, ctx: &mut Context) -> CliResult<()> {
        let one_off = |o: &str| o == LONG_HORIZON || o == crate::stats::STEP;
        if let Some(unknown) = self.only.iter().find(|o| !STEPS.contains(&o.as_str()) && !one_off(o)) {
            return Err(fail(format!("--only: no step named {unknown:?} (steps: {})", STEPS.join(", "))));
        }
        let variants: Vec<&str> = guards::variants().iter().map(|v| v.name).collect();
        if let Some(unknown) = self.guard.iter().find(|g| !variants.contains(&g.as_str())) {
            return Err(fail(format!("--guard: no variant named {unknown:?} (variants: {})", variants.join(", "))));
        }
        #[cfg(feature = "postgres")]
        if ctx.is_postgres() {
            return crate::postgres::run(&self, ctx);
        }
        if self.only.iter().any(|o| o == LONG_HORIZON) {
            return Err(fail("--only long_horizon runs on PostgreSQL only: give a postgres:// --db"));
        }
        let dir = ctx.db.clone().unwrap_or_else(rounds::default_dir);
        if self.only.iter().any(|o| o == crate::stats::STEP) {
            return stats_on_sqlite(&self, &dir, ctx);
        }
        let options = BenchOptions {
            jobs: self.jobs,
            workers: self.workers as usize,
            sync: match self.sync {
                SyncArg::Normal => Synchronous::Normal,
                SyncArg::Full => Synchronous::Full,
            },
            latency_rows: self.latency_rows,
            rate_limit: self.rate_limit,
            rate_secs: self.rate_secs,
            rate_groups: self.rate_groups,
            rounds: self.rounds as usize,
            only: self.only,
            guards: self.guard,
            dir: dir.clone(),
        };
        let progress = ctx.out.progress(options.rounds as u64, "benchmarking, round");
        let out = &mut ctx.out;
        let result = rounds::run(&options, |round, figure| {
            progress.set_position(round.saturating_sub(1) as u64);
            progress.set_message(figure.scenario.clone());
            if out.is_json() {
                out.record(&round_json(round, figure, &options))?;
            }
            Ok(())
        });
        progress.finish_and_clear();
        if ctx.db.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        let report = result?;
        if ctx.json() {
            for line in summary_json(&report, &options) {
                ctx.out.record(&line)?;
            }
            return Ok(());
        }
        print_tables(ctx, &report, &options)
    }
}

fn settings(o: &BenchOptions) -> Value {
    json!({ "jobs": o.jobs, "workers": o.workers, "sync": o.sync.pragma(), "rounds": o.rounds })
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// The stats step on a fresh file in `dir` (removed after unless `--db` named the directory).
fn stats_on_sqlite(args: &BenchArgs, dir: &std::path::Path, ctx: &mut Context) -> CliResult<()> {
    std::fs::create_dir_all(dir)?;
    let path = rounds::fresh_in(dir, "stats");
    let queue = crate::scenarios::open(&path, Synchronous::Normal, 2)?;
    let raw = fenceq::rusqlite::Connection::open(&path)?;
    let sql = crate::stats::whole_table_count(queue.now_ms());
    let mut whole_table = || -> CliResult<()> {
        let mut statement = raw.prepare_cached(&sql)?;
        let mut rows = statement.query([])?;
        while rows.next()?.is_some() {}
        Ok(())
    };
    let result = crate::stats::run(&queue, args.stats_rows, args.rounds as usize, None, &mut whole_table, ctx);
    if ctx.db.is_none() {
        let _ = std::fs::remove_dir_all(dir);
    }
    result
}

fn round_json(round: usize, f: &Figure, o: &BenchOptions) -> Value {
    let mut value = settings(o);
    value["round"] = json!(round);
    value["scenario"] = json!(f.scenario);
    value["value"] = json!(round2(f.value));
    value["unit"] = json!(f.unit);
    for (k, v) in &f.details {
        value[k.as_str()] = json!((v * 1000.0).round() / 1000.0);
    }
    value
}

pub(crate) fn spread_json(value: &mut Value, s: &Spread, digits: f64) {
    let r = |v: f64| (v * digits).round() / digits;
    value["median"] = json!(r(s.median));
    value["min"] = json!(r(s.min));
    value["max"] = json!(r(s.max));
    value["rounds_measured"] = json!(s.rounds);
}

/// One line per figure (`"summary": "figure"`) and ratio.
fn summary_json(report: &Report, o: &BenchOptions) -> Vec<Value> {
    let mut lines = Vec::new();
    for f in &report.figures {
        let mut value = settings(o);
        value["summary"] = json!("figure");
        value["scenario"] = json!(f.scenario);
        value["unit"] = json!(f.unit);
        value["value"] = json!(round2(f.spread.median));
        spread_json(&mut value, &f.spread, 100.0);
        for (k, v) in &f.details {
            value[k.as_str()] = json!((v * 1000.0).round() / 1000.0);
        }
        lines.push(value);
    }
    for r in &report.ratios {
        let mut value = settings(o);
        value["summary"] = json!("ratio");
        value["ratio"] = json!(r.name);
        value["numerator"] = json!(r.numerator);
        value["denominator"] = json!(r.denominator);
        spread_json(&mut value, &r.spread, 1000.0);
        value["target"] = json!(r.target);
        value["met"] = json!(r.met());
        lines.push(value);
    }
    let mut run = settings(o);
    run["summary"] = json!("run");
    run["seconds"] = json!(round2(report.seconds));
    lines.push(run);
    lines
}

/// A figure in a table: whole numbers from 100 up, two decimals below (a percentage just
/// under 100, a latency of a few microseconds).
fn figure_text(value: f64) -> String {
    if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

fn print_tables(ctx: &mut Context, report: &Report, o: &BenchOptions) -> CliResult<()> {
    let mut table = crate::output::table(&["scenario", "median", "min – max", "unit", "details (medians)"]);
    for f in &report.figures {
        let details: Vec<String> = f.details.iter().map(|(k, v)| format!("{k}={v:.2}")).collect();
        table.add_row(vec![
            f.scenario.clone(),
            figure_text(f.spread.median),
            format!("{} – {}", figure_text(f.spread.min), figure_text(f.spread.max)),
            f.unit.to_string(),
            details.join(" "),
        ]);
    }
    ctx.out.table(&table)?;
    let mut table = crate::output::table(&["ratio (within each round)", "median", "min – max", "target", "met"]);
    for r in &report.ratios {
        table.add_row(vec![
            r.name.clone(),
            format!("{:.2}", r.spread.median),
            format!("{:.2} – {:.2}", r.spread.min, r.spread.max),
            r.target.map_or_else(String::new, |t| format!("≥ {t:.2}")),
            r.met().map_or_else(String::new, |m| if m { "yes".into() } else { "NO".into() }),
        ]);
    }
    ctx.out.table(&table)?;
    ctx.out.line(format!(
        "jobs={} workers={} sync={:?} latency_rows={} rounds={} in {:.0} s (WAL; ratios are within each round)",
        o.jobs, o.workers, o.sync, o.latency_rows, o.rounds, report.seconds
    ))?;
    Ok(())
}
