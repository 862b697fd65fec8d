//! The store contract on SQLite: each method binds its parameters and runs its named
//! statement (`statements.rs`) on the connection of the transaction it was given.

use super::error::SqlContext;
use super::statements::*;
use super::writer::exec;
use super::SqliteStore;
use crate::error::Result;
use crate::job::{ClaimId, ClaimToken, Claimed, Decision, Exhaustion, Job, JobId, JobState, Resolution};
use crate::report::{CheckpointReport, CommitStats, PausedQueue, ReapReport};
use crate::store::{Decided, Identity, NewRow, OwnedLease, StatsRow, Store};
use rusqlite::{named_params, Connection, OptionalExtension, Row, ToSql};
use std::time::Duration;

/// Named parameters of one statement.
type Params<'a> = Vec<(&'a str, &'a dyn ToSql)>;

impl Store for SqliteStore {
    type Tx = Connection;

    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.run_read(f)
    }

    fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.run_write(f)
    }

    fn submit<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.run_submit(work)
    }

    /// SQLite rolls a transaction back by itself on some errors (an `INSERT OR ROLLBACK`,
    /// disk full, I/O): every later statement would then run in autocommit mode.
    fn still_in_transaction(tx: &Connection) -> Result<()> {
        if tx.is_autocommit() {
            return Err(crate::Error::TransactionLost);
        }
        Ok(())
    }

    fn commit_stats(&self) -> CommitStats {
        let (transactions, requests, wal_syncs) = self.writer.commit_stats();
        CommitStats { transactions, requests, wal_syncs }
    }

    fn checkpoint(&self, patience: Duration) -> Result<Option<CheckpointReport>> {
        self.checkpoint_wal(patience).map(Some)
    }

    fn schema_version(tx: &Connection) -> Result<i64> {
        super::migrate::user_version(tx)
    }

    fn enqueue(tx: &Connection, row: &NewRow<'_>) -> Result<Option<JobId>> {
        let params = rusqlite::params![
            row.queue,
            row.key,
            row.payload,
            row.priority,
            row.run_at,
            row.max_attempts,
            row.created_at
        ];
        let inserted = tx.prepare_cached(ENQUEUE).sql("ENQUEUE")?.execute(params).sql("ENQUEUE")?;
        Ok((inserted == 1).then(|| JobId(tx.last_insert_rowid())))
    }

    /// Multi-row `INSERT`s (`enqueue_rows`, in the sizes of `ENQUEUE_ROWS`, the rest row by
    /// row) inside one savepoint. With AUTOINCREMENT and this connection holding the write
    /// lock, the rows get consecutive ids after the sequence's last, in order; that is
    /// checked, not assumed: unless every row was inserted and the last id is exactly
    /// `sequence + rows`, the savepoint is rolled back and the caller goes row by row (a key
    /// conflict, or an application trigger that ignored or added rows).
    fn enqueue_all_new(tx: &Connection, rows: &[NewRow<'_>]) -> Result<Option<Vec<JobId>>> {
        if rows.len() < ENQUEUE_ROWS[ENQUEUE_ROWS.len() - 1] {
            return Ok(None);
        }
        exec(tx, "SAVEPOINT fenceq_enqueue_all")?;
        let inserted = insert_rows(tx, rows);
        match inserted {
            Ok(Some(ids)) => {
                exec(tx, "RELEASE fenceq_enqueue_all")?;
                Ok(Some(ids))
            }
            other => {
                if !tx.is_autocommit() {
                    exec(tx, "ROLLBACK TO fenceq_enqueue_all")?;
                    exec(tx, "RELEASE fenceq_enqueue_all")?;
                }
                other
            }
        }
    }

    fn find_by_key(tx: &Connection, queue: &str, key: &str) -> Result<Option<JobId>> {
        tx.prepare_cached(FIND_BY_KEY)
            .sql("FIND_BY_KEY")?
            .query_row(named_params! { ":queue": queue, ":key": key }, |row| row.get(0).map(JobId))
            .optional()
            .sql("FIND_BY_KEY")
    }

    /// Three statements in one IMMEDIATE transaction (the selection cannot change in
    /// between): the claimable ids, the claim of each, and the claimed row's data.
    fn claim(
        tx: &Connection,
        queue: &str,
        worker: &str,
        now: i64,
        lease_until: i64,
        limit: u32,
    ) -> Result<Vec<Claimed>> {
        let ids: Vec<i64> = tx
            .prepare_cached(CLAIM_SELECT)
            .sql("CLAIM_SELECT")?
            .query_map(named_params! { ":queue": queue, ":now": now, ":limit": limit }, |row| row.get(0))
            .sql("CLAIM_SELECT")?
            .collect::<rusqlite::Result<_>>()
            .sql("CLAIM_SELECT")?;
        let mut claim = tx.prepare_cached(CLAIM_UPDATE).sql("CLAIM_UPDATE")?;
        let mut read = tx.prepare_cached(CLAIM_READ).sql("CLAIM_READ")?;
        let mut claimed = Vec::with_capacity(ids.len());
        for id in ids {
            let claim_id = ClaimId::generate();
            claim
                .execute(rusqlite::params![id, claim_id.0.as_bytes().as_slice(), worker, now, lease_until])
                .sql("CLAIM_UPDATE")?;
            let job = read
                .query_row([id], |row| {
                    Ok(Claimed {
                        token: ClaimToken { id: JobId(id), attempt: row.get(4)?, claim_id },
                        queue: row.get(0)?,
                        key: row.get(1)?,
                        payload: row.get(2)?,
                        priority: row.get(3)?,
                        max_attempts: row.get(5)?,
                        lease_until: row.get(6)?,
                        last_error: row.get(7)?,
                    })
                })
                .sql("CLAIM_READ")?;
            claimed.push(job);
        }
        Ok(claimed)
    }

    fn renew_if_owned(tx: &Connection, token: &ClaimToken, now: i64, lease_until: i64) -> Result<bool> {
        owned(tx, RENEW_IF_OWNED, "RENEW_IF_OWNED", token, now, &[(":lease_until", &lease_until)])
    }

    fn owns(tx: &Connection, token: &ClaimToken, at: i64) -> Result<bool> {
        let claim_id = token.claim_id.0.as_bytes().as_slice();
        tx.prepare_cached(OWNS)
            .sql("OWNS")?
            .query_row(
                named_params! { ":id": token.id.0, ":attempt": token.attempt, ":claim_id": claim_id, ":now": at },
                |row| row.get::<_, i64>(0),
            )
            .map(|n| n == 1)
            .sql("OWNS")
    }

    /// The transaction holds SQLite's write lock, so nobody can claim or reap the job
    /// before it commits.
    fn owned_lease(tx: &Connection, token: &ClaimToken, now: i64) -> Result<Option<OwnedLease>> {
        let claim_id = token.claim_id.0.as_bytes().as_slice();
        tx.prepare_cached(OWNED_LEASE)
            .sql("OWNED_LEASE")?
            .query_row(
                named_params! { ":id": token.id.0, ":attempt": token.attempt, ":claim_id": claim_id, ":now": now },
                |row| {
                    let until: i64 = row.get(0)?;
                    let granted_at: Option<i64> = row.get(1)?;
                    Ok(OwnedLease { until, length_ms: granted_at.map_or(0, |at| until.saturating_sub(at).max(0)) })
                },
            )
            .optional()
            .sql("OWNED_LEASE")
    }

    fn extend_owned(tx: &Connection, token: &ClaimToken, now: i64, lease_until: i64) -> Result<bool> {
        let claim_id = token.claim_id.0.as_bytes().as_slice();
        let changed = tx
            .prepare_cached(EXTEND_OWNED)
            .sql("EXTEND_OWNED")?
            .execute(named_params! {
                ":id": token.id.0, ":attempt": token.attempt, ":claim_id": claim_id, ":now": now,
                ":lease_until": lease_until,
            })
            .sql("EXTEND_OWNED")?;
        Ok(changed == 1)
    }

    fn identity(tx: &Connection, id: JobId) -> Result<Option<Identity>> {
        tx.prepare_cached(IDENTITY)
            .sql("IDENTITY")?
            .query_row(named_params! { ":id": id.0 }, |row| {
                Ok(Identity {
                    state: parse_state(row, 0)?,
                    attempt: row.get(1)?,
                    claim_id: row.get::<_, Option<Vec<u8>>>(2)?.map(|b| ClaimId::from_blob(&b)),
                    lease_until: row.get(3)?,
                    wait_until: row.get(4)?,
                })
            })
            .optional()
            .sql("IDENTITY")
    }

    fn complete_if_owned(tx: &Connection, token: &ClaimToken, now: i64) -> Result<bool> {
        owned(tx, COMPLETE_IF_OWNED, "COMPLETE_IF_OWNED", token, now, &[])
    }

    fn retry_if_owned(tx: &Connection, token: &ClaimToken, now: i64, run_at: i64, error: &str) -> Result<bool> {
        owned(tx, RETRY_IF_OWNED, "RETRY_IF_OWNED", token, now, &[(":run_at", &run_at), (":error", &error)])
    }

    fn exhaust_if_owned(tx: &Connection, token: &ClaimToken, now: i64, error: &str) -> Result<bool> {
        owned(tx, EXHAUST_IF_OWNED, "EXHAUST_IF_OWNED", token, now, &[(":error", &error)])
    }

    fn mark_unknown_if_owned(tx: &Connection, token: &ClaimToken, now: i64, evidence: &str) -> Result<bool> {
        owned(tx, MARK_UNKNOWN_IF_OWNED, "MARK_UNKNOWN_IF_OWNED", token, now, &[(":error", &evidence)])
    }

    fn park_if_owned(tx: &Connection, token: &ClaimToken, now: i64, wait_until: i64, reason: &str) -> Result<bool> {
        let params: [(&str, &dyn ToSql); 2] = [(":wait_until", &wait_until), (":error", &reason)];
        owned(tx, PARK_IF_OWNED, "PARK_IF_OWNED", token, now, &params)
    }

    fn release_if_owned(tx: &Connection, token: &ClaimToken, now: i64) -> Result<bool> {
        owned(tx, RELEASE_IF_OWNED, "RELEASE_IF_OWNED", token, now, &[])
    }

    fn resume_if_waiting(tx: &Connection, token: &ClaimToken, now: i64) -> Result<bool> {
        identified(tx, RESUME_IF_WAITING, "RESUME_IF_WAITING", token, JobState::Waiting, now, None)
    }

    fn acknowledge_if_exhausted(tx: &Connection, token: &ClaimToken, now: i64, decided: &Decided<'_>) -> Result<bool> {
        let (statement, name) = (ACKNOWLEDGE_IF_EXHAUSTED, "ACKNOWLEDGE_IF_EXHAUSTED");
        identified(tx, statement, name, token, JobState::Exhausted, now, Some(decided))
    }

    fn resolve_if_unknown(
        tx: &Connection,
        token: &ClaimToken,
        resolution: Resolution,
        now: i64,
        decided: &Decided<'_>,
    ) -> Result<bool> {
        let (statement, name) = match resolution {
            Resolution::Complete => (RESOLVE_COMPLETE_IF_UNKNOWN, "RESOLVE_COMPLETE_IF_UNKNOWN"),
            Resolution::Retry => (RESOLVE_RETRY_IF_UNKNOWN, "RESOLVE_RETRY_IF_UNKNOWN"),
            Resolution::Exhaust => (RESOLVE_EXHAUST_IF_UNKNOWN, "RESOLVE_EXHAUST_IF_UNKNOWN"),
        };
        identified(tx, statement, name, token, JobState::Unknown, now, Some(decided))
    }

    fn cancel_if_active(tx: &Connection, id: JobId, now: i64, decided: &Decided<'_>) -> Result<bool> {
        by_id(tx, CANCEL_IF_ACTIVE, "CANCEL_IF_ACTIVE", id, now, decided)
    }

    fn replay_if_exhausted(tx: &Connection, id: JobId, now: i64, decided: &Decided<'_>) -> Result<bool> {
        by_id(tx, REPLAY_IF_EXHAUSTED, "REPLAY_IF_EXHAUSTED", id, now, decided)
    }

    fn acknowledge_job_if_unacknowledged(tx: &Connection, id: JobId, now: i64, decided: &Decided<'_>) -> Result<bool> {
        let (statement, name) = (ACKNOWLEDGE_JOB_IF_UNACKNOWLEDGED, "ACKNOWLEDGE_JOB_IF_UNACKNOWLEDGED");
        by_id(tx, statement, name, id, now, decided)
    }

    fn acknowledge_all(tx: &Connection, queue: &str, now: i64, decided: &Decided<'_>) -> Result<Vec<JobId>> {
        let mut params: Params<'_> = vec![(":queue", &queue), (":now", &now)];
        params.extend(decision_params(decided));
        let mut ids: Vec<JobId> = tx
            .prepare_cached(ACKNOWLEDGE_ALL)
            .sql("ACKNOWLEDGE_ALL")?
            .query_map(params.as_slice(), |row| row.get(0).map(JobId))
            .sql("ACKNOWLEDGE_ALL")?
            .collect::<rusqlite::Result<_>>()
            .sql("ACKNOWLEDGE_ALL")?;
        ids.sort_unstable();
        Ok(ids)
    }

    fn pause_queue(tx: &Connection, queue: &str, now: i64, decided: &Decided<'_>) -> Result<bool> {
        queue_decision(tx, PAUSE_QUEUE, "PAUSE_QUEUE", queue, now, decided)
    }

    fn unpause_queue(tx: &Connection, queue: &str, now: i64, decided: &Decided<'_>) -> Result<bool> {
        queue_decision(tx, UNPAUSE_QUEUE, "UNPAUSE_QUEUE", queue, now, decided)
    }

    fn queue_pause(tx: &Connection, queue: &str) -> Result<Option<PausedQueue>> {
        tx.prepare_cached(QUEUE_PAUSE)
            .sql("QUEUE_PAUSE")?
            .query_row(named_params! { ":queue": queue }, paused_from_row)
            .optional()
            .sql("QUEUE_PAUSE")
    }

    fn paused_queues(tx: &Connection) -> Result<Vec<PausedQueue>> {
        tx.prepare_cached(PAUSED_QUEUES)
            .sql("PAUSED_QUEUES")?
            .query_map([], paused_from_row)
            .sql("PAUSED_QUEUES")?
            .collect::<rusqlite::Result<_>>()
            .sql("PAUSED_QUEUES")
    }

    fn reap_expired(tx: &Connection, now: i64, limit: u32) -> Result<(u64, u64)> {
        let mut stmt = tx.prepare_cached(REAP_EXPIRED).sql("REAP_EXPIRED")?;
        let states = stmt
            .query_map(named_params! { ":now": now, ":limit": limit }, |row| row.get::<_, String>(0))
            .sql("REAP_EXPIRED")?;
        let (mut requeued, mut exhausted) = (0, 0);
        for state in states {
            if state.sql("REAP_EXPIRED")? == "pending" {
                requeued += 1;
            } else {
                exhausted += 1;
            }
        }
        Ok((requeued, exhausted))
    }

    fn reap_waiting(tx: &Connection, now: i64, limit: u32) -> Result<u64> {
        count_changes(tx, REAP_WAITING, "REAP_WAITING", named_params! { ":now": now, ":limit": limit })
    }

    fn reap_preview(tx: &Connection, now: i64) -> Result<ReapReport> {
        tx.prepare_cached(REAP_PREVIEW)
            .sql("REAP_PREVIEW")?
            .query_row(named_params! { ":now": now }, |row| {
                Ok(ReapReport {
                    requeued: row.get::<_, i64>(0)? as u64,
                    exhausted: row.get::<_, i64>(1)? as u64,
                    waits_expired: row.get::<_, i64>(2)? as u64,
                })
            })
            .sql("REAP_PREVIEW")
    }

    fn prune_settled(tx: &Connection, horizon: i64, limit: u32) -> Result<u64> {
        count_changes(tx, PRUNE_SETTLED, "PRUNE_SETTLED", named_params! { ":horizon": horizon, ":limit": limit })
    }

    fn prune_acknowledged(tx: &Connection, horizon: i64, limit: u32) -> Result<u64> {
        let params = named_params! { ":horizon": horizon, ":limit": limit };
        count_changes(tx, PRUNE_ACKNOWLEDGED, "PRUNE_ACKNOWLEDGED", params)
    }

    fn prune_preview(tx: &Connection, horizon: i64) -> Result<(u64, u64)> {
        tx.prepare_cached(PRUNE_PREVIEW)
            .sql("PRUNE_PREVIEW")?
            .query_row(named_params! { ":horizon": horizon }, |row| {
                Ok((row.get::<_, i64>(0)? as u64, row.get::<_, i64>(1)? as u64))
            })
            .sql("PRUNE_PREVIEW")
    }

    fn exhaustions(tx: &Connection, after: i64, limit: u32) -> Result<Vec<Exhaustion>> {
        page(tx, EXHAUSTIONS, "EXHAUSTIONS", after, limit)
    }

    fn unknowns(tx: &Connection, after: i64, limit: u32) -> Result<Vec<Exhaustion>> {
        page(tx, UNKNOWNS, "UNKNOWNS", after, limit)
    }

    fn job(tx: &Connection, id: JobId) -> Result<Option<Job>> {
        tx.prepare_cached(JOB).sql("JOB")?.query_row(named_params! { ":id": id.0 }, job_from_row).optional().sql("JOB")
    }

    fn list(tx: &Connection, queue: Option<&str>, state: Option<JobState>, after: i64, limit: u32) -> Result<Vec<Job>> {
        tx.prepare_cached(LIST)
            .sql("LIST")?
            .query_map(
                named_params! { ":queue": queue, ":state": state.map(JobState::as_str), ":after": after, ":limit": limit },
                job_from_row,
            )
            .sql("LIST")?
            .collect::<rusqlite::Result<_>>()
            .sql("LIST")
    }

    fn stats(tx: &Connection, now: i64) -> Result<Vec<StatsRow>> {
        let mut rows = Vec::new();
        let mut stmt = tx.prepare_cached(STATS).sql("STATS")?;
        let mut found = stmt.query(named_params! { ":now": now }).sql("STATS")?;
        while let Some(row) = found.next().sql("STATS")? {
            let (count, acknowledged) = (row.get::<_, i64>(2).sql("STATS")?, row.get::<_, i64>(3).sql("STATS")?);
            let group = StatsRow {
                queue: row.get(0).sql("STATS")?,
                state: parse_state(row, 1).sql("STATS")?,
                acknowledged: false,
                count: (count - acknowledged) as u64,
                min_run_at: row.get(4).sql("STATS")?,
                expired: row.get::<_, Option<i64>>(5).sql("STATS")?.unwrap_or(0) as u64,
            };
            // (Only exhausted rows carry an acknowledgement.)
            if acknowledged > 0 {
                rows.push(StatsRow { acknowledged: true, count: acknowledged as u64, ..group.clone() });
            }
            if count > acknowledged {
                rows.push(group);
            }
        }
        // In queue order (byte order, as the paused queues are), as `Store::stats` promises.
        rows.sort_by(|a, b| a.queue.cmp(&b.queue));
        Ok(rows)
    }

    fn due_or_running(tx: &Connection, queue: &str, now: i64) -> Result<u64> {
        tx.prepare_cached(DUE_OR_RUNNING)
            .sql("DUE_OR_RUNNING")?
            .query_row(named_params! { ":queue": queue, ":now": now }, |row| row.get::<_, i64>(0))
            .map(|n| n as u64)
            .sql("DUE_OR_RUNNING")
    }

    fn completions_per_minute(tx: &Connection, from: i64, until: i64) -> Result<Vec<(i64, u64)>> {
        tx.prepare_cached(COMPLETIONS_PER_MINUTE)
            .sql("COMPLETIONS_PER_MINUTE")?
            .query_map(named_params! { ":from": from, ":until": until }, |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)? as u64))
            })
            .sql("COMPLETIONS_PER_MINUTE")?
            .collect::<rusqlite::Result<_>>()
            .sql("COMPLETIONS_PER_MINUTE")
    }

    fn advance_schedule_if_later(tx: &Connection, name: &str, tick: i64, now: i64) -> Result<bool> {
        let params = named_params! { ":name": name, ":tick": tick, ":now": now };
        Ok(count_changes(tx, ADVANCE_SCHEDULE_IF_LATER, "ADVANCE_SCHEDULE_IF_LATER", params)? == 1)
    }

    fn schedule_last_tick(tx: &Connection, name: &str) -> Result<Option<i64>> {
        tx.prepare_cached(SCHEDULE_LAST_TICK)
            .sql("SCHEDULE_LAST_TICK")?
            .query_row(named_params! { ":name": name }, |row| row.get(0))
            .optional()
            .sql("SCHEDULE_LAST_TICK")
    }
}

