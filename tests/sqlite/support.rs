//! Fixtures of the SQLite tests: a queue on its own temp file with a manual clock, old
//! databases, raw SQLite, the domain tables the tests write under the fence, and the child
//! processes of the multi-process tests. What is not SQLite's own (`T0`, `LEASE`,
//! `HANG_GUARD`, wall-clock instants, the seeded generator, a child process of this binary)
//! comes from the conformance kit and is re-exported here.
#![allow(dead_code)]

use fenceq::rusqlite::{self, Connection, ErrorCode};
use fenceq::{ClaimToken, Claimed, ManualClock, NewJob, Queue};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use tempfile::TempDir;

pub use fenceq_conformance::{child_process, env_or, spin_until, wall_ms, Rng, HANG_GUARD, LEASE, T0};

pub struct TestQueue {
    pub queue: Queue,
    pub clock: ManualClock,
    pub dir: TempDir,
}

impl std::ops::Deref for TestQueue {
    type Target = Queue;
    fn deref(&self) -> &Queue {
        &self.queue
    }
}

impl TestQueue {
    pub fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("queue.db")
    }

    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Enqueues a job with `payload` on queue "q" and returns its id.
    pub fn add(&self, payload: &str) -> fenceq::JobId {
        self.queue.enqueue(NewJob::new("q", payload.as_bytes().to_vec())).unwrap().id()
    }

    /// Claims the next job of "q" as `worker` under the default lease; panics when none is due.
    pub fn take(&self, worker: &str) -> Claimed {
        self.queue.claim("q", worker, LEASE).unwrap().expect("a claimable job")
    }

    /// Opens a second handle on the same file and clock.
    pub fn reopen(&self) -> Queue {
        Queue::builder().path(self.path()).clock(self.clock.clone()).open().unwrap()
    }
}

/// A queue on a fresh temp file, with a manual clock at `T0`.
pub fn temp_queue() -> TestQueue {
    temp_queue_with(|b| b)
}

pub fn temp_queue_with(configure: impl FnOnce(fenceq::QueueBuilder) -> fenceq::QueueBuilder) -> TestQueue {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let builder = Queue::builder().path(dir.path().join("queue.db")).clock(clock.clone());
    let queue = configure(builder).open().unwrap();
    TestQueue { queue, clock, dir }
}

/// Counts rows by state through a raw connection (independent of the engine's own queries).
pub fn raw_count(path: &std::path::Path, state: &str) -> i64 {
    let conn = fenceq::rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT count(*) FROM fenceq_jobs WHERE state = ?1", [state], |r| r.get(0)).unwrap()
}

/// One row's (id, state, attempt, claim_id, lease_until, last_error).
pub type RowSnapshot = fenceq_conformance::RawRow;

/// A snapshot of every row (id, state, attempt, claim_id, lease_until, last_error), to assert
/// that a rejected call changed nothing (the kit's SQLite snapshot, on a file by path).
pub fn snapshot(path: &std::path::Path) -> Vec<RowSnapshot> {
    fenceq_conformance::snapshot_of(&fenceq::rusqlite::Connection::open(path).unwrap())
}

/// The schema files, in order, as a build of each version wrote them.
pub const SCHEMA: [&str; 18] = [
    include_str!("../../schema/sqlite/0001_create_jobs.sql"),
    include_str!("../../schema/sqlite/0002_add_claim_id.sql"),
    include_str!("../../schema/sqlite/0003_durable_exhaustion.sql"),
    include_str!("../../schema/sqlite/0004_decisions.sql"),
    include_str!("../../schema/sqlite/0005_schedules.sql"),
    include_str!("../../schema/sqlite/0006_paused_queues.sql"),
    include_str!("../../schema/sqlite/0007_checks_in_table.sql"),
    include_str!("../../schema/sqlite/0008_flow_control.sql"),
    include_str!("../../schema/sqlite/0009_limited_claim.sql"),
    include_str!("../../schema/sqlite/0010_schedule_specs.sql"),
    include_str!("../../schema/sqlite/0011_counted_starts.sql"),
    include_str!("../../schema/sqlite/0012_backoff_lifts.sql"),
    include_str!("../../schema/sqlite/0013_settled_counts.sql"),
    include_str!("../../schema/sqlite/0014_grouped_claim.sql"),
    include_str!("../../schema/sqlite/0015_fair_group_claims.sql"),
    include_str!("../../schema/sqlite/0016_claim_function.sql"),
    include_str!("../../schema/sqlite/0017_stats_function.sql"),
    include_str!("../../schema/sqlite/0018_ids_without_autoincrement.sql"),
];

