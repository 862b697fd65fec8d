//! The schema upgrader: databases left at every older version upgrade with their rows intact,
//! and files that are newer or not databases at all are refused untouched. Processes racing
//! the same upgrade are in tests/sqlite/upgrade_race.rs.

use crate::support::*;
use fenceq::rusqlite::Connection;
use fenceq::{Error, JobState, Queue, SCHEMA_VERSION};
use std::path::Path;

fn assert_upgraded_with_rows_intact(path: &Path) {
    let conn = Connection::open(path).unwrap();
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('fenceq_jobs')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for column in ["claim_id", "exhausted_at", "acknowledged_at", "decision", "decided_by"] {
        assert_eq!(columns.iter().filter(|c| *c == column).count(), 1, "{column} exists exactly once");
    }
    // Schema 5: the table of paused queues, empty (no queue was paused before it existed).
    let paused: i64 = conn.query_row("SELECT count(*) FROM fenceq_queues", [], |r| r.get(0)).unwrap();
    assert_eq!(paused, 0);
    let rows: Vec<(String, String, Vec<u8>)> = conn
        .prepare("SELECT key, state, payload FROM fenceq_jobs ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        rows,
        vec![
            ("k-pending".into(), "pending".into(), vec![1]),
            ("k-running".into(), "running".into(), vec![2]),
            ("k-completed".into(), "completed".into(), vec![3]),
        ]
    );
    assert_integrity(&conn);
}

#[test]
fn databases_at_every_older_version_upgrade_with_their_rows_intact() {
    for version in 1..SCHEMA_VERSION as usize {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        old_database(&path, version, "q");
        let clock = fenceq::ManualClock::new(T0);
        let q = Queue::builder().path(&path).clock(clock.clone()).open().unwrap();
        assert_eq!(q.schema_version().unwrap(), SCHEMA_VERSION);
        drop(q);
        assert_upgraded_with_rows_intact(&path);
        // The old build's claim cannot settle (it has no claim id), but once its lease runs
        // out the job is reclaimed and completes under the new fence.
        let q = Queue::builder().path(&path).clock(clock.clone()).open().unwrap();
        let pending = q.claim("q", "new", LEASE).unwrap().unwrap();
        assert_eq!(pending.payload, vec![1]);
        q.complete(&pending.token()).unwrap();
        assert!(q.claim("q", "new", LEASE).unwrap().is_none(), "the old build's lease is still live");
        clock.advance(LEASE);
        let reclaimed = q.claim("q", "new", LEASE).unwrap().unwrap();
        assert_eq!((reclaimed.payload.clone(), reclaimed.token.attempt), (vec![2], 2));
        q.complete(&reclaimed.token()).unwrap();
        assert_eq!(q.job(reclaimed.id()).unwrap().unwrap().state, JobState::Completed);
    }
}

