//! The schema upgrader: embedded migrations tracked in `PRAGMA user_version`, each applied in
//! its own `BEGIN IMMEDIATE` transaction that re-reads the version under the write lock, so
//! that several processes opening the same old file at once all succeed.

use super::error::SqlContext;
use crate::error::{Error, Result};
use crate::store::{migrations, Migration, MIGRATION_NAMES};
use rusqlite::{Connection, ErrorCode, TransactionBehavior};
use std::time::Duration;

/// Every migration, in order ([`MIGRATION_NAMES`]). Laid out by capability level: the base
/// lifecycle, then the fenced claim id (added with ALTER), then the durable exhaustion
/// columns, then the record of operators' decisions, then the periodic jobs' last ticks, then
/// paused queues.
pub(crate) const MIGRATIONS: [Migration; MIGRATION_NAMES.len()] = migrations([
    include_str!("../../../schema/sqlite/0001_create_jobs.sql"),
    include_str!("../../../schema/sqlite/0002_add_claim_id.sql"),
    include_str!("../../../schema/sqlite/0003_durable_exhaustion.sql"),
    include_str!("../../../schema/sqlite/0004_decisions.sql"),
    include_str!("../../../schema/sqlite/0005_schedules.sql"),
    include_str!("../../../schema/sqlite/0006_paused_queues.sql"),
    include_str!("../../../schema/sqlite/0007_checks_in_table.sql"),
    include_str!("../../../schema/sqlite/0008_flow_control.sql"),
    include_str!("../../../schema/sqlite/0009_limited_claim.sql"),
    include_str!("../../../schema/sqlite/0010_schedule_specs.sql"),
    include_str!("../../../schema/sqlite/0011_counted_starts.sql"),
    include_str!("../../../schema/sqlite/0012_backoff_lifts.sql"),
    include_str!("../../../schema/sqlite/0013_settled_counts.sql"),
    include_str!("../../../schema/sqlite/0014_grouped_claim.sql"),
    include_str!("../../../schema/sqlite/0015_fair_group_claims.sql"),
    include_str!("../../../schema/sqlite/0016_claim_function.sql"),
    include_str!("../../../schema/sqlite/0017_stats_function.sql"),
    include_str!("../../../schema/sqlite/0018_ids_without_autoincrement.sql"),
    include_str!("../../../schema/sqlite/0019_attempt_history.sql"),
]);

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = crate::store::SCHEMA_VERSION;

/// How often a migration transaction is restarted after SQLite rolled it back on its own.
const MIGRATION_RESTARTS: u32 = 20;

pub(crate) fn user_version(conn: &Connection) -> Result<i64> {
    conn.query_row("PRAGMA user_version", [], |row| row.get(0)).sql("PRAGMA user_version")
}

/// Refuses a database written by a newer build before anything is written to it.
pub(crate) fn check_not_newer(conn: &Connection) -> Result<i64> {
    let found = user_version(conn)?;
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew { found, supported: SCHEMA_VERSION });
    }
    Ok(found)
}

/// Switches the file to WAL. `PRAGMA journal_mode=WAL` does not call the busy handler while
/// another connection writes, so it is retried here, bounded by `patience`.
pub(crate) fn enable_wal(conn: &Connection, patience: Duration) -> Result<()> {
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get::<_, String>(0)) {
            Ok(_) => return Ok(()), // "wal", or "memory" for an in-memory database
            Err(e) if is_busy(&e) && started.elapsed() < patience => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(Error::sqlite("PRAGMA journal_mode = WAL", e)),
        }
    }
}

/// Applies every migration above the file's version, up to `target`. Returns the versions
/// this call applied (another process may have applied the rest).
pub(crate) fn migrate(conn: &mut Connection, target: i64) -> Result<Vec<i64>> {
    let mut applied = Vec::new();
    // A file that is already current needs no write lock (and may be opened read-only).
    let current = check_not_newer(conn)?;
    for migration in MIGRATIONS.iter().filter(|m| m.version > current && m.version <= target) {
        let mut restarts = 0;
        loop {
            match apply(conn, migration) {
                Ok(true) => {
                    applied.push(migration.version);
                    break;
                }
                Ok(false) => break,
                // SQLite rolled the transaction back by itself (busy, full, nomem in the middle):
                // the whole migration starts again under a fresh write lock.
                Err(Failure::Restart(_)) if restarts < MIGRATION_RESTARTS => restarts += 1,
                Err(Failure::Restart(e) | Failure::Fatal(e)) => return Err(e),
            }
        }
    }
    Ok(applied)
}

/// How a migration attempt failed.
enum Failure {
    /// The transaction is gone (SQLite rolled it back, or it could not start or commit):
    /// running the migration again may succeed.
    Restart(Error),
    /// Running it again cannot help.
    Fatal(Error),
}

