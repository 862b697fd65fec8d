//! The kit's harness for fenceq's SQLite store: each test gets a database file in a
//! temporary directory of its own, and reads it raw through a second connection.

use crate::harness::{Harness, RawRow};
use fenceq::rusqlite::{Connection, TransactionBehavior};
use fenceq::{ManualClock, Queue, SqliteStore};

/// Runs the kit against [`SqliteStore`]: `fenceq_conformance::run(SqliteHarness)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SqliteHarness;

/// One test's database file (deleted with its directory when the test ends).
#[derive(Debug)]
pub struct SqlitePlace {
    dir: tempfile::TempDir,
}

impl SqlitePlace {
    /// The database file.
    pub fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("queue.db")
    }

    fn raw(&self) -> Connection {
        let conn = Connection::open(self.path()).expect("a raw connection to the test database");
        conn.busy_timeout(std::time::Duration::from_secs(30)).expect("busy timeout");
        conn
    }
}

impl Harness for SqliteHarness {
    type Store = SqliteStore;
    type Place = SqlitePlace;

    fn create(&self) -> SqlitePlace {
        SqlitePlace { dir: tempfile::tempdir().expect("a temporary directory") }
    }

    fn open(&self, place: &SqlitePlace, clock: &ManualClock, max_attempts: Option<u32>) -> Queue {
        let mut builder = Queue::builder().path(place.path()).clock(clock.clone());
        if let Some(attempts) = max_attempts {
            builder = builder.max_attempts(attempts);
        }
        builder.open().expect("opening the test database")
    }

    fn snapshot(&self, place: &SqlitePlace) -> Vec<RawRow> {
        snapshot_of(&place.raw())
    }

    fn count(&self, place: &SqlitePlace, state: &str) -> i64 {
        place.raw().query_row("SELECT count(*) FROM fenceq_jobs WHERE state = ?1", [state], |r| r.get(0)).unwrap()
    }

    fn create_replies(&self, place: &SqlitePlace) {
        place.raw().execute_batch("CREATE TABLE replies (job INTEGER, attempt INTEGER, text TEXT)").unwrap();
    }

    fn insert_reply(tx: &Connection, job: i64, attempt: i64, text: &str) -> fenceq::Result<()> {
        tx.execute(
            "INSERT INTO replies (job, attempt, text) VALUES (?1, ?2, ?3)",
            fenceq::rusqlite::params![job, attempt, text],
        )?;
        Ok(())
    }

    fn replies(&self, place: &SqlitePlace) -> Vec<(i64, i64, String)> {
        let conn = place.raw();
        let mut stmt = conn.prepare("SELECT job, attempt, text FROM replies ORDER BY rowid").unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().collect::<Result<_, _>>().unwrap()
    }

    fn foreign_transaction(&self, place: &SqlitePlace, commit: bool, f: &mut dyn FnMut(&Connection)) {
        let mut conn = place.raw();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        f(&tx);
        if commit {
            tx.commit().unwrap();
        } else {
            tx.rollback().unwrap();
        }
    }

    fn fail_claims(&self, place: &SqlitePlace, fail: bool) {
        let sql = if fail {
            "CREATE TRIGGER fenceq_kit_refuse_claims BEFORE UPDATE OF attempt ON fenceq_jobs
             WHEN NEW.attempt > OLD.attempt BEGIN SELECT RAISE(ABORT, 'claims refused by the kit'); END;"
        } else {
            "DROP TRIGGER fenceq_kit_refuse_claims"
        };
        place.raw().execute_batch(sql).unwrap();
    }

    fn replies_in(tx: &Connection) -> fenceq::Result<Vec<(i64, i64, String)>> {
        let mut stmt = tx.prepare_cached("SELECT job, attempt, text FROM replies ORDER BY rowid")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A directory in /dev/shm where the machine has it (the model checks what the queue does,
    /// not what the disk keeps: a checkpoint's fsync on a real disk cost more than the rest of
    /// a run), holding a copy of a current-schema database with an empty `replies` table, made
    /// once per process: no migrations and no schema change per run.
    fn create_scratch(&self) -> SqlitePlace {
        static TEMPLATE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::Builder::new().prefix("fenceq-kit-").tempdir_in(shm)
        } else {
            tempfile::tempdir()
        };
        let place = SqlitePlace { dir: dir.expect("a temporary directory") };
        let template = TEMPLATE.get_or_init(|| {
            let made = self.create();
            drop(Queue::builder().path(made.path()).open().expect("opening the template database"));
            self.create_replies(&made);
            // The file alone may not hold the schema yet: in WAL mode the last writes are in
            // the -wal file until a checkpoint, and closing the raw connection checkpoints
            // only if no other connection (a pool's, still closing) is open. `VACUUM INTO`
            // writes every committed page, WAL included, into one self-contained file.
            let copy = made.dir.path().join("template.db");
            made.raw()
                .execute("VACUUM INTO ?1", [copy.to_str().expect("a UTF-8 temporary path")])
                .expect("copying the template database");
            std::fs::read(&copy).expect("reading the template database")
        });
        std::fs::write(place.path(), template).expect("copying the template database");
        place
    }

    /// Deletes every job, reply, queue setting, limit and recorded start through the queue's
    /// own writer, and the ids' floor: a start left behind would count in the next run's
    /// windows.
    fn recycle(&self, _place: &SqlitePlace, queue: &Queue) -> bool {
        queue
            .transaction(|tx| {
                Ok(tx.execute_batch("DELETE FROM fenceq_jobs; DELETE FROM fenceq_attempts; DELETE FROM fenceq_queue_flow; DELETE FROM fenceq_limits; DELETE FROM fenceq_starts; DELETE FROM fenceq_settled_counts; DELETE FROM replies; UPDATE fenceq_id_floor SET floor = 0;")?)
            })
            .expect("emptying a scratch database");
        true
    }
}

/// Every job row of the SQLite database `conn` is open on, in id order, read with its own
/// query (never fenceq's): the harness's snapshot, and the SQLite-only tests' too.
pub fn snapshot_of(conn: &Connection) -> Vec<RawRow> {
    let mut stmt = conn
        .prepare("SELECT id, state, attempt, claim_id, lease_until, last_error FROM fenceq_jobs ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}
