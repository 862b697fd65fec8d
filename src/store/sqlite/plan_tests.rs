//! The statements' plans on SQLite: the hot statements are compiled once, and the claim,
//! the point operations and the overview's chart read through the primary key or an index,
//! never a scan of the table.

use super::statements::*;
use super::SqliteStore;
use crate::store::{ClaimRequest, Decided, NewRow, QueueDecision, Store, TokenAt};
use rusqlite::{named_params, Connection};

fn plan(conn: &Connection, sql: &str) -> Vec<String> {
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let count = stmt.parameter_count();
    for i in 1..=count {
        stmt.raw_bind_parameter(i, 1i64).unwrap();
    }
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        out.push(row.get::<_, String>(3).unwrap());
    }
    out
}

const PAUSE: Decided<'static> = Decided { action: "pause", by: None, note: None };
const UNPAUSE: Decided<'static> = Decided { action: "unpause", by: None, note: None };

/// A job of queue "q" due and created at `at`, with `key`.
fn row(key: Option<&str>, at: i64) -> NewRow<'_> {
    NewRow { queue: "q", key, payload: b"x", priority: 0, run_at: at, max_attempts: 5, created_at: at, group: None }
}

fn migrated() -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    crate::store::sqlite::connection_init(&Default::default(), &Default::default())(&mut conn).unwrap();
    crate::store::sqlite::migrate::migrate(&mut conn, crate::store::sqlite::migrate::SCHEMA_VERSION).unwrap();
    conn
}

/// The overview's chart reads an hour of completions through the settled jobs' partial
/// index, not the table: SQLite uses a partial index only when the query repeats its
/// `WHERE` term, which `state = 'completed'` alone does not.
#[test]
fn completions_per_minute_searches_the_settled_index() {
    let steps = plan(&migrated(), COMPLETIONS_PER_MINUTE.sql);
    assert!(
        steps[0].starts_with("SEARCH fenceq_jobs USING INDEX fenceq_jobs_settled (settled_at>? AND settled_at<?)"),
        "{steps:?}"
    );
    assert!(!steps.iter().any(|s| s.starts_with("SCAN")), "{steps:?}");
}

/// A statement whose plan depends on a bound value is compiled again at every run after
/// a new binding (SQLite does this for `LIMIT ?`, which cost a full re-prepare per
/// claim); the connections ask for plans that never depend on bindings.
#[test]
fn hot_statements_are_compiled_once() {
    let conn = migrated();
    for i in 0..12i64 {
        let key = format!("k{i}");
        SqliteStore::enqueue(&conn, &row(Some(&key), i)).unwrap();
    }
    let (pause, unpause) = (PAUSE, UNPAUSE);
    // One job at a time, and batches (`claim_rows`, `complete_rows`) of two, three and four.
    for (limit, now) in [(1, 10), (2, 11), (1, 12), (3, 13), (1, 14), (4, 15)] {
        // A paused claim in between: the pause is data, so the claim's plan stays.
        assert!(SqliteStore::pause_queue(&conn, QueueDecision { queue: "q", now, decided: pause }).unwrap());
        assert!(SqliteStore::claim(
            &conn,
            ClaimRequest { queue: "q", worker: "w", now, lease_until: now + 1000, limit }
        )
        .unwrap()
        .jobs
        .is_empty());
        assert!(SqliteStore::unpause_queue(&conn, QueueDecision { queue: "q", now, decided: unpause }).unwrap());
        let claimed =
            SqliteStore::claim(&conn, ClaimRequest { queue: "q", worker: "w", now, lease_until: now + 1000, limit })
                .unwrap()
                .jobs;
        assert_eq!(claimed.len(), limit as usize);
        for c in &claimed {
            assert!(SqliteStore::renew_if_owned(&conn, TokenAt { token: &c.token, now }, now + 1000).unwrap());
        }
        let tokens: Vec<_> = claimed.iter().map(|c| c.token).collect();
        assert!(SqliteStore::complete_many_if_owned(&conn, &tokens, now).unwrap().into_iter().all(|done| done));
    }
    for statement in [
        ENQUEUE,
        PAUSE_QUEUE,
        UNPAUSE_QUEUE,
        CLAIM_SELECT,
        CLAIM_UPDATE,
        CLAIM_READ,
        RENEW_IF_OWNED,
        COMPLETE_IF_OWNED,
        claim_rows(BATCH_ROWS[0]),
        complete_rows(BATCH_ROWS[0]),
    ] {
        let (name, stmt) = (statement.name, conn.prepare_cached(statement.sql).unwrap());
        assert!(stmt.get_status(rusqlite::StatementStatus::Run) >= 3, "{name} ran");
        assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0, "{name} was compiled again");
    }
}