/// Runs a statement guarded by `owned_by_token!`: true when it changed the row.
fn owned(
    tx: &Connection,
    statement: &'static str,
    name: &'static str,
    token: &ClaimToken,
    now: i64,
    extra: &[(&str, &dyn ToSql)],
) -> Result<bool> {
    let claim_id = token.claim_id.0.as_bytes().as_slice();
    let mut params: Params<'_> =
        vec![(":id", &token.id.0), (":attempt", &token.attempt), (":claim_id", &claim_id), (":now", &now)];
    params.extend_from_slice(extra);
    Ok(tx.prepare_cached(statement).sql(name)?.execute(params.as_slice()).sql(name)? == 1)
}

/// Runs a statement guarded by `identified_by_token!` for a job in `state`, recording
/// `decided` when the statement records a decision: true when it changed the row.
fn identified(
    tx: &Connection,
    statement: &'static str,
    name: &'static str,
    token: &ClaimToken,
    state: JobState,
    now: i64,
    decided: Option<&Decided<'_>>,
) -> Result<bool> {
    let claim_id = token.claim_id.0.as_bytes().as_slice();
    let state_name = state.as_str();
    let mut params: Params<'_> = vec![
        (":id", &token.id.0),
        (":attempt", &token.attempt),
        (":claim_id", &claim_id),
        (":state", &state_name),
        (":now", &now),
    ];
    let decision = decided.map(decision_params);
    params.extend(decision.iter().flatten());
    Ok(tx.prepare_cached(statement).sql(name)?.execute(params.as_slice()).sql(name)? == 1)
}

