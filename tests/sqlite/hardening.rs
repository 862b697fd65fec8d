//! Regressions for defects found by attacking the engine and the pool as a hostile user
//! would: guarded operator changes, nested calls, owned writes that outlast their lease,
//! the outbox on the queue's writer, lease arithmetic at the end of the clock, closures that
//! carry on after SQLite rolled their transaction back, late resumes, pool validation.
//!
//! Every wait is bounded (`recv_timeout`) so that a regression fails instead of hanging.

use crate::support::{snapshot, temp_queue, temp_queue_with, HANG_GUARD, LEASE, T0};
use crossbeam_channel::bounded;
use fenceq::rusqlite::Connection;
use fenceq::{Error, JobState, ManualClock, NewJob, Outcome, Queue, Retention, WorkerPool};
use std::time::Duration;

fn domain_rows(conn: &Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM domain", [], |r| r.get(0)).unwrap()
}

fn create_domain(queue: &Queue) {
    queue.transaction(|tx| Ok(tx.execute_batch("CREATE TABLE domain (job INTEGER, note TEXT)")?)).unwrap();
}

// ------------------------------------------------------------------------------- guarded changes

#[test]
fn reap_expecting_a_different_count_changes_nothing_and_the_right_count_reports_what_changed() {
    let q = temp_queue();
    for n in 0..3 {
        q.add(&format!("job {n}"));
        q.take("w");
    }
    q.advance(LEASE);
    let before = snapshot(&q.path());
    let err = q.reap_expecting(1).unwrap_err();
    assert!(matches!(err, Error::CountMismatch { expected: 1, found: 3, .. }), "{err:?}");
    assert_eq!(snapshot(&q.path()), before, "a mismatch rolled the whole pass back");
    let report = q.reap_expecting(3).unwrap();
    assert_eq!((report.requeued, report.total()), (3, 3));
    assert_eq!(q.stats().unwrap().queues[0].pending, 3);
}

#[test]
fn prune_expecting_a_different_count_deletes_nothing() {
    let q = temp_queue();
    for n in 0..2 {
        q.add(&format!("job {n}"));
        let c = q.take("w");
        q.complete(&c.token()).unwrap();
    }
    q.advance(Duration::from_secs(3600));
    let retention = Retention::older_than(Duration::from_secs(60));
    let before = snapshot(&q.path());
    assert!(matches!(q.prune_expecting(&retention, 5), Err(Error::CountMismatch { expected: 5, found: 2, .. })));
    assert_eq!(snapshot(&q.path()), before);
    assert_eq!(q.prune_expecting(&retention, 2).unwrap().deleted(), 2);
}

/// A settle and the record of its attempt are one transaction: where the record cannot be
/// written (a hostile trigger refuses it, the table is gone), the settle fails and changes
/// nothing, and so does a reap, which leaves the lease for a later pass. A completion writes
/// no record, so it goes on.
#[test]
fn a_settle_or_reap_whose_record_cannot_be_written_changes_nothing() {
    for tamper in [
        "CREATE TRIGGER hostile_abort_record BEFORE INSERT ON fenceq_attempts BEGIN SELECT RAISE(ABORT, 'no'); END;",
        "DROP TABLE fenceq_attempts;",
    ] {
        let q = temp_queue();
        q.add("settled");
        q.add("reaped");
        let settled = q.take("w");
        q.take("w");
        Connection::open(q.path()).unwrap().execute_batch(tamper).unwrap();
        let before = snapshot(&q.path());
        assert!(q.retry(&settled.token(), Duration::ZERO, "502").is_err(), "{tamper}");
        assert!(q.exhaust(&settled.token(), "gave up").is_err(), "{tamper}");
        assert!(q.park(&settled.token(), Duration::from_secs(60), "approval").is_err(), "{tamper}");
        assert_eq!(snapshot(&q.path()), before, "{tamper}: the settles changed nothing");
        q.complete(&settled.token()).unwrap();
        let before = snapshot(&q.path());
        q.advance(LEASE);
        assert!(q.reap().is_err(), "{tamper}");
        assert_eq!(snapshot(&q.path()), before, "{tamper}: the reap changed nothing");
    }
}

