//! `fenceq bench` at a tiny size, run as the binary (`fenceq --db DIR --json bench`): every
//! scenario runs, completes its jobs and reports a positive figure, once, on its own JSON line
//! (the numbers themselves are for `cargo run --release -- bench`).
#![cfg(feature = "cli")]

use assert_cmd::Command;
use serde_json::Value;

#[test]
fn every_bench_scenario_runs_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("fenceq")
        .unwrap()
        .arg("--db")
        .arg(dir.path())
        .args(["--json", "bench", "--jobs", "1000", "--workers", "2", "--sync", "normal", "--latency-rows", "1000"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    // One JSON line per reported figure.
    let figures: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let names: Vec<&str> = figures.iter().map(|f| f["scenario"].as_str().unwrap()).collect();
    let expected = [
        "raw_sqlite/1_op_per_tx",
        "raw_sqlite/100_ops_per_tx",
        "fenceq/end_to_end/4_producers",
        "disk/fdatasync_4k",
        "raw_sqlite/full/enqueue_1_per_commit",
        "fenceq/full/enqueue_16_callers",
        "fenceq/enqueue_batch_1000",
        "fenceq/claim_batch_64+complete_all",
        "fenceq/claim_latency/1000_vs_1000_pending",
        "fenceq/work_through_1000_jobs",
        "process/peak_rss",
    ];
    // Every scenario is reported exactly once.
    assert_eq!(names.len(), expected.len(), "{names:?}");
    for expected in expected {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
    for figure in &figures {
        let value = figure["value"].as_f64().unwrap();
        assert!(value > 0.0 && value.is_finite(), "{figure}");
        assert_eq!((figure["jobs"].as_u64(), figure["workers"].as_u64()), (Some(1000), Some(2)), "{figure}");
        assert_eq!(figure["sync"], "NORMAL", "{figure}");
    }
    let figure = |name: &str| figures.iter().find(|f| f["scenario"] == name).unwrap();
    let e2e = figure("fenceq/end_to_end/4_producers");
    assert!(e2e["requests_per_tx"].as_f64().unwrap() >= 1.0, "{e2e}");
    let full = figure("fenceq/full/enqueue_16_callers");
    let per_sync = full["requests_per_sync"].as_f64().unwrap();
    assert!((1.0..=16.0).contains(&per_sync), "each of 16 callers waits for its own sync: {full}");
    // The scratch databases stay in the --db directory.
    assert!(dir.path().join("e2e.db").exists());
}
