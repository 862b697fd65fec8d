//! The settings every store reads, whatever its own options: what a [`QueueBuilder`]
//! carries beside them, and hands to the store it opens.
//!
//! [`QueueBuilder`]: crate::QueueBuilder

use crate::clock::{Clock, SystemClock};
use std::sync::Arc;
use std::time::Duration;

/// Connections in the store's pool.
pub(crate) const DEFAULT_POOL_SIZE: u32 = 4;
/// How long a write waits for another process's lock.
pub(crate) const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest payload accepted.
pub(crate) const DEFAULT_MAX_PAYLOAD: usize = 1 << 20;
/// Attempts per job unless `NewJob::max_attempts` says otherwise.
pub(crate) const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// The settings every store reads (set through [`QueueBuilder`](crate::QueueBuilder), whose
/// docs give their defaults); a store's [`StoreOptions::open_store`](super::StoreOptions)
/// receives them, already checked.
#[derive(Debug, Clone)]
pub struct Settings {
    pub(crate) pool_size: u32,
    pub(crate) busy_timeout: Duration,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) max_payload: usize,
    pub(crate) max_attempts: u32,
    pub(crate) read_only: bool,
    pub(crate) upgrade: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            pool_size: DEFAULT_POOL_SIZE,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            clock: Arc::new(SystemClock),
            max_payload: DEFAULT_MAX_PAYLOAD,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            read_only: false,
            upgrade: true,
        }
    }
}
