//! The demo's code path, end to end: every recorded update is accounted for.
#![cfg(feature = "cli")]

use fenceq::demo::{run, DemoOptions};

#[test]
fn the_demo_accounts_for_every_recorded_update() {
    let dir = tempfile::tempdir().unwrap();
    let options = DemoOptions { db: Some(dir.path().join("demo.db")), updates: 1000, workers: 3, progress: false };
    let s = run(&options).unwrap();
    assert!(s.adds_up(), "{s:?}");
    assert_eq!(s.deliveries, 1000 + 1000 / 7);
    assert_eq!((s.updates, s.duplicates_dropped), (1000, 1000 / 7));
    assert_eq!(s.exhausted, 2, "updates 500 and 1000 fail every attempt");
    assert_eq!(s.acknowledged, 2);
    assert_eq!(s.unknown, 1, "update 42");
    assert_eq!(s.completed, 997);
    assert_eq!(s.replies, 997, "exactly one reply per completed update");
    assert_eq!(s.stale_writes_rejected, 2, "the stalled worker's reply and settle");
    assert!(s.retries >= 100 + 2 * 2, "100 transient failures and the doomed updates' retries");
    // The kept database tells the same story.
    let q = fenceq::Queue::open(dir.path().join("demo.db")).unwrap();
    let stats = q.stats().unwrap().queue(fenceq::demo::QUEUE);
    assert_eq!((stats.completed, stats.exhausted_acknowledged, stats.unknown), (997, 2, 1));
    // A second run on the same file refuses instead of mixing figures.
    assert!(run(&options).is_err());
}