/// Claim latency stays flat as the queue grows only if the claim never scans the table
/// and never sorts the pending rows: each branch walks its partial index in order.
#[test]
fn the_claim_walks_partial_indexes_without_scanning_or_sorting() {
    let conn = migrated();
    let steps = plan(&conn, CLAIM_SELECT.sql);
    let text = steps.join("\n");
    assert!(text.contains("INDEX fenceq_jobs_claim (queue=?)"), "{text}");
    assert!(text.contains("INDEX fenceq_jobs_lease (queue=? AND lease_until<?)"), "{text}");
    // The pause: one primary-key probe, evaluated before either branch (see the next test).
    assert!(text.contains("SEARCH fenceq_queues USING PRIMARY KEY (queue=?)"), "{text}");
    assert!(!text.contains("SCAN fenceq_queues"), "{text}");
    // The queue's back-off: one primary-key probe too, beside the pause's.
    assert!(text.contains("SEARCH fenceq_queue_flow USING PRIMARY KEY (queue=?)"), "{text}");
    assert!(!text.contains("SCAN fenceq_queue_flow"), "{text}");
    assert!(!steps.iter().any(|s| s.starts_with("SCAN fenceq_jobs") && !s.contains("INDEX")), "{text}");
    // The pending branch needs no sort: the index is in claim order. (The final merge of
    // at most 2 x limit rows may sort; that is bounded by the batch, not the queue.)
    let pending_branch = plan(
        &conn,
        "SELECT id FROM fenceq_jobs WHERE queue = ?1 AND state = 'pending' AND group_held = 0 AND run_at <= ?2
         ORDER BY priority DESC, run_at, id LIMIT ?3",
    );
    assert!(!pending_branch.iter().any(|s| s.contains("TEMP B-TREE")), "{pending_branch:?}");
}

/// The pause is looked up once per claim, and a paused claim reads no job: with the
/// check as a `NOT EXISTS` in the branches' `WHERE`, SQLite tested it against every
/// pending row of the queue and a paused claim walked the whole index to find nothing
/// (2.7 ms for 90,000 pending rows, against 13 µs for a 64-row claim of the same queue).
#[test]
fn a_paused_claim_reads_no_job_and_an_unpaused_one_pays_one_probe() {
    let conn = migrated();
    conn.execute_batch("BEGIN").unwrap();
    for i in 0..5_000i64 {
        SqliteStore::enqueue(&conn, &row(None, i)).unwrap();
    }
    conn.execute_batch("COMMIT").unwrap();
    let steps = |expected_rows: usize| {
        let mut stmt = conn.prepare(CLAIM_SELECT.sql).unwrap();
        let params = named_params! { ":queue": "q", ":now": 10_000i64, ":limit": 64 };
        let rows = stmt.query_map(params, |r| r.get::<_, i64>(0)).unwrap().count();
        assert_eq!(rows, expected_rows);
        stmt.get_status(rusqlite::StatementStatus::VmStep)
    };
    let never_paused = steps(64);
    assert!(SqliteStore::pause_queue(&conn, QueueDecision { queue: "q", now: 1, decided: PAUSE }).unwrap());
    let paused = steps(0);
    assert!(SqliteStore::unpause_queue(&conn, QueueDecision { queue: "q", now: 2, decided: UNPAUSE }).unwrap());
    let unpaused = steps(64);
    assert!(paused < 64, "a paused claim ran {paused} VM steps: it reads jobs");
    assert!(paused * 10 < never_paused, "paused {paused} vs unpaused {never_paused} steps");
    // An unpaused claim with a row in fenceq_queues costs what one without it does.
    assert!(unpaused.abs_diff(never_paused) <= 8, "{unpaused} vs {never_paused} steps");
    // A queue backing off is probed the same way: its claim reads no job until the end.
    conn.execute_batch(
        "INSERT INTO fenceq_queue_flow (queue, backoff_until, backoff_reason, backoff_since, updated_at) VALUES ('q', 10001, '429', 1, 1)",
    )
    .unwrap();
    let backing_off = steps(0);
    assert!(backing_off < 64, "a backed-off claim ran {backing_off} VM steps: it reads jobs");
    conn.execute_batch("UPDATE fenceq_queue_flow SET backoff_until = 10000").unwrap();
    let ended = steps(64);
    assert!(ended.abs_diff(never_paused) <= 8, "{ended} vs {never_paused} steps");
}

