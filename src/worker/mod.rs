//! Worker threads: the pool, the attempt a handler sees, and the outcome it returns.

mod attempt;
mod builder;
mod counters;
mod dispatch;
mod execute;
mod heartbeat;
mod pool;
mod prefetch;
mod settle;
mod shared;

pub use attempt::{Attempt, Outcome};
pub use builder::{WorkerPoolBuilder, MAX_PREFETCH, MAX_ROUNDS_IN_FLIGHT};
pub(crate) use builder::{DEFAULT_POLL_INTERVAL, DEFAULT_POOL_LEASE, DEFAULT_WORKERS};
pub use counters::PoolCounters;
pub(crate) use pool::DEFAULT_SHUTDOWN_TIMEOUT;
pub use pool::{ShutdownReport, WorkerPool};
pub use prefetch::ADAPTIVE_PREFETCH_CEILING;
