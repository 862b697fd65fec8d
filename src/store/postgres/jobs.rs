//! The store contract on PostgreSQL: each method binds its parameters and runs its named
//! statement (`statements.rs`) on the connection of the transaction it was given.

use super::error::PgContext;
use super::prepared::Prepared;
use super::statements::*;
use super::{PgTx, PostgresStore};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::job::{
    AttemptRecord, ClaimId, ClaimToken, Claimed, Decision, Exhaustion, GroupPolicy, Job, JobId, JobState, Resolution,
};
use crate::limits::Limits;
use crate::report::{
    BackoffLift, CheckpointReport, CommitStats, GroupHead, GroupSummary, PausedQueue, QueueBackoff, ReapReport,
    ScheduleRecord,
};
use crate::store::limits::{limit_rows, limits_by_queue, limits_of, rate_opens_at};
use crate::store::{
    Batch, ClaimRequest, Claims, Decided, FreshClaim, GroupsRequest, Identity, JobDecision, NewRow, OwnedLease,
    PageRequest, QueueBackoffAt, QueueDecision, ScheduleDefinition, ScheduleTick, SnoozeAt, StatsRow, Stmt, Store,
    TokenAt,
};
use diesel::pg::Pg;
use diesel::query_dsl::LoadQuery;
use diesel::serialize::ToSql;
use diesel::sql_types::HasSqlType;
use diesel::sql_types::{Array, BigInt, Binary, Bool, Integer, Nullable, Text, Uuid as SqlUuid};
use diesel::{sql_query, OptionalExtension, PgConnection, QueryableByName, RunQueryDsl};
use std::time::Duration;

type Query<'a> = Prepared<'a>;

impl Store for PostgresStore {
    type Tx = PgTx;

    /// Concurrent enqueues share a statement: each its own commit is a round trip and a WAL
    /// flush per job (`queue/intake_group.rs`; figures in `docs/performance.md`).
    const GROUPS_INTAKE: bool = true;
    /// Two rounds: while one waits for the server, the other's settles and claim run on a
    /// second backend (a pool's rate is otherwise one backend's per-job work).
    const POOL_ROUNDS_IN_FLIGHT: usize = 2;

    fn read<T>(&self, f: impl FnOnce(&PgTx) -> Result<T>) -> Result<T> {
        self.run_read(f)
    }

    fn write<T>(&self, f: impl FnOnce(&PgTx) -> Result<T>) -> Result<T> {
        self.run_write(f)
    }

