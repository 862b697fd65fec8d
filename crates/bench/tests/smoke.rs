//! The bench at a tiny size, run as the binary (`fenceq-bench --db DIR --json`, what
//! `fenceq bench` runs) for two rounds: every scenario of every round runs, completes its
//! jobs and reports a positive figure once per round, and the summary gives each figure and
//! ratio once, its median within its spread (the numbers themselves are
//! for `cargo run --release -p fenceq-bench`).

#[path = "common/stats_step.rs"]
mod stats_step;

use assert_cmd::Command;
use serde_json::Value;

const ROUNDS: u64 = 2;

/// The figures of every round (workers = 2), in the order they are measured.
const PER_ROUND: &[&str] = &[
    "raw_sqlite/intake/1_per_tx",
    "raw_sqlite/process/1_per_tx",
    "raw_sqlite/end_to_end/1_per_tx",
    "raw_sqlite/latency/insert_commit",
    "raw_sqlite/intake/autocommit",
    "raw_sqlite/intake/autocommit_plain_ids",
    "fenceq/intake/enqueue_1_per_call",
    "fenceq/latency/enqueue",
    "fenceq/intake/enqueue_1_per_call_without_key",
    "fenceq/process/1_worker",
    "raw_sqlite/intake/100_per_tx",
    "raw_sqlite/process/100_per_tx",
    "raw_sqlite/end_to_end/100_per_tx",
    "fenceq/intake/enqueue_batch_100",
    "fenceq/process/2_workers",
    "fenceq/end_to_end/1_producer_2_workers",
    "fenceq/end_to_end/4_producers_2_workers",
    "fenceq/webhook/64_intakes_2_workers",
    "raw_sqlite/end_to_end/100_per_tx_on_fenceq_table",
    "raw_sqlite/claim_64+settle_64",
    "raw_sqlite/claim_64+settle_64_on_fenceq_table",
    "raw_sqlite/claim_64+settle_64_guarded_table",
    "fenceq/claim_batch_64+complete_all",
    "fenceq/intake/enqueue_batch_1000",
    "disk/fdatasync_4k",
    "raw_sqlite/full/enqueue_1_per_commit",
    "ceiling/full/16_callers",
    "fenceq/full/enqueue_16_callers",
    "fenceq/normal/enqueue_16_callers",
    "ceiling/full/64_callers",
    "fenceq/full/enqueue_64_callers",
    "fenceq/normal/enqueue_64_callers",
    "fenceq/flow/process_unlimited_2_workers",
    "fenceq/flow/process_limited_2_workers",
    "fenceq/flow/process_running_limit_2_workers",
];

const GUARD_VARIANTS: &[&str] = &[
    "fenceq_schema",
    "without_checks",
    "with_autoincrement",
    "without_lease_index",
    "without_settled_index",
    "without_wait_index",
    "without_exhausted_unknown_acknowledged_indexes",
    "with_schema_6_claim_id_triggers",
];

/// The figures measured once, after the rounds (round 0).
/// The pickup step's figures, after the guards' in every round.
const PICKUP: &[&str] = &[
    "pickup/sqlite/same_process/5_per_s",
    "pickup/sqlite/other_process/5_per_s",
    "pickup/sqlite/same_process/100_per_s",
    "pickup/sqlite/other_process/100_per_s",
    "pickup/sqlite/same_process/2000_per_s",
    "pickup/sqlite/other_process/2000_per_s",
    "pickup/sqlite/idle_cpu",
];

/// The claim-latency figures, in rounds of their own after the others (numbered as they are).
const LATENCY: &[&str] = &[
    "fenceq/latency/claim_reference_1000_pending",
    "fenceq/latency/claim_2000_pending",
    "fenceq/latency/claim_2000_pending_p50_ratio_to_1000",
    "fenceq/latency/claim_2000_pending_200_groups",
];

const ONCE: &[&str] =
    &["fenceq/work_through_2000_jobs", "process/peak_rss", "fenceq/flow/rate_50_per_s_4_processes_1_s"];

fn bench(args: &[&str]) -> (std::process::Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("fenceq-bench").unwrap().arg("--db").arg(dir.path()).args(args).output().unwrap();
    (out, dir)
}

