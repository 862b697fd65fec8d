//! The bench on a PostgreSQL `--db` at a small size, run as the binary (`fenceq-bench --db
//! $FENCEQ_POSTGRES_URL --schema PREFIX --json`, what `fenceq bench` runs): every cell of
//! every round beside its raw loop, one summary per cell, and no scratch schema left behind.
//!
//! Without `FENCEQ_POSTGRES_URL` (`scripts/postgres start; eval "$(scripts/postgres env)"`)
//! it says it skipped, except under `CI=true`, where it fails.
#![cfg(feature = "postgres")]

#[path = "common/stats_step.rs"]
mod stats_step;

use assert_cmd::Command;
use diesel::connection::SimpleConnection;
use diesel::sql_types::Text;
use diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
use serde_json::Value;

/// The test server, and the prefix of this test's scratch schemas (dropped at the end).
struct Scratch {
    url: String,
    schema: String,
}

impl Scratch {
    /// The test server from `FENCEQ_POSTGRES_URL`, or `None` (after saying so) without one
    /// outside CI.
    fn new() -> Option<Scratch> {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        match std::env::var("FENCEQ_POSTGRES_URL") {
            Ok(url) if !url.trim().is_empty() => {
                let unique = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
                Some(Scratch { url, schema: format!("fenceq_bench_test_{}_{unique}", std::process::id()) })
            }
            _ if ci => panic!("FENCEQ_POSTGRES_URL is not set, and CI=true requires the PostgreSQL tests"),
            _ => {
                eprintln!("skipped: FENCEQ_POSTGRES_URL is not set (scripts/postgres start; eval \"$(scripts/postgres env)\")");
                None
            }
        }
    }

    /// Runs the bench on the test server with this test's schema prefix.
    fn run(&self, args: &[&str]) -> Run {
        let out = Command::cargo_bin("fenceq-bench")
            .unwrap()
            .args(["--db", &self.url, "--schema", &self.schema])
            .args(args)
            .output()
            .unwrap();
        Run {
            code: out.status.code(),
            stdout: String::from_utf8(out.stdout).unwrap(),
            stderr: String::from_utf8(out.stderr).unwrap(),
        }
    }

    /// Schemas whose name starts with this test's prefix (the bench's scratch schemas).
    fn schemas(&self) -> Vec<String> {
        #[derive(QueryableByName)]
        struct Name {
            #[diesel(sql_type = Text)]
            nspname: String,
        }
        let mut conn = PgConnection::establish(&self.url).expect("a raw connection");
        let names: Vec<Name> =
            sql_query("SELECT nspname::text AS nspname FROM pg_namespace WHERE starts_with(nspname, $1)")
                .bind::<Text, _>(&self.schema)
                .load(&mut conn)
                .unwrap();
        names.into_iter().map(|n| n.nspname).collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Ok(mut conn) = PgConnection::establish(&self.url) {
            for schema in self.schemas() {
                let _ = conn.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
            }
        }
    }
}

/// What one run of the bench said.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts exit 0 and one JSON object per line of stdout; returns them.
    fn json_lines(&self) -> Vec<Value> {
        assert_eq!(self.code, Some(0), "stdout: {}\nstderr: {}", self.stdout, self.stderr);
        assert!(self.stderr.is_empty(), "stderr: {}", self.stderr);
        self.stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
            .collect()
    }
}

