//! PostgreSQL's errors as fenceq's, produced on a real server: a deadlock in the queue's own
//! transaction is run again and succeeds, one in a caller's closure is `Busy` and the
//! closure runs once; a serialization failure is `Busy` and a caller's closure runs once;
//! the queue's transactions are `READ COMMITTED` whatever the database's default; a
//! read-only session is `ReadOnly`; a statement past its timeout is `Busy`; a connection
//! ended mid-transaction is `ConnectionLost` and the next call works; sessions ask for
//! untranslated messages. (Disk full cannot be produced here: its mapping is unit-tested in
//! `src/store/postgres/error.rs`.)
//!
//! Ordering between the queue's connection and the raw ones is by channels and by waiting
//! (bounded) for the server to report the queue's backend waiting on a lock, never by
//! sleeping. Each test runs in a schema of its own on the server named by
//! `FENCEQ_POSTGRES_URL`; without one the tests say they skipped, except under `CI=true`.

use fenceq::diesel::connection::SimpleConnection;
use fenceq::diesel::sql_types::{BigInt, Text};
use fenceq::diesel::{sql_query, PgConnection, QueryableByName, RunQueryDsl};
use fenceq::{ClaimToken, Error, JobId, JobState, ManualClock, NewJob, PostgresStore, Queue};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::support;
use crate::support::Proxy;

const LEASE: Duration = Duration::from_secs(600);

/// One test's schema (dropped at the end); the queue's connections carry a name of their own
/// (`application_name`), so the test can find their backends.
struct Scratch {
    base: support::Scratch,
    name: String,
}

impl std::ops::Deref for Scratch {
    type Target = support::Scratch;

    fn deref(&self) -> &support::Scratch {
        &self.base
    }
}

impl Scratch {
    fn new() -> Option<Scratch> {
        let base = support::Scratch::new()?;
        let name = base.schema.replace("fenceq_test_", "fenceq_app_");
        Some(Scratch { base, name })
    }

    /// The URL with `key=value` added (`value` percent-encoded for a URI).
    fn url_with(&self, key: &str, value: &str) -> String {
        let separator = if self.url.contains('?') { '&' } else { '?' };
        let value = value.replace('%', "%25").replace(' ', "%20").replace('=', "%3D");
        format!("{}{separator}{key}={value}", self.url)
    }

    fn open_at(&self, url: String) -> fenceq::Result<Queue<PostgresStore>> {
        Queue::builder().url(url).schema(self.schema.clone()).clock(ManualClock::new(1_700_000_000_000)).open_postgres()
    }

    fn open(&self) -> Queue<PostgresStore> {
        self.open_at(self.url_with("application_name", &self.name)).expect("open the test schema")
    }

