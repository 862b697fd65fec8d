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
pub use builder::{WorkerPoolBuilder, DEFAULT_POLL_INTERVAL, DEFAULT_POOL_LEASE, DEFAULT_WORKERS, MAX_PREFETCH};
pub use counters::PoolCounters;
pub use pool::{ShutdownReport, WorkerPool, DEFAULT_SHUTDOWN_TIMEOUT};
pub use prefetch::ADAPTIVE_PREFETCH_CEILING;
