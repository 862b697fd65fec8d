//! Online backups (`Queue::backup`, `fenceq::SqliteStore::backup_file`): consistent while writers keep
//! going, openable with `Queue::open`, owner-only and whole at the target or absent; and the
//! refusals of bad targets and settings, which leave nothing behind.

use crate::support::*;
use fenceq::rusqlite::Connection;
use fenceq::{BackupOptions, Cursor, Error, Job, JobId, JobState, ListFilter, NewJob, Queue, SqliteStore};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::time::Instant;

/// Every row of the queue at `path`, by id, read through `Queue::open` (which must work).
fn rows(queue: &Queue) -> BTreeMap<i64, Job> {
    let mut all = BTreeMap::new();
    let mut after = None;
    loop {
        let page = queue.list(&ListFilter { after, limit: 1000, ..ListFilter::default() }).unwrap();
        let Some(last) = page.last() else { return all };
        after = Some(Cursor(last.id.0));
        all.extend(page.into_iter().map(|job| (job.id.0, job)));
    }
}

/// A raw connection's `PRAGMA integrity_check`, and the file's journal mode.
fn check_file(path: &Path) -> String {
    let conn = Connection::open(path).unwrap();
    assert_integrity(&conn);
    conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap()
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// Adds `n` jobs with payloads of `size` bytes (so the file has many pages).
fn fill(queue: &Queue, n: usize, size: usize) {
    let jobs: Vec<NewJob> = (0..n).map(|i| NewJob::new("bulk", vec![b'x'; size]).key(format!("bulk-{i}"))).collect();
    queue.enqueue_batch(jobs).unwrap();
}

// ------------------------------------------------------------------------------- under load

const PRODUCERS: usize = 2;
const WORKERS: usize = 2;
const PER_PRODUCER: usize = 600;

/// What the threads have seen acknowledged so far: enqueues that returned, completions that
/// returned (with the attempt they completed).
#[derive(Default)]
struct History {
    enqueued: BTreeSet<i64>,
    completed: BTreeMap<i64, u32>,
}

#[test]
fn a_backup_under_load_restores_to_a_consistent_prefix_of_the_history() {
    let q = temp_queue();
    let history = Arc::new(Mutex::new(History::default()));
    let total = PRODUCERS * PER_PRODUCER;
    // Every thread reports once it has done a quarter of its work; the backup starts then,
    // and the threads go on to their fixed end meanwhile.
    let (quarter_tx, quarter_rx) = mpsc::channel();
    let start = Arc::new(Barrier::new(PRODUCERS + WORKERS));
    let threads: Vec<_> = (0..PRODUCERS + WORKERS)
        .map(|t| {
            let (queue, history, quarter, start) =
                (q.queue.clone(), history.clone(), quarter_tx.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                if t < PRODUCERS {
                    for i in 0..PER_PRODUCER {
                        // ~1 KiB payloads: the file has hundreds of pages, the copy many steps.
                        let payload = format!("{t}:{i}:{}", "x".repeat(1000)).into_bytes();
                        let job = NewJob::new("q", payload).key(format!("p{t}-{i}"));
                        let id = queue.enqueue(job).unwrap().id();
                        history.lock().unwrap().enqueued.insert(id.0);
                        if i == PER_PRODUCER / 4 {
                            quarter.send(()).unwrap();
                        }
                    }
                } else {
                    // The workers share the completions: each claims until every job is done
                    // (bounded by the hang guard, never by a timing assumption).
                    let deadline = Instant::now() + HANG_GUARD;
                    let mut mine = 0;
                    loop {
                        let done = history.lock().unwrap().completed.len();
                        if done == total {
                            break;
                        }
                        assert!(Instant::now() < deadline, "the workers never finished");
                        let Some(job) = queue.claim("q", &format!("w{t}"), LEASE).unwrap() else { continue };
                        let token = job.token();
                        queue.complete(&token).unwrap();
                        history.lock().unwrap().completed.insert(token.id.0, token.attempt);
                        mine += 1;
                        if mine == total / WORKERS / 4 {
                            quarter.send(()).unwrap();
                        }
                    }
                    if mine < total / WORKERS / 4 {
                        quarter.send(()).unwrap(); // the other worker did most of the work
                    }
                }
            })
        })
        .collect();
    for _ in 0..PRODUCERS + WORKERS {
        quarter_rx.recv_timeout(HANG_GUARD).expect("every thread reached a quarter of its work");
    }
    let before: (BTreeSet<i64>, BTreeMap<i64, u32>) = {
        let h = history.lock().unwrap();
        (h.enqueued.clone(), h.completed.clone())
    };
    let target = q.dir.path().join("under-load.db");
    let options = BackupOptions { pages_per_step: 4, ..BackupOptions::default() };
    let report = q.backup_with(&target, &options).unwrap();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(report.path, target);
    assert!(report.pages > 0 && report.bytes > 0 && report.steps >= report.pages.div_ceil(4), "{report:?}");

    // The file: whole, consistent, openable by fenceq.
    check_file(&target);
    let restored = Queue::builder().path(&target).clock(q.clock.clone()).open().unwrap();
    let backup = rows(&restored);
    let live = rows(&q.queue);
    assert_eq!(live.len(), total);

    // Every row is a legal one, and a prefix of the commit order: ids 1..=n without a gap
    // (ids are given in commit order), every acknowledged enqueue before the backup is in it.
    for job in backup.values() {
        fenceq_conformance::model::check_row(job).unwrap();
    }
    let ids: Vec<i64> = backup.keys().copied().collect();
    assert_eq!(ids, (1..=ids.len() as i64).collect::<Vec<_>>(), "the backup's ids have a gap");
    assert!(before.0.iter().all(|id| backup.contains_key(id)), "an acknowledged enqueue is missing");

    for (id, job) in &backup {
        // The same job as the live one (its intake is immutable), at an earlier or equal point.
        let now = &live[id];
        assert_eq!((&job.queue, &job.key, &job.payload), (&now.queue, &now.key, &now.payload));
        assert!(job.attempt <= now.attempt, "job {id} went back in time: {job:?} vs {now:?}");
        match job.state {
            JobState::Pending => assert_eq!(job.attempt, 0),
            JobState::Running => assert!(job.attempt >= 1 && job.claim_id.is_some()),
            // No completion without its claim, and the one the live queue kept.
            JobState::Completed => {
                assert!(job.attempt >= 1 && job.claim_id.is_some(), "completed without a claim: {job:?}");
                assert_eq!((now.state, now.attempt, now.claim_id), (JobState::Completed, job.attempt, job.claim_id));
            }
            other => panic!("job {id} is {other} in the backup; no thread moves jobs there"),
        }
    }
    for (id, attempt) in &before.1 {
        let job = &backup[id];
        assert_eq!((job.state, job.attempt), (JobState::Completed, *attempt), "an acknowledged completion is missing");
    }

    // The restored queue works: its pending jobs can be claimed and completed, and intake
    // still deduplicates by the backed-up keys.
    let pending = restored.stats().unwrap().queue("q").pending;
    if let Some(job) = restored.claim("q", "after-restore", LEASE).unwrap() {
        restored.complete(&job.token()).unwrap();
        assert!(pending >= 1);
    }
    let key = backup.values().next().and_then(|job| job.key.clone()).unwrap();
    assert!(restored.enqueue(NewJob::new("q", b"again".to_vec()).key(key)).unwrap().is_duplicate());
}