#[test]
fn acknowledge_all_counts_and_acknowledges_in_one_transaction() {
    let q = temp_queue();
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(q.add(&format!("job {n}")));
        let c = q.take("w");
        q.exhaust(&c.token(), "gave up").unwrap();
    }
    let before = snapshot(&q.path());
    assert!(matches!(q.acknowledge_all("q", Some(2)), Err(Error::CountMismatch { expected: 2, found: 3, .. })));
    assert_eq!(snapshot(&q.path()), before);
    assert_eq!(q.exhaustions(None, 10).unwrap().items.len(), 3, "nothing was acknowledged");
    assert_eq!(q.acknowledge_all("q", Some(3)).unwrap(), ids);
    assert!(q.exhaustions(None, 10).unwrap().items.is_empty());
    assert_eq!(q.acknowledge_all("q", None).unwrap(), Vec::new(), "a second pass finds nothing");
    // One job by id: what the statement changed, checked in its own transaction.
    assert!(!q.acknowledge_job(ids[0], None).unwrap(), "already acknowledged");
    assert!(matches!(q.acknowledge_job(ids[0], Some(1)), Err(Error::CountMismatch { found: 0, .. })));
}

#[test]
fn cancel_reports_the_state_its_own_statement_cancelled_from() {
    let q = temp_queue();
    let pending = q.add("pending");
    let running = q.add("running");
    assert_eq!(q.take("w").id(), pending);
    assert_eq!(q.cancel(pending).unwrap(), JobState::Running);
    assert_eq!(q.cancel(running).unwrap(), JobState::Pending);
    assert!(matches!(q.cancel(running), Err(Error::InvalidState { state: JobState::Cancelled, .. })));
}

// ------------------------------------------------------------------------------- nested calls

/// Runs `f` on another thread and fails the test (instead of hanging) if it never returns.
fn within_guard<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(HANG_GUARD).expect("the call hung")
}

#[test]
fn a_nested_call_on_an_in_memory_queue_is_an_error_never_a_hang() {
    let (reads, writes, lookup) = within_guard(|| {
        let q = Queue::open_in_memory().unwrap();
        let reads = q.with_connection(|_| q.stats().map(drop));
        let writes = q.with_connection(|_| q.enqueue(NewJob::new("q", b"x".to_vec())).map(drop));
        let lookup = q.with_connection(|_| q.job(fenceq::JobId(1)).map(drop));
        // The queue is still usable afterwards.
        q.enqueue(NewJob::new("q", b"y".to_vec())).unwrap();
        assert_eq!(q.stats().unwrap().queues[0].pending, 1);
        (reads, writes, lookup)
    });
    assert!(matches!(reads, Err(Error::NestedWrite)), "{reads:?}");
    assert!(matches!(writes, Err(Error::NestedWrite)), "{writes:?}");
    assert!(matches!(lookup, Err(Error::NestedWrite)), "{lookup:?}");
}

/// Runs `call` on a helper thread from inside `hold`, which holds the queue's writer (or
/// its only connection) while it waits for the helper's answer; returns that answer, or
/// panics if the helper never answered.
fn from_a_helper_inside<T: Send + 'static>(
    hold: impl FnOnce(&mut dyn FnMut() -> fenceq::Result<()>) -> fenceq::Result<()>,
    call: impl FnOnce() -> fenceq::Result<T> + Send + 'static,
) -> fenceq::Result<T> {
    // Far longer than the queues' 50 ms busy timeout: only a guard against the hang.
    const GUARD: Duration = Duration::from_secs(10);
    let (answer_tx, answer_rx) = bounded(1);
    let mut call = Some(call);
    let mut answer = None;
    let held = hold(&mut || {
        let call = call.take().expect("called once");
        let answer_tx = answer_tx.clone();
        std::thread::spawn(move || answer_tx.send(call()).unwrap());
        let got = answer_rx.recv_timeout(GUARD);
        answer = Some(got.expect("the helper's call hung, waiting for what this closure holds"));
        Ok(())
    });
    held.expect("the holding call itself succeeds");
    answer.expect("the helper answered")
}