    /// No group commit yet: the work runs on the calling thread, in a transaction of its own.
    fn submit<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&PgTx) -> Result<T> + Send + 'static,
    {
        self.run_submit(work)
    }

    /// Autocommit: no `BEGIN` and `COMMIT` round trips (see the store's docs).
    fn submit_single<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&PgTx) -> Result<T> + Send + 'static,
    {
        self.run_submit_single(work)
    }

    /// Starts this store's `LISTEN` thread (once) and has it call `wake`.
    fn watch(&self, wake: crate::store::Wake) {
        self.run_watch(wake)
    }

    /// PostgreSQL never leaves a transaction by itself: after an error it refuses every
    /// statement until the rollback, and the store's commit turns that into
    /// `TransactionLost` (see `run_transaction`).
    fn still_in_transaction(_tx: &PgTx) -> Result<()> {
        Ok(())
    }

    fn commit_stats(&self) -> CommitStats {
        let transactions = super::transactions(self);
        CommitStats { transactions, requests: transactions, wal_syncs: 0 }
    }

    /// The server keeps its own files: nothing to do.
    fn checkpoint(&self, _patience: Duration) -> Result<Option<CheckpointReport>> {
        Ok(None)
    }

    fn schema_version(tx: &PgTx) -> Result<i64> {
        tx.with(super::migrate::version)
    }

    /// The server's clock with the system clock (`time.rs`), else the injected one.
    fn now(tx: &PgTx, clock: &dyn Clock) -> Result<i64> {
        super::time::now(tx, clock)
    }

    /// The server's clock read now (and kept as the store's anchor), else the injected one.
    fn fresh_now(tx: &PgTx, clock: &dyn Clock) -> Result<i64> {
        super::time::fresh_now(tx, clock)
    }

    fn now_estimate(&self, clock: &dyn Clock) -> i64 {
        if clock.is_host_clock() {
            self.server_clock.estimate(clock)
        } else {
            clock.now_ms()
        }
    }

    fn enqueue(tx: &PgTx, row: &NewRow<'_>) -> Result<Option<JobId>> {
        if let Some(group) = row.group {
            return tx.in_own_transaction(|tx| {
                lock_group(tx, row.queue, group, row.created_at)?;
                let query = bound(ENQUEUE_IN_GROUP)
                    .bind::<Text, _>(row.queue)
                    .bind::<Nullable<Text>, _>(row.key)
                    .bind::<Binary, _>(row.payload)
                    .bind::<Integer, _>(row.priority)
                    .bind::<BigInt, _>(row.run_at)
                    .bind::<Integer, _>(attempt(row.max_attempts))
                    .bind::<BigInt, _>(row.created_at)
                    .bind::<Text, _>(group);
                let id = tx.writing(|conn| query.optional::<IdRow>(conn))?;
                Ok(id.map(|r| JobId(r.id)))
            });
        }
        let query = bound(ENQUEUE)
            .bind::<Text, _>(row.queue)
            .bind::<Nullable<Text>, _>(row.key)
            .bind::<Binary, _>(row.payload)
            .bind::<Integer, _>(row.priority)
            .bind::<BigInt, _>(row.run_at)
            .bind::<Integer, _>(attempt(row.max_attempts))
            .bind::<BigInt, _>(row.created_at);
        let id = tx.writing(|conn| query.optional::<IdRow>(conn))?;
        Ok(id.map(|r| JobId(r.id)))
    }

    /// One statement (`ENQUEUE_ALL`) inside a savepoint: every row new, or the savepoint is
    /// rolled back and the caller goes row by row (a key conflict, also within `rows`). The
    /// ids ascend in the rows' order (the sequence is drawn as the rows are inserted, in
    /// array order; another session's rows may take ids in between).
    ///
    /// Grouped rows: every group's lock first (`LOCK_GROUPS`, in one order), then one
    /// statement (`ENQUEUE_ALL_GROUPED`) that holds each row as one row at a time would have.
    fn enqueue_all_new(tx: &PgTx, rows: &[NewRow<'_>]) -> Result<Option<Vec<JobId>>> {
        if rows.len() < 2 {
            return Ok(None);
        }
        let grouped: Vec<(&str, &str)> = rows.iter().filter_map(|r| Some((r.queue, r.group?))).collect();
        tx.with(|conn| sql_query("SAVEPOINT fenceq_enqueue_all").execute(conn).pg("SAVEPOINT fenceq_enqueue_all"))?;
        let query = if grouped.is_empty() {
            rows_query(ENQUEUE_ALL, rows)
        } else {
            let (queues, groups): (Vec<&str>, Vec<&str>) = grouped.into_iter().unzip();
            let now = rows.iter().map(|r| r.created_at).max().unwrap_or(0);
            let locks =
                bound(LOCK_GROUPS).bind::<Array<Text>, _>(queues).bind::<Array<Text>, _>(groups).bind::<BigInt, _>(now);
            tx.writing(|conn| locks.execute(conn))?;
            rows_query(ENQUEUE_ALL_GROUPED, rows)
                .bind::<Array<Nullable<Text>>, _>(rows.iter().map(|r| r.group).collect::<Vec<_>>())
        };
        let ids: Vec<i64> = tx.writing(|conn| query.load::<IdRow>(conn))?.into_iter().map(|r| r.id).collect();
        if ids.len() != rows.len() {
            tx.with(|conn| {
                sql_query("ROLLBACK TO SAVEPOINT fenceq_enqueue_all")
                    .execute(conn)
                    .pg("ROLLBACK TO SAVEPOINT fenceq_enqueue_all")
            })?;
            return Ok(None);
        }
        tx.with(|conn| sql_query("RELEASE SAVEPOINT fenceq_enqueue_all").execute(conn).pg("RELEASE SAVEPOINT"))?;
        Ok(Some(ascending(ids)))
    }

    /// One statement (`ENQUEUE_ALL_OR_NONE`): a key conflict fails it on
    /// `fenceq_jobs_queue_key` and is `None`; any failure leaves nothing of it in autocommit.
    fn enqueue_all_or_none(tx: &PgTx, rows: &[NewRow<'_>]) -> Result<Option<Vec<JobId>>> {
        // Grouped rows need their group's lock: one by one, in a transaction (as after a
        // key conflict).
        if rows.iter().any(|r| r.group.is_some()) {
            return Ok(None);
        }
        let query = rows_query(ENQUEUE_ALL_OR_NONE, rows).bind::<BigInt, _>(rows.len() as i64);
        match tx.writing(|conn| Ok(query.query.load::<IdRow>(conn)))? {
            Ok(ids) if ids.len() == rows.len() => Ok(Some(ascending(ids.into_iter().map(|r| r.id).collect()))),
            // Every row ignored (an application's trigger): nothing was inserted, and no row
            // came back to divide by zero. Refused, so each job is then inserted alone.
            Ok(ids) if ids.is_empty() => {
                Err(Error::invalid("job", "the insert was ignored (is there a trigger on fenceq_jobs?)"))
            }
            // Some rows back but not all: the statement divides by zero first; a bug.
            Ok(ids) => Err(Error::domain(format!(
                "{} returned {} of {} rows",
                ENQUEUE_ALL_OR_NONE.name,
                ids.len(),
                rows.len()
            ))),
            Err(diesel::result::Error::DatabaseError(diesel::result::DatabaseErrorKind::UniqueViolation, info))
                if info.constraint_name() == Some("fenceq_jobs_queue_key") =>
            {
                Ok(None)
            }
            Err(e) => Err(Error::postgres(ENQUEUE_ALL_OR_NONE.name, e)),
        }
    }

    fn find_by_key(tx: &PgTx, queue: &str, key: &str) -> Result<Option<JobId>> {
        let query = bound(FIND_BY_KEY).bind::<Text, _>(queue).bind::<Text, _>(key);
        let id = tx.with(|conn| query.optional::<IdRow>(conn))?;
        Ok(id.map(|r| JobId(r.id)))
    }

    /// One statement (`CLAIM`); the claimed rows are sorted into claim order here. A queue
    /// with limits, which `CLAIM` leaves alone, is claimed in one more call: `CLAIM_LIMITED`
    /// when its limits are queue-wide only, else `CLAIM_GROUPED`.
    fn claim(tx: &PgTx, request: ClaimRequest<'_>) -> Result<Claims> {
        let ClaimRequest { queue, worker, now, lease_until, limit } = request;
        plain_claim(tx, queue, worker, limit, Some(now), lease_until.saturating_sub(now), || Ok(request))
    }

    /// With the system clock, `CLAIM` reads the server's clock itself: no round trip for the
    /// read. The read is the claim's alone: it is not kept as the store's reading, which
    /// would trail the server's clock by the claim's execution and commit (its reply arrives
    /// only after both), where the store's own read trails it by a bare round trip. A queue
    /// with limits reads the clock first, then claims (see [`PostgresStore::claim`]). An
    /// injected clock is read here and claims as `claim` does.
    fn claim_fresh(tx: &PgTx, clock: &dyn Clock, request: FreshClaim<'_>) -> Result<Claims> {
        if !clock.is_host_clock() {
            return Self::claim(tx, request.at(clock.now_ms()));
        }
        let FreshClaim { queue, worker, lease_ms, limit } = request;
        plain_claim(tx, queue, worker, limit, None, lease_ms, || Ok(request.at(Self::fresh_now(tx, clock)?)))
    }

    fn renew_if_owned(tx: &PgTx, claim: TokenAt<'_>, lease_until: i64) -> Result<bool> {
        let query = token_query(RENEW_IF_OWNED, claim).bind::<BigInt, _>(lease_until);
        changed(tx, query)
    }

    fn owns(tx: &PgTx, claim: TokenAt<'_>) -> Result<bool> {
        let query = token_query(OWNS, claim);
        Ok(tx.with(|conn| query.one::<N>(conn))?.n == 1)
    }

    /// Locks the row (`SELECT … FOR UPDATE`) until `tx` ends: a concurrent claim or reap
    /// skips it, a cancel or settle waits for it.
    fn owned_lease(tx: &PgTx, claim: TokenAt<'_>) -> Result<Option<OwnedLease>> {
        let TokenAt { token, now } = claim;
        tx.with(|conn| owned_lease_on(conn, token, now))
    }

    fn extend_owned(tx: &PgTx, claim: TokenAt<'_>, lease_until: i64) -> Result<bool> {
        let query = token_query(EXTEND_OWNED, claim).bind::<BigInt, _>(lease_until);
        changed(tx, query)
    }

    fn identity(tx: &PgTx, id: JobId) -> Result<Option<Identity>> {
        let query = bound(IDENTITY).bind::<BigInt, _>(id.0);
        let row = tx.with(|conn| query.optional::<IdentityRow>(conn))?;
        row.map(|r| {
            Ok(Identity {
                state: parse_state(&r.state)?,
                attempt: unsigned(r.attempt),
                claim_id: r.claim_id.map(ClaimId),
                lease_until: r.lease_until,
                wait_until: r.wait_until,
            })
        })
        .transpose()
    }

    fn complete_if_owned(tx: &PgTx, claim: TokenAt<'_>) -> Result<bool> {
        releasing(tx, token_query(COMPLETE_IF_OWNED, claim), claim.now)
    }

    /// One statement (`COMPLETE_MANY_IF_OWNED`); a token counts as completed at its first
    /// place in the list whose row the statement completed (a repeat, as its second call
    /// would, finds it completed already).
    fn complete_many_if_owned(tx: &PgTx, tokens: &[ClaimToken], now: i64) -> Result<Vec<bool>> {
        let ids: Vec<i64> = tokens.iter().map(|t| t.id.0).collect();
        let attempts: Vec<i32> = tokens.iter().map(|t| attempt(t.attempt)).collect();
        let claims: Vec<uuid::Uuid> = tokens.iter().map(|t| t.claim_id.0).collect();
        let query = bound(COMPLETE_MANY_IF_OWNED)
            .bind::<Array<BigInt>, _>(ids)
            .bind::<Array<Integer>, _>(attempts)
            .bind::<Array<SqlUuid>, _>(claims)
            .bind::<BigInt, _>(now);
        let rows = tx.writing(|conn| query.load::<CompletedRow>(conn))?;
        let groups = rows.iter().filter_map(|r| r.group.release_due()).collect();
        release_groups(tx, groups, now)?;
        let mut completed: std::collections::HashSet<(i64, i32, uuid::Uuid)> =
            rows.into_iter().map(|r| (r.token.id, r.token.attempt, r.token.claim_id)).collect();
        // The first listing of the exact token that completed its row reports it; any other
        // (a repeat, another token of the job) is what its own call would find: not owned.
        Ok(tokens.iter().map(|t| completed.remove(&(t.id.0, attempt(t.attempt), t.claim_id.0))).collect())
    }

    fn retry_if_owned(tx: &PgTx, claim: TokenAt<'_>, run_at: i64, error: &str) -> Result<bool> {
        let query = token_query(RETRY_IF_OWNED, claim).bind::<BigInt, _>(run_at).bind::<Text, _>(error);
        changed(tx, query)
    }

    fn exhaust_if_owned(tx: &PgTx, claim: TokenAt<'_>, error: &str) -> Result<bool> {
        releasing(tx, token_query(EXHAUST_IF_OWNED, claim).bind::<Text, _>(error), claim.now)
    }

    fn exhaust_out_of_attempts_if_owned(tx: &PgTx, claim: TokenAt<'_>, error: &str) -> Result<bool> {
        releasing(tx, token_query(EXHAUST_OUT_OF_ATTEMPTS_IF_OWNED, claim).bind::<Text, _>(error), claim.now)
    }

    fn mark_unknown_if_owned(tx: &PgTx, claim: TokenAt<'_>, evidence: &str) -> Result<bool> {
        let query = token_query(MARK_UNKNOWN_IF_OWNED, claim).bind::<Text, _>(evidence);
        releasing(tx, query, claim.now)
    }

    fn park_if_owned(tx: &PgTx, claim: TokenAt<'_>, wait_until: i64, reason: &str) -> Result<bool> {
        let query = token_query(PARK_IF_OWNED, claim).bind::<BigInt, _>(wait_until).bind::<Text, _>(reason);
        changed(tx, query)
    }

    fn release_if_owned(tx: &PgTx, claim: TokenAt<'_>) -> Result<bool> {
        changed(tx, token_query(RELEASE_IF_OWNED, claim))
    }

    fn resume_if_waiting(tx: &PgTx, claim: TokenAt<'_>) -> Result<bool> {
        changed(tx, token_query(RESUME_IF_WAITING, claim))
    }

    fn acknowledge_if_exhausted(tx: &PgTx, claim: TokenAt<'_>, decided: &Decided<'_>) -> Result<bool> {
        let query = token_query(ACKNOWLEDGE_IF_EXHAUSTED, claim)
            .bind::<Text, _>(decided.action)
            .bind::<Nullable<Text>, _>(decided.by)
            .bind::<Nullable<Text>, _>(decided.note);
        releasing(tx, query, claim.now)
    }

    fn resolve_if_unknown(
        tx: &PgTx,
        claim: TokenAt<'_>,
        resolution: Resolution,
        decided: &Decided<'_>,
    ) -> Result<bool> {
        let statement = match resolution {
            Resolution::Complete => RESOLVE_COMPLETE_IF_UNKNOWN,
            Resolution::Retry => RESOLVE_RETRY_IF_UNKNOWN,
            Resolution::Exhaust => RESOLVE_EXHAUST_IF_UNKNOWN,
        };
        let query = token_query(statement, claim)
            .bind::<Text, _>(decided.action)
            .bind::<Nullable<Text>, _>(decided.by)
            .bind::<Nullable<Text>, _>(decided.note);
        releasing(tx, query, claim.now)
    }

    fn cancel_if_active(tx: &PgTx, decision: JobDecision<'_>) -> Result<bool> {
        by_id(tx, CANCEL_IF_ACTIVE, decision)
    }

    fn replay_if_exhausted(tx: &PgTx, decision: JobDecision<'_>) -> Result<bool> {
        by_id(tx, REPLAY_IF_EXHAUSTED, decision)
    }

    fn acknowledge_job_if_unacknowledged(tx: &PgTx, decision: JobDecision<'_>) -> Result<bool> {
        by_id(tx, ACKNOWLEDGE_JOB_IF_UNACKNOWLEDGED, decision)
    }

    fn acknowledge_all(tx: &PgTx, decision: QueueDecision<'_>) -> Result<Vec<JobId>> {
        let now = decision.now;
        let query = queue_decision_query(ACKNOWLEDGE_ALL, decision);
        let rows = tx.writing(|conn| query.load::<AcknowledgedRow>(conn))?;
        release_groups(tx, rows.iter().filter_map(|r| r.group.release_due()).collect(), now)?;
        let mut ids: Vec<JobId> = rows.into_iter().map(|r| JobId(r.id)).collect();
        ids.sort_unstable();
        Ok(ids)
    }

    fn pause_queue(tx: &PgTx, decision: QueueDecision<'_>) -> Result<bool> {
        queue_decision(tx, PAUSE_QUEUE, decision)
    }

    fn unpause_queue(tx: &PgTx, decision: QueueDecision<'_>) -> Result<bool> {
        queue_decision(tx, UNPAUSE_QUEUE, decision)
    }

    fn queue_pause(tx: &PgTx, queue: &str) -> Result<Option<PausedQueue>> {
        let query = bound(QUEUE_PAUSE).bind::<Text, _>(queue);
        let row = tx.with(|conn| query.optional::<PausedRow>(conn))?;
        Ok(row.map(PausedRow::into_paused))
    }

    fn paused_queues(tx: &PgTx) -> Result<Vec<PausedQueue>> {
        let query = bound(PAUSED_QUEUES);
        let rows = tx.with(|conn| query.load::<PausedRow>(conn))?;
        Ok(rows.into_iter().map(PausedRow::into_paused).collect())
    }

    fn reap_expired(tx: &PgTx, batch: Batch) -> Result<(u64, u64)> {
        let Batch { until: now, limit: limit_ } = batch;
        let query = bound(REAP_EXPIRED).bind::<BigInt, _>(now).bind::<BigInt, _>(limit(limit_));
        let states = tx.writing(|conn| query.load::<ReapedRow>(conn))?;
        let mut groups: Vec<(String, String)> = states.iter().filter_map(|r| r.group.release_due()).collect();
        // Releases lost after their transition (a crash, a lost connection) are done here.
        let lost = bound(RELEASE_DUE_GROUPS).bind::<BigInt, _>(limit(limit_));
        groups.extend(tx.with(|conn| lost.load::<DueGroupRow>(conn))?.into_iter().map(|r| (r.queue, r.group_name)));
        release_groups(tx, groups, now)?;
        let requeued = states.iter().filter(|s| s.state == "pending").count() as u64;
        Ok((requeued, states.len() as u64 - requeued))
    }

    fn reap_waiting(tx: &PgTx, batch: Batch) -> Result<u64> {
        let Batch { until: now, limit: limit_ } = batch;
        let query = bound(REAP_WAITING).bind::<BigInt, _>(now).bind::<BigInt, _>(limit(limit_));
        let rows = tx.writing(|conn| query.load::<GroupRow>(conn))?;
        release_groups(tx, rows.iter().filter_map(GroupRow::release_due).collect(), now)?;
        Ok(rows.len() as u64)
    }

    fn reap_preview(tx: &PgTx, now: i64) -> Result<ReapReport> {
        let query = bound(REAP_PREVIEW).bind::<BigInt, _>(now);
        let row = tx.with(|conn| query.one::<ReapPreviewRow>(conn))?;
        Ok(ReapReport {
            requeued: count_u64(row.requeued),
            exhausted: count_u64(row.exhausted),
            waits_expired: count_u64(row.waits_expired),
        })
    }

    fn prune_settled(tx: &PgTx, batch: Batch) -> Result<u64> {
        let Batch { until: horizon, limit: limit_ } = batch;
        let query = bound(PRUNE_SETTLED).bind::<BigInt, _>(horizon).bind::<BigInt, _>(limit(limit_));
        Ok(count_u64(tx.writing(|conn| query.one::<N>(conn))?.n))
    }

    fn prune_acknowledged(tx: &PgTx, batch: Batch) -> Result<u64> {
        let Batch { until: horizon, limit: limit_ } = batch;
        let query = bound(PRUNE_ACKNOWLEDGED).bind::<BigInt, _>(horizon).bind::<BigInt, _>(limit(limit_));
        Ok(count_u64(tx.writing(|conn| query.one::<N>(conn))?.n))
    }

    fn prune_preview(tx: &PgTx, horizon: i64) -> Result<(u64, u64)> {
        let query = bound(PRUNE_PREVIEW).bind::<BigInt, _>(horizon);
        let row = tx.with(|conn| query.one::<PrunePreviewRow>(conn))?;
        Ok((count_u64(row.settled), count_u64(row.acknowledged)))
    }

    fn exhaustions(tx: &PgTx, page: PageRequest) -> Result<Vec<Exhaustion>> {
        exhaustion_page(tx, EXHAUSTIONS, page)
    }

    fn unknowns(tx: &PgTx, page: PageRequest) -> Result<Vec<Exhaustion>> {
        exhaustion_page(tx, UNKNOWNS, page)
    }

    fn job(tx: &PgTx, id: JobId) -> Result<Option<Job>> {
        let query = bound(JOB).bind::<BigInt, _>(id.0);
        let row = tx.with(|conn| query.optional::<JobRow>(conn))?;
        row.map(job_from_row).transpose()
    }

    fn attempts(tx: &PgTx, id: JobId, limit_: u32) -> Result<Vec<AttemptRecord>> {
        let query = bound(ATTEMPTS).bind::<BigInt, _>(id.0).bind::<BigInt, _>(limit(limit_));
        let rows = tx.with(|conn| query.load::<AttemptRow>(conn))?;
        rows.into_iter()
            .map(|r| {
                Ok(AttemptRecord {
                    attempt: unsigned(r.attempt),
                    claim_id: ClaimId(r.claim_id),
                    outcome: r.outcome.parse().map_err(|_| {
                        Error::invalid(
                            "attempt outcome",
                            format!("unknown attempt outcome {:?} in the database", r.outcome),
                        )
                    })?,
                    worker: r.worker,
                    started_at: r.started_at,
                    ended_at: r.ended_at,
                    error: r.error,
                })
            })
            .collect()
    }

    fn list(tx: &PgTx, queue: Option<&str>, state: Option<JobState>, page: PageRequest) -> Result<Vec<Job>> {
        let PageRequest { after, limit: limit_ } = page;
        let query = bound(LIST)
            .bind::<BigInt, _>(after)
            .bind::<Nullable<Text>, _>(queue)
            .bind::<Nullable<Text>, _>(state.map(JobState::as_str))
            .bind::<BigInt, _>(limit(limit_));
        let rows = tx.with(|conn| query.load::<JobRow>(conn))?;
        rows.into_iter().map(job_from_row).collect()
    }

    fn stats(tx: &PgTx, now: i64) -> Result<Vec<StatsRow>> {
        let query = bound(STATS).bind::<BigInt, _>(now);
        let rows = tx.with(|conn| query.load::<StatsDbRow>(conn))?;
        rows.into_iter()
            .map(|r| {
                Ok(StatsRow {
                    queue: r.queue,
                    state: parse_state(&r.state)?,
                    acknowledged: r.acknowledged,
                    count: count_u64(r.count),
                    min_run_at: r.min_run_at,
                    expired: count_u64(r.expired),
                })
            })
            .collect()
    }

    fn recount_settled(tx: &PgTx) -> Result<u64> {
        tx.writing(|conn| bound(LOCK_SETTLED_COUNTS).execute(conn))?;
        let query = bound(RECOUNT_SETTLED);
        Ok(count_u64(tx.writing(|conn| query.one::<N>(conn))?.n))
    }

    fn due_or_running(tx: &PgTx, queue: &str, now: i64) -> Result<u64> {
        let query = bound(DUE_OR_RUNNING).bind::<Text, _>(queue).bind::<BigInt, _>(now);
        Ok(count_u64(tx.with(|conn| query.one::<N>(conn))?.n))
    }

    fn completions_per_minute(tx: &PgTx, from: i64, until: i64) -> Result<Vec<(i64, u64)>> {
        let query = bound(COMPLETIONS_PER_MINUTE).bind::<BigInt, _>(from).bind::<BigInt, _>(until);
        let rows = tx.with(|conn| query.load::<MinuteRow>(conn))?;
        Ok(rows.into_iter().map(|r| (r.minute, count_u64(r.n))).collect())
    }

    fn advance_schedule_if_later(tx: &PgTx, tick: ScheduleTick<'_>) -> Result<bool> {
        let ScheduleTick { name, tick, now, next } = tick;
        let query = bound(ADVANCE_SCHEDULE_IF_LATER)
            .bind::<Text, _>(name)
            .bind::<BigInt, _>(tick)
            .bind::<BigInt, _>(now)
            .bind::<Nullable<BigInt>, _>(next);
        changed(tx, query)
    }

    fn schedule_last_tick(tx: &PgTx, name: &str) -> Result<Option<i64>> {
        let query = bound(SCHEDULE_LAST_TICK).bind::<Text, _>(name);
        let row = tx.with(|conn| query.optional::<N>(conn))?;
        Ok(row.map(|r| r.n))
    }

    fn record_schedule(tx: &PgTx, definition: ScheduleDefinition<'_>) -> Result<()> {
        let ScheduleDefinition { name, definition, queue, next, now } = definition;
        let query = bound(RECORD_SCHEDULE)
            .bind::<Text, _>(name)
            .bind::<Text, _>(definition)
            .bind::<Text, _>(queue)
            .bind::<Nullable<BigInt>, _>(next)
            .bind::<BigInt, _>(now);
        changed(tx, query).map(drop)
    }

    fn schedules(tx: &PgTx) -> Result<Vec<ScheduleRecord>> {
        let query = bound(SCHEDULES);
        let rows = tx.with(|conn| query.load::<ScheduleRow>(conn))?;
        Ok(rows.into_iter().map(ScheduleRow::into_record).collect())
    }

    fn set_limits(tx: &PgTx, queue: &str, limits: &Limits, now: i64) -> Result<()> {
        let delete = bound(DELETE_LIMITS).bind::<Text, _>(queue);
        tx.writing(|conn| delete.execute(conn))?;
        for (scope, window_ms, max_count) in limit_rows(limits) {
            let insert = bound(INSERT_LIMIT)
                .bind::<Text, _>(queue)
                .bind::<Text, _>(scope)
                .bind::<BigInt, _>(window_ms)
                .bind::<Integer, _>(i32::try_from(max_count).unwrap_or(i32::MAX))
                .bind::<BigInt, _>(now);
            tx.writing(|conn| insert.execute(conn))?;
        }
        let touch = bound(TOUCH_QUEUE_FLOW).bind::<Text, _>(queue).bind::<BigInt, _>(now);
        tx.writing(|conn| touch.execute(conn)).map(drop)
    }

    fn limits(tx: &PgTx, queue: &str) -> Result<Limits> {
        let query = bound(LIMITS).bind::<Text, _>(queue);
        let rows = tx.with(|conn| query.load::<LimitRow>(conn))?;
        Ok(limits_of(rows.into_iter().map(|r| (r.scope, r.window_ms, i64::from(r.max_count)))))
    }

    fn all_limits(tx: &PgTx) -> Result<Vec<(String, Limits)>> {
        let query = bound(ALL_LIMITS);
        let rows = tx.with(|conn| query.load::<QueueLimitRow>(conn))?;
        Ok(limits_by_queue(
            rows.into_iter()
                .map(|r| (r.queue, r.limit.scope, r.limit.window_ms, i64::from(r.limit.max_count)))
                .collect(),
        ))
    }

    fn running_count(tx: &PgTx, queue: &str) -> Result<u64> {
        let query = bound(RUNNING_COUNT).bind::<Text, _>(queue);
        Ok(count_u64(tx.with(|conn| query.one::<N>(conn))?.n))
    }

    /// One round trip: the count (up to `most`) and the `most`-th latest start.
    fn window_starts(tx: &PgTx, queue: &str, since: i64, most: u32) -> Result<(u64, Option<i64>)> {
        let query =
            bound(QUEUE_STARTS).bind::<Text, _>(queue).bind::<BigInt, _>(since).bind::<BigInt, _>(i64::from(most));
        let row = tx.with(|conn| query.one::<WindowRow>(conn))?;
        Ok((count_u64(row.n), row.countth))
    }

    fn spent_groups(tx: &PgTx, queue: &str, since: i64, count: u32) -> Result<Vec<String>> {
        let query =
            bound(SPENT_GROUPS).bind::<Text, _>(queue).bind::<BigInt, _>(since).bind::<BigInt, _>(i64::from(count));
        Ok(tx.with(|conn| query.load::<GroupNameRow>(conn))?.into_iter().map(|r| r.group_name).collect())
    }

    fn deferred_heads(tx: &PgTx, queue: &str, groups: &[String], now: i64) -> Result<(u64, Option<i64>)> {
        let query = bound(DEFERRED_HEADS).bind::<Text, _>(queue).bind::<Array<Text>, _>(groups).bind::<BigInt, _>(now);
        let row = tx.with(|conn| query.one::<HeadsRow>(conn))?;
        Ok((count_u64(row.n), row.at))
    }

    fn set_group_policy(tx: &PgTx, queue: &str, policy: GroupPolicy, now: i64) -> Result<()> {
        let query =
            bound(SET_GROUP_POLICY).bind::<Text, _>(queue).bind::<Text, _>(policy.as_str()).bind::<BigInt, _>(now);
        tx.writing(|conn| query.execute(conn))?;
        let held = bound(HELD_GROUPS).bind::<Text, _>(queue);
        let groups = tx.with(|conn| held.load::<GroupNameRow>(conn))?;
        release_groups(tx, groups.into_iter().map(|r| (queue.to_owned(), r.group_name)).collect(), now)
    }

    fn group_policy(tx: &PgTx, queue: &str) -> Result<GroupPolicy> {
        let query = bound(GROUP_POLICY).bind::<Text, _>(queue);
        let row = tx.with(|conn| query.optional::<PolicyRow>(conn))?;
        row.map_or(Ok(GroupPolicy::default()), |r| GroupPolicy::parse(&r.group_policy))
    }

    fn groups(tx: &PgTx, page: GroupsRequest<'_>) -> Result<Vec<GroupSummary>> {
        let GroupsRequest { queue, after: (after_queue, after_group), limit: limit_ } = page;
        let query = bound(GROUPS_PAGE)
            .bind::<Nullable<Text>, _>(queue)
            .bind::<Text, _>(after_queue)
            .bind::<Text, _>(after_group)
            .bind::<BigInt, _>(limit(limit_));
        let rows = tx.with(|conn| query.load::<GroupsPageRow>(conn))?;
        rows.into_iter()
            .map(|r| {
                let head = match (r.head_id, r.head_state, r.head_run_at) {
                    (Some(id), Some(state), Some(run_at)) => Some(GroupHead {
                        id: JobId(id),
                        state: parse_state(&state)?,
                        run_at,
                        wait_until: r.head_wait_until,
                        acknowledged: r.head_acknowledged_at.is_some(),
                    }),
                    _ => None,
                };
                Ok(GroupSummary { queue: r.queue, group: r.group_name, held: count_u64(r.held), head })
            })
            .collect()
    }

    fn snooze_if_owned(tx: &PgTx, claim: TokenAt<'_>, snooze: SnoozeAt<'_>) -> Result<bool> {
        let SnoozeAt { run_at, reason, max_snoozes, outcome } = snooze;
        let query = token_query(SNOOZE_IF_OWNED, claim)
            .bind::<BigInt, _>(run_at)
            .bind::<Text, _>(reason)
            .bind::<BigInt, _>(i64::from(max_snoozes))
            .bind::<Text, _>(outcome.as_str());
        changed(tx, query)
    }

    fn exhaust_past_snooze_cap_if_owned(tx: &PgTx, claim: TokenAt<'_>, max_snoozes: u32, error: &str) -> Result<bool> {
        let query = token_query(EXHAUST_PAST_SNOOZE_CAP_IF_OWNED, claim)
            .bind::<BigInt, _>(i64::from(max_snoozes))
            .bind::<Text, _>(error);
        releasing(tx, query, claim.now)
    }

    fn back_off_queue_of(tx: &PgTx, backoff: QueueBackoffAt<'_>) -> Result<bool> {
        let QueueBackoffAt { id, until, reason, now } = backoff;
        let query = bound(BACK_OFF_QUEUE_OF)
            .bind::<BigInt, _>(id.0)
            .bind::<BigInt, _>(until)
            .bind::<Text, _>(reason)
            .bind::<BigInt, _>(now);
        changed(tx, query)
    }

    fn queue_backoff(tx: &PgTx, queue: &str, now: i64) -> Result<Option<QueueBackoff>> {
        let query = bound(QUEUE_BACKOFF).bind::<Text, _>(queue).bind::<BigInt, _>(now);
        let row = tx.with(|conn| query.optional::<BackoffRow>(conn))?;
        Ok(row.map(BackoffRow::into_backoff))
    }

    fn queue_backoffs(tx: &PgTx, now: i64) -> Result<Vec<QueueBackoff>> {
        let query = bound(QUEUE_BACKOFFS).bind::<BigInt, _>(now);
        let rows = tx.with(|conn| query.load::<BackoffRow>(conn))?;
        Ok(rows.into_iter().map(BackoffRow::into_backoff).collect())
    }

    fn clear_queue_backoff(tx: &PgTx, lift: QueueDecision<'_>) -> Result<bool> {
        let QueueDecision { queue, now, decided } = lift;
        let query = bound(CLEAR_QUEUE_BACKOFF)
            .bind::<Text, _>(queue)
            .bind::<BigInt, _>(now)
            .bind::<Nullable<Text>, _>(decided.by)
            .bind::<Nullable<Text>, _>(decided.note);
        changed(tx, query)
    }

    fn last_backoff_lift(tx: &PgTx, queue: &str) -> Result<Option<BackoffLift>> {
        let query = bound(BACKOFF_LIFT).bind::<Text, _>(queue);
        let row = tx.with(|conn| query.optional::<LiftRow>(conn))?;
        Ok(row.map(|row| BackoffLift {
            queue: row.queue,
            at: row.lifted_at,
            by: row.lifted_by,
            note: row.lift_note,
            reason: row.lifted_reason,
        }))
    }
}

#[derive(QueryableByName)]
struct LiftRow {
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = BigInt)]
    lifted_at: i64,
    #[diesel(sql_type = Nullable<Text>)]
    lifted_by: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    lift_note: Option<String>,
    #[diesel(sql_type = Text)]
    lifted_reason: String,
}

