//! A reconciler for ambiguous outcomes on fenceq.
//!
//! Some sends time out after the request left: the handler cannot tell whether the message
//! was delivered, so it returns `Outcome::Unknown` and fenceq never retries the job blindly.
//! The reconciler pages through `Queue::unknowns`, looks each one up in the external
//! service's delivery log, and decides: delivered means complete, not delivered means run
//! it again. Each decision commits together with the reconciler's own record
//! (`resolve_with`) and is recorded on the job's row with who decided and why
//! (`Queue::operator`), which `fenceq show ID` prints.
//!
//! ```sh
//! cargo run --example reconciler
//! ```

use fenceq::{NewJob, Outcome, Queue, Resolution, WorkerPool};
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // fenceq logs what it cannot return (a lost lease, a failed settle) through `tracing`:
    // without a subscriber those warnings go nowhere.
    tracing_subscriber::fmt().with_max_level(tracing_subscriber::filter::LevelFilter::WARN).init();
    let dir = tempfile::tempdir()?;
    let queue = Queue::open(dir.path().join("bot.db"))?;
    queue.transaction(|tx| {
        Ok(tx.execute_batch(
            "CREATE TABLE delivery_log (message INTEGER PRIMARY KEY);      -- the chat service's view
             CREATE TABLE sent (message INTEGER PRIMARY KEY);              -- ours
             CREATE TABLE reconciled (message INTEGER PRIMARY KEY, decision TEXT NOT NULL);",
        )?)
    })?;
    let pool = WorkerPool::builder(queue.clone(), "send")
        .workers(2)
        .handler(|attempt| {
            let message: i64 = std::str::from_utf8(attempt.payload()).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
            if message % 5 == 0 && attempt.attempt() == 1 {
                // The request timed out after it left. Even messages did reach the chat.
                if message % 2 == 0 {
                    // (The chat service's own log, simulated in the same file.)
                    let logged =
                        attempt.with_ownership(|tx| Ok(tx.execute("INSERT INTO delivery_log VALUES (?1)", [message])?));
                    if let Err(e) = logged {
                        return Outcome::retry(e.to_string());
                    }
                }
                return Outcome::Unknown(format!("timeout after sending message {message}"));
            }
            match attempt.complete_with(|tx| {
                tx.execute("INSERT OR IGNORE INTO delivery_log VALUES (?1)", [message])?;
                Ok(tx.execute("INSERT INTO sent VALUES (?1)", [message])?)
            }) {
                Ok(_) => Outcome::Complete,
                Err(e) => Outcome::retry(e.to_string()),
            }
        })
        .start()?;
    queue
        .enqueue_batch((1..=30).map(|m| NewJob::new("send", m.to_string().into_bytes()).key(format!("message:{m}"))))?;
    assert!(pool.wait_idle(Duration::from_secs(30))?);
    println!("{} unknown outcomes to reconcile", queue.stats()?.queues[0].unknown);

    // The reconciler: one pass over the unknown outcomes, in id order.
    let reconciler = queue.operator("reconciler").note("checked against the chat's delivery log");
    let (mut completed, mut retried) = (0, 0);
    let mut cursor = None;
    loop {
        let page = queue.unknowns(cursor, 100)?;
        for unknown in &page.items {
            let message: i64 = std::str::from_utf8(&unknown.payload)?.parse()?;
            let delivered: bool = queue.with_connection(|c| {
                Ok(c.query_row("SELECT count(*) FROM delivery_log WHERE message = ?1", [message], |r| {
                    r.get::<_, i64>(0)
                })? > 0)
            })?;
            let (resolution, decision) =
                if delivered { (Resolution::Complete, "delivered") } else { (Resolution::Retry, "not delivered") };
            reconciler.resolve_with(&unknown.token, resolution, |tx| {
                tx.execute("INSERT INTO reconciled VALUES (?1, ?2)", (message, decision))?;
                Ok(())
            })?;
            if delivered {
                completed += 1;
            } else {
                retried += 1;
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    println!("reconciled: {completed} delivered (completed), {retried} not delivered (sent again)");
    assert!(pool.wait_idle(Duration::from_secs(30))?, "the retried messages were sent");
    pool.shutdown(Duration::from_secs(10))?;

    let stats = queue.stats()?;
    let q = &stats.queues[0];
    let job = queue.job(queue.find_by_key("send", "message:10")?.expect("a job"))?.expect("its row");
    let decision = job.decision.expect("the reconciler's decision is on the row");
    println!("job of message 10: {} by {:?} ({:?})", decision.action, decision.by, decision.note);
    assert_eq!((q.completed, q.unknown, completed, retried), (30, 0, 3, 3));
    println!("ok: every message delivered once, every decision on its row");
    Ok(())
}
