//! PostgreSQL logins with passwords, on a throwaway cluster of this test's own
//! (`scripts/postgres` with `FENCEQ_POSTGRES_DIR` pointing elsewhere, as tests/postgres/crash.rs
//! does) whose `pg_hba.conf` asks every role but `postgres` for a SCRAM password over TCP:
//! the server the other tests use trusts every login, so a password that arrived mangled
//! would go unnoticed there.
//!
//! - A password holding `?`, `#`, `@`, `/`, `:` and a space, in a URL (`@` and `/`
//!   percent-encoded, as libpq needs them) and in key/value strings (quoted, with spaces
//!   around `=`), opens the queue through the library and through the CLI, and is never
//!   printed.
//! - A wrong password is refused at once, with the server's reason, by the library and by
//!   the CLI (it took 15 s: the pool's check-out waited out its timeout).
//! - Short-lived CLI processes exit cleanly: the pool no longer opens a connection in the
//!   background after a checkout, which a process could exit in the middle of (about 1 run
//!   in 16 died of SIGSEGV or SIGBUS with SCRAM logins).
//!
//! Skipped (with the reason) where initdb and pg_ctl are not installed, except under
//! `CI=true`, where that fails.
#![cfg(all(feature = "cli", feature = "postgres"))]

use crate::cli_support::run_cmd;
use crate::support::ci;
use assert_cmd::Command;
use fenceq::diesel::connection::SimpleConnection;
use fenceq::diesel::sql_types::Text;
use fenceq::diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
use fenceq::{Error, NewJob, Queue};
use std::path::PathBuf;
use std::process::{Command as Process, Output};
use std::time::{Duration, Instant};

/// The role the tests log in as, and its password: every character that has a meaning in a
/// URL or a key/value string.
const ROLE: &str = "fenceq_pw";
const PASSWORD: &str = "Se?cr#et @x/y:z'q\\w";

/// A final refusal must come back well within this (the old code took 15 s).
const AT_ONCE: Duration = Duration::from_secs(3);

/// A cluster of this test's own, stopped (and its directory removed) on drop.
struct OwnServer {
    dir: PathBuf,
    /// The superuser's URL (trusted over TCP).
    url: String,
    host: String,
    port: String,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/postgres")
}

impl OwnServer {
    /// A fresh cluster where `ROLE` logs in with `PASSWORD` only.
    fn start() -> Option<OwnServer> {
        let found = Process::new(script()).arg("bin").output().expect("run scripts/postgres");
        if !found.status.success() {
            let why = String::from_utf8_lossy(&found.stderr).trim().to_string();
            assert!(!ci(), "CI=true requires the password tests, but: {why}");
            eprintln!("skipped: {why}");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("fenceq-pgurls-{}", uuid::Uuid::new_v4().simple()));
        let mut server = OwnServer { dir, url: String::new(), host: String::new(), port: String::new() };
        let out = server.run("start");
        server.url = String::from_utf8_lossy(&out.stdout).trim().lines().last().unwrap_or_default().to_string();
        // postgres://postgres@HOST:PORT/fenceq_test
        let hostport = server.url.split('@').nth(1).and_then(|rest| rest.split('/').next()).expect("a URL");
        let (host, port) = hostport.split_once(':').expect("host:port");
        (server.host, server.port) = (host.to_string(), port.to_string());
        server.require_passwords();
        Some(server)
    }

    fn run(&self, verb: &str) -> Output {
        let out = Process::new(script()).arg(verb).env("FENCEQ_POSTGRES_DIR", &self.dir).output().unwrap();
        assert!(out.status.success(), "scripts/postgres {verb}: {}", String::from_utf8_lossy(&out.stderr));
        out
    }

