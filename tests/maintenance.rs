//! The maintenance thread and its passes, driven by a manual clock and `run_once`.

mod common;

use common::*;
use fenceq::{JobState, MaintenanceConfig, NewJob, Retention};
use std::time::Duration;

const DAY: Duration = Duration::from_secs(24 * 3600);

#[test]
fn run_once_reaps_stale_leases_to_pending_or_exhausted() {
    let q = temp_queue();
    let retry = q.enqueue(NewJob::new("q", b"a".to_vec()).max_attempts(2)).unwrap().id();
    let last = q.enqueue(NewJob::new("q", b"b".to_vec()).max_attempts(1)).unwrap().id();
    q.take("w");
    q.take("w");
    let m = q.start_maintenance(MaintenanceConfig::default()).unwrap();
    assert_eq!(m.run_once().unwrap().reaped.total(), 0, "leases still live");
    q.advance(LEASE);
    let report = m.run_once().unwrap();
    assert_eq!((report.reaped.requeued, report.reaped.exhausted), (1, 1));
    assert_eq!(q.job(retry).unwrap().unwrap().state, JobState::Pending);
    assert_eq!(q.job(last).unwrap().unwrap().state, JobState::Exhausted);
    m.stop();
}

#[test]
fn run_once_exhausts_expired_waits_but_never_reclaims_a_waiting_job() {
    let q = temp_queue();
    let id = q.add("x");
    let job = q.take("w");
    q.park(&job.token(), DAY, "approval").unwrap();
    let m = q.start_maintenance(MaintenanceConfig::default()).unwrap();
    q.advance(DAY - Duration::from_millis(1));
    assert_eq!(m.run_once().unwrap().reaped.total(), 0);
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Waiting);
    q.advance(Duration::from_millis(1));
    assert_eq!(m.run_once().unwrap().reaped.waits_expired, 1);
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Exhausted);
}

#[test]
fn retention_prunes_exactly_what_the_design_allows() {
    let q = temp_queue();
    let mut ids = std::collections::BTreeMap::new();
    // One row in every state, all settled (where settling applies) at T0.
    // "pending" comes last, so that the seven claims below take the others.
    for name in ["running", "waiting", "completed", "cancelled", "exhausted", "acked", "unknown", "pending"] {
        ids.insert(name, q.enqueue(NewJob::new("q", name.as_bytes().to_vec()).key(name).max_attempts(1)).unwrap().id());
    }
    q.cancel(ids["cancelled"]).unwrap(); // cancelled while pending
    let mut claims = std::collections::BTreeMap::new();
    for _ in 0..6 {
        let job = q.take("w");
        claims.insert(String::from_utf8(job.payload.clone()).unwrap(), job.token());
    }
    q.complete(&claims["completed"]).unwrap();
    q.exhaust(&claims["exhausted"], "e").unwrap();
    q.exhaust(&claims["acked"], "e").unwrap();
    q.acknowledge(&claims["acked"]).unwrap();
    q.mark_unknown(&claims["unknown"], "e").unwrap();
    q.park(&claims["waiting"], DAY * 30, "approval").unwrap();
    let m = q.start_maintenance(MaintenanceConfig::default()).unwrap();
    for _ in 0..9 {
        // A healthy worker keeps "running" alive across the days by renewing.
        q.renew(&claims["running"], DAY).unwrap();
        q.advance(DAY - Duration::from_secs(1));
    }
    let report = m.run_once().unwrap();
    assert_eq!((report.pruned.settled, report.pruned.acknowledged), (2, 1));
    let mut survivors: Vec<&str> =
        ids.iter().filter(|(_, id)| q.job(**id).unwrap().is_some()).map(|(n, _)| *n).collect();
    survivors.sort();
    assert_eq!(survivors, vec!["exhausted", "pending", "running", "unknown", "waiting"]);
}

#[test]
fn the_maintenance_thread_stops_promptly() {
    let q = temp_queue();
    let m = q
        .start_maintenance(MaintenanceConfig {
            reap_every: Duration::from_secs(3600),
            prune_every: Duration::from_secs(3600),
            retention: Retention::default(),
            ..MaintenanceConfig::default()
        })
        .unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        m.stop();
        tx.send(()).unwrap();
    });
    // A hang guard, not a timing assertion: stop must not sleep out the hour.
    rx.recv_timeout(Duration::from_secs(30)).expect("stop returned");
}

#[test]
fn the_maintenance_thread_reaps_on_its_own() {
    let q = temp_queue();
    let id = q.add("x");
    q.take("w");
    q.advance(LEASE);
    let _m = q
        .start_maintenance(MaintenanceConfig {
            reap_every: Duration::from_millis(5),
            prune_every: Duration::from_secs(3600),
            retention: Retention::default(),
            ..MaintenanceConfig::default()
        })
        .unwrap();
    for _ in 0..6000 {
        if q.job(id).unwrap().unwrap().state == JobState::Pending {
            return;
        }
        let _ = crossbeam_channel::after(Duration::from_millis(10)).recv();
    }
    panic!("the thread never reaped");
}

#[test]
fn zero_intervals_are_refused() {
    let q = temp_queue();
    let config = MaintenanceConfig { reap_every: Duration::ZERO, ..MaintenanceConfig::default() };
    assert!(matches!(q.start_maintenance(config), Err(fenceq::Error::InvalidInput { .. })));
}
