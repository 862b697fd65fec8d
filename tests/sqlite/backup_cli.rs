//! `fenceq backup OUT` and `--backup PATH` on the commands that change rows, run as a
//! process against temporary databases filled through the library.
#![cfg(feature = "cli")]

use assert_cmd::Command;
use fenceq::{JobId, JobState, NewJob, Queue, SCHEMA_VERSION};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

use crate::support::LEASE;

/// Exit code, stdout and stderr of `fenceq ARGS`, run in `cwd`.
fn fenceq(cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("fenceq").unwrap().current_dir(cwd).args(args).output().unwrap();
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
    (out.status.code().expect("exited"), text(out.stdout), text(out.stderr))
}

/// Runs `fenceq --db DB ARGS` in the database's directory; asserts success and no stderr.
fn ok(db: &Path, args: &[&str]) -> String {
    let (code, stdout, stderr) = fenceq(db.parent().unwrap(), &[&["--db", db.to_str().unwrap()], args].concat());
    assert!(code == 0 && stderr.is_empty(), "{args:?}: exit {code}\n{stdout}\n{stderr}");
    stdout
}

/// Runs `fenceq --db DB ARGS`; asserts exit 1 with one `error:` line, no panic; returns it.
fn refused(db: &str, cwd: &Path, args: &[&str]) -> String {
    let (code, stdout, stderr) = fenceq(cwd, &[&["--db", db], args].concat());
    assert_eq!(code, 1, "{args:?}\n{stdout}\n{stderr}");
    assert!(stderr.starts_with("error: ") && stderr.lines().count() == 1, "{stderr:?}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

fn db_path(dir: &Path) -> String {
    dir.join("queue.db").to_str().unwrap().to_string()
}

/// A queue with one pending job and one unacknowledged exhaustion (ids returned).
fn queue_with_jobs(dir: &Path) -> (Queue, JobId, JobId) {
    let queue = Queue::open(dir.join("queue.db")).unwrap();
    let exhausted = queue.enqueue(NewJob::new("q", b"dead".to_vec())).unwrap().id();
    let claim = queue.claim("q", "w", LEASE).unwrap().unwrap();
    queue.exhaust(&claim.token(), "gave up").unwrap();
    let pending = queue.enqueue(NewJob::new("q", b"live".to_vec()).key("k")).unwrap().id();
    (queue, pending, exhausted)
}

fn state(path: &Path, id: JobId) -> (JobState, bool) {
    let job = Queue::builder().path(path).read_only(true).open().unwrap().job(id).unwrap().unwrap();
    (job.state, job.acknowledged_at.is_some())
}

#[test]
fn backup_writes_a_whole_owner_only_copy_and_never_overwrites_unless_told() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (_queue, pending, exhausted) = queue_with_jobs(dir.path());
    let db = dir.path().join("queue.db");
    let out = dir.path().join("copy.db");

    let line = ok(&db, &["backup", out.to_str().unwrap()]);
    assert!(line.starts_with("backed up ") && line.contains("copy.db") && line.contains("pages"), "{line}");
    assert_eq!(std::fs::metadata(&out).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(state(&out, pending), (JobState::Pending, false));
    assert_eq!(state(&out, exhausted), (JobState::Exhausted, false));

    // An existing file is refused untouched; --replace replaces it.
    std::fs::write(&out, b"older").unwrap();
    let err = refused(&db_path(dir.path()), dir.path(), &["backup", out.to_str().unwrap()]);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"older");
    let json: Value =
        serde_json::from_str(&ok(&db, &["backup", out.to_str().unwrap(), "--replace", "--json"])).unwrap();
    assert_eq!(json["command"], "backup");
    assert_eq!(json["backup"]["path"], out.to_str().unwrap());
    assert!(json["backup"]["pages"].as_u64().unwrap() > 0);
    assert_eq!(json["backup"]["bytes"].as_u64().unwrap(), std::fs::metadata(&out).unwrap().len());
    assert_eq!(state(&out, pending), (JobState::Pending, false));

    // Bad input: no database, a directory as OUT, a missing directory, a bad time limit.
    let missing = dir.path().join("missing.db");
    let err = refused(missing.to_str().unwrap(), dir.path(), &["backup", "x.db"]);
    assert!(err.contains("no database at"), "{err}");
    let err = refused(&db_path(dir.path()), dir.path(), &["backup", dir.path().to_str().unwrap()]);
    assert!(err.contains("is a directory"), "{err}");
    let err = refused(&db_path(dir.path()), dir.path(), &["backup", "no-such-dir/x.db"]);
    assert!(err.contains("cannot write the backup") && err.contains("No such file"), "{err}");
    let (code, _, _) = fenceq(dir.path(), &["--db", &db_path(dir.path()), "backup", "y.db", "--time-limit", "soon"]);
    assert_eq!(code, 2);
    let err = refused(&db_path(dir.path()), dir.path(), &["backup", "y.db", "--time-limit", "2d"]);
    assert!(err.contains("backup time limit"), "{err}");
    assert!(!missing.exists() && !dir.path().join("x.db").exists() && !dir.path().join("y.db").exists());
}

#[test]
fn a_postgres_url_is_told_to_use_pg_dump_and_nothing_is_created() {
    let cwd = tempfile::tempdir().unwrap();
    for url in ["postgres://ops:s3cret@db.internal/bot", "postgresql://ops:s3cret@db.internal/bot"] {
        let err = refused(url, cwd.path(), &["backup", "out.db"]);
        assert!(err.contains("PostgreSQL") && err.contains("pg_dump"), "{err}");
        assert!(!err.contains("s3cret"), "the URL's password was printed: {err}");
        // A changing command with --backup says the same kind of thing.
        let err = refused(url, cwd.path(), &["cancel", "1", "--backup", "out.db"]);
        assert!(err.contains("PostgreSQL") && err.contains("pg_dump") && !err.contains("s3cret"), "{err}");
        let err = refused(url, cwd.path(), &["migrate", "--backup", "out.db"]);
        assert!(err.contains("PostgreSQL"), "{err}");
    }
    let left: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().collect();
    assert!(left.is_empty(), "files were created: {left:?}");
}

#[test]
fn backup_before_cancel_holds_the_state_before_the_change() {
    let dir = tempfile::tempdir().unwrap();
    let (_queue, pending, _) = queue_with_jobs(dir.path());
    let db = dir.path().join("queue.db");
    let before = dir.path().join("before-cancel.db");

    let out = ok(&db, &["cancel", &pending.to_string(), "--backup", before.to_str().unwrap()]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("backed up ") && lines[0].contains("before the change"), "{out}");
    assert!(lines[1].starts_with("cancelled job"), "{out}");
    assert_eq!(state(&db, pending), (JobState::Cancelled, false));
    assert_eq!(state(&before, pending), (JobState::Pending, false));
}

#[test]
fn backup_before_ack_all_holds_the_unacknowledged_exhaustions() {
    let dir = tempfile::tempdir().unwrap();
    let (_queue, _, exhausted) = queue_with_jobs(dir.path());
    let db = dir.path().join("queue.db");
    let before = dir.path().join("before-ack.db");

    let json =
        ok(&db, &["ack", "--all", "--queue", "q", "--expect", "1", "--json", "--backup", before.to_str().unwrap()]);
    let json: Value = serde_json::from_str(&json).unwrap();
    assert_eq!((json["changed"].as_u64(), json["backup"]["path"].as_str()), (Some(1), before.to_str()));
    assert_eq!(state(&db, exhausted), (JobState::Exhausted, true));
    assert_eq!(state(&before, exhausted), (JobState::Exhausted, false));

    // Without --backup the document says so.
    let json = ok(&db, &["reap", "--json"]);
    assert_eq!(serde_json::from_str::<Value>(&json).unwrap()["backup"], Value::Null);
}

#[test]
fn a_backup_that_fails_changes_nothing_and_a_dry_run_takes_none() {
    let dir = tempfile::tempdir().unwrap();
    let (_queue, pending, exhausted) = queue_with_jobs(dir.path());
    let db = db_path(dir.path());
    let taken = dir.path().join("taken.db");
    std::fs::write(&taken, b"an older backup").unwrap();

    let err = refused(&db, dir.path(), &["cancel", &pending.to_string(), "--backup", taken.to_str().unwrap()]);
    assert!(err.contains("--backup failed; nothing was changed") && err.contains("already exists"), "{err}");
    let err = refused(&db, dir.path(), &["replay", &exhausted.to_string(), "--backup", "no-such-dir/b.db"]);
    assert!(err.contains("--backup failed; nothing was changed"), "{err}");
    let err = refused(&db, dir.path(), &["prune", "--older-than", "0s", "--backup", dir.path().to_str().unwrap()]);
    assert!(err.contains("is a directory"), "{err}");
    let db = Path::new(&db);
    assert_eq!(state(db, pending), (JobState::Pending, false));
    assert_eq!(state(db, exhausted), (JobState::Exhausted, false));
    assert_eq!(std::fs::read(&taken).unwrap(), b"an older backup");

    // A change whose guards already fail read-only takes no backup: the wrong state, an
    // --expect that the preview does not meet.
    let wasted = dir.path().join("wasted.db");
    let wasted_arg = wasted.to_str().unwrap();
    let db_arg = db.to_str().unwrap();
    let err = refused(db_arg, dir.path(), &["replay", &pending.to_string(), "--backup", wasted_arg]);
    assert!(err.contains("is pending; replay needs an exhausted job"), "{err}");
    let err = refused(db_arg, dir.path(), &["cancel", &exhausted.to_string(), "--backup", wasted_arg]);
    assert!(err.contains("is exhausted; cancel needs"), "{err}");
    let err = refused(db_arg, dir.path(), &["ack", "--all", "--queue", "q", "--expect", "5", "--backup", wasted_arg]);
    assert!(err.contains("--expect 5 but 1 job would change"), "{err}");
    let err = refused(db_arg, dir.path(), &["reap", "--expect", "2", "--backup", wasted_arg]);
    assert!(err.contains("--expect 2 but 0 jobs would change"), "{err}");
    assert!(!wasted.exists(), "a refused change took a backup");
    assert_eq!(state(db, exhausted), (JobState::Exhausted, false));

    let not_taken = dir.path().join("dry.db");
    let out = ok(db, &["cancel", &pending.to_string(), "--dry-run", "--backup", not_taken.to_str().unwrap()]);
    assert!(out.starts_with("dry run: "), "{out}");
    assert!(!not_taken.exists(), "a dry run took a backup");

    // Enqueue into a missing database: there is nothing to back up, and nothing is created.
    let missing = dir.path().join("new.db");
    let err = refused(
        missing.to_str().unwrap(),
        dir.path(),
        &["enqueue", "--queue", "q", "--payload", "x", "--backup", "b.db"],
    );
    assert!(err.contains("no database at") && err.contains("to back up"), "{err}");
    assert!(!missing.exists() && !dir.path().join("b.db").exists());
}

#[test]
fn migrate_backup_keeps_the_file_as_it_was_before_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    {
        let conn = fenceq::rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
        conn.execute_batch(include_str!("../../schema/sqlite/0001_create_jobs.sql")).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
    }
    let before = dir.path().join("before-migrate.db");
    let out = ok(&db, &["migrate", "--backup", before.to_str().unwrap()]);
    assert!(out.contains("before the change") && out.contains("(upgraded)"), "{out}");
    assert_eq!(fenceq::SqliteStore::schema_version_of(&before).unwrap(), 1);
    assert_eq!(fenceq::SqliteStore::schema_version_of(&db).unwrap(), SCHEMA_VERSION);
}

