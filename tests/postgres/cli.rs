//! The `fenceq` operator CLI on PostgreSQL: the real binary run as a process with
//! `--db $FENCEQ_POSTGRES_URL --schema S`, against a fresh schema per test that the test
//! fills through the library API (and drops at the end). Every operator command runs with
//! its guards (`--dry-run`, `--expect`, `--by`, `--note`) at least once, and so does
//! `demo --db URL` (its totals add up, as tests/sqlite/demo.rs checks on SQLite). (`bench --db
//! URL` is the `fenceq-bench` program's: crates/bench/tests/postgres.rs.)
//!
//! Without `FENCEQ_POSTGRES_URL` (`scripts/postgres start; eval "$(scripts/postgres env)"`)
//! each test says it skipped, except under `CI=true`, where it fails. Nothing sleeps: the
//! one test that needs time to pass (reap, prune of rows settled "now") spins on the system
//! clock, which the CLI process reads too, bounded by 50 ms of `Instant` time.
#![cfg(all(feature = "cli", feature = "postgres"))]

use assert_cmd::Command;
use fenceq::diesel::connection::SimpleConnection;
use fenceq::diesel::sql_types::{BigInt, Integer, Nullable, Text};
use fenceq::diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
use fenceq::{JobId, JobState, NewJob, PostgresStore, Queue, SCHEMA_VERSION};
use serde_json::Value;
use std::time::{Duration, Instant};

use crate::cli_support::{run_cmd, Run};
use crate::support::{server, LEASE};

// ------------------------------------------------------------------------------- harness

/// One test's schema on the server, dropped (with every schema named after it) at the end.
struct Scratch {
    url: String,
    schema: String,
}

impl Scratch {
    fn new() -> Option<Scratch> {
        let url = server()?;
        Some(Scratch { url, schema: format!("fenceq_cli_{}", uuid::Uuid::new_v4().simple()) })
    }

    /// The library's handle on the test's schema (created if missing), on the system clock,
    /// as the CLI process uses.
    fn queue(&self) -> Queue<PostgresStore> {
        Queue::builder().url(self.url.clone()).schema(self.schema.clone()).open_postgres().expect("open the schema")
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::cargo_bin("fenceq").expect("the fenceq binary is built");
        cmd.args(["--db", &self.url, "--schema", &self.schema]).args(args);
        cmd
    }

    fn run(&self, args: &[&str]) -> Run {
        run_cmd(self.cmd(args))
    }

    fn raw(&self) -> PgConnection {
        PgConnection::establish(&self.url).expect("a raw connection")
    }

    /// Schemas whose name starts with this test's schema (the bench's scratch schemas too).
    fn schemas(&self) -> Vec<String> {
        #[derive(QueryableByName)]
        struct Name {
            #[diesel(sql_type = Text)]
            nspname: String,
        }
        let names: Vec<Name> =
            sql_query("SELECT nspname::text AS nspname FROM pg_namespace WHERE starts_with(nspname, $1)")
                .bind::<Text, _>(&self.schema)
                .load(&mut self.raw())
                .unwrap();
        names.into_iter().map(|n| n.nspname).collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Ok(mut conn) = PgConnection::establish(&self.url) {
            let schemas = self.schemas();
            for schema in schemas {
                let _ = conn.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
            }
        }
    }
}

fn enqueue(queue: &Queue<PostgresStore>, job: NewJob) -> JobId {
    queue.enqueue(job).unwrap().id()
}

/// Enqueues a job alone in `name` and claims it with `lease`.
fn claimed_for(queue: &Queue<PostgresStore>, name: &str, lease: Duration, attempts: u32) -> fenceq::Claimed {
    let id = enqueue(queue, NewJob::new(name, name.as_bytes().to_vec()).max_attempts(attempts));
    let claim = queue.claim(name, "w", lease).unwrap().expect("a due job");
    assert_eq!(claim.id(), id, "the queue held only this job");
    claim
}

fn claimed(queue: &Queue<PostgresStore>, name: &str) -> fenceq::Claimed {
    claimed_for(queue, name, LEASE, 5)
}

fn state(queue: &Queue<PostgresStore>, id: JobId) -> JobState {
    queue.job(id).unwrap().expect("job exists").state
}

fn job_count(queue: &Queue<PostgresStore>) -> u64 {
    queue.stats().unwrap().queues.iter().map(|q| q.total()).sum()
}

/// Spins (at most 50 ms) until the system clock, which the CLI reads, is past `at`.
fn until_past(queue: &Queue<PostgresStore>, at: i64) {
    let started = Instant::now();
    while queue.now_ms() <= at {
        assert!(started.elapsed() < Duration::from_millis(50), "the system clock did not move");
        std::hint::spin_loop();
    }
}

