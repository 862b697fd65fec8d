//! A worker pool's round whose settles fail together because the store refuses one of them
//! (an application's trigger here; on PostgreSQL a text the server cannot hold did it). The
//! pool settles a round's outcomes in one transaction; one refused settle used to fail the
//! round and its fallback alike, so the completions settled with it were lost and those
//! jobs ran again. Now every other outcome of the round is settled, and the refused one is
//! settled with its text replaced when only its text was refused, or counted and logged
//! when nothing of it can be written.
//!
//! The round is staged: the dispatcher is held inside a round by a lock on the jobs (SQLite:
//! another connection's write lock; PostgreSQL: a table lock) while the other attempts
//! finish, so that they are all settled by the round after it. Every test runs on SQLite,
//! and on PostgreSQL too with `--features postgres` and `FENCEQ_POSTGRES_URL` set.

use crate::support::{temp_queue_with, HANG_GUARD};
use crossbeam_channel::{unbounded, Receiver};
use fenceq::store::Store;
use fenceq::{JobId, JobState, ManualClock, NewJob, Outcome, Queue, WorkerPool};
use std::collections::HashMap;
use std::time::Duration;

/// A database a scenario runs on, with the two things it does outside fenceq.
trait Place {
    type S: Store;
    fn queue(&self) -> Queue<Self::S>;
    fn clock(&self) -> &ManualClock;
    /// Takes a lock that makes every write to the jobs wait; returns what releases it.
    fn lock_jobs(&self) -> Box<dyn FnOnce() + '_>;
    /// Installs a trigger that refuses to settle (leave `running`) a job whose payload is
    /// `bad` at its first attempt.
    fn refuse_first_settle_of_bad(&self);
    /// Installs a trigger that refuses any job text holding a BEL (`\x07`).
    fn refuse_texts_with_bel(&self);
}

