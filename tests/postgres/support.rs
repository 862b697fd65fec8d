//! Fixtures of the PostgreSQL tests (the multi-process and crash tests use most of it, the
//! others its server and its schema clean-up): the test server from `FENCEQ_POSTGRES_URL`, a
//! schema of a test's own, raw SQL, the domain tables a handler writes with its completion,
//! child processes (this test binary, run with `--ignored --exact`) whose marked stdout lines are
//! collected, and signals sent with the system's `kill` program (std has no signal call and
//! the crate forbids `unsafe`). What is not PostgreSQL's own (`T0`, `LEASE`, `HANG_GUARD`,
//! wall-clock instants, a child process of this binary) comes from the conformance kit and is
//! re-exported here.
//!
//! The SQLite binary includes this file too (`#[path]`), for the scenarios of its own that
//! also run on PostgreSQL (`pool_settle`, `web`).
#![allow(dead_code)]

use fenceq::diesel::connection::SimpleConnection;
use fenceq::diesel::sql_types::{BigInt, Integer, Text, Uuid as SqlUuid};
use fenceq::diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
use fenceq::{ClaimToken, PostgresStore, Queue};
use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use fenceq_conformance::{alone_in_a_process, child_process, ci, env_or, spin_until, wall_ms, LEASE, T0};

/// The prefix of every line a child prints for its parent (libtest writes `test name ... `
/// without a newline before a child's first line, so the marker may start mid-line).
pub const MARK: &str = "@@ ";

/// The test server's URL, or `None` (after saying so) when there is none outside CI.
pub fn server() -> Option<String> {
    match std::env::var("FENCEQ_POSTGRES_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if ci() => {
            panic!("FENCEQ_POSTGRES_URL is not set, and CI=true requires the PostgreSQL tests (scripts/postgres start)")
        }
        _ => {
            eprintln!(
                "skipped: FENCEQ_POSTGRES_URL is not set (scripts/postgres start; eval \"$(scripts/postgres env)\")"
            );
            None
        }
    }
}

/// `url` with `application_name` set, so that the server's `pg_stat_activity` tells one
/// process's sessions from the others'.
pub fn with_application_name(url: &str, name: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}application_name={name}")
}

/// One test's schema on the server, dropped at the end.
pub struct Scratch {
    pub url: String,
    pub schema: String,
}

impl Scratch {
    pub fn new() -> Option<Scratch> {
        let url = server()?;
        Some(Scratch::on(url))
    }

    pub fn on(url: String) -> Scratch {
        let schema = format!("fenceq_test_{}", uuid::Uuid::new_v4().simple());
        Scratch { url, schema }
    }

    /// A builder on the test's schema (the server's clock, the default settings).
    pub fn builder(&self) -> fenceq::QueueBuilder<fenceq::PostgresOptions> {
        Queue::builder().url(self.url.clone()).schema(self.schema.clone())
    }

    pub fn open(&self) -> Queue<PostgresStore> {
        self.builder().open_postgres().expect("open the test schema")
    }

    /// A connection of the test's own, in the schema.
    pub fn raw(&self) -> PgConnection {
        raw_in(&self.url, &self.schema)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        drop_schema(&self.url, &self.schema);
    }
}

/// Drops a test's schema and everything in it (what every test's scratch does at its end).
pub fn drop_schema(url: &str, schema: &str) {
    if let Ok(mut conn) = PgConnection::establish(url) {
        let _ = conn.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
    }
}

pub fn raw_in(url: &str, schema: &str) -> PgConnection {
    let mut conn = PgConnection::establish(url).expect("a raw connection");
    conn.batch_execute(&format!("SET search_path TO \"{schema}\", public; SET lock_timeout = '30s'")).unwrap();
    conn
}

#[derive(QueryableByName)]
struct N {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// A query's one `bigint` column `n`.
pub fn scalar(conn: &mut PgConnection, sql: &str) -> i64 {
    sql_query(sql).get_result::<N>(conn).unwrap_or_else(|e| panic!("{sql}: {e}")).n
}

#[derive(QueryableByName, Debug, Clone, PartialEq, Eq)]
pub struct Attempted {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = Integer)]
    pub attempt: i32,
}

