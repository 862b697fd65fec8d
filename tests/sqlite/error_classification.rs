//! Error classification (RELIABILITY.md §3, "Error classification"): real SQLite errors,
//! produced by SQLite itself wherever that is possible, mapped onto `fenceq::Error`.
//!
//! busy (5) and busy-snapshot (517) and locked (6) → `Busy` (retryable); full (13) →
//! `StorageFull`; out of memory (7) → `OutOfMemory`; too big (18) → `TooBig`; corrupt (11)
//! → `Corrupt` and not a database (26) → `NotADatabase` (both fatal); read-only (8) →
//! `ReadOnly`. I/O errors (10) cannot be provoked without a shim VFS; their mapping is
//! checked on a constructed error.
//!
//! Out of memory needs `PRAGMA hard_heap_limit`, which is process-global: that case runs in
//! a child process (this binary, run with `--ignored --exact` on the ignored entry point
//! `oom_child`).

use crate::support::*;
use fenceq::rusqlite::{self, ffi, limits::Limit, Connection, ErrorCode, OpenFlags};
use fenceq::{Error, NewJob, Queue};
use std::path::Path;
use std::time::Duration;

fn fatal(e: &Error) {
    assert!(!e.is_retryable(), "{e:?} must not be retryable");
}

#[test]
fn busy_5_from_a_competing_writer_is_busy_and_retryable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut holder = wal_table(&path);
    let other = Connection::open(&path).unwrap();
    other.busy_timeout(Duration::ZERO).unwrap();
    let tx = holder.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).unwrap();
    let e = other.execute_batch("BEGIN IMMEDIATE").unwrap_err();
    assert_eq!(sqlite_code(&e), (ErrorCode::DatabaseBusy, ffi::SQLITE_BUSY));
    let mapped = Error::from(e);
    assert!(matches!(mapped, Error::Busy { .. }), "{mapped:?}");
    assert!(mapped.is_retryable());
    drop(tx);
}

#[test]
fn busy_through_the_engine_is_typed_changes_nothing_and_succeeds_on_retry() {
    let q = temp_queue_with(|b| b.busy_timeout(Duration::from_millis(50)));
    q.add("before");
    let before = snapshot(&q.path());
    let mut holder = Connection::open(q.path()).unwrap();
    let tx = holder.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).unwrap();
    let err = q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err:?}");
    assert!(err.is_retryable());
    let claim = q.claim("q", "w", LEASE).unwrap_err();
    assert!(matches!(claim, Error::Busy { .. }), "{claim:?}");
    drop(tx);
    assert_eq!(snapshot(&q.path()), before, "the busy calls changed nothing");
    q.enqueue(NewJob::new("q", b"x".to_vec())).expect("the retry succeeds once the lock is free");
}

#[test]
fn busy_snapshot_517_from_a_deferred_read_then_write_is_busy_and_retryable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let reader = wal_table(&path);
    reader.busy_timeout(Duration::from_secs(5)).unwrap();
    let writer = Connection::open(&path).unwrap();
    reader.execute_batch("BEGIN DEFERRED").unwrap();
    let _: i64 = reader.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
    writer.execute("INSERT INTO t VALUES (1)", []).unwrap();
    let e = reader.execute("INSERT INTO t VALUES (2)", []).unwrap_err();
    assert_eq!(sqlite_code(&e), (ErrorCode::DatabaseBusy, 517), "BUSY_SNAPSHOT, without waiting for the busy timeout");
    let mapped = Error::from(e);
    assert!(matches!(mapped, Error::Busy { .. }) && mapped.is_retryable(), "{mapped:?}");
    reader.execute_batch("ROLLBACK").unwrap();
}

#[test]
fn locked_6_is_busy_and_retryable() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE t (v); INSERT INTO t VALUES (1), (2);").unwrap();
    let mut stmt = conn.prepare("SELECT v FROM t").unwrap();
    let mut rows = stmt.query([]).unwrap();
    assert!(rows.next().unwrap().is_some(), "a read in progress on the same connection");
    let e = conn.execute_batch("DROP TABLE t").unwrap_err();
    assert_eq!(sqlite_code(&e).0, ErrorCode::DatabaseLocked, "{e}");
    let mapped = Error::from(e);
    assert!(matches!(mapped, Error::Busy { .. }) && mapped.is_retryable(), "{mapped:?}");
}