#[test]
fn a_queue_call_from_a_helper_thread_inside_a_transaction_is_busy_never_a_hang() {
    let busy = Duration::from_millis(50);
    let q = temp_queue_with(|b| b.busy_timeout(busy));
    q.add("held");
    let claimed = q.take("w");
    let holder_says = |err: &Error| {
        let Error::Busy { statement, cause: fenceq::BusyCause::WriterHeld } = err else { panic!("{err:?}") };
        assert!(statement.contains("another thread's write transaction"), "{statement}");
    };
    let queue = q.queue.clone();
    let group = from_a_helper_inside(
        |wait| q.transaction(|_| wait()),
        move || queue.enqueue(NewJob::new("q", b"from the helper".to_vec())),
    );
    holder_says(&group.unwrap_err());
    let queue = q.queue.clone();
    let token = claimed.token();
    let owned =
        from_a_helper_inside(|wait| q.transaction(|_| wait()), move || queue.with_ownership(&token, |_| Ok(())));
    holder_says(&owned.unwrap_err());
    let queue = q.queue.clone();
    let token = claimed.token();
    let inside_owned =
        from_a_helper_inside(|wait| q.with_ownership(&claimed.token(), |_| wait()), move || queue.renew(&token, LEASE));
    holder_says(&inside_owned.unwrap_err());
    // Nothing of the helpers' calls was written, and the queue works on.
    assert_eq!(q.stats().unwrap().queue("q").pending, 0);
    q.complete(&claimed.token()).unwrap();
    q.add("after");
    assert_eq!(q.stats().unwrap().queue("q").pending, 1);

    // An in-memory queue's only connection, held by `with_connection` or a transaction.
    let memory = Queue::builder().busy_timeout(busy).open().unwrap();
    let queue = memory.clone();
    let read = from_a_helper_inside(|wait| memory.with_connection(|_| wait()), move || queue.stats());
    let Error::Busy { statement, cause: fenceq::BusyCause::WriterHeld } = read.unwrap_err() else { panic!() };
    assert!(statement.contains("in-memory queue's only connection"), "{statement}");
    let queue = memory.clone();
    let write = from_a_helper_inside(
        |wait| memory.transaction(|_| wait()),
        move || queue.enqueue(NewJob::new("q", b"x".to_vec())),
    );
    holder_says(&write.unwrap_err());
    memory.enqueue(NewJob::new("q", b"after".to_vec())).unwrap();
    assert_eq!(memory.stats().unwrap().queue("q").pending, 1);
}

#[test]
fn fenceq_s_own_writes_and_checkpoints_wait_for_each_other_without_the_busy_timeout() {
    // A zero busy timeout: a wait for the writer that the bound applied to would fail at
    // once. Group commits and checkpoints are fenceq's own work, which always ends, and are
    // waited for without it.
    let q = temp_queue_with(|b| b.busy_timeout(Duration::ZERO));
    let workers: Vec<_> = (0..4)
        .map(|n| {
            let queue = q.queue.clone();
            std::thread::spawn(move || -> fenceq::Result<()> {
                for i in 0..100 {
                    queue.enqueue(NewJob::new("q", format!("{n}:{i}").into_bytes()))?;
                    if let Some(claimed) = queue.claim("q", &format!("w{n}"), LEASE)? {
                        queue.complete(&claimed.token())?;
                    }
                }
                Ok(())
            })
        })
        .collect();
    let checkpoints = {
        let queue = q.queue.clone();
        std::thread::spawn(move || (0..50).try_for_each(|_| queue.checkpoint_with(HANG_GUARD).map(drop)))
    };
    for worker in workers {
        worker.join().unwrap().unwrap();
    }
    checkpoints.join().unwrap().unwrap();
    let stats = q.stats().unwrap();
    assert_eq!(stats.queue("q").pending + stats.queue("q").completed, 400);
}