/// Runs an operator's transition of one job by id (guarded by its state in the statement):
/// true when it changed the row.
fn by_id(
    tx: &Connection,
    statement: &'static str,
    name: &'static str,
    id: JobId,
    now: i64,
    decided: &Decided<'_>,
) -> Result<bool> {
    let mut params: Params<'_> = vec![(":id", &id.0), (":now", &now)];
    params.extend(decision_params(decided));
    Ok(tx.prepare_cached(statement).sql(name)?.execute(params.as_slice()).sql(name)? == 1)
}

/// Runs a pause or unpause of `queue`, recording `decided`: true when it changed the queue.
fn queue_decision(
    tx: &Connection,
    statement: &'static str,
    name: &'static str,
    queue: &str,
    now: i64,
    decided: &Decided<'_>,
) -> Result<bool> {
    let mut params: Params<'_> = vec![(":queue", &queue), (":now", &now)];
    params.extend(decision_params(decided));
    Ok(tx.prepare_cached(statement).sql(name)?.execute(params.as_slice()).sql(name)? == 1)
}

fn paused_from_row(row: &Row<'_>) -> rusqlite::Result<PausedQueue> {
    Ok(PausedQueue { queue: row.get(0)?, since: row.get(1)?, by: row.get(2)?, note: row.get(3)? })
}

