//! Groups across OS processes on one PostgreSQL server (RELIABILITY.md §3 T18): four
//! processes, each a pool of eight, through 200 groups of 50 jobs with handlers of random
//! duration, and the same with one of them killed by SIGKILL mid-run. Every group's jobs
//! start in enqueue order, never two at once, and none is lost, as the handlers' own rows in
//! the domain table show (written in each completion's transaction, so only the attempt that
//! won writes).
//!
//! The scenario, its child and its checks are the conformance kit's `group_processes`,
//! shared with the SQLite binary; here is only how a child opens the test's schema and the
//! domain table's SQL. The children are this binary, run with `--ignored --exact` on
//! `groups_child`. `FENCEQ_GROUP_PROCS_JOBS` (default 10,000) sizes a run.

use crate::support::*;
use fenceq::diesel::sql_types::{BigInt, Text};
use fenceq::diesel::{sql_query, QueryableByName, RunQueryDsl};
use fenceq::{PostgresStore, Queue};
use fenceq_conformance::group_processes::{child, run, Run, RunStore, Scenario};
use std::time::Duration;

const CHILD: &str = concat!(module_path!(), "::groups_child");

/// The test's schema; the parent's drops it at the end.
struct PgRuns {
    url: String,
    schema: String,
    _scratch: Option<Scratch>,
}

impl PgRuns {
    fn new() -> Option<PgRuns> {
        let scratch = Scratch::new()?;
        Some(PgRuns { url: scratch.url.clone(), schema: scratch.schema.clone(), _scratch: Some(scratch) })
    }
}

/// The `application_name` of a process's sessions, so that the server tells them apart.
fn application(pid: u32) -> String {
    format!("fq-groups-{pid}")
}

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = BigInt)]
    job: i64,
    #[diesel(sql_type = Text)]
    grp: String,
    #[diesel(sql_type = BigInt)]
    seq: i64,
    #[diesel(sql_type = BigInt)]
    attempt: i64,
    #[diesel(sql_type = BigInt)]
    start_us: i64,
    #[diesel(sql_type = BigInt)]
    end_us: i64,
    #[diesel(sql_type = BigInt)]
    claimed_ms: i64,
    #[diesel(sql_type = BigInt)]
    pid: i64,
}

impl RunStore for PgRuns {
    type Store = PostgresStore;

    fn spec(&self) -> String {
        format!("{}|{}", self.schema, self.url)
    }

    fn from_spec(spec: &str) -> Self {
        let (schema, url) = spec.split_once('|').expect("schema|url");
        PgRuns { url: url.into(), schema: schema.into(), _scratch: None }
    }

    fn open(&self) -> Queue<PostgresStore> {
        let url = with_application_name(&self.url, &application(std::process::id()));
        Queue::builder().url(url).schema(self.schema.clone()).open_postgres().expect("open the test schema")
    }

    fn create_runs(&self) {
        // No uniqueness on `job`: a second winner must show as a second row, not as an error.
        let mut raw = raw_in(&self.url, &self.schema);
        sql_query(
            "CREATE TABLE group_runs (job BIGINT NOT NULL, grp TEXT NOT NULL, seq BIGINT NOT NULL,
                                      attempt BIGINT NOT NULL, start_us BIGINT NOT NULL,
                                      end_us BIGINT NOT NULL, claimed_ms BIGINT NOT NULL,
                                      pid BIGINT NOT NULL)",
        )
        .execute(&mut raw)
        .unwrap();
    }

    fn insert_run(tx: &fenceq::PgTx, r: &Run) -> fenceq::Result<()> {
        sql_query(
            "INSERT INTO group_runs (job, grp, seq, attempt, start_us, end_us, claimed_ms, pid)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind::<BigInt, _>(r.job)
        .bind::<Text, _>(&r.group)
        .bind::<BigInt, _>(r.seq)
        .bind::<BigInt, _>(r.attempt)
        .bind::<BigInt, _>(r.start_us)
        .bind::<BigInt, _>(r.end_us)
        .bind::<BigInt, _>(r.claimed_ms)
        .bind::<BigInt, _>(r.pid)
        .execute(&mut *tx.conn())?;
        Ok(())
    }

    fn wait_until_gone(&self, pid: u32) {
        // The server may still be running the dead child's last statement (its COMMIT);
        // once its sessions are gone, nothing it sent can land any more.
        let mut raw = raw_in(&self.url, &self.schema);
        wait_for(&format!("the sessions of killed process {pid} to end"), Duration::from_secs(30), || {
            sessions_of(&mut raw, &application(pid)) == 0
        });
    }

    fn count_runs(&self) -> i64 {
        scalar(&mut raw_in(&self.url, &self.schema), "SELECT count(*) AS n FROM group_runs")
    }

    fn runs(&self) -> Vec<Run> {
        let rows: Vec<Row> =
            sql_query("SELECT job, grp, seq, attempt, start_us, end_us, claimed_ms, pid FROM group_runs")
                .load(&mut raw_in(&self.url, &self.schema))
                .unwrap();
        rows.into_iter()
            .map(|r| Run {
                job: r.job,
                group: r.grp,
                seq: r.seq,
                attempt: r.attempt,
                start_us: r.start_us,
                end_us: r.end_us,
                claimed_ms: r.claimed_ms,
                pid: r.pid,
            })
            .collect()
    }
}

/// Child side: a pool of eight on the test's schema (the kit's `group_processes::child`).
#[test]
#[ignore = "child process of the groups_processes tests; run by them with --ignored --exact"]
fn groups_child() {
    child::<PgRuns>();
}

#[test]
fn four_processes_run_each_groups_jobs_in_enqueue_order_never_two_at_once_and_lose_none() {
    let Some(target) = PgRuns::new() else { return };
    println!("postgres groups: {}", run(&target, CHILD, Scenario::Ordering { kill: false }));
}

#[test]
fn a_sigkilled_worker_process_keeps_its_groups_in_order_its_heads_reclaimed_first() {
    let Some(target) = PgRuns::new() else { return };
    println!("postgres groups, one process killed: {}", run(&target, CHILD, Scenario::Ordering { kill: true }));
}

#[test]
fn four_processes_never_start_more_than_a_rate_allows_in_any_window_and_reach_it() {
    let Some(target) = PgRuns::new() else { return };
    println!("postgres rates: {}", run(&target, CHILD, Scenario::Rates));
}

#[test]
fn four_processes_never_run_more_attempts_than_the_running_limit_and_reach_it() {
    let Some(target) = PgRuns::new() else { return };
    println!("postgres running limit: {}", run(&target, CHILD, Scenario::Running));
}