// ------------------------------------------------------------------------------- owned writes

#[test]
fn an_owned_write_that_outlasts_the_lease_commits_once_and_its_owner_still_settles() {
    let q = temp_queue();
    create_domain(&q);
    let id = q.add("slow");
    let c = q.claim("q", "w", Duration::from_millis(400)).unwrap().unwrap();
    q.with_ownership(&c.token(), |tx| {
        // The write holds the lock for 700 ms of the queue's clock, past the lease's end.
        q.clock.advance(Duration::from_millis(700));
        tx.execute("INSERT INTO domain (job, note) VALUES (?1, 'reply')", [id.0])?;
        Ok(())
    })
    .unwrap();
    // The commit extended the lease by its length from the commit: 700 + 400 ms.
    let job = q.job(id).unwrap().unwrap();
    assert_eq!(job.lease_until, Some(T0 + 1_100));
    assert!(q.owns(&c.token()).unwrap());
    q.renew(&c.token(), Duration::from_millis(400)).unwrap();
    q.complete(&c.token()).unwrap();
    assert_eq!(q.with_connection(|conn| Ok(domain_rows(conn))).unwrap(), 1);
    // An owned write never shortens a lease: a quick one leaves a longer renewal alone.
    let other = q.add("other");
    let c = q.claim("q", "w", Duration::from_secs(60)).unwrap().unwrap();
    assert_eq!(c.id(), other);
    q.with_ownership(&c.token(), |_| Ok(())).unwrap();
    assert_eq!(q.job(other).unwrap().unwrap().lease_until, Some(T0 + 700 + 60_000));
}

#[test]
fn a_pool_handler_whose_owned_write_outlasts_the_lease_writes_once_and_completes() {
    let q = temp_queue();
    create_domain(&q);
    let id = q.add("slow");
    let (done_tx, done_rx) = bounded(1);
    let handler_clock = q.clock.clone();
    let pool = WorkerPool::builder(q.queue.clone(), "q")
        .workers(1)
        .prefetch(0)
        .lease(Duration::from_millis(400))
        .renew_every(Duration::from_millis(100))
        .handler(move |attempt| {
            let written = attempt.with_ownership(|tx| {
                handler_clock.advance(Duration::from_millis(700));
                tx.execute("INSERT INTO domain (job, note) VALUES (?1, 'reply')", [attempt.token().id.0])?;
                Ok(())
            });
            let outcome = match written {
                Ok(()) if !attempt.owner_lost() => Outcome::Complete,
                Ok(()) => Outcome::retry("owner lost after the write"),
                Err(e) => Outcome::retry(e.to_string()),
            };
            let _ = done_tx.send(());
            outcome
        })
        .start()
        .unwrap();
    done_rx.recv_timeout(HANG_GUARD).expect("the handler ran");
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert_eq!(report.counters.completed, 1, "{:?}", report.counters);
    assert_eq!(report.counters.stale_settles_rejected, 0, "{:?}", report.counters);
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Completed);
    assert_eq!(q.with_connection(|conn| Ok(domain_rows(conn))).unwrap(), 1);
}

// ------------------------------------------------------------------------------- the outbox

