//! The schema upgrader on PostgreSQL: the same versions as SQLite's (`schema/postgres/`, one file
//! per version with the same number and meaning), tracked in the table
//! `fenceq_schema_version` (one row per applied version). Each migration runs in its own
//! transaction under a transaction-scoped advisory lock keyed by the schema, and re-reads the
//! version after taking it, so that several processes opening the same old schema at once
//! all succeed: one applies each version, the others find it applied. A schema written by a
//! newer build is refused before anything is written.

use super::error::PgContext;
use super::PgConn;
use crate::error::{Error, Result};
use crate::store::{migrations, Migration, MIGRATION_NAMES};
use diesel::connection::{AnsiTransactionManager, SimpleConnection, TransactionManager};
use diesel::sql_types::{BigInt, Text};
use diesel::{sql_query, OptionalExtension, QueryableByName, RunQueryDsl};

/// Every migration, in order ([`MIGRATION_NAMES`], the same versions as SQLite's).
pub(crate) const MIGRATIONS: [Migration; MIGRATION_NAMES.len()] = migrations([
    include_str!("../../../schema/postgres/0001_create_jobs.sql"),
    include_str!("../../../schema/postgres/0002_add_claim_id.sql"),
    include_str!("../../../schema/postgres/0003_durable_exhaustion.sql"),
    include_str!("../../../schema/postgres/0004_decisions.sql"),
    include_str!("../../../schema/postgres/0005_schedules.sql"),
    include_str!("../../../schema/postgres/0006_paused_queues.sql"),
    include_str!("../../../schema/postgres/0007_checks_in_table.sql"),
    include_str!("../../../schema/postgres/0008_flow_control.sql"),
    include_str!("../../../schema/postgres/0009_limited_claim.sql"),
    include_str!("../../../schema/postgres/0010_schedule_specs.sql"),
    include_str!("../../../schema/postgres/0011_counted_starts.sql"),
    include_str!("../../../schema/postgres/0012_backoff_lifts.sql"),
    include_str!("../../../schema/postgres/0013_settled_counts.sql"),
    include_str!("../../../schema/postgres/0014_grouped_claim.sql"),
    include_str!("../../../schema/postgres/0015_fair_group_claims.sql"),
    include_str!("../../../schema/postgres/0016_claim_function.sql"),
    include_str!("../../../schema/postgres/0017_stats_function.sql"),
    include_str!("../../../schema/postgres/0018_ids_without_autoincrement.sql"),
    include_str!("../../../schema/postgres/0019_attempt_history.sql"),
]);

/// The schema version this build writes and understands (the same as SQLite's).
pub(crate) const SCHEMA_VERSION: i64 = crate::store::SCHEMA_VERSION;

const VERSION_TABLE: &str = "
    CREATE TABLE IF NOT EXISTS fenceq_schema_version (
        version    BIGINT      PRIMARY KEY,
        name       TEXT        NOT NULL,
        applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
    )";

#[derive(QueryableByName)]
struct Version {
    #[diesel(sql_type = BigInt)]
    version: i64,
}

#[derive(QueryableByName)]
struct SchemaName {
    #[diesel(sql_type = Text)]
    name: String,
}

/// The schema version of the connection's schema (0 when it has no fenceq tables).
pub(crate) fn version(conn: &mut PgConn) -> Result<i64> {
    let exists = sql_query("SELECT 1::bigint AS version WHERE to_regclass('fenceq_schema_version') IS NOT NULL")
        .get_result::<Version>(conn)
        .optional()
        .pg("SCHEMA_VERSION")?;
    if exists.is_none() {
        return Ok(0);
    }
    sql_query("SELECT coalesce(max(version), 0)::bigint AS version FROM fenceq_schema_version")
        .get_result::<Version>(conn)
        .map(|v| v.version)
        .pg("SCHEMA_VERSION")
}