/// The parameters of `records_decision!` (`:now` is bound by the caller).
fn decision_params<'a>(decided: &'a Decided<'_>) -> [(&'static str, &'a dyn ToSql); 3] {
    [(":decision", &decided.action), (":by", &decided.by), (":note", &decided.note)]
}

fn count_changes(
    tx: &Connection,
    statement: &'static str,
    name: &'static str,
    params: &[(&str, &dyn ToSql)],
) -> Result<u64> {
    Ok(tx.prepare_cached(statement).sql(name)?.execute(params).sql(name)? as u64)
}

/// One page of exhaustions or unknowns (`statement` is one of the two page queries).
fn page(
    tx: &Connection,
    statement: &'static str,
    name: &'static str,
    after: i64,
    limit: u32,
) -> Result<Vec<Exhaustion>> {
    tx.prepare_cached(statement)
        .sql(name)?
        .query_map(named_params! { ":after": after, ":limit": limit }, |row| {
            let claim_id: Vec<u8> = row.get(2)?;
            Ok(Exhaustion {
                token: ClaimToken {
                    id: JobId(row.get(0)?),
                    attempt: row.get(1)?,
                    claim_id: ClaimId::from_blob(&claim_id),
                },
                queue: row.get(3)?,
                key: row.get(4)?,
                payload: row.get(5)?,
                reason: row.get(6)?,
                at: row.get::<_, Option<i64>>(7)?.unwrap_or_default(),
            })
        })
        .sql(name)?
        .collect::<rusqlite::Result<_>>()
        .sql(name)
}