#[derive(QueryableByName)]
struct BackoffRow {
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = BigInt)]
    backoff_until: i64,
    #[diesel(sql_type = Text)]
    backoff_reason: String,
    #[diesel(sql_type = BigInt)]
    backoff_since: i64,
}

impl BackoffRow {
    fn into_backoff(self) -> QueueBackoff {
        QueueBackoff {
            queue: self.queue,
            until: self.backoff_until,
            reason: self.backoff_reason,
            since: self.backoff_since,
        }
    }
}

/// A statement with the token guard's parameters bound: `$1` id, `$2` attempt, `$3` claim
/// id, `$4` now.
fn token_query<'a>(statement: Stmt, claim: TokenAt<'_>) -> Bound<'a> {
    let TokenAt { token, now } = claim;
    bound(statement)
        .bind::<BigInt, _>(token.id.0)
        .bind::<Integer, _>(attempt(token.attempt))
        .bind::<SqlUuid, _>(token.claim_id.0)
        .bind::<BigInt, _>(now)
}

/// Runs an operator's transition of one job by id (guarded by its state in the statement:
/// `$1` id, `$2` now, `$3` decision, `$4` by, `$5` note): true when it changed the row.
fn by_id(tx: &PgTx, statement: Stmt, decision: JobDecision<'_>) -> Result<bool> {
    let JobDecision { id, now, decided } = decision;
    let query = bound(statement)
        .bind::<BigInt, _>(id.0)
        .bind::<BigInt, _>(now)
        .bind::<Text, _>(decided.action)
        .bind::<Nullable<Text>, _>(decided.by)
        .bind::<Nullable<Text>, _>(decided.note);
    releasing(tx, query, now)
}

