//! `fenceq bench`: fenceq's throughput and claim latency beside a raw rusqlite baseline
//! measured in the same process and run. The options and the output are here; the scenarios
//! themselves are in `bench/scenarios.rs`, and those on a PostgreSQL `--db` URL (beside a
//! raw SQL loop on the same server) in `bench/postgres.rs`.

#[cfg(feature = "postgres")]
mod postgres;
mod scenarios;

use super::{CliResult, Context};
use clap::{Args, ValueEnum};
use fenceq::Synchronous;
use scenarios::{BenchOptions, Figure};
use serde_json::json;

/// The durability setting, as the command line spells it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SyncArg {
    /// synchronous=NORMAL (survives an application crash).
    Normal,
    /// synchronous=FULL (survives a power loss; one fsync per commit).
    Full,
}

/// Options of `fenceq bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Jobs per throughput scenario (batch scenarios use a multiple).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1000..=10_000_000))]
    pub jobs: u64,
    /// Worker threads of the end-to-end pool.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub workers: u64,
    /// Durability setting of the raw baselines and the end-to-end scenario (SQLite; on
    /// PostgreSQL durability is the server's synchronous_commit).
    #[arg(long, value_enum, default_value_t = SyncArg::Normal)]
    pub sync: SyncArg,
    /// Pending rows for the large claim-latency measurement (compared with 1,000), and jobs
    /// worked through for the peak-RSS figure (SQLite only).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1000..=10_000_000))]
    pub latency_rows: u64,
}

impl BenchArgs {
    /// Runs every scenario; with --json one JSON line per scenario as it finishes, else a
    /// table at the end.
    pub fn run(self, ctx: &mut Context) -> CliResult<()> {
        #[cfg(feature = "postgres")]
        if ctx.is_postgres() {
            return postgres::run(&self, ctx);
        }
        let dir = if ctx.db_given {
            ctx.db.clone()
        } else {
            std::env::temp_dir().join(format!("fenceq-bench-{}", std::process::id()))
        };
        let options = BenchOptions {
            jobs: self.jobs,
            workers: self.workers as usize,
            sync: match self.sync {
                SyncArg::Normal => Synchronous::Normal,
                SyncArg::Full => Synchronous::Full,
            },
            latency_rows: self.latency_rows,
            dir: dir.clone(),
        };
        let progress = ctx.out.progress(11, "benchmarking");
        let out = &mut ctx.out;
        // With --json each figure is printed as soon as it is measured (one JSON line each).
        let result = scenarios::run(&options, |figure| {
            progress.inc(1);
            progress.set_message(figure.scenario.clone());
            if out.is_json() {
                out.record(&to_json(figure, &options))?;
            }
            Ok(())
        });
        progress.finish_and_clear();
        if !ctx.db_given {
            let _ = std::fs::remove_dir_all(&dir);
        }
        let figures = result?;
        if ctx.json() {
            return Ok(());
        }
        let mut table = super::output::table(&["scenario", "value", "unit", "details"]);
        for f in &figures {
            let details: Vec<String> = f.details.iter().map(|(k, v)| format!("{k}={v:.2}")).collect();
            table.add_row(vec![f.scenario.clone(), format!("{:.0}", f.value), f.unit.to_string(), details.join(" ")]);
        }
        ctx.out.table(&table)?;
        ctx.out.line(format!(
            "jobs={} workers={} sync={:?} latency_rows={} (WAL; ratios are from this one run)",
            options.jobs, options.workers, options.sync, options.latency_rows
        ))?;
        Ok(())
    }
}

fn to_json(f: &Figure, o: &BenchOptions) -> serde_json::Value {
    let mut value = json!({
        "scenario": f.scenario,
        "value": (f.value * 100.0).round() / 100.0,
        "unit": f.unit,
        "jobs": o.jobs,
        "workers": o.workers,
        "sync": o.sync.pragma(),
    });
    for (k, v) in &f.details {
        value[k.as_str()] = json!((v * 1000.0).round() / 1000.0);
    }
    value
}