#[test]
fn a_backup_needs_no_write_lock_and_copies_only_committed_work() {
    let q = temp_queue();
    let committed = q.add("committed");
    let target = q.dir.path().join("during-transaction.db");
    let (in_tx, in_tx_rx) = mpsc::channel();
    let (done, done_rx) = mpsc::channel::<()>();
    let queue = q.queue.clone();
    // Another thread holds the queue's write transaction (with an uncommitted job) for as
    // long as the backup runs: a backup that needed the writer would wait for it forever.
    let writer = std::thread::spawn(move || {
        queue
            .transaction(|tx| {
                let id = queue.enqueue_tx(tx, NewJob::new("q", b"uncommitted".to_vec()))?.id();
                in_tx.send(id).unwrap();
                done_rx.recv_timeout(HANG_GUARD).expect("the backup finished");
                Ok(id)
            })
            .unwrap()
    });
    let uncommitted = in_tx_rx.recv_timeout(HANG_GUARD).unwrap();
    let report = q.backup(&target).unwrap();
    done.send(()).unwrap();
    assert_eq!(writer.join().unwrap(), uncommitted);

    let restored = Queue::open(&report.path).unwrap();
    assert_eq!(restored.job(committed).unwrap().unwrap().payload, b"committed");
    assert!(restored.job(uncommitted).unwrap().is_none(), "the backup holds uncommitted work");
    assert_eq!(q.job(uncommitted).unwrap().unwrap().payload, b"uncommitted");
}

