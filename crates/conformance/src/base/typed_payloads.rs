//! Typed-payload rules, for every store (fenceq's feature `serde`): a struct encoded by
//! `NewJob::json` comes back equal from every record that carries the payload, and a payload
//! that does not decode is a poison message: `json_handler` exhausts it at its first attempt,
//! with an error naming the type and serde's message, and never calls the handler with it.

use crate::fixture::{Db, HANG_GUARD, LEASE};
use crate::harness::Harness;
use crate::Rule;
use fenceq::{Error, JobId, JobState, NewJob, Outcome, WorkerPool};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Every typed-payload rule.
pub fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        a_struct_round_trips_through_every_record_that_carries_it,
        a_payload_of_another_shape_is_a_decode_error_that_changes_nothing,
        json_handler_gets_the_decoded_value_and_exhausts_poison_at_once_without_calling_it,
        json_handler_exhausts_poison_whose_message_quotes_a_nul_byte,
    ]
}

/// A Telegram update, cut to what a bot reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Update {
    update_id: i64,
    message: Message,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Message {
    chat: Chat,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Chat {
    id: i64,
}

fn update(update_id: i64, text: &str) -> Update {
    Update { update_id, message: Message { chat: Chat { id: -100 }, text: text.to_string() } }
}

fn a_struct_round_trips_through_every_record_that_carries_it<H: Harness>(h: &H) {
    let db = Db::new(h);
    let sent = update(4711, "hi \"there\" ✓");
    let id = db.enqueue(NewJob::json("telegram", &sent).unwrap().key("update:4711")).unwrap().id();
    // Stored as JSON text, readable as it is by `fenceq show`.
    let job = db.job(id).unwrap().unwrap();
    assert_eq!(
        std::str::from_utf8(&job.payload).unwrap(),
        r#"{"update_id":4711,"message":{"chat":{"id":-100},"text":"hi \"there\" ✓"}}"#
    );
    assert_eq!(job.payload_json::<Update>().unwrap(), sent);
    let claimed = db.claim("telegram", "w", LEASE).unwrap().unwrap();
    assert_eq!(claimed.payload_json::<Update>().unwrap(), sent);
    // A type may read only part of the payload, and borrow from it.
    #[derive(Deserialize)]
    struct Id<'a> {
        update_id: i64,
        #[serde(borrow)]
        message: Text<'a>,
    }
    #[derive(Deserialize)]
    struct Text<'a> {
        #[serde(borrow)]
        text: std::borrow::Cow<'a, str>,
    }
    let partial: Id<'_> = claimed.payload_json().unwrap();
    assert_eq!((partial.update_id, &*partial.message.text), (4711, "hi \"there\" ✓"));
    db.exhaust(&claimed.token, "gave up").unwrap();
    let exhaustion = db.exhaustions(None, 10).unwrap().items.remove(0);
    assert_eq!(exhaustion.payload_json::<Update>().unwrap(), sent);

    let unknown = db.enqueue(NewJob::json("telegram", &update(4712, "sent?")).unwrap()).unwrap().id();
    let claimed = db.claim("telegram", "w", LEASE).unwrap().unwrap();
    assert_eq!(claimed.id(), unknown);
    db.mark_unknown(&claimed.token, "timeout after send").unwrap();
    let record = db.unknowns(None, 10).unwrap().items.remove(0);
    assert_eq!(record.payload_json::<Update>().unwrap(), update(4712, "sent?"));
}

