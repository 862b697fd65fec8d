//! Periodic jobs (fenceq's `schedule` feature), for every store: the latest tick at or before
//! the clock's now is enqueued once, whatever happened before (a downtime, a restart, a second
//! handle racing, a clock step either way, the tick's job pruned), never ahead of the clock,
//! with the registered job's settings and the key `schedule:{name}:{tick_ms}`; a refused
//! registration changes nothing. Every rule drives the scheduler with
//! `Queue::enqueue_schedules` (the service's `run_once`) at times the manual clock sets.
//!
//! The clock starts at [`T0`], 2023-11-14 22:13:20 UTC.

use crate::fixture::{Db, LEASE, T0};
use crate::harness::Harness;
use crate::Rule;
use fenceq::store::Store;
use fenceq::{
    Error, Job, ListFilter, MaintenanceConfig, NewJob, Queue, Retention, Schedule, ScheduleRecord, ScheduleReport,
};
use std::sync::Barrier;
use std::time::Duration;

/// Every rule of periodic jobs.
pub fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        an_hourly_schedule_after_a_downtime_enqueues_only_the_latest_tick,
        a_restart_does_not_enqueue_the_same_tick_again,
        two_handles_racing_for_one_tick_enqueue_one_job,
        a_clock_stepping_back_never_enqueues_an_older_tick_again,
        a_clock_jumping_forward_enqueues_only_the_latest_tick,
        a_pruned_tick_is_not_enqueued_again,
        a_fixed_interval_ticks_from_its_anchor,
        ticks_are_never_enqueued_ahead_of_the_clock,
        a_scheduled_job_carries_its_template_and_the_tick_key,
        an_existing_job_with_the_tick_key_is_a_duplicate,
        a_registration_is_replaced_by_name_and_removed,
        refused_registrations_change_nothing,
        the_maintenance_pass_runs_the_scheduler,
        a_schedule_is_recorded_for_every_process_with_its_next_tick,
    ]
}

const HOUR: i64 = 3_600_000;
/// The top of the hour at or before [`T0`]: 2023-11-14 22:00 UTC.
const T0_HOUR: i64 = T0 - T0 % HOUR;

fn hourly() -> Schedule {
    Schedule::cron("0 * * * *", "UTC").unwrap()
}

fn report_job() -> NewJob {
    NewJob::new("reports", b"hourly report".to_vec())
}

/// Every job of `queue`, in id order.
fn jobs<S: Store>(queue: &Queue<S>, name: &str) -> Vec<Job> {
    let filter = ListFilter { queue: Some(name.to_string()), limit: 1_000, ..ListFilter::default() };
    queue.list(&filter).unwrap()
}

/// The tick (ms) in the key of every job of `queue`, in id order.
fn ticks<S: Store>(queue: &Queue<S>, name: &str, schedule: &str) -> Vec<i64> {
    let prefix = format!("schedule:{schedule}:");
    jobs(queue, name)
        .iter()
        .map(|j| j.key.as_deref().and_then(|k| k.strip_prefix(&prefix)).expect("a tick key").parse().unwrap())
        .collect()
}

fn enqueued(n: u64) -> ScheduleReport {
    ScheduleReport { enqueued: n, ..ScheduleReport::default() }
}

fn up_to_date(n: u64) -> ScheduleReport {
    ScheduleReport { up_to_date: n, ..ScheduleReport::default() }
}

/// A process down from 22:13 to 03:13 (five hourly ticks missed) runs once, for 03:00.
fn an_hourly_schedule_after_a_downtime_enqueues_only_the_latest_tick<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.schedule("hourly", hourly(), report_job()).unwrap();
    assert_eq!(db.enqueue_schedules().unwrap(), enqueued(1), "the latest tick at registration");
    assert_eq!(ticks(&db, "reports", "hourly"), vec![T0_HOUR]);

    // Down for five hours; the restarted process registers its schedules again.
    db.advance(Duration::from_secs(5 * 3600));
    let restarted = db.reopen();
    restarted.schedule("hourly", hourly(), report_job()).unwrap();
    assert_eq!(restarted.enqueue_schedules().unwrap(), enqueued(1));
    assert_eq!(ticks(&db, "reports", "hourly"), vec![T0_HOUR, T0_HOUR + 5 * HOUR], "only the latest missed tick");
    assert_eq!(restarted.last_tick("hourly").unwrap(), Some(T0_HOUR + 5 * HOUR));
    assert_eq!(restarted.enqueue_schedules().unwrap(), up_to_date(1));
    assert_eq!(jobs(&db, "reports").len(), 2);
}

