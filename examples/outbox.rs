//! The outbox pattern on fenceq: an order row and the job that e-mails its confirmation are
//! written in one transaction on the queue's own writer (`Queue::transaction` with
//! `Queue::enqueue_tx`), so an order never exists without its e-mail job, nor a job without
//! its order, and the application's writes never meet the queue's in SQLite's busy handler.
//! A declined payment rolls both back. A worker pool sends the e-mails.
//!
//! ```sh
//! cargo run --example outbox
//! ```

use fenceq::{Error, NewJob, Outcome, Queue, WorkerPool};
use std::time::Duration;

/// Places an order: the order row and its confirmation job, or neither.
fn place_order(queue: &Queue, order: i64, amount_cents: i64) -> fenceq::Result<()> {
    queue.transaction(|tx| {
        tx.execute("INSERT INTO orders (id, amount_cents) VALUES (?1, ?2)", [order, amount_cents])?;
        queue.enqueue_tx(tx, NewJob::new("emails", format!("{order}").into_bytes()).key(format!("order:{order}")))?;
        if amount_cents > 100_000 {
            // Discovered after both writes: returning the error rolls both back.
            return Err(Error::domain(format!("order {order}: payment declined")));
        }
        Ok(())
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // fenceq logs what it cannot return (a lost lease, a failed settle) through `tracing`:
    // without a subscriber those warnings go nowhere.
    tracing_subscriber::fmt().with_max_level(tracing_subscriber::filter::LevelFilter::WARN).init();
    let dir = tempfile::tempdir()?;
    let queue = Queue::open(dir.path().join("shop.db"))?;
    queue.transaction(|tx| {
        Ok(tx.execute_batch(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, amount_cents INTEGER NOT NULL);
             CREATE TABLE sent_emails (order_id INTEGER PRIMARY KEY REFERENCES orders (id));",
        )?)
    })?;
    let pool = WorkerPool::builder(queue.clone(), "emails")
        .workers(2)
        .handler(|attempt| {
            let order: i64 = std::str::from_utf8(attempt.payload()).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
            // "Send" the e-mail and record it with the completion.
            match attempt.complete_with(|tx| Ok(tx.execute("INSERT INTO sent_emails VALUES (?1)", [order])?)) {
                Ok(_) => Outcome::Complete,
                Err(e) => Outcome::retry(e.to_string()),
            }
        })
        .start()?;

    let mut declined = 0;
    for order in 1..=50 {
        let amount = if order % 10 == 0 { 250_000 } else { 1_999 };
        match place_order(&queue, order, amount) {
            Ok(()) => {}
            Err(Error::Domain(why)) => {
                println!("{why}");
                declined += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
    assert!(pool.wait_idle(Duration::from_secs(30))?, "the e-mails were sent");
    pool.shutdown(Duration::from_secs(10))?;

    let count = |sql: &str| queue.with_connection(|c| Ok(c.query_row(sql, [], |r| r.get::<_, i64>(0))?));
    let (orders, emails) = (count("SELECT count(*) FROM orders")?, count("SELECT count(*) FROM sent_emails")?);
    println!("{orders} orders placed, {declined} declined, {emails} confirmations sent");
    assert_eq!((orders, emails, declined), (45, 45, 5), "every order has its e-mail; a declined one has neither");
    assert!(queue.find_by_key("emails", "order:10")?.is_none(), "the declined order's job was rolled back");
    println!("ok");
    Ok(())
}
