//! The hot statements' plans against a real server (`FENCEQ_POSTGRES_URL`; skipped without
//! one, failing under `CI=true`): the claim honours its `LIMIT` instead of reading every due
//! row, whatever the table held when its session made its plan; the overview's completions
//! per minute read the hour asked for, not every settled row; a window of the starts log, and
//! the grouped claim's reads of it, stop at the rates' counts; the batched settle reads its
//! rows by key, not the index of running rows; `stats` reads no settled row, and reads the
//! index entries of a job that ran only once; and a settle never waits for another's count of
//! settled rows. Each statement's plan is checked both as the server plans a prepared
//! statement for a call's values and as the generic plan a connection may keep for it after
//! five runs; the claim and `stats` (functions that keep a generic plan of their own) by what
//! the server counts they read.

use super::jobs::TokenRow;
use super::statements::{
    CLAIM, COMPLETE_IF_OWNED, COMPLETE_MANY_IF_OWNED, COMPLETIONS_PER_MINUTE, GROUP_NEEDS_RELEASE, QUEUE_STARTS,
    RELEASE_GROUP, STATS,
};
use crate::store::Stmt;
use diesel::connection::SimpleConnection;
use diesel::sql_types::{BigInt, Integer, Nullable, Text, Uuid as SqlUuid};
use diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
use std::time::Duration;

fn server() -> Option<String> {
    match std::env::var("FENCEQ_POSTGRES_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
            panic!("FENCEQ_POSTGRES_URL is not set, and CI=true requires the PostgreSQL tests (scripts/postgres start)")
        }
        _ => {
            eprintln!("skipped: FENCEQ_POSTGRES_URL is not set (scripts/postgres start)");
            None
        }
    }
}

/// A schema of its own with the queue's tables, a queue on it, and a raw connection whose
/// unqualified names resolve there.
fn scratch(url: &str) -> (String, crate::Queue<super::PostgresStore>, PgConnection) {
    let schema = format!("fenceq_test_{}", uuid::Uuid::new_v4().simple());
    let queue = crate::Queue::builder().url(url).schema(schema.clone()).open_postgres().unwrap();
    let mut raw = PgConnection::establish(url).unwrap();
    raw.batch_execute(&format!("SET search_path TO \"{schema}\";")).unwrap();
    (schema, queue, raw)
}

/// How the server plans a statement the store keeps prepared: for each call's values (its
/// first five runs), or generically, as a connection may keep it after that when the
/// generic estimate is no worse (`plan_cache_mode = auto`).
#[derive(Clone, Copy, Debug)]
enum Planned {
    ForTheValues,
    Generic,
}

const BOTH: [Planned; 2] = [Planned::ForTheValues, Planned::Generic];