fn a_restart_does_not_enqueue_the_same_tick_again<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.schedule("hourly", hourly(), report_job()).unwrap();
    assert_eq!(db.enqueue_schedules().unwrap(), enqueued(1));
    db.advance(Duration::from_secs(60));
    for _ in 0..3 {
        let restarted = db.reopen();
        restarted.schedule("hourly", hourly(), report_job()).unwrap();
        assert_eq!(restarted.enqueue_schedules().unwrap(), up_to_date(1));
    }
    assert_eq!(ticks(&db, "reports", "hourly"), vec![T0_HOUR]);
}

/// Two handles (two processes, or two maintenance threads) run the same tick at once.
fn two_handles_racing_for_one_tick_enqueue_one_job<H: Harness>(h: &H) {
    let db = Db::new(h);
    let other = db.reopen();
    db.schedule("hourly", hourly(), report_job()).unwrap();
    other.schedule("hourly", hourly(), report_job()).unwrap();
    for round in 0..3 {
        let barrier = Barrier::new(2);
        let reports: Vec<ScheduleReport> = std::thread::scope(|s| {
            let runs: Vec<_> = [&db.queue, &other]
                .into_iter()
                .map(|q| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        q.enqueue_schedules().unwrap()
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let total: u64 = reports.iter().map(|r| r.enqueued).sum();
        let current: u64 = reports.iter().map(|r| r.up_to_date).sum();
        assert_eq!((total, current), (1, 1), "round {round}: {reports:?}");
        db.advance(Duration::from_secs(3600));
    }
    assert_eq!(ticks(&db, "reports", "hourly"), vec![T0_HOUR, T0_HOUR + HOUR, T0_HOUR + 2 * HOUR]);
}

fn a_clock_stepping_back_never_enqueues_an_older_tick_again<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.schedule("hourly", hourly(), report_job()).unwrap();
    db.enqueue_schedules().unwrap();
    db.advance(Duration::from_secs(2 * 3600)); // 00:13: the 00:00 tick
    assert_eq!(db.enqueue_schedules().unwrap(), enqueued(1));

    // Back to 21:43: the 21:00 tick (never enqueued, but older than 00:00), then 22:13 again
    // (22:00, enqueued before): neither is enqueued, through this handle or a fresh one.
    for back_to in [T0 - 30 * 60_000, T0] {
        db.clock.set(back_to);
        let behind = ScheduleReport { up_to_date: 1, clock_behind: 1, ..ScheduleReport::default() };
        assert_eq!(db.enqueue_schedules().unwrap(), behind);
        let fresh = db.reopen();
        fresh.schedule("hourly", hourly(), report_job()).unwrap();
        assert_eq!(fresh.enqueue_schedules().unwrap(), behind);
    }
    assert_eq!(ticks(&db, "reports", "hourly"), vec![T0_HOUR, T0_HOUR + 2 * HOUR]);

    // Once the clock passes the recorded tick again, the next tick runs.
    db.clock.set(T0_HOUR + 3 * HOUR);
    assert_eq!(db.enqueue_schedules().unwrap(), enqueued(1));
    assert_eq!(ticks(&db, "reports", "hourly"), vec![T0_HOUR, T0_HOUR + 2 * HOUR, T0_HOUR + 3 * HOUR]);
}

fn a_clock_jumping_forward_enqueues_only_the_latest_tick<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.schedule("hourly", hourly(), report_job()).unwrap();
    let every = Schedule::every(Duration::from_secs(600)).unwrap();
    db.schedule("ten-minutes", every, NewJob::new("pings", b"ping".to_vec())).unwrap();
    assert_eq!(db.enqueue_schedules().unwrap(), enqueued(2));
    // Three days and ten minutes later in one step.
    db.advance(Duration::from_secs(3 * 86_400 + 600));
    assert_eq!(db.enqueue_schedules().unwrap(), enqueued(2));
    let now = db.now_ms();
    assert_eq!(ticks(&db, "reports", "hourly"), vec![T0_HOUR, now - now % HOUR]);
    assert_eq!(ticks(&db, "pings", "ten-minutes"), vec![T0 - T0 % 600_000, now - now % 600_000]);
}

/// The tick's job row is completed and pruned while the tick is still the latest: the
/// schedule's record, not the row, says it ran (an idempotency key alone would enqueue it
/// again at every pass after each prune).
fn a_pruned_tick_is_not_enqueued_again<H: Harness>(h: &H) {
    let db = Db::new(h);
    let monthly = Schedule::cron("0 0 1 * *", "UTC").unwrap();
    db.schedule("invoices", monthly, NewJob::new("billing", b"invoice run".to_vec())).unwrap();
    assert_eq!(db.enqueue_schedules().unwrap(), enqueued(1));
    let first = ticks(&db, "billing", "invoices");
    let job = db.claim("billing", "w", LEASE).unwrap().expect("the invoice run");
    db.complete(&job.token()).unwrap();
    db.advance(Duration::from_secs(60));
    assert_eq!(db.prune(&Retention::older_than(Duration::ZERO)).unwrap().settled, 1);
    assert!(jobs(&db, "billing").is_empty(), "the tick's row is gone");

    assert_eq!(db.enqueue_schedules().unwrap(), up_to_date(1));
    let fresh = db.reopen();
    fresh
        .schedule("invoices", Schedule::cron("0 0 1 * *", "UTC").unwrap(), NewJob::new("billing", b"x".to_vec()))
        .unwrap();
    assert_eq!(fresh.enqueue_schedules().unwrap(), up_to_date(1));
    assert!(jobs(&db, "billing").is_empty(), "the pruned tick was not enqueued again");
    assert_eq!(fresh.last_tick("invoices").unwrap(), first.first().copied());
}

fn a_fixed_interval_ticks_from_its_anchor<H: Harness>(h: &H) {
    let db = Db::new(h);
    let anchor = T0 - 60_000;
    let every = Schedule::every_from(anchor, Duration::from_secs(600)).unwrap();
    db.schedule("sync", every, NewJob::new("sync", b"s".to_vec())).unwrap();
    assert_eq!(db.enqueue_schedules().unwrap(), enqueued(1));
    db.advance(Duration::from_millis(540_000 - 1)); // a millisecond before the next tick
    assert_eq!(db.enqueue_schedules().unwrap(), up_to_date(1));
    db.advance(Duration::from_millis(1)); // exactly at it
    assert_eq!(db.enqueue_schedules().unwrap(), enqueued(1));
    db.advance(Duration::from_secs(35 * 60)); // three ticks passed: the latest runs
    assert_eq!(db.enqueue_schedules().unwrap(), enqueued(1));
    assert_eq!(ticks(&db, "sync", "sync"), vec![anchor, anchor + 600_000, anchor + 4 * 600_000]);
}

fn ticks_are_never_enqueued_ahead_of_the_clock<H: Harness>(h: &H) {
    let db = Db::new(h);
    // 2024-01-01 00:00 UTC, the only tick of this expression.
    let new_year: i64 = 1_704_067_200_000;
    let once = Schedule::cron("0 0 0 1 1 * 2024", "UTC").unwrap();
    db.schedule("new-year", once, NewJob::new("q", b"happy".to_vec())).unwrap();
    let not_due = ScheduleReport { not_due: 1, ..ScheduleReport::default() };
    assert_eq!(db.enqueue_schedules().unwrap(), not_due);
    db.clock.set(new_year - 1);
    assert_eq!(db.enqueue_schedules().unwrap(), not_due);
    assert!(jobs(&db, "q").is_empty());
    db.clock.set(new_year);
    assert_eq!(db.enqueue_schedules().unwrap(), enqueued(1));
    let job = &jobs(&db, "q")[0];
    assert_eq!((job.key.as_deref(), job.created_at), (Some("schedule:new-year:1704067200000"), new_year));
    // Every job's tick is at or before the clock's now when it was enqueued.
    db.schedule("hourly", hourly(), report_job()).unwrap();
    for _ in 0..5 {
        db.advance(Duration::from_millis(1_234_567));
        db.enqueue_schedules().unwrap();
    }
    for job in jobs(&db, "reports") {
        let tick: i64 = job.key.unwrap().rsplit(':').next().unwrap().parse().unwrap();
        assert!(tick <= job.created_at && job.created_at - tick < HOUR, "tick {tick} at {}", job.created_at);
    }
}

fn a_scheduled_job_carries_its_template_and_the_tick_key<H: Harness>(h: &H) {
    let db = Db::new(h);
    let template = NewJob::new("emails", b"daily digest".to_vec()).priority(7).max_attempts(2);
    db.schedule("digest", Schedule::cron("0 9 * * *", "Europe/Berlin").unwrap(), template).unwrap();
    db.enqueue_schedules().unwrap();
    let job = &jobs(&db, "emails")[0];
    // 2023-11-14 09:00 CET is 08:00 UTC.
    let tick = T0_HOUR - 14 * HOUR;
    assert_eq!(job.key.as_deref(), Some(format!("schedule:digest:{tick}").as_str()));
    assert_eq!((job.payload.as_slice(), job.priority, job.max_attempts), (&b"daily digest"[..], 7, 2));
    assert_eq!((job.run_at, job.attempt), (T0, 0), "due at once, however late the tick");
    let claimed = db.claim("emails", "w", LEASE).unwrap().expect("the digest is due");
    assert_eq!(claimed.id(), job.id);
}

fn an_existing_job_with_the_tick_key_is_a_duplicate<H: Harness>(h: &H) {
    let db = Db::new(h);
    let key = format!("schedule:hourly:{T0_HOUR}");
    let by_hand = db.enqueue(NewJob::new("reports", b"by hand".to_vec()).key(key)).unwrap();
    db.schedule("hourly", hourly(), report_job()).unwrap();
    let duplicate = ScheduleReport { duplicates: 1, ..ScheduleReport::default() };
    assert_eq!(db.enqueue_schedules().unwrap(), duplicate);
    let all = jobs(&db, "reports");
    assert_eq!((all.len(), all[0].id, all[0].payload.as_slice()), (1, by_hand.id(), &b"by hand"[..]));
    assert_eq!(db.last_tick("hourly").unwrap(), Some(T0_HOUR), "the tick counts as enqueued");
    assert_eq!(db.enqueue_schedules().unwrap(), up_to_date(1));
}

fn a_registration_is_replaced_by_name_and_removed<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.schedule("s", hourly(), NewJob::new("a", b"1".to_vec())).unwrap();
    db.schedule("s", hourly(), NewJob::new("b", b"2".to_vec())).unwrap();
    let clone = db.queue.clone();
    assert_eq!(clone.schedules().len(), 1, "clones share one registry, one entry per name");
    assert_eq!(clone.enqueue_schedules().unwrap(), enqueued(1));
    assert!(jobs(&db, "a").is_empty());
    assert_eq!(jobs(&db, "b").len(), 1);
    assert!(db.unschedule("s"));
    assert!(!clone.unschedule("s"));
    assert!(db.schedules().is_empty());
    db.advance(Duration::from_secs(3600));
    assert_eq!(db.enqueue_schedules().unwrap(), ScheduleReport::default());
    assert_eq!(db.last_tick("s").unwrap(), Some(T0_HOUR), "the record outlives the registration");
    assert_eq!(db.last_tick("never-registered").unwrap(), None);
}

