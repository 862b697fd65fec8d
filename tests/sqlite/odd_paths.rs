//! Database and backup paths that name something other than a new or regular file: a file
//! that cannot be created, the database's own `-journal`, `-wal` and `-shm` names, a FIFO, a
//! character device. Each is refused with an error that names the path, before SQLite
//! opens anything (a FIFO would block it forever, a device would be read as an empty
//! database and get a `-journal` beside it).
//!
//! Every call that could block runs on a helper thread with a bounded wait, so that a
//! regression fails instead of hanging the suite.

use crate::support::temp_queue;
use fenceq::{BackupOptions, Error, NewJob, Queue, SqliteStore};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

/// Far longer than any of these calls takes; only a guard against a hang.
const GUARD: Duration = Duration::from_secs(20);

/// Runs `f` on a helper thread; panics (naming `what`) if it has not returned within the guard.
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(GUARD).unwrap_or_else(|_| panic!("{what} hung"))
}

/// The error's text with its sources, as the CLI prints it.
fn chain(err: &Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(status.success(), "mkfifo {path:?}");
}

fn is_fifo(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

fn assert_invalid(err: &Error, what: &str, says: &[&str]) {
    assert!(matches!(err, Error::InvalidInput { what: w, .. } if *w == what), "{err:?}");
    for part in says {
        assert!(err.to_string().contains(part), "{part:?} not in: {err}");
    }
}

// ------------------------------------------------------------------------------- new files

#[test]
fn a_database_file_that_cannot_be_created_is_named_with_what_failed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();

    // Its directory is a regular file: the file cannot be created.
    let path = file.join("queue.db");
    let err = Queue::open(&path).unwrap_err();
    let text = chain(&err);
    assert!(matches!(&err, Error::Io(_)), "{err:?}");
    assert!(text.contains(&format!("creating the database file {}", path.display())), "{text}");

    // Its missing directory cannot be created under that file.
    let path = file.join("sub").join("queue.db");
    let text = chain(&Queue::open(&path).unwrap_err());
    let expected = format!("creating the directory {} for the database {}", file.join("sub").display(), path.display());
    assert!(text.contains(&expected), "{text}");
}

/// Makes `dir` unwritable for this process: mode 0500, and, for root (whom modes do not
/// stop), the immutable attribute; undone on drop. `None` when neither stops this process.
struct Unwritable<'d> {
    dir: &'d Path,
    immutable: bool,
}

impl<'d> Unwritable<'d> {
    fn make(dir: &'d Path) -> Option<Unwritable<'d>> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o500)).unwrap();
        let mut made = Unwritable { dir, immutable: false };
        if made.stops_writes() {
            return Some(made);
        }
        made.immutable = Command::new("chattr").arg("+i").arg(dir).status().is_ok_and(|s| s.success());
        made.stops_writes().then_some(made)
    }

    fn stops_writes(&self) -> bool {
        let probe = self.dir.join("probe");
        let created = std::fs::File::create(&probe).is_ok();
        let _ = std::fs::remove_file(&probe);
        !created
    }
}

impl Drop for Unwritable<'_> {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        if self.immutable {
            let _ = Command::new("chattr").arg("-i").arg(self.dir).status();
        }
        let _ = std::fs::set_permissions(self.dir, std::fs::Permissions::from_mode(0o700));
    }
}

#[test]
fn a_new_database_in_an_unwritable_directory_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    let Some(_unwritable) = Unwritable::make(&locked) else {
        // Neither the mode nor the immutable attribute stops this process: the case of a
        // file that cannot be created is still covered by the test above.
        eprintln!("skipped: this process can write every directory");
        return;
    };
    let path = locked.join("queue.db");
    let err = Queue::open(&path).unwrap_err();
    let Error::Io(io) = &err else { panic!("{err:?}") };
    assert_eq!(io.kind(), std::io::ErrorKind::PermissionDenied, "{io}");
    let text = chain(&err);
    assert!(text.contains(&format!("creating the database file {}", path.display())), "{text}");
    assert!(!path.exists());
}

// ------------------------------------------------------------------------------- the database's own names

#[test]
fn a_backup_never_takes_the_name_of_the_database_s_journal_wal_or_shm() {
    let q = temp_queue();
    q.add("x");
    let db = q.path();
    let replace = BackupOptions { replace: true, ..BackupOptions::default() };
    let beside = |suffix: &str| PathBuf::from(format!("{}{suffix}", db.display()));
    // The open queue has its -wal and -shm; no -journal exists. Every name is refused
    // whether or not it exists, with or without replace.
    assert!(!beside("-journal").exists());
    for suffix in ["-journal", "-wal", "-shm"] {
        for options in [BackupOptions::default(), replace] {
            let err = q.backup_with(beside(suffix), &options).unwrap_err();
            assert_invalid(&err, "backup target", &["is the database being backed up", &format!("its {suffix} file")]);
        }
    }
    // Spelled through `.` and through a symbolic link to the directory.
    let dot = q.dir.path().join(".").join("queue.db-journal");
    assert_invalid(&q.backup(&dot).unwrap_err(), "backup target", &["-journal"]);
    let link = tempfile::tempdir().unwrap();
    let linked_dir = link.path().join("dir");
    std::os::unix::fs::symlink(q.dir.path(), &linked_dir).unwrap();
    assert_invalid(&q.backup(linked_dir.join("queue.db-journal")).unwrap_err(), "backup target", &["-journal"]);
    // A name that only begins like one is an ordinary backup.
    q.backup(beside("-journal.bak")).unwrap();
    assert!(!beside("-journal").exists(), "nothing was written under the journal's name");

    // A read-write and a read-only open of the database still work, and it still holds the job.
    let reopened = q.reopen();
    reopened.enqueue(NewJob::new("q", b"y".to_vec())).unwrap();
    let read_only = Queue::builder().path(&db).read_only(true).open().unwrap();
    assert_eq!(read_only.stats().unwrap().queue("q").pending, 2);
}