fn job_from_row(row: &Row<'_>) -> rusqlite::Result<Job> {
    Ok(Job {
        id: JobId(row.get(0)?),
        queue: row.get(1)?,
        key: row.get(2)?,
        payload: row.get(3)?,
        state: parse_state(row, 4)?,
        priority: row.get(5)?,
        run_at: row.get(6)?,
        attempt: row.get(7)?,
        max_attempts: row.get(8)?,
        claim_id: row.get::<_, Option<Vec<u8>>>(9)?.map(|b| ClaimId::from_blob(&b)),
        worker: row.get(10)?,
        lease_until: row.get(11)?,
        heartbeat_at: row.get(12)?,
        wait_until: row.get(13)?,
        last_error: row.get(14)?,
        created_at: row.get(15)?,
        settled_at: row.get(16)?,
        exhausted_at: row.get(17)?,
        acknowledged_at: row.get(18)?,
        decision: match (row.get::<_, Option<String>>(19)?, row.get::<_, Option<i64>>(20)?) {
            (Some(action), Some(at)) => Some(Decision { action, at, by: row.get(21)?, note: row.get(22)? }),
            _ => None,
        },
    })
}

fn parse_state(row: &Row<'_>, index: usize) -> rusqlite::Result<JobState> {
    let text: String = row.get(index)?;
    text.parse().map_err(|_| {
        rusqlite::Error::FromSqlConversionFailure(
            index,
            rusqlite::types::Type::Text,
            format!("unknown state {text:?}").into(),
        )
    })
}