fn recv<T>(rx: &Receiver<T>, what: &str) -> T {
    rx.recv_timeout(HANG_GUARD).unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Polls `condition` (at most about 60 s).
fn eventually(mut condition: impl FnMut() -> bool, what: impl Fn() -> String) {
    for _ in 0..6000 {
        if condition() {
            return;
        }
        let _ = crossbeam_channel::after(Duration::from_millis(10)).recv();
    }
    panic!("never happened: {}", what());
}

/// A staged pool, every (job, attempt) its handler ran so far, and the later starts.
type Staged<S> = (WorkerPool<S>, HashMap<JobId, Vec<u32>>, Receiver<(JobId, u32)>);

/// Runs one job per payload through a pool whose handler answers `outcome(payload,
/// attempt)`, staging the first attempts so that the settles of all but one share a round.
/// Returns the pool (still running) and every (job, attempt) its handler ran, so far.
fn staged<P: Place>(place: &P, payloads: &[&str], outcome: fn(&[u8], u32) -> Outcome) -> Staged<P::S> {
    let queue = place.queue();
    queue.enqueue_batch(payloads.iter().map(|p| NewJob::new("q", p.as_bytes().to_vec()))).unwrap();
    let (started_tx, started) = unbounded();
    let (done_tx, done) = unbounded();
    // The first payload's attempt finishes first, alone; the others once it is in a round.
    let (first_gate, first_gated) = unbounded::<()>();
    let (gate, gated) = unbounded::<()>();
    let first = payloads[0].as_bytes().to_vec();
    let pool = WorkerPool::builder(queue, "q")
        // No free slot while the first attempts run: the dispatcher's only round then is the
        // one the first finished attempt starts.
        .workers(payloads.len())
        .prefetch(0)
        .poll_interval(Duration::from_millis(5))
        .handler(move |a| {
            started_tx.send((a.token().id, a.attempt())).unwrap();
            if a.attempt() == 1 {
                let gated = if a.payload() == first { &first_gated } else { &gated };
                gated.recv_timeout(HANG_GUARD).unwrap();
            }
            let _ = done_tx.send(());
            outcome(a.payload(), a.attempt())
        })
        .start()
        .unwrap();
    let mut runs: HashMap<JobId, Vec<u32>> = HashMap::new();
    for _ in payloads {
        let (id, attempt) = recv(&started, "the first attempts");
        runs.entry(id).or_default().push(attempt);
    }
    let unlock = place.lock_jobs();
    // One attempt finishes; the dispatcher takes it into a round (it forgets the attempt as
    // the round begins), which waits for the lock.
    first_gate.send(()).unwrap();
    recv(&done, "the first attempt to finish");
    eventually(|| pool.in_flight().len() == payloads.len() - 1, || "the dispatcher's round to begin".into());
    // The others finish while it waits: the next round settles them all.
    for _ in 1..payloads.len() {
        gate.send(()).unwrap();
    }
    for _ in 1..payloads.len() {
        recv(&done, "the other attempts to finish");
    }
    unlock();
    (pool, runs, started)
}

fn good_or_bad(payload: &[u8], attempt: u32) -> Outcome {
    match (payload, attempt) {
        (b"bad", 1) => Outcome::retry_after(Duration::from_secs(60), "upstream down"),
        _ => Outcome::Complete,
    }
}

/// One settle the store refuses whatever its text: the round's completions are settled all
/// the same (no job runs twice), and the refused one is counted, logged, and claimed again
/// once its lease runs out.
fn one_refused_settle_never_costs_its_neighbours_their_completion<P: Place>(place: &P) {
    place.refuse_first_settle_of_bad();
    let payloads = ["good 1", "good 2", "good 3", "good 4", "good 5", "good 6", "good 7", "bad"];
    let (pool, runs, started) = staged(place, &payloads, good_or_bad);
    let queue = place.queue();
    eventually(
        || pool.counters().completed == 7 && pool.counters().errors == 1,
        || format!("the round settled: {:?}", pool.counters()),
    );
    let jobs = queue.list(&fenceq::ListFilter { queue: Some("q".into()), ..Default::default() }).unwrap();
    let bad = jobs.iter().find(|j| j.payload == b"bad").unwrap().id;
    for job in &jobs {
        let expected = if job.id == bad { JobState::Running } else { JobState::Completed };
        assert_eq!((job.state, job.attempt), (expected, 1), "{job:?}");
    }
    // The refused job is claimed again once its lease runs out, and its next settle works.
    place.clock().advance(Duration::from_secs(31));
    assert_eq!(recv(&started, "the refused job's next attempt"), (bad, 2));
    assert!(pool.wait_drained(HANG_GUARD).unwrap());
    let c = pool.shutdown(HANG_GUARD).unwrap().counters;
    let late: Vec<(JobId, u32)> = started.try_iter().collect();
    assert!(late.is_empty(), "no other attempt ran: {late:?}");
    assert_eq!(runs.len(), payloads.len());
    assert!(runs.values().all(|attempts| attempts == &vec![1]), "{runs:?}");
    assert_eq!((c.completed, c.errors, c.stale_settles_rejected, c.texts_replaced), (8, 1, 0, 0), "{c:?}");
}

fn refused_text(payload: &[u8], _attempt: u32) -> Outcome {
    let text = "upstream said: \x07 (binary garbage)".to_string();
    match payload {
        b"retry" => Outcome::retry_after(Duration::from_secs(60), text),
        b"exhaust" => Outcome::Exhaust(text),
        b"unknown" => Outcome::Unknown(text),
        b"park" => Outcome::Park { until: Duration::from_secs(60), reason: text },
        _ => Outcome::Complete,
    }
}

/// Outcomes whose texts the store refuses, settled in one round with completions: every
/// outcome is settled as the handler said, the refused texts replaced by their escaped form
/// (and counted), and no completion is lost.
fn an_outcome_text_the_store_refuses_is_settled_escaped_with_its_neighbours<P: Place>(place: &P) {
    place.refuse_texts_with_bel();
    let payloads = ["good 1", "retry", "good 2", "exhaust", "good 3", "unknown", "good 4", "park"];
    let (pool, runs, _started) = staged(place, &payloads, refused_text);
    eventually(
        || pool.counters().texts_replaced == 4 && pool.counters().completed == 4,
        || format!("the round settled: {:?}", pool.counters()),
    );
    let c = pool.shutdown(HANG_GUARD).unwrap().counters;
    assert_eq!(
        (c.completed, c.retried, c.exhausted, c.unknown, c.parked, c.texts_replaced, c.errors),
        (4, 1, 1, 1, 1, 4, 0),
        "{c:?}"
    );
    assert!(runs.values().all(|attempts| attempts == &vec![1]), "{runs:?}");
    let queue = place.queue();
    let jobs = queue.list(&fenceq::ListFilter { queue: Some("q".into()), ..Default::default() }).unwrap();
    for job in jobs {
        let state = match job.payload.as_slice() {
            b"retry" => JobState::Pending,
            b"exhaust" => JobState::Exhausted,
            b"unknown" => JobState::Unknown,
            b"park" => JobState::Waiting,
            _ => JobState::Completed,
        };
        assert_eq!((job.state, job.attempt), (state, 1), "{job:?}");
        if state != JobState::Completed {
            let text = job.last_error.unwrap();
            assert!(text.starts_with("[fenceq: the store refused this text]"), "{text}");
            assert!(text.contains(r"upstream said: \u{7} (binary garbage)"), "{text}");
        }
    }
}

struct Sqlite(crate::support::TestQueue);

impl Place for Sqlite {
    type S = fenceq::SqliteStore;
    fn queue(&self) -> Queue {
        self.0.queue.clone()
    }
    fn clock(&self) -> &ManualClock {
        &self.0.clock
    }
    fn lock_jobs(&self) -> Box<dyn FnOnce() + '_> {
        let conn = fenceq::rusqlite::Connection::open(self.0.path()).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        Box::new(move || conn.execute_batch("COMMIT").unwrap())
    }
    fn refuse_first_settle_of_bad(&self) {
        self.raw(
            "CREATE TRIGGER refuse_one BEFORE UPDATE OF state ON fenceq_jobs
             WHEN OLD.state = 'running' AND NEW.state <> 'running' AND OLD.attempt = 1
              AND OLD.payload = CAST('bad' AS BLOB)
             BEGIN SELECT RAISE(ABORT, 'settle refused by the test'); END;",
        );
    }
    fn refuse_texts_with_bel(&self) {
        self.raw(
            "CREATE TRIGGER refuse_bel BEFORE UPDATE OF last_error ON fenceq_jobs
             WHEN instr(NEW.last_error, char(7)) > 0
             BEGIN SELECT RAISE(ABORT, 'text refused by the test'); END;",
        );
    }
}

