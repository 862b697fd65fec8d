//! Worker threads: the pool, the attempt a handler sees, and the outcome it returns.

mod attempt;
mod pool;
mod prefetch;

pub use attempt::{Attempt, Outcome};
pub use pool::{
    PoolCounters, ShutdownReport, WorkerPool, WorkerPoolBuilder, DEFAULT_POLL_INTERVAL, DEFAULT_POOL_LEASE,
    DEFAULT_SHUTDOWN_TIMEOUT, DEFAULT_WORKERS, MAX_PREFETCH,
};
pub use prefetch::ADAPTIVE_PREFETCH_CEILING;