#[test]
fn a_backup_finishes_while_a_writer_never_pauses() {
    let q = temp_queue();
    fill(&q, 100, 4096);
    let (done, done_rx) = mpsc::channel::<()>();
    let (started, started_rx) = mpsc::channel();
    let queue = q.queue.clone();
    // Commits back to back until the backup has finished. A copy that SQLite restarted at
    // every commit of another connection would never finish (it would time out, or the
    // writer would reach its bound first).
    let writer = std::thread::spawn(move || {
        let mut commits = 0_u64;
        while done_rx.try_recv().is_err() {
            assert!(commits < 200_000, "the backup never finished while the writer kept committing");
            queue.enqueue(NewJob::new("busy", b"tick".to_vec())).unwrap();
            commits += 1;
            if commits == 1 {
                started.send(()).unwrap();
            }
        }
        commits
    });
    started_rx.recv_timeout(HANG_GUARD).unwrap();
    let options = BackupOptions { pages_per_step: 4, time_limit: HANG_GUARD, ..BackupOptions::default() };
    let result = q.backup_with(q.dir.path().join("busy.db"), &options);
    done.send(()).unwrap();
    let commits = writer.join().unwrap();
    let report = result.unwrap();
    assert!(report.steps > 10, "{report:?}");
    let restored = Queue::open(&report.path).unwrap();
    let copied = restored.stats().unwrap().queue("busy").pending;
    assert!(copied >= 1 && copied <= commits, "{copied} of {commits}");
    assert_eq!(restored.stats().unwrap().queue("bulk").pending, 100);
}

// ------------------------------------------------------------------------------- the file

#[test]
fn a_backup_is_owner_only_whole_and_leaves_no_temporary_file() {
    use std::os::unix::fs::PermissionsExt;
    let q = temp_queue();
    fill(&q, 200, 4096);
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("copy.db");
    let report = q.backup(&target).unwrap();

    assert_eq!(names(out.path()), ["copy.db"], "a temporary or journal file was left behind");
    let meta = std::fs::metadata(&target).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), report.bytes);
    let page_size: i64 = Connection::open(&target).unwrap().query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
    assert_eq!(report.pages * page_size as u64, report.bytes);
    // The copy keeps the source's WAL mode, and every row.
    assert_eq!(check_file(&target), "wal");
    assert_eq!(snapshot(&target), snapshot(&q.path()));
    assert_eq!(fenceq::SqliteStore::schema_version_of(&target).unwrap(), fenceq::SCHEMA_VERSION);
}

#[test]
fn an_in_memory_queue_backs_up_to_a_file() {
    let queue = Queue::open_in_memory().unwrap();
    let id = queue.enqueue(NewJob::new("q", b"in memory".to_vec()).key("k")).unwrap().id();
    let dir = tempfile::tempdir().unwrap();
    let report = queue.backup(dir.path().join("memory.db")).unwrap();
    check_file(&report.path);
    let restored = Queue::open(&report.path).unwrap();
    assert_eq!(restored.job(id).unwrap().unwrap().payload, b"in memory");
    assert_eq!(restored.find_by_key("q", "k").unwrap(), Some(id));

    // Its only connection is held by a closure: the backup would wait for itself.
    let nested = queue.with_connection(|_| Ok(queue.backup(dir.path().join("nested.db"))));
    assert!(matches!(nested, Ok(Err(Error::NestedWrite))), "{nested:?}");
    assert!(!dir.path().join("nested.db").exists());
}

