//! What each guard of the schema costs per job: the same fenceq calls (`enqueue` one job per
//! call, `enqueue_batch` of 100, `claim_batch(64)`, `complete_all`) on a scratch queue as
//! fenceq creates it, and on copies with one guard taken out (its CHECKs, one index or group
//! of indexes) or, for comparison, an older form put back (schema 6's claim-id triggers,
//! schema 17's AUTOINCREMENT). The difference to the full schema, within one round, is that
//! guard's share.
//!
//! A variant is made by opening a fresh queue (fenceq creates its schema), closing it,
//! changing the empty table with plain SQL, and opening it again; fenceq's own statements
//! then run unchanged. A variant without an index may run some other statement slower (a
//! claim of expired leases without `fenceq_jobs_lease` scans): the figures say what the
//! index costs the hot paths, not that it could go.

use crate::scenarios::{enqueue_in_batches, enqueue_one_per_call_of, job, open};
use crate::{fail, CliResult, ResultExt};
use fenceq::rusqlite::Connection;
use fenceq::Synchronous;
use std::path::Path;
use std::time::{Duration, Instant};

/// One schema variant: its name and the SQL change from fenceq's schema.
pub struct Variant {
    pub name: &'static str,
    change: Change,
}

enum Change {
    None,
    Sql(&'static str),
    /// Recreates the (empty) jobs table from its own definition, edited.
    Table(fn(&str) -> String),
}

/// The variants, fenceq's own schema first.
pub fn variants() -> Vec<Variant> {
    vec![
        Variant { name: "fenceq_schema", change: Change::None },
        Variant { name: "without_checks", change: Change::Table(without_checks) },
        Variant { name: "with_autoincrement", change: Change::Table(with_autoincrement) },
        Variant { name: "without_lease_index", change: Change::Sql("DROP INDEX fenceq_jobs_lease") },
        Variant { name: "without_settled_index", change: Change::Sql("DROP INDEX fenceq_jobs_settled") },
        Variant { name: "without_wait_index", change: Change::Sql("DROP INDEX fenceq_jobs_wait") },
        Variant {
            name: "without_exhausted_unknown_acknowledged_indexes",
            change: Change::Sql(
                "DROP INDEX fenceq_jobs_exhausted; DROP INDEX fenceq_jobs_unknown; DROP INDEX fenceq_jobs_acknowledged",
            ),
        },
        Variant { name: "with_schema_6_claim_id_triggers", change: Change::Sql(SCHEMA_6_TRIGGERS) },
    ]
}

/// The table as schema 17 had it: its ids from AUTOINCREMENT, whose `sqlite_sequence` row
/// every inserting transaction rewrites (fenceq's statements still read the id floor).
fn with_autoincrement(sql: &str) -> String {
    sql.replacen("INTEGER PRIMARY KEY,", "INTEGER PRIMARY KEY AUTOINCREMENT,", 1)
}

/// The two triggers schema 2 to 6 held the claim-id rule with (schema 7 made it a CHECK).
const SCHEMA_6_TRIGGERS: &str = "
    CREATE TRIGGER bench_claim_id_insert BEFORE INSERT ON fenceq_jobs
    WHEN NEW.claim_id IS NULL
     AND (NEW.state = 'running' OR NEW.state = 'waiting' OR NEW.state = 'exhausted' OR NEW.state = 'unknown')
    BEGIN SELECT RAISE(ABORT, 'a claimed row must carry its claim_id'); END;
    CREATE TRIGGER bench_claim_id_update BEFORE UPDATE OF state, claim_id ON fenceq_jobs
    WHEN NEW.claim_id IS NULL
     AND (NEW.state = 'running' OR NEW.state = 'waiting' OR NEW.state = 'exhausted' OR NEW.state = 'unknown')
    BEGIN SELECT RAISE(ABORT, 'a claimed row must carry its claim_id'); END;";

/// The table's definition without its comments and its `CONSTRAINT … CHECK` clauses: the
/// table's own (they come after the columns of `CREATE TABLE`) and those of columns added
/// later by `ALTER TABLE … ADD COLUMN` (which SQLite appends to the definition, each column
/// with its constraint after its type and default).
fn without_checks(sql: &str) -> String {
    let sql: String = sql.lines().map(|line| line.split("--").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    let (Some(open), Some(close)) = (sql.find('('), sql.rfind(')')) else { return sql };
    // The items between the outer parentheses, split at commas outside any parentheses.
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, open + 1);
    for (i, c) in sql[..close].char_indices().skip(open + 1) {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&sql[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&sql[start..close]);
    let kept: Vec<&str> = items
        .into_iter()
        .filter(|item| !item.trim_start().starts_with("CONSTRAINT "))
        .map(|item| item.split(" CONSTRAINT ").next().unwrap_or(item).trim_end())
        .collect();
    format!("{}({}\n)", &sql[..open], kept.join(","))
}

/// Microseconds per job of each phase, on one fresh queue of `variant`.
#[derive(Debug, Clone, Copy)]
pub struct PhaseCosts {
    /// One `enqueue` per call (a transaction each).
    pub enqueue_1_per_call: f64,
    /// `enqueue_batch` of 100.
    pub enqueue: f64,
    pub claim: f64,
    pub complete: f64,
}

/// Makes `variant` at `path` and measures `jobs` jobs through it (and, one per call, a
/// quarter as many more, which the claim and completion then work through too).
pub fn measure(path: &Path, variant: &Variant, jobs: u64) -> CliResult<PhaseCosts> {
    drop(open(path, Synchronous::Normal, 2)?);
    apply(path, &variant.change).context(|| format!("making the guard variant {}", variant.name))?;
    let queue = open(path, Synchronous::Normal, 2)?;
    let singles = (jobs / 4).max(1);
    // Keys after the batches' (`job(0..jobs)`), so that no enqueue is a duplicate.
    let (rate, _) = enqueue_one_per_call_of(&queue, singles, |j| job(jobs + j))?;
    let enqueue_1_per_call = 1e6 / rate;
    let enqueue = 1e6 / enqueue_in_batches(&queue, jobs, 100)?;
    let jobs = jobs + singles;
    let per_job = |d: Duration| d.as_secs_f64() * 1e6 / jobs as f64;

    let mut claiming = Duration::ZERO;
    let mut completing = Duration::ZERO;
    let mut done = 0;
    while done < jobs {
        let started = Instant::now();
        let batch = queue.claim_batch("bench", "w", Duration::from_secs(30), 64)?;
        claiming += started.elapsed();
        if batch.is_empty() {
            break;
        }
        let tokens: Vec<_> = batch.iter().map(|c| c.token).collect();
        let started = Instant::now();
        for result in queue.complete_all(&tokens)? {
            result?;
        }
        completing += started.elapsed();
        done += batch.len() as u64;
    }
    if done != jobs {
        return Err(fail(format!("the guard variant {} settled {done} of {jobs} jobs", variant.name)));
    }
    Ok(PhaseCosts { enqueue_1_per_call, enqueue, claim: per_job(claiming), complete: per_job(completing) })
}

fn apply(path: &Path, change: &Change) -> fenceq::rusqlite::Result<()> {
    let conn = Connection::open(path)?;
    match change {
        Change::None => Ok(()),
        Change::Sql(sql) => conn.execute_batch(sql),
        Change::Table(edit) => {
            let table: String = conn.query_row(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'fenceq_jobs'",
                [],
                |r| r.get(0),
            )?;
            let indexes: Vec<String> = conn
                .prepare("SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'fenceq_jobs' AND sql IS NOT NULL")?
                .query_map([], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            let mut script = format!("BEGIN; DROP TABLE fenceq_jobs; {};", edit(&table));
            for index in indexes {
                script.push_str(&index);
                script.push(';');
            }
            script.push_str("COMMIT;");
            conn.execute_batch(&script)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::without_checks;

    #[test]
    fn without_checks_cuts_the_constraint_clauses() {
        let sql = "CREATE TABLE t (\n    a INTEGER,\n    b TEXT,\n    -- rules, in order\n    CONSTRAINT c CHECK (a > 0),\n    CONSTRAINT d CHECK (b <> '')\n)";
        assert_eq!(without_checks(sql), "CREATE TABLE t (\n    a INTEGER,\n    b TEXT\n)");
        // Columns added later keep their definitions, without their own constraints.
        let altered = "CREATE TABLE t (\n    a INTEGER,\n    CONSTRAINT c CHECK (a > 0), g TEXT CONSTRAINT n CHECK (g IS NULL OR length(g) > 0), h INTEGER NOT NULL DEFAULT 0 CONSTRAINT m CHECK (h = 0 OR (a = 1 AND g IS NOT NULL)))";
        assert_eq!(without_checks(altered), "CREATE TABLE t (\n    a INTEGER, g TEXT, h INTEGER NOT NULL DEFAULT 0\n)");
    }
}
