//! The reference model's limits: what a queue's stored [`Limits`] are, which jobs a claim of a
//! queue with limits takes (and which group heads it defers), the log of starts the store keeps
//! for its rates, what `stats` reports as throttled, and the guarantee itself checked on the
//! model's history of starts.
//!
//! The claim follows the store's `claim_limited` (`src/store/limits.rs`) step by step, from
//! what the model can see of the store: the running limit and the queue's rate give how many
//! may start now; the claimable jobs are read in claim order; a candidate whose group has spent
//! one of its rates is passed over, and deferred (a pending one's `run_at` moved on to the
//! instant the rate opens, never back) so that later claims do not read it again; the chosen
//! jobs start at the claim's instant, reclaims of expired leases included, and the job held
//! behind each of them in its group is deferred until the rates the start spent open. A
//! window of a rate of length T ending at `now` holds the starts recorded after `now - T`: a
//! start at `t` occupies the half-open `[t, t + T)`. The running limit counts every running
//! attempt, expired leases included (their workers may still be at work): a queue at its
//! running limit reclaims no expired lease until a settle or the reaper frees a place.

use super::reference::{dur_ms, Model};
use crate::fixture::most_in_window;
use fenceq::{JobId, JobState, Limits, Rate, Throttled};
use std::collections::BTreeMap;

/// How many more candidates than it may claim the store's limited claim reads
/// (`EXTRA_CANDIDATES` in `src/store/limits.rs`, private there, so mirrored here): an
/// implementation choice the model cannot see through the API. The model reads as many, so
/// that it decides as the store does; with at most [`MAX_LIVE_JOBS`](super::MAX_LIVE_JOBS) rows
/// the read is never cut short in the model's histories, and no history can tell the value.
pub(super) const EXTRA_CANDIDATES: u32 = 32;

/// One recorded start: the claim of one attempt of a queue with a rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// The job's queue.
    pub queue: String,
    /// The job's group, if it has one.
    pub group: Option<String>,
    /// The claim's instant (the store's clock).
    pub at: i64,
    /// The job claimed.
    pub job: JobId,
}

/// Which rate of a queue: its own, or its groups' (each group on its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    Queue,
    Group,
}

/// A rate of one queue, as a key: (queue, scope, count, window ms).
type RateKey = (String, Scope, u32, i64);

/// The model's limits: what the store holds and counts.
#[derive(Debug, Clone, Default)]
pub struct LimitsModel {
    /// Each queue's stored limits (only non-empty ones), its group rates in window order: the
    /// order in which the store reads them back, whatever order they were set in.
    pub stored: BTreeMap<String, Limits>,
    /// The starts the store keeps: recorded by the claims of a queue with a rate, and forgotten
    /// by them once older than the queue's longest window. Neither setting nor clearing limits
    /// touches them, so a rate set again counts the starts still kept.
    pub kept: Vec<Start>,
    /// Every start ever recorded, in claim order: what the guarantee is checked on.
    pub history: Vec<Start>,
    /// For each rate in force, the first start of `history` since which it has been: set
    /// with those very count and window, and the clock never stepped back.
    since: BTreeMap<RateKey, usize>,
    /// Group heads the claim being decided deferred.
    deferred: usize,
}

/// What a claim takes, and how limits shaped it (for [`RunStats`](super::RunStats)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Taken {
    /// The ids, in claim order.
    pub(super) ids: Vec<JobId>,
    /// The queue has limits.
    pub(super) limited: bool,
    /// The limits held back a job the same claim without them would take.
    pub(super) held_back: bool,
    /// Pending group heads deferred until their group's rate opens.
    pub(super) deferred: usize,
    /// The instant the claim starts its jobs at (their leases run from it): the claim's own,
    /// or the queue's latest kept start when that is later (the store's `not_before`).
    pub(super) at: i64,
}

fn keys(queue: &str, limits: &Limits) -> Vec<RateKey> {
    let key = |scope, rate: &Rate| (queue.to_string(), scope, rate.count, dur_ms(rate.per));
    limits
        .rate
        .iter()
        .map(|r| key(Scope::Queue, r))
        .chain(limits.group_rates.iter().map(|r| key(Scope::Group, r)))
        .collect()
}

