//! Rate and concurrency limits of a queue, held by the store: stored in the database (so every
//! process and handle obeys the same limits, and they survive restarts) and checked by the
//! claim itself, in the claim's own transaction, against the recorded start of every attempt.
//!
//! The guarantee: in any interval of length T measured by the store's clock (PostgreSQL: the
//! server's), at most N attempts of the limit's key (the queue, or one group of it) start. A
//! job held back by a limit stays `pending`; waiting for a limit is not an attempt and never
//! an error.

use crate::error::{Error, Result};
use std::fmt;
use std::time::Duration;

/// The longest window of a rate: one day.
pub const MAX_RATE_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The largest count of a limit.
pub const MAX_LIMIT_COUNT: u32 = 1_000_000;

/// At most `count` attempts start in any window of length `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    /// How many starts the window allows: 1..=1,000,000.
    pub count: u32,
    /// The window: 1 ms to a day, whole milliseconds.
    pub per: Duration,
}

impl Rate {
    /// `count` starts per `per`.
    pub fn new(count: u32, per: Duration) -> Rate {
        Rate { count, per }
    }

    /// A rate written as the CLI takes it: `COUNT/WINDOW`, the window a number and a unit of
    /// `ms`, `s`, `m` or `h` (`30/1s`, `20/60s`, `1000/1m`; a bare number is seconds).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for anything else, or a count or window out of range (a count of 0, a
    /// window of 0 or longer than a day).
    pub fn parse(text: &str) -> Result<Rate> {
        let bad = |why: &str| Error::invalid("rate", format!("{text:?}: {why} (write COUNT/WINDOW, as 30/1s)"));
        let (count, window) = text.trim().split_once('/').ok_or_else(|| bad("no `/`"))?;
        let count: u32 = count.trim().parse().map_err(|_| bad("the count is not a whole number"))?;
        let window = window.trim();
        let digits = window.find(|c: char| !c.is_ascii_digit()).unwrap_or(window.len());
        let (number, unit) = window.split_at(digits);
        let number: u64 = number.parse().map_err(|_| bad("the window does not start with a whole number"))?;
        let unit_ms: u64 = match unit {
            "ms" => 1,
            "" | "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => return Err(bad("the window's unit is not ms, s, m or h")),
        };
        let per = Duration::from_millis(number.checked_mul(unit_ms).ok_or_else(|| bad("the window is too long"))?);
        let rate = Rate { count, per };
        rate.check("rate")?;
        Ok(rate)
    }

    /// The window in ms.
    pub(crate) fn window_ms(self) -> i64 {
        i64::try_from(self.per.as_millis()).unwrap_or(i64::MAX)
    }

    fn check(self, what: &'static str) -> Result<()> {
        check_count(what, self.count)?;
        if self.per.is_zero() || self.per > MAX_RATE_WINDOW || !self.per.subsec_nanos().is_multiple_of(1_000_000) {
            let ms = self.per.as_secs_f64() * 1000.0;
            return Err(Error::invalid(
                what,
                format!("a window of {ms} ms is not a whole number of ms from 1 ms to a day"),
            ));
        }
        Ok(())
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.per.as_millis();
        match ms {
            _ if ms.is_multiple_of(3_600_000) => write!(f, "{}/{}h", self.count, ms / 3_600_000),
            _ if ms.is_multiple_of(60_000) && ms >= 60_000 => write!(f, "{}/{}m", self.count, ms / 60_000),
            _ if ms.is_multiple_of(1_000) => write!(f, "{}/{}s", self.count, ms / 1_000),
            _ => write!(f, "{}/{}ms", self.count, ms),
        }
    }
}

fn check_count(what: &'static str, count: u32) -> Result<()> {
    if count == 0 || count > MAX_LIMIT_COUNT {
        return Err(Error::invalid(what, format!("a count of {count} is not in 1..={MAX_LIMIT_COUNT}")));
    }
    Ok(())
}

/// Every limit of one queue ([`Queue::set_limits`](crate::Queue::set_limits)); empty by
/// default (no limit).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    /// At most so many claims of the queue in any window.
    pub rate: Option<Rate>,
    /// At most so many claims of one group in any window; several may be set (with
    /// different windows), and all hold. Jobs without a group are not counted.
    pub group_rates: Vec<Rate>,
    /// At most so many running attempts of the queue, across every process.
    pub max_running: Option<u32>,
}

impl Limits {
    /// No limit at all.
    pub fn is_empty(&self) -> bool {
        self.rate.is_none() && self.group_rates.is_empty() && self.max_running.is_none()
    }

