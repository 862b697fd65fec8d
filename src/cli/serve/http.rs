//! A small blocking HTTP/1.1 server over `std::net`: a fixed number of worker threads take
//! accepted connections from a bounded queue, each reads one request under a deadline and
//! size limits (httparse parses its head), answers it and closes the connection.
//!
//! Why not a server crate: the dashboard is a handful of pages for a few operators, and
//! what it must guarantee is that a slow or hostile client cannot hold it. tiny_http, the
//! usual blocking choice, starts a new thread for every connection when its threads are
//! busy (no bound) and sets no socket timeouts, so a client that sends a request slowly
//! keeps a thread forever; the others of its kind bring an async runtime. Here the bounds
//! are explicit: `Limits::workers` threads, `Limits::backlog` waiting connections (past that
//! a new one gets 503 at once), `Limits::deadline` to send a whole request (else 408), and
//! caps on the head (the query string included: 414 or 431) and on the body (413).
//! Responses always close the connection (no keep-alive), so no idle connection holds a
//! worker between requests.

use crossbeam_channel::{bounded, TrySendError};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// The server's bounds.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Threads answering requests (each holds one connection at a time).
    pub workers: usize,
    /// Accepted connections waiting for a worker; past that, new ones get 503 at once.
    pub backlog: usize,
    /// Bytes of the request line and headers (the query string included).
    pub head_bytes: usize,
    /// Bytes of a request body.
    pub body_bytes: usize,
    /// Time a client has to send its whole request, and again to take the response.
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            workers: 8,
            backlog: 64,
            head_bytes: 16 * 1024,
            body_bytes: 64 * 1024,
            deadline: Duration::from_secs(10),
        }
    }
}

/// One request, read whole.
#[derive(Debug)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path, still percent-encoded.
    pub path: String,
    /// The query string after `?` (empty when there is none), still encoded.
    pub query: String,
    /// Header names lowercased, values as sent (those that are not UTF-8 are dropped).
    pub headers: Vec<(String, String)>,
    /// The body (at most `Limits::body_bytes`).
    pub body: Vec<u8>,
}

impl Request {
    /// The first header of this (lowercase) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// A response: a status, headers beside those the server adds (`Content-Length`,
/// `Connection: close`), and a body.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Further headers.
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// A response of this status, content type and body.
    pub fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Response {
        Response { status, headers: vec![("Content-Type", content_type.to_string())], body: body.into() }
    }

    /// A plain-text response.
    pub fn text(status: u16, body: impl Into<String>) -> Response {
        Response::new(status, "text/plain; charset=utf-8", body.into())
    }

    /// Adds a header.
    pub fn with(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }
}

