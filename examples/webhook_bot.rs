//! A webhook-style bot on fenceq.
//!
//! Intake threads receive updates the way webhooks deliver them, some of them twice (a
//! redelivery after a slow acknowledgement); intake is idempotent by the update's id, so a
//! redelivery makes no second job. A worker pool replies to each update exactly once: the
//! reply row and the job's completion commit in one transaction (`Attempt::complete_with`),
//! only while the attempt owns the job. A transient failure is retried with backoff, a
//! permanent one becomes an exhaustion to acknowledge, an ambiguous one (a timeout after the
//! send) becomes `unknown` for a reconciler. The maintenance thread reaps and prunes.
//! SIGTERM or Ctrl-C shuts everything down cleanly.
//!
//! ```sh
//! cargo run --example webhook_bot             # 400 updates, then a clean exit
//! cargo run --example webhook_bot -- --serve  # keeps serving until SIGTERM or Ctrl-C
//! ```

use fenceq::{MaintenanceConfig, NewJob, Outcome, Queue, RetryPolicy, WorkerPool};
use std::time::Duration;

const UPDATES: u64 = 400;
const INTAKE_THREADS: u64 = 4;

/// What the bot's "chat API" does with an update (a stand-in for the network call).
fn send_reply(update: u64, attempt: u32) -> Result<String, Outcome> {
    match update {
        // Telegram answered 502: try again later.
        u if u % 37 == 0 && attempt == 1 => Err(Outcome::retry_after(Duration::from_millis(5), "502 Bad Gateway")),
        // The user blocked the bot: retrying cannot help.
        100 => Err(Outcome::Exhaust("403 Forbidden: bot was blocked by the user".into())),
        // The request timed out after it was sent: it may or may not have been delivered.
        250 => Err(Outcome::Unknown("timeout after the send; delivery unknown".into())),
        u => Ok(format!("echo of update {u}")),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // fenceq logs what it cannot return (a lost lease, a failed settle) through `tracing`:
    // without a subscriber those warnings go nowhere.
    tracing_subscriber::fmt().with_max_level(tracing_subscriber::filter::LevelFilter::WARN).init();
    let serve = std::env::args().any(|a| a == "--serve");
    let dir = tempfile::tempdir()?;
    let queue = Queue::open(dir.path().join("bot.db"))?;
    queue.transaction(|tx| {
        // The application's own table beside the queue's: one reply per update, enforced.
        Ok(tx.execute_batch("CREATE TABLE replies (update_id INTEGER PRIMARY KEY, text TEXT NOT NULL)")?)
    })?;

    // SIGTERM (a service manager stopping us) or Ctrl-C: stop taking work, finish what runs.
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(1);
    ctrlc::set_handler(move || {
        let _ = stop_tx.try_send(());
    })?;

    let pool = WorkerPool::builder(queue.clone(), "telegram")
        .workers(4)
        .lease(Duration::from_secs(30))
        .retry_policy(RetryPolicy { base: Duration::from_millis(5), max: Duration::from_secs(1), jitter: 0.2 })
        .handler(|attempt| {
            let update: u64 = std::str::from_utf8(attempt.payload()).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
            match send_reply(update, attempt.attempt()) {
                Ok(text) => match attempt.complete_with(|tx| {
                    tx.execute("INSERT INTO replies (update_id, text) VALUES (?1, ?2)", (update as i64, &text))?;
                    Ok(())
                }) {
                    Ok(()) => Outcome::Complete,
                    // Lost the job (lease expired and reclaimed): nothing was written.
                    Err(e) => Outcome::retry(e.to_string()),
                },
                Err(outcome) => outcome,
            }
        })
        .start()?;
    let maintenance = queue.start_maintenance(MaintenanceConfig::default())?;

    // Webhook intake: each update arrives once, every third one twice.
    let intake: Vec<_> = (0..INTAKE_THREADS)
        .map(|t| {
            let queue = queue.clone();
            std::thread::spawn(move || -> fenceq::Result<(u64, u64)> {
                let (mut new, mut duplicates) = (0, 0);
                for update in (1..=UPDATES).filter(|u| u % INTAKE_THREADS == t) {
                    for _ in 0..(1 + u64::from(update % 3 == 0)) {
                        let job =
                            NewJob::new("telegram", update.to_string().into_bytes()).key(format!("update:{update}"));
                        if queue.enqueue(job)?.is_duplicate() {
                            duplicates += 1;
                        } else {
                            new += 1;
                        }
                    }
                }
                Ok((new, duplicates))
            })
        })
        .collect();
    let (mut new, mut duplicates) = (0, 0);
    for thread in intake {
        let (n, d) = thread.join().expect("an intake thread panicked")?;
        new += n;
        duplicates += d;
    }
    println!("intake: {} deliveries, {new} new jobs, {duplicates} redeliveries recognised", new + duplicates);

    if serve {
        println!("serving; stop with SIGTERM or Ctrl-C");
        let _ = stop_rx.recv();
    } else {
        // Done once the pool has run everything it ever will, the retries scheduled for later
        // included (`wait_idle` would return while a retry waits for its time), or on a
        // signal, looked at between the waits.
        while !pool.wait_drained(Duration::from_millis(100))? {
            if stop_rx.try_recv().is_ok() {
                break;
            }
        }
    }
    let report = pool.shutdown(Duration::from_secs(10))?;
    maintenance.stop();
    let c = report.counters;
    println!(
        "pool: {} claimed, {} completed, {} retried, {} exhausted, {} unknown, {} stale settles rejected",
        c.claimed, c.completed, c.retried, c.exhausted, c.unknown, c.stale_settles_rejected
    );

    let replies: i64 = queue.with_connection(|c| Ok(c.query_row("SELECT count(*) FROM replies", [], |r| r.get(0))?))?;
    let stats = queue.stats()?;
    let q = &stats.queues[0];
    println!(
        "replies: {replies}; jobs: {} completed, {} exhausted awaiting acknowledgement, {} unknown",
        q.completed, q.exhausted_unacknowledged, q.unknown
    );
    if !serve {
        // What the run must show: one job per update, one reply per completed job.
        assert_eq!(new, UPDATES, "one job per update");
        assert_eq!(replies as u64, q.completed, "one reply per completed job");
        assert_eq!((q.completed, q.exhausted_unacknowledged, q.unknown), (UPDATES - 2, 1, 1));
        println!("ok: every update answered once; `fenceq unknown` and `fenceq exhausted` list the other two");
    }
    Ok(())
}