/// `statement` under `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF)` with its parameters'
/// `(type, value)`s (values written as SQL literals): the plan it ran, with each node's
/// actual rows and loops (an `ANALYZE` runs the statement). It is prepared with those types,
/// as the store's connections prepare it, and planned for the values or generically
/// (`plan_cache_mode`).
fn explain(
    conn: &mut PgConnection,
    statement: Stmt,
    planned: Planned,
    parameters: &[(&str, String)],
) -> diesel::QueryResult<Vec<String>> {
    let mode = match planned {
        Planned::ForTheValues => "force_custom_plan",
        Planned::Generic => "force_generic_plan",
    };
    let types: Vec<&str> = parameters.iter().map(|(t, _)| *t).collect();
    let values: Vec<&str> = parameters.iter().map(|(_, v)| v.as_str()).collect();
    conn.batch_execute(&format!(
        "SET plan_cache_mode = {mode}; PREPARE fenceq_plan ({}) AS {}",
        types.join(", "),
        statement.sql
    ))?;
    let plan =
        sql_query(format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE fenceq_plan({})", values.join(", ")))
            .load::<Plan>(conn);
    conn.batch_execute("DEALLOCATE fenceq_plan; RESET plan_cache_mode")?;
    Ok(plan?.into_iter().map(|p| p.line).collect())
}

/// A text value as an SQL literal.
fn text(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// Values as an SQL array literal.
fn array<T: std::fmt::Display>(values: impl IntoIterator<Item = T>) -> String {
    format!("'{{{}}}'", values.into_iter().map(|v| v.to_string()).collect::<Vec<_>>().join(","))
}

#[derive(QueryableByName)]
struct Plan {
    #[diesel(sql_type = Text, column_name = "QUERY PLAN")]
    line: String,
}

/// One line of a query's text result.
#[derive(QueryableByName)]
struct Line {
    #[diesel(sql_type = Text)]
    line: String,
}

/// The largest `actual ... rows=R ... loops=L` (R × L) of any node of a text plan.
fn most_rows_of_any_node(plan: &[String]) -> u64 {
    plan.iter()
        .filter_map(|line| {
            let actual = line.split("(actual").nth(1)?;
            let rows: f64 = actual.split("rows=").nth(1)?.split(' ').next()?.parse().ok()?;
            let loops: f64 = actual.split("loops=").nth(1)?.trim_end_matches(')').parse().ok()?;
            Some((rows * loops) as u64)
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn plan_line_parsing_reads_rows_times_loops() {
    let plan = ["  ->  Index Scan using x on y (actual rows=12 loops=3)".to_string(), "Planning Time: 1 ms".into()];
    assert_eq!(most_rows_of_any_node(&plan), 36);
}

/// At 20,000 due jobs (three priorities, and 50 expired leases beside them) a claim of one
/// job reads a handful of index entries, never every due row, and no table whole, whether the
/// session's kept plan of `fenceq_claim` was made while the table was empty, held three due
/// jobs, or held them all; the server's statistics count the reads inside the function, where
/// no `EXPLAIN` reaches. Broke when the claim's `WHERE` was one `OR` of pending and expired rows
/// (the planner scanned the table, or a bitmap of both partial indexes, and sorted every due
/// row to keep one: 22 ms at 50,000 pending and 250 ms at 500,000); and, for a plan made on the
/// empty table, without the function's settings (a scan of the table per claim) and when the
/// `UPDATE` joined the claimed ids (every row read through an index to find them). A paused
/// queue, and one with limits, read (and lock) no job.
#[test]
fn the_claim_reads_a_few_rows_not_every_due_row() {
    let Some(url) = server() else { return };
    let now = 1_000_000_i64;
    let fill = "INSERT INTO fenceq_jobs (queue, payload, priority, run_at, max_attempts, created_at)
                SELECT 'q', '\\x00', i % 3, 1000 + i, 5, 1000 FROM generate_series(1, 20000) AS i;
                INSERT INTO fenceq_jobs (queue, payload, state, attempt, worker, lease_until, claim_id,
                                         priority, run_at, max_attempts, created_at)
                SELECT 'q', '\\x00', 'running', 1, 'gone', 2000, gen_random_uuid(), 2, 500, 5, 500
                FROM generate_series(1, 50);";
    let three = "INSERT INTO fenceq_jobs (queue, payload, priority, run_at, max_attempts, created_at)
                 SELECT 'q', '\\x00', 0, i, 5, 0 FROM generate_series(1, 3) AS i;";
    for (made_on, before_plan, after_plan) in
        [("an empty table", "", fill), ("three due jobs", three, fill), ("every job", fill, "")]
    {
        let (schema, queue, mut raw) = scratch(&url);
        if before_plan.is_empty() {
            // Its settings price paths out by adding a huge cost, which would have the server
            // compile the plan to machine code on every call (`jit_above_cost`), were JIT on.
            let settings: Vec<String> = sql_query(
                "SELECT unnest(proconfig) AS line FROM pg_proc
                 WHERE proname = 'fenceq_claim' AND pronamespace = $1::regnamespace",
            )
            .bind::<Text, _>(format!("\"{schema}\""))
            .load::<Line>(&mut raw)
            .unwrap()
            .into_iter()
            .map(|l| l.line)
            .collect();
            assert!(settings.iter().any(|s| s == "jit=off"), "fenceq_claim runs without JIT: {settings:?}");
        }
        // No `ANALYZE` but the test's own: the session keeps its plan until the statistics change.
        raw.batch_execute(&format!(
            "ALTER TABLE fenceq_jobs SET (autovacuum_enabled = off); {before_plan} ANALYZE fenceq_jobs;"
        ))
        .unwrap();
        // The session makes its plan now, on the statistics of the table as it is.
        let _ = claim_one(&mut raw, Some(now));
        if !after_plan.is_empty() {
            raw.batch_execute(after_plan).unwrap();
        }
        // Judged at an instant given, and at the server's clock read by the statement (NULL).
        for instant in [Some(now), None] {
            let case = format!("plan made on {made_on}, instant {instant:?}");
            let before = (reads(&mut raw, "fenceq_jobs"), reads(&mut raw, "fenceq_queue_flow"));
            // The expired leases (priority 2, run_at 500) come before every pending job
            // (priority 2 at most, run_at after 1000).
            let claimed = claim_one(&mut raw, instant).unwrap_or_else(|| panic!("{case}: a due job"));
            assert_eq!((claimed.priority, claimed.attempt), (2, 2), "{case}: the best job first");
            let after = (reads(&mut raw, "fenceq_jobs"), reads(&mut raw, "fenceq_queue_flow"));
            let (jobs, flow) = (after.0.since(&before.0), after.1.since(&before.1));
            assert_eq!(jobs.scans, 0, "{case}: no scan of the jobs table");
            assert!(jobs.entries <= 100, "{case}: {} index entries read of 20,050 claimable", jobs.entries);
            assert_eq!(flow.scans, 0, "{case}: the back-off is probed by its key");
        }
        // Paused, then limited (claimed by the limited claims instead): the claim takes
        // nothing and reads (so locks) no job.
        for (why, sql) in [
            (
                "paused",
                "INSERT INTO fenceq_queues (queue, paused_at, decision, decided_at) VALUES ('q', 1, 'pause', 1)",
            ),
            (
                "limited",
                "DELETE FROM fenceq_queues;
                 INSERT INTO fenceq_limits (queue, scope, window_ms, max_count, updated_at)
                 VALUES ('q', 'running', 0, 5, 1)",
            ),
        ] {
            raw.batch_execute(sql).unwrap();
            let case = format!("plan made on {made_on}, {why}");
            let before = reads(&mut raw, "fenceq_jobs");
            assert!(claim_one(&mut raw, Some(now)).is_none(), "{case}: claims nothing");
            let jobs = reads(&mut raw, "fenceq_jobs").since(&before);
            assert_eq!((jobs.scans, jobs.entries), (0, 0), "{case}: reads no job");
        }
        drop(queue);
        raw.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")).unwrap();
    }
}

#[derive(QueryableByName)]
struct ClaimedJob {
    #[diesel(sql_type = Integer)]
    priority: i32,
    #[diesel(sql_type = Integer)]
    attempt: i32,
}

/// `CLAIM` of one job of queue `q` at `instant` (NULL: the server's clock), as the store binds
/// it, in a transaction that is rolled back: the job it took, if any.
fn claim_one(raw: &mut PgConnection, instant: Option<i64>) -> Option<ClaimedJob> {
    let mut claimed = Vec::new();
    let _ = raw.transaction::<(), diesel::result::Error, _>(|conn| {
        claimed = sql_query(CLAIM.sql)
            .bind::<Text, _>("q")
            .bind::<Nullable<BigInt>, _>(instant)
            .bind::<BigInt, _>(1_i64)
            .bind::<Text, _>("w")
            .bind::<BigInt, _>(60_000_i64)
            .load::<ClaimedJob>(conn)?;
        Err(diesel::result::Error::RollbackTransaction)
    });
    assert!(claimed.len() <= 1, "a claim of one took {}", claimed.len());
    claimed.pop()
}

/// At 20,000 completions spread over 20,000 minutes (and 5,000 cancelled jobs), an hour's
/// completions per minute read that hour's rows through the settled index, not the table.
#[test]
fn completions_per_minute_read_the_hour_not_the_table() {
    let Some(url) = server() else { return };
    let (schema, queue, mut raw) = scratch(&url);
    raw.batch_execute(
        "INSERT INTO fenceq_jobs (queue, payload, state, attempt, run_at, max_attempts, created_at, settled_at)
         SELECT 'q', '\\x00', 'completed', 1, 0, 5, 0, i * 60000 FROM generate_series(1, 20000) AS i;
         INSERT INTO fenceq_jobs (queue, payload, state, run_at, max_attempts, created_at, settled_at)
         SELECT 'q', '\\x00', 'cancelled', 0, 5, 0, i * 240000 FROM generate_series(1, 5000) AS i;
         ANALYZE fenceq_jobs;",
    )
    .unwrap();
    let from = 10_000 * 60_000_i64;
    for planned in BOTH {
        let parameters = [("bigint", from.to_string()), ("bigint", (from + 3_600_000).to_string())];
        let plan = explain(&mut raw, COMPLETIONS_PER_MINUTE, planned, &parameters).unwrap();
        let shown = plan.join("\n");
        assert!(shown.contains("fenceq_jobs_settled"), "{planned:?}: reads the settled index:\n{shown}");
        let most = most_rows_of_any_node(&plan);
        assert!(most <= 100, "{planned:?}: a node saw {most} rows for an hour of 60 completions:\n{shown}");
    }
    drop(queue);
    raw.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")).unwrap();
}

/// A group with a backlog of 20,000 held jobs and a long history: its release reads a
/// handful of rows through the group index (the held job with the smallest id, and whether a
/// job holds the group), never the backlog or the history; and the claim still reads few.
#[test]
fn a_groups_release_reads_a_few_rows_not_its_backlog() {
    let Some(url) = server() else { return };
    let (schema, queue, mut raw) = scratch(&url);
    raw.batch_execute(
        "INSERT INTO fenceq_jobs (queue, payload, state, attempt, run_at, max_attempts, created_at, settled_at, group_name)
         SELECT 'q', '\\x00', 'completed', 1, 0, 5, 0, i, 'chat' FROM generate_series(1, 20000) AS i;
         INSERT INTO fenceq_jobs (queue, payload, run_at, max_attempts, created_at, group_name, group_held)
         SELECT 'q', '\\x00', 1000 + i, 5, 1000, 'chat', true FROM generate_series(1, 20000) AS i;
         ANALYZE fenceq_jobs;",
    )
    .unwrap();
    for (statement, planned) in [GROUP_NEEDS_RELEASE, RELEASE_GROUP].into_iter().flat_map(|s| BOTH.map(|p| (s, p))) {
        let mut plan = Vec::new();
        let _ = raw.transaction::<(), diesel::result::Error, _>(|conn| {
            plan = explain(conn, statement, planned, &[("text", text("q")), ("text", text("chat"))])?;
            Err(diesel::result::Error::RollbackTransaction)
        });
        let shown = plan.join("\n");
        let name = statement.name;
        assert!(shown.contains("fenceq_jobs_group"), "{name} {planned:?}: reads the group index:\n{shown}");
        let most = most_rows_of_any_node(&plan);
        assert!(most <= 10, "{name} {planned:?}: a node saw {most} rows of a 20,000-job backlog:\n{shown}");
    }
    drop(queue);
    raw.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")).unwrap();
}

/// With 20,000 starts kept for a queue (and as many of another), the count of a window stops
/// at the rate's count.
#[test]
fn a_window_of_the_starts_log_is_counted_up_to_the_rates_count() {
    let Some(url) = server() else { return };
    let (schema, queue, mut raw) = scratch(&url);
    raw.batch_execute(
        "INSERT INTO fenceq_starts (queue, group_name, at, job_id)
         SELECT q, NULL, i, i FROM generate_series(1, 20000) AS i, (VALUES ('q'), ('other')) AS v(q);
         ANALYZE fenceq_starts;",
    )
    .unwrap();
    for planned in BOTH {
        let parameters = [("text", text("q")), ("bigint", "0".into()), ("bigint", "30".into())];
        let window = explain(&mut raw, QUEUE_STARTS, planned, &parameters).unwrap();
        let shown = window.join("\n");
        let most = most_rows_of_any_node(&window);
        assert!(most <= 30, "{planned:?}: a window of 20,000 starts counted up to 30, read {most}:\n{shown}");
    }
    drop(queue);
    raw.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")).unwrap();
}

#[derive(QueryableByName, Clone, Copy)]
struct Reads {
    #[diesel(sql_type = BigInt)]
    scans: i64,
    #[diesel(sql_type = BigInt)]
    entries: i64,
}

impl Reads {
    /// What was read between `earlier` and these counts.
    fn since(&self, earlier: &Reads) -> Reads {
        Reads { scans: self.scans - earlier.scans, entries: self.entries - earlier.entries }
    }
}

/// What the server's statistics say statements have read of `table` (of the connection's
/// schema): its sequential scans, and the entries read through its indexes. The session's
/// counts are flushed first (`pg_stat_force_next_flush`, at the end of that statement's
/// transaction).
fn reads(raw: &mut PgConnection, table: &str) -> Reads {
    raw.batch_execute("SELECT pg_stat_force_next_flush()").unwrap();
    sql_query(
        "SELECT (SELECT coalesce(seq_scan, 0) FROM pg_stat_user_tables
                 WHERE relid = $1::regclass) AS scans,
                (SELECT coalesce(sum(idx_tup_read), 0)::bigint FROM pg_stat_user_indexes
                 WHERE relid = $1::regclass) AS entries",
    )
    .bind::<Text, _>(table)
    .get_result(raw)
    .unwrap()
}

/// With 20,000 starts kept for a queue and for one of its groups (and as many of another
/// queue), the grouped claim (`fenceq_claim_grouped`, whose statements run inside the server
/// where no `EXPLAIN` reaches) reads the latest start, the queue's window and each
/// candidate's group window through an index, up to the rates' counts: the server's
/// statistics count a few dozen index entries read and no scan of the log. A spent group's
/// window and a group with no start are both read so; the latter is what a sequential scan
/// read whole when a `LIMIT` made it look cheap.
#[test]
fn the_grouped_claims_reads_of_the_starts_log_stop_at_the_rates_counts() {
    let Some(url) = server() else { return };
    let (schema, queue, mut raw) = scratch(&url);
    raw.batch_execute(
        "INSERT INTO fenceq_starts (queue, group_name, at, job_id)
         SELECT q, g, i, i FROM generate_series(1, 20000) AS i,
                (VALUES ('q', 'g1'), ('q', NULL), ('other', 'g1')) AS v(q, g);
         INSERT INTO fenceq_queue_flow (queue, updated_at, starts_kept) VALUES ('q', 0, 40000);
         INSERT INTO fenceq_jobs (queue, payload, state, attempt, run_at, max_attempts, created_at, group_name)
         VALUES ('q', '\\x00', 'pending', 0, 0, 3, 0, 'g1'), ('q', '\\x00', 'pending', 0, 0, 3, 0, 'g2');
         ANALYZE fenceq_starts;",
    )
    .unwrap();
    let before = reads(&mut raw, "fenceq_starts");
    // The queue's rate (30 per 10 ms) has room at 20,010, and its window is counted (40,000
    // starts kept). Group g1's rate (20 a minute) is spent: its head is passed over and
    // deferred until the group's 20th latest start leaves the window. Group g2 has no start:
    // its head is claimed.
    let claimed: Vec<ClaimedRow> = sql_query(
        "SELECT group_name, opens_at
         FROM   fenceq_claim_grouped('q', 20010, 1, 'w', 50000, 30, 10, NULL, '{20}', '{60000}')",
    )
    .load(&mut raw)
    .unwrap();
    let after = reads(&mut raw, "fenceq_starts");
    let groups: Vec<(Option<String>, Option<i64>)> = claimed.into_iter().map(|r| (r.group_name, r.opens_at)).collect();
    assert_eq!(groups, [(Some("g2".to_string()), None)], "g2's head claimed, g1's passed over");
    let deferred: i64 =
        sql_query("SELECT run_at AS n FROM fenceq_jobs WHERE group_name = 'g1'").get_result::<N>(&mut raw).unwrap().n;
    assert_eq!(deferred, 19_981 + 60_000, "g1's head deferred until its group's rate opens");
    assert_eq!(after.scans, before.scans, "the grouped claim scanned the starts log");
    let read = after.entries - before.entries;
    assert!(read <= 200, "the grouped claim read {read} entries of the starts' indexes, not up to the rates' counts");
    drop(queue);
    raw.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")).unwrap();
}

#[derive(QueryableByName)]
struct N {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct ClaimedRow {
    #[diesel(sql_type = diesel::sql_types::Nullable<Text>)]
    group_name: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
    opens_at: Option<i64>,
}

/// A pool's batched settle of 64 jobs, beside 60,000 settled rows, reads each of its rows by
/// primary key and never the partial index of running rows. Written with a plain
/// `state = 'running'`, the planner read that index whole and filtered it by id: cheap on
/// these estimates, but with a transaction left open that index keeps an entry for every job
/// that ran since (vacuum may not remove them), and the settle read them all on every call:
/// found by `fenceq-bench --only long_horizon`, where it took the pool's settles to about
/// 100 ms each through an idle transaction.
#[test]
fn the_batched_settle_reads_its_rows_by_key_not_the_running_rows_index() {
    let Some(url) = server() else { return };
    let (schema, queue, mut raw) = scratch(&url);
    raw.batch_execute(
        "INSERT INTO fenceq_jobs (queue, payload, state, attempt, run_at, max_attempts, created_at, settled_at)
         SELECT 'q', '\\x00', 'completed', 1, 0, 3, 0, 5 FROM generate_series(1, 60000);
         INSERT INTO fenceq_jobs (queue, payload, state, attempt, worker, lease_until, claim_id, run_at, max_attempts, created_at)
         SELECT 'q', '\\x00', 'running', 1, 'w', 9000000000000, gen_random_uuid(), 0, 3, 0 FROM generate_series(1, 64);
         ANALYZE fenceq_jobs;",
    )
    .unwrap();
    let running: Vec<TokenRow> =
        sql_query("SELECT id, attempt, claim_id FROM fenceq_jobs WHERE state = 'running'").load(&mut raw).unwrap();
    assert_eq!(running.len(), 64);
    for planned in BOTH {
        let mut plan = Vec::new();
        let mut settled = 0;
        // EXPLAIN ANALYZE runs the settle: in a transaction that is rolled back.
        let _ = raw.transaction::<(), diesel::result::Error, _>(|conn| {
            let parameters = [
                ("bigint[]", array(running.iter().map(|r| r.id))),
                ("integer[]", array(running.iter().map(|r| r.attempt))),
                ("uuid[]", array(running.iter().map(|r| r.claim_id))),
                ("bigint", "1".into()),
            ];
            plan = explain(conn, COMPLETE_MANY_IF_OWNED, planned, &parameters)?;
            settled = plan
                .iter()
                .find(|line| line.trim_start_matches([' ', '-', '>']).starts_with("Update on"))
                .map_or(0, |line| most_rows_of_any_node(std::slice::from_ref(line)));
            Err(diesel::result::Error::RollbackTransaction)
        });
        let shown = plan.join("\n");
        assert_eq!(settled, 64, "{planned:?}: every token settled its row:\n{shown}");
        assert!(
            !shown.contains("fenceq_jobs_lease"),
            "{planned:?}: the settle read the index of running rows:\n{shown}"
        );
        assert!(!shown.contains("Seq Scan"), "{planned:?}: the settle scanned the table:\n{shown}");
        let by_key = shown.matches("Index Scan using fenceq_jobs_pkey").count();
        assert_eq!(by_key, 2, "{planned:?}: both reads by key:\n{shown}");
    }
    drop(queue);
    raw.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")).unwrap();
}

/// The live rows of the stats tests: 100 pending (`run_at` 1 to 100) and 20 running under a
/// lease that never ends.
const STATS_LIVE: &str = "
    INSERT INTO fenceq_jobs (queue, payload, run_at, max_attempts, created_at)
    SELECT 'q', '\\x00', i, 3, 0 FROM generate_series(1, 100) AS i;
    INSERT INTO fenceq_jobs (queue, payload, state, attempt, worker, lease_until, claim_id, run_at, max_attempts, created_at)
    SELECT 'q', '\\x00', 'running', 1, 'w', 9000000000000, gen_random_uuid(), 0, 3, 0 FROM generate_series(1, 20);";

/// The settled rows of the stats tests: 40,000 completed, 10,000 cancelled and 10,000
/// acknowledged exhaustions, with their kept counts.
const STATS_SETTLED: &str = "
    INSERT INTO fenceq_jobs (queue, payload, state, attempt, run_at, max_attempts, created_at, settled_at)
    SELECT 'q', '\\x00', 'completed', 1, 0, 3, 0, 5 FROM generate_series(1, 40000);
    INSERT INTO fenceq_jobs (queue, payload, state, attempt, run_at, max_attempts, created_at, settled_at)
    SELECT 'q', '\\x00', 'cancelled', 0, 0, 3, 0, 5 FROM generate_series(1, 10000);
    INSERT INTO fenceq_jobs (queue, payload, state, attempt, claim_id, run_at, max_attempts, created_at, settled_at,
                             exhausted_at, acknowledged_at)
    SELECT 'q', '\\x00', 'exhausted', 3, gen_random_uuid(), 0, 3, 0, 5, 5, 6 FROM generate_series(1, 10000);
    INSERT INTO fenceq_settled_counts (queue, state, shard, count)
    VALUES ('q', 'completed', 0, 40000), ('q', 'cancelled', 7, 10000), ('q', 'acknowledged', 63, 10000);";

/// One run of `STATS` on `raw`, as the store binds it (now = 1).
fn stats_on(raw: &mut PgConnection) {
    sql_query(STATS.sql).bind::<BigInt, _>(1_i64).execute(raw).unwrap();
}

/// At 60,000 settled rows (completed, cancelled, acknowledged exhaustions) beside 120 live
/// ones, `stats` reads the live rows through their partial indexes and the settled states from
/// their kept counts: the server's statistics count no scan of the table and no more index
/// entries read than there are live rows, whether the session's kept plan of `fenceq_stats`
/// was made while the table was empty, held three pending jobs, or held every row. Before the
/// counts, it grouped the whole table; without the function's settings, a plan made on the
/// empty table scanned it.
#[test]
fn stats_reads_no_settled_row() {
    let Some(url) = server() else { return };
    let three = "INSERT INTO fenceq_jobs (queue, payload, run_at, max_attempts, created_at)
                 SELECT 'q', '\\x00', 1000 + i, 3, 0 FROM generate_series(1, 3) AS i;";
    let fill = [STATS_SETTLED, STATS_LIVE].concat();
    for (made_on, before_plan, after_plan, pending) in [
        ("an empty table", "", fill.as_str(), 100),
        ("three pending jobs", three, &fill, 103),
        ("every row", &fill, "", 100),
    ] {
        let (schema, queue, mut raw) = scratch(&url);
        // No `ANALYZE` but the test's own: the session keeps its plan until the statistics change.
        raw.batch_execute(&format!(
            "ALTER TABLE fenceq_jobs SET (autovacuum_enabled = off); {before_plan} ANALYZE fenceq_jobs;"
        ))
        .unwrap();
        // The session makes its plan now, on the statistics of the table as it is.
        stats_on(&mut raw);
        if !after_plan.is_empty() {
            raw.batch_execute(after_plan).unwrap();
        }
        let before = reads(&mut raw, "fenceq_jobs");
        stats_on(&mut raw);
        let jobs = reads(&mut raw, "fenceq_jobs").since(&before);
        assert_eq!(jobs.scans, 0, "plan made on {made_on}: stats scanned the table");
        assert!(jobs.entries <= 123, "plan made on {made_on}: {} index entries read for 123 live jobs", jobs.entries);
        let stats = queue.stats().unwrap().queue("q");
        assert_eq!((stats.pending, stats.running, stats.completed), (pending, 20, 40000), "plan made on {made_on}");
        assert_eq!(
            (stats.cancelled, stats.exhausted_acknowledged, stats.oldest_pending_run_at),
            (10000, 10000, Some(1)),
            "plan made on {made_on}"
        );
        drop(queue);
        raw.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")).unwrap();
    }
}

/// Every job that ran leaves an entry in the claim index and one in the index of running jobs
/// that vacuum alone removes. `stats` reads such entries once: its index scans mark them, and
/// the next call skips them without visiting the table. After 5,000 jobs were claimed and
/// completed (autovacuum off, the statistics taken while the queue was small), the first
/// call reads their entries, the second only the live jobs'. Broke with the function's
/// bitmap scans allowed (every call read all 10,120 entries again: a bitmap scan marks
/// nothing) and with the statement inline, planned for each call on the small queue's
/// statistics (a scan of the table on every call).
#[test]
fn stats_reads_the_entries_of_jobs_that_ran_once() {
    let Some(url) = server() else { return };
    let (schema, queue, mut raw) = scratch(&url);
    raw.batch_execute(&format!(
        "ALTER TABLE fenceq_jobs SET (autovacuum_enabled = off); {STATS_LIVE} ANALYZE fenceq_jobs;"
    ))
    .unwrap();
    // Each step its own transaction, as the queue's claims and settles are.
    for step in [
        "INSERT INTO fenceq_jobs (queue, payload, run_at, max_attempts, created_at)
         SELECT 'r', '\\x00', 0, 3, 0 FROM generate_series(1, 5000)",
        "UPDATE fenceq_jobs SET state = 'running', attempt = 1, worker = 'w', lease_until = 60000,
                claim_id = gen_random_uuid(), heartbeat_at = 0
         WHERE  queue = 'r'",
        "UPDATE fenceq_jobs SET state = 'completed', lease_until = NULL, settled_at = 10 WHERE queue = 'r'",
    ] {
        raw.batch_execute(step).unwrap();
    }
    wait_for_every_older_snapshot(&mut raw);
    let before = reads(&mut raw, "fenceq_jobs");
    stats_on(&mut raw);
    let after_first = reads(&mut raw, "fenceq_jobs");
    stats_on(&mut raw);
    let (first, second) = (after_first.since(&before), reads(&mut raw, "fenceq_jobs").since(&after_first));
    assert_eq!((first.scans, second.scans), (0, 0), "stats scanned the table");
    assert!(first.entries >= 5000, "the first call read the 5,000 jobs' entries: read {}", first.entries);
    assert!(second.entries <= 120, "the second call read {} entries for 120 live jobs", second.entries);
    drop(queue);
    raw.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")).unwrap();
}

/// Waits (bounded) until no other session of the database holds a snapshot or transaction
/// begun before now: until then, a row such a session may still see is not dead to every
/// transaction, and no scan may mark its index entries.
fn wait_for_every_older_snapshot(raw: &mut PgConnection) {
    let now: Line = sql_query("SELECT pg_current_xact_id()::text AS line").get_result(raw).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let older: N = sql_query(
            "SELECT count(*) AS n FROM pg_stat_activity
             WHERE  datname = current_database() AND pid <> pg_backend_pid()
               AND  (age(backend_xmin) >= age($1::xid) OR age(backend_xid) >= age($1::xid))",
        )
        .bind::<Text, _>(&now.line)
        .get_result(raw)
        .unwrap();
        if older.n == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} sessions kept a snapshot older than this test's for 60 s",
            older.n
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A settle never waits for another transaction's count of settled rows, as it never waits
/// for another's job row: while one transaction has completed a job and not yet committed
/// (its counter shard locked), 200 completions of other jobs of the queue, each in its own
/// transaction, under a lock timeout of 200 ms, all go through. With the shard picked at
/// random and no more, about 96 % of such runs had one wait for the held shard and fail.
#[test]
fn a_settle_never_waits_for_another_transactions_count() {
    let Some(url) = server() else { return };
    let (schema, queue, mut holder) = scratch(&url);
    for _ in 0..201 {
        queue.enqueue(crate::NewJob::new("q", b"x".to_vec())).unwrap();
    }
    let jobs = queue.claim_batch("q", "w", Duration::from_secs(600), 201).unwrap();
    let complete = |conn: &mut PgConnection, job: &crate::Claimed| {
        let token = job.token();
        sql_query(COMPLETE_IF_OWNED.sql)
            .bind::<BigInt, _>(token.id.0)
            .bind::<Integer, _>(token.attempt as i32)
            .bind::<SqlUuid, _>(token.claim_id.0)
            .bind::<BigInt, _>(queue.now_ms())
            .execute(conn)
    };
    holder.batch_execute("BEGIN").unwrap();
    assert_eq!(complete(&mut holder, &jobs[0]).unwrap(), 1);
    let mut other = PgConnection::establish(&url).unwrap();
    other.batch_execute(&format!("SET search_path TO \"{schema}\"; SET lock_timeout = '200ms'")).unwrap();
    for job in &jobs[1..] {
        assert_eq!(complete(&mut other, job).unwrap(), 1, "job {:?} waited for the held count", job.id());
    }
    holder.batch_execute("COMMIT").unwrap();
    assert_eq!(queue.stats().unwrap().queue("q").completed, 201);
    drop(queue);
    holder.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")).unwrap();
}
