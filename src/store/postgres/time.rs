//! Which clock a PostgreSQL queue measures time by.
//!
//! Several hosts share one database, and each host has a clock of its own. If each judged
//! leases by its own clock, a host whose clock runs ten minutes fast would see every other
//! host's live lease as expired and take its job, and a host ten minutes slow would keep
//! renewing and settling leases that ended long ago. So, on PostgreSQL, a queue whose clock
//! is the host's wall clock ([`Clock::is_host_clock`]: the default [`SystemClock`](crate::SystemClock))
//! measures every lease, `run_at`, deadline and retention horizon by **the database
//! server's clock**, for every host. An injected clock (a [`ManualClock`](crate::ManualClock),
//! tests only) is used as it is, as on SQLite, and must then be the same clock for every
//! handle on the database.
//!
//! ## How
//!
//! Every time above the seam comes from [`Store::now`](crate::store::Store::now) of the
//! transaction it is used in. The store reads the server's clock ([`SERVER_NOW`]) and keeps
//! the reading as its *anchor*, beside the instant the reply arrived on this host's monotonic
//! clock ([`std::time::Instant`], which no wall-clock step can move). A transaction's time is
//! the anchor plus the time elapsed since it on that monotonic clock. The first transaction
//! that needs the time after the anchor is [`ANCHOR_FOR`] old reads the server's clock again
//! and moves the anchor. Every time the transaction's statements get, and everything computed
//! from one (a lease's end, a retry's `run_at`, the lease extension of an owned write's
//! commit), is therefore the server's clock, and the values handed back
//! (`Claimed::lease_until`, `renew`'s new end, `Job` fields) are the server's as well: nothing
//! mixes the host's wall clock with the server's.
//!
//! The read is `clock_timestamp()`, the instant the statement reads it, not `now()`:
//! `now()` is the start of the transaction, and a transaction can last (an owned write's
//! closure, several callers' work sharing one transaction). Judged at its start, a long
//! transaction would still find live a lease that ended while it ran, and would extend the
//! owner's lease from a moment already past. The monotonic extension keeps each later use
//! at its own instant without another round trip. The value is rounded down to the
//! millisecond (after adding the host's elapsed microseconds), so the time fenceq uses
//! never runs ahead of the server's clock by more than the drift below: a lease is never
//! reclaimed before the server's clock says it ended. (It lags by the reading's reply time,
//! from the server's read to the reply's arrival: tens of microseconds on one machine, more
//! over a network or on a loaded host. A write judged live in that window commits as if it
//! had been a moment earlier, as on SQLite; the row lock and the claim id still decide who
//! owns the job.) The host's monotonic clock may drift from the server's by its rate error (parts
//! per million: microseconds over the anchor's one second). A step of the server's wall
//! clock (an NTP correction) reaches fenceq with the next read, at most [`ANCHOR_FOR`] late.
//!
//! The cost is one round trip per store and [`ANCHOR_FOR`], on whichever connection needs the
//! time first, instead of one per transaction: an enqueue of one job is one round trip (its
//! `INSERT`), as a raw SQL loop's is.
//!
//! Claims are the exception: a claim reads the server's clock afresh
//! ([`Store::claim_fresh`](crate::store::Store::claim_fresh)). Each process's extended reading
//! trails the server's clock by its own reading's reply time, so a job another process made
//! due "now" could look a moment early to a claim judged by an anchor that trails more, and
//! the pool that process's `NOTIFY` woke would find nothing and sleep until its next poll.
//! Read at the claim, the server's clock is past every commit the claim can see, so a job
//! made due before is due. The claim's statement (`CLAIM`) reads the clock itself, after its
//! snapshot: no round trip of its own. That read is not kept as the anchor: its reply comes
//! after the claim's execution and commit (a WAL flush, perhaps a synchronous standby's), so
//! extended from its arrival it would trail the server's clock by all of that, where the
//! store's own read ([`SERVER_NOW`]) trails by a bare round trip. A queue with limits reads the
//! clock in a round trip before its limited claim.
//!
//! Outside any transaction ([`Queue::now_ms`](crate::Queue::now_ms), and the advisory
//! [`Attempt::owner_lost`](crate::Attempt::owner_lost)) the store offers an estimate without
//! a round trip: the host's clock plus the offset between the server's clock and the host's
//! as last measured by any of the store's transactions.

use super::error::PgContext;
use super::prepared::Prepared;
use super::PgTx;
use crate::clock::Clock;
use crate::error::Result;
use diesel::sql_types::BigInt;
use diesel::{QueryableByName, RunQueryDsl};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the store extends one reading of the server's clock on the host's monotonic
/// clock before it reads the server's clock again.
pub(crate) const ANCHOR_FOR: Duration = Duration::from_secs(1);

stmt! {
    /// The server's clock in whole microseconds since the epoch, rounded down:
    /// `clock_timestamp()` (the instant of the read), never `now()` (the transaction's start).
    /// Microseconds, so that extending a reading does not add a millisecond's rounding to its lag.
    SERVER_NOW = "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS n";
}