#[test]
fn full_13_is_storage_full_and_fatal_for_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let conn = wal_table(&dir.path().join("db"));
    conn.query_row("PRAGMA max_page_count = 8", [], |_| Ok(())).unwrap();
    let mut last = None;
    for _ in 0..1000 {
        if let Err(e) = conn.execute("INSERT INTO t VALUES (randomblob(1000))", []) {
            last = Some(e);
            break;
        }
    }
    let e = last.expect("the page limit was reached");
    assert_eq!(sqlite_code(&e), (ErrorCode::DiskFull, ffi::SQLITE_FULL));
    let mapped = Error::from(e);
    assert!(matches!(mapped, Error::StorageFull { .. }), "{mapped:?}");
    fatal(&mapped);
    // Through the engine, with the statement named.
    let q = temp_queue_with(|b| b.max_page_count(24));
    let err = (0..1000).find_map(|i| q.enqueue(NewJob::new("q", vec![1; 1000]).key(format!("k{i}"))).err()).unwrap();
    assert!(matches!(err, Error::StorageFull { .. }), "{err:?}");
    assert!(err.to_string().contains("storage full"), "{err}");
}

#[test]
fn too_big_18_is_too_big() {
    let conn = Connection::open_in_memory().unwrap();
    conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, 1000).unwrap();
    let e = conn.query_row("SELECT zeroblob(5000)", [], |r| r.get::<_, Vec<u8>>(0)).unwrap_err();
    assert_eq!(sqlite_code(&e), (ErrorCode::TooBig, ffi::SQLITE_TOOBIG));
    let mapped = Error::from(e);
    assert!(matches!(mapped, Error::TooBig { .. }), "{mapped:?}");
    fatal(&mapped);
}

/// Overwrites every page of table `table`'s b-tree root with garbage, leaving the header.
fn corrupt_root_page(path: &Path, table: &str) {
    let (root, page_size): (i64, i64) = {
        let conn = Connection::open(path).unwrap();
        let root = conn.query_row("SELECT rootpage FROM sqlite_master WHERE name = ?1", [table], |r| r.get(0)).unwrap();
        let page_size = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
        (root, page_size)
    };
    assert!(root > 1);
    let mut bytes = std::fs::read(path).unwrap();
    let start = ((root - 1) * page_size) as usize;
    for b in &mut bytes[start..start + page_size as usize] {
        *b = 0xA5;
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn corrupt_11_is_corrupt_and_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE t (v); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) INSERT INTO t SELECT randomblob(100) FROM n;").unwrap();
    }
    corrupt_root_page(&path, "t");
    let conn = Connection::open(&path).unwrap();
    let e = conn.query_row("SELECT count(*), sum(length(v)) FROM t", [], |r| r.get::<_, i64>(0)).unwrap_err();
    assert_eq!(sqlite_code(&e).0, ErrorCode::DatabaseCorrupt, "{e}");
    let mapped = Error::from(e);
    assert!(matches!(mapped, Error::Corrupt { .. }), "{mapped:?}");
    fatal(&mapped);
}

#[test]
fn corrupt_queue_file_gives_corrupt_through_the_engine() {
    let q = temp_queue();
    q.enqueue_batch((0..500).map(|i| NewJob::new("q", vec![7; 200]).key(format!("k{i}")))).unwrap();
    let path = q.path();
    let clock = q.clock.clone();
    drop(q.queue); // the last connection checkpoints the WAL into the file
    assert!(
        !path.with_extension("db-wal").exists() || std::fs::metadata(path.with_extension("db-wal")).unwrap().len() == 0
    );
    corrupt_root_page(&path, "fenceq_jobs");
    let result = Queue::builder().path(&path).clock(clock).open().and_then(|q| {
        let stats = q.stats();
        let claim = q.claim("q", "w", LEASE);
        stats.and(claim.map(|_| ()))
    });
    let err = result.expect_err("a corrupt table cannot be read");
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    fatal(&err);
}