    /// Waits (bounded) until a backend of the queue waits for a row lock.
    fn until_the_queue_waits_for_a_lock(&self, raw: &mut PgConnection) {
        let give_up = Instant::now() + Duration::from_secs(30);
        loop {
            let waiting = sql_query(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
            )
            .bind::<Text, _>(&self.name)
            .get_result::<N>(raw)
            .unwrap()
            .n;
            if waiting > 0 {
                return;
            }
            assert!(Instant::now() < give_up, "the queue's transaction never waited for the lock");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[derive(QueryableByName)]
struct N {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct Shown {
    #[diesel(sql_type = Text)]
    value: String,
}

fn lock_row(raw: &mut PgConnection, id: JobId) -> fenceq::diesel::QueryResult<usize> {
    sql_query(format!("SELECT id FROM fenceq_jobs WHERE id = {} FOR UPDATE", id.0)).execute(raw)
}

/// Two claimed jobs, in id order.
fn two_claimed(q: &Queue<PostgresStore>) -> (ClaimToken, ClaimToken) {
    q.enqueue(NewJob::new("q", b"a".to_vec())).unwrap();
    q.enqueue(NewJob::new("q", b"b".to_vec())).unwrap();
    let claimed = q.claim_batch("q", "w", LEASE, 2).unwrap();
    let mut tokens: Vec<ClaimToken> = claimed.iter().map(|c| c.token()).collect();
    tokens.sort_by_key(|t| t.id);
    (tokens[0], tokens[1])
}

/// A raw transaction that holds the row of `b`, then asks for the row of `a`, which the
/// queue's transaction holds while it waits for `b`: a deadlock. The raw side never detects
/// it (its `deadlock_timeout` is long, and it waits second), so the server aborts the
/// queue's transaction. Returns the raw side's result of locking `a`, and commits.
fn deadlock_against(
    s: &Scratch,
    a: JobId,
    b: JobId,
    start_queue_side: impl FnOnce(),
) -> fenceq::diesel::QueryResult<usize> {
    let mut raw = s.raw();
    // Superusers only: elsewhere the default (1 s) still fires after the queue's own.
    let _ = raw.batch_execute("SET deadlock_timeout = '60s'");
    raw.batch_execute("BEGIN").unwrap();
    lock_row(&mut raw, b).unwrap();
    start_queue_side();
    let mut watcher = s.raw();
    s.until_the_queue_waits_for_a_lock(&mut watcher);
    let locked = lock_row(&mut raw, a);
    raw.batch_execute(if locked.is_ok() { "COMMIT" } else { "ROLLBACK" }).unwrap();
    locked
}

/// The queue's own transaction (here `complete_all`, which settles its tokens in order) is
/// run again after the server aborted it to break a deadlock, and succeeds.
///
/// Why this proves the re-run: the raw side was granted the row of `a` while the queue's
/// transaction held it and waited for `b`, which only a rollback of that transaction allows
/// (it could not commit while waiting); yet `complete_all` returned both completions.
#[test]
fn a_deadlock_in_the_queues_own_transaction_is_run_again_and_succeeds() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    let (a, b) = two_claimed(&q);
    let (result_tx, result_rx) = mpsc::channel();
    let worker = q.clone();
    let raw_side = deadlock_against(&s, a.id, b.id, || {
        std::thread::spawn(move || result_tx.send(worker.complete_all(&[a, b])).unwrap());
    });
    assert!(raw_side.is_ok(), "the raw side was not the deadlock's victim: {raw_side:?}");
    let completed = result_rx.recv_timeout(Duration::from_secs(60)).expect("complete_all returned");
    let completed = completed.expect("the deadlock was retried, not returned");
    assert!(completed.iter().all(Result::is_ok), "{completed:?}");
    for token in [a, b] {
        assert_eq!(q.job(token.id).unwrap().unwrap().state, JobState::Completed);
    }
}

/// A deadlock inside a caller's closure is `Busy` (naming the deadlock), and the closure
/// ran exactly once: fenceq never re-runs a caller's closure.
#[test]
fn a_deadlock_in_a_callers_closure_is_busy_and_the_closure_runs_once() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    let (a, b) = two_claimed(&q);
    let runs = Arc::new(AtomicU32::new(0));
    let (result_tx, result_rx) = mpsc::channel();
    let (worker, counted) = (q.clone(), runs.clone());
    let raw_side = deadlock_against(&s, a.id, b.id, || {
        std::thread::spawn(move || {
            let result = worker.transaction(|tx| {
                counted.fetch_add(1, Ordering::SeqCst);
                for id in [a.id, b.id] {
                    sql_query(format!("UPDATE fenceq_jobs SET priority = 1 WHERE id = {}", id.0))
                        .execute(&mut *tx.conn())?;
                }
                Ok(())
            });
            result_tx.send(result).unwrap();
        });
    });
    assert!(raw_side.is_ok(), "the raw side was not the deadlock's victim: {raw_side:?}");
    let err = result_rx.recv_timeout(Duration::from_secs(60)).expect("transaction returned").unwrap_err();
    assert!(matches!(err, Error::Busy { cause: fenceq::BusyCause::Deadlock, .. }), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the closure ran once");
    assert_eq!(q.job(a.id).unwrap().unwrap().priority, 0, "nothing of it committed");
}

/// A caller's serializable transaction that loses a write conflict is `Busy` (naming the
/// serialization failure), its closure ran once, and the concurrent write stands.
#[test]
fn a_serialization_failure_in_a_callers_serializable_transaction_is_busy_and_not_run_again() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    let id = q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap().id();
    let mut raw = s.raw();
    let mut runs = 0;
    let err = q
        .transaction(|tx| {
            runs += 1;
            let mut conn = tx.conn();
            conn.batch_execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")?;
            sql_query(format!("SELECT id AS n FROM fenceq_jobs WHERE id = {}", id.0)).get_result::<N>(&mut *conn)?;
            // Another transaction changes the row after this one's snapshot, and commits.
            sql_query(format!("UPDATE fenceq_jobs SET priority = 5 WHERE id = {}", id.0)).execute(&mut raw).unwrap();
            sql_query(format!("UPDATE fenceq_jobs SET priority = 7 WHERE id = {}", id.0)).execute(&mut *conn)?;
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(err, Error::Busy { cause: fenceq::BusyCause::SerializationFailure, .. }), "{err:?}");
    assert_eq!(runs, 1, "the closure ran once");
    assert_eq!(q.job(id).unwrap().unwrap().priority, 5, "the concurrent write stands");
}

/// The fenced statements rely on `READ COMMITTED`'s re-check of a changed row; a database
/// whose default is `SERIALIZABLE` still gets `READ COMMITTED` transactions from the queue.
#[test]
fn the_queues_transactions_are_read_committed_whatever_the_sessions_default() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open_at(s.url_with("options", "-c default_transaction_isolation=serializable")).unwrap();
    let level = q
        .transaction(|tx| {
            Ok(sql_query("SELECT current_setting('transaction_isolation') AS value")
                .get_result::<Shown>(&mut *tx.conn())?)
        })
        .unwrap();
    assert_eq!(level.value, "read committed");
    q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
    assert!(q.claim("q", "w", LEASE).unwrap().is_some());
}

/// The queue's sessions never compile a statement just in time, whatever the server's
/// defaults: here the connection asks for JIT on every statement (`jit_above_cost = 0`).
/// A compile costs tenths of a second, paid on every call of a statement whose estimate
/// crosses the threshold.
#[test]
fn sessions_never_compile_a_statement_just_in_time() {
    let Some(s) = Scratch::new() else { return };
    let queue = s.open_at(s.url_with("options", "-c jit=on -c jit_above_cost=0")).unwrap();
    queue.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
    let jit = queue
        .with_connection(|tx| {
            Ok(sql_query("SELECT current_setting('jit') AS value").get_result::<Shown>(&mut *tx.conn())?)
        })
        .unwrap();
    assert_eq!(jit.value, "off");
}

/// A session the server keeps read-only (`default_transaction_read_only`, as on a hot
/// standby) refuses every write: on a queue opened to write that is `Unavailable` (no server
/// that accepts writes: retryable), on one opened read-only `ReadOnly`; reads still work.
#[test]
fn a_read_only_session_refuses_writes_with_read_only() {
    let Some(s) = Scratch::new() else { return };
    let writable = s.open();
    let id = writable.enqueue(NewJob::new("q", b"x".to_vec())).unwrap().id();
    // Without upgrading: a read-only session cannot even take the migrations' lock.
    let q = Queue::builder()
        .url(s.url_with("options", "-c default_transaction_read_only=on"))
        .schema(s.schema.clone())
        .upgrade(false)
        .open_postgres()
        .unwrap();
    for err in [
        q.enqueue(NewJob::new("q", b"y".to_vec())).map(drop).unwrap_err(),
        q.claim("q", "w", LEASE).map(drop).unwrap_err(),
        q.cancel(id).map(drop).unwrap_err(),
    ] {
        assert!(matches!(err, Error::Unavailable { .. }) && err.is_retryable(), "{err:?}");
    }
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Pending, "reads work");
    let q = Queue::builder()
        .url(s.url_with("options", "-c default_transaction_read_only=on"))
        .schema(s.schema.clone())
        .read_only(true)
        .open_postgres()
        .unwrap();
    let err = q.cancel(id).map(drop).unwrap_err();
    assert!(matches!(err, Error::ReadOnly { .. }), "opened read-only: {err:?}");
}

/// A statement that runs past its timeout is `Busy`, not a conflict, and is not run again.
#[test]
fn a_statement_past_its_timeout_is_busy() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    let started = Instant::now();
    let mut runs = 0;
    let err = q
        .transaction(|tx| {
            runs += 1;
            let mut conn = tx.conn();
            conn.batch_execute("SET LOCAL statement_timeout = '50ms'")?;
            conn.batch_execute("SELECT pg_sleep(20)")?;
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(err, Error::Busy { cause: fenceq::BusyCause::Locked, .. }), "{err:?}");
    assert_eq!(runs, 1);
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    q.enqueue(NewJob::new("q", b"x".to_vec())).expect("the connection is usable afterwards");
}

/// A connection the server ends in the middle of a transaction is `ConnectionLost`, and the
/// pool replaces it: the next call works.
#[test]
fn a_connection_ended_mid_transaction_is_connection_lost_and_the_next_call_works() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    let mut raw = s.raw();
    let err = q
        .transaction(|tx| {
            let mut conn = tx.conn();
            let pid = sql_query("SELECT pg_backend_pid()::bigint AS n").get_result::<N>(&mut *conn)?.n;
            let ended = sql_query(format!("SELECT count(*) FILTER (WHERE pg_terminate_backend({pid}, 10000)) AS n"))
                .get_result::<N>(&mut raw)
                .unwrap();
            assert_eq!(ended.n, 1, "the queue's backend was ended");
            sql_query("SELECT 1::bigint AS n").get_result::<N>(&mut *conn)?;
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(err, Error::ConnectionLost { .. }), "{err:?}");
    assert!(err.is_retryable());
    let id = q.enqueue(NewJob::new("q", b"x".to_vec())).expect("the pool reconnected").id();
    assert!(q.job(id).unwrap().is_some());
}

/// Sessions ask for untranslated (`C`) messages where the role may, so that the messages
/// fenceq must read (diesel gives no SQLSTATE for them) are the ones it knows, whatever the
/// server's or the connection's language.
#[test]
fn sessions_ask_for_untranslated_messages() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open_at(s.url_with("options", "-c lc_messages=POSIX")).unwrap();
    let shown = q
        .with_connection(|tx| {
            Ok(sql_query("SELECT current_setting('lc_messages') AS value").get_result::<Shown>(&mut *tx.conn())?)
        })
        .unwrap();
    assert_eq!(shown.value, "C");
}