#[test]
fn jobs_enqueued_inside_owned_writes_and_transactions_commit_or_roll_back_with_them() {
    let q = temp_queue();
    create_domain(&q);
    // The outbox on the queue's own writer.
    q.transaction(|tx| {
        tx.execute("INSERT INTO domain (job, note) VALUES (0, 'order')", [])?;
        q.enqueue_tx(tx, NewJob::new("emails", b"confirm".to_vec()).key("order:1"))
    })
    .unwrap();
    let failed = q.transaction(|tx| {
        tx.execute("INSERT INTO domain (job, note) VALUES (0, 'order 2')", [])?;
        q.enqueue_tx(tx, NewJob::new("emails", b"confirm 2".to_vec()).key("order:2"))?;
        Err::<(), _>(Error::domain("payment declined"))
    });
    assert!(matches!(failed, Err(Error::Domain(_))));
    assert!(q.find_by_key("emails", "order:1").unwrap().is_some());
    assert!(q.find_by_key("emails", "order:2").unwrap().is_none(), "rolled back with the domain row");
    // Follow-up jobs from inside a handler's owned write and completion.
    let id = q.add("update");
    let c = q.take("w");
    q.with_ownership(&c.token(), |tx| {
        tx.execute("INSERT INTO domain (job, note) VALUES (?1, 'reply')", [id.0])?;
        q.enqueue_tx(tx, NewJob::new("reminders", b"in an hour".to_vec()).key("reminder:1"))
    })
    .unwrap();
    q.complete_with(&c.token(), |tx| q.enqueue_tx(tx, NewJob::new("reminders", b"follow-up".to_vec()).key("f:1")))
        .unwrap();
    let rolled_back = q.add("update 2");
    let c = q.take("w");
    assert_eq!(c.id(), rolled_back);
    let failed = q.complete_with(&c.token(), |tx| {
        q.enqueue_tx(tx, NewJob::new("reminders", b"never".to_vec()).key("never"))?;
        Err::<(), _>(Error::domain("reply failed"))
    });
    assert!(matches!(failed, Err(Error::Domain(_))));
    assert!(q.find_by_key("reminders", "reminder:1").unwrap().is_some());
    assert!(q.find_by_key("reminders", "f:1").unwrap().is_some());
    assert!(q.find_by_key("reminders", "never").unwrap().is_none());
    assert_eq!(q.job(rolled_back).unwrap().unwrap().state, JobState::Running, "not completed");
    assert_eq!(q.with_connection(|conn| Ok(domain_rows(conn))).unwrap(), 2);
}

#[test]
fn a_job_enqueued_in_a_transaction_wakes_the_pool_after_the_commit() {
    let q = temp_queue();
    let (ran_tx, ran_rx) = bounded(1);
    // An hour between polls: only the wake-up can start the job in time.
    let pool = WorkerPool::builder(q.queue.clone(), "q")
        .workers(1)
        .poll_interval(Duration::from_secs(3600))
        .handler(move |_| {
            let _ = ran_tx.send(());
            Outcome::Complete
        })
        .start()
        .unwrap();
    q.transaction(|tx| q.enqueue_tx(tx, NewJob::new("q", b"woken".to_vec()))).unwrap();
    ran_rx.recv_timeout(HANG_GUARD).expect("the pool was woken by the commit");
    pool.shutdown(HANG_GUARD).unwrap();
}

#[test]
fn the_outbox_transaction_makes_other_threads_wait_their_turn_in_process() {
    // The claim waits for the queue's writer in the process (not in SQLite's busy handler),
    // within the busy timeout, and gets the job once the transaction has committed.
    let q = temp_queue_with(|b| b.busy_timeout(HANG_GUARD));
    create_domain(&q);
    q.add("to claim");
    let (inside_tx, inside_rx) = bounded(1);
    let (claiming_tx, claiming_rx) = bounded(1);
    let claimer = {
        let queue = q.queue.clone();
        std::thread::spawn(move || {
            inside_rx.recv_timeout(HANG_GUARD).expect("the transaction began");
            claiming_tx.send(()).unwrap();
            queue.claim("q", "other-thread", LEASE)
        })
    };
    q.transaction(|tx| {
        inside_tx.send(()).unwrap();
        claiming_rx.recv_timeout(HANG_GUARD).expect("the other thread is claiming");
        // Hold the writer while the other thread's claim waits for it.
        for n in 0..2_000 {
            tx.execute("INSERT INTO domain (job, note) VALUES (?1, 'outbox')", [n])?;
        }
        q.enqueue_tx(tx, NewJob::new("q", b"from the outbox".to_vec()))
    })
    .unwrap();
    let claimed = claimer.join().unwrap();
    assert!(matches!(claimed, Ok(Some(_))), "{claimed:?}");
}

