//! Retention (RELIABILITY.md §3 T10).
//!
//! A property test over jobs in every state, created between clock jumps (forwards by up
//! to weeks, and backwards, as a wall clock can), pruned with a random horizon and batch
//! size: exactly the completed and cancelled rows settled, and the acknowledged exhaustions
//! acknowledged, at or before the horizon are deleted; unknown, unacknowledged exhausted,
//! pending, running (live or expired) and waiting rows never are, and every kept row is
//! unchanged. The report's counts match, and its batch count is what batches of the given
//! size need. A second rule prunes while other threads keep enqueueing and settling on
//! another handle: nothing they were told is committed goes missing.

use crate::fixture::{Db, LEASE};
use crate::harness::Harness;
use crate::Rule;
use fenceq::store::Store;
use fenceq::{JobId, JobState, ListFilter, ManualClock, NewJob, Queue, Retention, MAX_LEASE};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::collections::HashMap;
use std::time::Duration;

/// The rules of this file.
pub(super) fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        prune_deletes_exactly_the_old_settled_and_acknowledged_rows,
        intake_and_settles_during_pruning_lose_nothing
    ]
}

const DAY_MS: i64 = 24 * 3600 * 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pending,
    Delayed,
    Running,
    Waiting,
    Completed,
    Cancelled,
    CancelledWhileRunning,
    Exhausted,
    Acknowledged,
    Unknown,
    Retried,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        1 => Just(Kind::Pending),
        1 => Just(Kind::Delayed),
        1 => Just(Kind::Running),
        1 => Just(Kind::Waiting),
        3 => Just(Kind::Completed),
        2 => Just(Kind::Cancelled),
        1 => Just(Kind::CancelledWhileRunning),
        1 => Just(Kind::Exhausted),
        3 => Just(Kind::Acknowledged),
        1 => Just(Kind::Unknown),
        1 => Just(Kind::Retried),
    ]
}

/// A clock move before a step: mostly forwards (up to 20 days), sometimes backwards; often
/// whole days, so that rows land exactly on the horizon (which is inclusive).
fn jump() -> impl Strategy<Value = i64> {
    prop_oneof![
        2 => 0..20 * DAY_MS,
        3 => (0..20i64).prop_map(|d| d * DAY_MS),
        1 => -3 * DAY_MS..0,
        1 => Just(0),
    ]
}

/// What the model knows about one job: when it became prunable, if ever.
#[derive(Debug)]
struct Modelled {
    kind: Kind,
    /// settled_at for completed/cancelled, acknowledged_at for acknowledged exhaustions.
    prunable_since: Option<i64>,
}

/// Creates one job of `kind` on its own queue (so that claims take exactly it).
fn create<S: Store>(q: &Queue<S>, clock: &ManualClock, n: usize, kind: Kind, ack_jump: i64) -> (JobId, Modelled) {
    let queue = format!("q{n}");
    let job = NewJob::new(queue.clone(), vec![n as u8 + 1]).key(format!("k{n}"));
    let job = if kind == Kind::Delayed { job.delay(Duration::from_secs(3600)) } else { job };
    let id = q.enqueue(job).unwrap().id();
    let now = || q.now_ms();
    let claim = || q.claim(&queue, "w", MAX_LEASE).unwrap().expect("its own queue's job");
    let prunable_since = match kind {
        Kind::Pending | Kind::Delayed => None,
        Kind::Running => {
            claim();
            None
        }
        Kind::Waiting => {
            q.park(&claim().token(), Duration::from_secs(3600), "approval").unwrap();
            None
        }
        Kind::Completed => {
            q.complete(&claim().token()).unwrap();
            Some(now())
        }
        Kind::Cancelled => {
            q.cancel(id).unwrap();
            Some(now())
        }
        Kind::CancelledWhileRunning => {
            claim();
            q.cancel(id).unwrap();
            Some(now())
        }
        Kind::Exhausted => {
            q.exhaust(&claim().token(), "gave up").unwrap();
            None
        }
        Kind::Acknowledged => {
            let token = claim().token();
            q.exhaust(&token, "gave up").unwrap();
            clock.set(clock_now(clock) + ack_jump);
            q.acknowledge(&token).unwrap();
            let acked = now();
            // Acknowledging again keeps the first time.
            clock.set(clock_now(clock) + DAY_MS);
            q.acknowledge(&token).unwrap();
            Some(acked)
        }
        Kind::Unknown => {
            q.mark_unknown(&claim().token(), "timeout after send").unwrap();
            None
        }
        Kind::Retried => {
            q.retry(&claim().token(), Duration::from_secs(60), "transient").unwrap();
            None
        }
    };
    (id, Modelled { kind, prunable_since })
}