/// Ends every session of the queue (its `application_name`), waiting until each is gone.
fn end_the_queues_sessions(s: &Scratch, raw: &mut PgConnection) -> i64 {
    sql_query(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) AS n FROM pg_stat_activity \
         WHERE application_name = $1 AND pid <> pg_backend_pid()",
    )
    .bind::<Text, _>(&s.name)
    .get_result::<N>(raw)
    .unwrap()
    .n
}

fn jobs_of(raw: &mut PgConnection, queue: &str) -> i64 {
    sql_query("SELECT count(*) AS n FROM fenceq_jobs WHERE queue = $1")
        .bind::<Text, _>(queue)
        .get_result::<N>(raw)
        .unwrap()
        .n
}

fn says_nothing_was_written(e: &Error) -> bool {
    matches!(e, Error::ConnectionLost { .. }) && e.to_string().contains("nothing was written") && e.is_retryable()
}

fn says_it_may_have_committed(e: &Error) -> bool {
    matches!(e, Error::ConnectionLost { .. }) && e.to_string().contains("may have committed") && !e.is_retryable()
}

/// A transaction whose session the server ended while its closure ran, and that then goes
/// on to commit: nothing was committed, and the error says so (a retry is safe).
#[test]
fn a_commit_on_a_session_the_server_ended_says_nothing_was_written() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    let mut raw = s.raw();
    let err = q
        .transaction(|tx| {
            q.enqueue_tx(tx, NewJob::new("lost", b"keyless".to_vec()))?;
            let pid = sql_query("SELECT pg_backend_pid()::bigint AS n").get_result::<N>(&mut *tx.conn())?.n;
            let ended = sql_query(format!("SELECT count(*) FILTER (WHERE pg_terminate_backend({pid}, 10000)) AS n"))
                .get_result::<N>(&mut raw)
                .unwrap();
            assert_eq!(ended.n, 1, "the queue's backend was ended");
            Ok(())
        })
        .unwrap_err();
    assert!(says_nothing_was_written(&err), "{err:?}: {err}");
    assert_eq!(jobs_of(&mut raw, "lost"), 0);
    q.enqueue(NewJob::new("q", b"x".to_vec())).expect("the pool reconnected");
}