#[test]
fn the_bench_on_postgres_reports_every_cell_beside_its_raw_loop() {
    let Some(s) = Scratch::new() else { return };
    let lines = s
        .run(&["--json", "--jobs", "1000", "--workers", "2", "--rounds", "2", "--rate-limit", "50", "--rate-secs", "1"])
        .json_lines();
    let (held, lines): (Vec<Value>, Vec<Value>) =
        lines.into_iter().partition(|l| l["scenario"].as_str().unwrap().starts_with("postgres/fenceq/flow/rate_"));
    // Column by column, each column's raw loops right before fenceq.
    let mut cells = Vec::new();
    for column in [
        "enqueue_1_per_call",
        "batch_of_100",
        "process_w1",
        "process_wn",
        "end_to_end_w1",
        "end_to_end_wn",
        "enqueue_1_per_call_16_threads",
        "process_wn_limits_never_reached",
    ] {
        for row in ["raw_sql/1_op_per_tx", "raw_sql/100_ops_per_tx", "fenceq"] {
            let raw_batch_only = row == "raw_sql/100_ops_per_tx"
                && matches!(
                    column,
                    "enqueue_1_per_call" | "end_to_end_w1" | "end_to_end_wn" | "enqueue_1_per_call_16_threads"
                );
            let fenceq_only = row != "fenceq" && column == "process_wn_limits_never_reached";
            if !raw_batch_only && !fenceq_only {
                cells.push(format!("postgres/{row}/{column}"));
            }
        }
    }
    let (rounds, summaries): (Vec<_>, Vec<_>) = lines.iter().partition(|l| l.get("summary").is_none());
    let names = |lines: &[&serde_json::Value]| -> Vec<String> {
        lines.iter().map(|f| f["scenario"].as_str().unwrap().to_string()).collect()
    };
    let twice: Vec<String> = cells.iter().chain(cells.iter()).cloned().collect();
    assert_eq!(names(&rounds), twice, "each cell once per round, in order");
    let round_numbers: Vec<u64> = rounds.iter().map(|f| f["round"].as_u64().unwrap()).collect();
    assert!(
        round_numbers[..cells.len()].iter().all(|&r| r == 1) && round_numbers[cells.len()..].iter().all(|&r| r == 2)
    );
    assert_eq!(names(&summaries), cells, "one summary per cell");
    for figure in lines.iter() {
        let value = figure["value"].as_f64().unwrap();
        assert!(value > 0.0 && value.is_finite(), "{figure}");
        assert_eq!((figure["jobs"].as_u64(), figure["workers"].as_u64()), (Some(1000), Some(2)), "{figure}");
        assert_eq!(figure["rounds"].as_u64(), Some(2), "{figure}");
        assert_eq!(figure["unit"], "jobs/s", "{figure}");
        assert!(figure["synchronous_commit"].is_string() && figure["fsync"].is_string(), "{figure}");
    }
    for fenceq in lines.iter().filter(|f| f["scenario"].as_str().unwrap().starts_with("postgres/fenceq/")) {
        let key = if fenceq["scenario"].as_str().unwrap().ends_with("limits_never_reached") {
            "ratio_to_unlimited"
        } else {
            "ratio_to_raw_1_op_per_tx"
        };
        let ratio = fenceq[key].as_f64().unwrap_or_else(|| panic!("{key}: a ratio within the same round: {fenceq}"));
        assert!(ratio > 0.0, "{fenceq}");
    }
    // The rate four processes held, once after the rounds.
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0]["scenario"], "postgres/fenceq/flow/rate_50_per_s_4_processes_1_s");
    assert!(held[0]["most_in_any_1s"].as_f64().unwrap() <= 50.0, "{}", held[0]);
    assert!(held[0]["value"].as_f64().unwrap() > 0.0 && held[0]["value"].as_f64().unwrap() <= 100.0, "{}", held[0]);
    for summary in &summaries {
        let (min, median, max) =
            (summary["min"].as_f64().unwrap(), summary["median"].as_f64().unwrap(), summary["max"].as_f64().unwrap());
        assert!(min <= median && median <= max, "{summary}");
        assert_eq!(summary["rounds_measured"].as_u64(), Some(2), "{summary}");
        let scenario = summary["scenario"].as_str().unwrap();
        if scenario.starts_with("postgres/fenceq/") {
            let key = if scenario.ends_with("limits_never_reached") {
                "ratio_to_unlimited"
            } else {
                "ratio_to_raw_1_op_per_tx"
            };
            let low = summary[format!("{key}_min")].as_f64().unwrap();
            let high = summary[format!("{key}_max")].as_f64().unwrap();
            let mid = summary[key].as_f64().unwrap();
            assert!(low <= mid && mid <= high, "{summary}");
        }
    }
    // The scratch schemas (named after --schema) are gone.
    assert!(s.schemas().is_empty(), "left behind: {:?}", s.schemas());
}

