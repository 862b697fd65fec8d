//! One test's database: a fresh place of the harness, a manual clock at [`T0`], and a queue
//! handle on it, with the shorthands every rule uses.

use crate::harness::{Harness, RawRow};
use fenceq::{Claimed, JobId, ManualClock, NewJob, Queue};
use std::time::Duration;

/// The manual clock's start: 2023-11-14, far from zero so that subtractions stay positive.
pub const T0: i64 = 1_700_000_000_000;
/// The lease the shorthands claim with.
pub const LEASE: Duration = Duration::from_secs(30);
/// How long a rule waits for something another thread must do before it calls it a hang
/// (never a timing assertion: only a bound on a wait that should end at once).
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// One test's database and queue. Derefs to the queue.
pub struct Db<'h, H: Harness> {
    /// The harness it was made by.
    pub harness: &'h H,
    /// Where the database lives (kept alive until the test ends).
    pub place: H::Place,
    /// The queue's clock.
    pub clock: ManualClock,
    /// The queue.
    pub queue: Queue<H::Store>,
}

impl<H: Harness> std::ops::Deref for Db<'_, H> {
    type Target = Queue<H::Store>;
    fn deref(&self) -> &Queue<H::Store> {
        &self.queue
    }
}

impl<'h, H: Harness> Db<'h, H> {
    /// A fresh database with the store's defaults.
    pub fn new(harness: &'h H) -> Self {
        Db::with_max_attempts(harness, None)
    }

    /// A fresh database whose jobs get `max_attempts` attempts unless they say otherwise.
    pub fn with_max_attempts(harness: &'h H, max_attempts: Option<u32>) -> Self {
        let place = harness.create();
        let clock = ManualClock::new(T0);
        let queue = harness.open(&place, &clock, max_attempts);
        Db { harness, place, clock, queue }
    }

    /// A second handle on the same database and clock.
    pub fn reopen(&self) -> Queue<H::Store> {
        self.harness.open(&self.place, &self.clock, None)
    }

    /// Moves the clock on.
    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Enqueues a job with `payload` on queue "q" and returns its id.
    pub fn add(&self, payload: &str) -> JobId {
        self.queue.enqueue(NewJob::new("q", payload.as_bytes().to_vec())).unwrap().id()
    }

    /// Claims the next job of "q" as `worker` under [`LEASE`]; panics when none is due.
    pub fn take(&self, worker: &str) -> Claimed {
        self.queue.claim("q", worker, LEASE).unwrap().expect("a claimable job")
    }

    /// Every row, read without fenceq.
    pub fn snapshot(&self) -> Vec<RawRow> {
        self.harness.snapshot(&self.place)
    }

    /// Rows in `state`, counted without fenceq.
    pub fn count(&self, state: &str) -> i64 {
        self.harness.count(&self.place, state)
    }

    /// Creates the domain table `replies`.
    pub fn create_replies(&self) {
        self.harness.create_replies(&self.place)
    }

    /// Every row of `replies`.
    pub fn replies(&self) -> Vec<(i64, i64, String)> {
        self.harness.replies(&self.place)
    }
}

// ------------------------------------------------------------------ for fenceq's own test binaries

/// The most of `times` (sorted here) in any half-open window of length `window`: what a
/// rate of that window must never let exceed its count.
pub fn most_in_window(times: &mut [i64], window: i64) -> usize {
    times.sort_unstable();
    let (mut most, mut first) = (0, 0);
    for last in 0..times.len() {
        while times[last] - times[first] >= window {
            first += 1;
        }
        most = most.max(last - first + 1);
    }
    most
}

/// Milliseconds since the Unix epoch: the instant that processes (and a test's clocks) agree on.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Spins until the wall clock reaches `start` (at most 10 s): threads and processes released
/// at one shared instant start together.
pub fn spin_until(start: i64) {
    let bound = std::time::Instant::now() + Duration::from_secs(10);
    while wall_ms() < start && std::time::Instant::now() < bound {
        std::hint::spin_loop();
    }
}

/// Whether this run is CI's (`CI=true` or `CI=1`), where a test that would skip for want of a
/// server or a browser fails instead.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The environment variable `name` as a number, or `default` when it is unset or no number:
/// the soak knobs (`FENCEQ_CRASH_KILLS=1000`).
pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// xorshift64*: reproducible choices from a seed, for the tests that make many of them.
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value, zero included).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next number.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A command that runs one ignored test of this test binary as a child process, and nothing
/// else of the binary: `--ignored --exact <test> --nocapture --test-threads=1`.
///
/// `test` is the child's full path as the calling module writes it,
/// `concat!(module_path!(), "::child_name")`: libtest names a test by its path without the
/// binary's crate name, so that first segment is dropped here. A binary that holds many
/// modules thus runs exactly the one child, even when two modules name their children alike,
/// and a module that moves needs no change.
///
/// The child's own output reaches the parent (`--nocapture`) after libtest's
/// `test <name> ... `, which has no newline: a child that prints lines for its parent prints
/// a newline first, or its parent looks for a marker inside the line. The caller adds the
/// environment variable that carries the child's spec, and the child `expect`s it, so that a
/// bare `cargo test -- --ignored` fails it at once instead of running a child without a
/// parent.
pub fn child_process(test: &str) -> std::process::Command {
    let name = test.split_once("::").map_or(test, |(_crate, path)| path);
    let mut command = std::process::Command::new(std::env::current_exe().expect("the test binary's path"));
    command.args(["--ignored", "--exact", name, "--nocapture", "--test-threads=1"]);
    command
}

/// Whether the calling test runs alone in a process of its own; if it does not, runs it so and
/// asserts that it passed there.
///
/// For a test that counts what its whole process holds (its threads, say): in a test binary
/// of many modules, other tests run beside it in the same process. Called first thing in
/// such a test with its full path (`concat!(module_path!(), "::test_name")`), it re-runs this
/// test binary with that test alone and returns `false` once that run passed (the test then
/// returns: its assertions ran in the child); in the child it returns `true`, and the test
/// goes on. Panics with the child's output when the child failed or did not run the test.
pub fn alone_in_a_process(test: &str) -> bool {
    const VARIABLE: &str = "FENCEQ_ALONE_IN_A_PROCESS";
    let name = test.split_once("::").map_or(test, |(_crate, path)| path);
    if std::env::var(VARIABLE).is_ok_and(|v| v == name) {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary's path"))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(VARIABLE, name)
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name} alone in a process: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    false
}
