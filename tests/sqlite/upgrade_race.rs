//! T9: the schema upgrader raced by processes (RELIABILITY.md §3 T9, recipe in §4).
//!
//! K processes (this test binary, run with `--ignored --exact` on the ignored entry point
//! `race_child`, its spec in `FENCEQ_RACE_CHILD`) spin until one shared wall-clock instant
//! (now + 150 ms) and then open the same file. Exit codes classify each child: 0 ok, 2
//! `duplicate column name`, 3 busy, 4 anything else. Every iteration must end with all zeros,
//! the target `user_version` (also as `schema_version_of` reads it), the schema of an
//! uncontended upgrade with every column exactly once (the columns of every migration among
//! them), the rows intact, `integrity_check = ok`, and a second open that changes nothing.
//!
//! Variants: an old file (each older level in turn), a fresh file, a fresh file whose first writer is in
//! rollback mode while the children switch it to WAL, and an old file whose column a foreign
//! writer adds (without bumping the version) while holding the write lock across the start.
//!
//! `FENCEQ_RACE_ITERS` (default 50) and `FENCEQ_RACE_PROCS` (default 8) size the main race.

use crate::support::{child_process, env_or, old_database, spin_until, wall_ms};
use fenceq::rusqlite::{Connection, TransactionBehavior};
use fenceq::{Error, Queue, SCHEMA_VERSION};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "FENCEQ_RACE_CHILD";
const CHILD: &str = concat!(module_path!(), "::race_child");

/// Child side: spins until the start instant, opens, exits with its classification.
#[test]
#[ignore = "child process of the race tests below; run by them with --ignored --exact"]
fn race_child() {
    let spec = std::env::var(CHILD_ENV).expect("run by the race tests, which set FENCEQ_RACE_CHILD");
    let (path, start) = spec.split_once('|').unwrap();
    let start: i64 = start.parse().unwrap();
    spin_until(start);
    let code = match Queue::open(path) {
        Ok(q) => match q.schema_version() {
            Ok(v) if v == SCHEMA_VERSION => 0,
            other => {
                eprintln!("race child: version {other:?}");
                4
            }
        },
        Err(e) if format!("{e:?}").contains("duplicate column") => {
            eprintln!("race child: {e:?}");
            2
        }
        Err(e @ Error::Busy { .. }) => {
            eprintln!("race child: {e:?}");
            3
        }
        Err(e) => {
            eprintln!("race child: {e:?}");
            4
        }
    };
    std::process::exit(code);
}

/// The children's exit codes, and what they wrote to stderr (their reasons), for the failure
/// message.
struct Race {
    codes: Vec<i32>,
    stderr: String,
}

