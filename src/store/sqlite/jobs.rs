//! The store contract on SQLite: each method binds its parameters and runs its named
//! statement (`statements.rs`) on the connection of the transaction it was given.

use super::error::SqlContext;
use super::statements::*;
use super::writer::exec;
use super::SqliteStore;
use crate::error::Result;
use crate::job::{
    AttemptOutcome, AttemptRecord, ClaimId, ClaimToken, Claimed, Decision, Exhaustion, GroupPolicy, Job, JobId,
    JobState, Resolution,
};
use crate::limits::Limits;
use crate::report::{
    BackoffLift, CheckpointReport, CommitStats, GroupHead, GroupSummary, PausedQueue, QueueBackoff, ReapReport,
};
use crate::store::limits::{claim_limited, limit_rows, limits_by_queue, limits_of, Candidate, ClaimSteps, KeptStarts};
use crate::store::{
    Batch, ClaimRequest, Claims, Decided, GroupsRequest, Identity, JobDecision, NewRow, OwnedLease, PageRequest,
    QueueBackoffAt, QueueDecision, ScheduleTick, SnoozeAt, StatsRow, Stmt, Store, TokenAt,
};
use rusqlite::{named_params, CachedStatement, Connection, OptionalExtension, Row, ToSql};
use std::collections::hash_map::{Entry, HashMap};
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

    fn watch(&self, wake: crate::store::Wake) {
        self.run_watch(wake)
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
        let inserted = match row.group {
            None => on(tx, ENQUEUE, |s| s.execute(params))?,
            Some(group) => on(tx, ENQUEUE_IN_GROUP, |s| {
                let mut grouped = params.to_vec();
                grouped.push(&group);
                s.execute(grouped.as_slice())
            })?,
        };
        Ok((inserted == 1).then(|| JobId(tx.last_insert_rowid())))
    }

    /// Multi-row `INSERT`s (`enqueue_rows`, in the sizes of `ENQUEUE_ROWS`, the rest row by
    /// row) inside one savepoint. With this connection holding the write lock, the rows get
    /// consecutive ids after the largest handed out so far (`JOB_ID_SEQUENCE`), in order; that is
    /// checked, not assumed: unless every row was inserted and the last id is exactly
    /// `sequence + rows`, the savepoint is rolled back and the caller goes row by row (a key
    /// conflict, or an application trigger that ignored or added rows).
    fn enqueue_all_new(tx: &Connection, rows: &[NewRow<'_>]) -> Result<Option<Vec<JobId>>> {
        // Grouped rows go one by one: each one's hold depends on the rows before it.
        if rows.len() < ENQUEUE_ROWS[ENQUEUE_ROWS.len() - 1] || rows.iter().any(|r| r.group.is_some()) {
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
        on(tx, FIND_BY_KEY, |s| {
            s.query_row(named_params! { ":queue": queue, ":key": key }, |row| row.get(0).map(JobId)).optional()
        })
    }

    /// Three statements in one IMMEDIATE transaction (the selection cannot change in
    /// between): the claimable ids, the claim of each, and the claimed row's data. A queue
    /// with limits, whose selection is empty, goes to `store::limits`.
    fn claim(tx: &Connection, request: ClaimRequest<'_>) -> Result<Claims> {
        let ClaimRequest { queue, now, limit, .. } = request;
        let mut lapsed: Vec<JobId> = Vec::new();
        let ids: Vec<JobId> = on(tx, CLAIM_SELECT, |s| {
            s.query_map(named_params! { ":queue": queue, ":now": now, ":limit": limit }, |row| {
                let id = JobId(row.get(0)?);
                if row.get::<_, bool>(3)? {
                    lapsed.push(id);
                }
                Ok(id)
            })?
            .collect::<rusqlite::Result<_>>()
        })?;
        if ids.is_empty() {
            let limits = Self::limits(tx, queue)?;
            if !limits.is_empty() {
                return claim_limited::<Self>(tx, request, &limits);
            }
        }
        Self::record_expired_leases(tx, &lapsed, now)?;
        Self::claim_ids(tx, &ids, request).map(Claims::of)
    }

    fn renew_if_owned(tx: &Connection, claim: TokenAt<'_>, lease_until: i64) -> Result<bool> {
        owned(tx, RENEW_IF_OWNED, claim, &[(":lease_until", &lease_until)])
    }

    fn owns(tx: &Connection, claim: TokenAt<'_>) -> Result<bool> {
        let TokenAt { token, now: at } = claim;
        let claim_id = token.claim_id.0.as_bytes().as_slice();
        on(tx, OWNS, |s| {
            s.query_row(
                named_params! { ":id": token.id.0, ":attempt": token.attempt, ":claim_id": claim_id, ":now": at },
                |row| row.get::<_, i64>(0),
            )
            .map(|n| n == 1)
        })
    }

    /// The transaction holds SQLite's write lock, so nobody can claim or reap the job
    /// before it commits.
    fn owned_lease(tx: &Connection, claim: TokenAt<'_>) -> Result<Option<OwnedLease>> {
        let TokenAt { token, now } = claim;
        let claim_id = token.claim_id.0.as_bytes().as_slice();
        on(tx, OWNED_LEASE, |s| {
            s.query_row(
                named_params! { ":id": token.id.0, ":attempt": token.attempt, ":claim_id": claim_id, ":now": now },
                |row| {
                    let until: i64 = row.get(0)?;
                    let granted_at: Option<i64> = row.get(1)?;
                    Ok(OwnedLease { until, length_ms: granted_at.map_or(0, |at| until.saturating_sub(at).max(0)) })
                },
            )
            .optional()
        })
    }

    fn extend_owned(tx: &Connection, claim: TokenAt<'_>, lease_until: i64) -> Result<bool> {
        let TokenAt { token, now } = claim;
        let claim_id = token.claim_id.0.as_bytes().as_slice();
        let changed = on(tx, EXTEND_OWNED, |s| {
            s.execute(named_params! {
                ":id": token.id.0, ":attempt": token.attempt, ":claim_id": claim_id, ":now": now,
                ":lease_until": lease_until,
            })
        })?;
        Ok(changed == 1)
    }

    fn identity(tx: &Connection, id: JobId) -> Result<Option<Identity>> {
        on(tx, IDENTITY, |s| {
            s.query_row(named_params! { ":id": id.0 }, |row| {
                Ok(Identity {
                    state: parse_state(row, 0)?,
                    attempt: row.get(1)?,
                    claim_id: row.get::<_, Option<Vec<u8>>>(2)?.map(|b| ClaimId::from_blob(&b)),
                    lease_until: row.get(3)?,
                    wait_until: row.get(4)?,
                })
            })
            .optional()
        })
    }

    fn complete_if_owned(tx: &Connection, claim: TokenAt<'_>) -> Result<bool> {
        let completed = owned(tx, COMPLETE_IF_OWNED, claim, &[])?;
        releasing(tx, claim.token.id, counting(tx, claim.token.id, COMPLETED, completed)?)
    }

    /// One statement per piece of the list (`complete_rows`), instead of a guarded `UPDATE`
    /// and a group probe per token; a token counts as completed at its first place in the
    /// list whose row the statement completed (a repeat, as its second call would, finds it
    /// completed already). The groups of the completed rows are handed on afterwards, once
    /// each: what the calls one by one would leave, as a group is handed on only when
    /// nothing holds it. The completed rows are counted once per queue.
    fn complete_many_if_owned(tx: &Connection, tokens: &[ClaimToken], now: i64) -> Result<Vec<bool>> {
        if tokens.len() < 2 {
            return tokens.iter().map(|token| Self::complete_if_owned(tx, TokenAt { token, now })).collect();
        }
        let mut completed = std::collections::HashSet::with_capacity(tokens.len());
        let mut groups = Vec::new();
        let mut per_queue: Vec<(String, u64)> = Vec::new();
        in_pieces(
            tx,
            tokens,
            complete_rows,
            &[&now],
            |s, at, token| {
                s.raw_bind_parameter(at, token.id.0)?;
                s.raw_bind_parameter(at + 1, token.attempt)?;
                s.raw_bind_parameter(at + 2, token.claim_id.0.as_bytes().as_slice())
            },
            |row| {
                let claim_id: Vec<u8> = row.get(2)?;
                completed.insert((row.get::<_, i64>(0)?, row.get::<_, u32>(1)?, ClaimId::from_blob(&claim_id)));
                let queue = row.get_ref(3)?.as_str()?;
                match per_queue.iter_mut().find(|(q, _)| q == queue) {
                    Some((_, n)) => *n += 1,
                    None => per_queue.push((queue.to_owned(), 1)),
                }
                if let Some(group) = row.get::<_, Option<String>>(4)? {
                    groups.push((row.get::<_, String>(3)?, group));
                }
                Ok(())
            },
        )?;
        for (queue, n) in &per_queue {
            count_settled(tx, queue, COMPLETED, *n)?;
        }
        release_groups(tx, groups)?;
        Ok(tokens.iter().map(|t| completed.remove(&(t.id.0, t.attempt, t.claim_id))).collect())
    }

    fn retry_if_owned(tx: &Connection, claim: TokenAt<'_>, run_at: i64, error: &str) -> Result<bool> {
        let retried = owned(tx, RETRY_IF_OWNED, claim, &[(":run_at", &run_at), (":error", &error)])?;
        recording(tx, claim, AttemptOutcome::Retry, retried)
    }

    fn exhaust_if_owned(tx: &Connection, claim: TokenAt<'_>, error: &str) -> Result<bool> {
        let exhausted = owned(tx, EXHAUST_IF_OWNED, claim, &[(":error", &error)])?;
        releasing(tx, claim.token.id, recording(tx, claim, AttemptOutcome::Exhausted, exhausted)?)
    }

    fn exhaust_out_of_attempts_if_owned(tx: &Connection, claim: TokenAt<'_>, error: &str) -> Result<bool> {
        let exhausted = owned(tx, EXHAUST_OUT_OF_ATTEMPTS_IF_OWNED, claim, &[(":error", &error)])?;
        releasing(tx, claim.token.id, recording(tx, claim, AttemptOutcome::Exhausted, exhausted)?)
    }

    fn mark_unknown_if_owned(tx: &Connection, claim: TokenAt<'_>, evidence: &str) -> Result<bool> {
        let marked = owned(tx, MARK_UNKNOWN_IF_OWNED, claim, &[(":error", &evidence)])?;
        releasing(tx, claim.token.id, recording(tx, claim, AttemptOutcome::Unknown, marked)?)
    }

    fn park_if_owned(tx: &Connection, claim: TokenAt<'_>, wait_until: i64, reason: &str) -> Result<bool> {
        let params: [(&str, &dyn ToSql); 2] = [(":wait_until", &wait_until), (":error", &reason)];
        let parked = owned(tx, PARK_IF_OWNED, claim, &params)?;
        recording(tx, claim, AttemptOutcome::Parked, parked)
    }

    fn release_if_owned(tx: &Connection, claim: TokenAt<'_>) -> Result<bool> {
        owned(tx, RELEASE_IF_OWNED, claim, &[])
    }

    fn resume_if_waiting(tx: &Connection, claim: TokenAt<'_>) -> Result<bool> {
        identified(tx, RESUME_IF_WAITING, claim, JobState::Waiting, None)
    }

    /// A repeat for the same token succeeds without change, so the count moves only when the
    /// row was unacknowledged before.
    fn acknowledge_if_exhausted(tx: &Connection, claim: TokenAt<'_>, decided: &Decided<'_>) -> Result<bool> {
        let before = exhausted_job(tx, claim.token.id)?;
        let acknowledged = identified(tx, ACKNOWLEDGE_IF_EXHAUSTED, claim, JobState::Exhausted, Some(decided))?;
        if let (true, Some((queue, false))) = (acknowledged, &before) {
            count_settled(tx, queue, ACKNOWLEDGED, 1)?;
        }
        releasing(tx, claim.token.id, acknowledged)
    }

    fn resolve_if_unknown(
        tx: &Connection,
        claim: TokenAt<'_>,
        resolution: Resolution,
        decided: &Decided<'_>,
    ) -> Result<bool> {
        let statement = match resolution {
            Resolution::Complete => RESOLVE_COMPLETE_IF_UNKNOWN,
            Resolution::Retry => RESOLVE_RETRY_IF_UNKNOWN,
            Resolution::Exhaust => RESOLVE_EXHAUST_IF_UNKNOWN,
        };
        let resolved = identified(tx, statement, claim, JobState::Unknown, Some(decided))?;
        let completed = resolved && resolution == Resolution::Complete;
        counting(tx, claim.token.id, COMPLETED, completed)?;
        releasing(tx, claim.token.id, resolved)
    }

    fn cancel_if_active(tx: &Connection, decision: JobDecision<'_>) -> Result<bool> {
        let cancelled = by_id(tx, CANCEL_IF_ACTIVE, decision)?;
        releasing(tx, decision.id, counting(tx, decision.id, CANCELLED, cancelled)?)
    }

    /// A replay of an acknowledged exhaustion takes it off the count.
    fn replay_if_exhausted(tx: &Connection, decision: JobDecision<'_>) -> Result<bool> {
        let before = exhausted_job(tx, decision.id)?;
        let replayed = by_id(tx, REPLAY_IF_EXHAUSTED, decision)?;
        if let (true, Some((queue, true))) = (replayed, &before) {
            uncount_settled(tx, queue, ACKNOWLEDGED, 1)?;
        }
        releasing(tx, decision.id, replayed)
    }

    fn acknowledge_job_if_unacknowledged(tx: &Connection, decision: JobDecision<'_>) -> Result<bool> {
        let acknowledged = by_id(tx, ACKNOWLEDGE_JOB_IF_UNACKNOWLEDGED, decision)?;
        releasing(tx, decision.id, counting(tx, decision.id, ACKNOWLEDGED, acknowledged)?)
    }

    fn acknowledge_all(tx: &Connection, decision: QueueDecision<'_>) -> Result<Vec<JobId>> {
        let QueueDecision { queue, now, decided } = decision;
        let decided = &decided;
        let mut params: Params<'_> = vec![(":queue", &queue), (":now", &now)];
        params.extend(decision_params(decided));
        let mut ids: Vec<JobId> = on(tx, ACKNOWLEDGE_ALL, |s| {
            s.query_map(params.as_slice(), |row| row.get(0).map(JobId))?.collect::<rusqlite::Result<_>>()
        })?;
        ids.sort_unstable();
        if !ids.is_empty() {
            count_settled(tx, queue, ACKNOWLEDGED, ids.len() as u64)?;
        }
        for id in &ids {
            release_group_of(tx, *id)?;
        }
        Ok(ids)
    }

    fn pause_queue(tx: &Connection, decision: QueueDecision<'_>) -> Result<bool> {
        queue_decision(tx, PAUSE_QUEUE, decision)
    }

    fn unpause_queue(tx: &Connection, decision: QueueDecision<'_>) -> Result<bool> {
        queue_decision(tx, UNPAUSE_QUEUE, decision)
    }

    fn queue_pause(tx: &Connection, queue: &str) -> Result<Option<PausedQueue>> {
        on(tx, QUEUE_PAUSE, |s| s.query_row(named_params! { ":queue": queue }, paused_from_row).optional())
    }

    fn paused_queues(tx: &Connection) -> Result<Vec<PausedQueue>> {
        on(tx, PAUSED_QUEUES, |s| s.query_map([], paused_from_row)?.collect::<rusqlite::Result<_>>())
    }

    fn reap_expired(tx: &Connection, batch: Batch) -> Result<(u64, u64)> {
        let Batch { until: now, limit } = batch;
        let mut stmt = prepare(tx, REAP_EXPIRED)?;
        let rows = stmt
            .query_map(named_params! { ":now": now, ":limit": limit }, |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, Option<String>>(2)?,
                    (JobId(row.get(3)?), claim_instant(row, 4)?),
                ))
            })
            .sql(REAP_EXPIRED)?;
        let (mut requeued, mut exhausted) = (0, 0);
        let mut groups = Vec::new();
        let mut reaped = Vec::new();
        for row in rows {
            let (state, queue, group, id) = row.sql(REAP_EXPIRED)?;
            reaped.push(id);
            if state == "pending" {
                requeued += 1;
            } else {
                exhausted += 1;
                groups.extend(group.map(|g| (queue, g)));
            }
        }
        drop(stmt);
        for (id, started) in reaped {
            record_attempt(tx, id, AttemptOutcome::LeaseExpired, now, started)?;
        }
        release_groups(tx, groups)?;
        Ok((requeued, exhausted))
    }

    fn reap_waiting(tx: &Connection, batch: Batch) -> Result<u64> {
        let Batch { until: now, limit } = batch;
        let rows: Vec<(String, Option<String>, JobId, Option<i64>)> = on(tx, REAP_WAITING, |s| {
            s.query_map(named_params! { ":now": now, ":limit": limit }, |row| {
                Ok((row.get(0)?, row.get(1)?, JobId(row.get(2)?), claim_instant(row, 3)?))
            })?
            .collect::<rusqlite::Result<_>>()
        })?;
        let exhausted = rows.len() as u64;
        for (_, _, id, started) in &rows {
            record_attempt(tx, *id, AttemptOutcome::WaitExpired, now, *started)?;
        }
        release_groups(tx, rows.into_iter().filter_map(|(queue, group, _, _)| group.map(|g| (queue, g))).collect())?;
        Ok(exhausted)
    }

    fn reap_preview(tx: &Connection, now: i64) -> Result<ReapReport> {
        on(tx, REAP_PREVIEW, |s| {
            s.query_row(named_params! { ":now": now }, |row| {
                Ok(ReapReport {
                    requeued: row.get::<_, i64>(0)? as u64,
                    exhausted: row.get::<_, i64>(1)? as u64,
                    waits_expired: row.get::<_, i64>(2)? as u64,
                })
            })
        })
    }

    fn prune_settled(tx: &Connection, batch: Batch) -> Result<u64> {
        prune_counted(tx, PRUNE_SETTLED, batch, None)
    }

    fn prune_acknowledged(tx: &Connection, batch: Batch) -> Result<u64> {
        prune_counted(tx, PRUNE_ACKNOWLEDGED, batch, Some(ACKNOWLEDGED))
    }

    fn recount_settled(tx: &Connection) -> Result<u64> {
        on(tx, FORGET_SETTLED_COUNTS, |s| s.execute([]))?;
        let counts: Vec<i64> = on(tx, RECOUNT_SETTLED, |s| s.query_map([], |row| row.get(0))?.collect())?;
        Ok(counts.into_iter().map(|n| n as u64).sum())
    }

    fn prune_preview(tx: &Connection, horizon: i64) -> Result<(u64, u64)> {
        on(tx, PRUNE_PREVIEW, |s| {
            s.query_row(named_params! { ":horizon": horizon }, |row| {
                Ok((row.get::<_, i64>(0)? as u64, row.get::<_, i64>(1)? as u64))
            })
        })
    }

    fn exhaustions(tx: &Connection, page: PageRequest) -> Result<Vec<Exhaustion>> {
        exhaustion_page(tx, EXHAUSTIONS, page)
    }

    fn unknowns(tx: &Connection, page: PageRequest) -> Result<Vec<Exhaustion>> {
        exhaustion_page(tx, UNKNOWNS, page)
    }

    fn job(tx: &Connection, id: JobId) -> Result<Option<Job>> {
        on(tx, JOB, |s| s.query_row(named_params! { ":id": id.0 }, job_from_row).optional())
    }

    fn attempts(tx: &Connection, id: JobId, limit: u32) -> Result<Vec<AttemptRecord>> {
        on(tx, ATTEMPTS, |s| {
            s.query_map(named_params! { ":id": id.0, ":limit": limit }, |row| {
                let claim_id: Vec<u8> = row.get(1)?;
                Ok(AttemptRecord {
                    attempt: row.get(0)?,
                    claim_id: ClaimId::from_blob(&claim_id),
                    outcome: parse_outcome(row, 2)?,
                    worker: row.get(3)?,
                    started_at: row.get(4)?,
                    ended_at: row.get(5)?,
                    error: row.get(6)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()
        })
    }

    fn list(tx: &Connection, queue: Option<&str>, state: Option<JobState>, page: PageRequest) -> Result<Vec<Job>> {
        let PageRequest { after, limit } = page;
        on(tx, LIST, |s| {
            s.query_map(
                named_params! { ":queue": queue, ":state": state.map(JobState::as_str), ":after": after, ":limit": limit },
                job_from_row,
            )
            ?
            .collect::<rusqlite::Result<_>>()
        })
    }

    fn stats(tx: &Connection, now: i64) -> Result<Vec<StatsRow>> {
        on(tx, STATS, |s| {
            s.query_map(named_params! { ":now": now }, |row| {
                Ok(StatsRow {
                    queue: row.get(0)?,
                    state: parse_state(row, 1)?,
                    acknowledged: row.get(2)?,
                    count: row.get::<_, i64>(3)? as u64,
                    min_run_at: row.get(4)?,
                    expired: row.get::<_, Option<i64>>(5)?.unwrap_or(0) as u64,
                })
            })?
            .collect::<rusqlite::Result<_>>()
        })
    }

    fn due_or_running(tx: &Connection, queue: &str, now: i64) -> Result<u64> {
        on(tx, DUE_OR_RUNNING, |s| {
            s.query_row(named_params! { ":queue": queue, ":now": now }, |row| row.get::<_, i64>(0)).map(|n| n as u64)
        })
    }

    fn completions_per_minute(tx: &Connection, from: i64, until: i64) -> Result<Vec<(i64, u64)>> {
        on(tx, COMPLETIONS_PER_MINUTE, |s| {
            s.query_map(named_params! { ":from": from, ":until": until }, |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)? as u64))
            })?
            .collect::<rusqlite::Result<_>>()
        })
    }

    fn advance_schedule_if_later(tx: &Connection, tick: ScheduleTick<'_>) -> Result<bool> {
        let ScheduleTick { name, tick, now, next } = tick;
        let params = named_params! { ":name": name, ":tick": tick, ":now": now, ":next": next };
        Ok(count(tx, ADVANCE_SCHEDULE_IF_LATER, params)? == 1)
    }

    fn schedule_last_tick(tx: &Connection, name: &str) -> Result<Option<i64>> {
        on(tx, SCHEDULE_LAST_TICK, |s| s.query_row(named_params! { ":name": name }, |row| row.get(0)).optional())
    }

    fn record_schedule(tx: &Connection, definition: crate::store::ScheduleDefinition<'_>) -> Result<()> {
        let crate::store::ScheduleDefinition { name, definition, queue, next, now } = definition;
        let params =
            named_params! { ":name": name, ":definition": definition, ":queue": queue, ":next": next, ":now": now };
        count(tx, RECORD_SCHEDULE, params).map(drop)
    }

    fn schedules(tx: &Connection) -> Result<Vec<crate::report::ScheduleRecord>> {
        on(tx, SCHEDULES, |s| {
            s.query_map([], |row| {
                Ok(crate::report::ScheduleRecord {
                    name: row.get(0)?,
                    definition: row.get(1)?,
                    queue: row.get(2)?,
                    last_tick: row.get(3)?,
                    next_tick: row.get(4)?,
                    recorded_at: row.get(5)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()
        })
    }

    fn set_limits(tx: &Connection, queue: &str, limits: &Limits, now: i64) -> Result<()> {
        on(tx, DELETE_LIMITS, |s| s.execute(named_params! { ":queue": queue }))?;
        for (scope, window_ms, max_count) in limit_rows(limits) {
            on(tx, INSERT_LIMIT, |s| {
                s.execute(named_params! {
                    ":queue": queue, ":scope": scope, ":window_ms": window_ms, ":max_count": max_count, ":now": now
                })
            })?;
        }
        on(tx, TOUCH_QUEUE_FLOW, |s| s.execute(named_params! { ":queue": queue, ":now": now })).map(drop)
    }

    fn limits(tx: &Connection, queue: &str) -> Result<Limits> {
        let rows: Vec<(String, i64, i64)> = on(tx, LIMITS, |s| {
            s.query_map(named_params! { ":queue": queue }, |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
                .collect::<rusqlite::Result<_>>()
        })?;
        Ok(limits_of(rows))
    }

    fn all_limits(tx: &Connection) -> Result<Vec<(String, Limits)>> {
        let rows: Vec<(String, String, i64, i64)> = on(tx, ALL_LIMITS, |s| {
            s.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?
                .collect::<rusqlite::Result<_>>()
        })?;
        Ok(limits_by_queue(rows))
    }

    fn running_count(tx: &Connection, queue: &str) -> Result<u64> {
        on(tx, RUNNING_COUNT, |s| s.query_row(named_params! { ":queue": queue }, |row| row.get::<_, i64>(0)))
            .map(|n| n as u64)
    }

    fn window_starts(tx: &Connection, queue: &str, since: i64, most: u32) -> Result<(u64, Option<i64>)> {
        window_starts_in(tx, queue, None, since, most)
    }

    fn spent_groups(tx: &Connection, queue: &str, since: i64, count: u32) -> Result<Vec<String>> {
        on(tx, SPENT_GROUPS, |s| {
            let rows = s.query_map(named_params! { ":queue": queue, ":since": since, ":count": count }, |row| {
                row.get::<_, String>(0)
            })?;
            rows.collect()
        })
    }

    /// One probe of the group index per group (in process: no round trips to save).
    fn deferred_heads(tx: &Connection, queue: &str, groups: &[String], now: i64) -> Result<(u64, Option<i64>)> {
        let (mut heads, mut first) = (0u64, None::<i64>);
        for group in groups {
            let run_at = on(tx, DEFERRED_HEAD, |s| {
                s.query_row(named_params! { ":queue": queue, ":group": group, ":now": now }, |row| row.get::<_, i64>(0))
                    .optional()
            })?;
            if let Some(at) = run_at {
                heads += 1;
                first = Some(first.map_or(at, |f| f.min(at)));
            }
        }
        Ok((heads, first))
    }

    fn set_group_policy(tx: &Connection, queue: &str, policy: GroupPolicy, now: i64) -> Result<()> {
        on(tx, SET_GROUP_POLICY, |s| {
            s.execute(named_params! { ":queue": queue, ":policy": policy.as_str(), ":now": now })
        })?;
        let groups: Vec<String> = on(tx, HELD_GROUPS, |s| {
            s.query_map(named_params! { ":queue": queue }, |row| row.get(0))?.collect::<rusqlite::Result<_>>()
        })?;
        release_groups(tx, groups.into_iter().map(|g| (queue.to_owned(), g)).collect())
    }

    fn group_policy(tx: &Connection, queue: &str) -> Result<GroupPolicy> {
        let name: Option<String> =
            on(tx, GROUP_POLICY, |s| s.query_row(named_params! { ":queue": queue }, |row| row.get(0)).optional())?;
        name.map_or(Ok(GroupPolicy::default()), |n| GroupPolicy::parse(&n))
    }

    fn groups(tx: &Connection, page: GroupsRequest<'_>) -> Result<Vec<GroupSummary>> {
        let GroupsRequest { queue, after: (after_queue, after_group), limit } = page;
        let params = named_params! {
            ":queue": queue, ":after_queue": after_queue, ":after_group": after_group, ":limit": limit
        };
        on(tx, GROUPS_PAGE, |s| {
            s.query_map(params, |row| {
                let head = match row.get::<_, Option<i64>>(3)? {
                    None => None,
                    Some(id) => Some(GroupHead {
                        id: JobId(id),
                        state: parse_state(row, 4)?,
                        run_at: row.get(5)?,
                        wait_until: row.get(6)?,
                        acknowledged: row.get::<_, Option<i64>>(7)?.is_some(),
                    }),
                };
                Ok(GroupSummary { queue: row.get(0)?, group: row.get(1)?, held: row.get::<_, i64>(2)? as u64, head })
            })?
            .collect::<rusqlite::Result<_>>()
        })
    }
    fn snooze_if_owned(tx: &Connection, claim: TokenAt<'_>, snooze: SnoozeAt<'_>) -> Result<bool> {
        let SnoozeAt { run_at, reason, max_snoozes, outcome } = snooze;
        let params: [(&str, &dyn ToSql); 3] =
            [(":run_at", &run_at), (":error", &reason), (":max_snoozes", &max_snoozes)];
        let snoozed = owned(tx, SNOOZE_IF_OWNED, claim, &params)?;
        recording(tx, claim, outcome, snoozed)
    }

    fn exhaust_past_snooze_cap_if_owned(
        tx: &Connection,
        claim: TokenAt<'_>,
        max_snoozes: u32,
        error: &str,
    ) -> Result<bool> {
        let params: [(&str, &dyn ToSql); 2] = [(":max_snoozes", &max_snoozes), (":error", &error)];
        let exhausted = owned(tx, EXHAUST_PAST_SNOOZE_CAP_IF_OWNED, claim, &params)?;
        releasing(tx, claim.token.id, recording(tx, claim, AttemptOutcome::Exhausted, exhausted)?)
    }

    fn back_off_queue_of(tx: &Connection, backoff: QueueBackoffAt<'_>) -> Result<bool> {
        let QueueBackoffAt { id, until, reason, now } = backoff;
        let params = named_params! { ":id": id.0, ":until": until, ":reason": reason, ":now": now };
        Ok(count(tx, BACK_OFF_QUEUE_OF, params)? == 1)
    }

    fn queue_backoff(tx: &Connection, queue: &str, now: i64) -> Result<Option<QueueBackoff>> {
        on(tx, QUEUE_BACKOFF, |s| {
            s.query_row(named_params! { ":queue": queue, ":now": now }, backoff_from_row).optional()
        })
    }

    fn queue_backoffs(tx: &Connection, now: i64) -> Result<Vec<QueueBackoff>> {
        on(tx, QUEUE_BACKOFFS, |s| {
            s.query_map(named_params! { ":now": now }, backoff_from_row)?.collect::<rusqlite::Result<_>>()
        })
    }

    fn clear_queue_backoff(tx: &Connection, lift: QueueDecision<'_>) -> Result<bool> {
        let QueueDecision { queue, now, decided } = lift;
        let params = named_params! { ":queue": queue, ":now": now, ":by": decided.by, ":note": decided.note };
        Ok(count(tx, CLEAR_QUEUE_BACKOFF, params)? == 1)
    }

    fn last_backoff_lift(tx: &Connection, queue: &str) -> Result<Option<BackoffLift>> {
        on(tx, BACKOFF_LIFT, |s| {
            s.query_row(named_params! { ":queue": queue }, |row| {
                Ok(BackoffLift {
                    queue: row.get(0)?,
                    at: row.get(1)?,
                    by: row.get(2)?,
                    note: row.get(3)?,
                    reason: row.get(4)?,
                })
            })
            .optional()
        })
    }
}

impl ClaimSteps for SqliteStore {
    fn kept_starts(tx: &Connection, queue: &str) -> Result<KeptStarts> {
        on(tx, KEPT_STARTS, |s| {
            s.query_row(named_params! { ":queue": queue }, |row| {
                Ok(KeptStarts { count: row.get::<_, i64>(0)?.max(0) as u64, latest: row.get(1)? })
            })
        })
    }

    fn claim_candidates(tx: &Connection, request: ClaimRequest<'_>) -> Result<Vec<Candidate>> {
        let ClaimRequest { queue, now, limit, .. } = request;
        on(tx, CLAIM_CANDIDATES, |s| {
            s.query_map(named_params! { ":queue": queue, ":now": now, ":limit": limit }, |row| {
                Ok(Candidate { id: JobId(row.get(0)?), group: row.get(3)?, lapsed: row.get(4)? })
            })?
            .collect::<rusqlite::Result<_>>()
        })
    }

    /// `RECORD_EXPIRED_LEASE` for each job, before `claim_ids` claims it, started at the
    /// instant its current claim id carries (read first: a claim takes over an expired lease
    /// rarely, and its selection reads no claim id).
    fn record_expired_leases(tx: &Connection, ids: &[JobId], now: i64) -> Result<()> {
        for &id in ids {
            let started = Self::identity(tx, id)?.and_then(|row| row.claim_id).and_then(|c| c.instant());
            on(tx, RECORD_EXPIRED_LEASE, |s| {
                s.execute(named_params! { ":id": id.0, ":now": now, ":started": started })
            })?;
        }
        Ok(())
    }

    /// Within the writer's transaction nothing changed since the selection. One job: its
    /// `UPDATE` and a read by id (`CLAIM_UPDATE`, `CLAIM_READ`); more: one statement per piece
    /// of the list (`claim_rows`), its rows put back in the selection's order.
    fn claim_ids(tx: &Connection, ids: &[JobId], request: ClaimRequest<'_>) -> Result<Vec<Claimed>> {
        if ids.len() > 1 {
            return claim_in_pieces(tx, ids, request);
        }
        let ClaimRequest { worker, now, lease_until, .. } = request;
        let mut claimed = Vec::with_capacity(ids.len());
        for &id in ids {
            let claim_id = ClaimId::generate_at(now);
            on(tx, CLAIM_UPDATE, |s| {
                s.execute(rusqlite::params![id.0, claim_id.0.as_bytes().as_slice(), worker, now, lease_until])
            })?;
            claimed.push(on(tx, CLAIM_READ, |s| s.query_row([id.0], |row| claimed_row(row, id, claim_id)))?);
        }
        Ok(claimed)
    }

    /// One row per group of the claim (and one for its jobs without a group), holding how
    /// many of its jobs started: a claim of many jobs of one group writes one entry.
    fn record_starts(tx: &Connection, claimed: &[Claimed], now: i64, forget_before: i64) -> Result<()> {
        let queue = claimed.first().map(|job| job.queue.as_str()).unwrap_or_default();
        let mut rows: Vec<(&Claimed, i64)> = Vec::new();
        let mut row_of_group: HashMap<Option<&str>, usize> = HashMap::new();
        for job in claimed {
            match row_of_group.entry(job.group.as_deref()) {
                Entry::Occupied(row) => rows[*row.get()].1 += 1,
                Entry::Vacant(row) => {
                    row.insert(rows.len());
                    rows.push((job, 1));
                }
            }
        }
        if let [(job, starts)] = rows.as_slice() {
            on(tx, RECORD_START, |s| {
                s.execute(named_params! {
                    ":queue": job.queue, ":group": job.group, ":at": now, ":claim_id": job.token.claim_id.0.as_bytes().as_slice(),
                    ":id": job.token.id.0, ":attempt": job.token.attempt, ":starts": starts
                })
            })?;
        } else {
            // Every job of one claim is of one queue (the claim's).
            in_pieces(
                tx,
                &rows,
                record_start_rows,
                &[&queue, &now],
                |s, at, (job, starts)| {
                    s.raw_bind_parameter(at, job.token.id.0)?;
                    s.raw_bind_parameter(at + 1, job.token.claim_id.0.as_bytes().as_slice())?;
                    s.raw_bind_parameter(at + 2, job.token.attempt)?;
                    s.raw_bind_parameter(at + 3, job.group.as_deref())?;
                    s.raw_bind_parameter(at + 4, starts)
                },
                |_| Ok(()),
            )?;
        }
        let forgotten: i64 = on(tx, FORGET_STARTS, |s| {
            s.query_map(named_params! { ":queue": queue, ":before": forget_before }, |row| row.get::<_, i64>(0))?
                .sum::<rusqlite::Result<i64>>()
        })?;
        let recorded = claimed.len() as i64;
        on(tx, COUNT_STARTS_KEPT, |s| {
            s.execute(named_params! { ":queue": queue, ":recorded": recorded, ":forgotten": forgotten })
        })
        .map(drop)
    }

    fn defer_pending(tx: &Connection, id: JobId, at: i64) -> Result<()> {
        on(tx, DEFER_PENDING, |s| s.execute(named_params! { ":id": id.0, ":at": at })).map(drop)
    }

    fn defer_group_next(tx: &Connection, queue: &str, group: &str, at: i64) -> Result<()> {
        on(tx, DEFER_GROUP_NEXT, |s| s.execute(named_params! { ":queue": queue, ":group": group, ":at": at })).map(drop)
    }

    fn group_window_starts(
        tx: &Connection,
        queue: &str,
        group: &str,
        since: i64,
        most: u32,
    ) -> Result<(u64, Option<i64>)> {
        window_starts_in(tx, queue, Some(group), since, most)
    }
}
/// The starts of `queue` (of one group of it, with `group`) in a window: `Store::window_starts`
/// and `ClaimSteps::group_window_starts`.
fn window_starts_in(
    tx: &Connection,
    queue: &str,
    group: Option<&str>,
    since: i64,
    most: u32,
) -> Result<(u64, Option<i64>)> {
    let (count, latest_first) = match group {
        None => (QUEUE_STARTS, QUEUE_STARTS_LATEST_FIRST),
        Some(_) => (GROUP_STARTS, GROUP_STARTS_LATEST_FIRST),
    };
    let mut params: Params<'_> = vec![(":queue", &queue), (":since", &since)];
    if let Some(group) = &group {
        params.push((":group", group));
    }
    let mut counted = params.clone();
    counted.push((":most", &most));
    let starts: i64 = on(tx, count, |s| s.query_row(counted.as_slice(), |row| row.get(0)))?;
    if starts < i64::from(most) {
        return Ok((starts as u64, None));
    }
    // A row may hold several starts: sum them from the latest until they reach `most`.
    let at = on(tx, latest_first, |s| {
        let mut rows = s.query(params.as_slice())?;
        let mut summed = 0i64;
        while let Some(row) = rows.next()? {
            summed += row.get::<_, i64>(1)?;
            if summed >= i64::from(most) {
                return row.get(0).map(Some);
            }
        }
        Ok(None)
    })?;
    Ok((starts as u64, at))
}

fn backoff_from_row(row: &Row<'_>) -> rusqlite::Result<QueueBackoff> {
    Ok(QueueBackoff { queue: row.get(0)?, until: row.get(1)?, reason: row.get(2)?, since: row.get(3)? })
}

/// Runs `f` on `statement`, prepared from the connection's cache: every error, preparing or
/// running, carries the statement's name.
fn on<T>(
    tx: &Connection,
    statement: Stmt,
    f: impl FnOnce(&mut CachedStatement<'_>) -> rusqlite::Result<T>,
) -> Result<T> {
    tx.prepare_cached(statement.sql).and_then(|mut s| f(&mut s)).sql(statement)
}

/// `statement`, prepared from the connection's cache, for several runs.
fn prepare(tx: &Connection, statement: Stmt) -> Result<CachedStatement<'_>> {
    tx.prepare_cached(statement.sql).sql(statement)
}

/// Runs a statement guarded by `owned_by_token!`: true when it changed the row.
fn owned(tx: &Connection, statement: Stmt, claim: TokenAt<'_>, extra: &[(&str, &dyn ToSql)]) -> Result<bool> {
    let TokenAt { token, now } = claim;
    let claim_id = token.claim_id.0.as_bytes().as_slice();
    let mut params: Params<'_> =
        vec![(":id", &token.id.0), (":attempt", &token.attempt), (":claim_id", &claim_id), (":now", &now)];
    params.extend_from_slice(extra);
    Ok(on(tx, statement, |s| s.execute(params.as_slice()))? == 1)
}

/// Runs a statement guarded by `identified_by_token!` for a job in `state`, recording
/// `decided` when the statement records a decision: true when it changed the row.
fn identified(
    tx: &Connection,
    statement: Stmt,
    claim: TokenAt<'_>,
    state: JobState,
    decided: Option<&Decided<'_>>,
) -> Result<bool> {
    let TokenAt { token, now } = claim;
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
    Ok(on(tx, statement, |s| s.execute(params.as_slice()))? == 1)
}

/// Runs an operator's transition of one job by id (guarded by its state in the statement):
/// true when it changed the row.
fn by_id(tx: &Connection, statement: Stmt, decision: JobDecision<'_>) -> Result<bool> {
    let mut params: Params<'_> = vec![(":id", &decision.id.0), (":now", &decision.now)];
    params.extend(decision_params(&decision.decided));
    Ok(on(tx, statement, |s| s.execute(params.as_slice()))? == 1)
}

/// Runs a pause or unpause of `queue`, recording `decided`: true when it changed the queue.
fn queue_decision(tx: &Connection, statement: Stmt, decision: QueueDecision<'_>) -> Result<bool> {
    let mut params: Params<'_> = vec![(":queue", &decision.queue), (":now", &decision.now)];
    params.extend(decision_params(&decision.decided));
    Ok(on(tx, statement, |s| s.execute(params.as_slice()))? == 1)
}

fn paused_from_row(row: &Row<'_>) -> rusqlite::Result<PausedQueue> {
    Ok(PausedQueue { queue: row.get(0)?, since: row.get(1)?, by: row.get(2)?, note: row.get(3)? })
}

/// The parameters of `records_decision!` (`:now` is bound by the caller).
fn decision_params<'a>(decided: &'a Decided<'_>) -> [(&'static str, &'a dyn ToSql); 3] {
    [(":decision", &decided.action), (":by", &decided.by), (":note", &decided.note)]
}

fn count(tx: &Connection, statement: Stmt, params: &[(&str, &dyn ToSql)]) -> Result<u64> {
    Ok(on(tx, statement, |s| s.execute(params))? as u64)
}

/// One page of exhaustions or unknowns (`statement` is one of the two page queries).
fn exhaustion_page(tx: &Connection, statement: Stmt, page: PageRequest) -> Result<Vec<Exhaustion>> {
    let PageRequest { after, limit } = page;
    on(tx, statement, |s| {
        s.query_map(named_params! { ":after": after, ":limit": limit }, |row| {
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
        })?
        .collect::<rusqlite::Result<_>>()
    })
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
        group: row.get(23)?,
        held_by_group: row.get::<_, i64>(24)? != 0,
        snoozes: row.get(25)?,
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
    let before: i64 = on(tx, JOB_ID_SEQUENCE, |s| s.query_row([], |r| r.get(0)))?;
    let mut inserted = 0;
    let mut rest = rows;
    for size in ENQUEUE_ROWS {
        while rest.len() >= size {
            let (chunk, after) = rest.split_at(size);
            let statement = enqueue_rows(size);
            let mut insert = prepare(tx, statement)?;
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
                bound.sql(statement)?;
            }
            inserted += insert.raw_execute().sql(statement)?;
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

/// After a settle of `claim` that may have changed its row (`changed`): the record of the
/// attempt it ended with `outcome` (`RECORD_ATTEMPT`). Passes `changed` through, and writes
/// nothing when the settle changed nothing.
fn recording(tx: &Connection, claim: TokenAt<'_>, outcome: AttemptOutcome, changed: bool) -> Result<bool> {
    if changed {
        record_attempt(tx, claim.token.id, outcome, claim.now, claim.token.claim_id.instant())?;
    }
    Ok(changed)
}

/// `RECORD_ATTEMPT`: the record of the attempt of job `id`, started at `started`, that a
/// transition at `now` just ended with `outcome`.
fn record_attempt(tx: &Connection, id: JobId, outcome: AttemptOutcome, now: i64, started: Option<i64>) -> Result<()> {
    let outcome = outcome.as_str();
    let params = named_params! { ":id": id.0, ":outcome": outcome, ":now": now, ":started": started };
    on(tx, RECORD_ATTEMPT, |s| s.execute(params)).map(drop)
}

/// The instant of the claim whose id is in column `index` (`ClaimId::instant`).
fn claim_instant(row: &Row<'_>, index: usize) -> rusqlite::Result<Option<i64>> {
    Ok(row.get::<_, Option<Vec<u8>>>(index)?.and_then(|blob| ClaimId::from_blob(&blob).instant()))
}

/// An attempt's outcome from its name in column `index`.
fn parse_outcome(row: &Row<'_>, index: usize) -> rusqlite::Result<AttemptOutcome> {
    let text: String = row.get(index)?;
    text.parse().map_err(|_| {
        rusqlite::Error::FromSqlConversionFailure(
            index,
            rusqlite::types::Type::Text,
            format!("unknown attempt outcome {text:?}").into(),
        )
    })
}

/// A claimed job from a row of `CLAIM_READ` (or the same first columns of `claim_rows`).
fn claimed_row(row: &Row<'_>, id: JobId, claim_id: ClaimId) -> rusqlite::Result<Claimed> {
    Ok(Claimed {
        token: ClaimToken { id, attempt: row.get(4)?, claim_id },
        queue: row.get(0)?,
        key: row.get(1)?,
        payload: row.get(2)?,
        priority: row.get(3)?,
        max_attempts: row.get(5)?,
        lease_until: row.get(6)?,
        last_error: row.get(7)?,
        group: row.get(8)?,
        // The claim's instant: the queue sets it from the lease (`Shared::claim_in`).
        claimed_at: 0,
    })
}

/// `ClaimSteps::claim_ids` for two jobs or more: each gets a fresh claim id, bound beside its id.
fn claim_in_pieces(tx: &Connection, ids: &[JobId], request: ClaimRequest<'_>) -> Result<Vec<Claimed>> {
    let ClaimRequest { worker, now, lease_until, .. } = request;
    let chosen: Vec<(JobId, ClaimId)> = ids.iter().map(|&id| (id, ClaimId::generate_at(now))).collect();
    let mut by_id = std::collections::HashMap::with_capacity(ids.len());
    in_pieces(
        tx,
        &chosen,
        claim_rows,
        &[&worker, &now, &lease_until],
        |s, at, (id, claim_id)| {
            s.raw_bind_parameter(at, id.0)?;
            s.raw_bind_parameter(at + 1, claim_id.0.as_bytes().as_slice())
        },
        |row| {
            let id = JobId(row.get(9)?);
            let claim_id: Vec<u8> = row.get(10)?;
            by_id.insert(id, claimed_row(row, id, ClaimId::from_blob(&claim_id))?);
            Ok(())
        },
    )?;
    chosen
        .iter()
        .map(|(id, _)| {
            by_id
                .remove(id)
                .ok_or_else(|| crate::Error::domain(format!("internal: the claim of job {id} changed no row")))
        })
        .collect()
}

/// Runs a batched statement (`claim_rows`, `complete_rows`) over `items`: in pieces of at
/// most the largest of `BATCH_ROWS` items, each on the statement of the smallest size that
/// holds it, its unused rows bound to NULL (which matches no job). `leading` binds the
/// statement's first parameters; `bind` binds one item's columns from the parameter index
/// it is given; `row` reads each row the statement returns.
fn in_pieces<I>(
    tx: &Connection,
    items: &[I],
    statement: fn(usize) -> Stmt,
    leading: &[&dyn ToSql],
    bind: impl Fn(&mut CachedStatement<'_>, usize, &I) -> rusqlite::Result<()>,
    mut row: impl FnMut(&Row<'_>) -> rusqlite::Result<()>,
) -> Result<()> {
    let largest = BATCH_ROWS[BATCH_ROWS.len() - 1];
    for piece in items.chunks(largest) {
        let size = BATCH_ROWS.iter().copied().find(|&n| n >= piece.len()).unwrap_or(largest);
        let stmt = statement(size);
        let mut s = prepare(tx, stmt)?;
        let columns = (s.parameter_count() - leading.len()) / size;
        let mut run = |s: &mut CachedStatement<'_>| -> rusqlite::Result<()> {
            for (i, value) in leading.iter().enumerate() {
                s.raw_bind_parameter(i + 1, value)?;
            }
            for (r, item) in piece.iter().enumerate() {
                bind(s, leading.len() + r * columns + 1, item)?;
            }
            for p in leading.len() + piece.len() * columns + 1..=s.parameter_count() {
                s.raw_bind_parameter(p, rusqlite::types::Null)?;
            }
            let mut rows = s.raw_query();
            while let Some(r) = rows.next()? {
                row(r)?;
            }
            Ok(())
        };
        run(&mut s).sql(stmt)?;
    }
    Ok(())
}

/// The states `fenceq_settled_counts` counts (its CHECK lists them); `ACKNOWLEDGED` is an
/// exhausted row with `acknowledged_at` set.
const COMPLETED: &str = "completed";
const CANCELLED: &str = "cancelled";
const ACKNOWLEDGED: &str = "acknowledged";

/// After a transition that settled job `id` in the counted state `state`: counts the row when
/// the transition changed it. Passes `changed` through.
fn counting(tx: &Connection, id: JobId, state: &str, changed: bool) -> Result<bool> {
    if changed {
        on(tx, COUNT_SETTLED_JOB, |s| s.execute(named_params! { ":id": id.0, ":state": state }))?;
    }
    Ok(changed)
}

/// Adds `n` rows of `queue` to the count of `state`.
fn count_settled(tx: &Connection, queue: &str, state: &str, n: u64) -> Result<()> {
    let n = n as i64;
    on(tx, COUNT_SETTLED, |s| s.execute(named_params! { ":queue": queue, ":state": state, ":n": n })).map(drop)
}

/// Takes `n` rows of `queue` off the count of `state`. A count that is missing or smaller
/// than `n` means rows were settled without being counted (by a build older than schema 13,
/// or by hand): an error that names the repair, not a drift.
fn uncount_settled(tx: &Connection, queue: &str, state: &str, n: u64) -> Result<()> {
    let n = n as i64;
    let changed = on(tx, UNCOUNT_SETTLED, |s| s.execute(named_params! { ":queue": queue, ":state": state, ":n": n }))?;
    if changed != 1 {
        return Err(crate::Error::SettledCountsShort { queue: queue.to_string(), state: state.to_string() });
    }
    Ok(())
}

/// Runs a prune (`PRUNE_SETTLED`, `PRUNE_ACKNOWLEDGED`), which returns each deleted row's
/// id, queue and, unless `state` names the one state it deletes, its state; takes the rows
/// off their counts once per queue and state, raises the id floor to the largest id deleted
/// (so that it is never handed out again), and returns how many it deleted. The rows are
/// summed as they come (a prune of one transaction may delete millions).
fn prune_counted(tx: &Connection, statement: Stmt, batch: Batch, state: Option<&str>) -> Result<u64> {
    let Batch { until: horizon, limit } = batch;
    let mut deleted: Vec<(String, String, u64)> = Vec::new();
    let mut ids: Vec<i64> = Vec::new();
    on(tx, statement, |s| {
        let mut rows = s.query(named_params! { ":horizon": horizon, ":limit": limit })?;
        while let Some(row) = rows.next()? {
            ids.push(row.get(0)?);
            let queue = row.get_ref(1)?.as_str()?;
            let state = match state {
                Some(state) => state,
                None => row.get_ref(2)?.as_str()?,
            };
            match deleted.iter_mut().find(|(q, s, _)| q == queue && s == state) {
                Some((_, _, n)) => *n += 1,
                None => deleted.push((queue.to_owned(), state.to_owned(), 1)),
            }
        }
        Ok(())
    })?;
    for (queue, state, n) in &deleted {
        uncount_settled(tx, queue, state, *n)?;
    }
    // Each deleted job's records go with it (one probe of the records' key per job: a job that
    // completed at its first attempt has none).
    for id in &ids {
        on(tx, FORGET_ATTEMPTS, |s| s.execute(named_params! { ":id": id }))?;
    }
    if let Some(id) = ids.iter().max() {
        on(tx, RAISE_ID_FLOOR, |s| s.execute(named_params! { ":id": id }))?;
    }
    Ok(deleted.iter().map(|(_, _, n)| n).sum())
}

/// `EXHAUSTED_JOB`: job `id`'s queue and whether it is acknowledged, while it is exhausted.
fn exhausted_job(tx: &Connection, id: JobId) -> Result<Option<(String, bool)>> {
    on(tx, EXHAUSTED_JOB, |s| {
        s.query_row(named_params! { ":id": id.0 }, |row| Ok((row.get(0)?, row.get(1)?))).optional()
    })
}

/// After a transition of job `id` that may have ended its hold on its group (or put it back
/// to pending): hands the group on when nothing holds it. Passes `changed` through, and does
/// nothing when the transition changed nothing.
fn releasing(tx: &Connection, id: JobId, changed: bool) -> Result<bool> {
    if changed {
        release_group_of(tx, id)?;
    }
    Ok(changed)
}

/// `RELEASE_GROUP` for job `id`'s group, if it has one (one primary-key probe if not).
fn release_group_of(tx: &Connection, id: JobId) -> Result<()> {
    let group: Option<(String, String)> = on(tx, GROUP_OF, |s| {
        s.query_row(named_params! { ":id": id.0 }, |row| Ok((row.get(0)?, row.get(1)?))).optional()
    })?;
    release_groups(tx, group.into_iter().collect())
}

/// `RELEASE_GROUP` for each (queue, group), once each.
fn release_groups(tx: &Connection, mut groups: Vec<(String, String)>) -> Result<()> {
    groups.sort_unstable();
    groups.dedup();
    for (queue, group) in &groups {
        on(tx, RELEASE_GROUP, |s| s.execute(named_params! { ":queue": queue, ":group": group }))?;
    }
    Ok(())
}