// ------------------------------------------------------------------------------- schema

#[test]
fn migrate_creates_the_schema_and_other_commands_refuse_without_it() {
    let Some(s) = Scratch::new() else { return };
    // No fenceq tables in the schema: reading and changing commands refuse, creating nothing.
    let err = s.run(&["stats"]).error().to_string();
    assert!(err.contains("holds no fenceq queue (schema version 0)") && err.contains("fenceq migrate"), "{err}");
    s.run(&["cancel", "1"]).error();
    s.run(&["enqueue", "--queue", "q", "--payload", "x", "--dry-run"]).ok();
    let dry = s.run(&["migrate", "--dry-run", "--json"]).json();
    assert_eq!(
        (dry["before"].clone(), dry["after"].clone(), dry["created"].clone()),
        (0.into(), 0.into(), false.into())
    );
    assert!(s.schemas().is_empty(), "the dry runs created no schema: {:?}", s.schemas());

    let text = s.run(&["migrate"]).ok().to_string();
    assert!(text.contains("schema version before: 0 (no fenceq tables yet)"), "{text}");
    assert!(text.contains(&format!("schema version after: {SCHEMA_VERSION} (created)")), "{text}");
    assert_eq!(s.schemas(), vec![s.schema.clone()]);
    let again = s.run(&["migrate", "--json"]).json();
    assert_eq!((again["before"].clone(), again["after"].clone()), (SCHEMA_VERSION.into(), SCHEMA_VERSION.into()));
    assert_eq!(again["created"], false);
    assert!(s.run(&["migrate", "--dry-run"]).ok().contains("already current"));
    assert!(s.run(&["stats"]).ok().starts_with("no jobs in postgres"));

    // A newer schema is refused, untouched.
    let newer = SCHEMA_VERSION + 1;
    s.raw()
        .batch_execute(&format!(
            "INSERT INTO \"{}\".fenceq_schema_version (version, name) VALUES ({newer}, 'from the future')",
            s.schema
        ))
        .expect("a newer version row");
    let version = || {
        #[derive(QueryableByName)]
        struct V {
            #[diesel(sql_type = BigInt)]
            v: i64,
        }
        let q = format!("SELECT max(version)::bigint AS v FROM \"{}\".fenceq_schema_version", s.schema);
        sql_query(q).get_result::<V>(&mut s.raw()).map(|v| v.v)
    };
    assert_eq!(version(), Ok(newer));
    let err = s.run(&["migrate"]).error().to_string();
    assert!(err.contains("newer than this fenceq supports"), "{err}");
    assert!(s.run(&["stats"]).error().contains("newer"));
    s.run(&["enqueue", "--queue", "q", "--payload", "x"]).error();
    assert_eq!(version(), Ok(newer), "left untouched");
}

// ------------------------------------------------------------------------------- reading

#[test]
fn reading_commands_show_what_the_library_wrote() {
    let Some(s) = Scratch::new() else { return };
    let queue = s.queue();
    let e = claimed(&queue, "q");
    queue.exhaust(&e.token(), "chat not found").unwrap();
    let u = claimed(&queue, "q");
    queue.mark_unknown(&u.token(), "read timeout").unwrap();
    let c = claimed(&queue, "q");
    queue.complete(&c.token()).unwrap();
    let r = claimed(&queue, "q");
    let p = enqueue(&queue, NewJob::new("other", b"pending payload".to_vec()).key("k-p"));

    let stats = s.run(&["stats", "--json"]).json();
    let q = stats["queues"].as_array().unwrap().iter().find(|q| q["queue"] == "q").unwrap().clone();
    assert_eq!(
        [&q["running"], &q["completed"], &q["exhausted_unacknowledged"], &q["unknown"]],
        [&Value::from(1), &Value::from(1), &Value::from(1), &Value::from(1)],
        "{stats:#}"
    );
    assert_eq!(stats["totals"]["pending"], 1);
    let text = s.run(&["stats"]).ok().to_string();
    assert!(text.contains("1 exhaustion awaiting acknowledgement") && text.contains("1 unknown outcome"), "{text}");
    let metrics = s.run(&["stats", "--format", "prometheus"]).ok().to_string();
    assert!(metrics.contains("fenceq_jobs{queue=\"q\",state=\"completed\"} 1"), "{metrics}");

    let all = s.run(&["list", "--json"]).json_lines();
    assert_eq!(
        all.iter().map(|j| j["id"].as_i64().unwrap()).collect::<Vec<_>>(),
        [e.id().0, u.id().0, c.id().0, r.id().0, p.0]
    );
    let running = s.run(&["list", "--state", "running", "--json"]).json_lines();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0]["id"], r.id().0);
    let page = s.run(&["list", "--limit", "2", "--after", &e.id().0.to_string(), "--json"]).json_lines();
    assert_eq!(page.iter().map(|j| j["id"].as_i64().unwrap()).collect::<Vec<_>>(), [u.id().0, c.id().0]);

    let shown = s.run(&["show", &p.0.to_string(), "--json"]).json();
    assert_eq!(
        (shown["queue"].clone(), shown["key"].clone(), shown["state"].clone()),
        ("other".into(), "k-p".into(), "pending".into())
    );
    assert!(s.run(&["show", &p.0.to_string()]).ok().contains("pending payload"));
    assert_eq!(s.run(&["show", "999999"]).error(), "error: job 999999 not found");

    let exhausted = s.run(&["exhausted", "--json"]).json_lines();
    assert_eq!(exhausted.len(), 1);
    assert_eq!(exhausted[0]["id"], e.id().0);
    assert!(s.run(&["exhausted"]).ok().contains("chat not found"));
    let unknown = s.run(&["unknown", "--json"]).json_lines();
    assert_eq!(unknown.len(), 1);
    assert_eq!(unknown[0]["id"], u.id().0);
    assert!(s.run(&["unknown", "--queue", "other", "--json"]).json_lines().is_empty());
}

