//! The maintenance services and their thread, driven by the manual clock and `run_once`:
//! reaping stale leases and expired waits, pruning exactly what retention allows, a prompt
//! stop, a thread that reaps on its own, and refused settings.

use crate::fixture::{Db, LEASE};
use crate::harness::Harness;
use crate::Rule;
use fenceq::{JobState, MaintenanceConfig, NewJob, Retention};
use std::time::Duration;

/// The rules of this file.
pub(super) fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        run_once_reaps_stale_leases_to_pending_or_exhausted,
        run_once_exhausts_expired_waits_but_never_reclaims_a_waiting_job,
        retention_prunes_exactly_what_the_design_allows,
        the_maintenance_thread_stops_promptly,
        the_maintenance_thread_reaps_on_its_own,
        zero_intervals_are_refused,
    ]
}

const DAY: Duration = Duration::from_secs(24 * 3600);

fn run_once_reaps_stale_leases_to_pending_or_exhausted<H: Harness>(h: &H) {
    let db = Db::new(h);
    let retry = db.enqueue(NewJob::new("q", b"a".to_vec()).max_attempts(2)).unwrap().id();
    let last = db.enqueue(NewJob::new("q", b"b".to_vec()).max_attempts(1)).unwrap().id();
    db.take("w");
    db.take("w");
    let m = db.start_maintenance(MaintenanceConfig::default()).unwrap();
    assert_eq!(m.run_once().unwrap().reaped.total(), 0, "leases still live");
    db.advance(LEASE);
    let report = m.run_once().unwrap();
    assert_eq!((report.reaped.requeued, report.reaped.exhausted), (1, 1));
    assert_eq!(db.job(retry).unwrap().unwrap().state, JobState::Pending);
    assert_eq!(db.job(last).unwrap().unwrap().state, JobState::Exhausted);
    m.stop();
}

fn run_once_exhausts_expired_waits_but_never_reclaims_a_waiting_job<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("x");
    let job = db.take("w");
    db.park(&job.token(), DAY, "approval").unwrap();
    let m = db.start_maintenance(MaintenanceConfig::default()).unwrap();
    db.advance(DAY - Duration::from_millis(1));
    assert_eq!(m.run_once().unwrap().reaped.total(), 0);
    assert_eq!(db.job(id).unwrap().unwrap().state, JobState::Waiting);
    db.advance(Duration::from_millis(1));
    assert_eq!(m.run_once().unwrap().reaped.waits_expired, 1);
    assert_eq!(db.job(id).unwrap().unwrap().state, JobState::Exhausted);
}

fn retention_prunes_exactly_what_the_design_allows<H: Harness>(h: &H) {
    let db = Db::new(h);
    let mut ids = std::collections::BTreeMap::new();
    // One row in every state, all settled (where settling applies) at T0.
    // "pending" comes last, so that the seven claims below take the others.
    for name in ["running", "waiting", "completed", "cancelled", "exhausted", "acked", "unknown", "pending"] {
        ids.insert(
            name,
            db.enqueue(NewJob::new("q", name.as_bytes().to_vec()).key(name).max_attempts(1)).unwrap().id(),
        );
    }
    db.cancel(ids["cancelled"]).unwrap(); // cancelled while pending
    let mut claims = std::collections::BTreeMap::new();
    for _ in 0..6 {
        let job = db.take("w");
        claims.insert(String::from_utf8(job.payload.clone()).unwrap(), job.token());
    }
    db.complete(&claims["completed"]).unwrap();
    db.exhaust(&claims["exhausted"], "e").unwrap();
    db.exhaust(&claims["acked"], "e").unwrap();
    db.acknowledge(&claims["acked"]).unwrap();
    db.mark_unknown(&claims["unknown"], "e").unwrap();
    db.park(&claims["waiting"], DAY * 30, "approval").unwrap();
    let m = db.start_maintenance(MaintenanceConfig::default()).unwrap();
    for _ in 0..9 {
        // A healthy worker keeps "running" alive across the days by renewing.
        db.renew(&claims["running"], DAY).unwrap();
        db.advance(DAY - Duration::from_secs(1));
    }
    let report = m.run_once().unwrap();
    assert_eq!((report.pruned.settled, report.pruned.acknowledged), (2, 1));
    let mut survivors: Vec<&str> =
        ids.iter().filter(|(_, id)| db.job(**id).unwrap().is_some()).map(|(n, _)| *n).collect();
    survivors.sort();
    assert_eq!(survivors, vec!["exhausted", "pending", "running", "unknown", "waiting"]);
}

fn the_maintenance_thread_stops_promptly<H: Harness>(h: &H) {
    let db = Db::new(h);
    let m = db
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

fn the_maintenance_thread_reaps_on_its_own<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("x");
    db.take("w");
    db.advance(LEASE);
    let _m = db
        .start_maintenance(MaintenanceConfig {
            reap_every: Duration::from_millis(5),
            prune_every: Duration::from_secs(3600),
            retention: Retention::default(),
            ..MaintenanceConfig::default()
        })
        .unwrap();
    for _ in 0..6000 {
        if db.job(id).unwrap().unwrap().state == JobState::Pending {
            return;
        }
        let _ = crossbeam_channel::after(Duration::from_millis(10)).recv();
    }
    panic!("the thread never reaped");
}

fn zero_intervals_are_refused<H: Harness>(h: &H) {
    let db = Db::new(h);
    let config = MaintenanceConfig { reap_every: Duration::ZERO, ..MaintenanceConfig::default() };
    assert!(matches!(db.start_maintenance(config), Err(fenceq::Error::InvalidInput { .. })));
}
