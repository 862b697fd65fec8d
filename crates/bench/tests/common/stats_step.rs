//! What the `stats` step must print on either store, for the bench's smoke tests: both
//! figures in each of 2 rounds at 2,000 settled rows (`--stats-rows 2000 --rounds 2`), then
//! one summary.

use serde_json::Value;

/// Asserts the lines of one `--json --only stats --stats-rows 2000 --rounds 2` run.
pub fn assert_stats_step(lines: &[Value]) {
    let scenarios: Vec<&str> = lines.iter().filter_map(|l| l["scenario"].as_str()).collect();
    let pair = ["fenceq/stats/2000_settled", "whole_table_count/stats/2000_settled"];
    assert_eq!(scenarios, [pair, pair].concat());
    for line in lines.iter().filter(|l| l.get("scenario").is_some()) {
        let (p50, p99) = (line["value"].as_f64().unwrap(), line["p99_us"].as_f64().unwrap());
        assert!(p50 > 0.0 && p50 <= p99, "{line}");
    }
    let summary = lines.last().unwrap();
    assert_eq!((summary["summary"].as_str(), summary["settled_rows"].as_u64()), (Some("stats"), Some(2000)));
    assert!(summary["ratio_median"].as_f64().unwrap() > 0.0, "{summary}");
}
