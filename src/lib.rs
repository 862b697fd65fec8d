#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod clock;
mod config;
mod conninfo;
mod error;
mod job;
mod maintenance;
mod metrics;
#[cfg(feature = "serde")]
mod payload;
mod queue;
mod report;
#[cfg(feature = "schedule")]
mod schedule;
pub mod store;
mod validate;
mod worker;

/// The code of the pages in `docs/`, compiled and run as doctests like the README's.
#[cfg(doctest)]
mod docs {
    #[doc = include_str!("../docs/guide.md")]
    struct Guide;
    #[doc = include_str!("../docs/guarantees.md")]
    struct Guarantees;
}

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{
    QueueBuilder, Retention, Synchronous, DEFAULT_BUSY_TIMEOUT, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_PAYLOAD,
    DEFAULT_POOL_SIZE, DEFAULT_PRUNE_BATCH, DEFAULT_RETENTION, MAX_KEY_LEN, MAX_LEASE, MAX_NAME_LEN,
};
pub use conninfo::{is_connection_string, redact_connection_string, ConnInfo};
/// The diesel version the PostgreSQL store is built with, for closures that receive its
/// [`PgTx`] (feature `postgres`).
#[cfg(feature = "postgres")]
pub use diesel;
pub use error::{BusyCause, Error, LostReason, PoolError, Result};
pub use job::{
    Backoff, ClaimId, ClaimToken, Claimed, Cursor, Decision, Enqueued, Exhaustion, Job, JobId, JobState, NewJob, Page,
    Resolution, Retried, RetryPolicy, UnknownOutcome,
};
#[cfg(feature = "schedule")]
pub use maintenance::Scheduler;
pub use maintenance::{
    BackupOptions, Checkpointer, Maintenance, MaintenanceConfig, MaintenanceReport, Pruner, Reaper,
    DEFAULT_BACKUP_PAGES_PER_STEP, DEFAULT_BACKUP_TIME_LIMIT, DEFAULT_CHECKPOINT_EVERY, DEFAULT_CHECKPOINT_PATIENCE,
    DEFAULT_PRUNE_EVERY, DEFAULT_REAP_EVERY, DEFAULT_SCHEDULE_EVERY,
};
pub use queue::operator::Operator;
pub use queue::{ListFilter, Queue};
pub use report::{
    BackupReport, CheckpointReport, CommitStats, PausedQueue, PruneReport, QueueStats, ReapReport, ScheduleReport,
    Stats,
};
/// The rusqlite version fenceq is built with, for closures that receive its `Transaction`.
pub use rusqlite;
#[cfg(feature = "schedule")]
pub use schedule::Schedule;
#[cfg(feature = "postgres")]
pub use store::postgres::{
    PgTx, PostgresStore, POSTGRES_CONNECT_TIMEOUT, POSTGRES_IDLE_IN_TRANSACTION_TIMEOUT, POSTGRES_STATEMENT_TIMEOUT,
};
pub use store::sqlite::backup::backup_file;
pub use store::sqlite::migrate::SCHEMA_VERSION;
pub use store::sqlite::{owns_in, schema_version_of, SqliteStore};
pub use validate::{MAX_BATCH, MAX_ERROR_LEN, NUL_SHOWN_AS};
pub use worker::{
    Attempt, Outcome, PoolCounters, ShutdownReport, WorkerPool, WorkerPoolBuilder, ADAPTIVE_PREFETCH_CEILING,
    DEFAULT_POLL_INTERVAL, DEFAULT_POOL_LEASE, DEFAULT_SHUTDOWN_TIMEOUT, DEFAULT_WORKERS, MAX_PREFETCH,
};