/// The work of a call blocks as it commits (a deferred trigger waits for a lock the test
/// holds), and the server ends its session then: the `COMMIT` (or, in autocommit, the
/// insert) was sent, so the call cannot know whether it committed, and says so: a keyless
/// enqueue must not be retried blindly. Both a transaction (`enqueue_batch`) and a single
/// enqueue in autocommit.
#[test]
fn a_connection_lost_while_committing_says_the_work_may_have_committed() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    let mut raw = s.raw();
    raw.batch_execute(
        "CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS \
           $$ BEGIN PERFORM pg_advisory_xact_lock(4711); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON fenceq_jobs \
           DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hold_commit();",
    )
    .unwrap();
    type Call = fn(&Queue<PostgresStore>) -> fenceq::Result<()>;
    let calls: [(&str, Call); 2] = [
        ("enqueue_batch", |q| {
            q.enqueue_batch((0..3).map(|i| NewJob::new("held", vec![i])).collect::<Vec<_>>()).map(drop)
        }),
        ("enqueue", |q| q.enqueue(NewJob::new("held", b"one".to_vec())).map(drop)),
    ];
    for (name, call) in calls {
        let mut holder = s.raw();
        holder.batch_execute("BEGIN; SELECT pg_advisory_xact_lock(4711)").unwrap();
        let caller = q.clone();
        let result = std::thread::spawn(move || call(&caller));
        let mut watcher = s.raw();
        s.until_the_queue_waits_for_a_lock(&mut watcher);
        assert!(end_the_queues_sessions(&s, &mut raw) >= 1);
        holder.batch_execute("ROLLBACK").unwrap();
        let err = result.join().unwrap().unwrap_err();
        assert!(says_it_may_have_committed(&err), "{name}: {err:?}: {err}");
        assert_eq!(jobs_of(&mut raw, "held"), 0, "{name}: (it did not, here: the server ended it first)");
    }
}

