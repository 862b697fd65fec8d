//! Groups across OS processes on one SQLite file (RELIABILITY.md §3 T18): four processes, each
//! a pool of eight, through 200 groups of 50 jobs with handlers of random duration, and the
//! same with one of them killed by SIGKILL mid-run. Every group's jobs start in enqueue order,
//! never two at once, and none is lost, as the handlers' own rows in the domain table show
//! (written in each completion's transaction, so only the attempt that won writes).
//!
//! The scenario, its child and its checks are the conformance kit's `group_processes`,
//! shared with the PostgreSQL binary; here is only how a child opens the file and the domain
//! table's SQL. The children are this binary, run with `--ignored --exact` on `groups_child`.
//! `FENCEQ_GROUP_PROCS_JOBS` (default 10,000) sizes a run.

use fenceq::rusqlite::Connection;
use fenceq::Queue;
use fenceq_conformance::group_processes::{child, run, Run, RunStore, Scenario};
use std::path::PathBuf;

const CHILD: &str = concat!(module_path!(), "::groups_child");

/// One file, in the parent's temporary directory (kept while the parent holds it).
struct SqliteRuns {
    path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl SqliteRuns {
    fn new() -> SqliteRuns {
        let dir = tempfile::tempdir().unwrap();
        SqliteRuns { path: dir.path().join("groups.db"), _dir: Some(dir) }
    }

    fn raw(&self) -> Connection {
        Connection::open(&self.path).unwrap()
    }
}

impl RunStore for SqliteRuns {
    type Store = fenceq::SqliteStore;

    fn spec(&self) -> String {
        self.path.display().to_string()
    }

    fn from_spec(spec: &str) -> Self {
        SqliteRuns { path: spec.into(), _dir: None }
    }

    fn open(&self) -> Queue {
        Queue::builder().path(&self.path).pool_size(4).open().unwrap()
    }

    fn create_runs(&self) {
        // No uniqueness on `job`: a second winner must show as a second row, not as an error.
        self.raw()
            .execute_batch(
                "CREATE TABLE group_runs (job INTEGER NOT NULL, grp TEXT NOT NULL, seq INTEGER NOT NULL,
                                          attempt INTEGER NOT NULL, start_us INTEGER NOT NULL,
                                          end_us INTEGER NOT NULL, claimed_ms INTEGER NOT NULL,
                                          pid INTEGER NOT NULL)",
            )
            .unwrap();
    }

    fn insert_run(tx: &Connection, r: &Run) -> fenceq::Result<()> {
        tx.execute(
            "INSERT INTO group_runs (job, grp, seq, attempt, start_us, end_us, claimed_ms, pid)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            fenceq::rusqlite::params![r.job, r.group, r.seq, r.attempt, r.start_us, r.end_us, r.claimed_ms, r.pid],
        )?;
        Ok(())
    }

    fn wait_until_gone(&self, _pid: u32) {
        // A transaction commits inside the process that runs it: a dead process commits
        // nothing more.
    }

    fn count_runs(&self) -> i64 {
        self.raw().query_row("SELECT count(*) FROM group_runs", [], |r| r.get(0)).unwrap()
    }

    fn runs(&self) -> Vec<Run> {
        let conn = self.raw();
        let mut stmt =
            conn.prepare("SELECT job, grp, seq, attempt, start_us, end_us, claimed_ms, pid FROM group_runs").unwrap();
        let rows = stmt.query_map([], |r| {
            Ok(Run {
                job: r.get(0)?,
                group: r.get(1)?,
                seq: r.get(2)?,
                attempt: r.get(3)?,
                start_us: r.get(4)?,
                end_us: r.get(5)?,
                claimed_ms: r.get(6)?,
                pid: r.get(7)?,
            })
        });
        rows.unwrap().collect::<Result<_, _>>().unwrap()
    }
}

/// Child side: a pool of eight on the file (the kit's `group_processes::child`).
#[test]
#[ignore = "child process of the groups_processes tests; run by them with --ignored --exact"]
fn groups_child() {
    child::<SqliteRuns>();
}

#[test]
fn four_processes_run_each_groups_jobs_in_enqueue_order_never_two_at_once_and_lose_none() {
    println!("sqlite groups: {}", run(&SqliteRuns::new(), CHILD, Scenario::Ordering { kill: false }));
}

#[test]
fn a_sigkilled_worker_process_keeps_its_groups_in_order_its_heads_reclaimed_first() {
    println!(
        "sqlite groups, one process killed: {}",
        run(&SqliteRuns::new(), CHILD, Scenario::Ordering { kill: true })
    );
}

#[test]
fn four_processes_never_start_more_than_a_rate_allows_in_any_window_and_reach_it() {
    println!("sqlite rates: {}", run(&SqliteRuns::new(), CHILD, Scenario::Rates));
}

#[test]
fn four_processes_never_run_more_attempts_than_the_running_limit_and_reach_it() {
    println!("sqlite running limit: {}", run(&SqliteRuns::new(), CHILD, Scenario::Running));
}