impl LimitsModel {
    /// `queue`'s limits as `Queue::limits` returns them (empty when it has none).
    pub fn of(&self, queue: &str) -> Limits {
        self.stored.get(queue).cloned().unwrap_or_default()
    }

    /// Every queue with limits, by name, as `Queue::all_limits` returns them.
    pub fn all(&self) -> Vec<(String, Limits)> {
        self.stored.iter().map(|(q, l)| (q.clone(), l.clone())).collect()
    }

    /// Replaces `queue`'s limits (valid ones: the runner checked the store took them).
    pub(super) fn set(&mut self, queue: &str, limits: &Limits) {
        let mut limits = limits.clone();
        limits.group_rates.sort_by_key(|r| r.per);
        let now_in_force = keys(queue, &limits);
        let start = self.history.len();
        // A rate set again unchanged keeps its history; a new or changed one starts afresh.
        self.since.retain(|key, _| key.0 != queue || now_in_force.contains(key));
        for key in now_in_force {
            self.since.entry(key).or_insert(start);
        }
        if limits.is_empty() {
            self.stored.remove(queue);
        } else {
            self.stored.insert(queue.to_string(), limits);
        }
    }

    /// The clock stepped back. The guarantee is stated on the store's clock, and a clock that
    /// steps back measures some intervals twice: a claim at a later instant forgot the starts
    /// older than its longest window, and a window read after the step back cannot count
    /// them. So the guarantee is checked within each stretch of the history in which the clock
    /// never stepped back, from the next start on. (Within a stretch nothing a window needs is
    /// ever forgotten: each claim forgets only what is older than every rate's window.)
    pub(super) fn clock_stepped_back(&mut self) {
        let start = self.history.len();
        for since in self.since.values_mut() {
            *since = start;
        }
    }

    /// The window of `rate` ending at `now`, of `queue` (of one group of it): how many starts
    /// it holds, counted up to the rate's count, and when it opens if it is full (its
    /// count-th latest start leaves it). Starts recorded after `now` (before the clock stepped
    /// back) are in it, as they are in the store's.
    fn window(&self, queue: &str, group: Option<&str>, rate: Rate, now: i64) -> (u64, Option<i64>) {
        let since = now.saturating_sub(dur_ms(rate.per));
        let mut ats: Vec<i64> = self
            .kept
            .iter()
            .filter(|s| s.queue == queue && group.is_none_or(|g| s.group.as_deref() == Some(g)) && s.at > since)
            .map(|s| s.at)
            .collect();
        ats.sort_unstable_by(|a, b| b.cmp(a));
        let count = rate.count as usize;
        if ats.len() < count {
            return (ats.len() as u64, None);
        }
        (count as u64, Some(ats[count - 1].saturating_add(dur_ms(rate.per))))
    }

    /// The latest start of `queue` kept, if any.
    fn latest_start(&self, queue: &str) -> Option<i64> {
        self.kept.iter().filter(|s| s.queue == queue).map(|s| s.at).max()
    }

    /// The groups of `queue` whose `rate` is spent in the window ending at `now`.
    fn spent_groups(&self, queue: &str, rate: Rate, now: i64) -> Vec<String> {
        let since = now.saturating_sub(dur_ms(rate.per));
        let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
        for s in self.kept.iter().filter(|s| s.queue == queue && s.at > since) {
            if let Some(group) = &s.group {
                *counts.entry(group).or_default() += 1;
            }
        }
        counts.into_iter().filter(|(_, n)| *n >= rate.count).map(|(g, _)| g.to_string()).collect()
    }

    /// When `group`'s spent rate opens (the latest, when several are spent), or `None` while
    /// every group rate has room.
    fn group_opens_at(&self, queue: &str, group: &str, limits: &Limits, now: i64) -> Option<i64> {
        limits.group_rates.iter().filter_map(|rate| self.window(queue, Some(group), *rate, now).1).max()
    }

