//! How many jobs a pool claims beyond its free workers.
//!
//! A pool's dispatcher claims in rounds, one request each, and a worker that runs out of
//! claimed jobs waits for the next round. When a round costs more than the handlers' work
//! (a PostgreSQL commit waits for the server's WAL flush, some hundreds of microseconds),
//! a small prefetch caps the pool at a few jobs per round: with one worker and a prefetch
//! of two, three jobs per round trip, whatever the handler's speed. So, unless the
//! application fixes the prefetch, it follows the handlers, judged as each round returns:
//!
//! - attempts finished since the round before, the round claimed every job it asked for
//!   (more are due), and the workers had already taken every job claimed before (none waits
//!   unstarted): the workers outran the round trip, so the prefetch doubles, up to
//!   [`ADAPTIVE_PREFETCH_CEILING`];
//! - more than half the prefetch still waits unstarted: the handlers are slower than the
//!   rounds (or stuck), so it halves, down to its floor of twice the workers;
//! - the round found fewer due jobs than it asked for: the queue is drained, so it returns
//!   to its floor.
//!
//! A handler that blocks starts nothing, so stuck workers never make a pool claim more.

/// The most jobs an adaptive prefetch claims beyond the workers.
pub const ADAPTIVE_PREFETCH_CEILING: usize = 1024;

/// The pool's prefetch: fixed by the application, or following the handlers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prefetch {
    /// [`WorkerPoolBuilder::prefetch`](super::WorkerPoolBuilder::prefetch): exactly this many.
    Fixed(usize),
    /// The default: `now`, kept within `floor..=ceiling`.
    Adaptive { floor: usize, ceiling: usize, now: usize },
}

impl Prefetch {
    /// The application's fixed prefetch, or the adaptive one of a pool of `workers`.
    pub(crate) fn new(fixed: Option<usize>, workers: usize) -> Prefetch {
        match fixed {
            Some(jobs) => Prefetch::Fixed(jobs),
            None => {
                let floor = 2 * workers;
                Prefetch::Adaptive { floor, ceiling: ADAPTIVE_PREFETCH_CEILING.max(floor), now: floor }
            }
        }
    }

    /// How many jobs beyond the workers to claim now.
    pub(crate) fn now(self) -> usize {
        match self {
            Prefetch::Fixed(jobs) => jobs,
            Prefetch::Adaptive { now, .. } => now,
        }
    }

    /// The most it can ever be (what the pool's job channel must hold beyond the workers).
    pub(crate) fn most(self) -> usize {
        match self {
            Prefetch::Fixed(jobs) => jobs,
            Prefetch::Adaptive { ceiling, .. } => ceiling,
        }
    }

    /// Follows a round (see the module's rules).
    pub(crate) fn after_round(&mut self, round: Round) {
        if let Prefetch::Adaptive { floor, ceiling, now } = self {
            *now = if round.claimed < round.asked {
                *floor
            } else if round.waiting == 0 && round.asked > 0 && round.finished > 0 {
                now.saturating_mul(2).clamp(*floor, *ceiling)
            } else if round.waiting > *now / 2 {
                (*now / 2).max(*floor)
            } else {
                *now
            };
        }
    }
}

/// What one dispatcher round saw.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Round {
    /// Attempts that finished since the round before (settled by this one).
    pub(crate) finished: usize,
    /// Jobs the round asked to claim.
    pub(crate) asked: usize,
    /// Jobs it claimed.
    pub(crate) claimed: usize,
    /// Jobs claimed by earlier rounds that no worker had started when it returned.
    pub(crate) waiting: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(finished: usize, asked: usize, claimed: usize, waiting: usize) -> Round {
        Round { finished, asked, claimed, waiting }
    }

    #[test]
    fn a_fixed_prefetch_never_moves() {
        let mut p = Prefetch::new(Some(3), 4);
        for (asked, claimed, waiting) in [(7, 7, 0), (7, 0, 0), (7, 7, 7), (7, 7, 0)] {
            p.after_round(round(7, asked, claimed, waiting));
            assert_eq!(p.now(), 3);
        }
        assert_eq!(p.most(), 3);
        let mut none = Prefetch::new(Some(0), 4);
        none.after_round(round(4, 4, 4, 0));
        assert_eq!(none.now(), 0);
    }

    #[test]
    fn the_default_starts_at_twice_the_workers_and_doubles_while_the_workers_outrun_full_rounds() {
        let mut p = Prefetch::new(None, 1);
        assert_eq!(p.now(), 2);
        let mut seen = vec![p.now()];
        for _ in 0..12 {
            let asked = 1 + p.now();
            p.after_round(round(asked, asked, asked, 0));
            seen.push(p.now());
        }
        assert_eq!(&seen[..6], &[2, 4, 8, 16, 32, 64]);
        assert_eq!(p.now(), ADAPTIVE_PREFETCH_CEILING, "capped");
        assert_eq!(p.most(), ADAPTIVE_PREFETCH_CEILING);
    }

    #[test]
    fn it_holds_while_the_workers_keep_up_and_halves_while_jobs_wait_for_them() {
        let mut p = Prefetch::new(None, 4);
        for _ in 0..6 {
            p.after_round(round(100, 100, 100, 0));
        }
        assert_eq!(p.now(), 512);
        p.after_round(round(100, 100, 100, 200));
        assert_eq!(p.now(), 512, "some waiting, not more than half: enough");
        p.after_round(round(100, 100, 100, 300));
        assert_eq!(p.now(), 256, "more than half waiting: the handlers are slower");
        for _ in 0..10 {
            p.after_round(round(10, 10, 10, 256));
        }
        assert_eq!(p.now(), 8, "stuck handlers: back to the floor, never below");
    }

    #[test]
    fn stuck_handlers_never_grow_it_and_a_drained_queue_returns_it_to_its_floor() {
        let mut p = Prefetch::new(None, 2);
        // The first round: nothing finished yet, nothing claimed before.
        p.after_round(round(0, 6, 6, 0));
        assert_eq!(p.now(), 4, "no growth before any attempt finished");
        // Both workers stuck, the prefetched jobs waiting: it never grows.
        for _ in 0..10 {
            p.after_round(round(0, 0, 0, 4));
            assert_eq!(p.now(), 4);
        }
        for _ in 0..4 {
            p.after_round(round(8, 8, 8, 0));
        }
        assert_eq!(p.now(), 64);
        p.after_round(round(66, 66, 10, 0));
        assert_eq!(p.now(), 4, "fewer due than asked for");
    }

    #[test]
    fn a_pool_whose_floor_is_above_the_ceiling_keeps_its_floor() {
        let mut p = Prefetch::new(None, 600);
        assert_eq!(p.now(), 1200);
        p.after_round(round(5000, 5000, 5000, 0));
        assert_eq!(p.now(), 1200);
        assert_eq!(p.most(), 1200);
    }
}