/// Writes a database as a build of schema `version` left it, with three rows of `queue`
/// (pending `k-pending` x'01', running `k-running` x'02' under a lease to T0 + 30 s, completed
/// `k-completed` x'03'), and returns the connection.
pub fn old_database(path: &std::path::Path, version: usize, queue: &str) -> fenceq::rusqlite::Connection {
    let conn = fenceq::rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("PRAGMA journal_mode = WAL").unwrap();
    for sql in &SCHEMA[..version] {
        conn.execute_batch(sql).unwrap();
    }
    conn.pragma_update(None, "user_version", version as i64).unwrap();
    // From level 2 on, a claimed row must carry a claim id (a trigger, a CHECK from 7 on, enforces it).
    let (claim_column, claim_value) = if version >= 2 { (", claim_id", ", randomblob(16)") } else { ("", "") };
    conn.execute_batch(&format!(
        "INSERT INTO fenceq_jobs (queue, key, payload, run_at, max_attempts, created_at)
         VALUES ('{queue}', 'k-pending', x'01', {T0}, 3, {T0});
         INSERT INTO fenceq_jobs (queue, key, payload, state, run_at, attempt, max_attempts, worker,
                                  lease_until, created_at{claim_column})
         VALUES ('{queue}', 'k-running', x'02', 'running', {T0}, 1, 3, 'old-worker', {T0} + 30000, {T0}{claim_value});
         INSERT INTO fenceq_jobs (queue, key, payload, state, run_at, attempt, max_attempts, created_at, settled_at)
         VALUES ('{queue}', 'k-completed', x'03', 'completed', {T0}, 1, 3, {T0}, {T0});"
    ))
    .unwrap();
    conn
}

// ------------------------------------------------------------------------ child processes

/// Runs the ignored test `child` of this test binary (its full path,
/// `concat!(module_path!(), "::name")`, as [`child_process`] takes it) in a new process with
/// `env` set, and asserts that it succeeded and printed `marker` (the child's last line, so
/// that a child which returned early cannot pass).
pub fn run_child(child: &str, env: &str, marker: &str) {
    let out = child_process(child).env(env, "1").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(marker),
        "child failed: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `key=value` words of a child's report line (`RESULT ops=12 busy=0 ...`), by key.
pub fn parse_counts(line: &str) -> HashMap<String, u64> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

// ------------------------------------------------------------------------ raw SQLite

/// `PRAGMA integrity_check` answers `ok`.
pub fn assert_integrity(conn: &Connection) {
    let result: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(result, "ok");
}

/// The (primary, extended) result code of an SQLite failure; panics on any other error.
pub fn sqlite_code(e: &rusqlite::Error) -> (ErrorCode, i32) {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => (f.code, f.extended_code),
        other => panic!("not an sqlite failure: {other:?}"),
    }
}

/// A raw connection on a WAL file at `path` with a table `t (v)`.
pub fn wal_table(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(())).unwrap();
    conn.execute_batch("CREATE TABLE IF NOT EXISTS t (v)").unwrap();
    conn
}

// ------------------------------------------------------------------------ domain tables

/// The domain table a handler writes its reply to, under the fence: one row per reply sent.
/// A test that knows no attempt leaves it NULL.
pub const REPLIES: &str = "CREATE TABLE replies (job INTEGER, attempt INTEGER)";

/// Creates the `replies` table in the file at `path`, through a raw connection.
pub fn create_replies(path: &Path) {
    Connection::open(path).unwrap().execute_batch(REPLIES).unwrap();
}

