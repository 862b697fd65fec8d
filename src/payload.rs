//! Typed payloads (feature `serde`): a job built from any `Serialize` value, a payload read
//! as any `Deserialize` type, and a pool handler that receives the decoded value.
//!
//! The encoding is JSON, through serde_json, because a JSON payload stays readable where
//! people look at jobs (`fenceq show` and `fenceq list` print a UTF-8 payload as text), it is
//! what the CLI's `enqueue --payload` takes, and it is what a producer in another language (a
//! Python webhook, a shell script with `curl`) already speaks. A payload is still bytes on the
//! row: these calls are conveniences over [`NewJob::new`] and [`Attempt::payload`], and jobs
//! of either kind share a queue.

use crate::error::{Error, Result};
use crate::job::{Claimed, Exhaustion, Job, JobId, NewJob, UnknownOutcome};
use crate::store::Store;
use crate::validate::clip;
use crate::worker::{Attempt, Outcome, WorkerPoolBuilder};
use serde::de::{Deserialize, DeserializeOwned};
use serde::Serialize;
use std::any::type_name;

impl NewJob {
    /// A job for `queue` whose payload is `value` encoded as JSON, with the defaults of
    /// [`NewJob::new`] (chain `.key(..)`, `.delay(..)` as usual). Feature `serde`.
    ///
    /// ```
    /// # use fenceq::{NewJob, Queue};
    /// #[derive(serde::Serialize)]
    /// struct Reminder { chat_id: i64, text: String }
    ///
    /// # let queue = Queue::open_in_memory()?;
    /// let job = NewJob::json("reminders", &Reminder { chat_id: 42, text: "stand up".into() })?.key("reminder:42");
    /// queue.enqueue(job)?;
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `InvalidInput` (of `payload`) when `value` does not encode as JSON: a map whose keys
    /// are not strings (or numbers), or an error of the type's own `Serialize`. The message
    /// names the type and serde_json's error. The payload's size is checked by `enqueue`,
    /// against the queue's limit, like any other payload's.
    pub fn json<T: Serialize + ?Sized>(queue: impl Into<String>, value: &T) -> Result<NewJob> {
        let payload = serde_json::to_vec(value).map_err(|e| {
            Error::invalid("payload", format!("{} does not encode as JSON: {}", type_name::<T>(), clip(&e.to_string())))
        })?;
        Ok(NewJob::new(queue, payload))
    }
}

/// `payload` decoded from JSON as `T`, or [`Error::Decode`] naming job `id`, the type and
/// serde_json's message.
fn decode<'a, T: Deserialize<'a>>(id: JobId, payload: &'a [u8]) -> Result<T> {
    serde_json::from_slice(payload).map_err(|e| Error::Decode {
        id,
        type_name: type_name::<T>(),
        reason: clip(&e.to_string()).into_owned(),
    })
}

/// The `payload_json` method of a type that carries a payload, with its docs.
macro_rules! payload_json {
    ($type:ty, $what:literal, $id:expr) => {
        impl $type {
            #[doc = concat!("The ", $what, "'s payload decoded from JSON as `T` (feature `serde`); `T` may borrow from it")]
            /// (a `&str` field). See [`NewJob::json`] for the other side.
            ///
            /// # Errors
            ///
            /// [`Error::Decode`] when the payload is not JSON, or not JSON of `T`'s shape (a
            /// missing field, a wrong type): it names the job, the type and serde_json's
            /// message with the line and column. Decoding changes nothing.
            pub fn payload_json<'a, T: Deserialize<'a>>(&'a self) -> Result<T> {
                let id: fn(&$type) -> JobId = $id;
                decode(id(self), &self.payload)
            }
        }
    };
}

payload_json!(Claimed, "claimed job", |c| c.token.id);
payload_json!(Job, "job", |j| j.id);
payload_json!(Exhaustion, "exhausted job", |e| e.token.id);
payload_json!(UnknownOutcome, "unknown outcome's job", |u| u.token.id);

impl<S: Store> Attempt<S> {
    /// The job's payload decoded from JSON as `T` (feature `serde`); `T` may borrow from it.
    /// [`WorkerPoolBuilder::json_handler`] does this before it calls its handler.
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] when the payload is not JSON, or not JSON of `T`'s shape: it names
    /// the job, the type and serde_json's message. Decoding again fails the same way: return
    /// `Outcome::Exhaust`, not a retry.
    pub fn payload_json<'a, T: Deserialize<'a>>(&'a self) -> Result<T> {
        decode(self.claimed.token.id, &self.claimed.payload)
    }
}