#[test]
fn point_operations_use_the_primary_key_or_an_index() {
    let conn = migrated();
    for statement in [
        CLAIM_UPDATE,
        CLAIM_READ,
        COMPLETE_IF_OWNED,
        RENEW_IF_OWNED,
        FIND_BY_KEY,
        EXHAUSTIONS,
        UNKNOWNS,
        REAP_EXPIRED,
        REAP_WAITING,
        PRUNE_SETTLED,
        PRUNE_ACKNOWLEDGED,
        DUE_OR_RUNNING,
        OWNED_LEASE,
        EXTEND_OWNED,
        ACKNOWLEDGE_JOB_IF_UNACKNOWLEDGED,
        ACKNOWLEDGE_ALL,
        PAUSE_QUEUE,
        UNPAUSE_QUEUE,
        QUEUE_PAUSE,
        COMPLETIONS_PER_MINUTE,
        SNOOZE_IF_OWNED,
        EXHAUST_PAST_SNOOZE_CAP_IF_OWNED,
        EXHAUST_OUT_OF_ATTEMPTS_IF_OWNED,
        BACK_OFF_QUEUE_OF,
        QUEUE_BACKOFF,
        CLEAR_QUEUE_BACKOFF,
    ] {
        let (name, steps) = (statement.name, plan(&conn, statement.sql));
        let scans: Vec<&String> = steps
            .iter()
            .filter(|s| {
                (s.starts_with("SCAN fenceq_jobs") || s.starts_with("SCAN fenceq_queue")) && !s.contains("INDEX")
            })
            .collect();
        assert!(scans.is_empty(), "{name} scans the table: {steps:?}");
    }
}

/// A new job's id is two lookups (the floor's one row by its key, the table's largest id from
/// the end of its primary key), in every intake statement, and the floor's raise after a prune
/// reads no job: what replaced AUTOINCREMENT's write per transaction must not scan.
#[test]
fn new_ids_read_the_floor_and_the_largest_id_without_a_scan() {
    let conn = migrated();
    for statement in [ENQUEUE, ENQUEUE_IN_GROUP, enqueue_rows(10), enqueue_rows(100), JOB_ID_SEQUENCE] {
        let steps = plan(&conn, statement.sql);
        let text = steps.join("\n");
        assert!(
            text.contains("SEARCH fenceq_id_floor USING INTEGER PRIMARY KEY (rowid=?)"),
            "{}: {text}",
            statement.name
        );
        assert!(steps.iter().any(|s| s == "SEARCH fenceq_jobs"), "{}: the largest id: {text}", statement.name);
        // (A multi-row statement scans its own rows: "SCAN CONSTANT ROW", "N-ROW VALUES CLAUSE".)
        assert!(
            !steps.iter().any(|s| s.starts_with("SCAN fenceq_") && !s.contains("INDEX")),
            "{}: {text}",
            statement.name
        );
    }
    let steps = plan(&conn, RAISE_ID_FLOOR.sql);
    assert!(!steps.iter().any(|s| s.contains("fenceq_jobs") || s.starts_with("SCAN")), "RAISE_ID_FLOOR: {steps:?}");
}