/// Serves `listener` until accepting fails for good, answering every request with
/// `handle` on one of `limits.workers` threads.
///
/// # Errors
///
/// Spawning a worker thread failed.
pub fn serve(
    listener: &TcpListener,
    limits: &Limits,
    handle: &(dyn Fn(&Request) -> Response + Sync),
) -> io::Result<()> {
    let (sender, receiver) = bounded::<TcpStream>(limits.backlog.max(1));
    std::thread::scope(|scope| {
        for n in 0..limits.workers.max(1) {
            let receiver = receiver.clone();
            std::thread::Builder::new().name(format!("fenceq-web-{n}")).spawn_scoped(scope, move || {
                for stream in receiver.iter() {
                    connection(stream, limits, handle);
                }
            })?;
        }
        drop(receiver);
        let mut failures = 0u32;
        for stream in listener.incoming() {
            let stream = match stream {
                Ok(stream) => {
                    failures = 0;
                    stream
                }
                // Out of file descriptors, a connection reset before it was accepted: the
                // listener itself is fine; give the system a moment instead of spinning.
                Err(_) if failures < 1000 => {
                    failures += 1;
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Err(e) => return Err(e),
            };
            match sender.try_send(stream) {
                Ok(()) => {}
                Err(TrySendError::Full(stream)) => busy(stream),
                Err(TrySendError::Disconnected(_)) => break,
            }
        }
        Ok(())
    })
}

/// Tells a connection that found every worker busy and the backlog full to come back later,
/// without waiting for it: one non-blocking write, then close.
fn busy(mut stream: TcpStream) {
    let response = head(&Response::text(503, "busy: try again in a moment\n").with("Retry-After", "1"));
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(&response);
    let _ = stream.write_all(b"busy: try again in a moment\n");
}

/// Reads one request from `stream`, answers it and closes the connection.
fn connection(mut stream: TcpStream, limits: &Limits, handle: &(dyn Fn(&Request) -> Response + Sync)) {
    let deadline = Instant::now() + limits.deadline;
    let (response, unread) = match read_request(&mut stream, limits, deadline) {
        Ok(request) => {
            let head_only = request.method == "HEAD";
            let started = Instant::now();
            let mut response = catch_unwind(AssertUnwindSafe(|| handle(&request))).unwrap_or_else(|_| {
                Response::text(500, "internal error: the request handler panicked (see the server's stderr)\n")
            });
            // The server's own time, from the request read to the body rendered (reads,
            // templates; not the network): what a browser's developer tools and the
            // dashboard bench show beside the time the client waited.
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            response.headers.push(("Server-Timing", format!("app;dur={ms:.3}")));
            if head_only {
                response.body.clear();
            }
            (response, false)
        }
        Err(Refused::Gone) => return,
        Err(Refused::Status(status, message)) => (Response::text(status, format!("{message}\n")), true),
    };
    let _ = stream.set_write_timeout(Some(limits.deadline));
    let mut bytes = head(&response);
    bytes.extend_from_slice(&response.body);
    if stream.write_all(&bytes).is_err() {
        return;
    }
    let _ = stream.flush();
    if unread {
        // The client may still be sending what was refused: closing with unread bytes makes
        // the kernel reset the connection, and the client could lose the answer. Read a
        // little more, briefly, then close.
        let _ = stream.shutdown(Shutdown::Write);
        let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        let mut sink = [0u8; 8192];
        let mut drained = 0usize;
        while drained < 256 * 1024 {
            match stream.read(&mut sink) {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    }
}

/// Why a request got no call to the handler.
enum Refused {
    /// The client closed the connection (or it broke) before a whole request: no answer.
    Gone,
    /// Answer with this status and message.
    Status(u16, &'static str),
}

/// Reads one whole request: its head within `limits.head_bytes`, its body within
/// `limits.body_bytes`, all before `deadline`.
fn read_request(stream: &mut TcpStream, limits: &Limits, deadline: Instant) -> Result<Request, Refused> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let (head_len, mut request) = loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Request::new(&mut headers);
        match parsed.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => break (len, own(&parsed)?),
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => return Err(Refused::Status(431, "too many request headers")),
            Err(_) => return Err(Refused::Status(400, "malformed HTTP request")),
        }
        if buf.len() >= limits.head_bytes {
            return Err(if buf.contains(&b'\n') {
                Refused::Status(431, "request headers too large")
            } else {
                Refused::Status(414, "request line too long (the query string is limited)")
            });
        }
        let want = chunk.len().min(limits.head_bytes - buf.len());
        let n = read_some(stream, &mut chunk[..want], deadline)?;
        buf.extend_from_slice(&chunk[..n]);
    };
    if request.header("transfer-encoding").is_some() {
        return Err(Refused::Status(501, "chunked request bodies are not taken; send Content-Length"));
    }
    let length = match request.header("content-length") {
        None => 0,
        Some(value) => value.trim().parse::<usize>().map_err(|_| Refused::Status(400, "malformed Content-Length"))?,
    };
    if length > limits.body_bytes {
        return Err(Refused::Status(413, "request body too large"));
    }
    let mut body = buf.split_off(head_len);
    if body.len() > length {
        // Pipelined bytes past the body: this server answers one request per connection.
        body.truncate(length);
    }
    while body.len() < length {
        let want = chunk.len().min(length - body.len());
        let n = read_some(stream, &mut chunk[..want], deadline)?;
        body.extend_from_slice(&chunk[..n]);
    }
    request.body = body;
    Ok(request)
}

/// One read of at most `buf.len()` bytes before `deadline`.
fn read_some(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<usize, Refused> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Refused::Status(408, "request not received in time"));
        }
        stream.set_read_timeout(Some(left)).map_err(|_| Refused::Gone)?;
        return match stream.read(buf) {
            Ok(0) => Err(Refused::Gone),
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                Err(Refused::Status(408, "request not received in time"))
            }
            Err(_) => Err(Refused::Gone),
        };
    }
}

/// The parsed head as owned values.
fn own(parsed: &httparse::Request<'_, '_>) -> Result<Request, Refused> {
    let method = parsed.method.unwrap_or_default().to_string();
    let target = parsed.path.unwrap_or_default();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if !path.starts_with('/') {
        return Err(Refused::Status(400, "the request target must be a path"));
    }
    let headers = parsed
        .headers
        .iter()
        .filter_map(|h| Some((h.name.to_ascii_lowercase(), std::str::from_utf8(h.value).ok()?.to_string())))
        .collect();
    Ok(Request { method, path: path.to_string(), query: query.to_string(), headers, body: Vec::new() })
}

/// The status line and headers of `response`, with `Content-Length` and `Connection: close`.
fn head(response: &Response) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {} {}\r\n", response.status, reason(response.status));
    for (name, value) in &response.headers {
        // Values come from this program, never raw from a client; a line break would still
        // split the header, so none passes.
        let value: String = value.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!("Content-Length: {}\r\nConnection: close\r\n\r\n", response.body.len()));
    out.into_bytes()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