/// Applies one migration unless the file already has it; true when this call applied it.
fn apply(conn: &mut Connection, migration: &Migration) -> std::result::Result<bool, Failure> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| restart_if_busy(Error::sqlite("BEGIN IMMEDIATE (migration)", e)))?;
    // Re-read under the write lock: a racing process may have applied it a moment ago.
    let version = check_not_newer(&tx).map_err(fatal)?;
    if version >= migration.version {
        return Ok(false);
    }
    if version != migration.version - 1 {
        return Err(fatal(Error::invalid(
            "schema",
            format!("version {version} cannot be upgraded to {} directly", migration.version),
        )));
    }
    for statement in statements(migration.sql) {
        if let Err(e) = tx.execute_batch(statement) {
            if tx.is_autocommit() {
                // SQLite already rolled back: never continue outside the transaction.
                return Err(Failure::Restart(Error::sqlite(migration.name, e)));
            }
            match added_column(statement) {
                // A process that does not bump the version (or a hand-applied fix) added the
                // column already: if it exists now, the statement counts as applied.
                Some(column) if is_duplicate_column(&e) && has_column(&tx, column).map_err(fatal)? => {}
                _ => return Err(fatal(Error::sqlite(migration.name, e))),
            }
        }
    }
    tx.pragma_update(None, "user_version", migration.version)
        .map_err(|e| fatal(Error::sqlite("PRAGMA user_version (migration)", e)))?;
    tx.commit().map_err(|e| restart_if_busy(Error::sqlite("COMMIT (migration)", e)))?;
    Ok(true)
}

fn restart_if_busy(e: Error) -> Failure {
    if e.is_retryable() {
        Failure::Restart(e)
    } else {
        Failure::Fatal(e)
    }
}

fn fatal(e: Error) -> Failure {
    Failure::Fatal(e)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if f.code == ErrorCode::DatabaseBusy || f.code == ErrorCode::DatabaseLocked)
}

fn is_duplicate_column(e: &rusqlite::Error) -> bool {
    e.to_string().contains("duplicate column name")
}

fn has_column(conn: &Connection, column: &str) -> Result<bool> {
    conn.query_row("SELECT count(*) FROM pragma_table_info('fenceq_jobs') WHERE name = ?1", [column], |row| {
        row.get::<_, i64>(0)
    })
    .map(|n| n > 0)
    .sql("pragma_table_info")
}

/// The column an `ALTER TABLE … ADD COLUMN name …` statement adds.
fn added_column(statement: &str) -> Option<&str> {
    let words: Vec<&str> =
        statement.lines().filter(|l| !l.trim_start().starts_with("--")).flat_map(str::split_whitespace).collect();
    let is_alter = words.first()?.eq_ignore_ascii_case("ALTER");
    let at = words.iter().position(|w| w.eq_ignore_ascii_case("COLUMN"))?;
    is_alter.then(|| words.get(at + 1).copied()).flatten()
}

/// Splits a migration into statements: each ends with `;` at the end of a line, except that
/// a `CREATE TRIGGER` runs until its `END;` line.
pub(crate) fn statements(sql: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut in_trigger = false;
    let mut offset = 0;
    for line in sql.split_inclusive('\n') {
        let trimmed = line.trim();
        let code = trimmed.split("--").next().unwrap_or("").trim();
        if code.to_ascii_uppercase().starts_with("CREATE TRIGGER") {
            in_trigger = true;
        }
        offset += line.len();
        let ends = if in_trigger { code.eq_ignore_ascii_case("END;") } else { code.ends_with(';') };
        if ends {
            in_trigger = false;
            let statement = sql[start..offset].trim();
            out.push(statement);
            start = offset;
        }
    }
    debug_assert!(sql[start..].lines().all(|l| l.trim().is_empty() || l.trim().starts_with("--")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_keep_triggers_whole() {
        let all = statements(MIGRATIONS[1].sql);
        assert_eq!(all.len(), 4);
        assert!(all[0].contains("ADD COLUMN claim_id"));
        let code = |s: &str| s.lines().filter(|l| !l.trim_start().starts_with("--")).collect::<Vec<_>>().join("\n");
        assert!(code(all[2]).starts_with("CREATE TRIGGER") && all[2].ends_with("END;"), "{}", all[2]);
        assert!(code(all[3]).starts_with("CREATE TRIGGER") && all[3].ends_with("END;"), "{}", all[3]);
        assert_eq!(added_column(all[0]), Some("claim_id"));
        assert_eq!(added_column(all[1]), None);
        for m in &MIGRATIONS {
            for s in statements(m.sql) {
                assert!(s.ends_with(';'), "{s}");
            }
        }
    }

    #[test]
    fn duplicate_column_from_a_racing_writer_counts_as_applied() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn, 1).unwrap();
        // Another writer added the column without bumping the version.
        conn.execute_batch("ALTER TABLE fenceq_jobs ADD COLUMN claim_id BLOB").unwrap();
        assert_eq!(migrate(&mut conn, SCHEMA_VERSION).unwrap(), (2..=SCHEMA_VERSION).collect::<Vec<_>>());
        assert_eq!(user_version(&conn).unwrap(), SCHEMA_VERSION);
        assert!(has_column(&conn, "claim_id").unwrap());
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
        assert!(matches!(migrate(&mut conn, SCHEMA_VERSION), Err(Error::SchemaTooNew { .. })));
    }
}