#[test]
fn backup_file_refuses_the_database_s_own_names_before_it_opens_anything() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    // A database nothing has open, without -wal or -shm: a backup of a queue (a dropped
    // queue's pool may still close a connection, and SQLite remove its files, a moment later).
    let q = temp_queue();
    q.add("x");
    q.backup(&db).unwrap();
    assert_eq!(names(dir.path()), ["queue.db"]);
    for suffix in ["-wal", "-shm", "-journal"] {
        let target = dir.path().join(format!("queue.db{suffix}"));
        let err = SqliteStore::backup_file(&db, &target, &BackupOptions::default()).unwrap_err();
        assert_invalid(&err, "backup target", &["is the database being backed up", &format!("its {suffix} file")]);
        // Refused before the source was opened: opening it would have made its -wal and
        // -shm, and the -wal target would have "appeared while the backup ran".
        assert_eq!(names(dir.path()), ["queue.db"], "{suffix}");
    }
    let err =
        SqliteStore::backup_file(&db, &db, &BackupOptions { replace: true, ..BackupOptions::default() }).unwrap_err();
    assert_invalid(&err, "backup target", &["is the database being backed up"]);
}

// ------------------------------------------------------------------------------- FIFOs and devices

#[test]
fn a_fifo_is_refused_as_a_database_and_as_a_backup_source_or_target_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    mkfifo(&fifo);
    let says = ["is a FIFO (named pipe), not a database file"];

    let path = fifo.clone();
    assert_invalid(&bounded("open on a FIFO", move || Queue::open(path).unwrap_err()), "database file", &says);
    let path = fifo.clone();
    let err =
        bounded("a read-only open of a FIFO", move || Queue::builder().path(path).read_only(true).open().unwrap_err());
    assert_invalid(&err, "database file", &says);
    let uri = format!("file:{}?mode=rw", fifo.display());
    let err = bounded("open of a FIFO's file: URI", move || Queue::builder().path(uri).open().unwrap_err());
    assert_invalid(&err, "database file", &says);
    let path = fifo.clone();
    assert_invalid(
        &bounded("schema_version_of a FIFO", move || SqliteStore::schema_version_of(path).unwrap_err()),
        "database file",
        &says,
    );
    let (path, target) = (fifo.clone(), dir.path().join("copy.db"));
    let err = bounded("backup_file from a FIFO", move || {
        SqliteStore::backup_file(path, target, &BackupOptions::default()).unwrap_err()
    });
    assert_invalid(&err, "backup source", &says);

    // As a target, with replace: never replaced by the backup.
    let db = dir.path().join("queue.db");
    let queue = Queue::open(&db).unwrap();
    let replace = BackupOptions { replace: true, ..BackupOptions::default() };
    let err = queue.backup_with(&fifo, &replace).unwrap_err();
    assert_invalid(&err, "backup target", &["is a FIFO (named pipe); a backup is written only as a regular file"]);
    let err = SqliteStore::backup_file(&db, &fifo, &replace).unwrap_err();
    assert_invalid(&err, "backup target", &["is a FIFO"]);
    assert!(is_fifo(&fifo));
    let beside: Vec<String> = names(dir.path()).into_iter().filter(|n| n.starts_with("pipe")).collect();
    assert_eq!(beside, ["pipe"], "no -wal, -shm or -journal beside the FIFO");
}

#[test]
fn a_character_device_is_refused_as_a_database_and_as_a_backup_source() {
    let null = Path::new("/dev/null");
    let journal = Path::new("/dev/null-journal");
    let journal_before = journal.exists();
    let err = bounded("open on /dev/null", || Queue::open("/dev/null").unwrap_err());
    // A refused open must not leave SQLite's journal beside the device (as root it could).
    if !journal_before && journal.exists() {
        let _ = std::fs::remove_file(journal);
        panic!("the open of /dev/null left /dev/null-journal behind: {err:?}");
    }
    assert_invalid(&err, "database file", &["/dev/null is a character device, not a database file"]);
    let err = Queue::builder().path(null).read_only(true).open().unwrap_err();
    assert_invalid(&err, "database file", &["character device"]);
    assert_invalid(&SqliteStore::schema_version_of(null).unwrap_err(), "database file", &["character device"]);

    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("copy.db");
    let err = SqliteStore::backup_file(null, &target, &BackupOptions::default()).unwrap_err();
    assert_invalid(&err, "backup source", &["character device"]);
    assert!(names(dir.path()).is_empty(), "no backup of the device was written");
}

#[test]
fn a_device_node_is_never_replaced_by_a_backup() {
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("null");
    // A node of /dev/null's numbers in the test's own directory (needs CAP_MKNOD).
    let made = Command::new("mknod").arg(&node).args(["c", "1", "3"]).status().is_ok_and(|s| s.success());
    if !made {
        eprintln!("skipped: this process cannot make device nodes");
        return;
    }
    let q = temp_queue();
    q.add("x");
    let err = q.backup_with(&node, &BackupOptions { replace: true, ..BackupOptions::default() }).unwrap_err();
    assert_invalid(&err, "backup target", &["is a character device"]);
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&node).unwrap().file_type().is_char_device());
    assert_eq!(names(dir.path()), ["null"]);
}