#[test]
fn opening_a_current_database_again_is_a_no_op() {
    let q = temp_queue();
    q.add("x");
    let before = snapshot(&q.path());
    let again = q.reopen();
    assert_eq!(again.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(snapshot(&q.path()), before);
}

#[test]
fn a_database_of_a_newer_version_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE fenceq_jobs (id INTEGER PRIMARY KEY, future_column TEXT)").unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let err = Queue::open(&path).unwrap_err();
    assert!(
        matches!(err, Error::SchemaTooNew { found, supported } if found == SCHEMA_VERSION + 1 && supported == SCHEMA_VERSION)
    );
    assert!(err.to_string().contains("upgrade fenceq"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the file is untouched");
    assert!(!dir.path().join("future.db-wal").exists(), "not even switched to WAL");
}

#[test]
fn a_file_that_is_not_a_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    let text = "these are my notes, not a database. ".repeat(200);
    std::fs::write(&path, &text).unwrap();
    let err = Queue::open(&path).unwrap_err();
    assert!(matches!(&err, Error::NotADatabase { path: p } if p.contains("notes.txt")), "{err:?}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    assert_eq!(fenceq::SqliteStore::schema_version_of(&path).map_err(|e| e.to_string()), Err(err.to_string()));
}

/// Every column of every row, in id order, as text (for before/after comparisons).
fn every_cell(conn: &Connection) -> Vec<String> {
    let mut stmt = conn.prepare("SELECT * FROM fenceq_jobs ORDER BY id").unwrap();
    let columns = stmt.column_count();
    stmt.query_map([], |r| {
        (0..columns)
            .map(|i| r.get_ref(i).map(|v| format!("{v:?}")))
            .collect::<Result<Vec<_>, _>>()
            .map(|cells| cells.join("|"))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// Adds two rows to an old database's jobs table and deletes them, as a prune of the newest
/// rows would; returns AUTOINCREMENT's sequence, which is then above every id left.
fn delete_the_newest_rows(conn: &Connection) -> i64 {
    conn.execute_batch(
        "INSERT INTO fenceq_jobs (queue, key, payload, run_at, max_attempts, created_at)
         VALUES ('q', 'k-pruned-1', x'04', 1, 3, 1), ('q', 'k-pruned-2', x'05', 1, 3, 1);
         DELETE FROM fenceq_jobs WHERE key LIKE 'k-pruned-%';",
    )
    .unwrap();
    let sequence: i64 =
        conn.query_row("SELECT seq FROM sqlite_sequence WHERE name = 'fenceq_jobs'", [], |r| r.get(0)).unwrap();
    let max_id: i64 = conn.query_row("SELECT max(id) FROM fenceq_jobs", [], |r| r.get(0)).unwrap();
    assert!(sequence > max_id, "the setup deleted the newest rows");
    sequence
}

/// Every cell of the columns that `before` (an `every_cell` of the table before an upgrade)
/// has, row by row: the columns later versions add come after them.
fn first_cells(conn: &Connection, before: &[String]) -> Vec<String> {
    let columns = before.first().map_or(0, |row| row.split('|').count());
    every_cell(conn).iter().map(|row| row.split('|').take(columns).collect::<Vec<_>>().join("|")).collect()
}

/// Opens the old database at `path` with a queue, which upgrades it, and beside it a raw
/// connection to read what the upgrade left.
fn upgraded(path: &Path) -> (Queue, Connection) {
    let q = Queue::builder().path(path).open().unwrap();
    assert_eq!(q.schema_version().unwrap(), SCHEMA_VERSION);
    (q, Connection::open(path).unwrap())
}

/// Schema 7 rebuilds the jobs table (its claim-id rule becomes a CHECK): every cell of every
/// row survives, and the id sequence too, even where the newest rows were deleted, so an id
/// handed out before the upgrade is never handed out again.
#[test]
fn the_rebuild_of_schema_7_keeps_every_cell_and_the_id_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v6.db");
    let conn = old_database(&path, 6, "q");
    let sequence = delete_the_newest_rows(&conn);
    let before = every_cell(&conn);
    drop(conn);

    let (q, conn) = upgraded(&path);
    // Every cell of version 6's columns; the columns later versions add come after them.
    assert_eq!(first_cells(&conn, &before), before);
    let triggers: i64 =
        conn.query_row("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'", [], |r| r.get(0)).unwrap();
    assert_eq!(triggers, 0, "the claim-id rule is a CHECK now");
    let next = q.enqueue(fenceq::NewJob::new("q", b"new".to_vec())).unwrap().id();
    assert_eq!(next.0, sequence + 1, "ids handed out before the upgrade are never handed out again");
    assert_integrity(&conn);
}

/// Schema 18 rebuilds the jobs table without AUTOINCREMENT: every cell of every row survives
/// (grouped, snoozed, exhausted and decided rows included), the table keeps its CHECKs, and
/// the sequence becomes the id floor, so that where the newest rows were deleted before the
/// upgrade, neither a single, a grouped nor a batched enqueue hands their ids out again.
#[test]
fn the_rebuild_of_schema_18_keeps_every_cell_and_hands_no_id_out_twice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v17.db");
    let conn = old_database(&path, 17, "q");
    conn.execute_batch(
        "INSERT INTO fenceq_jobs (queue, key, payload, run_at, max_attempts, created_at, group_name, group_held, snoozes)
         VALUES ('q', 'k-grouped', x'06', 1, 3, 1, 'chat-1', 0, 2);
         INSERT INTO fenceq_jobs (queue, key, payload, state, run_at, attempt, max_attempts, created_at, settled_at,
                                  claim_id, exhausted_at, decision, decided_at, decided_by, decision_note, last_error)
         VALUES ('q', 'k-exhausted', x'07', 'exhausted', 1, 3, 3, 1, 2, randomblob(16), 2, 'replay', 3, 'ops', 'n', 'e');",
    )
    .unwrap();
    let sequence = delete_the_newest_rows(&conn);
    let before = every_cell(&conn);
    drop(conn);

    let (q, conn) = upgraded(&path);
    assert_eq!(every_cell(&conn), before);
    let table: String = conn
        .query_row("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'fenceq_jobs'", [], |r| r.get(0))
        .unwrap();
    assert!(!table.contains("AUTOINCREMENT"), "{table}");
    assert!(table.contains("CONSTRAINT claimed_has_claim_id CHECK"), "{table}");
    let indexes: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'fenceq_jobs' AND sql IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(indexes, 9, "every index of the table is made again");
    // A CHECK of the rebuilt table still refuses a row that breaks its rule.
    let refused = conn.execute("UPDATE fenceq_jobs SET group_held = 1 WHERE key = 'k-exhausted'", []);
    assert!(refused.unwrap_err().to_string().contains("held_only_pending_in_group"));

    let next = q.enqueue(fenceq::NewJob::new("q", b"new".to_vec())).unwrap().id();
    assert_eq!(next.0, sequence + 1, "ids handed out before the upgrade are never handed out again");
    let batch: Vec<fenceq::NewJob> = (0..12).map(|i| fenceq::NewJob::new("q", vec![i])).collect();
    let ids: Vec<i64> = q.enqueue_batch(batch).unwrap().iter().map(|e| e.id().0).collect();
    assert_eq!(ids, (sequence + 2..sequence + 14).collect::<Vec<_>>());
    let grouped = q.enqueue(fenceq::NewJob::new("q", b"g".to_vec()).group("chat-1")).unwrap().id();
    assert_eq!(grouped.0, sequence + 14);
    assert_integrity(&conn);
}

/// Schema 10 rebuilds the schedules table (its ticks become nullable, for a registration
/// recorded before its first tick) and adds the definition columns: every tick recorded
/// before survives, the new columns are empty, and every build lists the rows.
#[test]
fn schema_10_gives_old_schedule_rows_the_definition_columns_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v9.db");
    let conn = old_database(&path, 9, "q");
    conn.execute_batch(&format!(
        "INSERT INTO fenceq_schedules (name, last_tick, enqueued_at) VALUES ('hourly', {T0}, {T0} + 5), ('daily', 7, 8);"
    ))
    .unwrap();
    drop(conn);

    let (q, conn) = upgraded(&path);
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('fenceq_schedules')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(columns, ["name", "last_tick", "enqueued_at", "definition", "queue", "next_tick", "recorded_at"]);
    let ticks = schedule_ticks(&conn);
    assert_eq!(ticks, vec![("daily".into(), 7, 8), ("hourly".into(), T0, T0 + 5)]);
    let old_row = |name: &str, last_tick| fenceq::ScheduleRecord {
        name: name.into(),
        definition: None,
        queue: None,
        last_tick: Some(last_tick),
        next_tick: None,
        recorded_at: None,
    };
    assert_eq!(q.schedule_records().unwrap(), vec![old_row("daily", 7), old_row("hourly", T0)]);
    // A tick and its time stay both set or both NULL.
    let refused = conn.execute("INSERT INTO fenceq_schedules (name, last_tick) VALUES ('half', 1)", []);
    assert!(refused.is_err(), "a tick without its enqueue time is refused");
    assert_integrity(&conn);
}

/// The claim-id rule (a trigger before schema 7, a CHECK since) still refuses a claimed row
/// without its claim id, on insert and on update.
#[test]
fn a_claimed_row_without_its_claim_id_is_refused() {
    let q = temp_queue();
    q.add("x");
    let conn = Connection::open(q.path()).unwrap();
    let update = conn.execute("UPDATE fenceq_jobs SET state = 'exhausted', exhausted_at = 1", []);
    assert!(update.unwrap_err().to_string().contains("claimed_has_claim_id"));
    let insert = conn.execute(
        "INSERT INTO fenceq_jobs (queue, payload, state, run_at, attempt, max_attempts, worker, lease_until, created_at)
         VALUES ('q', x'00', 'running', 1, 1, 3, 'w', 100, 1)",
        [],
    );
    assert!(insert.unwrap_err().to_string().contains("claimed_has_claim_id"));
}

/// Schema 11 counts a claim's starts of one group in one row: the starts recorded one row each
/// before it still count one each, so a rate spent by them stays spent after the upgrade, and
/// opens when the oldest of them leaves the window. Schema 12's lift columns hold together.
#[test]
fn schema_11_counts_the_starts_recorded_before_it_one_each() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v10.db");
    let conn = old_database(&path, 10, "q");
    conn.execute_batch(&format!(
        "INSERT INTO fenceq_limits (queue, scope, window_ms, max_count, updated_at) VALUES ('q', 'rate', 60000, 3, {T0});
         INSERT INTO fenceq_queue_flow (queue, updated_at, starts_kept) VALUES ('q', {T0}, 3);
         INSERT INTO fenceq_starts (queue, at, claim_id, job_id, attempt, group_name)
         VALUES ('q', {T0} - 3000, randomblob(16), 91, 1, NULL),
                ('q', {T0} - 2000, randomblob(16), 92, 1, NULL),
                ('q', {T0} - 1000, randomblob(16), 93, 1, NULL);"
    ))
    .unwrap();
    drop(conn);

    let clock = fenceq::ManualClock::new(T0);
    let q = Queue::builder().path(&path).clock(clock.clone()).open().unwrap();
    assert_eq!(q.schema_version().unwrap(), SCHEMA_VERSION);
    let conn = Connection::open(&path).unwrap();
    let counted: Vec<i64> = conn
        .prepare("SELECT starts FROM fenceq_starts")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(counted, [1, 1, 1]);
    assert!(q.claim("q", "w", std::time::Duration::from_secs(30)).unwrap().is_none(), "the old starts spend the rate");
    let held = q.stats().unwrap().queue("q").throttled.expect("the due job is held back by the rate");
    assert_eq!(held.opens_at, Some(T0 - 3000 + 60_000), "the oldest start leaves the window first");
    clock.set(T0 - 3000 + 60_000);
    assert!(q.claim("q", "w", std::time::Duration::from_secs(30)).unwrap().is_some(), "the window opened");
    // A start's count is at least one.
    let refused = conn.execute(
        "INSERT INTO fenceq_starts (queue, at, claim_id, job_id, attempt, starts) VALUES ('q', 1, x'00', 1, 1, 0)",
        [],
    );
    assert!(refused.is_err(), "a row of no starts is refused");
    // Schema 12: a lift is recorded with its reason, and names no one without a time.
    for bad in
        ["lifted_at = 1", "lifted_by = 'alice'", "lifted_reason = '429'", "lift_note = 'n', lifted_reason = '429'"]
    {
        let refused = conn.execute(&format!("UPDATE fenceq_queue_flow SET {bad} WHERE queue = 'q'"), []);
        assert!(refused.is_err(), "{bad} is refused");
    }
    conn.execute("UPDATE fenceq_queue_flow SET lifted_at = 1, lifted_reason = '429' WHERE queue = 'q'", []).unwrap();
    assert_integrity(&conn);
}

/// Schema 13 keeps counts of the settled rows, which `stats` reads instead of the rows: the
/// upgrade counts the rows settled before it (completed, cancelled, exhausted and
/// acknowledged; not the unacknowledged exhaustions, which stay counted from their rows),
/// so that `stats` reports after it what the count of the rows reported before it.
#[test]
fn schema_13_counts_the_settled_rows_written_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v12.db");
    let conn = old_database(&path, 12, "a");
    let settled = |queue: &str, payload: u8, state: &str, acknowledged_at: &str| {
        format!(
            "INSERT INTO fenceq_jobs (queue, payload, state, run_at, attempt, max_attempts, created_at, settled_at,
                                      claim_id, exhausted_at, acknowledged_at)
             VALUES ('{queue}', x'{payload:02x}', '{state}', {T0}, 1, 1, {T0}, {T0}, randomblob(16),
                     CASE WHEN '{state}' = 'exhausted' THEN {T0} END, {acknowledged_at});"
        )
    };
    let mut sql = String::new();
    for (queue, completed, cancelled, acknowledged, unacknowledged) in [("a", 2, 1, 3, 1), ("b", 1, 2, 1, 2)] {
        let mut payload = 0x10;
        for (state, n, acknowledged_at) in [
            ("completed", completed, "NULL"),
            ("cancelled", cancelled, "NULL"),
            ("exhausted", acknowledged, "1700000000001"),
            ("exhausted", unacknowledged, "NULL"),
        ] {
            for _ in 0..n {
                sql.push_str(&settled(queue, payload, state, acknowledged_at));
                payload += 1;
            }
        }
    }
    conn.execute_batch(&sql).unwrap();
    // What `stats` counted before the upgrade: the rows themselves.
    let before = row_counts(&conn);
    let expected = |queue: &str, counts: &[(&str, u64)]| {
        counts.iter().map(move |(state, n)| (queue.to_owned(), (*state).to_owned(), *n)).collect::<Vec<_>>()
    };
    let mut wanted = expected(
        "a",
        &[
            ("cancelled", 1),
            ("completed", 3), // 2 and old_database's k-completed
            ("exhausted_acknowledged", 3),
            ("exhausted_unacknowledged", 1),
            ("pending", 1),
            ("running", 1),
        ],
    );
    wanted.extend(expected(
        "b",
        &[("cancelled", 2), ("completed", 1), ("exhausted_acknowledged", 1), ("exhausted_unacknowledged", 2)],
    ));
    assert_eq!(before, wanted);
    drop(conn);

    let q = Queue::builder().path(&path).clock(fenceq::ManualClock::new(T0)).open().unwrap();
    assert_eq!(q.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(stats_counts(&q), before);
    let conn = Connection::open(&path).unwrap();
    assert_eq!(settled_counts(&conn), settled_row_counts(&conn));
    assert_eq!(settled_counts(&conn).len(), 6, "three counted states in each of two queues");
    // A count never goes below zero.
    let refused = conn.execute("UPDATE fenceq_settled_counts SET count = -1 WHERE queue = 'a'", []);
    assert!(refused.is_err(), "a negative count is refused");
    let refused =
        conn.execute("INSERT INTO fenceq_settled_counts (queue, state, count) VALUES ('c', 'exhausted', 1)", []);
    assert!(refused.is_err(), "only the settled states are counted");
    assert_integrity(&conn);
}

