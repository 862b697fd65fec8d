//! The counts of settled rows that `stats` reads (`fenceq_settled_counts`, schema 13) stay
//! equal to the rows they count through every transition into and out of the settled states,
//! including the operator's acknowledgements (by id, of a whole queue) that the model tests
//! of the conformance kit do not run. The kit's model tests check the same through `stats`
//! after every step of their histories (`durable::model_agrees_with_the_store_*`).

use crate::support::*;
use fenceq::rusqlite::Connection;
use fenceq::{Job, JobState, ListFilter, NewJob, Queue, Resolution, Retention};
use std::time::Duration;

/// Up to 100 jobs of `queue` in `state`, in id order.
fn jobs_in(q: &Queue, queue: &str, state: JobState) -> Vec<Job> {
    let filter = ListFilter { queue: Some(queue.to_owned()), state: Some(state), ..ListFilter::default() };
    q.list(&filter).unwrap()
}

/// Up to 100 running jobs of `queue` whose lease is live, in id order.
fn owned_in(q: &Queue, queue: &str) -> Vec<Job> {
    jobs_in(q, queue, JobState::Running).into_iter().filter(|job| q.owns(&job.token().unwrap()).unwrap()).collect()
}

#[test]
fn settled_counts_equal_the_rows_after_every_transition() {
    let q = temp_queue();
    let conn = Connection::open(q.path()).unwrap();
    let mut rng = Rng::new(13);
    let queues = ["a", "b"];
    let retention = Retention { older_than: Duration::from_secs(60), ..Retention::default() };
    let mut moved = [0u32; 12];
    for step in 0..1500 {
        let queue = queues[rng.below(2) as usize];
        let pick = |jobs: &[Job], rng: &mut Rng| {
            (!jobs.is_empty()).then(|| jobs[rng.below(jobs.len() as u64) as usize].clone())
        };
        let op = rng.below(12) as usize;
        let done = match op {
            0 => {
                let mut job = NewJob::new(queue, vec![step as u8]).max_attempts(2);
                if rng.below(3) == 0 {
                    job = job.group(format!("g{}", rng.below(3)));
                }
                q.enqueue(job).unwrap();
                true
            }
            1 => !q.claim_batch(queue, "w", LEASE, 1 + rng.below(4) as u32).unwrap().is_empty(),
            2 => pick(&owned_in(&q, queue), &mut rng).map(|job| q.complete(&job.token().unwrap()).unwrap()).is_some(),
            3 => {
                let tokens: Vec<_> = owned_in(&q, queue).iter().filter_map(Job::token).take(5).collect();
                let results = q.complete_all(&tokens).unwrap();
                results.iter().all(Result::is_ok) && !tokens.is_empty()
            }
            4 => pick(&owned_in(&q, queue), &mut rng)
                .map(|job| match rng.below(4) {
                    0..=2 => q.exhaust(&job.token().unwrap(), "gave up").unwrap(),
                    _ => q.mark_unknown(&job.token().unwrap(), "no answer").unwrap(),
                })
                .is_some(),
            5 => pick(&jobs_in(&q, queue, JobState::Unknown), &mut rng)
                .map(|job| {
                    let resolution =
                        [Resolution::Complete, Resolution::Retry, Resolution::Exhaust][rng.below(3) as usize];
                    q.resolve(&job.token().unwrap(), resolution).unwrap()
                })
                .is_some(),
            6 if rng.below(3) == 0 => {
                let live: Vec<Job> = [JobState::Pending, JobState::Running]
                    .into_iter()
                    .flat_map(|state| jobs_in(&q, queue, state))
                    .collect();
                pick(&live, &mut rng).map(|job| q.cancel(job.id).unwrap()).is_some()
            }
            7 => pick(&jobs_in(&q, queue, JobState::Exhausted), &mut rng)
                .map(|job| {
                    // Acknowledged or not: a repeat for the same token changes nothing.
                    q.acknowledge(&job.token().unwrap()).unwrap();
                    q.acknowledge(&job.token().unwrap()).unwrap();
                })
                .is_some(),
            8 => pick(&jobs_in(&q, queue, JobState::Exhausted), &mut rng)
                .map(|job| q.acknowledge_job(job.id, None).unwrap())
                .is_some(),
            9 => !q.acknowledge_all(queue, None).unwrap().is_empty(),
            6 => false,
            10 => {
                pick(&jobs_in(&q, queue, JobState::Exhausted), &mut rng).map(|job| q.replay(job.id).unwrap()).is_some()
            }
            _ => {
                q.advance(Duration::from_secs(rng.below(50)));
                q.prune(&retention).unwrap().deleted() > 0
            }
        };
        moved[op] += u32::from(done);
        assert_eq!(settled_counts(&conn), settled_row_counts(&conn), "after step {step} (operation {op})");
        assert_eq!(stats_counts(&q), row_counts(&conn), "after step {step} (operation {op})");
    }
    // Every kind of transition ran, several times.
    assert!(moved.iter().all(|&n| n >= 3), "{moved:?}");
}

/// A prune that finds a settled row without its count fails and deletes nothing, instead of
/// letting the counts drift (a row written past fenceq, as only a hand-made file has), and
/// says how to repair the counts; after the recount it goes through.
#[test]
fn a_prune_that_finds_an_uncounted_row_fails_and_deletes_nothing() {
    let q = temp_queue();
    let conn = Connection::open(q.path()).unwrap();
    conn.execute(
        "INSERT INTO fenceq_jobs (queue, payload, state, run_at, attempt, max_attempts, created_at, settled_at)
         VALUES ('q', x'01', 'completed', ?1, 1, 3, ?1, ?1)",
        [T0],
    )
    .unwrap();
    q.advance(Duration::from_secs(3600));
    let retention = Retention { older_than: Duration::from_secs(60), ..Retention::default() };
    let refused = q.prune(&retention).unwrap_err();
    assert!(refused.to_string().contains("fenceq stats --recount"), "the error names the repair: {refused}");
    assert_eq!(row_counts(&conn), vec![("q".to_owned(), "completed".to_owned(), 1)]);
    assert_eq!(q.stats().unwrap().queue("q").completed, 0, "the uncounted row is not in the counts");

    // The repair: a recount from the rows, after which the prune goes through.
    assert_eq!(q.recount_settled().unwrap(), 1);
    assert_eq!(q.stats().unwrap().queue("q").completed, 1);
    assert_eq!(q.prune(&retention).unwrap().settled, 1);
    assert_eq!(row_counts(&conn), vec![]);
    assert_eq!(q.stats().unwrap().queue("q").completed, 0);
}