impl Sqlite {
    fn new() -> Sqlite {
        // The staged round waits for the test's lock: never long, but on a loaded machine
        // longer than the default busy timeout would allow.
        Sqlite(temp_queue_with(|b| b.busy_timeout(HANG_GUARD)))
    }
    fn raw(&self, sql: &str) {
        fenceq::rusqlite::Connection::open(self.0.path()).unwrap().execute_batch(sql).unwrap();
    }
}

#[test]
fn sqlite_one_refused_settle_never_costs_its_neighbours_their_completion() {
    one_refused_settle_never_costs_its_neighbours_their_completion(&Sqlite::new());
}

#[test]
fn sqlite_an_outcome_text_the_store_refuses_is_settled_escaped_with_its_neighbours() {
    an_outcome_text_the_store_refuses_is_settled_escaped_with_its_neighbours(&Sqlite::new());
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use crate::pg_support::Scratch;
    use fenceq::diesel::connection::SimpleConnection;
    use fenceq::PostgresStore;

    struct Pg {
        scratch: Scratch,
        clock: ManualClock,
        queue: Queue<PostgresStore>,
    }

    impl Pg {
        fn new() -> Option<Pg> {
            let scratch = Scratch::new()?;
            let clock = ManualClock::new(crate::support::T0);
            // The staged round waits for the test's lock (see the SQLite place).
            let queue = scratch.builder().clock(clock.clone()).busy_timeout(HANG_GUARD).open_postgres().unwrap();
            Some(Pg { scratch, clock, queue })
        }
        fn raw(&self, sql: &str) {
            self.scratch.raw().batch_execute(sql).unwrap();
        }
    }

    impl Place for Pg {
        type S = PostgresStore;
        fn queue(&self) -> Queue<PostgresStore> {
            self.queue.clone()
        }
        fn clock(&self) -> &ManualClock {
            &self.clock
        }
        fn lock_jobs(&self) -> Box<dyn FnOnce() + '_> {
            let mut conn = self.scratch.raw();
            conn.batch_execute("BEGIN; LOCK TABLE fenceq_jobs IN EXCLUSIVE MODE").unwrap();
            Box::new(move || conn.batch_execute("COMMIT").unwrap())
        }
        fn refuse_first_settle_of_bad(&self) {
            self.raw(
                "CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     IF OLD.state = 'running' AND NEW.state <> 'running' AND OLD.attempt = 1
                        AND OLD.payload = 'bad'::bytea THEN
                         RAISE EXCEPTION 'settle refused by the test';
                     END IF;
                     RETURN NEW;
                 END $$;
                 CREATE TRIGGER refuse_one BEFORE UPDATE ON fenceq_jobs
                 FOR EACH ROW EXECUTE FUNCTION refuse_one();",
            );
        }
        fn refuse_texts_with_bel(&self) {
            self.raw(
                "CREATE FUNCTION refuse_bel() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     IF position(chr(7) in coalesce(NEW.last_error, '')) > 0 THEN
                         RAISE EXCEPTION 'text refused by the test';
                     END IF;
                     RETURN NEW;
                 END $$;
                 CREATE TRIGGER refuse_bel BEFORE UPDATE ON fenceq_jobs
                 FOR EACH ROW EXECUTE FUNCTION refuse_bel();",
            );
        }
    }

    #[test]
    fn postgres_one_refused_settle_never_costs_its_neighbours_their_completion() {
        if let Some(pg) = Pg::new() {
            one_refused_settle_never_costs_its_neighbours_their_completion(&pg);
        }
    }

    #[test]
    fn postgres_an_outcome_text_the_store_refuses_is_settled_escaped_with_its_neighbours() {
        if let Some(pg) = Pg::new() {
            an_outcome_text_the_store_refuses_is_settled_escaped_with_its_neighbours(&pg);
        }
    }
}