// ------------------------------------------------------------------------------- changing

#[test]
fn enqueue_reports_duplicates_and_its_guards_change_nothing() {
    let Some(s) = Scratch::new() else { return };
    // A fresh schema: the first enqueue creates the queue's tables.
    let first = s.run(&["enqueue", "--queue", "q", "--key", "a", "--payload", "hello", "--json"]).json();
    assert_eq!((first["duplicate"].clone(), first["changed"].clone()), (false.into(), 1.into()));
    let id = first["id"].as_i64().unwrap();
    let dup = s.run(&["enqueue", "--queue", "q", "--key", "a", "--payload", "other", "--json"]).json();
    assert_eq!(
        (dup["duplicate"].clone(), dup["id"].clone(), dup["changed"].clone()),
        (true.into(), id.into(), 0.into())
    );
    let queue = s.queue();
    assert_eq!(queue.job(JobId(id)).unwrap().unwrap().payload, b"hello");

    let dry = s.run(&["enqueue", "--queue", "q", "--key", "b", "--payload", "x", "--dry-run", "--json"]).json();
    assert_eq!(
        (dry["would_change"].clone(), dry["changed"].clone(), dry["id"].clone()),
        (1.into(), 0.into(), Value::Null)
    );
    let err = s.run(&["enqueue", "--queue", "q", "--key", "b", "--payload", "x", "--expect", "0"]).error().to_string();
    assert_eq!(err, "error: --expect 0 but 1 job would change; nothing was changed");
    assert_eq!(job_count(&queue), 1, "neither the dry run nor the refused --expect enqueued");
    assert!(queue.find_by_key("q", "b").unwrap().is_none());
    let text = s
        .run(&["enqueue", "--queue", "q", "--key", "b", "--payload", "x", "--priority", "3", "--expect", "1"])
        .ok()
        .to_string();
    assert!(text.starts_with("new: enqueued job"), "{text}");
    let b = queue.find_by_key("q", "b").unwrap().expect("enqueued");
    assert_eq!(queue.job(b).unwrap().unwrap().priority, 3);
}