/// Attempts are at most 10,000; a forged larger one matches no row.
fn attempt(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn limit(n: u32) -> i64 {
    i64::from(n)
}

/// The rows a statement that writes changed.
fn count(tx: &PgTx, query: Bound<'_>) -> Result<usize> {
    tx.writing(|conn| query.execute(conn))
}

fn changed(tx: &PgTx, query: Bound<'_>) -> Result<bool> {
    Ok(count(tx, query)? == 1)
}

/// `statement`, to bind its parameters to and run.
fn bound<'a>(statement: Stmt) -> Bound<'a> {
    Bound { statement, query: Prepared::new(statement.sql) }
}

/// A statement with its parameters bound: every error it raises carries its name.
struct Bound<'a> {
    statement: Stmt,
    query: Query<'a>,
}

impl<'a> Bound<'a> {
    /// Binds the next parameter (`$n`), as [`Prepared::bind`].
    fn bind<T, V>(mut self, value: V) -> Self
    where
        Pg: HasSqlType<T>,
        V: ToSql<T, Pg> + Send + 'a,
        T: Send + 'a,
    {
        self.query = self.query.bind::<T, V>(value);
        self
    }

    /// Runs it: the rows it changed.
    fn execute(self, conn: &mut PgConnection) -> Result<usize> {
        self.query.execute(conn).pg(self.statement)
    }