#[test]
fn the_pickup_step_on_postgres_reports_each_figure_and_leaves_no_schema() {
    let Some(s) = Scratch::new() else { return };
    let lines =
        s.run(&["--json", "--jobs", "1000", "--workers", "2", "--rounds", "1", "--only", "pickup"]).json_lines();
    let (rounds, summaries): (Vec<_>, Vec<_>) = lines.iter().partition(|l| l.get("summary").is_none());
    let mut cells = Vec::new();
    for rate in ["5_per_s", "100_per_s", "2000_per_s"] {
        for producer in ["same_process", "other_process"] {
            cells.push(format!("pickup/postgres/{producer}/{rate}"));
        }
    }
    let names = |lines: &[&Value]| -> Vec<String> {
        lines.iter().map(|f| f["scenario"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(names(&rounds), cells);
    assert_eq!(names(&summaries), cells);
    for figure in &rounds {
        let (p50, p99) = (figure["value"].as_f64().unwrap(), figure["p99_us"].as_f64().unwrap());
        assert!(p50 > 0.0 && p50 <= p99, "{figure}");
        assert_eq!(figure["unit"], "us_p50", "{figure}");
        assert!(figure["picked_up"].as_f64().unwrap() >= 5.0, "{figure}");
    }
    assert!(s.schemas().is_empty(), "scratch schemas left behind: {:?}", s.schemas());
}

#[test]
fn the_long_horizon_step_reports_every_phase_and_leaves_no_schema() {
    let Some(s) = Scratch::new() else { return };
    let refused = s.run(&["--only", "long_horizon", "--phase-secs", "1,2"]);
    assert_eq!(refused.code, Some(1), "stdout: {}", refused.stdout);
    assert!(refused.stderr.contains("--phase-secs"), "{}", refused.stderr);
    let args =
        ["--json", "--only", "long_horizon", "--phase-secs", "1", "--horizon-rate", "200", "--horizon-workers", "2"];
    let lines = s.run(&args).json_lines();
    let (figures, goals): (Vec<&Value>, Vec<&Value>) = lines.iter().partition(|l| l.get("summary").is_none());
    let value = |phase: &str, metric: &str| -> f64 {
        let scenario = format!("postgres/long_horizon/{phase}/{metric}");
        let line = figures.iter().find(|l| l["scenario"] == scenario.as_str());
        line.unwrap_or_else(|| panic!("no {scenario} in {lines:?}"))["value"].as_f64().unwrap()
    };
    // In order of first appearance (the spike seconds, if any, come after every phase).
    let mut phases: Vec<&str> = Vec::new();
    for phase in figures.iter().map(|l| l["phase"].as_str().unwrap()) {
        if !phases.contains(&phase) {
            phases.push(phase);
        }
    }
    assert_eq!(phases, ["clean", "idle_in_transaction", "readers", "recovery"]);
    for phase in phases {
        assert_eq!(value(phase, "offered"), 200.0);
        assert!(value(phase, "seconds") >= 1.0, "{phase}");
        assert!(value(phase, "enqueued") > 0.0 && value(phase, "completed") > 0.0, "{phase}");
        assert!(value(phase, "picked_up") >= 1.0, "{phase}");
        let (p50, p95, p99) = (value(phase, "pickup_p50"), value(phase, "pickup_p95"), value(phase, "pickup_p99"));
        assert!(0.0 < p50 && p50 <= p95 && p95 <= p99, "{phase}: {p50} {p95} {p99}");
        assert!(value(phase, "table_bytes") > 0.0, "{phase}");
        assert!(value(phase, "dead_tuples") >= 0.0, "{phase}");
        assert!(value(phase, "index_bytes/fenceq_jobs_claim") > 0.0, "{phase}");
        assert!(value(phase, "stats_max") >= value(phase, "stats_median"), "{phase}");
        assert!(value(phase, "rows") >= 1.0, "{phase}");
    }
    assert!(value("readers", "reader_transactions") >= 4.0);
    let goal_names: Vec<&str> = goals.iter().map(|g| g["goal"].as_str().unwrap()).collect();
    assert!(goal_names.contains(&"clean: dead tuples, most pgstattuple counted"), "{goal_names:?}");
    assert!(goals.iter().all(|g| g["met"].is_boolean()), "{goals:?}");
    assert!(s.schemas().is_empty(), "scratch schemas left behind: {:?}", s.schemas());
}

#[test]
fn the_stats_step_on_postgres_reports_both_figures_in_each_round_and_leaves_no_schema() {
    let Some(s) = Scratch::new() else { return };
    let lines = s.run(&["--json", "--only", "stats", "--stats-rows", "2000", "--rounds", "2"]).json_lines();
    stats_step::assert_stats_step(&lines);
    assert!(s.schemas().is_empty(), "scratch schemas left behind: {:?}", s.schemas());
}