/// Rows of (`id`, `attempt`).
pub fn attempts(conn: &mut PgConnection, sql: &str) -> Vec<Attempted> {
    sql_query(sql).load::<Attempted>(conn).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The running jobs a worker id holds, as the server sees them.
pub fn held_by(conn: &mut PgConnection, worker: &str) -> Vec<Attempted> {
    sql_query("SELECT id, attempt FROM fenceq_jobs WHERE state = 'running' AND worker = $1 ORDER BY id")
        .bind::<Text, _>(worker)
        .load::<Attempted>(conn)
        .unwrap()
}

/// Sessions on the server whose `application_name` is `name`.
pub fn sessions_of(conn: &mut PgConnection, name: &str) -> i64 {
    sql_query("SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1")
        .bind::<Text, _>(name)
        .get_result::<N>(conn)
        .unwrap()
        .n
}

#[derive(QueryableByName)]
struct Doing {
    #[diesel(sql_type = Text)]
    doing: String,
}

/// What the sessions named `name` are doing (state, wait event, query), for failure messages.
pub fn sessions_doing(conn: &mut PgConnection, name: &str) -> Vec<String> {
    sql_query(
        "SELECT concat_ws(' | ', state, wait_event_type, wait_event, left(query, 60)) AS doing
         FROM pg_stat_activity WHERE application_name = $1",
    )
    .bind::<Text, _>(name)
    .load::<Doing>(conn)
    .map(|rows| rows.into_iter().map(|r| r.doing).collect())
    .unwrap_or_default()
}

/// The domain tables of the exactly-once checks, in `schema`: `settle_log`, one row per
/// completion a handler committed (written in the completion's own transaction by
/// `complete_logged`), and `completions`, one row per update of a job row into `completed`
/// whoever made it (a trigger), so that a second settle of any kind is visible.
pub fn create_domain_tables(conn: &mut PgConnection, schema: &str) {
    conn.batch_execute(&format!(
        "CREATE TABLE \"{schema}\".settle_log (job_id BIGINT NOT NULL, attempt INTEGER NOT NULL,
                                             claim_id UUID NOT NULL, process INTEGER NOT NULL);
         CREATE TABLE \"{schema}\".completions (job_id BIGINT NOT NULL, attempt INTEGER NOT NULL, claim_id UUID);
         CREATE FUNCTION \"{schema}\".log_completion() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO \"{schema}\".completions VALUES (NEW.id, NEW.attempt, NEW.claim_id);
             RETURN NULL;
         END $$;
         CREATE TRIGGER log_completion AFTER UPDATE ON \"{schema}\".fenceq_jobs
             FOR EACH ROW WHEN (NEW.state = 'completed') EXECUTE FUNCTION \"{schema}\".log_completion();"
    ))
    .unwrap();
}

/// The `settle_log` row of a completion, for `complete_with`'s closure.
pub fn log_settle(tx: &fenceq::PgTx, token: &ClaimToken, process: i32) -> fenceq::Result<()> {
    sql_query("INSERT INTO settle_log (job_id, attempt, claim_id, process) VALUES ($1, $2, $3, $4)")
        .bind::<BigInt, _>(token.id.0)
        .bind::<Integer, _>(token.attempt as i32)
        .bind::<SqlUuid, _>(token.claim_id.0)
        .bind::<Integer, _>(process)
        .execute(&mut *tx.conn())?;
    Ok(())
}

/// What the exactly-once checks found; every count but `jobs` and `completed` must be 0.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    pub jobs: i64,
    pub completed: i64,
    /// Jobs without exactly one `settle_log` row.
    pub not_settled_once: i64,
    /// Jobs without exactly one transition into `completed`.
    pub not_completed_once: i64,
    /// `settle_log` rows whose attempt or claim id is not the job's final one.
    pub settles_not_final: i64,
    /// Transitions into `completed` whose attempt or claim id is not the job's final one.
    pub completions_not_final: i64,
}

pub fn ledger(conn: &mut PgConnection) -> Ledger {
    Ledger {
        jobs: scalar(conn, "SELECT count(*) AS n FROM fenceq_jobs"),
        completed: scalar(conn, "SELECT count(*) AS n FROM fenceq_jobs WHERE state = 'completed'"),
        not_settled_once: scalar(
            conn,
            "SELECT count(*) AS n FROM fenceq_jobs j
             WHERE (SELECT count(*) FROM settle_log s WHERE s.job_id = j.id) <> 1",
        ),
        not_completed_once: scalar(
            conn,
            "SELECT count(*) AS n FROM fenceq_jobs j
             WHERE (SELECT count(*) FROM completions c WHERE c.job_id = j.id) <> 1",
        ),
        settles_not_final: scalar(
            conn,
            "SELECT count(*) AS n FROM settle_log s LEFT JOIN fenceq_jobs j ON j.id = s.job_id
             WHERE j.id IS NULL OR j.attempt <> s.attempt OR j.claim_id IS DISTINCT FROM s.claim_id",
        ),
        completions_not_final: scalar(
            conn,
            "SELECT count(*) AS n FROM completions c LEFT JOIN fenceq_jobs j ON j.id = c.job_id
             WHERE j.id IS NULL OR j.attempt <> c.attempt OR j.claim_id IS DISTINCT FROM c.claim_id",
        ),
    }
}