#[test]
fn backup_file_copies_an_old_schema_without_upgrading_it() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.db");
    drop(old_database(&old, 2, "q"));
    let before = std::fs::read(&old).unwrap();
    let target = dir.path().join("before-upgrade.db");
    SqliteStore::backup_file(&old, &target, &BackupOptions::default()).unwrap();
    assert_eq!(fenceq::SqliteStore::schema_version_of(&old).unwrap(), 2);
    assert_eq!(fenceq::SqliteStore::schema_version_of(&target).unwrap(), 2);
    assert_eq!(std::fs::read(&old).unwrap(), before, "the source changed");
    assert_eq!(snapshot(&target), snapshot(&old));
    // The old copy upgrades like the original would.
    let upgraded = Queue::open(&target).unwrap();
    assert_eq!(upgraded.schema_version().unwrap(), fenceq::SCHEMA_VERSION);
    assert_eq!(upgraded.stats().unwrap().queue("q").total(), 3);
}

#[test]
fn backup_file_copies_a_rollback_journal_database_step_by_step() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("rollback.db");
    let conn = Connection::open(&source).unwrap();
    let mode: String = conn.query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "delete");
    conn.execute_batch(
        "CREATE TABLE t (v BLOB);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100)
         INSERT INTO t SELECT randomblob(1000) FROM n;",
    )
    .unwrap();
    let target = dir.path().join("copy.db");
    let report =
        SqliteStore::backup_file(&source, &target, &BackupOptions { pages_per_step: 8, ..BackupOptions::default() })
            .unwrap();
    assert!(report.steps >= report.pages.div_ceil(8), "{report:?}");
    assert_eq!(check_file(&target), "delete");
    let count: i64 = Connection::open(&target).unwrap().query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(count, 100);
}

// ------------------------------------------------------------------------------- bad input

#[test]
fn an_existing_target_is_refused_and_left_untouched_unless_replaced() {
    let q = temp_queue();
    let first = q.add("first");
    let target = q.dir.path().join("copy.db");
    std::fs::write(&target, b"an older backup").unwrap();

    let err = q.backup(&target).unwrap_err();
    assert!(matches!(&err, Error::InvalidInput { what: "backup target", .. }), "{err:?}");
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(std::fs::read(&target).unwrap(), b"an older backup");

    // With replace, the new backup takes its place whole.
    let second = q.add("second");
    q.backup_with(&target, &BackupOptions { replace: true, ..BackupOptions::default() }).unwrap();
    let restored = Queue::open(&target).unwrap();
    assert!(restored.job(first).unwrap().is_some() && restored.job(second).unwrap().is_some());
    assert_eq!(names(q.dir.path()).iter().filter(|n| n.contains("fenceq-backup")).count(), 0);
}

#[test]
fn a_directory_a_nameless_path_and_the_database_itself_are_refused() {
    let q = temp_queue();
    q.add("x");
    let before = snapshot(&q.path());
    let replace = BackupOptions { replace: true, ..BackupOptions::default() };
    let db = q.path();
    let wal = q.dir.path().join("queue.db-wal");
    let refused = [
        (q.dir.path().to_path_buf(), "is a directory"),
        (q.dir.path().join(".."), "has no file name"),
        (db.clone(), "is the database being backed up"),
        (wal, "is the database being backed up"),
    ];
    for (target, says) in refused {
        let err = q.backup_with(&target, &replace).unwrap_err();
        assert!(matches!(&err, Error::InvalidInput { what: "backup target", .. }), "{target:?}: {err:?}");
        assert!(err.to_string().contains(says), "{target:?}: {err}");
    }
    // The same, through a path that spells the database's directory another way.
    let other_spelling = q.dir.path().join(".").join("queue.db");
    assert!(matches!(q.backup_with(&other_spelling, &replace), Err(Error::InvalidInput { .. })));
    assert_eq!(snapshot(&db), before);
    assert_eq!(q.job(JobId(1)).unwrap().unwrap().payload, b"x");
}