#[derive(QueryableByName)]
struct Us {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The reading of the server's clock (µs) a transaction uses, and when its reply arrived (on
/// this host's monotonic clock).
#[derive(Debug, Default)]
pub(crate) struct ServerTime {
    read: Cell<Option<(i64, Instant)>>,
}

/// What the store knows of the server's clock, shared by every transaction of the store:
/// the last reading (the anchor) and the server's clock minus the host's wall clock, in ms,
/// as measured by that reading.
#[derive(Debug, Clone)]
pub(crate) struct ServerClock(Arc<Known>);

#[derive(Debug)]
struct Known {
    offset: AtomicI64,
    /// The last reading of the server's clock (µs) and when its reply arrived.
    anchor: parking_lot::Mutex<Option<(i64, Instant)>>,
}

/// Marks an offset that was never measured (no real offset is this far off).
const UNMEASURED: i64 = i64::MIN;

impl ServerClock {
    pub(crate) fn unmeasured() -> ServerClock {
        ServerClock(Arc::new(Known { offset: AtomicI64::new(UNMEASURED), anchor: parking_lot::Mutex::new(None) }))
    }

    /// A reading of the server's clock (µs) that arrived at `at`, when the host's wall clock
    /// said `host_ms`.
    fn record(&self, server_us: i64, at: Instant, host_ms: i64) {
        self.0.offset.store((server_us / 1000).saturating_sub(host_ms), Ordering::Relaxed);
        *self.0.anchor.lock() = Some((server_us, at));
    }

    /// The anchor, while it is younger than [`ANCHOR_FOR`].
    fn anchor(&self) -> Option<(i64, Instant)> {
        self.0.anchor.lock().filter(|(_, at)| at.elapsed() < ANCHOR_FOR)
    }

    /// The host's clock moved by the offset, or the host's clock until it was measured.
    pub(crate) fn estimate(&self, clock: &dyn Clock) -> i64 {
        let host = clock.now_ms();
        match self.0.offset.load(Ordering::Relaxed) {
            UNMEASURED => host,
            offset => host.saturating_add(offset),
        }
    }
}

/// [`Store::now`](crate::store::Store::now) on PostgreSQL: the injected clock as it is, or
/// the server's clock (the store's anchor, read again once it is [`ANCHOR_FOR`] old, moved by
/// the host's monotonic clock). A transaction keeps the anchor it started with, so its times
/// only move forward.
pub(crate) fn now(tx: &PgTx, clock: &dyn Clock) -> Result<i64> {
    if !clock.is_host_clock() {
        return Ok(clock.now_ms());
    }
    let read = match tx.time.read.get().or_else(|| tx.server_clock.as_ref().and_then(ServerClock::anchor)) {
        Some(read) => read,
        None => read_server_clock(tx, clock)?,
    };
    tx.time.read.set(Some(read));
    Ok(extended_ms(read))
}

/// [`Store::fresh_now`](crate::store::Store::fresh_now) on PostgreSQL: the injected clock as
/// it is, or the server's clock read by this call (a claim's time: see the module docs),
/// which becomes the transaction's reading and the store's anchor.
pub(crate) fn fresh_now(tx: &PgTx, clock: &dyn Clock) -> Result<i64> {
    if !clock.is_host_clock() {
        return Ok(clock.now_ms());
    }
    let read = read_server_clock(tx, clock)?;
    tx.time.read.set(Some(read));
    Ok(extended_ms(read))
}

/// Reads the server's clock (µs) on `tx`'s connection, and records it as the store's anchor.
fn read_server_clock(tx: &PgTx, clock: &dyn Clock) -> Result<(i64, Instant)> {
    let server_us = tx.with(|conn| Prepared::new(SERVER_NOW.sql).get_result::<Us>(conn).pg(SERVER_NOW))?.n;
    // Anchored after the reply: the server read its clock before this instant, so the
    // extrapolation never runs ahead of it.
    let at = Instant::now();
    if let Some(known) = &tx.server_clock {
        known.record(server_us, at, clock.now_ms());
    }
    Ok((server_us, at))
}

/// A reading moved on by the host's monotonic time since it, in whole ms.
fn extended_ms((server_us, at): (i64, Instant)) -> i64 {
    server_us.saturating_add(elapsed_us(at)).div_euclid(1000)
}

/// Whole µs elapsed since `at`, rounded down.
fn elapsed_us(at: Instant) -> i64 {
    i64::try_from(at.elapsed().as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn an_unmeasured_offset_is_the_host_clock_and_a_measured_one_moves_it() {
        let clock = ManualClock::new(10_000);
        let offset = ServerClock::unmeasured();
        assert_eq!(offset.estimate(&clock), 10_000);
        offset.record(9_400_000, Instant::now(), 10_000);
        assert_eq!(offset.estimate(&clock), 9_400);
        clock.advance(std::time::Duration::from_millis(5));
        assert_eq!(offset.estimate(&clock), 9_405);
    }
}
