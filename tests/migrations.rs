//! The schema upgrader: databases left at every older version upgrade with their rows intact,
//! several processes racing the same upgrade all succeed, and files that are newer or not
//! databases at all are refused untouched.

mod common;

use common::*;
use fenceq::rusqlite::Connection;
use fenceq::{Error, JobState, Queue, SCHEMA_VERSION};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

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
    for column in ["claim_id", "exhausted_at", "acknowledged_at"] {
        assert_eq!(columns.iter().filter(|c| *c == column).count(), 1, "{column} exists exactly once");
    }
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
    let integrity: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(integrity, "ok");
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
    assert_eq!(fenceq::schema_version_of(&path).map_err(|e| e.to_string()), Err(err.to_string()));
}

// ------------------------------------------------------------------------ the upgrade race

const CHILD_ENV: &str = "FENCEQ_UPGRADE_RACE_CHILD";

/// Child side of the race: opens the database at the shared start instant. Exit code 0 ok,
/// 3 busy, 4 any other error.
#[test]
#[ignore = "child process of the race tests below; run by them with --ignored --exact"]
fn upgrade_race_child() {
    let spec = std::env::var(CHILD_ENV).expect("run by the race tests, which set FENCEQ_UPGRADE_RACE_CHILD");
    let (path, start) = spec.split_once('|').unwrap();
    let start: i64 = start.parse().unwrap();
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while now() < start && std::time::Instant::now() < deadline {
        std::hint::spin_loop();
    }
    let code = match Queue::open(path) {
        Ok(q) => match q.schema_version() {
            Ok(v) if v == SCHEMA_VERSION => 0,
            other => {
                eprintln!("child: version {other:?}");
                4
            }
        },
        Err(e @ Error::Busy { .. }) => {
            eprintln!("child: {e}");
            3
        }
        Err(e) => {
            eprintln!("child: {e:?}");
            4
        }
    };
    std::process::exit(code);
}

/// Releases `processes` copies of this test binary at one instant on `path`; returns their
/// exit codes.
pub fn race_open(path: &Path, processes: usize) -> Vec<i32> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let start = now + 300;
    let children: Vec<_> = (0..processes)
        .map(|_| {
            child_process("upgrade_race_child")
                .env(CHILD_ENV, format!("{}|{start}", path.display()))
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    children.into_iter().map(|mut c| c.wait().unwrap().code().unwrap_or(-1)).collect()
}

#[test]
fn processes_racing_the_upgrade_of_an_old_file_all_succeed() {
    for iteration in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        old_database(&path, 1, "q");
        let codes = race_open(&path, 6);
        assert!(codes.iter().all(|&c| c == 0), "iteration {iteration}: exit codes {codes:?}");
        assert_upgraded_with_rows_intact(&path);
    }
}

#[test]
fn processes_racing_to_create_a_fresh_file_all_succeed() {
    for iteration in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fresh.db");
        let codes = race_open(&path, 6);
        assert!(codes.iter().all(|&c| c == 0), "iteration {iteration}: exit codes {codes:?}");
        assert_eq!(fenceq::schema_version_of(&path).unwrap(), SCHEMA_VERSION);
    }
}