#[test]
fn ack_replay_resolve_and_cancel_with_their_guards_and_records() {
    let Some(s) = Scratch::new() else { return };
    let queue = s.queue();
    let decision = |id: JobId| queue.job(id).unwrap().unwrap().decision;
    let exhausted = claimed(&queue, "q");
    queue.exhaust(&exhausted.token(), "why").unwrap();
    let unknown = claimed(&queue, "q");
    queue.mark_unknown(&unknown.token(), "evidence").unwrap();
    let others: Vec<_> = (0..2).map(|_| claimed(&queue, "other")).collect();
    for o in &others {
        queue.exhaust(&o.token(), "why other").unwrap();
    }
    let pending = enqueue(&queue, NewJob::new("q", b"p".to_vec()));
    let (e, u) = (exhausted.id().0.to_string(), unknown.id().0.to_string());

    // ack: a dry run and a wrong --expect change nothing; the real one records --by, --note.
    let dry = s.run(&["ack", &e, "--dry-run", "--json"]).json();
    assert_eq!((dry["would_change"].clone(), dry["changed"].clone()), (1.into(), 0.into()));
    assert_eq!(
        s.run(&["ack", &e, "--expect", "0"]).error(),
        "error: --expect 0 but 1 job would change; nothing was changed"
    );
    assert!(queue.job(exhausted.id()).unwrap().unwrap().acknowledged_at.is_none());
    s.run(&["ack", &e, "--by", "alice", "--note", "alerted"]).ok();
    assert!(queue.job(exhausted.id()).unwrap().unwrap().acknowledged_at.is_some());
    let d = decision(exhausted.id()).expect("recorded");
    assert_eq!(
        (d.action.as_str(), d.by.as_deref(), d.note.as_deref()),
        ("acknowledge", Some("alice"), Some("alerted"))
    );
    assert!(s.run(&["ack", &e]).ok().contains("already acknowledged"));
    // ack --all: the count --expect checks is the count its transaction changes.
    s.run(&["ack", "--all", "--queue", "other", "--expect", "3"]).error();
    let all = s.run(&["ack", "--all", "--queue", "other", "--expect", "2", "--by", "bob", "--json"]).json();
    assert_eq!(all["changed"], 2);
    assert!(others.iter().all(|o| decision(o.id()).is_some_and(|d| d.by.as_deref() == Some("bob"))));

    // replay
    let text = s.run(&["replay", &e, "--dry-run"]).ok().to_string();
    assert!(text.starts_with("dry run: would replay job"), "{text}");
    assert_eq!(state(&queue, exhausted.id()), JobState::Exhausted);
    s.run(&["replay", &e, "--expect", "2"]).error();
    s.run(&["replay", &e, "--by", "carol"]).ok();
    assert_eq!(state(&queue, exhausted.id()), JobState::Pending);
    assert_eq!(decision(exhausted.id()).unwrap().action, "replay");
    let err = s.run(&["replay", &e]).error().to_string();
    assert!(err.contains("is pending; replay needs an exhausted job"), "{err}");

    // resolve
    s.run(&["resolve", &u, "--as", "complete", "--dry-run"]).ok();
    s.run(&["resolve", &u, "--as", "complete", "--expect", "0"]).error();
    assert_eq!(state(&queue, unknown.id()), JobState::Unknown);
    s.run(&["resolve", &u, "--as", "complete", "--by", "dave", "--note", "seen in the chat log"]).ok();
    assert_eq!(state(&queue, unknown.id()), JobState::Completed);
    let d = decision(unknown.id()).unwrap();
    assert_eq!((d.action.as_str(), d.note.as_deref()), ("resolve complete", Some("seen in the chat log")));

    // cancel
    s.run(&["cancel", &pending.0.to_string(), "--dry-run"]).ok();
    s.run(&["cancel", &pending.0.to_string(), "--expect", "0"]).error();
    assert_eq!(state(&queue, pending), JobState::Pending);
    let done = s.run(&["cancel", &u]).error().to_string();
    assert!(done.contains("is completed; cancel needs a pending, waiting or running job"), "{done}");
    let out = s.run(&["cancel", &pending.0.to_string(), "--by", "erin", "--json"]).json();
    assert_eq!(out["changed"], 1);
    assert_eq!(state(&queue, pending), JobState::Cancelled);
    assert_eq!(decision(pending).unwrap().by.as_deref(), Some("erin"));
    assert!(s.run(&["show", &pending.0.to_string()]).ok().contains("cancel by erin"));
}

#[test]
fn pause_and_unpause_with_their_guards() {
    let Some(s) = Scratch::new() else { return };
    let queue = s.queue();
    enqueue(&queue, NewJob::new("q", b"held".to_vec()));
    let dry = s.run(&["pause", "q", "--dry-run", "--json"]).json();
    assert_eq!((dry["would_change"].clone(), dry["changed"].clone()), (1.into(), 0.into()));
    assert_eq!(
        s.run(&["pause", "q", "--expect", "0"]).error(),
        "error: --expect 0 but 1 queue would change; nothing was changed"
    );
    assert!(!queue.is_paused("q").unwrap());
    let text = s.run(&["pause", "q", "--by", "alice", "--note", "outage"]).ok().to_string();
    assert!(text.starts_with("paused queue q") && text.contains("1 pending job held"), "{text}");
    assert!(queue.is_paused("q").unwrap());
    let record = queue.paused_queues().unwrap().into_iter().find(|p| p.queue == "q").unwrap();
    assert_eq!((record.by.as_deref(), record.note.as_deref()), (Some("alice"), Some("outage")));
    assert!(queue.claim("q", "w", LEASE).unwrap().is_none(), "a paused queue's claims find nothing");
    let again = s.run(&["pause", "q", "--json"]).json();
    assert_eq!((again["would_change"].clone(), again["changed"].clone()), (0.into(), 0.into()));
    assert!(s.run(&["stats"]).ok().contains("queue q is paused"));
    s.run(&["unpause", "q", "--dry-run"]).ok();
    assert!(queue.is_paused("q").unwrap());
    s.run(&["unpause", "q", "--expect", "1", "--by", "bob"]).ok();
    assert!(!queue.is_paused("q").unwrap());
    assert!(queue.claim("q", "w", LEASE).unwrap().is_some());
}