/// The batched claim and completion are driven by their list: one primary-key probe per
/// listed job (padding rows included), never a scan of the table or of an index, whatever
/// the queue holds.
/// Also where `ANALYZE` has run on an empty queue, whose statistics make every scan look
/// free.
#[test]
fn batched_statements_probe_the_primary_key_per_listed_job() {
    let plain = migrated();
    let analyzed = migrated();
    analyzed.execute_batch("ANALYZE").unwrap();
    for (conn, size) in [&plain, &analyzed].into_iter().flat_map(|c| BATCH_ROWS.map(|size| (c, size))) {
        for statement in [claim_rows(size), complete_rows(size)] {
            let steps = plan(conn, statement.sql);
            let text = steps.join("\n");
            assert!(
                text.contains("SEARCH fenceq_jobs USING INTEGER PRIMARY KEY (rowid=?)"),
                "{}: {text}",
                statement.name
            );
            assert!(
                !steps.iter().any(|s| s.contains("fenceq_jobs") && s.starts_with("SCAN")),
                "{}: {text}",
                statement.name
            );
            // What is scanned is the list itself (SQLite words it "N-ROW VALUES CLAUSE", or
            // older versions "N CONSTANT ROWS" materialized as `t`).
            let list = |s: &String| s.contains("VALUES CLAUSE") || s.contains("CONSTANT ROWS") || s == "SCAN t";
            assert!(steps.iter().filter(|s| s.starts_with("SCAN")).all(list), "{}: {text}", statement.name);
        }
    }
}

/// A group's decisions read its live jobs through `fenceq_jobs_group`, never the table: the
/// holder probe of a grouped enqueue and of a release, and the choice of the group's next
/// job by a release and by a limited claim's deferral, whatever the group's history or
/// backlog.
#[test]
fn group_statements_search_the_group_index() {
    let conn = migrated();
    for statement in [ENQUEUE_IN_GROUP, RELEASE_GROUP, HELD_GROUPS, DEFER_GROUP_NEXT] {
        let steps = plan(&conn, statement.sql);
        let text = steps.join("\n");
        let probe = if statement.name == "HELD_GROUPS" {
            "USING INDEX fenceq_jobs_group (queue=?"
        } else {
            "USING INDEX fenceq_jobs_group (queue=? AND group_name=? AND group_held=?)"
        };
        assert!(text.contains(probe), "{}: {text}", statement.name);
        assert!(!steps.iter().any(|s| s.starts_with("SCAN") && !s.contains("INDEX")), "{}: {text}", statement.name);
    }
    let steps = plan(&conn, GROUP_OF.sql);
    assert!(steps[0].contains("USING INTEGER PRIMARY KEY"), "{steps:?}");
}

/// A limited claim counts a window's starts through the starts' indexes, and its candidates
/// come from the claim's partial indexes, as the claim's do.
#[test]
fn limit_statements_search_their_indexes() {
    let conn = migrated();
    for statement in [QUEUE_STARTS, QUEUE_STARTS_LATEST_FIRST] {
        let steps = plan(&conn, statement.sql).join("\n");
        assert!(steps.contains("SEARCH fenceq_starts USING PRIMARY KEY (queue=? AND at>?)"), "{steps}");
        assert!(!steps.contains("TEMP B-TREE"), "{}: read in key order: {steps}", statement.name);
    }
    for statement in [GROUP_STARTS, GROUP_STARTS_LATEST_FIRST] {
        let steps = plan(&conn, statement.sql).join("\n");
        assert!(steps.contains("INDEX fenceq_starts_group (queue=? AND group_name=? AND at>?)"), "{steps}");
        assert!(!steps.contains("TEMP B-TREE"), "{}: read in index order: {steps}", statement.name);
    }
    let candidates = plan(&conn, CLAIM_CANDIDATES.sql);
    let text = candidates.join("\n");
    assert!(text.contains("INDEX fenceq_jobs_claim (queue=?)"), "{text}");
    assert!(!candidates.iter().any(|s| s.starts_with("SCAN fenceq_jobs") && !s.contains("INDEX")), "{text}");
    let running = plan(&conn, RUNNING_COUNT.sql).join("\n");
    assert!(running.contains("INDEX fenceq_jobs_lease (queue=?)"), "{running}");
    let forget = plan(&conn, FORGET_STARTS.sql).join("\n");
    assert!(forget.contains("USING PRIMARY KEY (queue=? AND at<?)"), "{forget}");
    let spent = plan(&conn, SPENT_GROUPS.sql).join("\n");
    // The window's starts by either key (the window holds no more starts than are kept).
    assert!(spent.contains("SEARCH fenceq_starts USING") && spent.contains("(queue=?"), "{spent}");
    let head = plan(&conn, DEFERRED_HEAD.sql).join("\n");
    assert!(head.contains("INDEX fenceq_jobs_group (queue=? AND group_name=?"), "{head}");
    let latest = plan(&conn, KEPT_STARTS.sql).join("\n");
    assert!(latest.contains("SEARCH fenceq_starts USING PRIMARY KEY (queue=?)"), "{latest}");
}