/// How many replies were sent (committed).
pub fn replies(path: &Path) -> i64 {
    Connection::open(path).unwrap().query_row("SELECT count(*) FROM replies", [], |r| r.get(0)).unwrap()
}

/// Every reply as (job, attempt), in the order they were committed.
pub fn reply_rows(path: &Path) -> Vec<(i64, i64)> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn.prepare("SELECT job, attempt FROM replies ORDER BY rowid").unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().collect::<Result<_, _>>().unwrap()
}

/// One row per successful settle of a (job, attempt): a double settlement would show.
pub const SETTLE_LOG: &str =
    "CREATE TABLE IF NOT EXISTS settle_log (job INTEGER NOT NULL, attempt INTEGER NOT NULL, UNIQUE (job, attempt))";

/// Completes the claim together with its row in the settle log (one transaction).
pub fn complete_logged(q: &Queue, token: &ClaimToken) -> fenceq::Result<()> {
    q.complete_with(token, |tx| {
        tx.execute("INSERT INTO settle_log (job, attempt) VALUES (?1, ?2)", [token.id.0, token.attempt.into()])?;
        Ok(())
    })
}

/// Every schedule's (name, last tick, enqueued at) as stored, by name.
pub fn schedule_ticks(conn: &Connection) -> Vec<(String, i64, i64)> {
    conn.prepare("SELECT name, last_tick, enqueued_at FROM fenceq_schedules ORDER BY name")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

// ------------------------------------------------------------------------ settled counts

/// A count per (queue, state) as `stats` reports it, its zeros left out: `exhausted` split
/// into `exhausted_acknowledged` and `exhausted_unacknowledged`, in queue then state order.
pub type Counts = Vec<(String, String, u64)>;

/// `Queue::stats()` as `Counts`.
pub fn stats_counts(q: &Queue) -> Counts {
    let mut out = Counts::new();
    for s in q.stats().unwrap().queues {
        let states = [
            ("cancelled", s.cancelled),
            ("completed", s.completed),
            ("exhausted_acknowledged", s.exhausted_acknowledged),
            ("exhausted_unacknowledged", s.exhausted_unacknowledged),
            ("pending", s.pending),
            ("running", s.running),
            ("unknown", s.unknown),
            ("waiting", s.waiting),
        ];
        out.extend(states.into_iter().filter(|(_, n)| *n > 0).map(|(state, n)| (s.queue.clone(), state.to_owned(), n)));
    }
    out
}

/// The rows themselves counted as `Counts` (the query `stats` ran before schema 13), through
/// a raw connection.
pub fn row_counts(conn: &Connection) -> Counts {
    query_counts(
        conn,
        "SELECT queue, CASE WHEN state <> 'exhausted' THEN state
                            WHEN acknowledged_at IS NULL THEN 'exhausted_unacknowledged'
                            ELSE 'exhausted_acknowledged' END AS counted, count(*)
         FROM fenceq_jobs GROUP BY queue, counted ORDER BY queue, counted",
    )
}

/// What `fenceq_settled_counts` holds, zeros left out, through a raw connection.
pub fn settled_counts(conn: &Connection) -> Counts {
    query_counts(conn, "SELECT queue, state, count FROM fenceq_settled_counts WHERE count > 0 ORDER BY queue, state")
}

/// The settled rows themselves counted as `fenceq_settled_counts` counts them.
pub fn settled_row_counts(conn: &Connection) -> Counts {
    query_counts(
        conn,
        "SELECT queue, CASE WHEN state = 'exhausted' THEN 'acknowledged' ELSE state END AS counted, count(*)
         FROM   fenceq_jobs
         WHERE  state IN ('completed', 'cancelled') OR (state = 'exhausted' AND acknowledged_at IS NOT NULL)
         GROUP  BY queue, counted ORDER BY queue, counted",
    )
}

fn query_counts(conn: &Connection, sql: &str) -> Counts {
    let mut stmt = conn.prepare(sql).unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64))).unwrap();
    rows.map(Result::unwrap).collect()
}