// ------------------------------------------------------------------------------- lease arithmetic

#[test]
fn leases_saturate_at_the_end_of_the_clock_instead_of_overflowing_into_reals() {
    let clock = ManualClock::new(i64::MAX - 500);
    let q = Queue::builder().clock(clock.clone()).open().unwrap();
    let id = q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap().id();
    let c = q.claim("q", "w", LEASE).unwrap().unwrap();
    assert_eq!(c.lease_until, i64::MAX);
    assert_eq!(q.renew(&c.token(), LEASE).unwrap(), i64::MAX);
    let job = q.job(id).unwrap().expect("the row reads back");
    assert_eq!(job.lease_until, Some(i64::MAX));
    q.with_ownership(&c.token(), |_| Ok(())).unwrap();
    q.complete(&c.token()).unwrap();
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Completed);
}

// ------------------------------------------------------------------------------- lost transactions

#[test]
fn a_closure_that_carries_on_after_sqlite_rolled_back_fails_cleanly_and_completes_nothing() {
    let q = temp_queue();
    create_domain(&q);
    q.transaction(|tx| Ok(tx.execute_batch("CREATE TABLE done (id INTEGER PRIMARY KEY)")?)).unwrap();
    let id = q.add("x");
    let c = q.take("w");
    let result = q.complete_with(&c.token(), |tx| {
        tx.execute("INSERT INTO done (id) VALUES (1)", [])?;
        // An "already done" check that rolls the whole transaction back on a conflict; the
        // closure swallows the error and returns Ok.
        let _ = tx.execute("INSERT OR ROLLBACK INTO done (id) VALUES (1)", []);
        Ok(())
    });
    assert!(matches!(result, Err(Error::TransactionLost)), "{result:?}");
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Running, "the completion was rolled back");
    assert!(q.owns(&c.token()).unwrap());
    let rows: i64 =
        q.with_connection(|conn| Ok(conn.query_row("SELECT count(*) FROM done", [], |r| r.get(0))?)).unwrap();
    assert_eq!(rows, 0);
    let result = q.with_ownership(&c.token(), |tx| {
        tx.execute("INSERT INTO done (id) VALUES (2)", [])?;
        let _ = tx.execute("INSERT OR ROLLBACK INTO done (id) VALUES (2)", []);
        Ok(())
    });
    assert!(matches!(result, Err(Error::TransactionLost)), "{result:?}");
    let result = q.transaction(|tx| {
        let _ = tx.execute("INSERT INTO done (id) VALUES (3)", []);
        let _ = tx.execute("INSERT OR ROLLBACK INTO done (id) VALUES (3)", []);
        Ok(())
    });
    assert!(matches!(result, Err(Error::TransactionLost)), "{result:?}");
    // The queue's writer is usable afterwards.
    q.complete(&c.token()).unwrap();
}

// ------------------------------------------------------------------------------- waits