    /// Runs it: every row it returned.
    fn load<'q, R>(self, conn: &mut PgConnection) -> Result<Vec<R>>
    where
        Query<'a>: LoadQuery<'q, PgConnection, R>,
    {
        self.query.load::<R>(conn).pg(self.statement)
    }

    /// Runs it: its one row.
    fn one<'q, R>(self, conn: &mut PgConnection) -> Result<R>
    where
        Query<'a>: LoadQuery<'q, PgConnection, R>,
    {
        self.query.get_result::<R>(conn).pg(self.statement)
    }

    /// Runs it: its row, if it returned one.
    fn optional<'q, R>(self, conn: &mut PgConnection) -> Result<Option<R>>
    where
        Query<'a>: LoadQuery<'q, PgConnection, R>,
    {
        self.query.get_result::<R>(conn).optional().pg(self.statement)
    }
}

#[derive(QueryableByName)]
struct IdRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

#[derive(QueryableByName)]
struct N {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct LeaseRow {
    #[diesel(sql_type = BigInt)]
    lease_until: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    heartbeat_at: Option<i64>,
}

#[derive(QueryableByName)]
struct ClaimRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Nullable<Text>)]
    key: Option<String>,
    #[diesel(sql_type = Binary)]
    payload: Vec<u8>,
    #[diesel(sql_type = Integer)]
    priority: i32,
    #[diesel(sql_type = BigInt)]
    run_at: i64,
    #[diesel(sql_type = Integer)]
    attempt: i32,
    #[diesel(sql_type = Integer)]
    max_attempts: i32,
    #[diesel(sql_type = BigInt)]
    lease_until: i64,
    #[diesel(sql_type = Nullable<Text>)]
    last_error: Option<String>,
    #[diesel(sql_type = SqlUuid)]
    claim_id: uuid::Uuid,
    #[diesel(sql_type = Nullable<Text>)]
    group_name: Option<String>,
}

