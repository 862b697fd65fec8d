//! The store contract: the seam between what every store shares and what is one store's own.
//!
//! Above the seam (`queue/`, `worker/`, `maintenance/`, `validate.rs`) lives everything that
//! is the same on every store: validation, the decisions that turn "no row changed" into a
//! typed error (`OwnershipLost` and its `LostReason`, `StaleIdentity`, `WaitExpired`,
//! `InvalidState`), settle composition (a retry out of attempts becomes an exhaustion),
//! cursor paging, batch loops, the clock, the wakers, the worker pool and the maintenance
//! services. Below it, each store in its own folder (`sqlite/`) owns its connections, its
//! transactions, its migrations and its dialect SQL.
//!
//! The seam is one trait, [`Store`], with one method per transition, named after the public
//! operation it serves and after its guard (River's `JobSetStateIfRunning` style):
//! `Queue::complete` runs [`Store::complete_if_owned`], which the SQLite store runs as the
//! statement `COMPLETE_IF_OWNED`. A transition reports what it changed (a `bool`, a count,
//! the rows); it never decides what a miss means.
//!
//! ## How `Queue` carries its store
//!
//! `Queue<S: Store = SqliteStore>` takes the store as a type parameter, with SQLite as the
//! default, so that `Queue` in an application's code still means today's SQLite queue. The
//! alternatives were an enum of stores or a boxed trait object. A type parameter is the
//! only one that gives a caller's closure the store's own transaction type (`S::Tx`, for
//! SQLite `rusqlite::Connection`) instead of a wrapper, it costs nothing on the hot paths
//! (every call is monomorphised and inlined; no vtable, no match per statement; see
//! `docs/performance.md`), and methods that only one store has (WAL
//! checkpoints) stay on `Queue<SqliteStore>` instead of failing at run time on the others.
//!
//! The trait is public because a public generic type needs a nameable bound, and because a
//! store written outside this crate must be able to implement it and run the conformance
//! kit (`crates/conformance`). Applications never use it. It is not yet stable: it may
//! change in any 0.x release.