fn clock_now(clock: &ManualClock) -> i64 {
    use fenceq::Clock;
    clock.now_ms()
}

fn all_jobs<S: Store>(q: &Queue<S>) -> HashMap<JobId, fenceq::Job> {
    q.list(&ListFilter { limit: 10_000, ..ListFilter::default() }).unwrap().into_iter().map(|j| (j.id, j)).collect()
}

/// One generated history: `(kind, jump before it, jump before its acknowledgement)` per job.
type Steps = Vec<(Kind, i64, i64)>;

fn prune_deletes_exactly_the_old_settled_and_acknowledged_rows<H: Harness>(h: &H) {
    // The case proptest once shrank a failure to (the regressions file of the old
    // tests/retention.rs), before any new one.
    prune_case(h, vec![(Kind::Pending, 0, 0)], 0, 1, 0).unwrap_or_else(|e| panic!("the saved case: {e}"));
    let strategy = (
        prop::collection::vec((kind(), jump(), (0..5i64).prop_map(|d| d * DAY_MS)), 1..40),
        0u64..30,
        1u32..12,
        jump(),
    );
    let mut runner = TestRunner::new(Config { cases: 128, failure_persistence: None, ..Config::default() });
    let result = runner.run(&strategy, |(steps, older_than_days, batch_size, final_jump)| {
        prune_case(h, steps, older_than_days, batch_size, final_jump)
    });
    if let Err(e) = result {
        panic!("{e}\n{runner}");
    }
}

/// One case of the property, on a fresh database.
fn prune_case<H: Harness>(
    h: &H,
    steps: Steps,
    older_than_days: u64,
    batch_size: u32,
    final_jump: i64,
) -> Result<(), TestCaseError> {
    let db = Db::new(h);
    let (q, clock) = (&db.queue, &db.clock);
    let mut model: Vec<(JobId, Modelled)> = Vec::new();
    for (n, (kind, jump, ack_jump)) in steps.into_iter().enumerate() {
        clock.set(clock_now(clock) + jump);
        model.push(create(q, clock, n, kind, ack_jump));
    }
    clock.set(clock_now(clock) + final_jump);
    let retention = Retention { older_than: Duration::from_secs(older_than_days * 24 * 3600), batch_size };
    let horizon = clock_now(clock) - older_than_days as i64 * DAY_MS;

    let expected: HashMap<JobId, Kind> = model
        .iter()
        .filter(|(_, m)| m.prunable_since.is_some_and(|t| t <= horizon))
        .map(|(id, m)| (*id, m.kind))
        .collect();
    let expected_acknowledged = expected.values().filter(|k| **k == Kind::Acknowledged).count() as u64;
    let expected_settled = expected.len() as u64 - expected_acknowledged;

    let before = all_jobs(q);
    prop_assert_eq!(before.len(), model.len());
    let preview = q.prune_preview(&retention).unwrap();
    prop_assert_eq!((preview.settled, preview.acknowledged), (expected_settled, expected_acknowledged));
    let report = q.prune(&retention).unwrap();
    prop_assert_eq!((report.settled, report.acknowledged), (expected_settled, expected_acknowledged));
    let b = u64::from(batch_size);
    // Transactions that deleted rows: none when nothing was pruned.
    prop_assert_eq!(
        report.batches,
        expected_settled.div_ceil(b) + expected_acknowledged.div_ceil(b),
        "batches of at most {} rows",
        batch_size
    );

    let after = all_jobs(q);
    for (id, m) in &model {
        match (expected.contains_key(id), after.get(id)) {
            (true, None) => {}
            (true, Some(job)) => prop_assert!(false, "job {} ({:?}) should have been pruned: {:?}", id, m.kind, job),
            (false, None) => prop_assert!(
                false,
                "job {} ({:?}, prunable since {:?}, horizon {}) was wrongly pruned",
                id,
                m.kind,
                m.prunable_since,
                horizon
            ),
            (false, Some(job)) => prop_assert_eq!(job, &before[id], "a kept row changed"),
        }
    }
    // Protected states are never pruned, whatever their age.
    for job in after.values() {
        let protected =
            matches!(job.state, JobState::Pending | JobState::Running | JobState::Waiting | JobState::Unknown)
                || (job.state == JobState::Exhausted && job.acknowledged_at.is_none());
        let old_enough = job.settled_at.is_some_and(|t| t <= horizon);
        prop_assert!(
            protected || !old_enough || job.state == JobState::Exhausted,
            "a prunable row survived: {:?}",
            job
        );
    }
    // A second pass finds nothing and uses one batch per statement.
    let again = q.prune(&retention).unwrap();
    prop_assert_eq!((again.deleted(), again.batches), (0, 0));
    // A pruned key can be enqueued again, as a new job with a new, greater id.
    let max_id = model.iter().map(|(id, _)| *id).max().unwrap();
    for (id, m) in model.iter().filter(|(id, _)| expected.contains_key(id)).take(3) {
        let n = model.iter().position(|(i, _)| i == id).unwrap();
        let again = q.enqueue(NewJob::new(format!("q{n}"), b"again".to_vec()).key(format!("k{n}"))).unwrap();
        prop_assert!(!again.is_duplicate() && again.id() > max_id, "{:?} {:?}", m.kind, again);
    }
    Ok(())
}