impl<S: Store> WorkerPoolBuilder<S> {
    /// The function that works one attempt, given the payload decoded from JSON as `T`
    /// (feature `serde`); it replaces any [`handler`](WorkerPoolBuilder::handler) set before.
    ///
    /// A payload that does not decode as `T` is a poison message: no retry can change it. The
    /// pool never calls `handler` with it: the attempt is exhausted at once, whatever attempts
    /// are left, with the [`Error::Decode`] text as its reason (`job 7's payload does not
    /// decode as bot::Update: missing field `update_id` at line 1 column 15`), and a warning
    /// is logged. It then waits in `fenceq exhausted` for someone to look: acknowledge it, or
    /// `replay` it once the code reads that shape.
    ///
    /// ```
    /// # use fenceq::{NewJob, Outcome, Queue, WorkerPool};
    /// # use std::time::Duration;
    /// #[derive(serde::Deserialize)]
    /// struct Reminder { chat_id: i64, text: String }
    ///
    /// # let queue = Queue::open_in_memory()?;
    /// let pool = WorkerPool::builder(queue.clone(), "reminders")
    ///     .json_handler(|_attempt, reminder: Reminder| {
    ///         println!("to {}: {}", reminder.chat_id, reminder.text);
    ///         Outcome::Complete
    ///     })
    ///     .start()?;
    /// queue.enqueue(NewJob::new("reminders", br#"{"chat_id":42,"text":"stand up"}"#.to_vec()))?;
    /// queue.enqueue(NewJob::new("reminders", b"not json".to_vec()))?;   // exhausted at once
    /// assert!(pool.wait_idle(Duration::from_secs(10))?);
    /// let report = pool.shutdown(Duration::from_secs(10))?;
    /// assert_eq!((report.counters.completed, report.counters.exhausted), (1, 1));
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    pub fn json_handler<T, F>(self, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(&mut Attempt<S>, T) -> Outcome + Send + Sync + 'static,
    {
        self.handler(move |attempt| match attempt.payload_json::<T>() {
            Ok(value) => handler(attempt, value),
            Err(error) => {
                tracing::warn!(job = %attempt.token().id, attempt = attempt.attempt(), %error,
                    "payload does not decode; exhausting the job without calling the handler");
                Outcome::Exhaust(error.to_string())
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Update {
        update_id: i64,
        text: String,
    }

    /// A type whose `Serialize` always fails.
    struct Refuses;

    impl Serialize for Refuses {
        fn serialize<S: serde::Serializer>(&self, _: S) -> std::result::Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("refused on purpose"))
        }
    }

    #[test]
    fn new_job_json_encodes_the_value_as_json_text() {
        let job = NewJob::json("telegram", &Update { update_id: 7, text: "hi".into() }).unwrap().key("update:7");
        assert_eq!(job.payload, br#"{"update_id":7,"text":"hi"}"#);
        assert_eq!((job.queue.as_str(), job.key.as_deref()), ("telegram", Some("update:7")));
    }

    #[test]
    fn new_job_json_refuses_a_value_that_does_not_encode_and_names_the_type() {
        let mut tuple_keys = BTreeMap::new();
        tuple_keys.insert((1, 2), "x");
        match NewJob::json("q", &tuple_keys) {
            Err(Error::InvalidInput { what: "payload", reason }) => {
                assert!(reason.contains("BTreeMap<(i32, i32), &str>"), "{reason}");
                assert!(reason.contains("does not encode as JSON: key must be a string"), "{reason}");
            }
            other => panic!("expected InvalidInput, got {other:?}"),
        }
        match NewJob::json("q", &Refuses) {
            Err(Error::InvalidInput { what: "payload", reason }) => {
                assert!(
                    reason.ends_with("payload::tests::Refuses does not encode as JSON: refused on purpose"),
                    "{reason}"
                );
            }
            other => panic!("expected InvalidInput, got {other:?}"),
        }
    }

    #[test]
    fn decode_names_the_job_the_type_and_where_it_stopped() {
        let good: Update = decode(JobId(3), br#"{"update_id":3,"text":"ok"}"#).unwrap();
        assert_eq!(good, Update { update_id: 3, text: "ok".into() });
        let borrowed: BTreeMap<&str, &str> = decode(JobId(3), br#"{"a":"b"}"#).unwrap();
        assert_eq!(borrowed["a"], "b");
        for (payload, serde_says) in [
            (&b"not json"[..], "expected ident at line 1 column 2"),
            (br#"{"update_id":3}"#, "missing field `text` at line 1 column 15"),
            (br#"{"update_id":"3","text":"x"}"#, "invalid type: string \"3\", expected i64 at line 1 column 16"),
            (b"\xff\xfe", "expected value at line 1 column 1"),
        ] {
            let error = decode::<Update>(JobId(3), payload).unwrap_err();
            let text = error.to_string();
            assert!(matches!(error, Error::Decode { id: JobId(3), .. }), "{error:?}");
            assert!(text.starts_with("job 3's payload does not decode as "), "{text}");
            assert!(text.ends_with(&format!("payload::tests::Update: {serde_says}")), "{text}");
        }
    }

    #[test]
    fn a_long_decode_message_is_cut() {
        let long = format!(r#"{{"update_id":"{}","text":"x"}}"#, "9".repeat(10_000));
        match decode::<Update>(JobId(1), long.as_bytes()) {
            Err(Error::Decode { reason, .. }) => assert_eq!(reason.len(), crate::MAX_ERROR_LEN),
            other => panic!("expected Decode, got {other:?}"),
        }
    }
}