#[test]
fn every_command_that_changes_rows_takes_backup_and_no_reading_command_does() {
    let dir = tempfile::tempdir().unwrap();
    let help = |command: &str| {
        let args: Vec<&str> = command.split(' ').chain(["--help"]).collect();
        let (code, stdout, _) = fenceq(dir.path(), &args);
        assert_eq!(code, 0);
        stdout
    };
    for command in [
        "enqueue",
        "ack",
        "replay",
        "resolve",
        "cancel",
        "reap",
        "prune",
        "migrate",
        "pause",
        "unpause",
        "backoff clear",
        "limit set",
        "limit clear",
        "group-policy",
    ] {
        let help = help(command);
        // (`migrate` changes the schema, not a count of rows: it has no --expect.)
        let expect = (command != "migrate").then_some("--expect <N>");
        for option in ["--backup <PATH>", "--dry-run"].into_iter().chain(expect) {
            assert!(help.contains(option), "{command} has no {option}");
        }
    }
    for command in
        ["stats", "list", "show", "exhausted", "unknown", "backup", "groups", "schedules", "limit show", "backoff show"]
    {
        assert!(!help(command).contains("--backup <PATH>"), "{command} should not take --backup");
    }
}

/// `refused`, bounded: a command that blocks is killed and fails the test instead of hanging.
fn refused_within(db: &str, cwd: &Path, args: &[&str]) -> String {
    let out = Command::cargo_bin("fenceq")
        .unwrap()
        .current_dir(cwd)
        .args([&["--db", db], args].concat())
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let code = out.status.code().unwrap_or_else(|| panic!("fenceq --db {db} {args:?} hung and was killed"));
    assert_eq!(code, 1, "{args:?}\n{stderr}");
    assert!(stderr.starts_with("error: ") && stderr.lines().count() == 1, "{stderr:?}");
    stderr
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn backup_refuses_the_database_s_own_journal_wal_and_shm_names_up_front() {
    let dir = tempfile::tempdir().unwrap();
    // A database nothing has open, without -wal or -shm: a backup of a queue (a dropped
    // queue's pool may still close a connection, and SQLite remove its files, a moment later).
    let source = tempfile::tempdir().unwrap();
    let (queue, _, _) = queue_with_jobs(source.path());
    let db = db_path(dir.path());
    queue.backup(&db).unwrap();
    assert_eq!(names(dir.path()), ["queue.db"]);
    let says = |suffix: &str, args: &[&str], err: &str| {
        assert!(err.contains(&format!("is the database being backed up (its {suffix} file")), "{args:?}: {err}");
        assert!(!err.contains("appeared while the backup ran"), "{err}");
        assert!(!dir.path().join("queue.db-journal").exists(), "{args:?}");
    };
    for suffix in ["-journal", "-wal", "-shm"] {
        let out = format!("queue.db{suffix}");
        for args in [vec!["backup", &out], vec!["backup", &out, "--replace"]] {
            says(suffix, &args, &refused_within(&db, dir.path(), &args));
            // Refused before the database was opened (which makes its -wal and -shm).
            assert_eq!(names(dir.path()), ["queue.db"], "{args:?}");
        }
    }
    // `--backup` of a command that changes rows (which opens its queue first).
    for suffix in ["-journal", "-wal", "-shm"] {
        let out = format!("queue.db{suffix}");
        let args = ["prune", "--older-than", "0s", "--backup", &out];
        says(suffix, &args, &refused_within(&db, dir.path(), &args));
    }
    // The database is still whole and writable for the CLI.
    ok(Path::new(&db), &["enqueue", "--queue", "q", "--payload", "after"]);
    assert!(ok(Path::new(&db), &["stats"]).contains('q'));
}

#[test]
fn a_fifo_or_a_character_device_as_db_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let fifo = fifo.to_str().unwrap();
    let commands: [&[&str]; 5] = [
        &["stats"],
        &["enqueue", "--queue", "q", "--payload", "x"],
        &["migrate"],
        &["backup", "out.db"],
        &["prune", "--older-than", "0s", "--backup", "b.db"],
    ];
    for args in commands {
        let err = refused_within(fifo, dir.path(), args);
        assert!(err.contains("is a FIFO (named pipe), not a database file"), "{args:?}: {err}");
    }
    assert_eq!(names(dir.path()), ["pipe"], "nothing was created beside it");

    let journal = Path::new("/dev/null-journal");
    let journal_before = journal.exists();
    for args in commands {
        let err = refused_within("/dev/null", dir.path(), args);
        if !journal_before && journal.exists() {
            let _ = std::fs::remove_file(journal);
            panic!("{args:?} left /dev/null-journal behind: {err}");
        }
        assert!(err.contains("/dev/null is a character device, not a database file"), "{args:?}: {err}");
    }
    assert_eq!(names(dir.path()), ["pipe"], "no backup of /dev/null was written");
}