    /// Creates `ROLE`, then makes the server ask every role but `postgres` for its password
    /// over TCP, and waits (bounded) until it does.
    fn require_passwords(&self) {
        let mut admin = PgConnection::establish(&self.url).expect("the superuser's connection");
        let quoted = PASSWORD.replace('\'', "''");
        admin
            .batch_execute(&format!(
                "SET password_encryption = 'scram-sha-256';
                 CREATE ROLE {ROLE} LOGIN PASSWORD '{quoted}';
                 GRANT CREATE ON DATABASE fenceq_test TO {ROLE};"
            ))
            .unwrap();
        #[derive(QueryableByName)]
        struct File {
            #[diesel(sql_type = Text)]
            hba_file: String,
        }
        let file: File = sql_query("SHOW hba_file").get_result(&mut admin).unwrap();
        std::fs::write(
            &file.hba_file,
            "local all all trust\n\
             host all postgres 127.0.0.1/32 trust\n\
             host all all 127.0.0.1/32 scram-sha-256\n",
        )
        .unwrap();
        admin.batch_execute("SELECT pg_reload_conf()").unwrap();
        // The postmaster reloads on its own time: wait until a wrong password is refused.
        let wrong = format!("host={} port={} user={ROLE} password=wrong dbname=fenceq_test", self.host, self.port);
        let deadline = Instant::now() + Duration::from_secs(30);
        while PgConnection::establish(&wrong).is_ok() {
            assert!(Instant::now() < deadline, "the server never started asking for passwords");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `ROLE`'s URL, the password percent-encoded where libpq needs it (`@`, `/`) and
    /// written as it is elsewhere (`?`, `#`, `:`, `'`, `\`, a space).
    fn role_url(&self, password: &str) -> String {
        let encoded = password.replace('%', "%25").replace('@', "%40").replace('/', "%2F");
        format!("postgres://{ROLE}:{encoded}@{}:{}/fenceq_test", self.host, self.port)
    }

    /// `ROLE`'s key/value strings: the password quoted (its `'` and `\` escaped), with and
    /// without spaces around the `=`.
    fn role_key_values(&self, password: &str) -> [String; 2] {
        let quoted = password.replace('\\', "\\\\").replace('\'', "\\'");
        [
            format!("host={} port={} user={ROLE} password='{quoted}' dbname=fenceq_test", self.host, self.port),
            format!(
                "host = {} port = {} user = {ROLE} password = '{quoted}' dbname = fenceq_test",
                self.host, self.port
            ),
        ]
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = Process::new(script()).arg("stop").env("FENCEQ_POSTGRES_DIR", &self.dir).output();
    }
}

#[derive(QueryableByName)]
struct Who {
    #[diesel(sql_type = Text)]
    who: String,
}

fn fenceq(db: &str, schema: &str, args: &[&str]) -> Command {
    let mut cmd = Command::cargo_bin("fenceq").expect("the fenceq binary is built");
    cmd.args(["--db", db, "--schema", schema]).args(args);
    cmd
}

/// The parts of `PASSWORD` no output may hold.
fn assert_no_password(text: &str) {
    for part in ["Se?cr", "cr#et", "x/y:z", "x%2Fy", "'q\\w"] {
        assert!(!text.contains(part), "the password ({part}) was shown: {text}");
    }
}

#[test]
fn passwords_with_reserved_characters_reach_the_server_from_the_library_and_the_cli() {
    let Some(server) = OwnServer::start() else { return };
    let [key_value, spaced] = server.role_key_values(PASSWORD);
    for (i, db) in [server.role_url(PASSWORD), key_value, spaced].iter().enumerate() {
        let schema = format!("pw_{i}");
        let started = Instant::now();
        let builder = Queue::builder().url(db.clone()).schema(schema.clone());
        assert_no_password(&format!("{builder:?}"));
        let queue = builder.open_postgres().unwrap_or_else(|e| panic!("form {i}: {e}"));
        assert!(started.elapsed() < AT_ONCE, "opening took {:?}", started.elapsed());
        let who: Who = queue
            .with_connection(|tx| Ok(sql_query("SELECT current_user::text AS who").get_result(&mut *tx.conn())?))
            .unwrap();
        assert_eq!(who.who, ROLE);
        queue.enqueue(NewJob::new("q", b"from the library".to_vec())).unwrap();

        // The CLI, with the same --db: it reaches the same queue, and prints no password.
        let run = run_cmd(fenceq(db, &schema, &["enqueue", "--queue", "q", "--payload", "from the cli"]));
        assert_no_password(&format!("{}{}", run.stdout, run.stderr));
        run.ok();
        let run = run_cmd(fenceq(db, &schema, &["stats", "--json"]));
        assert_no_password(&format!("{}{}", run.stdout, run.stderr));
        assert_eq!(run.json()["totals"]["pending"], 2, "{}", run.stdout);
        assert_eq!(queue.stats().unwrap().queue("q").pending, 2);
    }
}

#[test]
fn a_wrong_password_is_refused_at_once_with_the_servers_reason() {
    let Some(server) = OwnServer::start() else { return };
    let wrong = "Wr?ng#pw";
    let [key_value, _] = server.role_key_values(wrong);
    for db in [server.role_url(wrong), key_value] {
        let started = Instant::now();
        let err = Queue::builder().url(db.clone()).schema("pw_wrong").open_postgres().expect_err("a wrong password");
        let took = started.elapsed();
        let shown = format!("{err} / {err:?}");
        assert!(matches!(err, Error::InvalidInput { .. }), "{shown}");
        assert!(shown.contains("password authentication failed"), "{shown}");
        assert!(!shown.contains("Wr?ng") && !shown.contains("ng#pw"), "{shown}");
        assert!(took < AT_ONCE, "the library took {took:?} to report a wrong password");

        let started = Instant::now();
        let run = run_cmd(fenceq(&db, "pw_wrong", &["stats"]));
        let took = started.elapsed();
        let line = run.error();
        assert!(line.contains("password authentication failed"), "{line}");
        assert!(!line.contains("Wr?ng") && !line.contains("ng#pw"), "{line}");
        assert!(took < AT_ONCE, "the CLI took {took:?} to report a wrong password");
    }
}

/// Short-lived processes with password logins exit cleanly: with an idle minimum, the pool
/// opened a connection in the background after each checkout, and a command that exited
/// while that SCRAM login was under way died of SIGSEGV or SIGBUS in the exit handlers (6
/// runs of `stats` in 100). This catches that with a probability of about 98% (60 runs); with
/// no background connect left, it cannot fail on a correct build.
#[test]
fn short_lived_cli_processes_with_password_logins_exit_cleanly() {
    let Some(server) = OwnServer::start() else { return };
    let db = server.role_url(PASSWORD);
    run_cmd(fenceq(&db, "pw_exit", &["migrate"])).ok();
    let mut signalled = Vec::new();
    for i in 0..60 {
        let args = if i % 2 == 0 { &["stats"][..] } else { &["enqueue", "--queue", "q", "--payload", "x"] };
        let out = fenceq(&db, "pw_exit", args).output().expect("the fenceq binary runs");
        match out.status.code() {
            Some(0) => {}
            Some(code) => panic!("run {i} exited {code}: {}", String::from_utf8_lossy(&out.stderr)),
            None => signalled.push(i),
        }
    }
    assert!(signalled.is_empty(), "runs killed by a signal: {signalled:?}");
}