/// Sessions ended again and again while batches of keyless jobs are enqueued: every `Ok`
/// committed its whole batch, every "nothing was written" wrote nothing, and a "may have
/// committed" wrote all or nothing. Bounded: 120 batches.
#[test]
fn batches_under_ended_sessions_are_committed_or_say_what_they_may_have_written() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = {
        let (stop, url, schema, name) = (stop.clone(), s.url.clone(), s.schema.clone(), s.name.clone());
        std::thread::spawn(move || {
            let mut raw = support::raw_in(&url, &schema);
            let mut ended = 0;
            while !stop.load(Ordering::SeqCst) {
                ended += sql_query(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n FROM pg_stat_activity \
                     WHERE application_name = $1",
                )
                .bind::<Text, _>(&name)
                .get_result::<N>(&mut raw)
                .unwrap()
                .n;
                // Load, not ordering: how often sessions end.
                std::thread::sleep(Duration::from_millis(15));
            }
            ended
        })
    };
    let (mut ok, mut nothing, mut unknown, mut other) = (0, 0, 0, Vec::new());
    let mut outcomes = Vec::new();
    for i in 0..120 {
        let queue = format!("b{i}");
        let jobs: Vec<NewJob> = (0..20u8).map(|j| NewJob::new(&queue, vec![j])).collect();
        outcomes.push((queue, q.enqueue_batch(jobs).map(drop)));
    }
    stop.store(true, Ordering::SeqCst);
    let ended = killer.join().unwrap();
    let mut raw = s.raw();
    for (queue, outcome) in outcomes {
        let rows = jobs_of(&mut raw, &queue);
        match outcome {
            Ok(()) => {
                ok += 1;
                assert_eq!(rows, 20, "{queue}: Ok but {rows} of 20 rows");
            }
            Err(e) if says_nothing_was_written(&e) => {
                nothing += 1;
                assert_eq!(rows, 0, "{queue}: {e} but {rows} rows");
            }
            Err(e) if says_it_may_have_committed(&e) => {
                unknown += 1;
                assert!(rows == 0 || rows == 20, "{queue}: {e} and {rows} rows");
            }
            Err(Error::Unavailable { .. }) => assert_eq!(rows, 0, "{queue}: no connection, yet {rows} rows"),
            Err(e) => other.push(format!("{queue}: {e:?}")),
        }
    }
    eprintln!("sessions ended {ended}: ok {ok}, nothing written {nothing}, may have committed {unknown}");
    assert!(other.is_empty(), "{other:#?}");
}

// ------------------------------------------------------------------------------- connecting

/// A final refusal must come back well within this (it took busy timeout + connect timeout,
/// 15 s, while the pool's check-out retried it).
const AT_ONCE: Duration = Duration::from_secs(3);

/// The test server's URL (`postgres://USER@HOST:PORT/DB`) with `user`, `password` and
/// `dbname` in its place; `password` as written (reserved characters and all).
fn server_url_as(url: &str, user: Option<&str>, password: &str, dbname: Option<&str>) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (userinfo, rest) = rest.split_once('@').expect("a user");
    let (hostport, db) = rest.split_once('/').expect("a database");
    let user = user.unwrap_or(userinfo.split(':').next().unwrap_or(userinfo));
    format!("{scheme}://{user}:{password}@{hostport}/{}", dbname.unwrap_or(db))
}

/// The error with its sources, on one line.
fn chain(e: &Error) -> String {
    let mut shown = format!("{e} / {e:?}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        shown.push_str(&format!(": {s}"));
        source = s.source();
    }
    shown
}

/// libpq reads everything from the user information's `:` to its first `@` as the password,
/// `?` and `#` included; the queue must connect to the same database (the server trusts every
/// login, so the password itself is checked by tests/postgres/urls.rs). It appended its own
/// parameters to the URL as text, and the database name became
/// `fenceq_test&connect_timeout=10&...`, after a 10 s wait.
#[test]
fn a_password_holding_a_question_mark_or_a_hash_keeps_the_database() {
    let Some(s) = Scratch::new() else { return };
    for password in ["se?cret", "se#cret", "s%20e?c#r&et=1"] {
        let url = server_url_as(&s.url, None, password, None);
        let started = Instant::now();
        let q = s.open_at(url).unwrap_or_else(|e| panic!("{password}: {}", chain(&e)));
        assert!(started.elapsed() < AT_ONCE, "{password}: opening took {:?}", started.elapsed());
        q.enqueue(NewJob::new("q", password.as_bytes().to_vec())).unwrap();
        let shown = q
            .with_connection(|tx| {
                Ok(sql_query("SELECT current_database()::text AS value").get_result::<Shown>(&mut *tx.conn())?)
            })
            .unwrap();
        assert_eq!(shown.value, "fenceq_test");
    }
}

