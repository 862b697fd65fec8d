//! `fenceq serve`: the operator's web dashboard. Pages over the same library calls the CLI
//! makes (stats, listings, a job's record, the Prometheus text), and, unless `--read-only`,
//! the CLI's changes (acknowledge, replay, cancel, resolve, pause, unpause) through
//! [`fenceq::Operator`], each guarded by the state the page showed, as `--expect` guards the
//! CLI's.
//!
//! Layout: [`http`] is the blocking server (bounded threads, deadlines, size limits),
//! [`host`] decides which host names it answers to and which pages may post to it (against
//! DNS rebinding), [`app`] routes a request to a page or an action and checks who may do
//! what, [`pages`] renders HTML (maud: every value escaped unless marked otherwise, and
//! nothing here marks a database text so), [`form`] decodes and encodes form text and
//! compares secrets, and [`snapshot`] keeps the counts the overview and the queue pages
//! show, read by a thread of their own.

pub mod app;
pub mod form;
pub mod host;
pub mod http;
pub mod pages;
pub mod problem;
pub mod snapshot;

use super::store::CliStore;
use super::{fail, parse_duration, CliResult, Context, ResultExt};
use clap::Args;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Arguments of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on. Loopback by default; any other address needs --token-file
    /// (port 0 picks a free port, which the first line printed names).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8080")]
    pub listen: String,

    /// Show the pages only: no action is offered, and every POST but sign-in is refused.
    /// Opens the database read-only (SQLite: read-only connections; PostgreSQL: read-only
    /// sessions).
    #[arg(long)]
    pub read_only: bool,

    /// A file of access tokens, one a line: `NAME TOKEN` (the operator's name recorded with
    /// every change made with it) or `TOKEN` alone (the page asks for a name). Lines starting
    /// with `#` are comments. Every page then asks to sign in with a token (a cookie for the
    /// session, HttpOnly and SameSite=Strict), and scrapers of /metrics send
    /// `Authorization: Bearer TOKEN`. Tokens are at least 16 characters.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Threads answering requests; a request waits for a free one (at most 64 wait, and
    /// further connections are told to come back).
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: u16,

    /// A host name the pages answer to besides the listen address (and `localhost` when that
    /// is loopback; on all addresses, 0.0.0.0 or [::], the loopback names): the name a reverse
    /// proxy passes on in `Host`, or the machine's own name or address. Repeatable. NAME is
    /// taken with the listening port or with none (as a proxy in front sends it); NAME:PORT
    /// with that port only. A request naming any other host is refused (421), so that a site
    /// pointing its own name at this address (DNS rebinding) cannot read or act here.
    #[arg(long = "allow-host", value_name = "NAME[:PORT]", value_parser = host::parse_allowed)]
    pub allow_hosts: Vec<host::Allowed>,

    /// Time a client has to send its whole request (and again to take the answer) before
    /// the connection is closed: a slow client holds one thread at most this long.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_timeout)]
    pub request_timeout: Duration,
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration < Duration::from_millis(100) || duration > Duration::from_secs(600) {
        return Err("give a timeout from 100ms to 10m".to_string());
    }
    Ok(duration)
}

/// An access token of `--token-file`.
#[derive(Clone)]
pub struct Token {
    /// The operator's name recorded with its changes, if the file gives one.
    pub name: Option<String>,
    /// The secret itself.
    pub secret: String,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token").field("name", &self.name).field("secret", &"***").finish()
    }
}

/// The shortest token taken: shorter ones are guessable over the network.
const MIN_TOKEN_LEN: usize = 16;

/// Reads `--token-file`. Its errors never repeat a token.
fn read_tokens(path: &Path) -> CliResult<Vec<Token>> {
    let text = std::fs::read_to_string(path).context(|| format!("cannot read the token file {}", path.display()))?;
    let mut tokens = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let (name, secret) = match words[..] {
            [secret] => (None, secret),
            [name, secret] => (Some(name.to_string()), secret),
            _ => return Err(fail(format!("{} line {}: expected `NAME TOKEN` or `TOKEN`", path.display(), n + 1))),
        };
        if secret.len() < MIN_TOKEN_LEN {
            return Err(fail(format!(
                "{} line {}: a token needs at least {MIN_TOKEN_LEN} characters (e.g. `openssl rand -hex 32`)",
                path.display(),
                n + 1
            )));
        }
        tokens.push(Token { name, secret: secret.to_string() });
    }
    if tokens.is_empty() {
        return Err(fail(format!("{} holds no token", path.display())));
    }
    Ok(tokens)
}