/// `Store::enqueue_all_new`'s inserts, without its savepoint: the ids, or `None` when a row
/// was not inserted or the ids are not `sequence + 1 ..= sequence + rows`.
fn insert_rows(tx: &Connection, rows: &[NewRow<'_>]) -> Result<Option<Vec<JobId>>> {
    let before: i64 = tx
        .prepare_cached(JOB_ID_SEQUENCE)
        .sql("JOB_ID_SEQUENCE")?
        .query_row([], |r| r.get(0))
        .sql("JOB_ID_SEQUENCE")?;
    let mut inserted = 0;
    let mut rest = rows;
    for size in ENQUEUE_ROWS {
        while rest.len() >= size {
            let (chunk, after) = rest.split_at(size);
            let mut insert = tx.prepare_cached(enqueue_rows(size)).sql("ENQUEUE_ROWS")?;
            for (r, row) in chunk.iter().enumerate() {
                let at = r * 7;
                let bound = insert
                    .raw_bind_parameter(at + 1, row.queue)
                    .and_then(|()| insert.raw_bind_parameter(at + 2, row.key))
                    .and_then(|()| insert.raw_bind_parameter(at + 3, row.payload))
                    .and_then(|()| insert.raw_bind_parameter(at + 4, row.priority))
                    .and_then(|()| insert.raw_bind_parameter(at + 5, row.run_at))
                    .and_then(|()| insert.raw_bind_parameter(at + 6, row.max_attempts))
                    .and_then(|()| insert.raw_bind_parameter(at + 7, row.created_at));
                bound.sql("ENQUEUE_ROWS")?;
            }
            inserted += insert.raw_execute().sql("ENQUEUE_ROWS")?;
            rest = after;
        }
    }
    for row in rest {
        inserted += usize::from(SqliteStore::enqueue(tx, row)?.is_some());
    }
    let last = tx.last_insert_rowid();
    let all = inserted == rows.len() && before.checked_add(rows.len() as i64) == Some(last);
    Ok(all.then(|| (before + 1..=last).map(JobId).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn migrated() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::store::sqlite::connection_init(&crate::QueueBuilder::default())(&mut conn).unwrap();
        crate::store::sqlite::migrate::migrate(&mut conn, crate::store::sqlite::migrate::SCHEMA_VERSION).unwrap();
        conn
    }

    /// The overview's chart reads an hour of completions from the completed jobs' partial
    /// index alone (a covering search), neither the table nor the settled index (whose
    /// cancelled entries it would have to look up row by row).
    #[test]
    fn completions_per_minute_searches_the_completed_index() {
        let steps = plan(&migrated(), COMPLETIONS_PER_MINUTE);
        assert!(
            steps.iter().any(|s| s.starts_with(
                "SEARCH fenceq_jobs USING COVERING INDEX fenceq_jobs_completed (settled_at>? AND settled_at<?)"
            )),
            "{steps:?}"
        );
        assert!(!steps.iter().any(|s| s.contains("TEMP B-TREE")), "{steps:?}");
        // (The minutes themselves are a recursive CTE, `SCAN minutes`: 60 rows, no table.)
        assert!(!steps.iter().any(|s| s.starts_with("SCAN fenceq_jobs")), "{steps:?}");
    }

    /// The dashboard's overview and /metrics count a million jobs per state and queue from
    /// the counts index alone, in its order (no table rows, no sort), and look up the oldest
    /// pending job and the expired leases once per queue in their own indexes.
    #[test]
    fn stats_count_from_the_counts_index_without_rows_or_sorting() {
        let steps = plan(&migrated(), STATS);
        let text = steps.join("\n");
        assert!(text.starts_with("SCAN j USING COVERING INDEX fenceq_jobs_counts"), "{text}");
        assert!(text.contains("INDEX fenceq_jobs_claim (queue=?)"), "{text}");
        assert!(text.contains("INDEX fenceq_jobs_lease (queue=? AND lease_until<?)"), "{text}");
        assert!(!text.contains("TEMP B-TREE"), "{text}");
    }

    /// The counts index leads with `state`: were it usable by every statement with a
    /// `state = ?` term, the planner would prefer it to their partial indexes (pruning,
    /// reaping, the dead-letter listings and the claim would walk every job of a state). Its
    /// `WHERE` keeps it to the statements that repeat it: only the counts.
    #[test]
    fn only_the_counts_use_the_counts_index() {
        let conn = migrated();
        for (name, sql) in [
            ("CLAIM_SELECT", CLAIM_SELECT),
            ("REAP_EXPIRED", REAP_EXPIRED),
            ("REAP_WAITING", REAP_WAITING),
            ("REAP_PREVIEW", REAP_PREVIEW),
            ("PRUNE_SETTLED", PRUNE_SETTLED),
            ("PRUNE_ACKNOWLEDGED", PRUNE_ACKNOWLEDGED),
            ("PRUNE_PREVIEW", PRUNE_PREVIEW),
            ("EXHAUSTIONS", EXHAUSTIONS),
            ("UNKNOWNS", UNKNOWNS),
            ("DUE_OR_RUNNING", DUE_OR_RUNNING),
            ("ACKNOWLEDGE_ALL", ACKNOWLEDGE_ALL),
            ("LIST", LIST),
            ("COMPLETIONS_PER_MINUTE", COMPLETIONS_PER_MINUTE),
        ] {
            let steps = plan(&conn, sql);
            assert!(!steps.iter().any(|s| s.contains("fenceq_jobs_counts")), "{name}: {steps:?}");
        }
    }

    /// A statement whose plan depends on a bound value is compiled again at every run after
    /// a new binding (SQLite does this for `LIMIT ?`, which cost a full re-prepare per
    /// claim); the connections ask for plans that never depend on bindings.
    #[test]
    fn hot_statements_are_compiled_once() {
        let conn = migrated();
        for i in 0..6i64 {
            let key = format!("k{i}");
            let row = NewRow {
                queue: "q",
                key: Some(&key),
                payload: b"x",
                priority: 0,
                run_at: i,
                max_attempts: 5,
                created_at: i,
            };
            SqliteStore::enqueue(&conn, &row).unwrap();
        }
        let (pause, unpause) = (PAUSE, UNPAUSE);
        for (limit, now) in [(1, 10), (2, 11), (1, 12)] {
            // A paused claim in between: the pause is data, so the claim's plan stays.
            assert!(SqliteStore::pause_queue(&conn, "q", now, &pause).unwrap());
            assert!(SqliteStore::claim(&conn, "q", "w", now, now + 1000, limit).unwrap().is_empty());
            assert!(SqliteStore::unpause_queue(&conn, "q", now, &unpause).unwrap());
            let claimed = SqliteStore::claim(&conn, "q", "w", now, now + 1000, limit).unwrap();
            assert_eq!(claimed.len(), limit as usize);
            for c in claimed {
                assert!(SqliteStore::renew_if_owned(&conn, &c.token, now, now + 1000).unwrap());
                assert!(SqliteStore::complete_if_owned(&conn, &c.token, now).unwrap());
            }
        }
        for (name, sql) in [
            ("ENQUEUE", ENQUEUE),
            ("PAUSE_QUEUE", PAUSE_QUEUE),
            ("UNPAUSE_QUEUE", UNPAUSE_QUEUE),
            ("CLAIM_SELECT", CLAIM_SELECT),
            ("CLAIM_UPDATE", CLAIM_UPDATE),
            ("CLAIM_READ", CLAIM_READ),
            ("RENEW_IF_OWNED", RENEW_IF_OWNED),
            ("COMPLETE_IF_OWNED", COMPLETE_IF_OWNED),
        ] {
            let stmt = conn.prepare_cached(sql).unwrap();
            assert!(stmt.get_status(rusqlite::StatementStatus::Run) >= 3, "{name} ran");
            assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0, "{name} was compiled again");
        }
    }

    /// Claim latency stays flat as the queue grows only if the claim never scans the table
    /// and never sorts the pending rows: each branch walks its partial index in order.
    #[test]
    fn the_claim_walks_partial_indexes_without_scanning_or_sorting() {
        let conn = migrated();
        let steps = plan(&conn, CLAIM_SELECT);
        let text = steps.join("\n");
        assert!(text.contains("INDEX fenceq_jobs_claim (queue=?)"), "{text}");
        assert!(text.contains("INDEX fenceq_jobs_lease (queue=? AND lease_until<?)"), "{text}");
        // The pause: one primary-key probe, evaluated before either branch (see the next test).
        assert!(text.contains("SEARCH fenceq_queues USING PRIMARY KEY (queue=?)"), "{text}");
        assert!(!text.contains("SCAN fenceq_queues"), "{text}");
        assert!(!steps.iter().any(|s| s.starts_with("SCAN fenceq_jobs") && !s.contains("INDEX")), "{text}");
        // The pending branch needs no sort: the index is in claim order. (The final merge of
        // at most 2 x limit rows may sort; that is bounded by the batch, not the queue.)
        let pending_branch = plan(
            &conn,
            "SELECT id FROM fenceq_jobs WHERE queue = ?1 AND state = 'pending' AND run_at <= ?2
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
            let row =
                NewRow { queue: "q", key: None, payload: b"x", priority: 0, run_at: i, max_attempts: 5, created_at: i };
            SqliteStore::enqueue(&conn, &row).unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
        let steps = |expected_rows: usize| {
            let mut stmt = conn.prepare(CLAIM_SELECT).unwrap();
            let params = named_params! { ":queue": "q", ":now": 10_000i64, ":limit": 64 };
            let rows = stmt.query_map(params, |r| r.get::<_, i64>(0)).unwrap().count();
            assert_eq!(rows, expected_rows);
            stmt.get_status(rusqlite::StatementStatus::VmStep)
        };
        let never_paused = steps(64);
        assert!(SqliteStore::pause_queue(&conn, "q", 1, &PAUSE).unwrap());
        let paused = steps(0);
        assert!(SqliteStore::unpause_queue(&conn, "q", 2, &UNPAUSE).unwrap());
        let unpaused = steps(64);
        assert!(paused < 64, "a paused claim ran {paused} VM steps: it reads jobs");
        assert!(paused * 10 < never_paused, "paused {paused} vs unpaused {never_paused} steps");
        // An unpaused claim with a row in fenceq_queues costs what one without it does.
        assert!(unpaused.abs_diff(never_paused) <= 8, "{unpaused} vs {never_paused} steps");
    }

    #[test]
    fn point_operations_use_the_primary_key_or_an_index() {
        let conn = migrated();
        for (name, sql) in [
            ("CLAIM_UPDATE", CLAIM_UPDATE),
            ("CLAIM_READ", CLAIM_READ),
            ("COMPLETE_IF_OWNED", COMPLETE_IF_OWNED),
            ("RENEW_IF_OWNED", RENEW_IF_OWNED),
            ("FIND_BY_KEY", FIND_BY_KEY),
            ("EXHAUSTIONS", EXHAUSTIONS),
            ("UNKNOWNS", UNKNOWNS),
            ("REAP_EXPIRED", REAP_EXPIRED),
            ("REAP_WAITING", REAP_WAITING),
            ("PRUNE_SETTLED", PRUNE_SETTLED),
            ("PRUNE_ACKNOWLEDGED", PRUNE_ACKNOWLEDGED),
            ("DUE_OR_RUNNING", DUE_OR_RUNNING),
            ("OWNED_LEASE", OWNED_LEASE),
            ("EXTEND_OWNED", EXTEND_OWNED),
            ("ACKNOWLEDGE_JOB_IF_UNACKNOWLEDGED", ACKNOWLEDGE_JOB_IF_UNACKNOWLEDGED),
            ("ACKNOWLEDGE_ALL", ACKNOWLEDGE_ALL),
            ("PAUSE_QUEUE", PAUSE_QUEUE),
            ("UNPAUSE_QUEUE", UNPAUSE_QUEUE),
            ("QUEUE_PAUSE", QUEUE_PAUSE),
            ("COMPLETIONS_PER_MINUTE", COMPLETIONS_PER_MINUTE),
        ] {
            let steps = plan(&conn, sql);
            let scans: Vec<&String> = steps
                .iter()
                .filter(|s| {
                    (s.starts_with("SCAN fenceq_jobs") || s.starts_with("SCAN fenceq_queues")) && !s.contains("INDEX")
                })
                .collect();
            assert!(scans.is_empty(), "{name} scans the table: {steps:?}");
        }
    }
}