/// `stats` never reads a settled row: each live state is read through its own partial index
/// (looking up the rows it lists, live rows all), and the settled ones from their counts.
/// Retention keeps settled rows for days, so a scan of the table would read mostly them.
/// Also where `ANALYZE` has run, on an empty queue or on one of mostly settled rows.
#[test]
fn stats_reads_the_partial_indexes_and_the_settled_counts() {
    let plain = migrated();
    let analyzed = migrated();
    analyzed.execute_batch("ANALYZE").unwrap();
    let settled = migrated();
    settled
        .execute_batch(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
             INSERT INTO fenceq_jobs (queue, payload, state, run_at, attempt, max_attempts, created_at, settled_at)
             SELECT 'q', x'01', 'completed', i, 1, 5, i, i FROM n;
             ANALYZE;",
        )
        .unwrap();
    for conn in [&plain, &analyzed, &settled] {
        let steps = plan(conn, STATS.sql);
        let text = steps.join("\n");
        for index in [
            "fenceq_jobs_claim",
            "fenceq_jobs_group",
            "fenceq_jobs_lease",
            "fenceq_jobs_wait",
            "fenceq_jobs_unknown",
            "fenceq_jobs_exhausted",
        ] {
            assert!(text.contains(&format!("INDEX {index}")), "{index}: {text}");
        }
        // Every access to the jobs is through one of those indexes.
        let jobs: Vec<&String> = steps.iter().filter(|s| s.contains("fenceq_jobs ")).collect();
        assert_eq!(jobs.len(), 6, "{text}");
        assert!(jobs.iter().all(|s| s.contains("USING INDEX") || s.contains("USING COVERING INDEX")), "{text}");
        assert!(!text.contains("fenceq_jobs_settled") && !text.contains("fenceq_jobs_acknowledged"), "{text}");
        assert!(text.contains("SCAN fenceq_settled_counts"), "{text}");
    }
}

/// Each statement that moves a count reaches its row through the primary key of
/// `fenceq_settled_counts` (and a job's row through the jobs' primary key).
#[test]
fn settled_counts_move_through_their_primary_key() {
    let conn = migrated();
    for statement in [COUNT_SETTLED, COUNT_SETTLED_JOB, UNCOUNT_SETTLED, EXHAUSTED_JOB] {
        let steps = plan(&conn, statement.sql);
        let text = steps.join("\n");
        assert!(!steps.iter().any(|s| s.starts_with("SCAN")), "{}: {text}", statement.name);
        if statement.name == "UNCOUNT_SETTLED" {
            assert!(text.contains("SEARCH fenceq_settled_counts USING PRIMARY KEY (queue=? AND state=?)"), "{text}");
        }
        if statement.name == "COUNT_SETTLED_JOB" || statement.name == "EXHAUSTED_JOB" {
            assert!(text.contains("SEARCH fenceq_jobs USING INTEGER PRIMARY KEY (rowid=?)"), "{text}");
        }
    }
}

/// The history of attempts is read, numbered and pruned through its primary key (job, seq):
/// a job's records newest first without a sort, the next number at the end of the job's
/// range, and a pruned job's records as that range.
#[test]
fn the_history_of_attempts_is_read_numbered_and_pruned_through_its_key() {
    let conn = migrated();
    let steps = plan(&conn, ATTEMPTS.sql);
    assert_eq!(steps, ["SEARCH fenceq_attempts USING PRIMARY KEY (job_id=?)"], "{steps:?}");
    for statement in [RECORD_ATTEMPT, RECORD_EXPIRED_LEASE] {
        let steps = plan(&conn, statement.sql);
        assert!(steps.iter().any(|s| s == "SEARCH fenceq_jobs USING INTEGER PRIMARY KEY (rowid=?)"), "{steps:?}");
        assert!(steps.iter().any(|s| s.contains("SEARCH a USING PRIMARY KEY (job_id=?)")), "{steps:?}");
        assert!(!steps.iter().any(|s| s.starts_with("SCAN") || s.contains("TEMP B-TREE")), "{steps:?}");
    }
    let steps = plan(&conn, FORGET_ATTEMPTS.sql);
    assert_eq!(steps, ["SEARCH fenceq_attempts USING PRIMARY KEY (job_id=?)"], "{steps:?}");
}