/// The addresses `--listen` names, refusing any but loopback ones without tokens: the pages
/// show payloads and offer changes to whoever reaches them.
fn listen_addrs(listen: &str, tokens: bool) -> CliResult<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = listen
        .to_socket_addrs()
        .context(|| format!("--listen {listen}: not an address and port (e.g. 127.0.0.1:8080)"))?
        .collect();
    if addrs.is_empty() {
        return Err(fail(format!("--listen {listen} names no address")));
    }
    if !tokens {
        if let Some(open) = addrs.iter().find(|addr| !addr.ip().is_loopback()) {
            return Err(fail(format!(
                "refusing to listen on {open} without --token-file: anyone who reaches that address could read \
                 payloads and change the queue; give --token-file, or listen on loopback (127.0.0.1) behind a \
                 reverse proxy"
            )));
        }
    }
    Ok(addrs)
}

impl ServeArgs {
    /// Serves the dashboard until the process is stopped.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let tokens = match &self.token_file {
            Some(path) => read_tokens(path)?,
            None => Vec::new(),
        };
        let addrs = listen_addrs(&self.listen, !tokens.is_empty())?;
        let queue = if self.read_only { ctx.open_read_only::<S>()? } else { ctx.open_existing::<S>()? };
        let listener = TcpListener::bind(&addrs[..]).context(|| format!("cannot listen on {}", self.listen))?;
        let local = listener.local_addr()?;
        let hosts = host::Hosts::new(local, &self.listen, &self.allow_hosts);
        let mode = if self.read_only { "read-only" } else { "actions on" };
        let access = if tokens.is_empty() { "no sign-in" } else { "sign-in with a token" };
        ctx.out.line(format!(
            "serving http://{local}/ ({}; {mode}; {access}; answers to {})",
            ctx.db_display(),
            hosts.describe()
        ))?;
        ctx.out.flush()?;
        let limits = http::Limits {
            workers: usize::from(self.workers),
            deadline: self.request_timeout,
            ..http::Limits::default()
        };
        let snapshots = snapshot::Snapshots::default();
        let db = ctx.db_display();
        std::thread::scope(|scope| -> CliResult<()> {
            // The counts thread ends when the app (which holds its sender) is dropped: when
            // serving ends, for whatever reason.
            let (refresh, _counting) = snapshot::spawn(scope, &snapshots, snapshot::FLOOR, || app::count(&queue))?;
            let app = app::App::new(&queue, self.read_only, tokens, hosts, db, &snapshots, refresh);
            http::serve(&listener, &limits, &|request| app.handle(request))?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_without_tokens() {
        assert!(listen_addrs("127.0.0.1:0", false).is_ok());
        assert!(listen_addrs("[::1]:0", false).is_ok());
        let refused = listen_addrs("0.0.0.0:0", false).unwrap_err().to_string();
        assert!(refused.contains("without --token-file"), "{refused}");
        assert!(listen_addrs("0.0.0.0:0", true).is_ok());
        assert!(listen_addrs("nonsense", false).is_err());
    }

    #[test]
    fn token_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "# ops\nalice 0123456789abcdef0123\n\nfedcba9876543210fedc\n").unwrap();
        let tokens = read_tokens(&path).unwrap();
        assert_eq!(tokens.len(), 2);
        assert_eq!(tokens[0].name.as_deref(), Some("alice"));
        assert_eq!(tokens[1].name, None);
        std::fs::write(&path, "bob short-secret\n").unwrap();
        let error = read_tokens(&path).unwrap_err().to_string();
        assert!(error.contains("at least 16") && !error.contains("short-secret"), "{error}");
        std::fs::write(&path, "# nothing\n").unwrap();
        assert!(read_tokens(&path).is_err());
    }
}