/// Intake, claims and settles keep going on another handle while the pruner deletes old
/// rows in small batches: every acknowledged intake is there afterwards, every new
/// completion too (it is younger than the horizon), and exactly the old rows are gone.
fn intake_and_settles_during_pruning_lose_nothing<H: Harness>(h: &H) {
    const OLD: usize = 2000;
    let db = Db::new(h);
    // Old rows: completed, cancelled, acknowledged; and protected ones of the same age.
    db.enqueue_batch((0..OLD).map(|i| NewJob::new("q", vec![1]).key(format!("old-{i}")))).unwrap();
    for _ in 0..OLD / 100 {
        for job in db.claim_batch("q", "w", LEASE, 100).unwrap() {
            match job.id().0 % 10 {
                0 => {
                    db.cancel(job.id()).unwrap();
                }
                1 => {
                    db.exhaust(&job.token(), "x").unwrap();
                    db.acknowledge(&job.token()).unwrap();
                }
                2 => db.mark_unknown(&job.token(), "?").unwrap(),
                3 => db.exhaust(&job.token(), "unacknowledged").unwrap(),
                _ => db.complete(&job.token()).unwrap(),
            }
        }
    }
    let protected = db.count("unknown") + db.count("exhausted") - (OLD as i64 / 10);
    db.advance(Duration::from_secs(8 * 24 * 3600));
    let other = db.reopen();
    let retention = Retention { older_than: Duration::from_secs(7 * 24 * 3600), batch_size: 25 };
    let q = &db.queue;
    let (report, acked) = std::thread::scope(|s| {
        let pruner = s.spawn(|| q.prune(&retention).unwrap());
        let producers: Vec<_> = (0..2)
            .map(|t| {
                let other = other.clone();
                s.spawn(move || {
                    let mut acked = Vec::new();
                    for i in 0..300u32 {
                        let key = format!("new-{t}-{i}");
                        let id = other.enqueue(NewJob::new("fresh", vec![2]).key(key.clone())).unwrap().id();
                        acked.push((key, id));
                        if i.is_multiple_of(3) {
                            if let Some(job) = other.claim("fresh", &format!("p{t}"), LEASE).unwrap() {
                                other.complete(&job.token()).unwrap();
                            }
                        }
                    }
                    acked
                })
            })
            .collect();
        let acked: Vec<(String, JobId)> = producers.into_iter().flat_map(|p| p.join().unwrap()).collect();
        (pruner.join().unwrap(), acked)
    });
    let pruned_old = OLD as u64 * 8 / 10; // completed (6/10), cancelled (1/10), acknowledged (1/10)
    assert_eq!(report.deleted(), pruned_old, "{report:?}");
    assert!(report.batches >= pruned_old / 25, "{report:?}");
    assert_eq!(acked.len(), 600);
    for (key, id) in &acked {
        let job = db.job(*id).unwrap().unwrap_or_else(|| panic!("{key} (job {id}) is gone"));
        assert_eq!(job.key.as_deref(), Some(key.as_str()));
    }
    let remaining_old = db.count("unknown") + db.count("exhausted");
    assert_eq!(remaining_old, protected, "unknown and unacknowledged exhausted rows stay");
    assert_eq!(db.snapshot().len(), 600 + protected as usize);
}