fn refused_registrations_change_nothing<H: Harness>(h: &H) {
    let db = Db::new(h);
    let job = || NewJob::new("q", b"x".to_vec());
    let long = "n".repeat(129);
    let refusals: Vec<(&str, fenceq::Result<()>)> = vec![
        ("empty name", db.schedule("", hourly(), job())),
        ("long name", db.schedule(&long, hourly(), job())),
        ("name with a space", db.schedule("daily digest", hourly(), job())),
        ("name with a newline", db.schedule("a\nb", hourly(), job())),
        ("name with a NUL", db.schedule("a\0b", hourly(), job())),
        ("job with a key", db.schedule("s", hourly(), job().key("mine"))),
        ("empty payload", db.schedule("s", hourly(), NewJob::new("q", Vec::new()))),
        ("empty queue", db.schedule("s", hourly(), NewJob::new("", b"x".to_vec()))),
        ("zero attempts", db.schedule("s", hourly(), job().max_attempts(0))),
        ("never ticks again", db.schedule("s", Schedule::cron("0 0 0 1 1 * 2020", "UTC").unwrap(), job())),
    ];
    for (what, result) in refusals {
        assert!(matches!(result, Err(Error::InvalidInput { .. })), "{what}: {result:?}");
    }
    assert!(db.schedules().is_empty());
    assert_eq!(db.enqueue_schedules().unwrap(), ScheduleReport::default());
    assert!(db.snapshot().is_empty());
    // A refused replacement leaves the registration it would have replaced.
    db.schedule("s", hourly(), job()).unwrap();
    assert!(db.schedule("s", hourly(), job().key("k")).is_err());
    assert_eq!(db.enqueue_schedules().unwrap(), enqueued(1));
    assert_eq!(ticks(&db, "q", "s"), vec![T0_HOUR]);
}