/// Schema 19 adds the history of attempts: an old file upgrades with every cell of its rows
/// intact (and no column added to them) and no record (nothing recorded the attempts before
/// it). The attempt an old build claimed is recorded when it ends, with its start unknown (its
/// claim id carries none); one claimed after the upgrade with its claim's instant. The closed
/// set of outcomes is a CHECK.
#[test]
fn schema_19_keeps_every_cell_and_records_the_attempts_that_end_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v18.db");
    let conn = old_database(&path, 18, "q");
    let before = every_cell(&conn);
    drop(conn);

    let clock = fenceq::ManualClock::new(T0);
    let q = Queue::builder().path(&path).clock(clock.clone()).open().unwrap();
    assert_eq!(q.schema_version().unwrap(), SCHEMA_VERSION);
    let conn = Connection::open(&path).unwrap();
    assert_eq!(every_cell(&conn), before);
    let records: i64 = conn.query_row("SELECT count(*) FROM fenceq_attempts", [], |r| r.get(0)).unwrap();
    assert_eq!(records, 0);

    let pending = q.claim("q", "new", LEASE).unwrap().unwrap();
    q.retry(&pending.token(), std::time::Duration::from_secs(60), "first").unwrap();
    let [record] = &q.attempts(pending.id(), 10).unwrap()[..] else { panic!("one record") };
    assert_eq!((record.outcome, record.started_at, record.ended_at), (fenceq::AttemptOutcome::Retry, Some(T0), T0));

    clock.advance(LEASE);
    assert_eq!(q.reap().unwrap().requeued, 1, "the old build's expired claim");
    let old = q.find_by_key("q", "k-running").unwrap().unwrap();
    let [record] = &q.attempts(old, 10).unwrap()[..] else { panic!("one record") };
    assert_eq!(
        (record.outcome, record.attempt, record.worker.as_deref(), record.started_at, record.ended_at),
        (fenceq::AttemptOutcome::LeaseExpired, 1, Some("old-worker"), None, T0 + 30_000)
    );
    assert_eq!(record.error.as_deref(), Some("lease expired (worker old-worker)"));

    let refused = conn.execute(
        "INSERT INTO fenceq_attempts (job_id, seq, attempt, claim_id, outcome, ended_at)
         VALUES (1, 9, 1, randomblob(16), 'completed', 1)",
        [],
    );
    assert!(refused.unwrap_err().to_string().contains("attempt_record_outcome"));
    assert_integrity(&conn);
}
