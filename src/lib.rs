#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod clock;
mod config;
mod conninfo;
mod deprecated;
mod error;
mod job;
mod limits;
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
    #[cfg(feature = "postgres")]
    #[doc = include_str!("../docs/postgres.md")]
    struct Postgres;
}

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{QueueBuilder, Retention};
pub use conninfo::{is_connection_string, redact_connection_string, ConnInfo};
#[allow(deprecated)]
pub use deprecated::*;
/// The diesel version the PostgreSQL store is built with, for closures that receive its
/// [`PgTx`] (feature `postgres`).
#[cfg(feature = "postgres")]
pub use diesel;
pub use error::{BusyCause, Error, LostReason, PoolError, Result};
pub use job::{
    AttemptOutcome, AttemptRecord, Backoff, BackoffScope, ClaimId, ClaimToken, Claimed, Cursor, Decision, Enqueued,
    Exhaustion, GroupPolicy, Job, JobId, JobState, NewJob, Page, Resolution, Retried, RetryPolicy, Snooze,
    UnknownOutcome, DEFAULT_MAX_SNOOZES, MAX_SNOOZE,
};
pub use limits::{Limits, Rate, MAX_LIMIT_COUNT, MAX_RATE_WINDOW};
#[cfg(feature = "schedule")]
pub use maintenance::Scheduler;
pub use maintenance::{BackupOptions, Checkpointer, Maintenance, MaintenanceConfig, MaintenanceReport, Pruner, Reaper};
pub use queue::operator::Operator;
pub use queue::{ListFilter, Queue};
pub use report::{
    BackoffLift, BackupReport, CheckpointReport, CommitStats, GroupBlock, GroupHead, GroupSummary, PausedQueue,
    PruneReport, QueueBackoff, QueueStats, ReapReport, ScheduleRecord, ScheduleReport, Stats, Throttled,
};
/// The rusqlite version fenceq is built with, for closures that receive its `Transaction`.
pub use rusqlite;
#[cfg(feature = "schedule")]
pub use schedule::Schedule;
#[cfg(feature = "postgres")]
#[allow(deprecated)]
pub use store::postgres::options::{
    POSTGRES_CONNECT_TIMEOUT, POSTGRES_IDLE_IN_TRANSACTION_TIMEOUT, POSTGRES_STATEMENT_TIMEOUT,
};
#[cfg(feature = "postgres")]
pub use store::postgres::{PgTx, PostgresOptions, PostgresStore};
pub use store::sqlite::SqliteStore;
#[allow(deprecated)]
pub use store::sqlite::{backup_file, owns_in, schema_version_of};
pub use store::sqlite::{SqliteOptions, Synchronous};
pub use store::SCHEMA_VERSION;
pub use validate::{MAX_BATCH, MAX_ERROR_LEN, MAX_KEY_LEN, MAX_LEASE, MAX_NAME_LEN, NUL_SHOWN_AS};
pub use worker::{
    Attempt, Outcome, PoolCounters, ShutdownReport, WorkerPool, WorkerPoolBuilder, ADAPTIVE_PREFETCH_CEILING,
    MAX_PREFETCH, MAX_ROUNDS_IN_FLIGHT,
};