#[test]
fn backoff_show_and_clear_with_their_guards() {
    let Some(s) = Scratch::new() else { return };
    let queue = s.queue();
    enqueue(&queue, NewJob::new("q", b"first".to_vec()));
    enqueue(&queue, NewJob::new("q", b"second".to_vec()));
    let token = queue.claim("q", "w", LEASE).unwrap().expect("due").token();
    let snooze = fenceq::Snooze::new(Duration::from_secs(3600)).scope(fenceq::BackoffScope::Queue).reason("429");
    queue.snooze(&token, snooze).unwrap();
    let shown = s.run(&["backoff", "show", "q"]).ok().to_string();
    assert!(shown.starts_with("queue q backs off until ") && shown.ends_with(": 429\n"), "{shown}");
    assert_eq!(s.run(&["stats", "--json"]).json()["backoff_queues"], serde_json::json!(["q"]));
    let dry = s.run(&["backoff", "clear", "q", "--dry-run", "--json"]).json();
    assert_eq!((dry["would_change"].clone(), dry["changed"].clone()), (1.into(), 0.into()));
    assert!(queue.claim("q", "w", LEASE).unwrap().is_none(), "still backing off");
    s.run(&["backoff", "clear", "q", "--expect", "1"]).ok();
    assert!(queue.queue_backoff("q").unwrap().is_none());
    assert!(queue.claim("q", "w", LEASE).unwrap().is_some(), "claimable again at once");
    assert_eq!(s.run(&["backoff", "show"]).ok().trim(), "no queue is backing off");
}

#[test]
fn reap_and_prune_with_their_guards() {
    let Some(s) = Scratch::new() else { return };
    let queue = s.queue();
    let requeue = claimed_for(&queue, "a", Duration::from_millis(1), 3);
    let exhaust = claimed_for(&queue, "b", Duration::from_millis(1), 1);
    let live = claimed(&queue, "c");
    until_past(&queue, requeue.lease_until.max(exhaust.lease_until));

    let dry = s.run(&["reap", "--dry-run", "--json"]).json();
    assert_eq!(
        (dry["requeued"].clone(), dry["exhausted"].clone(), dry["changed"].clone()),
        (1.into(), 1.into(), 0.into())
    );
    assert_eq!(
        s.run(&["reap", "--expect", "1"]).error(),
        "error: --expect 1 but 2 jobs would change; nothing was changed"
    );
    assert_eq!(state(&queue, requeue.id()), JobState::Running);
    let out = s.run(&["reap", "--expect", "2", "--json"]).json();
    assert_eq!(out["changed"], 2);
    assert_eq!(state(&queue, requeue.id()), JobState::Pending);
    assert_eq!(state(&queue, exhaust.id()), JobState::Exhausted);
    assert_eq!(state(&queue, live.id()), JobState::Running);

    queue.complete(&live.token()).unwrap();
    let settled = queue.job(live.id()).unwrap().unwrap().settled_at.expect("settled");
    until_past(&queue, settled);
    let before = job_count(&queue);
    assert_eq!(s.run(&["prune", "--json"]).json()["changed"], 0, "the default 7 days keep a fresh row");
    let dry = s.run(&["prune", "--older-than", "0s", "--dry-run", "--json"]).json();
    assert_eq!((dry["would_change"].clone(), dry["changed"].clone()), (1.into(), 0.into()));
    s.run(&["prune", "--older-than", "0s", "--expect", "2"]).error();
    assert_eq!(job_count(&queue), before);
    let text = s.run(&["prune", "--older-than", "0s", "--expect", "1"]).ok().to_string();
    assert!(text.starts_with("pruned 1 job older than 0s"), "{text}");
    assert!(queue.job(live.id()).unwrap().is_none());
    assert_eq!(job_count(&queue), before - 1);
}

// ------------------------------------------------------------------------------- refusals

