//! Texts, the same on every store: an error, evidence, reason or note with a NUL byte (an
//! upstream body often has one) is stored on every path, shown as `NUL_SHOWN_AS`, never
//! refused and never an error of the store; a key or name the stores could not hold alike
//! (a NUL byte; in names, any control character) is refused before anything is written.

use crate::fixture::{Db, HANG_GUARD, LEASE};
use crate::harness::Harness;
use crate::Rule;
use fenceq::{Error, JobState, NewJob, Outcome, Resolution, WorkerPool, NUL_SHOWN_AS};
use std::time::Duration;

/// The rules of this file.
pub(super) fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        every_settle_stores_a_text_with_a_nul_byte_and_shows_it_as_the_null_symbol,
        a_pool_records_a_retry_whose_error_holds_a_nul_byte,
        a_key_with_a_nul_byte_and_a_name_with_a_control_character_are_refused_alike,
    ]
}

const GARBAGE: &str = "upstream said: \0 (binary garbage)";

fn shown() -> String {
    GARBAGE.replace('\0', &NUL_SHOWN_AS.to_string())
}

fn every_settle_stores_a_text_with_a_nul_byte_and_shows_it_as_the_null_symbol<H: Harness>(h: &H) {
    let db = Db::new(h);
    let ids: Vec<_> = (0..5).map(|i| db.add(&format!("{i}"))).collect();
    let claims: Vec<_> = (0..5).map(|_| db.take("w")).collect();
    let token = |i: usize| claims.iter().find(|c| c.id() == ids[i]).unwrap().token;
    db.retry(&token(0), Duration::from_secs(60), GARBAGE).unwrap();
    db.exhaust(&token(1), GARBAGE).unwrap();
    db.mark_unknown(&token(2), GARBAGE).unwrap();
    db.park(&token(3), Duration::from_secs(60), GARBAGE).unwrap();
    let expected = [JobState::Pending, JobState::Exhausted, JobState::Unknown, JobState::Waiting];
    for (i, state) in expected.into_iter().enumerate() {
        let job = db.job(ids[i]).unwrap().unwrap();
        assert_eq!(job.state, state, "job {}", ids[i]);
        assert_eq!(job.last_error.as_deref(), Some(shown().as_str()), "job {}", ids[i]);
    }
    // An operator's note holds a NUL the same way.
    db.operator("ops").note(GARBAGE).resolve(&token(2), Resolution::Retry).unwrap();
    let decision = db.job(ids[2]).unwrap().unwrap().decision.expect("the decision is recorded");
    assert_eq!(decision.note.as_deref(), Some(shown().as_str()));
    // An over-long text with NULs near its end is cut whole, never split inside a symbol.
    let long = format!("{}{}", "a".repeat(fenceq::MAX_ERROR_LEN - 2), "\0\0");
    db.exhaust(&token(4), &long).unwrap();
    let stored = db.job(ids[4]).unwrap().unwrap().last_error.unwrap();
    assert!(stored.len() <= fenceq::MAX_ERROR_LEN && !stored.contains('\0'), "{} bytes", stored.len());
}

fn a_pool_records_a_retry_whose_error_holds_a_nul_byte<H: Harness>(h: &H) {
    let db = Db::new(h);
    let id = db.add("x");
    let pool = WorkerPool::builder(db.queue.clone(), "q")
        .workers(1)
        .lease(LEASE)
        .poll_interval(Duration::from_millis(5))
        .handler(|_| Outcome::retry_after(Duration::from_secs(60), "bad \0 byte"))
        .start()
        .unwrap();
    // The retry is due a minute later by the queue's clock, which stands still: the pool is
    // idle once it settled the one attempt.
    assert!(pool.wait_idle(HANG_GUARD).unwrap(), "the pool settled the attempt");
    let counters = pool.shutdown(HANG_GUARD).unwrap().counters;
    assert_eq!((counters.retried, counters.errors), (1, 0), "{counters:?}");
    let job = db.job(id).unwrap().unwrap();
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(job.last_error, Some(format!("bad {NUL_SHOWN_AS} byte")));
}

fn a_key_with_a_nul_byte_and_a_name_with_a_control_character_are_refused_alike<H: Harness>(h: &H) {
    let db = Db::new(h);
    let refused = |what: &str, result: fenceq::Result<fenceq::Enqueued>| match result {
        Err(Error::InvalidInput { .. }) => {}
        other => panic!("{what}: {other:?}"),
    };
    refused("key with a NUL", db.enqueue(NewJob::new("q", b"x".to_vec()).key("update:\0:1")));
    refused("queue name with ESC", db.enqueue(NewJob::new("q\u{1b}[2J", b"x".to_vec())));
    refused("queue name with a line feed", db.enqueue(NewJob::new("q\nFORGED: all ok", b"x".to_vec())));
    refused("queue name with a NUL", db.enqueue(NewJob::new("q\0", b"x".to_vec())));
    assert!(matches!(
        db.enqueue_batch(vec![NewJob::new("q", b"x".to_vec()), NewJob::new("q", b"y".to_vec()).key("a\0")]),
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(db.claim("q\u{7}", "w", LEASE), Err(Error::InvalidInput { .. })));
    assert!(matches!(db.claim("q", "w\r", LEASE), Err(Error::InvalidInput { .. })));
    assert!(matches!(db.operator("a\u{1b}").cancel(fenceq::JobId(1)), Err(Error::InvalidInput { .. })));
    assert!(db.snapshot().is_empty(), "nothing was stored");
    // A key with other control characters is the application's own, and is kept as it is.
    let id = db.enqueue(NewJob::new("q", b"x".to_vec()).key("line\nfeed\u{1b}")).unwrap().id();
    assert_eq!(db.job(id).unwrap().unwrap().key.as_deref(), Some("line\nfeed\u{1b}"));
}