/// Releases `processes` children at now + 150 ms on `path`, runs `meanwhile` (with the start
/// instant) in the parent, and returns the children's exit codes and stderr.
fn race(path: &Path, processes: usize, meanwhile: impl FnOnce(i64)) -> Race {
    let start = wall_ms() + 150;
    let children: Vec<_> = (0..processes)
        .map(|_| {
            child_process(CHILD)
                .env(CHILD_ENV, format!("{}|{start}", path.display()))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    meanwhile(start);
    let mut race = Race { codes: Vec::new(), stderr: String::new() };
    for child in children {
        // Each child ends on its own: the open is bounded by the busy timeout, the spin by 10 s.
        let out = child.wait_with_output().unwrap();
        race.codes.push(out.status.code().unwrap_or(-1));
        race.stderr.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    race
}

/// The schema as a whole: version, columns (each exactly once), triggers and indexes.
fn schema_of(path: &Path) -> (i64, Vec<String>, Vec<String>) {
    let conn = Connection::open(path).unwrap();
    let version = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    let columns = conn
        .prepare("SELECT name FROM pragma_table_info('fenceq_jobs') ORDER BY cid")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let objects = conn
        .prepare("SELECT type || ' ' || name FROM sqlite_master WHERE name LIKE 'fenceq%' ORDER BY 1")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    (version, columns, objects)
}

/// (key, state, payload, claim id) of every row, in id order.
type Row = (String, String, Vec<u8>, Option<Vec<u8>>);

fn rows(path: &Path) -> Vec<Row> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn.prepare("SELECT key, state, payload, claim_id FROM fenceq_jobs ORDER BY id").unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).unwrap().collect::<Result<_, _>>().unwrap()
}

/// The reference: what a single, uncontended open makes of the same starting point.
fn reference_schema(prepare: impl Fn(&Path)) -> (i64, Vec<String>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reference.db");
    prepare(&path);
    Queue::open(&path).unwrap();
    schema_of(&path)
}

fn check_after_race(
    path: &Path,
    race: &Race,
    reference: &(i64, Vec<String>, Vec<String>),
    with_rows: bool,
    label: &str,
) {
    let codes = &race.codes;
    assert!(
        codes.iter().all(|&c| c == 0),
        "{label}: exit codes {codes:?} (2 duplicate column, 3 busy, 4 other)\n{}",
        race.stderr
    );
    let schema = schema_of(path);
    assert_eq!(&schema, reference, "{label}: the schema equals an uncontended upgrade's");
    assert_eq!(schema.0, SCHEMA_VERSION, "{label}: user_version");
    assert_eq!(fenceq::SqliteStore::schema_version_of(path).unwrap(), SCHEMA_VERSION, "{label}: schema_version_of");
    for column in &schema.1 {
        assert_eq!(schema.1.iter().filter(|c| *c == column).count(), 1, "{label}: column {column} twice");
    }
    // Every migration's column is there (and, as every column, once), and its tables.
    for column in ["claim_id", "exhausted_at", "acknowledged_at", "decision"] {
        assert!(schema.1.iter().any(|c| c == column), "{label}: column {column} missing");
    }
    for table in ["fenceq_queues", "fenceq_attempts"] {
        assert!(schema.2.iter().any(|o| *o == format!("table {table}")), "{label}: table {table} missing");
    }
    let conn = Connection::open(path).unwrap();
    let integrity: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(integrity, "ok", "{label}");
    drop(conn);
    let before = rows(path);
    if with_rows {
        let keys: Vec<(&str, &str, &[u8])> =
            before.iter().map(|(k, s, p, _)| (k.as_str(), s.as_str(), p.as_slice())).collect();
        assert_eq!(
            keys,
            vec![
                ("k-pending", "pending", &[1u8][..]),
                ("k-running", "running", &[2][..]),
                ("k-completed", "completed", &[3][..])
            ],
            "{label}: rows intact"
        );
        assert!(before[1].3.is_some(), "{label}: the old running row got a claim id");
    }
    // A second run is a no-op.
    Queue::open(path).unwrap();
    assert_eq!(schema_of(path), schema, "{label}: second open");
    assert_eq!(rows(path), before, "{label}: second open changed rows");
}

#[test]
fn eight_processes_racing_the_upgrade_of_an_old_file_all_succeed() {
    let iterations = env_or("FENCEQ_RACE_ITERS", 50);
    let processes = env_or("FENCEQ_RACE_PROCS", 8);
    let started = Instant::now();
    // Every older level in turn: the upgrade from level 4 races one CREATE TABLE (paused
    // queues), the earlier ones race ALTER TABLEs too.
    let levels = SCHEMA_VERSION as usize - 1;
    let references: Vec<_> = (1..=levels).map(|v| reference_schema(|p| drop(old_database(p, v, "q")))).collect();
    assert!(references.iter().all(|r| *r == references[0]), "every level upgrades to one schema");
    let mut children = 0;
    for iteration in 0..iterations {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let version = 1 + iteration % levels;
        old_database(&path, version, "q");
        let run = race(&path, processes, |_| {});
        children += run.codes.len();
        check_after_race(&path, &run, &references[0], true, &format!("iteration {iteration} (from level {version})"));
    }
    println!(
        "upgrade race: {iterations} iterations x {processes} processes = {children} opens, 0 failures, {:.1?}",
        started.elapsed()
    );
}

#[test]
fn processes_racing_to_create_a_fresh_file_all_succeed() {
    let iterations = env_or("FENCEQ_RACE_FRESH_ITERS", 10);
    let processes = env_or("FENCEQ_RACE_PROCS", 8);
    let reference = reference_schema(|_| {});
    let started = Instant::now();
    for iteration in 0..iterations {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fresh.db");
        let run = race(&path, processes, |_| {});
        check_after_race(&path, &run, &reference, false, &format!("fresh iteration {iteration}"));
        let conn = Connection::open(&path).unwrap();
        let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
    }
    println!("fresh race: {iterations} x {processes}, {:.1?}", started.elapsed());
}

/// A fresh file whose first writer is another program in rollback-journal mode: it holds
/// the write lock across the start instant, so the children's `journal_mode = WAL` switch
/// meets SQLITE_BUSY (which does not call the busy handler) and must be retried.
#[test]
fn the_wal_switch_is_retried_while_a_rollback_mode_writer_holds_the_lock() {
    let iterations = env_or("FENCEQ_RACE_FRESH_ITERS", 10);
    let reference = reference_schema(|p| {
        Connection::open(p).unwrap().execute_batch("CREATE TABLE app (v)").unwrap();
    });
    for iteration in 0..iterations {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fresh.db");
        let mut app = Connection::open(&path).unwrap();
        app.execute_batch("PRAGMA journal_mode = DELETE; CREATE TABLE app (v)").unwrap();
        // The lock is taken before any child exists, so it is held at the start instant
        // however late the children are spawned on a loaded machine.
        let tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        tx.execute("INSERT INTO app VALUES (1)", []).unwrap();
        let run = race(&path, 4, move |start| {
            while wall_ms() < start + 100 {
                std::thread::sleep(Duration::from_millis(5));
            }
            tx.commit().unwrap();
        });
        drop(app);
        check_after_race(&path, &run, &reference, false, &format!("rollback-mode iteration {iteration}"));
        let conn = Connection::open(&path).unwrap();
        assert_eq!(conn.query_row("SELECT count(*) FROM app", [], |r| r.get::<_, i64>(0)).unwrap(), 1);
    }
}

/// A foreign writer (a hand-applied fix, an older tool) adds the level-2 column without
/// bumping `user_version`, holding the write lock across the start instant: the children
/// wait, then meet `duplicate column name`, re-check the column and count it as applied.
#[test]
fn a_column_added_by_a_foreign_writer_during_the_race_counts_as_applied() {
    let iterations = env_or("FENCEQ_RACE_FRESH_ITERS", 10);
    let reference = reference_schema(|p| drop(old_database(p, 1, "q")));
    for iteration in 0..iterations {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        old_database(&path, 1, "q");
        let mut foreign = Connection::open(&path).unwrap();
        // The column is added (uncommitted, under the write lock) before any child exists:
        // however late the children start, they meet the lock or the committed column.
        let tx = foreign.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        tx.execute_batch("ALTER TABLE fenceq_jobs ADD COLUMN claim_id BLOB").unwrap();
        let run = race(&path, 4, move |start| {
            while wall_ms() < start + 100 {
                std::thread::sleep(Duration::from_millis(5));
            }
            tx.commit().unwrap();
        });
        drop(foreign);
        check_after_race(&path, &run, &reference, false, &format!("foreign-column iteration {iteration}"));
        // The migration's own UPDATE still ran: the old running row carries a claim id.
        assert!(rows(&path)[1].3.is_some());
    }
}