/// A child process and the marked lines of its stdout, read as they come (so that the pipe
/// never fills).
pub struct ChildProc {
    pub name: String,
    pub child: Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

/// How a child ended: its status and every marked line it printed.
pub struct Ended {
    pub name: String,
    pub status: ExitStatus,
    pub lines: Vec<String>,
}

impl ChildProc {
    /// Runs the ignored test `entry` of this binary (its full path,
    /// `concat!(module_path!(), "::name")`, as [`child_process`] takes it) with `env`.
    pub fn spawn(name: &str, entry: &str, env: &[(&str, String)]) -> ChildProc {
        let mut command = child_process(entry);
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find(MARK) {
                    sink.lock().unwrap().push(line[at + MARK.len()..].to_string());
                }
            }
        });
        ChildProc { name: name.to_string(), child, lines, reader: Some(reader) }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The marked lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits (bounded by `deadline`; on the deadline the child is killed and the test fails)
    /// for the child to end, and returns how it ended.
    pub fn wait(mut self, deadline: Instant) -> Ended {
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("child {} did not end in time; its lines: {:?}", self.name, self.lines());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        let lines = self.lines();
        Ended { name: self.name.clone(), status, lines }
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        // A test that failed half-way leaves no child behind (a stopped one is killed too).
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sends `signal` (`STOP`, `CONT`) to `pid` with the system's `kill`.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

/// Polls `done` every few milliseconds until it is true; panics with `what` after `bound`.
pub fn wait_for(what: &str, bound: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !done() {
        assert!(Instant::now() < deadline, "timed out after {bound:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The value of `key=` in a line `word key=value key=value`.
pub fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
        .parse()
        .unwrap()
}

/// A server (or formation) of one test's own, started by one of the repository's scripts in
/// a directory of its own (named by `dir_var`: `FENCEQ_POSTGRES_DIR` for `scripts/postgres`,
/// `FENCEQ_POSTGRES_HA_DIR` for `scripts/postgres-ha`), and stopped, its directory removed,
/// when dropped.
pub struct ScriptedServer {
    script: std::path::PathBuf,
    dir_var: &'static str,
    /// Where the script keeps it.
    pub dir: std::path::PathBuf,
    /// The URL its `start` printed.
    pub url: String,
}

impl ScriptedServer {
    /// Runs `scripts/<script> start` in a new directory of the system's temporary directory.
    pub fn start(script: &str, dir_var: &'static str) -> ScriptedServer {
        let dir = std::env::temp_dir().join(format!("fenceq-{script}-{}", uuid::Uuid::new_v4().simple()));
        let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts").join(script);
        let mut server = ScriptedServer { script, dir_var, dir, url: String::new() };
        let out = server.run("start");
        server.url = String::from_utf8_lossy(&out.stdout).trim().lines().last().unwrap_or_default().to_string();
        assert!(server.url.starts_with("postgres://"), "no URL from {} start: {out:?}", server.script.display());
        server
    }

    /// Runs the script's `verb` on this server; panics unless it succeeds.
    pub fn run(&self, verb: &str) -> std::process::Output {
        self.run_with(&[verb])
    }

    /// Runs the script with `args` (a verb and its arguments); panics unless it succeeds.
    pub fn run_with(&self, args: &[&str]) -> std::process::Output {
        let out = Command::new(&self.script).args(args).env(self.dir_var, &self.dir).output().unwrap();
        let shown = args.join(" ");
        assert!(out.status.success(), "{} {shown}: {}", self.script.display(), String::from_utf8_lossy(&out.stderr));
        out
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        let _ = Command::new(&self.script).arg("stop").env(self.dir_var, &self.dir).output();
    }
}

/// A TCP proxy on a loopback port of its own in front of a database server, which a test
/// takes down (every connection cut, the port refusing new ones) and brings back on the same
/// port: an outage or a failover of the server as a dashboard started through it sees it,
/// without stopping the server other tests use.
pub struct Proxy {
    port: u16,
    upstream: std::net::SocketAddr,
    up: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// A proxy to the server of `url` (`postgres://USER@HOST:PORT/DB`), up.
    pub fn new(url: &str) -> Proxy {
        let hostport = url.split_once('@').expect("USER@HOST").1.split('/').next().unwrap();
        let upstream = std::net::ToSocketAddrs::to_socket_addrs(hostport).unwrap().next().unwrap();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut proxy = Proxy { port, upstream, up: Arc::default(), open: Arc::default(), accept: None };
        proxy.start();
        proxy
    }

    /// `url` with the proxy's address in place of the server's.
    pub fn url(&self, url: &str) -> String {
        let (head, rest) = url.split_once('@').unwrap();
        let (_, path) = rest.split_once('/').unwrap();
        format!("{head}@127.0.0.1:{}/{path}", self.port)
    }

    /// Listens again (on the same port) and passes new connections on.
    pub fn start(&mut self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).expect("the proxy's port again");
        listener.set_nonblocking(true).unwrap();
        self.up.store(true, Ordering::SeqCst);
        let (up, open, upstream) = (self.up.clone(), self.open.clone(), self.upstream);
        self.accept = Some(std::thread::spawn(move || {
            while up.load(Ordering::SeqCst) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                let Ok(server) = TcpStream::connect(upstream) else { continue };
                let mut open = open.lock().unwrap();
                open.push(client.try_clone().unwrap());
                open.push(server.try_clone().unwrap());
                for (mut from, mut to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)]
                {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        }));
    }

    /// Cuts every connection and stops listening (new connections are refused).
    pub fn down(&mut self) {
        self.up.store(false, Ordering::SeqCst);
        if let Some(accept) = self.accept.take() {
            accept.join().unwrap();
        }
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.down();
    }
}