#[derive(QueryableByName)]
struct HeadsRow {
    #[diesel(sql_type = BigInt)]
    n: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    at: Option<i64>,
}

#[derive(QueryableByName)]
struct IdentityRow {
    #[diesel(sql_type = Text)]
    state: String,
    #[diesel(sql_type = Integer)]
    attempt: i32,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    claim_id: Option<uuid::Uuid>,
    #[diesel(sql_type = Nullable<BigInt>)]
    lease_until: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    wait_until: Option<i64>,
}

#[derive(QueryableByName)]
struct PageRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Integer)]
    attempt: i32,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    claim_id: Option<uuid::Uuid>,
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Nullable<Text>)]
    key: Option<String>,
    #[diesel(sql_type = Binary)]
    payload: Vec<u8>,
    #[diesel(sql_type = Nullable<Text>)]
    reason: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    at: Option<i64>,
}

#[derive(QueryableByName)]
struct JobRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Nullable<Text>)]
    key: Option<String>,
    #[diesel(sql_type = Binary)]
    payload: Vec<u8>,
    #[diesel(sql_type = Text)]
    state: String,
    #[diesel(sql_type = Integer)]
    priority: i32,
    #[diesel(sql_type = BigInt)]
    run_at: i64,
    #[diesel(sql_type = Integer)]
    attempt: i32,
    #[diesel(sql_type = Integer)]
    max_attempts: i32,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    claim_id: Option<uuid::Uuid>,
    #[diesel(sql_type = Nullable<Text>)]
    worker: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    lease_until: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    heartbeat_at: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    wait_until: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    last_error: Option<String>,
    #[diesel(sql_type = BigInt)]
    created_at: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    settled_at: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    exhausted_at: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    acknowledged_at: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    decision: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    decided_at: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    decided_by: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    decision_note: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    group_name: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    group_held: bool,
    #[diesel(sql_type = Integer)]
    snoozes: i32,
}

#[derive(QueryableByName)]
struct StatsDbRow {
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Text)]
    state: String,
    #[diesel(sql_type = Bool)]
    acknowledged: bool,
    #[diesel(sql_type = BigInt)]
    count: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    min_run_at: Option<i64>,
    #[diesel(sql_type = BigInt)]
    expired: i64,
}

#[derive(QueryableByName)]
struct ReapPreviewRow {
    #[diesel(sql_type = BigInt)]
    requeued: i64,
    #[diesel(sql_type = BigInt)]
    exhausted: i64,
    #[diesel(sql_type = BigInt)]
    waits_expired: i64,
}

#[derive(QueryableByName)]
struct PrunePreviewRow {
    #[diesel(sql_type = BigInt)]
    settled: i64,
    #[diesel(sql_type = BigInt)]
    acknowledged: i64,
}

fn parse_state(text: &str) -> Result<JobState> {
    text.parse().map_err(|_| Error::invalid("state", format!("unknown state {text:?} in the database")))
}

fn unsigned(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

fn count_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The exact token's live lease at `now`, locking its row until the transaction ends.
pub(super) fn owned_lease_on(conn: &mut PgConnection, token: &ClaimToken, now: i64) -> Result<Option<OwnedLease>> {
    let row = token_query(OWNED_LEASE, TokenAt { token, now }).optional::<LeaseRow>(conn)?;
    Ok(row.map(|r| OwnedLease {
        until: r.lease_until,
        length_ms: r.heartbeat_at.map_or(0, |at| r.lease_until.saturating_sub(at).max(0)),
    }))
}

/// Runs a pause or unpause of `queue`, recording `decided`: true when it changed the queue.
fn queue_decision(tx: &PgTx, statement: Stmt, decision: QueueDecision<'_>) -> Result<bool> {
    changed(tx, queue_decision_query(statement, decision))
}

/// A decision on a queue: `$1` queue, `$2` now, `$3` decision, `$4` by, `$5` note.
fn queue_decision_query(statement: Stmt, decision: QueueDecision<'_>) -> Bound<'_> {
    let QueueDecision { queue, now, decided } = decision;
    bound(statement)
        .bind::<Text, _>(queue)
        .bind::<BigInt, _>(now)
        .bind::<Text, _>(decided.action)
        .bind::<Nullable<Text>, _>(decided.by)
        .bind::<Nullable<Text>, _>(decided.note)
}

#[derive(QueryableByName)]
struct MinuteRow {
    #[diesel(sql_type = BigInt)]
    minute: i64,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct ScheduleRow {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Nullable<Text>)]
    definition: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    queue: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    last_tick: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    next_tick: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    recorded_at: Option<i64>,
}

impl ScheduleRow {
    fn into_record(self) -> ScheduleRecord {
        let ScheduleRow { name, definition, queue, last_tick, next_tick, recorded_at } = self;
        ScheduleRecord { name, definition, queue, last_tick, next_tick, recorded_at }
    }
}

#[derive(QueryableByName)]
struct PausedRow {
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = BigInt)]
    paused_at: i64,
    #[diesel(sql_type = Nullable<Text>)]
    decided_by: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    decision_note: Option<String>,
}

impl PausedRow {
    fn into_paused(self) -> PausedQueue {
        PausedQueue { queue: self.queue, since: self.paused_at, by: self.decided_by, note: self.decision_note }
    }
}

/// One page of exhaustions or unknowns (`statement` is one of the two page queries).
fn exhaustion_page(tx: &PgTx, statement: Stmt, page: PageRequest) -> Result<Vec<Exhaustion>> {
    let PageRequest { after, limit: limit_ } = page;
    let query = bound(statement).bind::<BigInt, _>(after).bind::<BigInt, _>(limit(limit_));
    let rows = tx.with(|conn| query.load::<PageRow>(conn))?;
    Ok(rows
        .into_iter()
        .map(|r| Exhaustion {
            token: ClaimToken {
                id: JobId(r.id),
                attempt: unsigned(r.attempt),
                claim_id: ClaimId(r.claim_id.unwrap_or_else(uuid::Uuid::nil)),
            },
            queue: r.queue,
            key: r.key,
            payload: r.payload,
            reason: r.reason,
            at: r.at.unwrap_or_default(),
        })
        .collect())
}

