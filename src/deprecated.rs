//! Names of earlier releases, kept so that code written against them still builds. The
//! defaults are written in the docs of what they configure, under `## Defaults`.

use std::time::Duration;

/// Reader connections in the pool: 4.
#[deprecated(since = "0.1.0", note = "see `QueueBuilder`'s Defaults")]
pub const DEFAULT_POOL_SIZE: u32 = crate::store::settings::DEFAULT_POOL_SIZE;
/// How long a write waits for another process's write lock: 5 seconds.
#[deprecated(since = "0.1.0", note = "see `QueueBuilder`'s Defaults")]
pub const DEFAULT_BUSY_TIMEOUT: Duration = crate::store::settings::DEFAULT_BUSY_TIMEOUT;
/// Largest payload accepted: 1 MiB.
#[deprecated(since = "0.1.0", note = "see `QueueBuilder`'s Defaults")]
pub const DEFAULT_MAX_PAYLOAD: usize = crate::store::settings::DEFAULT_MAX_PAYLOAD;
/// Attempts per job unless `NewJob::max_attempts` says otherwise: 5.
#[deprecated(since = "0.1.0", note = "see `QueueBuilder`'s Defaults")]
pub const DEFAULT_MAX_ATTEMPTS: u32 = crate::store::settings::DEFAULT_MAX_ATTEMPTS;
/// How long terminal rows are kept before pruning: 7 days.
#[deprecated(since = "0.1.0", note = "see `Retention`'s Defaults")]
pub const DEFAULT_RETENTION: Duration = crate::config::DEFAULT_RETENTION;
/// Rows deleted per prune transaction: 1,000.
#[deprecated(since = "0.1.0", note = "see `Retention`'s Defaults")]
pub const DEFAULT_PRUNE_BATCH: u32 = crate::config::DEFAULT_PRUNE_BATCH;
/// How often the reaper runs: 1 minute.
#[deprecated(since = "0.1.0", note = "see `MaintenanceConfig`'s Defaults")]
pub const DEFAULT_REAP_EVERY: Duration = crate::maintenance::DEFAULT_REAP_EVERY;
/// How often the WAL is checkpointed: 5 seconds.
#[deprecated(since = "0.1.0", note = "see `MaintenanceConfig`'s Defaults")]
pub const DEFAULT_CHECKPOINT_EVERY: Duration = crate::maintenance::DEFAULT_CHECKPOINT_EVERY;
/// How often retention runs: 1 hour.
#[deprecated(since = "0.1.0", note = "see `MaintenanceConfig`'s Defaults")]
pub const DEFAULT_PRUNE_EVERY: Duration = crate::maintenance::DEFAULT_PRUNE_EVERY;
/// How often periodic jobs' due ticks are enqueued: 5 seconds.
#[deprecated(since = "0.1.0", note = "see `MaintenanceConfig`'s Defaults")]
pub const DEFAULT_SCHEDULE_EVERY: Duration = crate::maintenance::DEFAULT_SCHEDULE_EVERY;
/// Pages copied per backup step: 1,024.
#[deprecated(since = "0.1.0", note = "see `BackupOptions`'s Defaults")]
pub const DEFAULT_BACKUP_PAGES_PER_STEP: u32 = crate::maintenance::DEFAULT_BACKUP_PAGES_PER_STEP;
/// How long a backup may take: 10 minutes.
#[deprecated(since = "0.1.0", note = "see `BackupOptions`'s Defaults")]
pub const DEFAULT_BACKUP_TIME_LIMIT: Duration = crate::maintenance::DEFAULT_BACKUP_TIME_LIMIT;
/// How long a checkpoint waits for readers: 500 ms.
#[deprecated(since = "0.1.0", note = "see `Checkpointer`'s Defaults")]
pub const DEFAULT_CHECKPOINT_PATIENCE: Duration = crate::maintenance::DEFAULT_CHECKPOINT_PATIENCE;
/// Worker threads per pool: 4.
#[deprecated(since = "0.1.0", note = "see `WorkerPoolBuilder`'s Defaults")]
pub const DEFAULT_WORKERS: usize = crate::worker::DEFAULT_WORKERS;
/// Lease per claim: 30 seconds.
#[deprecated(since = "0.1.0", note = "see `WorkerPoolBuilder`'s Defaults")]
pub const DEFAULT_POOL_LEASE: Duration = crate::worker::DEFAULT_POOL_LEASE;
/// Idle poll interval: 1 second.
#[deprecated(since = "0.1.0", note = "see `WorkerPoolBuilder`'s Defaults")]
pub const DEFAULT_POLL_INTERVAL: Duration = crate::worker::DEFAULT_POLL_INTERVAL;
/// How long a pool's shutdown waits for running handlers: 10 seconds.
#[deprecated(since = "0.1.0", note = "see `WorkerPoolBuilder`'s Defaults")]
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = crate::worker::DEFAULT_SHUTDOWN_TIMEOUT;