fn the_maintenance_pass_runs_the_scheduler<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.schedule("hourly", hourly(), report_job()).unwrap();
    let long = Duration::from_secs(3600);
    let config = MaintenanceConfig {
        schedule_every: long,
        reap_every: long,
        checkpoint_every: long,
        ..MaintenanceConfig::default()
    };
    let maintenance = db.start_maintenance(config).unwrap();
    assert_eq!(maintenance.run_once().unwrap().scheduled, enqueued(1));
    assert_eq!(maintenance.run_once().unwrap().scheduled, up_to_date(1));
    maintenance.stop();
    let zero = MaintenanceConfig { schedule_every: Duration::ZERO, ..MaintenanceConfig::default() };
    assert!(matches!(db.start_maintenance(zero), Err(Error::InvalidInput { .. })));
    assert_eq!(ticks(&db, "reports", "hourly"), vec![T0_HOUR]);
}

/// What a schedule is, where its ticks go and when it next ticks are recorded in the
/// database, by the registration and by every tick, so that a handle that registered nothing
/// (another process, the CLI) lists them; the latest registration under a name wins, and
/// the record outlives the registration.
fn a_schedule_is_recorded_for_every_process_with_its_next_tick<H: Harness>(h: &H) {
    let db = Db::new(h);
    let other = db.reopen();
    let record = |definition: &str, queue: &str, last_tick, next_tick, recorded_at| ScheduleRecord {
        name: "hourly".into(),
        definition: Some(definition.into()),
        queue: Some(queue.into()),
        last_tick,
        next_tick: Some(next_tick),
        recorded_at: Some(recorded_at),
    };
    let cron = "cron \"0 * * * *\" in UTC";
    assert!(other.schedule_records().unwrap().is_empty());

    db.schedule("hourly", hourly(), report_job()).unwrap();
    // Registered at 22:13: the next pass enqueues 22:00 at once.
    assert_eq!(other.schedule_records().unwrap(), vec![record(cron, "reports", None, T0_HOUR, T0)]);
    assert_eq!(db.enqueue_schedules().unwrap(), enqueued(1));
    assert_eq!(other.schedule_records().unwrap(), vec![record(cron, "reports", Some(T0_HOUR), T0_HOUR + HOUR, T0)]);

    db.advance(Duration::from_secs(3600));
    assert_eq!(db.enqueue_schedules().unwrap(), enqueued(1));
    let after_tick = record(cron, "reports", Some(T0_HOUR + HOUR), T0_HOUR + 2 * HOUR, T0 + HOUR);
    assert_eq!(other.schedule_records().unwrap(), vec![after_tick.clone()]);
    // Registered again after a restart: its latest tick is enqueued, the next is ahead.
    db.advance(Duration::from_secs(60));
    other.schedule("hourly", hourly(), report_job()).unwrap();
    let again = record(cron, "reports", Some(T0_HOUR + HOUR), T0_HOUR + 2 * HOUR, T0 + HOUR + 60_000);
    assert_eq!(db.schedule_records().unwrap(), vec![again]);

    // The latest registration under the name is what is shown.
    other
        .schedule("hourly", Schedule::every(Duration::from_secs(60)).unwrap(), NewJob::new("minutes", b"m".to_vec()))
        .unwrap();
    let now = T0 + HOUR + 60_000;
    let minutely = record("every 60000 ms from 0", "minutes", Some(T0_HOUR + HOUR), now - now % 60_000, now);
    assert_eq!(db.schedule_records().unwrap(), vec![minutely.clone()]);
    assert!(other.unschedule("hourly"));
    assert_eq!(db.schedule_records().unwrap(), vec![minutely], "the record outlives the registration");
}