fn job_from_row(r: JobRow) -> Result<Job> {
    Ok(Job {
        id: JobId(r.id),
        queue: r.queue,
        key: r.key,
        payload: r.payload,
        state: parse_state(&r.state)?,
        priority: r.priority,
        run_at: r.run_at,
        attempt: unsigned(r.attempt),
        max_attempts: unsigned(r.max_attempts),
        claim_id: r.claim_id.map(ClaimId),
        worker: r.worker,
        lease_until: r.lease_until,
        heartbeat_at: r.heartbeat_at,
        wait_until: r.wait_until,
        last_error: r.last_error,
        created_at: r.created_at,
        settled_at: r.settled_at,
        exhausted_at: r.exhausted_at,
        acknowledged_at: r.acknowledged_at,
        decision: match (r.decision, r.decided_at) {
            (Some(action), Some(at)) => Some(Decision { action, at, by: r.decided_by, note: r.decision_note }),
            _ => None,
        },
        group: r.group_name,
        held_by_group: r.group_held,
        snoozes: unsigned(r.snoozes),
    })
}

/// `statement` bound to the seven arrays of `rows`' columns (`ENQUEUE_ALL`'s parameters).
fn rows_query<'q>(statement: Stmt, rows: &[NewRow<'q>]) -> Bound<'q> {
    bound(statement)
        .bind::<Array<Text>, _>(rows.iter().map(|r| r.queue).collect::<Vec<_>>())
        .bind::<Array<Nullable<Text>>, _>(rows.iter().map(|r| r.key).collect::<Vec<_>>())
        .bind::<Array<Binary>, _>(rows.iter().map(|r| r.payload).collect::<Vec<_>>())
        .bind::<Array<Integer>, _>(rows.iter().map(|r| r.priority).collect::<Vec<_>>())
        .bind::<Array<BigInt>, _>(rows.iter().map(|r| r.run_at).collect::<Vec<_>>())
        .bind::<Array<Integer>, _>(rows.iter().map(|r| attempt(r.max_attempts)).collect::<Vec<_>>())
        .bind::<Array<BigInt>, _>(rows.iter().map(|r| r.created_at).collect::<Vec<_>>())
}

/// Ids inserted in the rows' order: the sequence ascends in that order.
fn ascending(mut ids: Vec<i64>) -> Vec<JobId> {
    ids.sort_unstable();
    ids.into_iter().map(JobId).collect()
}

/// Runs a transition that may end a hold on a group (`RETURNING group_returned!()`): true
/// when it changed its row, whose group is then released if due.
fn releasing(tx: &PgTx, query: Bound<'_>, now: i64) -> Result<bool> {
    let rows = tx.writing(|conn| query.load::<GroupRow>(conn))?;
    release_groups(tx, rows.iter().filter_map(GroupRow::release_due).collect(), now)?;
    Ok(rows.len() == 1)
}

/// Takes the lock of a group (`LOCK_GROUP`) until the transaction ends.
fn lock_group(tx: &PgTx, queue: &str, group: &str, now: i64) -> Result<()> {
    let query = bound(LOCK_GROUP).bind::<Text, _>(queue).bind::<Text, _>(group).bind::<BigInt, _>(now);
    tx.writing(|conn| query.execute(conn)).map(drop)
}

/// How often a release tries again after the held job it chose was changed under it (a
/// concurrent cancel) before leaving the group to the reaper's sweep.
const RELEASE_TRIES: usize = 8;

/// Hands each group (once each, in a fixed order so that two transactions never wait for
/// each other's groups) to its next job unless a job holds it, under the group's lock: in
/// this transaction, or in autocommit in a short one of its own. Its marks are then cleared.
///
/// In autocommit the transition that made the release due has already committed: an error
/// from the hand-over (the group's row held past the busy timeout, a lost connection) must
/// not turn the caller's answer into an error for a write that happened. The hand-over's
/// mark (`group_release_due`) then stays, the reaper's sweep hands the group on, and until
/// it does a job enqueued into the group waits behind the held ones (`queues_behind!`), so
/// the group's order holds. The failure is logged as what it is.
fn release_groups(tx: &PgTx, mut groups: Vec<(String, String)>, now: i64) -> Result<()> {
    if groups.is_empty() {
        return Ok(());
    }
    groups.sort_unstable();
    groups.dedup();
    if tx.in_transaction.get() {
        return hand_on(tx, &groups, now);
    }
    if let Err(error) = tx.in_own_transaction(|tx| hand_on(tx, &groups, now)) {
        tracing::warn!(
            %error,
            groups = groups.len(),
            "a group's hand-over failed after its job's transition committed; the reaper's sweep hands it on"
        );
    }
    Ok(())
}

/// `release_groups`' work, inside one transaction.
fn hand_on(tx: &PgTx, groups: &[(String, String)], now: i64) -> Result<()> {
    for (queue, group) in groups {
        lock_group(tx, queue, group, now)?;
        for _ in 0..RELEASE_TRIES {
            let release = bound(RELEASE_GROUP).bind::<Text, _>(queue.as_str()).bind::<Text, _>(group.as_str());
            if tx.writing(|conn| release.execute(conn))? == 1 {
                break;
            }
            let needed = bound(GROUP_NEEDS_RELEASE).bind::<Text, _>(queue.as_str()).bind::<Text, _>(group.as_str());
            if !tx.with(|conn| needed.one::<NeededRow>(conn))?.needed {
                break;
            }
        }
        let done = bound(GROUP_RELEASED).bind::<Text, _>(queue.as_str()).bind::<Text, _>(group.as_str());
        tx.writing(|conn| done.execute(conn))?;
    }
    Ok(())
}

/// What a transition that may end a hold returns (`group_returned!`).
#[derive(QueryableByName)]
struct GroupRow {
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Nullable<Text>)]
    group_name: Option<String>,
    #[diesel(sql_type = Bool)]
    group_release_due: bool,
}

impl GroupRow {
    /// The (queue, group) to release, when the transition made its release due.
    fn release_due(&self) -> Option<(String, String)> {
        match (&self.group_name, self.group_release_due) {
            (Some(group), true) => Some((self.queue.clone(), group.clone())),
            _ => None,
        }
    }
}

/// A claim token's columns (`id`, `attempt`, `claim_id`) as a statement returns them.
#[derive(QueryableByName)]
pub(super) struct TokenRow {
    #[diesel(sql_type = BigInt)]
    pub(super) id: i64,
    #[diesel(sql_type = Integer)]
    pub(super) attempt: i32,
    #[diesel(sql_type = SqlUuid)]
    pub(super) claim_id: uuid::Uuid,
}

#[derive(QueryableByName)]
struct CompletedRow {
    #[diesel(embed)]
    token: TokenRow,
    #[diesel(embed)]
    group: GroupRow,
}

#[derive(QueryableByName)]
struct AcknowledgedRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(embed)]
    group: GroupRow,
}

#[derive(QueryableByName)]
struct ReapedRow {
    #[diesel(sql_type = Text)]
    state: String,
    #[diesel(embed)]
    group: GroupRow,
}

/// A row of `ATTEMPTS`.
#[derive(QueryableByName)]
struct AttemptRow {
    #[diesel(sql_type = Integer)]
    attempt: i32,
    #[diesel(sql_type = SqlUuid)]
    claim_id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    outcome: String,
    #[diesel(sql_type = Nullable<Text>)]
    worker: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    started_at: Option<i64>,
    #[diesel(sql_type = BigInt)]
    ended_at: i64,
    #[diesel(sql_type = Nullable<Text>)]
    error: Option<String>,
}

#[derive(QueryableByName)]
struct DueGroupRow {
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Text)]
    group_name: String,
}

#[derive(QueryableByName)]
struct GroupNameRow {
    #[diesel(sql_type = Text)]
    group_name: String,
}

#[derive(QueryableByName)]
struct PolicyRow {
    #[diesel(sql_type = Text)]
    group_policy: String,
}

#[derive(QueryableByName)]
struct NeededRow {
    #[diesel(sql_type = Bool)]
    needed: bool,
}

#[derive(QueryableByName)]
struct GroupsPageRow {
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Text)]
    group_name: String,
    #[diesel(sql_type = BigInt)]
    held: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    head_id: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    head_state: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    head_run_at: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    head_wait_until: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    head_acknowledged_at: Option<i64>,
}