/// A missing database or role is the server's final word: reported at once (not after the
/// pool's check-out timed out), as `InvalidInput` with the server's reason.
#[test]
fn a_missing_database_or_role_is_refused_at_once_with_the_servers_reason() {
    let Some(s) = Scratch::new() else { return };
    let missing_db = format!("no_db_{}", uuid::Uuid::new_v4().simple());
    let missing_role = format!("no_role_{}", uuid::Uuid::new_v4().simple());
    for (url, said) in [
        (
            server_url_as(&s.url, None, "pw-s3cret", Some(&missing_db)),
            format!("database \"{missing_db}\" does not exist"),
        ),
        (
            server_url_as(&s.url, Some(&missing_role), "pw-s3cret", None),
            format!("role \"{missing_role}\" does not exist"),
        ),
    ] {
        let started = Instant::now();
        let err = s.open_at(url).expect_err("refused");
        let took = started.elapsed();
        let shown = chain(&err);
        assert!(matches!(err, Error::InvalidInput { .. }), "{shown}");
        assert!(shown.contains(&said), "{shown}");
        assert!(!shown.contains("pw-s3cret"), "{shown}");
        assert!(took < AT_ONCE, "took {took:?}: {shown}");
    }
}

/// A URL whose `target_session_attrs` no reachable node meets (what a formation URL asking for
/// `read-write` meets while no node has been promoted yet; here the one server is a primary
/// and the URL asks for a standby): not a final refusal, since a node may be promoted any
/// moment, so it is tried again until the connect timeout and then `Unavailable`, retryable,
/// with libpq's reason inside.
#[test]
fn no_node_of_the_wanted_kind_is_unavailable_within_the_connect_timeout() {
    let Some(s) = Scratch::new() else { return };
    let started = Instant::now();
    let err = s
        .open_at(format!("{}&connect_timeout=1", s.url_with("target_session_attrs", "read-only")))
        .expect_err("no standby");
    let took = started.elapsed();
    let shown = chain(&err);
    assert!(matches!(err, Error::Unavailable { .. }) && err.is_retryable(), "{shown}");
    assert!(shown.contains("read-only") || shown.contains("standby"), "libpq's reason: {shown}");
    assert!(took < Duration::from_secs(10), "took {took:?}: {shown}");
}

/// Nothing listens on the port: not a final refusal (a server may be restarting), so it is
/// tried again, but only until the connect timeout the URL sets, not busy timeout + 10 s.
#[test]
fn an_unreachable_server_is_reported_within_the_connect_timeout() {
    let Some(s) = Scratch::new() else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("postgres://fenceq:pw-s3cret@127.0.0.1:{port}/none?connect_timeout=2");
    let started = Instant::now();
    let err = s.open_at(url).expect_err("nothing listens");
    let took = started.elapsed();
    let shown = chain(&err);
    assert!(matches!(err, Error::Unavailable { .. }) && err.is_retryable(), "{shown}");
    assert!(shown.contains("refused"), "{shown}");
    assert!(!shown.contains("pw-s3cret"), "{shown}");
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(5), "took {took:?}");

    // The builder's own setting replaces the URL's.
    let url = format!("postgres://fenceq@127.0.0.1:{port}/none?connect_timeout=30");
    let started = Instant::now();
    let builder = Queue::builder().url(url).connect_timeout(Duration::from_secs(1));
    assert!(matches!(builder.open_postgres(), Err(Error::Unavailable { .. })));
    assert!(started.elapsed() < Duration::from_secs(4), "took {:?}", started.elapsed());
    let err = Queue::builder().url(s.url.clone()).connect_timeout(Duration::ZERO).open_postgres().expect_err("0 s");
    assert!(matches!(err, Error::InvalidInput { what: "connect timeout", .. }), "{err}");
}

/// A server that accepts the connection and never answers: a URL's `connect_timeout` of `0`
/// or a negative number (libpq's "wait indefinitely") still ends in `Unavailable` within
/// fenceq's default bound, not never.
#[test]
fn a_url_whose_connect_timeout_means_forever_is_still_bounded() {
    let Some(_s) = Scratch::new() else { return };
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    // Accepted connections are kept open, unanswered, until the test ends.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming().flatten() {
            held.push(stream);
        }
    });
    let bound = fenceq::PostgresOptions::DEFAULT_CONNECT_TIMEOUT;
    let (done, opened) = mpsc::channel();
    for value in ["0", "-1"] {
        let url = format!("postgres://fenceq@127.0.0.1:{port}/none?connect_timeout={value}");
        let done = done.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let result = Queue::builder().url(url).open_postgres().map(drop);
            let _ = done.send((value, result, started.elapsed()));
        });
    }
    // A wait that never ends is this test's failure, not a hang of the suite.
    let deadline = Instant::now() + bound + Duration::from_secs(20);
    for _ in 0..2 {
        let left = deadline.saturating_duration_since(Instant::now());
        let (value, result, took) = opened.recv_timeout(left).expect("an open waited past the bound");
        let err = result.expect_err("the server never answers");
        assert!(matches!(err, Error::Unavailable { .. }) && err.is_retryable(), "{value}: {}", chain(&err));
        assert!(took < bound + Duration::from_secs(10), "connect_timeout={value} took {took:?}");
    }
}