#[test]
fn resume_past_the_deadline_is_refused_whether_or_not_the_reaper_ran() {
    let q = temp_queue();
    let early = q.add("early");
    let c = q.take("w");
    q.park(&c.token(), Duration::from_secs(60), "approval").unwrap();
    q.advance(Duration::from_millis(59_999));
    q.resume(&c.token()).unwrap();
    assert_eq!(q.job(early).unwrap().unwrap().state, JobState::Pending);

    let late = q.job(early).unwrap().unwrap().id;
    let c = q.take("w");
    assert_eq!(c.id(), late);
    q.park(&c.token(), Duration::from_secs(60), "approval").unwrap();
    q.advance(Duration::from_secs(60));
    let before = snapshot(&q.path());
    let refused = q.resume(&c.token());
    assert!(matches!(refused, Err(Error::WaitExpired { deadline, .. }) if deadline == q.now_ms()), "{refused:?}");
    assert_eq!(snapshot(&q.path()), before, "a refused resume changes nothing");
    assert_eq!(q.reap().unwrap().waits_expired, 1);
    assert!(matches!(q.resume(&c.token()), Err(Error::InvalidState { state: JobState::Exhausted, .. })));
}

// ------------------------------------------------------------------------------- pool validation

#[test]
fn a_pool_on_the_longest_queue_name_claims_under_a_default_worker_id_that_fits() {
    let name = "q".repeat(fenceq::MAX_NAME_LEN);
    let q = temp_queue();
    q.enqueue(NewJob::new(name.clone(), b"x".to_vec())).unwrap();
    let (ran_tx, ran_rx) = bounded(1);
    let pool = WorkerPool::builder(q.queue.clone(), name.clone())
        .workers(1)
        .handler(move |a| {
            let _ = ran_tx.send(a.token().id);
            Outcome::Complete
        })
        .start()
        .unwrap();
    let id = ran_rx.recv_timeout(HANG_GUARD).expect("the pool claimed");
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert_eq!((report.counters.completed, report.counters.errors), (1, 0), "{:?}", report.counters);
    let worker = q.job(id).unwrap().unwrap().worker.unwrap();
    assert!(worker.len() <= fenceq::MAX_NAME_LEN && worker.ends_with(&format!("-{}", std::process::id())), "{worker}");
}

#[test]
fn what_would_fail_every_claim_fails_start() {
    let q = Queue::open_in_memory().unwrap();
    let start = |b: fenceq::WorkerPoolBuilder| b.handler(|_| Outcome::Complete).start().map(drop);
    let cases = [
        ("a 500 µs lease", start(WorkerPool::builder(q.clone(), "q").lease(Duration::from_micros(500)))),
        ("a lease over a day", start(WorkerPool::builder(q.clone(), "q").lease(Duration::from_secs(86_401)))),
        ("a queue name with a NUL", start(WorkerPool::builder(q.clone(), "q\0x"))),
        ("an empty queue name", start(WorkerPool::builder(q.clone(), ""))),
        ("a worker id over 128 bytes", start(WorkerPool::builder(q.clone(), "q").worker_id("w".repeat(129)))),
        ("an empty worker id", start(WorkerPool::builder(q.clone(), "q").worker_id(""))),
        ("a worker id with a NUL", start(WorkerPool::builder(q.clone(), "q").worker_id("w\0"))),
    ];
    for (what, result) in cases {
        assert!(matches!(result, Err(Error::InvalidInput { .. })), "{what}: {result:?}");
    }
}

#[test]
fn shutdown_and_poll_intervals_take_any_duration_without_panicking() {
    let q = Queue::open_in_memory().unwrap();
    let pool = WorkerPool::builder(q.clone(), "q")
        .poll_interval(Duration::MAX)
        .handler(|_| Outcome::Complete)
        .start()
        .unwrap();
    let report = within_guard(move || pool.shutdown(Duration::MAX)).unwrap();
    assert!(report.still_running.is_empty());
}