/// One `CLAIM` of up to `limit` jobs of `queue` for `worker` (`$1`, `$3`, `$4`), judged at
/// `now` (`$2`; NULL: the server's clock, read by the statement), each lease `lease_ms` long
/// (`$5`); the claimed rows are sorted into claim order here. When it took nothing, a queue
/// with limits is claimed by `claim_under_limits`, judged as `at` says.
fn plain_claim<'q>(
    tx: &PgTx,
    queue: &'q str,
    worker: &'q str,
    limit_: u32,
    now: Option<i64>,
    lease_ms: i64,
    at: impl FnOnce() -> Result<ClaimRequest<'q>>,
) -> Result<Claims> {
    let query = bound(CLAIM)
        .bind::<Text, _>(queue)
        .bind::<Nullable<BigInt>, _>(now)
        .bind::<BigInt, _>(limit(limit_))
        .bind::<Text, _>(worker)
        .bind::<BigInt, _>(lease_ms);
    let rows = tx.writing(|conn| query.load::<ClaimRow>(conn))?;
    if rows.is_empty() {
        return claim_under_limits(tx, queue, at);
    }
    Ok(Claims::of(claimed_in_order(rows)))
}

/// After a `CLAIM` that took nothing: a queue with limits (which `CLAIM` leaves alone) is
/// claimed by `CLAIM_LIMITED` when its limits are queue-wide only, else by `CLAIM_GROUPED`,
/// judged as `at` says (read only for such a queue).
///
/// The queue's lock (`LOCK_QUEUE_FLOW`) is taken first and `at` read after it, in one
/// transaction: the instant a claim records as its jobs' start (what the rates count, and
/// `Claimed::claimed_at`) is then read after its wait for the other processes' claims, not
/// before it. Read before, every claim that queued for the lock when a window opened started
/// its jobs later than it counted them by its wait.
fn claim_under_limits<'q>(tx: &PgTx, queue: &str, at: impl FnOnce() -> Result<ClaimRequest<'q>>) -> Result<Claims> {
    let limits = PostgresStore::limits(tx, queue)?;
    if limits.is_empty() {
        return Ok(Claims::of(Vec::new()));
    }
    tx.in_own_transaction(|tx| {
        let lock = bound(LOCK_QUEUE_FLOW).bind::<Text, _>(queue);
        tx.writing(|conn| lock.load::<N>(conn))?;
        let request = at()?;
        if limits.group_rates.is_empty() {
            claim_queue_limited(tx, request, &limits)
        } else {
            claim_grouped(tx, request, &limits)
        }
    })
}

/// `statement` with a limited claim's first five parameters bound (`$1` queue, `$2` now, `$3`
/// limit, `$4` worker, `$5` lease end), as `CLAIM_LIMITED` and `CLAIM_GROUPED` take them.
fn claim_query<'q>(statement: Stmt, request: ClaimRequest<'q>) -> Bound<'q> {
    let ClaimRequest { queue, worker, now, lease_until, limit: limit_ } = request;
    bound(statement)
        .bind::<Text, _>(queue)
        .bind::<BigInt, _>(now)
        .bind::<BigInt, _>(limit(limit_))
        .bind::<Text, _>(worker)
        .bind::<BigInt, _>(lease_until)
}

/// `statement` with the eight parameters both limited claims take: `claim_query`'s five, then
/// the queue's rate (`$6` count, `$7` window; both NULL without one) and its running limit
/// (`$8`, NULL without one).
fn limited_claim_query<'q>(statement: Stmt, request: ClaimRequest<'q>, limits: &Limits) -> Bound<'q> {
    claim_query(statement, request)
        .bind::<Nullable<BigInt>, _>(limits.rate.map(|r| i64::from(r.count)))
        .bind::<Nullable<BigInt>, _>(limits.rate.map(|r| r.window_ms()))
        .bind::<Nullable<BigInt>, _>(limits.max_running.map(i64::from))
}

/// The claim of a queue whose limits are queue-wide only (a rate, a running limit): the
/// schema's `fenceq_claim_limited`, which runs `store::limits::claim_limited`'s steps for such
/// a queue on the server, under the same lock, in one round trip, so that the lock that
/// serialises the queue's claims across processes is held for the function's run only. When
/// it claims nothing and the queue has a rate, the rate's window says when it opens (read
/// after the claim: advisory, as the pool only sleeps until then and claims again).
fn claim_queue_limited(tx: &PgTx, request: ClaimRequest<'_>, limits: &Limits) -> Result<Claims> {
    let ClaimRequest { queue, now, .. } = request;
    let query = limited_claim_query(CLAIM_LIMITED, request, limits);
    let rows = tx.writing(|conn| query.load::<ClaimRow>(conn))?;
    if !rows.is_empty() {
        return Ok(Claims::of(claimed_in_order(rows)));
    }
    let limit_opens_at = match limits.rate {
        Some(rate) => rate_opens_at::<PostgresStore>(tx, queue, rate, now)?,
        None => None,
    };
    Ok(Claims { jobs: Vec::new(), limit_opens_at })
}

/// The claim of a queue with group rates: the schema's `fenceq_claim_grouped`, which runs
/// `store::limits::claim_limited`'s steps on the server, under the same lock, in one round
/// trip (the steps' own round trips, several per candidate, held the lock that serialises the
/// queue's claims across processes). A claim that took nothing is told by the function when
/// the limit that held it back opens.
fn claim_grouped(tx: &PgTx, request: ClaimRequest<'_>, limits: &Limits) -> Result<Claims> {
    let (counts, windows): (Vec<i64>, Vec<i64>) =
        limits.group_rates.iter().map(|r| (i64::from(r.count), r.window_ms())).unzip();
    let query = limited_claim_query(CLAIM_GROUPED, request, limits)
        .bind::<Array<BigInt>, _>(counts)
        .bind::<Array<BigInt>, _>(windows);
    let rows = tx.writing(|conn| query.load::<GroupedClaimRow>(conn))?;
    let limit_opens_at = rows.iter().find_map(|r| r.opens_at);
    let claimed: Vec<ClaimRow> = rows.into_iter().filter_map(|r| r.claimed).collect();
    Ok(Claims {
        limit_opens_at: if claimed.is_empty() { limit_opens_at } else { None },
        jobs: claimed_in_order(claimed),
    })
}

/// A row of `CLAIM_GROUPED`: a claimed job, or (with every column of one NULL) the instant a
/// limit that held the claim back opens.
struct GroupedClaimRow {
    claimed: Option<ClaimRow>,
    opens_at: Option<i64>,
}

impl QueryableByName<Pg> for GroupedClaimRow {
    fn build<'a>(row: &impl diesel::row::NamedRow<'a, Pg>) -> diesel::deserialize::Result<Self> {
        let opens_at = diesel::row::NamedRow::get::<Nullable<BigInt>, Option<i64>>(row, "opens_at")?;
        let id = diesel::row::NamedRow::get::<Nullable<BigInt>, Option<i64>>(row, "id")?;
        let claimed = match id {
            Some(_) => Some(ClaimRow::build(row)?),
            None => None,
        };
        Ok(GroupedClaimRow { claimed, opens_at })
    }
}

/// Claimed rows in claim order (priority, then run_at, then id), as the store hands them out.
fn claimed_in_order(mut rows: Vec<ClaimRow>) -> Vec<Claimed> {
    rows.sort_by_key(|r| (std::cmp::Reverse(r.priority), r.run_at, r.id));
    rows.into_iter()
        .map(|r| Claimed {
            token: ClaimToken { id: JobId(r.id), attempt: unsigned(r.attempt), claim_id: ClaimId(r.claim_id) },
            queue: r.queue,
            key: r.key,
            payload: r.payload,
            priority: r.priority,
            max_attempts: unsigned(r.max_attempts),
            lease_until: r.lease_until,
            last_error: r.last_error,
            group: r.group_name,
            // The claim's instant: the queue sets it from the lease (`Shared::claim_in`).
            claimed_at: 0,
        })
        .collect()
}

#[derive(QueryableByName)]
struct LimitRow {
    #[diesel(sql_type = Text)]
    scope: String,
    #[diesel(sql_type = BigInt)]
    window_ms: i64,
    #[diesel(sql_type = Integer)]
    max_count: i32,
}

#[derive(QueryableByName)]
struct QueueLimitRow {
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(embed)]
    limit: LimitRow,
}

#[derive(QueryableByName)]
struct WindowRow {
    #[diesel(sql_type = BigInt)]
    n: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    countth: Option<i64>,
}