fn a_payload_of_another_shape_is_a_decode_error_that_changes_nothing<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.enqueue(NewJob::new("telegram", br#"{"update_id":"4711"}"#.to_vec())).unwrap();
    let claimed = db.claim("telegram", "w", LEASE).unwrap().unwrap();
    let before = db.snapshot();
    match claimed.payload_json::<Update>() {
        Err(Error::Decode { id, type_name, reason }) => {
            assert_eq!(id, claimed.id());
            assert!(type_name.ends_with("typed_payloads::Update"), "{type_name}");
            assert_eq!(reason, r#"invalid type: string "4711", expected i64 at line 1 column 19"#);
        }
        other => panic!("expected Decode, got {other:?}"),
    }
    let job = db.job(claimed.id()).unwrap().unwrap();
    let text = job.payload_json::<Update>().unwrap_err().to_string();
    assert!(text.starts_with(&format!("job {}'s payload does not decode as ", claimed.id())), "{text}");
    assert!(text.ends_with("Update: invalid type: string \"4711\", expected i64 at line 1 column 19"), "{text}");
    assert_eq!(db.snapshot(), before, "decoding wrote nothing");
    db.complete(&claimed.token).unwrap();
}

fn json_handler_gets_the_decoded_value_and_exhausts_poison_at_once_without_calling_it<H: Harness>(h: &H) {
    let db = Db::new(h);
    let poison: [&[u8]; 3] =
        [b"\xff not json", br#"{"update_id":1}"#, br#"{"update_id":2,"message":{"chat":{"id":"x"},"text":""}}"#];
    let mut poison_ids: Vec<JobId> = Vec::new();
    for payload in poison {
        // Five attempts each: a poison message must not use more than one.
        let id = db.enqueue(NewJob::new("telegram", payload.to_vec()).max_attempts(5)).unwrap().id();
        poison_ids.push(id);
    }
    let good = db.enqueue(NewJob::json("telegram", &update(7, "hello")).unwrap()).unwrap().id();

    let calls = Arc::new(AtomicUsize::new(0));
    let seen: Arc<Mutex<Vec<(JobId, Update)>>> = Arc::default();
    let pool = {
        let (calls, seen) = (calls.clone(), seen.clone());
        WorkerPool::builder(db.queue.clone(), "telegram")
            .workers(2)
            .poll_interval(Duration::from_millis(5))
            .json_handler(move |attempt, update: Update| {
                calls.fetch_add(1, Ordering::SeqCst);
                seen.lock().unwrap().push((attempt.token().id, update));
                Outcome::Complete
            })
            .start()
            .unwrap()
    };
    assert!(pool.wait_idle(HANG_GUARD).unwrap(), "the pool worked every job");
    let report = pool.shutdown(HANG_GUARD).unwrap();

    assert_eq!(calls.load(Ordering::SeqCst), 1, "the handler ran once: for the good job only");
    assert_eq!(*seen.lock().unwrap(), vec![(good, update(7, "hello"))]);
    assert_eq!((report.counters.completed, report.counters.exhausted, report.counters.retried), (1, 3, 0));
    assert_eq!(db.job(good).unwrap().unwrap().state, JobState::Completed);
    let serde_says = [
        "expected value at line 1 column 1",
        "missing field `message` at line 1 column 15",
        "invalid type: string \"x\", expected i64 at line 1 column 42",
    ];
    for (id, serde_says) in poison_ids.iter().zip(serde_says) {
        let job = db.job(*id).unwrap().unwrap();
        assert_eq!((job.state, job.attempt, job.max_attempts), (JobState::Exhausted, 1, 5), "job {id}");
        let reason = job.last_error.unwrap();
        assert!(reason.starts_with(&format!("job {id}'s payload does not decode as ")), "{reason}");
        assert!(reason.ends_with(&format!("typed_payloads::Update: {serde_says}")), "{reason}");
    }
    let exhausted: Vec<JobId> = db.exhaustions(None, 10).unwrap().items.iter().map(|e| e.token.id).collect();
    assert_eq!(exhausted, poison_ids, "durable exhaustions awaiting acknowledgement");
}

/// An enum a payload names by a string: serde's "unknown variant" message quotes the string
/// it got, NUL bytes and all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Kind {
    Text,
    Photo,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Typed {
    kind: Kind,
}

fn json_handler_exhausts_poison_whose_message_quotes_a_nul_byte<H: Harness>(h: &H) {
    let db = Db::new(h);
    let poison = db.enqueue(NewJob::new("q", br#"{"kind":"\u0000"}"#.to_vec()).max_attempts(5)).unwrap().id();
    let good = db.enqueue(NewJob::json("q", &Typed { kind: Kind::Photo }).unwrap()).unwrap().id();
    let calls = Arc::new(AtomicUsize::new(0));
    let pool = {
        let calls = calls.clone();
        WorkerPool::builder(db.queue.clone(), "q")
            .workers(2)
            .lease(LEASE)
            .poll_interval(Duration::from_millis(5))
            .json_handler(move |_, typed: Typed| {
                assert_eq!(typed.kind, Kind::Photo);
                calls.fetch_add(1, Ordering::SeqCst);
                Outcome::Complete
            })
            .start()
            .unwrap()
    };
    assert!(pool.wait_idle(HANG_GUARD).unwrap(), "the pool worked both jobs");
    let counters = pool.shutdown(HANG_GUARD).unwrap().counters;
    assert_eq!((counters.completed, counters.exhausted, counters.errors), (1, 1, 0), "{counters:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(db.job(good).unwrap().unwrap().state, JobState::Completed);
    let job = db.job(poison).unwrap().unwrap();
    assert_eq!((job.state, job.attempt), (JobState::Exhausted, 1));
    let reason = job.last_error.unwrap();
    assert!(reason.contains(&format!("unknown variant `{}`", fenceq::NUL_SHOWN_AS)), "{reason}");
}