/// While no server can be reached, every call fails with a retryable error (`Unavailable`
/// once the store knows the server unreachable) within about its busy timeout, not after the
/// busy timeout plus the connect timeout; the next call after the server is back works, on
/// the same queue handle.
#[test]
fn calls_during_an_outage_are_unavailable_within_their_busy_timeout() {
    let Some(s) = Scratch::new() else { return };
    drop(s.open()); // the schema, created through the server itself
    let mut proxy = Proxy::new(&s.url);
    let busy = Duration::from_secs(1);
    let q = Queue::builder()
        .url(proxy.url(&s.url))
        .schema(s.schema.clone())
        .busy_timeout(busy)
        .connect_timeout(Duration::from_secs(10))
        .open_postgres()
        .unwrap();
    q.enqueue(NewJob::new("q", b"before".to_vec()).key("before")).unwrap();
    proxy.down();
    let mut unavailable = 0;
    for i in 0..5 {
        let started = Instant::now();
        let err = q.enqueue(NewJob::new("q", b"during".to_vec()).key(format!("during-{i}"))).unwrap_err();
        let took = started.elapsed();
        assert!(err.is_retryable(), "{}", chain(&err));
        assert!(matches!(err, Error::Unavailable { .. } | Error::ConnectionLost { .. }), "{}", chain(&err));
        // Far under busy + connect timeout (11 s), which a call waited before.
        assert!(took < busy + Duration::from_secs(4), "call {i} took {took:?}: {}", chain(&err));
        if matches!(err, Error::Unavailable { .. }) {
            unavailable += 1;
            assert!(chain(&err).contains("refused"), "{}", chain(&err));
        }
    }
    assert!(unavailable >= 4, "{unavailable} of 5 calls were Unavailable");
    proxy.start();
    let give_up = Instant::now() + Duration::from_secs(30);
    let after = loop {
        match q.enqueue(NewJob::new("q", b"after".to_vec()).key("after")) {
            Ok(done) => break done,
            Err(e) if e.is_retryable() && Instant::now() < give_up => continue,
            Err(e) => panic!("the server is back, yet {}", chain(&e)),
        }
    };
    assert!(matches!(after, fenceq::Enqueued::New(_)), "{after:?}");
    let mut raw = s.raw();
    assert_eq!(jobs_of(&mut raw, "q"), 2, "before and after; nothing during the outage");
}

/// A server that turns read-only under the queue's open connections (what a failover does to
/// the old primary) fails each write with `Unavailable`, and discards the connection: once the
/// server accepts writes again, no session that failed a write is used again (a session
/// keeps the read-only default it started with), so calls work again after at most one
/// failure per session the pool held.
#[test]
fn a_server_turned_read_only_is_unavailable_and_its_connections_are_not_reused() {
    let Some(s) = Scratch::new() else { return };
    let mut raw = s.raw();
    let database = format!("{}_ro", s.schema);
    raw.batch_execute(&format!("DROP DATABASE IF EXISTS {database}")).unwrap();
    raw.batch_execute(&format!("CREATE DATABASE {database}")).unwrap();
    let url = {
        let (head, rest) = s.url.split_once('@').unwrap();
        let hostport = rest.split('/').next().unwrap();
        format!("{head}@{hostport}/{database}")
    };
    let q = Queue::builder().url(url.clone()).pool_size(2).open_postgres().unwrap();
    q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
    // New sessions of the database are read-only; the queue's pooled ones are ended, so that
    // the next connections are new ones, started read-only.
    raw.batch_execute(&format!("ALTER DATABASE {database} SET default_transaction_read_only = on")).unwrap();
    raw.batch_execute(&format!(
        "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = '{database}'"
    ))
    .unwrap();
    let mut unavailable = 0;
    for _ in 0..6 {
        match q.enqueue(NewJob::new("q", b"y".to_vec())) {
            Err(e @ Error::Unavailable { .. }) => {
                assert!(e.is_retryable());
                unavailable += 1;
            }
            Err(e @ Error::ConnectionLost { commit_unknown: false, .. }) => assert!(e.is_retryable()),
            other => panic!("a read-only server: {other:?}"),
        }
    }
    assert!(unavailable >= 4, "{unavailable} of 6 writes were Unavailable");
    raw.batch_execute(&format!("ALTER DATABASE {database} RESET default_transaction_read_only")).unwrap();
    // A session that failed a write is never handed out again; but the pool may still hold
    // sessions it opened while the database was read-only that no write has met yet (r2d2
    // retries a failed connect in the background after its caller has gone), and each of
    // those fails one write before it is discarded. So: at most one failure per connection
    // the pool may hold (twice its size), then every write works.
    let most = 2 * 2;
    let mut refused = 0;
    while let Err(e) = q.enqueue(NewJob::new("q", b"first".to_vec())) {
        assert!(matches!(e, Error::Unavailable { .. }), "writable again: {e:?}");
        refused += 1;
        assert!(refused <= most, "{refused} writes met a read-only session: one is reused");
    }
    for i in 0..4 {
        q.enqueue(NewJob::new("q", vec![i])).expect("writable again: no read-only session is reused");
    }
    drop(q);
    raw.batch_execute(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)")).unwrap();
}

