//! Metrics rules, for every store: `Queue::metrics_text` (the Prometheus text exposition
//! format 0.0.4) counts what the store holds, per queue and state, at the clock's now, and
//! escapes queue names that the format would otherwise misread; `Queue::completions_per_minute`
//! counts completions in the minute they settled.

use crate::fixture::{Db, T0};
use crate::harness::Harness;
use crate::Rule;
use fenceq::{Error, NewJob, Queue};
use std::time::Duration;

/// Every metrics rule.
pub fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        prometheus_text_counts_every_state_with_the_oldest_pending_age,
        prometheus_text_escapes_quote_and_backslash_in_queue_names,
        prometheus_text_of_an_empty_database_is_only_the_headers,
        completions_per_minute_count_each_completion_in_the_minute_it_settled,
    ]
}

/// Enqueues a job on `queue` and claims it under `lease` (the queue holds no other due job).
fn claimed<S: fenceq::store::Store>(q: &Queue<S>, queue: &str, lease: Duration) -> fenceq::ClaimToken {
    let id = q.enqueue(NewJob::new(queue, b"x".to_vec())).unwrap().id();
    let claimed = q.claim(queue, "w", lease).unwrap().expect("a due job");
    assert_eq!(claimed.id(), id, "the only due job");
    claimed.token
}