    /// Records the starts of a limited claim at `now` and forgets the queue's starts at or
    /// before `now` less its longest window, as the store's claim does (only a queue with a
    /// rate records, and only a claim that took a job).
    fn record(&mut self, queue: &str, claimed: &[(JobId, Option<String>)], now: i64) {
        let Some(limits) = self.stored.get(queue) else { return };
        let counts_starts = limits.rate.is_some() || !limits.group_rates.is_empty();
        if !counts_starts || claimed.is_empty() {
            return;
        }
        let longest = limits.rate.iter().chain(&limits.group_rates).map(|r| dur_ms(r.per)).max().unwrap_or(0);
        for (job, group) in claimed {
            let start = Start { queue: queue.to_string(), group: group.clone(), at: now, job: *job };
            self.kept.push(start.clone());
            self.history.push(start);
        }
        let before = now.saturating_sub(longest);
        self.kept.retain(|s| s.queue != queue || s.at > before);
    }

    /// The guarantee on the model's own history: for every rate in force, in any half-open
    /// window `[t, t + T)` at most `count` starts of its key (the queue, or each one group of
    /// it) since the rate was set as it is and the clock last stepped back.
    pub(super) fn check_guarantee(&self) -> Result<(), String> {
        for ((queue, scope, count, window), &since) in &self.since {
            let starts: Vec<&Start> = self.history[since..].iter().filter(|s| &s.queue == queue).collect();
            let mut keys: BTreeMap<Option<&str>, Vec<i64>> = BTreeMap::new();
            for s in starts {
                match scope {
                    Scope::Queue => keys.entry(None).or_default().push(s.at),
                    Scope::Group => {
                        if let Some(g) = &s.group {
                            keys.entry(Some(g.as_str())).or_default().push(s.at);
                        }
                    }
                }
            }
            for (group, mut times) in keys {
                let most = most_in_window(&mut times, *window);
                if most > *count as usize {
                    return Err(format!(
                        "limits: {most} starts of queue {queue:?}{} in one window of {window} ms, over the rate's \
                         {count}",
                        group.map(|g| format!(" group {g:?}")).unwrap_or_default()
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Model {
    /// The ids a claim of `limit` on `queue` takes at `now`, in claim order: [`Model::claimable`]
    /// for a queue without limits; for one with limits, the store's limited claim, which also
    /// defers the group heads whose group has spent a rate (applied here).
    pub(super) fn take_claim(&mut self, queue: &str, limit: u32, now: i64) -> Taken {
        let Some(limits) = self.limits.stored.get(queue).cloned() else {
            return Taken {
                ids: self.claimable(queue, limit, now),
                limited: false,
                held_back: false,
                deferred: 0,
                at: now,
            };
        };
        let at = match limits.rate.is_some() || !limits.group_rates.is_empty() {
            true => self.limits.latest_start(queue).map_or(now, |latest| latest.max(now)),
            false => now,
        };
        let unlimited = self.claimable(queue, limit, at);
        let ids = self.limited_claim(queue, &limits, limit, at);
        let deferred = self.limits.deferred;
        self.limits.deferred = 0;
        Taken { held_back: ids.len() < unlimited.len(), ids, limited: true, deferred, at }
    }

    /// The store's `claim_limited`, on the model's rows.
    fn limited_claim(&mut self, queue: &str, limits: &Limits, limit: u32, now: i64) -> Vec<JobId> {
        let mut allowed = limit;
        if let Some(max) = limits.max_running {
            let running = self.jobs.values().filter(|j| j.queue == queue && j.state == JobState::Running).count();
            allowed = allowed.min(max.saturating_sub(running as u32));
        }
        // The store skips counting the window while it keeps fewer starts than the rate leaves
        // room for (`starts_kept`); the window is among those starts, so counting it always
        // decides the same.
        if let Some(rate) = limits.rate {
            let (starts, _) = self.limits.window(queue, None, rate, now);
            allowed = allowed.min(u32::try_from(u64::from(rate.count).saturating_sub(starts)).unwrap_or(u32::MAX));
        }
        if allowed == 0 {
            return Vec::new();
        }
        let mut chosen = Vec::new();
        for id in self.claimable(queue, allowed.saturating_add(EXTRA_CANDIDATES), now) {
            if chosen.len() == allowed as usize {
                break;
            }
            let group = self.jobs[&id].group.clone();
            let spent = match &group {
                Some(group) if !limits.group_rates.is_empty() => self.limits.group_opens_at(queue, group, limits, now),
                _ => None,
            };
            match spent {
                None => chosen.push(id),
                Some(at) => {
                    let j = self.job_mut(id);
                    if j.state == JobState::Pending {
                        j.run_at = j.run_at.max(at);
                        self.limits.deferred += 1;
                    }
                }
            }
        }
        chosen
    }

    /// After a claim of `queue` at `now` took `claimed` (the model's rows already running):
    /// records their starts, and checks the running limit and the guarantee.
    pub(super) fn claimed_under_limits(&mut self, queue: &str, claimed: &[JobId], now: i64) -> Result<(), String> {
        let with_groups: Vec<(JobId, Option<String>)> =
            claimed.iter().map(|id| (*id, self.jobs[id].group.clone())).collect();
        self.limits.record(queue, &with_groups, now);
        self.defer_successors(queue, &with_groups, now);
        if let Some(max) = self.limits.stored.get(queue).and_then(|l| l.max_running) {
            let running = self.jobs.values().filter(|j| j.queue == queue && j.state == JobState::Running).count();
            if !claimed.is_empty() && running > max as usize {
                return Err(format!(
                    "limits: {running} jobs of queue {queue:?} run after a claim, over the limit {max}"
                ));
            }
        }
        self.limits.check_guarantee()
    }

    /// After a limited claim recorded its starts at `now`: the next job of each claimed job's
    /// group (held behind it) is deferred until the group's spent rates open, as the store's
    /// claim defers it. The claim reads heads in `(priority, run_at, id)` order; a successor
    /// left at its enqueue instant would sort before every head deferred at a read, and groups
    /// served recently would pass groups that waited longer. Deferred at the claim, every
    /// head of a spent group waits in the order its group last started.
    fn defer_successors(&mut self, queue: &str, claimed: &[(JobId, Option<String>)], now: i64) {
        let Some(limits) = self.limits.stored.get(queue).filter(|l| !l.group_rates.is_empty()).cloned() else {
            return;
        };
        for group in claimed.iter().filter_map(|(_, group)| group.as_deref()) {
            let Some(at) = self.limits.group_opens_at(queue, group, &limits, now) else { continue };
            let next = self.jobs.values_mut().find(|j| {
                j.queue == queue && j.group.as_deref() == Some(group) && j.held_by_group && j.state == JobState::Pending
            });
            if let Some(j) = next {
                j.run_at = j.run_at.max(at);
            }
        }
    }

    /// What `stats` shows as throttled for `queue` at `now` (the store's `throttled`): due
    /// jobs held back while the running limit is reached or the queue's rate is spent, and
    /// when the rate opens (`None` while the running limit holds them); and the heads of
    /// groups whose group rate is spent that a claim deferred (pending, not due), and when the
    /// first of them is.
    pub(super) fn throttled(&self, queue: &str, now: i64) -> Option<Throttled> {
        let limits = self.limits.stored.get(queue)?;
        let running = self.jobs.values().filter(|j| j.queue == queue && j.state == JobState::Running).count() as u64;
        let by_running = limits.max_running.is_some_and(|max| running >= u64::from(max));
        let by_rate = limits.rate.and_then(|rate| self.limits.window(queue, None, rate, now).1);
        let spent: Vec<String> =
            limits.group_rates.iter().flat_map(|rate| self.limits.spent_groups(queue, *rate, now)).collect();
        let heads: Vec<i64> = self
            .jobs
            .values()
            .filter(|j| {
                j.queue == queue
                    && j.state == JobState::Pending
                    && !j.held_by_group
                    && j.run_at > now
                    && j.group.as_ref().is_some_and(|g| spent.contains(g))
            })
            .map(|j| j.run_at)
            .collect();
        let (group_heads, group_heads_open_at) = (heads.len() as u64, heads.iter().min().copied());
        if !by_running && by_rate.is_none() && group_heads == 0 {
            return None;
        }
        // Only the queue-wide limits hold back due jobs, and a back-off holds them all anyway.
        let due = if (!by_running && by_rate.is_none()) || self.backoff(queue, now).is_some() {
            0
        } else {
            self.jobs
                .values()
                .filter(|j| j.queue == queue && j.state == JobState::Pending && !j.held_by_group && j.run_at <= now)
                .count() as u64
        };
        Some(Throttled { due, opens_at: if by_running { None } else { by_rate }, group_heads, group_heads_open_at })
    }
}
