//! Paused queues on SQLite: the upgrade from schema 4 that adds them keeps every row, the
//! schema's CHECKs refuse an inconsistent pause, and the SQLite-specific refusals (a pause
//! inside the queue's own transaction, on a read-only handle). The store-independent rules
//! are the kit's (`crates/conformance/src/base/paused.rs`); the CLI's are in tests/sqlite/cli.rs.

use crate::support::*;
use fenceq::rusqlite::Connection;
use fenceq::{Error, JobState, ManualClock, NewJob, Queue, SCHEMA_VERSION};
use std::path::Path;

/// Every column of every job row, as text, in id order: nothing of a row may change.
fn every_column(path: &Path) -> Vec<Vec<String>> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn.prepare("SELECT * FROM fenceq_jobs ORDER BY id").unwrap();
    let columns = stmt.column_count();
    stmt.query_map([], |row| {
        (0..columns).map(|i| row.get_ref(i).map(|v| format!("{v:?}"))).collect::<Result<Vec<_>, _>>()
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

#[test]
fn a_schema_4_file_upgrades_to_paused_queues_with_every_row_intact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("level4.db");
    {
        let conn = old_database(&path, 4, "q");
        // A schema-4 row with an operator's decision on it, and an exhausted one.
        conn.execute_batch(&format!(
            "UPDATE fenceq_jobs SET decision = 'replay', decided_at = {T0}, decided_by = 'alice', decision_note = 'why'
             WHERE key = 'k-completed';
             INSERT INTO fenceq_jobs (queue, key, payload, state, run_at, attempt, max_attempts, created_at,
                                      settled_at, exhausted_at, claim_id, last_error)
             VALUES ('other', 'k-exhausted', x'04', 'exhausted', {T0}, 3, 3, {T0}, {T0}, {T0}, randomblob(16), 'gave up');"
        ))
        .unwrap();
    }
    let before = every_column(&path);
    assert_eq!(before.len(), 4);
    let clock = ManualClock::new(T0);
    let q = Queue::builder().path(&path).clock(clock.clone()).open().unwrap();
    assert_eq!(q.schema_version().unwrap(), SCHEMA_VERSION);
    // Schema 4's columns are unchanged; the columns later versions add come after them.
    let kept: Vec<Vec<String>> = every_column(&path).into_iter().map(|row| row[..before[0].len()].to_vec()).collect();
    assert_eq!(kept, before, "the upgrade changed no job row");
    let conn = Connection::open(&path).unwrap();
    assert_integrity(&conn);
    let queues: i64 = conn.query_row("SELECT count(*) FROM fenceq_queues", [], |r| r.get(0)).unwrap();
    assert_eq!(queues, 0, "no queue is paused by an upgrade");
    assert!(q.paused_queues().unwrap().is_empty());

    // The upgraded file pauses like a new one, and the old rows wait through the pause.
    assert!(q.pause("q").unwrap());
    assert!(q.claim("q", "new", LEASE).unwrap().is_none());
    assert!(q.unpause("q").unwrap());
    let pending = q.claim("q", "new", LEASE).unwrap().expect("the old pending row");
    assert_eq!(pending.payload, vec![1]);
    drop(q);
    let reopened = Queue::builder().path(&path).clock(clock).open().unwrap();
    assert_eq!(reopened.job(pending.id()).unwrap().unwrap().state, JobState::Running);
}

#[test]
fn the_schema_refuses_an_inconsistent_pause_row() {
    let q = temp_queue();
    q.add("x");
    let conn = Connection::open(q.path()).unwrap();
    for (row, constraint) in [
        ("('q', 5, 'unpause', 5, NULL, NULL)", "paused_iff_pause"),
        ("('q', NULL, 'pause', 5, NULL, NULL)", "paused_iff_pause"),
        ("('q', NULL, 'resume', 5, NULL, NULL)", "decision_valid"),
        ("('', NULL, 'unpause', 5, NULL, NULL)", "queue_named"),
        ("('q', 4, 'pause', 5, NULL, NULL)", "paused_when_decided"),
        ("('q', NULL, 'unpause', NULL, NULL, NULL)", "NOT NULL"),
    ] {
        let err = conn.execute_batch(&format!("INSERT INTO fenceq_queues VALUES {row}")).unwrap_err();
        assert!(err.to_string().contains(constraint), "{row}: {err}");
    }
    let rows: i64 = conn.query_row("SELECT count(*) FROM fenceq_queues", [], |r| r.get(0)).unwrap();
    assert_eq!(rows, 0);
    assert!(q.claim("q", "w", LEASE).unwrap().is_some(), "nothing was paused");
}

#[test]
fn a_pause_inside_the_queues_own_transaction_is_a_nested_write_and_changes_nothing() {
    let q = temp_queue();
    let queue = q.queue.clone();
    let err = q.transaction(|_tx| queue.pause("q")).unwrap_err();
    assert!(matches!(err, Error::NestedWrite), "{err:?}");
    let err = q.transaction(|_tx| queue.unpause("q")).unwrap_err();
    assert!(matches!(err, Error::NestedWrite), "{err:?}");
    assert!(!q.is_paused("q").unwrap());
}

#[test]
fn a_read_only_handle_sees_the_pause_and_cannot_change_it() {
    let q = temp_queue();
    q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
    assert!(q.operator("alice").note("maintenance").pause("q").unwrap());
    let read_only = Queue::builder().path(q.path()).read_only(true).open().unwrap();
    assert!(read_only.is_paused("q").unwrap());
    assert_eq!(read_only.stats().unwrap().queue("q").paused.and_then(|p| p.note).as_deref(), Some("maintenance"));
    let err = read_only.unpause("q").unwrap_err();
    assert!(matches!(err, Error::ReadOnly { .. }), "{err:?}");
    assert!(q.is_paused("q").unwrap(), "still paused");
}
