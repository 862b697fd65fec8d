//! The store keeps its statements prepared on each connection, unless told not to
//! (`PostgresOptions::prepared_statements`, for poolers that lose a session's statements).

use crate::support::{scalar, Scratch};
use fenceq::{NewJob, PostgresStore, Queue};
use std::time::Duration;

/// The statements of the store that read or write the jobs (the claim through the schema's
/// function `fenceq_claim`), as `pg_prepared_statements` holds them.
const JOB_STATEMENTS: &str =
    "FROM pg_prepared_statements WHERE statement LIKE '%fenceq_jobs%' OR statement LIKE '%fenceq_claim(%'";

/// Works a job through intake, claim and settle on a queue of one connection at a time,
/// then counts the statements prepared on that connection that read or write the jobs.
fn statements_prepared_after_a_job(queue: &Queue<PostgresStore>) -> i64 {
    queue.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
    let job = queue.claim("q", "w", Duration::from_secs(60)).unwrap().expect("the job");
    queue.complete(&job.token()).unwrap();
    assert_eq!(queue.stats().unwrap().queue("q").completed, 1);
    queue.with_connection(|tx| Ok(scalar(&mut tx.conn(), &format!("SELECT count(*) AS n {JOB_STATEMENTS}")))).unwrap()
}

#[test]
fn a_connection_keeps_the_statements_it_ran_prepared() {
    let Some(s) = Scratch::new() else { return };
    // One caller at a time: the pool hands the same connection back each time.
    let queue = s.builder().pool_size(1).open_postgres().unwrap();
    let prepared = statements_prepared_after_a_job(&queue);
    assert!(prepared >= 3, "intake, claim, settle and stats prepared: {prepared} statements");
}

#[test]
fn turned_off_the_statements_are_sent_unnamed() {
    let Some(s) = Scratch::new() else { return };
    let queue = s.builder().pool_size(1).prepared_statements(false).open_postgres().unwrap();
    assert_eq!(statements_prepared_after_a_job(&queue), 0);
}

/// Every call is planned for its values, however often a statement runs: a generic plan,
/// kept until the table's next `ANALYZE`, made while the table is small would scan it
/// whole as it grows. The server counts each prepared statement's plans of either kind.
/// (The claim's own statement, inside `fenceq_claim`, keeps a generic plan of a shape its
/// settings pin: the plan tests check what it reads.)
#[test]
fn prepared_statements_are_planned_for_each_calls_values() {
    let Some(s) = Scratch::new() else { return };
    let queue = s.builder().pool_size(1).open_postgres().unwrap();
    for _ in 0..8 {
        queue.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
        let jobs = queue.claim_batch("q", "w", Duration::from_secs(60), 8).unwrap();
        let tokens: Vec<_> = jobs.iter().map(|j| j.token()).collect();
        queue.complete_all(&tokens).unwrap();
    }
    let (custom, generic) = queue
        .with_connection(|tx| {
            let mut conn = tx.conn();
            Ok((
                scalar(&mut conn, &format!("SELECT coalesce(sum(custom_plans), 0)::bigint AS n {JOB_STATEMENTS}")),
                scalar(&mut conn, &format!("SELECT coalesce(sum(generic_plans), 0)::bigint AS n {JOB_STATEMENTS}")),
            ))
        })
        .unwrap();
    assert_eq!(generic, 0, "no call ran a generic plan ({custom} custom plans)");
    assert!(custom >= 24, "eight rounds of intake, claim and settle planned for their values: {custom}");
}
