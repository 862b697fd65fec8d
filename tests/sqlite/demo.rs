//! The demo, run as the `fenceq` binary (`fenceq --db PATH --json demo`): every recorded
//! update is accounted for, in the figures it prints and in the database it keeps.
#![cfg(feature = "cli")]

use assert_cmd::Command;
use serde_json::Value;
use std::path::Path;

/// Runs `fenceq --db DB --json demo --updates 1000 --workers 3`.
fn demo(db: &Path) -> std::process::Output {
    Command::cargo_bin("fenceq")
        .unwrap()
        .arg("--db")
        .arg(db)
        .args(["--json", "demo", "--updates", "1000", "--workers", "3"])
        .output()
        .unwrap()
}

/// A figure of the demo's JSON document, as a count.
fn count(s: &Value, name: &str) -> u64 {
    s[name].as_u64().unwrap_or_else(|| panic!("{name} is not a count in {s:#}"))
}

#[test]
fn the_demo_accounts_for_every_recorded_update() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    let out = demo(&db);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = |name| count(&s, name);
    // The figures add up (what `adds_up` reports, checked here from the figures themselves).
    assert_eq!(n("deliveries"), n("updates") + n("duplicates_dropped"), "{s:#}");
    assert_eq!(n("updates"), n("completed") + n("exhausted") + n("unknown"), "{s:#}");
    assert_eq!(n("replies"), n("completed"), "{s:#}");
    assert_eq!(n("acknowledged"), n("exhausted"), "{s:#}");
    assert_eq!(s["adds_up"], true, "{s:#}");
    assert_eq!(n("deliveries"), 1000 + 1000 / 7);
    assert_eq!((n("updates"), n("duplicates_dropped")), (1000, 1000 / 7));
    assert_eq!(n("exhausted"), 2, "updates 500 and 1000 fail every attempt");
    assert_eq!(n("acknowledged"), 2);
    assert_eq!(n("unknown"), 1, "update 42");
    assert_eq!(n("completed"), 997);
    assert_eq!(n("replies"), 997, "exactly one reply per completed update");
    assert_eq!(n("stale_writes_rejected"), 2, "the stalled worker's reply and settle");
    assert!(n("retries") >= 100 + 2 * 2, "100 transient failures and the doomed updates' retries");
    assert_eq!(s["db"], db.display().to_string());
    // Flow control: the limits held (by the store's clock), every chat in order, the 429
    // honoured without spending an attempt.
    let flow = &s["flow"];
    let f = |name| count(flow, name);
    assert_eq!((f("chats"), f("replies")), (6, 18), "{flow:#}");
    assert!(f("most_in_a_second") <= 30 && f("most_in_a_second_per_chat") == 1, "{flow:#}");
    assert_eq!(flow["in_order"], true, "{flow:#}");
    assert!(f("waited_ms") >= f("retry_after_ms"), "{flow:#}");
    assert_eq!(f("attempts_left_before"), f("attempts_left_after"), "{flow:#}");
    assert_eq!(flow["holds"], true, "{flow:#}");
    // The kept database tells the same story.
    let q = fenceq::Queue::open(&db).unwrap();
    let stats = q.stats().unwrap().queue(s["queue"].as_str().unwrap());
    assert_eq!((stats.completed, stats.exhausted_acknowledged, stats.unknown), (997, 2, 1));
    let replies = flow["queue"].as_str().unwrap();
    assert_eq!(q.stats().unwrap().queue(replies).completed, 18);
    assert_eq!(q.limits(replies).unwrap().group_rates.len(), 2, "the limits are stored with the queue");
    drop(q);
    // A second run on the same file refuses (exit 1, one error line) instead of mixing figures.
    let again = demo(&db);
    assert_eq!(again.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.starts_with("error: ") && stderr.contains("already holds 1000 demo jobs"), "{stderr}");
    assert!(again.stdout.is_empty());
}