/// Refuses a schema written by a newer build before anything is written to it.
pub(crate) fn check_not_newer(conn: &mut PgConn) -> Result<i64> {
    let found = version(conn)?;
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew { found, supported: SCHEMA_VERSION });
    }
    Ok(found)
}

/// Brings the schema `schema` (the connection's `search_path`; `None`: its current schema)
/// up to `target`, creating the schema if missing. Returns the versions this call applied.
pub(crate) fn migrate(conn: &mut PgConn, schema: Option<&str>, target: i64) -> Result<Vec<i64>> {
    let current = match schema {
        // A schema that does not exist yet has no tables (and `to_regclass` would look
        // elsewhere on the search path, so it is not asked).
        Some(name) if !schema_exists(conn, name)? => 0,
        _ => check_not_newer(conn)?,
    };
    let mut applied = Vec::new();
    if current >= target {
        return Ok(applied);
    }
    let lock_name = match schema {
        Some(name) => name.to_string(),
        None => {
            sql_query("SELECT coalesce(current_schema(), '') AS name")
                .get_result::<SchemaName>(conn)
                .pg("current_schema")?
                .name
        }
    };
    for migration in MIGRATIONS.iter().filter(|m| m.version > current && m.version <= target) {
        if apply(conn, schema, &lock_name, migration)? {
            applied.push(migration.version);
        }
    }
    Ok(applied)
}

fn schema_exists(conn: &mut PgConn, name: &str) -> Result<bool> {
    sql_query("SELECT 1::bigint AS version FROM pg_namespace WHERE nspname = $1")
        .bind::<Text, _>(name)
        .get_result::<Version>(conn)
        .optional()
        .map(|found| found.is_some())
        .pg("schema exists")
}

/// Applies one migration in a transaction of its own unless the schema already has it; true
/// when this call applied it.
fn apply(conn: &mut PgConn, schema: Option<&str>, lock_name: &str, migration: &Migration) -> Result<bool> {
    AnsiTransactionManager::begin_transaction(conn).pg("BEGIN (migration)")?;
    let result = apply_in_transaction(conn, schema, lock_name, migration);
    match result {
        Ok(applied) => {
            AnsiTransactionManager::commit_transaction(conn).pg("COMMIT (migration)")?;
            Ok(applied)
        }
        Err(e) => {
            let _ = AnsiTransactionManager::rollback_transaction(conn);
            Err(e)
        }
    }
}

fn apply_in_transaction(
    conn: &mut PgConn,
    schema: Option<&str>,
    lock_name: &str,
    migration: &Migration,
) -> Result<bool> {
    // Held until this transaction ends; every opener of the same schema takes the same lock
    // (the key is a hash of the schema's name, in fenceq's own namespace of lock keys).
    sql_query("SELECT pg_advisory_xact_lock(hashtext('fenceq migrate ' || $1))")
        .bind::<Text, _>(lock_name)
        .execute(conn)
        .pg("pg_advisory_xact_lock (migration)")?;
    if let Some(name) = schema {
        // Validated by the builder as a plain lowercase identifier: safe to quote as is.
        conn.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{name}\"")).pg("CREATE SCHEMA (migration)")?;
    }
    conn.batch_execute(VERSION_TABLE).pg("CREATE TABLE fenceq_schema_version")?;
    // Re-read under the lock: a racing process may have applied it a moment ago.
    let version = check_not_newer(conn)?;
    if version >= migration.version {
        return Ok(false);
    }
    if version != migration.version - 1 {
        return Err(Error::invalid(
            "schema",
            format!("version {version} cannot be upgraded to {} directly", migration.version),
        ));
    }
    conn.batch_execute(migration.sql).pg(migration.name)?;
    sql_query("INSERT INTO fenceq_schema_version (version, name) VALUES ($1, $2)")
        .bind::<BigInt, _>(migration.version)
        .bind::<Text, _>(migration.name)
        .execute(conn)
        .pg("INSERT fenceq_schema_version (migration)")?;
    Ok(true)
}