    /// Refuses a count or window out of range, and two group rates with the same window.
    pub(crate) fn check(&self) -> Result<()> {
        if let Some(rate) = self.rate {
            rate.check("rate")?;
        }
        for (i, rate) in self.group_rates.iter().enumerate() {
            rate.check("group rate")?;
            if self.group_rates[..i].iter().any(|r| r.per == rate.per) {
                return Err(Error::invalid("group rate", format!("two group rates with the window {:?}", rate.per)));
            }
        }
        if let Some(n) = self.max_running {
            check_count("running limit", n)?;
        }
        Ok(())
    }

    /// The longest window of its rates in ms (0 without a rate).
    pub(crate) fn longest_window_ms(&self) -> i64 {
        self.rate.iter().chain(&self.group_rates).map(|r| r.window_ms()).max().unwrap_or(0)
    }

    /// Whether claims must record their starts (a rate of the queue or of its groups).
    pub(crate) fn counts_starts(&self) -> bool {
        self.rate.is_some() || !self.group_rates.is_empty()
    }
}

impl fmt::Display for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return write!(f, "no limits");
        }
        let mut parts = Vec::new();
        if let Some(rate) = self.rate {
            parts.push(format!("rate {rate}"));
        }
        for rate in &self.group_rates {
            parts.push(format!("group rate {rate}"));
        }
        if let Some(n) = self.max_running {
            parts.push(format!("at most {n} running"));
        }
        write!(f, "{}", parts.join(", "))
    }
}

/// The instant a full window opens again, from what [`Store::window_starts`] read of it (how
/// many starts it holds, counted up to the rate's count, and the count-th latest): that start
/// must leave the window before one more may begin, and it leaves `per` after it began.
/// `None` while the window has room.
///
/// [`Store::window_starts`]: crate::store::Store::window_starts
pub(crate) fn opens_at(starts: u64, countth_latest: Option<i64>, rate: Rate) -> Option<i64> {
    if starts < u64::from(rate.count) {
        return None;
    }
    countth_latest.map(|at| at.saturating_add(rate.window_ms()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print_as_the_cli_writes_them() {
        assert_eq!(Rate::parse("30/1s").unwrap(), Rate::new(30, Duration::from_secs(1)));
        assert_eq!(Rate::parse("20/60s").unwrap().to_string(), "20/1m");
        assert_eq!(Rate::parse(" 1000 / 250ms ").unwrap(), Rate::new(1000, Duration::from_millis(250)));
        assert_eq!(Rate::parse("5/2h").unwrap().to_string(), "5/2h");
        assert_eq!(Rate::parse("1/24h").unwrap().per, MAX_RATE_WINDOW);
        for bad in
            ["30/0s", "0/1s", "abc", "30", "30/1x", "30/s", "-1/1s", "30/25h", "30/99999999999999999999h", "2000000/1s"]
        {
            assert!(matches!(Rate::parse(bad), Err(Error::InvalidInput { .. })), "{bad}");
        }
    }

    #[test]
    fn a_window_opens_when_its_countth_latest_start_leaves_it() {
        let rate = Rate::new(2, Duration::from_millis(100));
        assert_eq!(opens_at(0, None, rate), None);
        assert_eq!(opens_at(1, None, rate), None);
        assert_eq!(opens_at(2, Some(10), rate), Some(110));
        assert_eq!(opens_at(2, Some(50), rate), Some(150));
    }

    #[test]
    fn limits_refuse_bad_counts_windows_and_duplicate_group_windows() {
        let second = Duration::from_secs(1);
        assert!(Limits { max_running: Some(0), ..Limits::default() }.check().is_err());
        assert!(Limits { rate: Some(Rate::new(1, Duration::ZERO)), ..Limits::default() }.check().is_err());
        assert!(Limits { rate: Some(Rate::new(1, Duration::from_micros(1500))), ..Limits::default() }.check().is_err());
        let twice = Limits { group_rates: vec![Rate::new(1, second), Rate::new(5, second)], ..Limits::default() };
        assert!(twice.check().is_err());
        let fine = Limits {
            rate: Some(Rate::new(30, second)),
            group_rates: vec![Rate::new(1, second), Rate::new(20, 60 * second)],
            max_running: Some(8),
        };
        fine.check().unwrap();
        assert_eq!(fine.to_string(), "rate 30/1s, group rate 1/1s, group rate 20/1m, at most 8 running");
        assert_eq!(fine.longest_window_ms(), 60_000);
    }
}
