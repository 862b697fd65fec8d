//! `fenceq bench` at a tiny size: every scenario runs, completes its jobs and reports a
//! positive figure (the numbers themselves are for `cargo run --release -- bench`).
#![cfg(feature = "cli")]

use fenceq::bench::{run, BenchOptions};
use fenceq::Synchronous;

#[test]
fn every_bench_scenario_runs_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let options =
        BenchOptions { jobs: 1000, workers: 2, sync: Synchronous::Normal, latency_rows: 1000, dir: dir.path().into() };
    let mut reported = 0;
    let figures = run(&options, |_| reported += 1).unwrap();
    assert_eq!(reported, figures.len());
    let names: Vec<&str> = figures.iter().map(|f| f.scenario.as_str()).collect();
    for expected in [
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
    ] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
    for figure in &figures {
        assert!(figure.value > 0.0 && figure.value.is_finite(), "{figure:?}");
    }
    let e2e = figures.iter().find(|f| f.scenario == "fenceq/end_to_end/4_producers").unwrap();
    let grouping = e2e.details.iter().find(|(k, _)| k == "requests_per_tx").unwrap().1;
    assert!(grouping >= 1.0, "{e2e:?}");
    let full = figures.iter().find(|f| f.scenario == "fenceq/full/enqueue_16_callers").unwrap();
    let per_sync = full.details.iter().find(|(k, _)| k == "requests_per_sync").unwrap().1;
    assert!((1.0..=16.0).contains(&per_sync), "each of 16 callers waits for its own sync: {full:?}");
}