/// Counts `WARN` events (the library logs through `tracing`; no subscriber crate needed).
struct WarnCounter(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl tracing::Subscriber for WarnCounter {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if *event.metadata().level() == tracing::Level::WARN {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn an_owned_write_holding_the_writer_past_a_third_of_its_lease_logs_a_warning() {
    let q = temp_queue();
    let warnings = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let hold = |lease: Duration, held: Duration| {
        q.add("x");
        let c = q.claim("q", "w", lease).unwrap().unwrap();
        tracing::subscriber::with_default(WarnCounter(warnings.clone()), || {
            q.with_ownership(&c.token(), |_| {
                // Holds the writer for at least `held` of real time (a bounded spin, so the
                // condition is certain rather than a guess about scheduling).
                let start = std::time::Instant::now();
                while start.elapsed() < held {
                    std::hint::spin_loop();
                }
                Ok(())
            })
        })
        .unwrap();
        q.complete(&c.token()).unwrap();
    };
    hold(Duration::from_secs(3600), Duration::ZERO);
    assert_eq!(warnings.load(std::sync::atomic::Ordering::SeqCst), 0, "a short write is quiet");
    hold(Duration::from_millis(30), Duration::from_millis(15));
    assert_eq!(warnings.load(std::sync::atomic::Ordering::SeqCst), 1, "15 ms of a 30 ms lease is over a third");
}

#[test]
fn limits_are_checked_where_the_docs_say() {
    let q = temp_queue();
    q.add("x");
    let c = q.take("w");
    let before = snapshot(&q.path());
    // A park shorter than 1 ms would be expired the moment it began.
    assert!(matches!(q.park(&c.token(), Duration::from_micros(500), "r"), Err(Error::InvalidInput { .. })));
    assert!(matches!(q.park(&c.token(), Duration::from_secs(366 * 24 * 3600), "r"), Err(Error::InvalidInput { .. })));
    assert_eq!(snapshot(&q.path()), before);
    let bad_batch = Retention { batch_size: 0, ..Retention::default() };
    assert!(matches!(q.prune_preview(&bad_batch), Err(Error::InvalidInput { .. })));
    let filter = fenceq::ListFilter { queue: Some(String::new()), ..Default::default() };
    assert!(matches!(q.list(&filter), Err(Error::InvalidInput { .. })));
    assert!(matches!(q.find_by_key("q", ""), Err(Error::InvalidInput { .. })));
}

/// A batch is inserted several rows per statement only where the ids can be proven (every row
/// new, ids exactly after the sequence): an application trigger that copies every insert or
/// drops some of them sends the batch row by row, and every answer still names the job's own
/// row, or fails as one call per job would.
#[test]
fn a_batch_under_a_hostile_insert_trigger_answers_with_the_right_rows() {
    let q = temp_queue();
    let conn = Connection::open(q.path()).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER hostile_copy AFTER INSERT ON fenceq_jobs WHEN NEW.queue = 'q'
         BEGIN INSERT INTO fenceq_jobs (queue, payload, run_at, max_attempts, created_at)
               VALUES ('copies', NEW.payload, NEW.run_at, NEW.max_attempts, NEW.created_at); END;",
    )
    .unwrap();
    let results = q.enqueue_batch((0..100).map(|i| NewJob::new("q", format!("p{i}").into_bytes()))).unwrap();
    for (i, result) in results.iter().enumerate() {
        let job = q.job(result.id()).unwrap().unwrap();
        assert_eq!((job.queue.as_str(), job.payload.clone()), ("q", format!("p{i}").into_bytes()), "job {i}");
    }
    conn.execute_batch(
        "DROP TRIGGER hostile_copy;
         CREATE TRIGGER hostile_ignore BEFORE INSERT ON fenceq_jobs WHEN NEW.payload = CAST('p50' AS BLOB)
         BEGIN SELECT RAISE(IGNORE); END;",
    )
    .unwrap();
    let before = q.stats().unwrap();
    let err = q.enqueue_batch((0..100).map(|i| NewJob::new("q", format!("p{i}").into_bytes()))).unwrap_err();
    assert!(err.to_string().contains("the insert was ignored"), "{err}");
    assert_eq!(q.stats().unwrap(), before, "the batch is all or nothing");
}