#[test]
fn sqlite_only_options_are_refused_and_passwords_never_printed() {
    let Some(s) = Scratch::new() else { return };
    let queue = s.queue();
    let c = claimed(&queue, "q");
    queue.complete(&c.token()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("backup.db");
    let out_arg = out.to_str().unwrap();

    let err = s.run(&["backup", out_arg]).error().to_string();
    assert!(err.contains("pg_dump"), "{err}");
    let pending = enqueue(&queue, NewJob::new("q", b"p".to_vec()));
    let err = s.run(&["cancel", &pending.0.to_string(), "--backup", out_arg]).error().to_string();
    assert!(err.contains("pg_dump") && err.contains("nothing was changed"), "{err}");
    assert_eq!(state(&queue, pending), JobState::Pending);
    let err = s.run(&["prune", "--older-than", "0s", "--backup", out_arg]).error().to_string();
    assert!(err.contains("pg_dump"), "{err}");
    assert!(!out.exists());
    assert!(queue.job(c.id()).unwrap().is_some(), "the refused prune deleted nothing");
    let mut bad = Command::cargo_bin("fenceq").unwrap();
    bad.args(["--db", &s.url, "--schema", "Not-A-Name", "stats"]);
    let err = run_cmd(bad).error().to_string();
    assert!(err.contains("schema"), "{err}");
    // --schema belongs to a PostgreSQL --db.
    let mut file = Command::cargo_bin("fenceq").unwrap();
    file.args(["--db"]).arg(dir.path().join("q.db")).args(["--schema", "x", "stats"]);
    assert!(run_cmd(file).error().contains("--schema"));

    // A password in the URL (the test server trusts every login, so it still connects) is
    // never printed: not in output, hints or errors.
    let Some(at) = s.url.find('@') else { return };
    let Some(scheme) = s.url.find("://") else { return };
    let userinfo = &s.url[scheme + 3..at];
    let user = userinfo.split(':').next().unwrap_or(userinfo);
    let with_password = format!("{}{user}:s3cret-pw{}", &s.url[..scheme + 3], &s.url[at..]);
    let fresh = format!("{}_pw", s.schema);
    let run = |args: &[&str]| {
        let mut cmd = Command::cargo_bin("fenceq").unwrap();
        cmd.args(["--db", &with_password, "--schema", &fresh]).args(args);
        run_cmd(cmd)
    };
    let printed = [
        run(&["stats"]),
        run(&["migrate", "--json"]),
        run(&["stats"]),
        run(&["demo", "--updates", "100", "--workers", "1"]),
    ];
    assert_eq!(printed[0].code, 1, "{}", printed[0].stderr);
    assert!(printed[1].json()["path"].as_str().unwrap().contains(":***@"));
    assert!(printed[2].ok().contains(":***@"));
    assert!(printed[3].ok().contains("Inspect it: fenceq --db"));
    for run in &printed {
        assert!(!run.stdout.contains("s3cret") && !run.stderr.contains("s3cret"), "{}{}", run.stdout, run.stderr);
    }
}

// ------------------------------------------------------------------------------- connection strings

/// The test server's URL (`postgres://USER@HOST:PORT/DB`) as its parts.
struct Parts {
    user: String,
    host: String,
    port: String,
    dbname: String,
}

fn parts(url: &str) -> Parts {
    let rest = url.split_once("://").expect("a URL").1;
    let (userinfo, rest) = rest.split_once('@').expect("a user");
    let (hostport, dbname) = rest.split_once('/').expect("a database");
    let (host, port) = hostport.split_once(':').expect("a port");
    let user = userinfo.split(':').next().unwrap_or(userinfo).to_string();
    Parts { user, host: host.into(), port: port.into(), dbname: dbname.split('?').next().unwrap_or(dbname).into() }
}

/// A libpq key/value string is a PostgreSQL database to the CLI, as it is to the library:
/// it took it for an SQLite file name, created that file (password in its name) in the
/// current directory, and enqueued there.
#[test]
fn a_key_value_db_is_postgres_and_never_names_a_file() {
    let Some(s) = Scratch::new() else { return };
    let p = parts(&s.url);
    let cwd = tempfile::tempdir().unwrap();
    let db = format!("host={} port={} user={} password=WrongPW_letmein dbname={}", p.host, p.port, p.user, p.dbname);
    let spaced =
        format!("host = {} port = {} user = {} password = 'Wrong PW' dbname = {}", p.host, p.port, p.user, p.dbname);
    for (i, db) in [db, spaced].iter().enumerate() {
        let run = |args: &[&str]| {
            let mut cmd = Command::cargo_bin("fenceq").unwrap();
            cmd.current_dir(cwd.path()).args(["--db", db, "--schema", &s.schema]).args(args);
            run_cmd(cmd)
        };
        let out = run(&["enqueue", "--queue", "q", "--payload", "x"]);
        assert!(out.ok().contains("enqueued job"), "{}", out.stdout);
        let stats = run(&["stats", "--json"]);
        assert_eq!(stats.json()["totals"]["pending"], i as u64 + 1);
        let hint = run(&["list", "--queue", "none"]);
        for printed in [&out, &stats, &hint] {
            let text = format!("{}{}", printed.stdout, printed.stderr);
            assert!(!text.contains("WrongPW") && !text.contains("Wrong PW"), "{text}");
        }
        let files: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().collect();
        assert!(files.is_empty(), "files created in the current directory: {files:?}");
    }
    assert_eq!(job_count(&s.queue()), 2, "both jobs went to the PostgreSQL schema");

    // A value that looks like a connection string but cannot be read is refused, never a file.
    let mut cmd = Command::cargo_bin("fenceq").unwrap();
    cmd.current_dir(cwd.path()).args(["--db", "host=h password='s3cret", "enqueue", "--queue", "q", "--payload", "x"]);
    let err = run_cmd(cmd).error().to_string();
    assert!(err.contains("invalid database URL") && !err.contains("s3cret"), "{err}");
    let mut cmd = Command::cargo_bin("fenceq").unwrap();
    cmd.current_dir(cwd.path()).args(["--db", "postgres:", "stats"]);
    let err = run_cmd(cmd).error().to_string();
    assert!(err.contains("postgres:// alone"), "{err}");
    assert!(std::fs::read_dir(cwd.path()).unwrap().next().is_none());

    // `postgres://` alone: every setting from libpq's PG* environment variables.
    let mut cmd = Command::cargo_bin("fenceq").unwrap();
    cmd.current_dir(cwd.path())
        .env("PGHOST", &p.host)
        .env("PGPORT", &p.port)
        .env("PGUSER", &p.user)
        .env("PGDATABASE", &p.dbname)
        .args(["--db", "postgres://", "--schema", &s.schema, "stats", "--json"]);
    assert_eq!(run_cmd(cmd).json()["totals"]["pending"], 2);
}

/// `#` and `?` in a URL's password are the password's to libpq; the CLI added its
/// `gssencmode` before the `#` as if it began a fragment, and the database name became
/// `fenceq_test&connect_timeout=10&...` after 15 s.
#[test]
fn a_url_whose_password_holds_a_hash_or_question_mark_opens_its_database() {
    let Some(s) = Scratch::new() else { return };
    let p = parts(&s.url);
    for password in ["se#cret", "se?cr#et", "se cr#?et"] {
        let db = format!("postgres://{}:{password}@{}:{}/{}", p.user, p.host, p.port, p.dbname);
        let started = Instant::now();
        let mut cmd = Command::cargo_bin("fenceq").unwrap();
        cmd.args(["--db", &db, "--schema", &s.schema, "enqueue", "--queue", "q", "--payload", password]);
        let run = run_cmd(cmd);
        assert!(!run.stdout.contains("cret") && !run.stderr.contains("cret"), "{}{}", run.stdout, run.stderr);
        run.ok();
        assert!(started.elapsed() < Duration::from_secs(3), "{password}: took {:?}", started.elapsed());
    }
    assert_eq!(job_count(&s.queue()), 3);
}

/// A missing database is the server's final word: the CLI says so at once with the server's
/// reason (it waited 15 s for the pool's check-out to time out).
#[test]
fn a_missing_database_is_reported_at_once() {
    let Some(s) = Scratch::new() else { return };
    let p = parts(&s.url);
    let missing = format!("no_db_{}", uuid::Uuid::new_v4().simple());
    let db = format!("postgres://{}:pw-s3cret@{}:{}/{missing}", p.user, p.host, p.port);
    let started = Instant::now();
    let mut cmd = Command::cargo_bin("fenceq").unwrap();
    cmd.args(["--db", &db, "stats"]);
    let run = run_cmd(cmd);
    let took = started.elapsed();
    let line = run.error();
    assert!(line.contains(&format!("database \"{missing}\" does not exist")), "{line}");
    assert!(!line.contains("pw-s3cret"), "{line}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

/// Without `--schema`, a database whose queue lives in a schema of its own: the error names
/// that schema and `--schema`, instead of advising `fenceq migrate`, which would create a
/// second, empty queue in `public`. On a database of the test's own, so that no other
/// test's schema is listed.
#[test]
fn a_forgotten_schema_is_named_instead_of_advising_a_second_queue() {
    let Some(s) = Scratch::new() else { return };
    let p = parts(&s.url);
    let dbname = format!("fenceq_cli_{}", uuid::Uuid::new_v4().simple());
    s.raw().batch_execute(&format!("CREATE DATABASE {dbname}")).unwrap();
    struct Dropped<'a>(&'a Scratch, String);
    impl Drop for Dropped<'_> {
        fn drop(&mut self) {
            let _ = self.0.raw().batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.1));
        }
    }
    let _dropped = Dropped(&s, dbname.clone());
    let db = format!("postgres://{}@{}:{}/{dbname}", p.user, p.host, p.port);
    let run = |args: &[&str]| {
        let mut cmd = Command::cargo_bin("fenceq").unwrap();
        cmd.args(["--db", &db]).args(args);
        run_cmd(cmd)
    };
    run(&["--schema", "bot_queue", "migrate"]).ok();
    for command in [&["stats"][..], &["cancel", "1"], &["list"]] {
        let line = run(command).error().to_string();
        assert!(line.contains("holds no fenceq queue"), "{line}");
        assert!(line.contains("--schema bot_queue"), "{line}");
    }
    // A second schema with a queue: both named.
    run(&["--schema", "audit", "migrate"]).ok();
    let line = run(&["stats"]).error().to_string();
    assert!(line.contains("schemas audit, bot_queue of this database hold one each"), "{line}");
    // Nothing was created in `public`.
    let stats = run(&["--schema", "bot_queue", "stats", "--json"]);
    assert_eq!(stats.json()["totals"]["pending"], 0);
    let mut conn = PgConnection::establish(&db).unwrap();
    #[derive(QueryableByName)]
    struct Found {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let found: Found =
        sql_query("SELECT count(*) AS n FROM pg_tables WHERE schemaname = 'public'").get_result(&mut conn).unwrap();
    assert_eq!(found.n, 0);
}