#[test]
fn a_missing_or_unwritable_directory_is_a_backup_write_error() {
    use std::os::unix::fs::PermissionsExt;
    let q = temp_queue();
    q.add("x");
    let missing = q.dir.path().join("no-such-dir").join("copy.db");
    let err = q.backup(&missing).unwrap_err();
    assert!(
        matches!(&err, Error::BackupWrite { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    assert!(err.to_string().contains("no-such-dir"), "{err}");

    let locked = q.dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
    // root ignores directory permissions; sysfs refuses new files even to root.
    let unwritable = if std::fs::File::create(locked.join("probe")).is_err() {
        locked.clone()
    } else if Path::new("/sys").is_dir() {
        Path::new("/sys").to_path_buf()
    } else {
        eprintln!("skipped: this user can write every directory");
        return;
    };
    let err = q.backup(unwritable.join("copy.db")).unwrap_err();
    assert!(matches!(&err, Error::BackupWrite { .. }), "{err:?}");
    assert!(!unwritable.join("copy.db").exists());
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
}

#[test]
fn settings_out_of_range_are_refused_before_anything_is_written() {
    let q = temp_queue();
    let target = q.dir.path().join("copy.db");
    let bad = [
        BackupOptions { pages_per_step: 0, ..BackupOptions::default() },
        BackupOptions { pages_per_step: u32::MAX, ..BackupOptions::default() },
        BackupOptions { time_limit: std::time::Duration::ZERO, ..BackupOptions::default() },
        BackupOptions { time_limit: std::time::Duration::from_secs(2 * 86_400), ..BackupOptions::default() },
    ];
    for options in bad {
        let err = q.backup_with(&target, &options).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{options:?}: {err:?}");
        let err = SqliteStore::backup_file(q.path(), &target, &options).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{options:?}: {err:?}");
    }
    assert!(!target.exists());
}

#[test]
fn a_time_limit_that_runs_out_leaves_nothing_behind() {
    let q = temp_queue();
    // 10,000 pages one page per step: far more than a millisecond's work.
    fill(&q, 1000, 40_000);
    let target = q.dir.path().join("slow.db");
    let options = BackupOptions { pages_per_step: 1, time_limit: std::time::Duration::from_millis(1), replace: false };
    let err = q.backup_with(&target, &options).unwrap_err();
    let Error::BackupTimedOut { copied_pages, total_pages, .. } = err else { panic!("{err:?}") };
    assert!(copied_pages < total_pages, "{copied_pages} of {total_pages}");
    assert!(!target.exists());
    assert_eq!(names(q.dir.path()).iter().filter(|n| n.contains("fenceq-backup")).count(), 0);
    // The queue is unaffected, and a backup with time to spare succeeds.
    q.add("after");
    q.backup(&target).unwrap();
    check_file(&target);
}

#[test]
fn backup_file_refuses_a_missing_source_a_directory_and_a_non_database() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("copy.db");
    let options = BackupOptions::default();
    let err = SqliteStore::backup_file(dir.path().join("missing.db"), &target, &options).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput { what: "backup source", .. }) && err.to_string().contains("no database")
    );
    let err = SqliteStore::backup_file(dir.path(), &target, &options).unwrap_err();
    assert!(matches!(&err, Error::InvalidInput { what: "backup source", .. }), "{err:?}");
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![0x5a; 8192]).unwrap();
    let err = SqliteStore::backup_file(&garbage, &target, &options).unwrap_err();
    assert!(matches!(&err, Error::NotADatabase { path } if path.contains("garbage.db")), "{err:?}");
    assert_eq!(std::fs::read(&garbage).unwrap(), vec![0x5a; 8192]);
    assert_eq!(names(dir.path()), ["garbage.db"]);
}