/// A worker pool rides through an outage: while the store is unreachable its heartbeat's
/// renewals fail and its dispatcher's claims fail, and it carries on instead of stopping; the
/// running attempt whose lease ran out meanwhile learns it (`owner_lost`), and its settle is
/// refused; once the server is back, the same pool claims again, without a restart: the new
/// job, and the job whose lease ran out (its next attempt).
#[test]
fn a_pool_rides_through_an_outage_and_claims_again_once_the_server_is_back() {
    let Some(s) = Scratch::new() else { return };
    drop(s.open());
    let mut proxy = Proxy::new(&s.url);
    let clock = ManualClock::new(1_700_000_000_000);
    let direct =
        Queue::builder().url(s.url.clone()).schema(s.schema.clone()).clock(clock.clone()).open_postgres().unwrap();
    let q = Queue::builder()
        .url(proxy.url(&s.url))
        .schema(s.schema.clone())
        .clock(clock.clone())
        .busy_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(2))
        .open_postgres()
        .unwrap();
    let first = direct.enqueue(NewJob::new("q", b"first".to_vec())).unwrap().id();
    let (started_tx, started) = mpsc::channel::<()>();
    let (release_tx, release) = mpsc::channel::<()>();
    let release = std::sync::Mutex::new(release);
    let (lost_tx, lost) = mpsc::channel::<bool>();
    let (done_tx, done) = mpsc::channel::<(Vec<u8>, u32)>();
    let pool = fenceq::WorkerPool::builder(q.clone(), "q")
        .workers(1)
        .lease(Duration::from_secs(2))
        .renew_every(Duration::from_millis(200))
        .poll_interval(Duration::from_millis(100))
        .handler(move |a| {
            if a.payload() == b"first" && a.attempt() == 1 {
                started_tx.send(()).unwrap();
                release.lock().unwrap().recv_timeout(Duration::from_secs(60)).expect("released");
                lost_tx.send(a.owner_lost()).unwrap();
            } else {
                done_tx.send((a.payload().to_vec(), a.attempt())).unwrap();
            }
            fenceq::Outcome::Complete
        })
        .start()
        .unwrap();
    started.recv_timeout(Duration::from_secs(30)).expect("the first attempt started");
    proxy.down();
    // The lease runs out while nothing can renew it.
    clock.advance(Duration::from_secs(3));
    release_tx.send(()).unwrap();
    assert!(lost.recv_timeout(Duration::from_secs(30)).unwrap(), "owner_lost once the lease ran out unrenewed");
    // Its settle cannot reach the store (or is refused once it does): counted, not fatal.
    let give_up = Instant::now() + Duration::from_secs(30);
    while pool.counters().errors + pool.counters().stale_settles_rejected == 0 {
        assert!(Instant::now() < give_up, "the failed settle was never counted: {:?}", pool.counters());
        std::thread::yield_now();
    }
    proxy.start();
    direct.enqueue(NewJob::new("q", b"second".to_vec())).unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        seen.push(done.recv_timeout(Duration::from_secs(60)).expect("the pool claims again once the server is back"));
    }
    seen.sort();
    assert_eq!(seen, vec![(b"first".to_vec(), 2), (b"second".to_vec(), 1)]);
    let report = pool.shutdown(Duration::from_secs(30)).unwrap();
    assert!(report.still_running.is_empty());
    assert_eq!(direct.job(first).unwrap().unwrap().state, JobState::Completed);
}