// ------------------------------------------------------------------------------- demo

/// A figure of the demo's JSON document, as a count.
fn count(s: &Value, name: &str) -> u64 {
    s[name].as_u64().unwrap_or_else(|| panic!("{name} is not a count in {s:#}"))
}

/// The demo's exhausted jobs in the scratch schema, with their attempts and last errors: what
/// a failing count of exhaustions shows.
fn exhausted_jobs(s: &Scratch) -> Vec<(Option<String>, i32, Option<String>)> {
    #[derive(QueryableByName)]
    struct Exhausted {
        #[diesel(sql_type = Nullable<Text>)]
        key: Option<String>,
        #[diesel(sql_type = Integer)]
        attempt: i32,
        #[diesel(sql_type = Nullable<Text>)]
        last_error: Option<String>,
    }
    let rows: Vec<Exhausted> = sql_query(format!(
        "SELECT key, attempt, last_error FROM \"{}\".fenceq_jobs WHERE state = 'exhausted' ORDER BY id",
        s.schema
    ))
    .load(&mut s.raw())
    .unwrap();
    rows.into_iter().map(|r| (r.key, r.attempt, r.last_error)).collect()
}

#[test]
fn the_demo_on_postgres_accounts_for_every_recorded_update() {
    let Some(s) = Scratch::new() else { return };
    let out = s.run(&["--json", "demo", "--updates", "1000", "--workers", "3"]);
    let doc = out.json();
    let n = |name| count(&doc, name);
    assert_eq!(n("deliveries"), n("updates") + n("duplicates_dropped"), "{doc:#}");
    assert_eq!(n("updates"), n("completed") + n("exhausted") + n("unknown"), "{doc:#}");
    assert_eq!(n("replies"), n("completed"), "{doc:#}");
    assert_eq!(n("acknowledged"), n("exhausted"), "{doc:#}");
    assert_eq!(doc["adds_up"], true, "{doc:#}");
    assert_eq!((n("updates"), n("duplicates_dropped")), (1000, 1000 / 7));
    assert_eq!(
        (n("completed"), n("exhausted"), n("unknown")),
        (997, 2, 1),
        "exhausted (key, attempt, last error): {:?}; retries {}",
        exhausted_jobs(&s),
        n("retries")
    );
    assert_eq!(n("stale_writes_rejected"), 2, "the stalled worker's reply and settle");
    assert!(n("retries") >= 100 + 2 * 2, "{doc:#}");
    assert_eq!(doc["db"], format!("{} (schema {})", s.url, s.schema));
    // The schema keeps the same story: the jobs, and one reply row per completed update.
    let queue = s.queue();
    let stats = queue.stats().unwrap().queue(doc["queue"].as_str().unwrap());
    assert_eq!((stats.completed, stats.exhausted_acknowledged, stats.unknown), (997, 2, 1));
    #[derive(QueryableByName)]
    struct N {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let replies: N =
        sql_query(format!("SELECT count(*) AS n FROM \"{}\".demo_replies", s.schema)).get_result(&mut s.raw()).unwrap();
    assert_eq!(replies.n, 997);
    // A second run on the same schema refuses instead of mixing figures.
    let again = s.run(&["--json", "demo", "--updates", "1000", "--workers", "3"]);
    assert!(again.error().contains("already holds 1000 demo jobs; use a new --schema"));
    assert!(again.stdout.is_empty());
}
