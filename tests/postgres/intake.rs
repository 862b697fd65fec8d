//! Intake groups on PostgreSQL: concurrent `enqueue` calls of one queue handle share one
//! statement and one commit (`src/queue/intake_group.rs`), and each caller still gets the
//! exact answer it would have got alone: its own new job, the job its key already named
//! (also when a neighbour in the same group added it), or its own refusal, with nothing
//! inserted twice.
//!
//! The assertions hold however the calls happen to be grouped; that they were grouped at
//! all is read from `commit_stats` (requests beyond the transactions), which 32 threads
//! calling at once on two cores cannot avoid.
//!
//! Each test runs in a schema of its own on the server named by `FENCEQ_POSTGRES_URL`
//! (`scripts/postgres start`); without one the tests say they skipped, except under
//! `CI=true`, where they fail.

use fenceq::diesel::connection::SimpleConnection;
use fenceq::{Enqueued, Error, JobId, NewJob};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Barrier};

use crate::support::{scalar, Scratch};

const THREADS: usize = 32;
const CALLS: usize = 100;
const SHARED_KEYS: usize = 10;

/// What one call asked for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Asked {
    /// A key every thread enqueues, many times over.
    Shared(String),
    /// A key of this call alone.
    Own(String),
    /// No key.
    Keyless,
}

#[test]
fn concurrent_callers_share_statements_and_each_gets_its_own_exact_result() {
    let Some(s) = Scratch::new() else { return };
    let queue = Queue::open(&s);
    let results: Vec<(Asked, Enqueued)> = at_once(&queue, |t, queue| {
        (0..CALLS)
            .map(|i| {
                let asked = match i % 4 {
                    0 => Asked::Shared(format!("shared-{}", (i / 4) % SHARED_KEYS)),
                    1 => Asked::Keyless,
                    _ => Asked::Own(format!("t{t}-i{i}")),
                };
                let job = NewJob::new("q", format!("{t}/{i}").into_bytes());
                let job = match &asked {
                    Asked::Shared(key) | Asked::Own(key) => job.key(key.clone()),
                    Asked::Keyless => job,
                };
                (asked, queue.enqueue(job).expect("enqueue"))
            })
            .collect()
    });
    assert_eq!(results.len(), THREADS * CALLS);

    let mut new_ids = HashSet::new();
    let mut shared_new: HashMap<String, JobId> = HashMap::new();
    let mut shared_duplicates: Vec<(String, JobId)> = Vec::new();
    for (asked, enqueued) in &results {
        match (asked, enqueued) {
            (Asked::Shared(key), Enqueued::New(id)) => {
                assert!(shared_new.insert(key.clone(), *id).is_none(), "{key}: added twice");
                assert!(new_ids.insert(*id), "{id} handed out twice");
            }
            (Asked::Shared(key), Enqueued::Duplicate(id)) => shared_duplicates.push((key.clone(), *id)),
            (Asked::Own(_) | Asked::Keyless, Enqueued::New(id)) => {
                assert!(new_ids.insert(*id), "{id} handed out twice")
            }
            (asked, enqueued) => panic!("{asked:?} answered {enqueued:?}"),
        }
    }
    assert_eq!(shared_new.len(), SHARED_KEYS, "every shared key was added by exactly one call");
    for (key, id) in &shared_duplicates {
        assert_eq!(Some(id), shared_new.get(key), "{key}: a duplicate names the job its key names");
    }
    let mut raw = s.raw();
    assert_eq!(
        scalar(&mut raw, "SELECT count(*) AS n FROM fenceq_jobs") as usize,
        new_ids.len(),
        "one row per new job"
    );
    for (asked, enqueued) in &results {
        if let (Asked::Own(key), Enqueued::New(id)) = (asked, enqueued) {
            let job = queue.0.job(*id).unwrap().expect("the job exists");
            assert_eq!(job.key.as_deref(), Some(key.as_str()), "{id} is the job of its own call");
        }
    }
    assert_grouped(&queue);
}