/// One job in every state of "telegram" (two pending, one due since T0 and one scheduled; two
/// running, one lease expired; exhausted acknowledged and not), and one scheduled job in
/// "emails"; the text is read 12.5 s after T0.
fn prometheus_text_counts_every_state_with_the_oldest_pending_age<H: Harness>(h: &H) {
    let db = Db::new(h);
    let hour = Duration::from_secs(3600);
    db.complete(&claimed(&db, "telegram", hour)).unwrap();
    db.exhaust(&claimed(&db, "telegram", hour), "502").unwrap();
    let acknowledged = claimed(&db, "telegram", hour);
    db.exhaust(&acknowledged, "502").unwrap();
    db.acknowledge(&acknowledged).unwrap();
    db.mark_unknown(&claimed(&db, "telegram", hour), "timeout after send").unwrap();
    db.park(&claimed(&db, "telegram", hour), hour, "awaiting approval").unwrap();
    claimed(&db, "telegram", Duration::from_secs(10)); // expired at the reading
    claimed(&db, "telegram", Duration::from_secs(60)); // live at the reading
    let cancelled = db.enqueue(NewJob::new("telegram", b"x".to_vec()).delay(hour)).unwrap().id();
    db.cancel(cancelled).unwrap();
    db.enqueue(NewJob::new("telegram", b"due".to_vec())).unwrap();
    db.enqueue(NewJob::new("telegram", b"later".to_vec()).delay(hour)).unwrap();
    db.enqueue(NewJob::new("emails", b"later".to_vec()).delay(hour)).unwrap();
    db.advance(Duration::from_millis(12_500));
    assert_eq!(db.now_ms(), T0 + 12_500);

    let expected = "\
# HELP fenceq_jobs Jobs per queue and state (settled rows until retention prunes them).
# TYPE fenceq_jobs gauge
fenceq_jobs{queue=\"emails\",state=\"pending\"} 1
fenceq_jobs{queue=\"emails\",state=\"running\"} 0
fenceq_jobs{queue=\"emails\",state=\"waiting\"} 0
fenceq_jobs{queue=\"emails\",state=\"completed\"} 0
fenceq_jobs{queue=\"emails\",state=\"exhausted\"} 0
fenceq_jobs{queue=\"emails\",state=\"unknown\"} 0
fenceq_jobs{queue=\"emails\",state=\"cancelled\"} 0
fenceq_jobs{queue=\"telegram\",state=\"pending\"} 2
fenceq_jobs{queue=\"telegram\",state=\"running\"} 2
fenceq_jobs{queue=\"telegram\",state=\"waiting\"} 1
fenceq_jobs{queue=\"telegram\",state=\"completed\"} 1
fenceq_jobs{queue=\"telegram\",state=\"exhausted\"} 2
fenceq_jobs{queue=\"telegram\",state=\"unknown\"} 1
fenceq_jobs{queue=\"telegram\",state=\"cancelled\"} 1
# HELP fenceq_oldest_pending_age_seconds How long the most overdue pending job has been due, in seconds (0 when none is due).
# TYPE fenceq_oldest_pending_age_seconds gauge
fenceq_oldest_pending_age_seconds{queue=\"emails\"} 0
fenceq_oldest_pending_age_seconds{queue=\"telegram\"} 12.5
# HELP fenceq_exhaustions_unacknowledged Exhausted jobs awaiting acknowledgement (fenceq exhausted).
# TYPE fenceq_exhaustions_unacknowledged gauge
fenceq_exhaustions_unacknowledged{queue=\"emails\"} 0
fenceq_exhaustions_unacknowledged{queue=\"telegram\"} 1
# HELP fenceq_unknown_outcomes_unresolved Unknown outcomes awaiting resolution (fenceq unknown).
# TYPE fenceq_unknown_outcomes_unresolved gauge
fenceq_unknown_outcomes_unresolved{queue=\"emails\"} 0
fenceq_unknown_outcomes_unresolved{queue=\"telegram\"} 1
# HELP fenceq_expired_leases Running jobs whose lease has expired (reclaimable; fenceq reap).
# TYPE fenceq_expired_leases gauge
fenceq_expired_leases{queue=\"emails\"} 0
fenceq_expired_leases{queue=\"telegram\"} 1
# HELP fenceq_queue_paused 1 while the queue is paused (its claims find nothing; fenceq unpause), else 0.
# TYPE fenceq_queue_paused gauge
fenceq_queue_paused{queue=\"emails\"} 0
fenceq_queue_paused{queue=\"telegram\"} 0
# HELP fenceq_queue_backoff_seconds Seconds until the queue's back-off ends (its claims find nothing until then; fenceq backoff), else 0.
# TYPE fenceq_queue_backoff_seconds gauge
fenceq_queue_backoff_seconds{queue=\"emails\"} 0
fenceq_queue_backoff_seconds{queue=\"telegram\"} 0
";
    assert_eq!(db.metrics_text().unwrap(), expected);
    assert_eq!(db.stats().unwrap().to_prometheus(db.now_ms()), expected, "the same text from stats");

    // The reading follows the rows: a reap returns the expired lease to pending (the most
    // overdue pending job is still the one due since T0).
    assert_eq!(db.reap().unwrap().requeued, 1);
    let text = db.metrics_text().unwrap();
    assert!(text.contains("fenceq_jobs{queue=\"telegram\",state=\"pending\"} 3\n"), "{text}");
    assert!(text.contains("fenceq_expired_leases{queue=\"telegram\"} 0\n"), "{text}");
    assert!(text.contains("fenceq_oldest_pending_age_seconds{queue=\"telegram\"} 12.5\n"), "{text}");
}

/// A queue name may hold any character but a control character; `\` and `"` must be escaped
/// or a scraper would read a broken (or a different) sample. (A line feed, which the text
/// format escapes too, is refused in names before it can reach a row.)
fn prometheus_text_escapes_quote_and_backslash_in_queue_names<H: Harness>(h: &H) {
    let db = Db::new(h);
    let name = "bot \"prod\"\\eu second line";
    db.enqueue(NewJob::new(name, b"x".to_vec())).unwrap();
    let text = db.metrics_text().unwrap();
    let label = r#"queue="bot \"prod\"\\eu second line""#;
    assert!(text.contains(&format!("fenceq_jobs{{{label},state=\"pending\"}} 1\n")), "{text}");
    assert!(text.contains(&format!("fenceq_oldest_pending_age_seconds{{{label}}} 0\n")), "{text}");
    assert!(text.contains(&format!("fenceq_expired_leases{{{label}}} 0\n")), "{text}");
    // Every line is a comment or a sample of ours: no raw line feed split one.
    assert_eq!(text.lines().count(), 14 + 7 + 6, "{text}");
    for line in text.lines() {
        assert!(
            line.starts_with("# HELP fenceq_") || line.starts_with("# TYPE fenceq_") || line.starts_with("fenceq_")
        );
    }
}

fn prometheus_text_of_an_empty_database_is_only_the_headers<H: Harness>(h: &H) {
    let db = Db::new(h);
    let text = db.metrics_text().unwrap();
    let names: Vec<&str> = text.lines().filter_map(|line| line.strip_prefix("# TYPE ")).collect();
    assert_eq!(
        names,
        [
            "fenceq_jobs gauge",
            "fenceq_oldest_pending_age_seconds gauge",
            "fenceq_exhaustions_unacknowledged gauge",
            "fenceq_unknown_outcomes_unresolved gauge",
            "fenceq_expired_leases gauge",
            "fenceq_queue_paused gauge",
            "fenceq_queue_backoff_seconds gauge",
        ]
    );
    assert_eq!(text.lines().count(), 14, "{text}");
}

/// `Queue::completions_per_minute` counts completed jobs (not cancelled, exhausted or
/// unknown ones) of every queue in the minute of the clock they settled in, for every minute
/// of the window ending with the current one, zeros included, oldest first; a completion
/// before the window is not counted. T0 is 20 s into its minute.
fn completions_per_minute_count_each_completion_in_the_minute_it_settled<H: Harness>(h: &H) {
    let db = Db::new(h);
    let hour = Duration::from_secs(3600);
    let first = T0.div_euclid(60_000) * 60_000;
    db.complete(&claimed(&db, "telegram", hour)).unwrap(); // minute 0, outside a 3-minute window
    db.advance(Duration::from_secs(60));
    db.complete(&claimed(&db, "telegram", hour)).unwrap(); // minute 1
    db.advance(Duration::from_secs(39)); // T0 + 99 s: still minute 1
    db.complete(&claimed(&db, "emails", hour)).unwrap();
    db.exhaust(&claimed(&db, "emails", hour), "502").unwrap();
    db.mark_unknown(&claimed(&db, "emails", hour), "timeout").unwrap();
    let cancelled = db.enqueue(NewJob::new("emails", b"x".to_vec())).unwrap().id();
    db.cancel(cancelled).unwrap();
    db.advance(Duration::from_secs(120)); // T0 + 219 s: minute 3
    db.complete(&claimed(&db, "emails", hour)).unwrap();

    assert_eq!(
        db.completions_per_minute(3).unwrap(),
        vec![(first + 60_000, 2), (first + 120_000, 0), (first + 180_000, 1)]
    );
    let window = db.completions_per_minute(60).unwrap();
    assert_eq!(window.len(), 60);
    assert_eq!(window.last(), Some(&(first + 180_000, 1)));
    assert_eq!(window.iter().map(|m| m.1).sum::<u64>(), 4, "{window:?}");
    for minutes in [0, 1_441] {
        assert!(matches!(db.completions_per_minute(minutes), Err(Error::InvalidInput { .. })), "{minutes}");
    }
}