#[test]
fn every_bench_scenario_runs_in_every_round_and_is_summarised_once() {
    let rounds = ROUNDS.to_string();
    let (out, dir) = bench(&[
        "--json",
        "--jobs",
        "1000",
        "--workers",
        "2",
        "--sync",
        "normal",
        "--latency-rows",
        "2000",
        "--rate-limit",
        "50",
        "--rate-secs",
        "1",
        "--rounds",
        &rounds,
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    for line in &lines {
        assert_eq!((line["jobs"].as_u64(), line["workers"].as_u64()), (Some(1000), Some(2)), "{line}");
        assert_eq!((line["sync"].as_str(), line["rounds"].as_u64()), (Some("NORMAL"), Some(ROUNDS)), "{line}");
    }
    let guards: Vec<String> = GUARD_VARIANTS
        .iter()
        .flat_map(|v| ["enqueue_1_per_call", "enqueue", "claim", "complete"].map(|phase| format!("guards/{v}/{phase}")))
        .collect();
    let per_round: Vec<&str> =
        PER_ROUND.iter().copied().chain(guards.iter().map(String::as_str)).chain(PICKUP.iter().copied()).collect();
    let with_latency: Vec<&str> = per_round.iter().chain(LATENCY).copied().collect();

    // Each round reports every scenario exactly once, in the same order.
    for round in 1..=ROUNDS {
        let names: Vec<&str> = lines
            .iter()
            .filter(|l| l["round"].as_u64() == Some(round))
            .map(|l| l["scenario"].as_str().unwrap())
            .collect();
        assert_eq!(names, with_latency, "round {round}");
    }
    let once: Vec<&str> =
        lines.iter().filter(|l| l["round"].as_u64() == Some(0)).map(|l| l["scenario"].as_str().unwrap()).collect();
    assert_eq!(once, ONCE);
    for line in lines.iter().filter(|l| l["round"].is_u64()) {
        let value = line["value"].as_f64().unwrap();
        assert!(value > 0.0 && value.is_finite(), "{line}");
    }

    // The summary: every figure once, its median within its spread, over the right rounds.
    let summaries = |kind: &str| -> Vec<&Value> { lines.iter().filter(|l| l["summary"] == kind).collect() };
    let figures = summaries("figure");
    let names: Vec<&str> = figures.iter().map(|f| f["scenario"].as_str().unwrap()).collect();
    let expected: Vec<&str> = with_latency.iter().copied().chain(ONCE.iter().copied()).collect();
    assert_eq!(names, expected);
    for f in &figures {
        let (median, min, max) =
            (f["median"].as_f64().unwrap(), f["min"].as_f64().unwrap(), f["max"].as_f64().unwrap());
        assert!(min > 0.0 && min <= median && median <= max, "{f}");
        let measured = if ONCE.contains(&f["scenario"].as_str().unwrap()) { 1 } else { ROUNDS };
        assert_eq!(f["rounds_measured"].as_u64(), Some(measured), "{f}");
    }
    let figure = |name: &str| *figures.iter().find(|f| f["scenario"] == name).unwrap();
    // The rate four processes held: never more than the limit in a second, all of it reached
    // or close (the figure is a percentage of the limit over the measured second).
    let held = figure("fenceq/flow/rate_50_per_s_4_processes_1_s");
    assert!(held["most_in_any_1s"].as_f64().unwrap() <= 50.0, "{held}");
    assert!(held["value"].as_f64().unwrap() <= 100.0 && held["starts_in_run"].as_f64().unwrap() <= 50.0, "{held}");
    assert!(figure("fenceq/end_to_end/4_producers_2_workers")["requests_per_tx"].as_f64().unwrap() >= 1.0);
    for callers in [16.0, 64.0] {
        let full = figure(&format!("fenceq/full/enqueue_{callers}_callers"));
        let per_sync = full["requests_per_sync"].as_f64().unwrap();
        assert!((1.0..=callers).contains(&per_sync), "each caller waits for its own sync: {full}");
    }

    // Every ratio is computed in each round; the targets are attached.
    let ratios = summaries("ratio");
    let target =
        |name: &str| ratios.iter().find(|r| r["ratio"] == name).unwrap_or_else(|| panic!("{name}"))["target"].clone();
    assert_eq!(target("intake 1/call ÷ raw 1/tx"), 0.9);
    assert_eq!(target("intake 1/call ÷ raw autocommit INSERT"), 0.85);
    assert_eq!(target("intake batch 100 ÷ raw 100/tx"), 0.8);
    assert_eq!(target("claim_batch 64 ÷ raw batched claim"), 0.8);
    assert_eq!(target("webhook ÷ raw end to end 100/tx"), 0.6);
    assert_eq!(target("full 16 callers ÷ sync ceiling"), 0.6);
    assert_eq!(target("full 64 callers ÷ sync ceiling"), 0.75);
    assert_eq!(target("flow: pool under limits it never reaches ÷ the same pool without"), 0.9);
    assert_eq!(ratios.iter().filter(|r| r["ratio"].as_str().unwrap().starts_with("guards: ")).count(), 21);
    for r in &ratios {
        let (median, min, max) =
            (r["median"].as_f64().unwrap(), r["min"].as_f64().unwrap(), r["max"].as_f64().unwrap());
        assert!(min > 0.0 && min <= median && median <= max, "{r}");
        assert_eq!(r["rounds_measured"].as_u64(), Some(ROUNDS), "{r}");
        // `met` is judged on the exact median, the line carries it rounded to 3 decimals: a
        // median that rounds to within half a thousandth of its target may lie on either side.
        let judged = r["target"].as_f64().map(|t| median >= t);
        let on_the_edge = r["target"].as_f64().is_some_and(|t| (median - t).abs() <= 0.0005);
        assert_eq!(r["met"].as_bool().is_some(), judged.is_some(), "{r}");
        if !on_the_edge {
            assert_eq!(r["met"].as_bool(), judged, "{r}");
        }
    }
    assert!(summaries("run")[0]["seconds"].as_f64().unwrap() > 0.0);
    // The scratch databases stay in the --db directory.
    assert!(dir.path().join("e2e_4.db").exists());
}

#[test]
fn only_runs_the_named_steps_and_refuses_unknown_ones() {
    let (out, _dir) = bench(&["--json", "--jobs", "1000", "--rounds", "1", "--only", "claim"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let scenarios: Vec<String> = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["round"].is_u64())
        .map(|l| l["scenario"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        scenarios,
        [
            "raw_sqlite/claim_64+settle_64",
            "raw_sqlite/claim_64+settle_64_on_fenceq_table",
            "raw_sqlite/claim_64+settle_64_guarded_table",
            "fenceq/claim_batch_64+complete_all"
        ]
    );

    let (out, _dir) = bench(&["--only", "everything"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no step named \"everything\""), "{stderr}");
    let (out, _dir) = bench(&["--guard", "without_everything"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no variant named"));
}

#[test]
fn the_stats_step_reports_both_figures_in_each_round_and_a_summary() {
    let (out, dir) = bench(&["--json", "--only", "stats", "--stats-rows", "2000", "--rounds", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    stats_step::assert_stats_step(&lines);
    assert!(dir.path().join("stats.db").exists(), "the scratch file stays in the --db directory");
}

#[test]
fn a_postgres_db_or_a_schema_without_one_is_refused_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = Command::cargo_bin("fenceq-bench").unwrap().current_dir(dir.path()).args(args).output().unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(out.stdout.is_empty() && stderr.starts_with("error: ") && stderr.lines().count() == 1, "{stderr}");
        stderr
    };
    #[cfg(not(feature = "postgres"))]
    for url in [
        "postgres://ops:s3cret@db.internal/bot",
        "host=127.0.0.1 port=45601 user=botpw password=s3cret dbname=fenceq_test",
    ] {
        let line = run(&["--db", url, "--rounds", "1"]);
        assert!(line.contains("without the `postgres` feature"), "{line}");
        assert!(line.contains("cargo build --release -p fenceq-bench --features postgres"), "{line}");
        assert!(!line.contains("s3cret"), "{line}");
    }
    let line = run(&["--db", "postgres:oops"]);
    assert!(line.contains("is not a postgres:// URL"), "{line}");
    let line = run(&["--schema", "bot_queue"]);
    assert!(line.contains("--schema names a PostgreSQL schema"), "{line}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing named after --db was created");
}