/// Defines a store's named statements: each `/// doc NAME = "SQL";` in `stmt! { .. }` is a
/// `pub(crate)` constant [`Stmt`] whose name is the constant's own (`"NAME"`), so that each
/// statement's name is written once and every error it raises carries that name.
macro_rules! stmt {
    ($($(#[$doc:meta])* $name:ident = $sql:expr;)*) => {
        $(
            $(#[$doc])*
            pub(crate) const $name: crate::store::Stmt = crate::store::Stmt { name: stringify!($name), sql: $sql };
        )*
    };
}

/// The columns of a job's whole record, in the order every store's `job_from_row` reads
/// them ([`Store::job`], [`Store::list`]).
macro_rules! job_columns {
    () => {
        "id, queue, key, payload, state, priority, run_at, attempt, max_attempts, claim_id,
           worker, lease_until, heartbeat_at, wait_until, last_error, created_at, settled_at,
           exhausted_at, acknowledged_at, decision, decided_at, decided_by, decision_note,
           group_name, group_held, snoozes"
    };
}

pub mod default;
pub(crate) mod limits;
#[cfg(feature = "postgres")]
pub mod postgres;
pub(crate) mod scope;
pub(crate) mod settings;
pub mod sqlite;

pub use default::{DefaultOptions, DefaultStore};
pub use settings::Settings;

use crate::clock::Clock;
use crate::error::Result;
use crate::job::{
    AttemptOutcome, AttemptRecord, ClaimId, ClaimToken, Claimed, Exhaustion, GroupPolicy, Job, JobId, JobState,
    Resolution,
};
use crate::limits::Limits;
use crate::report::{
    BackoffLift, CheckpointReport, CommitStats, GroupSummary, PausedQueue, QueueBackoff, ReapReport, ScheduleRecord,
};
use std::time::Duration;

/// A store's own settings, which know how to open that store: what a
/// [`QueueBuilder`](crate::QueueBuilder) carries beside the [`Settings`] every store reads,
/// and what decides the type of the queue its `open` returns.
/// [`SqliteOptions`](crate::SqliteOptions) (the default) and `PostgresOptions` (feature
/// `postgres`) implement it; each store's options live in its own folder, so that a new store
/// brings its settings with it.
pub trait StoreOptions: Clone + std::fmt::Debug + Send + Sync + Sized + 'static {
    /// The store these options open.
    type Store: Store;

    /// Opens (creating, validating, upgrading as `settings` say) the store these options
    /// name, with `settings` already checked.
    ///
    /// # Errors
    ///
    /// The store's refusal of an option (`InvalidInput`) and its errors while opening.
    fn open_store(&self, settings: &Settings) -> Result<Self::Store>;
}

/// The worker thread of every connection pool of the process, whatever its store. r2d2
/// starts three per pool by default; ours only replace a connection now and then (none is
/// ever reaped: no idle timeout, no lifetime), so one thread shared by all serves, and
/// opening a queue spawns no threads.
pub(crate) fn pool_threads() -> std::sync::Arc<scheduled_thread_pool::ScheduledThreadPool> {
    static THREADS: std::sync::OnceLock<std::sync::Arc<scheduled_thread_pool::ScheduledThreadPool>> =
        std::sync::OnceLock::new();
    let start = || {
        let threads = scheduled_thread_pool::ScheduledThreadPool::builder().num_threads(1);
        std::sync::Arc::new(threads.thread_name_pattern("fenceq-pool-{}").build())
    };
    THREADS.get_or_init(start).clone()
}

/// The store contract: transactions, and one method per transition of a job's row.
///
/// ## The history of attempts
///
/// Every transition that ends an attempt other than by completing it records the attempt
/// ([`AttemptRecord`], read by [`Store::attempts`]) in the same transaction, in the statement
/// that changes the row or one beside it: the settles of the exact live claim (retry, snooze
/// or back-off, every exhaustion, unknown, park), the reaps ([`Store::reap_expired`],
/// [`Store::reap_waiting`]) and a claim that takes over an expired lease ([`Store::claim`]).
/// The record carries the row's attempt, claim id and worker, the claim's instant as its
/// start (which every claim id carries: [`ClaimId`] is a UUID of version 7, its first 48 bits
/// the instant; a store generates its claim ids so), the outcome, the transition's `now` as
/// its end, and the error text the transition stored as `last_error`. A guard that fails records nothing; a completion
/// and a release ([`Store::release_if_owned`]) record nothing; the prunes delete a deleted
/// job's records with it, and nothing else deletes one.
///
/// Every transition runs on `tx`, inside a transaction the store opened with [`Store::write`]
/// or [`Store::submit`] (reads: [`Store::read`]). Guarded transitions (`*_if_owned`,
/// `*_if_<state>`) return whether they changed the row; they write nothing when the guard
/// fails. Times are ms since the epoch, read above the seam from [`Store::now`] of the same
/// transaction (the queue's clock, or the store's own).
///
/// # Errors
///
/// Every transition returns only the store's own error: an [`Error`](crate::Error) variant
/// the store maps its driver's errors to (`Busy`, `StorageFull`, `ConnectionLost`, ...).
/// A transition never turns "no row changed" into an error; the layer above the seam
/// decides what a miss means. Methods whose errors say more than that have an `# Errors`
/// section of their own.
pub trait Store: Send + Sync + Sized + std::fmt::Debug + 'static {
    /// The transaction handle a caller's closure receives (`with_ownership`,
    /// `complete_with`, `transaction`, `enqueue_tx`): the store's own type.
    type Tx;

    /// Whether concurrent `enqueue` calls of one queue handle should share one statement
    /// and one commit (`queue/intake_group.rs`): true for a server store, where each
    /// statement is a round trip and each commit the server's own work. The default is
    /// false: SQLite's writer already groups every request of a process.
    const GROUPS_INTAKE: bool = false;

    /// How many of a worker pool's rounds (settle the finished attempts, claim for the free
    /// slots: one request each) may be in flight at once unless the pool sets it
    /// ([`WorkerPoolBuilder::rounds_in_flight`](crate::WorkerPoolBuilder::rounds_in_flight)):
    /// more than one for a server store, where each round runs on a connection of its own
    /// and the server works on them side by side. The default is 1: SQLite's one writer
    /// runs every request in turn.
    const POOL_ROUNDS_IN_FLIGHT: usize = 1;

    // ------------------------------------------------------------ transactions

    /// Runs `f` for reads, outside any write transaction.
    ///
    /// # Errors
    ///
    /// `f`'s error, or the store's when no connection is available.
    fn read<T>(&self, f: impl FnOnce(&Self::Tx) -> Result<T>) -> Result<T>;

    /// Runs `f` in a write transaction of its own on the calling thread and commits it when
    /// `f` returns `Ok` (rolls back otherwise).
    ///
    /// # Errors
    ///
    /// `f`'s error, `NestedWrite` from inside another write of this thread, or the store's
    /// error beginning or committing.
    fn write<T>(&self, f: impl FnOnce(&Self::Tx) -> Result<T>) -> Result<T>;

    /// Like [`Store::write`] for owned work (the hot paths): the store may run it on
    /// another thread, in one transaction with other callers' work (group commit). It
    /// returns once the transaction that carried the work has committed.
    ///
    /// # Errors
    ///
    /// As for [`Store::write`]; one caller's failed work must never fail its neighbours.
    fn submit<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Self::Tx) -> Result<T> + Send + 'static;

    /// [`Store::submit`] for work that changes rows in one statement at most: any statement
    /// after one that changed a row only reads, and a statement that changes rows runs only
    /// when those before it changed nothing (one enqueue, one claim, one settle). A server
    /// store may then run each statement in a transaction of its own (autocommit: no `BEGIN`
    /// and `COMMIT` round trips), which under `READ COMMITTED` is the same as one
    /// transaction: each statement reads the latest commits either way, and only one of
    /// them writes. The default is [`Store::submit`].
    ///
    /// # Errors
    ///
    /// As for [`Store::submit`].
    fn submit_single<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Self::Tx) -> Result<T> + Send + 'static,
    {
        self.submit(work)
    }

    /// Registers `wake`, for a store that learns of other processes' work (PostgreSQL's
    /// `LISTEN`, SQLite's watcher of the file): the store calls it, from a thread of its own,
    /// with the name of a queue another process (or handle) made a job due in, or with `None`
    /// when it may have missed some (every queue's pools should look). The queue registers
    /// once per handle, when its first pool subscribes, so that a store nobody's pools wait
    /// on does no work for it. The default does nothing, and pools poll.
    fn watch(&self, wake: Wake) {
        let _ = wake;
    }

    /// `Err(TransactionLost)` when the store rolled `tx`'s transaction back by itself while
    /// a caller's closure ran.
    ///
    /// # Errors
    ///
    /// `TransactionLost`.
    fn still_in_transaction(tx: &Self::Tx) -> Result<()>;

    /// How writes were grouped into transactions so far.
    fn commit_stats(&self) -> CommitStats;

    /// The store's own file upkeep, run by the maintenance thread's checkpoint service:
    /// SQLite copies its WAL back into the database and truncates it, waiting at most
    /// `patience` for readers. A store with no such upkeep returns `Ok(None)`.
    fn checkpoint(&self, patience: Duration) -> Result<Option<CheckpointReport>>;

    /// The schema version of the open database.
    fn schema_version(tx: &Self::Tx) -> Result<i64>;

    // ------------------------------------------------------------ time

    /// The instant `tx` judges time by, in ms since the epoch: every `now` the transitions
    /// of `tx` get, and every lease end, deadline and horizon computed from it above the
    /// seam. By default the queue's `clock`. A store that several hosts share may measure
    /// time by a clock of its own when `clock` is the host's wall clock
    /// ([`Clock::is_host_clock`]): PostgreSQL reads the server's
    /// clock, so that every host judges every lease by one clock. It must never run ahead of
    /// that clock (a lease is never reclaimed early), and each call is the current instant
    /// (a long transaction must not judge its later statements at its start).
    ///
    /// # Errors
    ///
    /// The store's error reading its clock.
    fn now(tx: &Self::Tx, clock: &dyn Clock) -> Result<i64> {
        let _ = tx;
        Ok(clock.now_ms())
    }

    /// [`Store::now`], read afresh where the store extends earlier readings of its clock:
    /// what a claim judges due jobs by. A job another process (or handle) made due at its
    /// own reading of the clock is then due for every claim that starts after that commit;
    /// an extended reading may trail the other process's and find it not yet due, and a pool
    /// woken for the job would sleep until its next poll. The default is [`Store::now`].
    ///
    /// # Errors
    ///
    /// The store's error reading its clock.
    fn fresh_now(tx: &Self::Tx, clock: &dyn Clock) -> Result<i64> {
        Self::now(tx, clock)
    }

    /// [`Store::now`] outside any transaction, without asking the store: an estimate for
    /// advisory uses only (`Queue::now_ms`, `Attempt::owner_lost`), never for a decision.
    /// By default the queue's `clock`.
    fn now_estimate(&self, clock: &dyn Clock) -> i64 {
        clock.now_ms()
    }

    // ------------------------------------------------------------ intake

    /// Inserts `row` unless a job with its (queue, key) exists: `None` when nothing was
    /// inserted.
    ///
    /// # Errors
    ///
    /// The store's error (a refused row is an error, never `None`).
    fn enqueue(tx: &Self::Tx, row: &NewRow<'_>) -> Result<Option<JobId>>;

    /// Inserts every row of `rows` as a new job, all or none, faster than one `enqueue`
    /// per row: their ids in order, or `None` with nothing inserted when a row would not
    /// be new (a key conflict, also between two of `rows`) or the store has no faster way.
    /// The caller then enqueues them one by one. The default is `None`.
    ///
    /// # Errors
    ///
    /// The store's error (a refused row is an error, never `None`).
    fn enqueue_all_new(tx: &Self::Tx, rows: &[NewRow<'_>]) -> Result<Option<Vec<JobId>>> {
        let _ = (tx, rows);
        Ok(None)
    }

    /// Inserts every row of `rows` as a new job in one statement that changes nothing unless
    /// every row is new, so that a server store can run it as the only write of
    /// [`Store::submit_single`] (in autocommit): their ids in order, or `None` with nothing
    /// inserted when a row would not be new (a key conflict, also between two of `rows`).
    /// An intake group (`queue/intake_group.rs`) tries it first. The default is
    /// [`Store::enqueue_all_new`].
    ///
    /// # Errors
    ///
    /// The store's error (a refused row is an error, never `None`).
    fn enqueue_all_or_none(tx: &Self::Tx, rows: &[NewRow<'_>]) -> Result<Option<Vec<JobId>>> {
        Self::enqueue_all_new(tx, rows)
    }

    /// The id of the job of `queue` with idempotency key `key`.
    fn find_by_key(tx: &Self::Tx, queue: &str, key: &str) -> Result<Option<JobId>>;

    // ------------------------------------------------------------ claims

    /// Claims up to `limit` due jobs of `queue` in priority, run_at, id order: pending jobs
    /// due at `now`, and running jobs whose lease ended at or before `now` with attempts
    /// left. Each gets `attempt + 1`, a fresh claim id, `worker`, and a lease to
    /// `lease_until`. A live lease is never handed out. A paused queue
    /// ([`Store::pause_queue`]) claims nothing, nor does a queue whose back-off
    /// ([`Store::back_off_queue_of`]) ends after `now`; both checks are part of the claim's
    /// own read. A queue with limits ([`Store::set_limits`]) is claimed by the limited
    /// claim's steps (`store::limits`; on PostgreSQL the same steps in the schema's
    /// functions), which hand out nothing that would break one. Each claim id carries the
    /// claim's instant (`now`, see [`ClaimId`]), and the claim of a running job records the
    /// attempt it takes over ([`AttemptOutcome::LeaseExpired`], ended at `now`).
    fn claim(tx: &Self::Tx, request: ClaimRequest<'_>) -> Result<Claims>;

    /// [`Store::claim`] judged by the store's clock read afresh ([`Store::fresh_now`]), each
    /// lease `request.lease_ms` long from that instant: what the queue's claims run. A store
    /// whose clock read is a round trip of its own may read it inside the claim's statement
    /// instead (PostgreSQL does, with the system clock). The default reads the clock, then
    /// claims.
    ///
    /// # Errors
    ///
    /// [`Store::fresh_now`]'s and [`Store::claim`]'s.
    fn claim_fresh(tx: &Self::Tx, clock: &dyn Clock, request: FreshClaim<'_>) -> Result<Claims> {
        let now = Self::fresh_now(tx, clock)?;
        Self::claim(tx, request.at(now))
    }

    /// Moves the lease of the exact live claim `claim.token` to `lease_until`.
    fn renew_if_owned(tx: &Self::Tx, claim: TokenAt<'_>, lease_until: i64) -> Result<bool>;

    /// True when `claim.token` is the exact claim of a running job whose lease is live at
    /// `claim.now`.
    fn owns(tx: &Self::Tx, claim: TokenAt<'_>) -> Result<bool>;

    /// The live lease of `claim.token` at `claim.now`, read so that no reclaim can commit before `tx`
    /// does (SQLite: the write lock `tx` holds; a server store locks the row).
    fn owned_lease(tx: &Self::Tx, claim: TokenAt<'_>) -> Result<Option<OwnedLease>>;

    /// Extends the exact running claim's lease to `lease_until` (checked live by
    /// [`Store::owned_lease`] earlier in `tx`), unless it already ends later.
    fn extend_owned(tx: &Self::Tx, claim: TokenAt<'_>, lease_until: i64) -> Result<bool>;

    /// The row's current identity and state, to explain a guarded transition that changed
    /// nothing.
    fn identity(tx: &Self::Tx, id: JobId) -> Result<Option<Identity>>;

    // ------------------------------------------------------------ settles (exact live claim)

    /// `running` → `completed`.
    fn complete_if_owned(tx: &Self::Tx, claim: TokenAt<'_>) -> Result<bool>;

    /// [`Store::complete_if_owned`] for each token in turn, in one call (`complete_all`, a
    /// pool's round): one `bool` per token, in order, exactly as the calls one by one would
    /// report them (a token listed twice completes once, the first time). A server store
    /// makes it one statement. The default calls `complete_if_owned` for each.
    fn complete_many_if_owned(tx: &Self::Tx, tokens: &[ClaimToken], now: i64) -> Result<Vec<bool>> {
        tokens.iter().map(|token| Self::complete_if_owned(tx, TokenAt { token, now })).collect()
    }

    /// `running` → `pending` at `run_at`, only while attempts are left; records the attempt
    /// ([`AttemptOutcome::Retry`]).
    fn retry_if_owned(tx: &Self::Tx, claim: TokenAt<'_>, run_at: i64, error: &str) -> Result<bool>;

    /// `running` → unacknowledged `exhausted`, keeping the token; records the attempt
    /// ([`AttemptOutcome::Exhausted`], as every exhaustion of the exact live claim does).
    fn exhaust_if_owned(tx: &Self::Tx, claim: TokenAt<'_>, error: &str) -> Result<bool>;

    /// [`Store::exhaust_if_owned`], only when no attempt is left (`attempt >= max_attempts`):
    /// the exhaustion of a retry that [`Store::retry_if_owned`] did not schedule. Guarded by
    /// the count as well as the token, so that a retry that missed for another reason
    /// (another transaction held the row, and let it go before this statement) never
    /// exhausts a job with attempts left.
    fn exhaust_out_of_attempts_if_owned(tx: &Self::Tx, claim: TokenAt<'_>, error: &str) -> Result<bool>;

    /// `running` → `unknown`; records the attempt ([`AttemptOutcome::Unknown`]).
    fn mark_unknown_if_owned(tx: &Self::Tx, claim: TokenAt<'_>, evidence: &str) -> Result<bool>;

    /// `running` → `waiting` until `wait_until`; records the attempt ([`AttemptOutcome::Parked`]).
    fn park_if_owned(tx: &Self::Tx, claim: TokenAt<'_>, wait_until: i64, reason: &str) -> Result<bool>;

    /// `running` → `pending`, due at once (its `run_at` if that has passed, else `now`), its
    /// lease cleared and its attempt given back (`max_attempts + 1`): a claim handed back
    /// unstarted (a worker pool's prefetched jobs when it shuts down). The attempt counter
    /// is never lowered, so the next claim is the next attempt with a fresh claim id, and
    /// no (id, attempt) is handed out twice. A server store wakes the queue's listeners.
    fn release_if_owned(tx: &Self::Tx, claim: TokenAt<'_>) -> Result<bool>;

    // ------------------------------------------------------------ exact token, other states

    /// `waiting` (deadline after `now`) → `pending` with one more attempt.
    fn resume_if_waiting(tx: &Self::Tx, claim: TokenAt<'_>) -> Result<bool>;

    /// Acknowledges the exhaustion `token` (a repeat changes nothing and still matches).
    fn acknowledge_if_exhausted(tx: &Self::Tx, claim: TokenAt<'_>, decided: &Decided<'_>) -> Result<bool>;

    /// `unknown` → what `resolution` says.
    fn resolve_if_unknown(
        tx: &Self::Tx,
        claim: TokenAt<'_>,
        resolution: Resolution,
        decided: &Decided<'_>,
    ) -> Result<bool>;

    // ------------------------------------------------------------ operators, by id

    /// `pending`, `waiting` or `running` → `cancelled`.
    fn cancel_if_active(tx: &Self::Tx, decision: JobDecision<'_>) -> Result<bool>;

    /// `exhausted` → `pending`, due now, attempt 0.
    fn replay_if_exhausted(tx: &Self::Tx, decision: JobDecision<'_>) -> Result<bool>;

    /// Acknowledges the unacknowledged exhaustion `id`.
    fn acknowledge_job_if_unacknowledged(tx: &Self::Tx, decision: JobDecision<'_>) -> Result<bool>;

    /// Acknowledges every unacknowledged exhaustion of `queue`; their ids, in id order.
    fn acknowledge_all(tx: &Self::Tx, decision: QueueDecision<'_>) -> Result<Vec<JobId>>;

    // ------------------------------------------------------------ paused queues

    /// Pauses `queue` from `now` on, recording `decided` (`"pause"`): afterwards
    /// [`Store::claim`] of it claims nothing, on every handle and process, until
    /// [`Store::unpause_queue`]. True when this call paused it; a queue paused already is
    /// left as it is, its record too (false). A queue with no jobs can be paused.
    fn pause_queue(tx: &Self::Tx, decision: QueueDecision<'_>) -> Result<bool>;

    /// Unpauses `queue`, recording `decided` (`"unpause"`): true when it was paused.
    fn unpause_queue(tx: &Self::Tx, decision: QueueDecision<'_>) -> Result<bool>;

    /// The pause of `queue`, while it is paused.
    fn queue_pause(tx: &Self::Tx, queue: &str) -> Result<Option<PausedQueue>>;

    /// Every paused queue, in queue order.
    fn paused_queues(tx: &Self::Tx) -> Result<Vec<PausedQueue>>;

    // ------------------------------------------------------------ maintenance

    /// Up to `batch.limit` running jobs whose lease ended at or before `batch.until` (now), of every queue (a
    /// paused one too, so that its attempts are never stuck): back to pending with attempts
    /// left, else exhausted, each attempt recorded ([`AttemptOutcome::LeaseExpired`]).
    /// Returns (requeued, exhausted).
    fn reap_expired(tx: &Self::Tx, batch: Batch) -> Result<(u64, u64)>;

    /// Up to `batch.limit` waiting jobs whose deadline passed at `batch.until` (now) →
    /// exhausted, each recorded ([`AttemptOutcome::WaitExpired`], a second record of the
    /// attempt that parked it).
    fn reap_waiting(tx: &Self::Tx, batch: Batch) -> Result<u64>;

    /// What [`Store::reap_expired`] and [`Store::reap_waiting`] would change at `now`.
    fn reap_preview(tx: &Self::Tx, now: i64) -> Result<ReapReport>;

    /// Deletes up to `batch.limit` completed and cancelled rows settled at or before
    /// `batch.until` (the horizon), and their attempts' records.
    fn prune_settled(tx: &Self::Tx, batch: Batch) -> Result<u64>;

    /// Deletes up to `batch.limit` exhaustions acknowledged at or before `batch.until` (the
    /// horizon), and their attempts' records.
    fn prune_acknowledged(tx: &Self::Tx, batch: Batch) -> Result<u64>;

    /// What the two prunes would delete at `horizon`: (settled, acknowledged).
    fn prune_preview(tx: &Self::Tx, horizon: i64) -> Result<(u64, u64)>;

    // ------------------------------------------------------------ inspection

    /// One page of unacknowledged exhaustions, in id order.
    fn exhaustions(tx: &Self::Tx, page: PageRequest) -> Result<Vec<Exhaustion>>;

    /// One page of unknown outcomes, in id order (`at` is when the
    /// outcome was recorded, `reason` its evidence).
    fn unknowns(tx: &Self::Tx, page: PageRequest) -> Result<Vec<Exhaustion>>;

    /// One job's whole record.
    fn job(tx: &Self::Tx, id: JobId) -> Result<Option<Job>>;

    /// Up to `limit` records of job `id`'s attempts that did not complete, newest first (in
    /// the order they were written, whatever the clock did meanwhile); none for a job with
    /// none, or with no row.
    fn attempts(tx: &Self::Tx, id: JobId, limit: u32) -> Result<Vec<AttemptRecord>>;

    /// One page of jobs, in id order, optionally of one queue and one state.
    fn list(tx: &Self::Tx, queue: Option<&str>, state: Option<JobState>, page: PageRequest) -> Result<Vec<Job>>;

    /// Row counts per queue, state and acknowledgement, in queue order.
    fn stats(tx: &Self::Tx, now: i64) -> Result<Vec<StatsRow>>;

    /// Counts the settled rows (completed, cancelled, acknowledged exhaustions) again from
    /// the rows themselves and keeps those counts in place of the old ones (what
    /// [`Store::stats`] reads): the repair for counts that a process of a build older than
    /// schema 13 left behind by settling rows after the upgrade. A count of the whole table,
    /// during which settles of other transactions wait. Returns how many settled rows it
    /// counted.
    fn recount_settled(tx: &Self::Tx) -> Result<u64>;

    /// Jobs completed (state `completed`) with `settled_at` in `from..until` (ms since the
    /// epoch), counted per whole minute of the epoch: `(minute, count)` with `minute` =
    /// `settled_at` div 60,000, in minute order, minutes without a completion left out. Read
    /// through the settled jobs' index, so its cost follows the completions in the range,
    /// not the table.
    fn completions_per_minute(tx: &Self::Tx, from: i64, until: i64) -> Result<Vec<(i64, u64)>>;

    /// Due pending jobs plus running jobs of `queue` (a paused queue's pending jobs are not
    /// due, nor are those of a queue whose back-off lasts at `now`).
    fn due_or_running(tx: &Self::Tx, queue: &str, now: i64) -> Result<u64>;

    // ------------------------------------------------------------ periodic jobs

    /// Records `tick` (ms since the epoch) as the latest tick enqueued for the schedule
    /// `name`, at `now`, when none is recorded for it or the recorded one is earlier: true
    /// when it did, and the caller then enqueues the tick's job in the same transaction;
    /// false when an equal or later tick is recorded (enqueued before a restart, by another
    /// process, or before the clock stepped back), and nothing changed. A server store makes
    /// it one guarded upsert, so that of several racing transactions exactly one wins.
    fn advance_schedule_if_later(tx: &Self::Tx, tick: ScheduleTick<'_>) -> Result<bool>;

    /// The latest tick recorded for the schedule `name` (`None` before its first, also when
    /// its registration made its row).
    fn schedule_last_tick(tx: &Self::Tx, name: &str) -> Result<Option<i64>>;

    /// Records a schedule's definition as registered, its queue and its next tick (one
    /// upsert by name), leaving its latest tick alone: what other processes read
    /// ([`Store::schedules`]).
    fn record_schedule(tx: &Self::Tx, definition: ScheduleDefinition<'_>) -> Result<()>;

    /// Every schedule recorded, by name (byte order).
    fn schedules(tx: &Self::Tx) -> Result<Vec<ScheduleRecord>>;

    // ------------------------------------------------------------ groups

    /// Stores `queue`'s group policy and releases every group of the queue that the new
    /// policy no longer blocks.
    fn set_group_policy(tx: &Self::Tx, queue: &str, policy: GroupPolicy, now: i64) -> Result<()>;

    /// `queue`'s group policy (the default when none was stored).
    fn group_policy(tx: &Self::Tx, queue: &str) -> Result<GroupPolicy>;

    /// One page of groups with live jobs, in (queue, group) order after `page.after`.
    fn groups(tx: &Self::Tx, page: GroupsRequest<'_>) -> Result<Vec<GroupSummary>>;

    // ------------------------------------------------------------ limits

    /// Replaces every limit of `queue` with `limits` (none: clears them), and makes sure the
    /// queue has its flow-control row (which a limited claim locks, where the store locks).
    fn set_limits(tx: &Self::Tx, queue: &str, limits: &Limits, now: i64) -> Result<()>;

    /// `queue`'s limits (empty when it has none).
    fn limits(tx: &Self::Tx, queue: &str) -> Result<Limits>;

    /// Every queue with limits, by name.
    fn all_limits(tx: &Self::Tx) -> Result<Vec<(String, Limits)>>;

    // What a limited claim and `stats` read of a queue's limits, each in the caller's
    // transaction (a store that claims with the shared steps of `store::limits` implements
    // the rest of them there, in `ClaimSteps`).

    /// The running attempts of `queue` (live or expired leases: an expired one's worker may
    /// still be at work until a reclaim replaces it).
    fn running_count(tx: &Self::Tx, queue: &str) -> Result<u64>;

    /// The groups of `queue` with `count` or more starts recorded after `since`: those whose
    /// rate of `count` per window from `since` is spent (for `stats`).
    fn spent_groups(tx: &Self::Tx, queue: &str, since: i64, count: u32) -> Result<Vec<String>>;

    /// How many of `groups`' heads (pending, holding their group) are not due at `now`, and
    /// the earliest instant one is: the heads a claim deferred until their group's rate
    /// opens (for `stats`).
    fn deferred_heads(tx: &Self::Tx, queue: &str, groups: &[String], now: i64) -> Result<(u64, Option<i64>)>;

    /// How many starts of `queue` were recorded after `since`, counting no further than
    /// `most`, and when there are `most` or more, the `most`-th latest of them: what a window
    /// of a rate of `most` needs to know.
    fn window_starts(tx: &Self::Tx, queue: &str, since: i64, most: u32) -> Result<(u64, Option<i64>)>;

    // ------------------------------------------------------------ snoozes and queue back-off

    /// `running` → `pending` at `snooze.run_at` without spending an attempt, while the job
    /// was snoozed fewer than `snooze.max_snoozes` times: its lease cleared, `last_error` set
    /// to `snooze.reason`, its snooze count raised by one, and its attempt given back as
    /// [`Store::release_if_owned`] does (`max_attempts + 1`, the counter never lowered, so the
    /// next claim is a new attempt and the snoozed token stays dead), and the attempt recorded
    /// with `snooze.outcome`. A server store wakes the
    /// queue's listeners when the job is due at once. False (nothing changed) when the token
    /// does not own the job or the cap is reached; the caller tells them apart
    /// ([`Store::exhaust_past_snooze_cap_if_owned`]).
    fn snooze_if_owned(tx: &Self::Tx, claim: TokenAt<'_>, snooze: SnoozeAt<'_>) -> Result<bool>;

    /// `running` → unacknowledged `exhausted` with `error`, keeping the token, only when the
    /// job was snoozed `max_snoozes` times or more: the exhaustion of a snooze past its cap.
    /// Guarded by the count as well as the token, so that a snooze that missed for another
    /// reason (another transaction held the row) never exhausts a job under its cap.
    fn exhaust_past_snooze_cap_if_owned(
        tx: &Self::Tx,
        claim: TokenAt<'_>,
        max_snoozes: u32,
        error: &str,
    ) -> Result<bool>;

    /// Backs off the queue of job `backoff.id` until `backoff.until` (recording `reason` and
    /// `now`), unless a back-off of it that ends as late or later is stored already. From
    /// the commit on, [`Store::claim`] of the queue claims nothing while its back-off ends
    /// after the claim's `now`. True when it stored this back-off.
    fn back_off_queue_of(tx: &Self::Tx, backoff: QueueBackoffAt<'_>) -> Result<bool>;

    /// The back-off of `queue`, while it lasts at `now`.
    fn queue_backoff(tx: &Self::Tx, queue: &str, now: i64) -> Result<Option<QueueBackoff>>;

    /// Every back-off that lasts at `now`, in queue order.
    fn queue_backoffs(tx: &Self::Tx, now: i64) -> Result<Vec<QueueBackoff>>;

    /// Ends the back-off of `lift.queue` that lasts at `lift.now`, recording the lift (when,
    /// `decided.by`, `decided.note`, and the reason of the back-off it ended) in place of the
    /// queue's previous one: true when there was a back-off.
    fn clear_queue_backoff(tx: &Self::Tx, lift: QueueDecision<'_>) -> Result<bool>;

    /// The last lift of `queue`'s back-off ([`Store::clear_queue_backoff`]), if any.
    fn last_backoff_lift(tx: &Self::Tx, queue: &str) -> Result<Option<BackoffLift>>;
}

/// A snooze of the exact live claim ([`Store::snooze_if_owned`]).
#[derive(Debug, Clone, Copy)]
pub struct SnoozeAt<'a> {
    /// When the job is due again (computed above the seam, saturating).
    pub run_at: i64,
    /// Stored as the job's last error.
    pub reason: &'a str,
    /// The cap: a job snoozed this many times already is not snoozed again.
    pub max_snoozes: u32,
    /// What the attempt's record says: [`AttemptOutcome::Snooze`] for the job alone,
    /// [`AttemptOutcome::Backoff`] for a provider's back-off of its group or queue.
    pub outcome: AttemptOutcome,
}

/// A queue's back-off, set through one of its jobs ([`Store::back_off_queue_of`]).
#[derive(Debug, Clone, Copy)]
pub struct QueueBackoffAt<'a> {
    /// The job whose queue backs off.
    pub id: JobId,
    /// When the back-off ends.
    pub until: i64,
    /// Why.
    pub reason: &'a str,
    /// Now, recorded with it.
    pub now: i64,
}

/// A schedule's definition as registered ([`Store::record_schedule`]).
#[derive(Debug, Clone, Copy)]
pub struct ScheduleDefinition<'a> {
    /// The schedule's name.
    pub name: &'a str,
    /// The schedule as it displays itself (`cron "0 9 * * *" in UTC`).
    pub definition: &'a str,
    /// The queue its ticks are enqueued into.
    pub queue: &'a str,
    /// The next tick it will enqueue, ms since the epoch (`None`: it never ticks again).
    pub next: Option<i64>,
    /// Now, recorded with it.
    pub now: i64,
}

/// One statement of a store's dialect and its name: what errors and logs say it was
/// (`Error::Busy { statement, .. }`). Defined with `stmt!`; run by passing the whole of it,
/// so that the name comes from the statement itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stmt {
    /// The constant's name (`"CLAIM"`).
    pub name: &'static str,
    /// Its SQL.
    pub sql: &'static str,
}

/// A statement's name, where an error names what raised it (`.sql(CLAIM)`, `.pg(CLAIM)`).
impl From<Stmt> for &'static str {
    fn from(stmt: Stmt) -> Self {
        stmt.name
    }
}

/// What a store's watcher calls ([`Store::watch`]): wakes the pools of the named queue, or
/// of every queue for `None`.
pub type Wake = std::sync::Arc<dyn Fn(Option<&str>) + Send + Sync>;

/// The name of every forward-only schema change, in version order (version = position + 1):
/// one list for every store, so that a version number means the same change everywhere.
/// Each store pairs it with its own dialect's files, `schema/<store>/NNNN_<name>.sql`
/// ([`migrations`]).
pub(crate) const MIGRATION_NAMES: [&str; 19] = [
    "create_jobs",
    "add_claim_id",
    "durable_exhaustion",
    "decisions",
    "schedules",
    "paused_queues",
    "checks_in_table",
    "flow_control",
    "limited_claim",
    "schedule_specs",
    "counted_starts",
    "backoff_lifts",
    "settled_counts",
    "grouped_claim",
    "fair_group_claims",
    "claim_function",
    "stats_function",
    "ids_without_autoincrement",
    "attempt_history",
];

/// The schema version this build writes and understands, in every store.
pub const SCHEMA_VERSION: i64 = MIGRATION_NAMES.len() as i64;

/// One forward-only schema change of a store: a name of [`MIGRATION_NAMES`] with its
/// version, and the store's own SQL for it, embedded from its folder of `schema/`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

/// A store's migrations: `sql[i]` (its dialect's file for `MIGRATION_NAMES[i]`) with its
/// version and name.
pub(crate) const fn migrations(sql: [&'static str; MIGRATION_NAMES.len()]) -> [Migration; MIGRATION_NAMES.len()] {
    let mut out = [Migration { version: 0, name: "", sql: "" }; MIGRATION_NAMES.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = Migration { version: i as i64 + 1, name: MIGRATION_NAMES[i], sql: sql[i] };
        i += 1;
    }
    out
}

/// A job to insert, with every default resolved above the seam.
#[derive(Debug, Clone, Copy)]
pub struct NewRow<'a> {
    /// Its queue.
    pub queue: &'a str,
    /// Its idempotency key.
    pub key: Option<&'a str>,
    /// Its payload.
    pub payload: &'a [u8],
    /// Higher runs first.
    pub priority: i32,
    /// When it is due.
    pub run_at: i64,
    /// Its attempt budget.
    pub max_attempts: u32,
    /// Now.
    pub created_at: i64,
    /// Its group, if any.
    pub group: Option<&'a str>,
}

/// What a claim handed out, and, when a limit held jobs back, the instant it next opens (by
/// the store's clock), so that a pool sleeps until then instead of a whole poll interval.
#[derive(Debug, Default)]
pub struct Claims {
    /// The claimed jobs, in claim order.
    pub jobs: Vec<Claimed>,
    /// When the limit that held jobs back opens again, if one did and it is known.
    pub limit_opens_at: Option<i64>,
}

impl Claims {
    /// Jobs claimed with no limit in the way.
    pub fn of(jobs: Vec<Claimed>) -> Claims {
        Claims { jobs, limit_opens_at: None }
    }
}

/// What a listing of groups asks for ([`Store::groups`]): the groups of one queue (or of
/// every queue), after a (queue, group) cursor (`("", "")` for the first page).
#[derive(Debug, Clone, Copy)]
pub struct GroupsRequest<'a> {
    /// Only this queue's groups.
    pub queue: Option<&'a str>,
    /// The last (queue, group) of the previous page.
    pub after: (&'a str, &'a str),
    /// At most this many groups.
    pub limit: u32,
}

/// What a claim judged by the store's own clock asks for ([`Store::claim_fresh`]): up to
/// `limit` due jobs of `queue`, each leased to `worker` for `lease_ms` from the claim's
/// instant.
#[derive(Debug, Clone, Copy)]
pub struct FreshClaim<'a> {
    /// The queue to claim from.
    pub queue: &'a str,
    /// Who claims (`Job::worker`).
    pub worker: &'a str,
    /// Each lease's length, in ms.
    pub lease_ms: i64,
    /// How many jobs at most.
    pub limit: u32,
}

impl<'a> FreshClaim<'a> {
    /// The same claim judged at `now`.
    pub fn at(self, now: i64) -> ClaimRequest<'a> {
        let FreshClaim { queue, worker, lease_ms, limit } = self;
        ClaimRequest { queue, worker, now, lease_until: now.saturating_add(lease_ms), limit }
    }
}

/// What a claim asks for ([`Store::claim`]): up to `limit` due jobs of `queue` at `now`, each
/// leased to `worker` until `lease_until`.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    /// The queue to claim from.
    pub queue: &'a str,
    /// Who claims (`Job::worker`).
    pub worker: &'a str,
    /// The instant due jobs and ended leases are judged by.
    pub now: i64,
    /// The end of each claimed job's lease.
    pub lease_until: i64,
    /// How many jobs at most.
    pub limit: u32,
}

/// The claim a transition of one job names, and the instant it is judged by: the settles and
/// renewals of the exact live claim (`*_if_owned`) and the token's transitions in other
/// states (`resume_if_waiting`, `acknowledge_if_exhausted`, `resolve_if_unknown`).
#[derive(Debug, Clone, Copy)]
pub struct TokenAt<'a> {
    /// The exact claim: job id, attempt and claim id.
    pub token: &'a ClaimToken,
    /// Now: a lease must be live after it (`*_if_owned`), and the row records it.
    pub now: i64,
}

/// An operator's change of one job by id ([`Store::cancel_if_active`],
/// [`Store::replay_if_exhausted`], [`Store::acknowledge_job_if_unacknowledged`]).
#[derive(Debug, Clone, Copy)]
pub struct JobDecision<'a> {
    /// The job.
    pub id: JobId,
    /// Now, recorded as the decision's time.
    pub now: i64,
    /// What is recorded on the row.
    pub decided: Decided<'a>,
}

/// An operator's change of one queue ([`Store::pause_queue`], [`Store::unpause_queue`],
/// [`Store::acknowledge_all`]).
#[derive(Debug, Clone, Copy)]
pub struct QueueDecision<'a> {
    /// The queue.
    pub queue: &'a str,
    /// Now, recorded as the decision's time.
    pub now: i64,
    /// What is recorded (on the queue's row, or on each job's).
    pub decided: Decided<'a>,
}

/// One batch of a maintenance pass: up to `limit` rows whose lease, deadline or settlement
/// is at or before `until` (the reapers' now, the prunes' horizon).
#[derive(Debug, Clone, Copy)]
pub struct Batch {
    /// Rows at or before this instant (ms since the epoch).
    pub until: i64,
    /// How many rows at most.
    pub limit: u32,
}

/// One page of a listing in id order: up to `limit` rows with id above `after`.
#[derive(Debug, Clone, Copy)]
pub struct PageRequest {
    /// The last id of the previous page (0 for the first).
    pub after: i64,
    /// How many rows at most.
    pub limit: u32,
}

/// A tick of a periodic job's schedule ([`Store::advance_schedule_if_later`]).
#[derive(Debug, Clone, Copy)]
pub struct ScheduleTick<'a> {
    /// The schedule's name.
    pub name: &'a str,
    /// The tick, in ms since the epoch.
    pub tick: i64,
    /// Now, recorded with it.
    pub now: i64,
    /// The schedule's next tick after now, recorded with it (`None`: it never ticks again).
    pub next: Option<i64>,
}

/// A row's identity and state, as [`Store::identity`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// Its state.
    pub state: JobState,
    /// Its attempt counter.
    pub attempt: u32,
    /// Its latest claim id.
    pub claim_id: Option<ClaimId>,
    /// Its lease's end, while running.
    pub lease_until: Option<i64>,
    /// Its park's deadline, while waiting.
    pub wait_until: Option<i64>,
}

impl Identity {
    /// True when the row still carries `token`'s attempt and claim id.
    pub fn matches(&self, token: &ClaimToken) -> bool {
        self.attempt == token.attempt && self.claim_id == Some(token.claim_id)
    }
}

/// A live lease, as an owned write found it when its transaction began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnedLease {
    /// Its end, in ms since the epoch.
    pub until: i64,
    /// What the claim or the last renewal granted, in ms.
    pub length_ms: i64,
}

/// What an operator's or reconciler's change records on the row (`Job::decision`).
#[derive(Debug, Clone, Copy)]
pub struct Decided<'a> {
    /// What was decided (`"cancel"`, `"resolve complete"`, ...).
    pub action: &'static str,
    /// Who decided, if named.
    pub by: Option<&'a str>,
    /// Why, if given.
    pub note: Option<&'a str>,
}

/// One group of [`Store::stats`]: the rows of one queue in one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsRow {
    /// The queue.
    pub queue: String,
    /// The state.
    pub state: JobState,
    /// For exhausted rows: acknowledged or not.
    pub acknowledged: bool,
    /// How many rows.
    pub count: u64,
    /// The earliest `run_at` of the group.
    pub min_run_at: Option<i64>,
    /// Running rows of the group whose lease ended at or before now.
    pub expired: u64,
}

#[cfg(test)]
mod tests {
    /// Every store has a file for every migration's name, and nothing else, as
    /// `NNNN_name.sql` (each store's `include_str!` list is in the same order).
    #[test]
    fn every_store_has_a_file_for_every_migration() {
        let names: Vec<String> =
            super::MIGRATION_NAMES.iter().enumerate().map(|(i, name)| format!("{:04}_{name}.sql", i + 1)).collect();
        for store in ["sqlite", "postgres"] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema").join(store);
            let mut files: Vec<String> =
                std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
            files.sort();
            assert_eq!(files, names, "schema/{store}");
        }
    }
}