#[test]
fn not_a_database_26_is_not_a_database_and_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.db");
    std::fs::write(&path, "this is not an sqlite file at all. ".repeat(300)).unwrap();
    let conn = Connection::open(&path).unwrap();
    let e = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get::<_, i64>(0)).unwrap_err();
    assert_eq!(sqlite_code(&e), (ErrorCode::NotADatabase, ffi::SQLITE_NOTADB));
    let mapped = Error::from(e);
    assert!(matches!(mapped, Error::NotADatabase { .. }), "{mapped:?}");
    fatal(&mapped);
    let err = Queue::open(&path).unwrap_err();
    assert!(matches!(&err, Error::NotADatabase { path: p } if p.contains("garbage.db")), "{err:?}");
    fatal(&err);
}

#[test]
fn readonly_8_is_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    drop(wal_table(&path));
    let conn = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let e = conn.execute("INSERT INTO t VALUES (1)", []).unwrap_err();
    assert_eq!(sqlite_code(&e).0, ErrorCode::ReadOnly, "{e}");
    let mapped = Error::from(e);
    assert!(matches!(mapped, Error::ReadOnly { .. }), "{mapped:?}");
    fatal(&mapped);
    // Through the engine: a queue opened read-only (a `file:` URI) reads but refuses writes.
    let q = temp_queue();
    q.add("x");
    let path = q.path();
    let ro = Queue::builder().path(format!("file:{}?mode=ro", path.display())).open().unwrap();
    assert_eq!(ro.stats().unwrap().queue("q").pending, 1);
    let err = ro.enqueue(NewJob::new("q", b"y".to_vec())).unwrap_err();
    assert!(matches!(err, Error::ReadOnly { .. }), "{err:?}");
    assert_eq!(raw_count(&path, "pending"), 1);
}

/// An I/O error needs a failing disk or a shim VFS; the mapping is checked on the code
/// SQLite would return. fenceq has no variant of its own for it: it stays `Sqlite` with the
/// source attached, and is not retryable.
#[test]
fn ioerr_10_stays_a_wrapped_sqlite_error_with_its_source() {
    for extended in [ffi::SQLITE_IOERR, ffi::SQLITE_IOERR_WRITE, ffi::SQLITE_IOERR_FSYNC, ffi::SQLITE_IOERR_SHORT_READ]
    {
        let e = rusqlite::Error::SqliteFailure(ffi::Error::new(extended), None);
        let mapped = Error::from(e);
        match &mapped {
            Error::Sqlite { source, .. } => match &**source {
                rusqlite::Error::SqliteFailure(f, _) => {
                    assert_eq!((f.code, f.extended_code), (ErrorCode::SystemIoFailure, extended))
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
        fatal(&mapped);
    }
}

#[test]
fn a_directory_is_not_a_database_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = Queue::open(dir.path()).unwrap_err();
    fatal(&err);
    assert!(!matches!(err, Error::Busy { .. }), "{err:?}");
}

// ------------------------------------------------------------------------ out of memory

const OOM_CHILD: &str = "FENCEQ_CLASSIFY_OOM_CHILD";

/// Child side: sets the process-global heap limit and provokes SQLITE_NOMEM.
#[test]
#[ignore = "child process of nomem_7_is_out_of_memory; run by it with --ignored --exact"]
fn oom_child() {
    std::env::var(OOM_CHILD).expect("run by nomem_7_is_out_of_memory, which sets FENCEQ_CLASSIFY_OOM_CHILD");
    let conn = Connection::open_in_memory().unwrap();
    conn.query_row("PRAGMA hard_heap_limit = 4000000", [], |_| Ok(())).unwrap();
    let e = conn.query_row("SELECT length(randomblob(8000000))", [], |r| r.get::<_, i64>(0)).unwrap_err();
    assert_eq!(sqlite_code(&e), (ErrorCode::OutOfMemory, ffi::SQLITE_NOMEM));
    let mapped = Error::from(e);
    assert!(matches!(mapped, Error::OutOfMemory { .. }), "{mapped:?}");
    fatal(&mapped);
    // The connection stays usable.
    assert_eq!(conn.query_row("SELECT 1 + 1", [], |r| r.get::<_, i64>(0)).unwrap(), 2);
    println!("OOM-CHILD-OK");
}

#[test]
fn nomem_7_is_out_of_memory() {
    crate::support::run_child(concat!(module_path!(), "::oom_child"), OOM_CHILD, "OOM-CHILD-OK");
}