/// A job the database ignores (an application's trigger) fails its own call only: the
/// group's statement changes nothing, every job is then inserted alone, and no neighbour is
/// inserted twice or answered with another's refusal.
#[test]
fn a_job_the_database_ignores_fails_alone_and_its_neighbours_are_added_once() {
    let Some(s) = Scratch::new() else { return };
    let queue = Queue::open(&s);
    s.raw()
        .batch_execute(
            "CREATE FUNCTION ignore_marked() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN IF NEW.payload = convert_to('ignore me', 'UTF8') THEN RETURN NULL; END IF; RETURN NEW; END $$;
             CREATE TRIGGER ignore_marked BEFORE INSERT ON fenceq_jobs
                 FOR EACH ROW EXECUTE FUNCTION ignore_marked();",
        )
        .unwrap();
    let results: Vec<(bool, fenceq::Result<Enqueued>)> = at_once(&queue, |t, queue| {
        (0..CALLS / 2)
            .map(|i| {
                let ignored = (t + i) % 10 == 0;
                let payload = if ignored { "ignore me".to_string() } else { format!("{t}/{i}") };
                (ignored, queue.enqueue(NewJob::new("q", payload.into_bytes())))
            })
            .collect()
    });
    let mut new_ids = HashSet::new();
    for (ignored, result) in &results {
        match (ignored, result) {
            (true, Err(Error::InvalidInput { .. })) => {}
            (false, Ok(Enqueued::New(id))) => assert!(new_ids.insert(*id), "{id} handed out twice"),
            (ignored, result) => panic!("ignored {ignored}: {result:?}"),
        }
    }
    let added = results.iter().filter(|(ignored, _)| !ignored).count();
    assert_eq!(new_ids.len(), added);
    let mut raw = s.raw();
    assert_eq!(scalar(&mut raw, "SELECT count(*) AS n FROM fenceq_jobs") as usize, added, "each added once");
    assert_grouped(&queue);
}

/// A group whose one-by-one transaction fails at its COMMIT (an application's deferred
/// constraint trigger refuses one of its jobs) answers every member with the server's own
/// error, never an SQLite error standing in for it.
#[test]
fn every_member_of_a_group_whose_commit_fails_gets_the_servers_own_error() {
    let Some(s) = Scratch::new() else { return };
    let queue = Queue::open(&s);
    s.raw()
        .batch_execute(
            "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN IF NEW.payload = convert_to('poison', 'UTF8') THEN
                 RAISE EXCEPTION 'poison refused at commit'; END IF; RETURN NULL; END $$;
             CREATE CONSTRAINT TRIGGER refuse_poison AFTER INSERT ON fenceq_jobs
                 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_poison();",
        )
        .unwrap();
    // A key that exists already: a group holding it cannot be inserted all-new in one
    // statement, so it runs job by job in one transaction, which the poison fails at COMMIT.
    queue.enqueue(NewJob::new("q", b"first".to_vec()).key("dup")).unwrap();
    let results: Vec<fenceq::Result<Enqueued>> = at_once(&queue, |t, queue| {
        (0..CALLS / 2)
            .map(|i| {
                let job = if (t + i) % 2 == 0 {
                    NewJob::new("q", b"poison".to_vec())
                } else {
                    NewJob::new("q", b"x".to_vec()).key("dup")
                };
                queue.enqueue(job)
            })
            .collect()
    });
    let mut failed = 0;
    for result in &results {
        match result {
            Ok(Enqueued::Duplicate(_)) => {}
            Err(Error::Postgres { source, .. }) => {
                assert!(source.to_string().contains("poison refused at commit"), "{source}");
                failed += 1;
            }
            other => panic!("neither a duplicate nor the server's own error: {other:?}"),
        }
    }
    assert!(failed >= THREADS * CALLS / 4, "every poison failed: {failed}");
    let mut raw = s.raw();
    assert_eq!(scalar(&mut raw, "SELECT count(*) AS n FROM fenceq_jobs"), 1, "no poison was added");
}

/// Runs `calls` on [`THREADS`] threads released at once, each with its number and the
/// queue; every thread's results, in thread order.
fn at_once<T: Send + 'static>(queue: &Queue, calls: fn(usize, &Queue) -> Vec<T>) -> Vec<T> {
    let start = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (queue, start) = (queue.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                calls(t, &queue)
            })
        })
        .collect();
    threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
}

/// Some calls rode in another call's group (`commit_stats` counts them as requests beyond
/// the transactions).
fn assert_grouped(queue: &Queue) {
    let stats = queue.0.commit_stats();
    assert!(
        stats.requests > stats.transactions,
        "the calls shared statements: {} requests in {} transactions",
        stats.requests,
        stats.transactions
    );
}

/// The scratch schema's queue (a pool of 8 connections), kept beside its scratch.
#[derive(Clone)]
struct Queue(fenceq::Queue<fenceq::PostgresStore>);

impl Queue {
    fn open(s: &Scratch) -> Queue {
        Queue(
            fenceq::Queue::builder()
                .url(s.url.clone())
                .schema(s.schema.clone())
                .pool_size(8)
                .open_postgres()
                .expect("open the test schema"),
        )
    }

    fn enqueue(&self, job: NewJob) -> fenceq::Result<Enqueued> {
        self.0.enqueue(job)
    }
}
