//! The harness of `tests/sqlite/web.rs`: the `fenceq serve` process (killed when dropped), a plain
//! HTTP/1.1 client over `std::net` (for requests a browser would not send: no CSRF token,
//! huge query strings, slow clients), the forms of a page, a TCP proxy that a test takes
//! down to cut the dashboard off its database server, and a WebDriver client for headless
//! Chromium through chromedriver (started on a free port, killed when dropped).
//!
//! Every wait is bounded; nothing here needs an async runtime or an HTTP crate.
#![allow(dead_code)]

use fenceq_conformance::ci;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a server or chromedriver may take to start, and a request to be answered.
pub const WAIT: Duration = Duration::from_secs(60);

// ------------------------------------------------------------------------------- the server

/// A running `fenceq serve`.
pub struct Server {
    child: Child,
    /// `127.0.0.1:PORT` (`[::1]:PORT` on IPv6 loopback).
    pub addr: String,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts `fenceq <db_args> serve --listen 127.0.0.1:0 <extra>` and waits for its
    /// `serving http://ADDR/` line.
    pub fn start(db_args: &[String], extra: &[&str]) -> Server {
        Server::start_on(db_args, "127.0.0.1:0", extra)
    }

    /// Starts `fenceq <db_args> serve --listen <listen> <extra>`, as [`Server::start`].
    pub fn start_on(db_args: &[String], listen: &str, extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let stderr = dir.path().join("stderr");
        let mut child = Command::new(env!("CARGO_BIN_EXE_fenceq"))
            .args(db_args)
            .args(["serve", "--listen", listen])
            .args(extra)
            .env("USER", "server-user")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("the fenceq binary starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(WAIT).unwrap_or_default();
        let Some(addr) = line.strip_prefix("serving http://").and_then(|rest| rest.split('/').next()) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no serving line: {line:?}; stderr: {}", std::fs::read_to_string(&stderr).unwrap_or_default());
        };
        Server { addr: addr.to_string(), child, stderr, _dir: dir }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.rsplit_once(':').and_then(|(_, port)| port.parse().ok()).expect("ADDR:PORT")
    }

    pub fn get(&self, path: &str) -> Reply {
        get(&self.addr, path, None)
    }

    /// What the server wrote on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Asserts the server still runs and never panicked.
    pub fn assert_healthy(&mut self) {
        assert!(self.child.try_wait().unwrap().is_none(), "the server exited; stderr: {}", self.stderr());
        let stderr = self.stderr();
        assert!(!stderr.contains("panicked"), "stderr: {stderr}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ------------------------------------------------------------------------------- plain HTTP

/// A response: status, headers (names lowercased), body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Sends `raw` to `addr` and reads the whole answer (the server closes the connection).
pub fn exchange(addr: &str, raw: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream.set_write_timeout(Some(WAIT)).unwrap();
    // The server may answer (413, 414) before it has read all of a huge request, and close.
    let _ = stream.write_all(raw);
    // Read until the body is whole (by Content-Length) or the peer closes: chromedriver may
    // keep the connection open after its answer.
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(split) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&bytes[..split]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if length.is_some_and(|n| bytes.len() >= split + 4 + n) {
                break;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
        }
    }
    parse_reply(&bytes)
}

pub fn parse_reply(bytes: &[u8]) -> Reply {
    let split = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| {
        panic!("no complete response head: {:?}", String::from_utf8_lossy(bytes));
    });
    let head = String::from_utf8_lossy(&bytes[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = bytes[split + 4..].to_vec();
    if headers.iter().any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked")) {
        body = dechunk(&body);
    }
    Reply { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
}

fn dechunk(mut bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = bytes.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&bytes[..end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("0").trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = end + 2;
        out.extend_from_slice(&bytes[start..(start + size).min(bytes.len())]);
        bytes = &bytes[(start + size + 2).min(bytes.len())..];
    }
    out
}

pub fn get(addr: &str, path: &str, cookie: Option<&str>) -> Reply {
    let cookie = cookie.map_or_else(String::new, |c| format!("Cookie: {c}\r\n"));
    exchange(addr, format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{cookie}Connection: close\r\n\r\n").as_bytes())
}

/// A GET of `path` from the server at `addr` with exactly these headers (no `Host` unless
/// one of them is: a browser that reached the server under another name sends that name).
pub fn get_with(addr: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let head: String = headers.iter().map(|(n, v)| format!("{n}: {v}\r\n")).collect();
    exchange(addr, format!("GET {path} HTTP/1.1\r\n{head}Connection: close\r\n\r\n").as_bytes())
}

/// POSTs a form of these fields.
pub fn post(addr: &str, path: &str, fields: &[(String, String)], cookie: Option<&str>) -> Reply {
    let cookie = cookie.map(|c| ("Cookie", c));
    post_with(addr, path, fields, &[("Host", addr)].into_iter().chain(cookie).collect::<Vec<_>>())
}

/// POSTs a form of these fields with exactly these headers beside the form's own
/// (`Content-Type`, `Content-Length`): `Host`, `Origin`, `Referer` as a test chooses.
pub fn post_with(addr: &str, path: &str, fields: &[(String, String)], headers: &[(&str, &str)]) -> Reply {
    let body = fields.iter().map(|(n, v)| format!("{}={}", encode(n), encode(v))).collect::<Vec<_>>().join("&");
    let head: String = headers.iter().map(|(n, v)| format!("{n}: {v}\r\n")).collect();
    let raw = format!(
        "POST {path} HTTP/1.1\r\n{head}Content-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    exchange(addr, raw.as_bytes())
}

pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The hidden fields of every form on `html` whose action is `action`, in page order.
pub fn forms(html: &str, action: &str) -> Vec<Vec<(String, String)>> {
    let marker = format!("action=\"{action}\"");
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(at) = rest.find(&marker) {
        let form = &rest[at..];
        let end = form.find("</form>").expect("the form ends");
        let inner = &form[..end];
        let mut fields = Vec::new();
        let mut input = inner;
        while let Some(i) = input.find("<input type=\"hidden\" name=\"") {
            let tag = &input[i + "<input type=\"hidden\" name=\"".len()..];
            let name_end = tag.find('"').unwrap();
            let name = &tag[..name_end];
            let value =
                tag[name_end..].strip_prefix("\" value=\"").map(|v| &v[..v.find('"').unwrap()]).unwrap_or_default();
            fields.push((unescape(name), unescape(value)));
            input = &tag[name_end..];
        }
        out.push(fields);
        rest = &form[end..];
    }
    out
}

fn unescape(text: &str) -> String {
    text.replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

/// `fields` with `name` set to `value` (added when missing).
pub fn with(fields: &[(String, String)], name: &str, value: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = fields.iter().filter(|(n, _)| n != name).cloned().collect();
    out.push((name.to_string(), value.to_string()));
    out
}

/// `fields` without `name`.
pub fn without(fields: &[(String, String)], name: &str) -> Vec<(String, String)> {
    fields.iter().filter(|(n, _)| n != name).cloned().collect()
}

/// Serves `html` to every request on a free loopback port, from a thread of its own that
/// lives as long as the test process: the page of another site, for a browser test. Returns
/// the port.
pub fn serve_page(html: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = stream.set_read_timeout(Some(WAIT));
            // Read the head (a GET has no body), at most 64 KiB of it.
            let mut head = Vec::new();
            let mut chunk = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&chunk[..n]),
                }
            }
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{html}",
                html.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    port
}

// ------------------------------------------------------------------------------- WebDriver

/// A program on PATH.
fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).flat_map(|dir| names.iter().map(move |n| dir.join(n))).find(|p| p.is_file())
}

/// A free port on loopback (bound and released: chromedriver takes it next).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Headless Chromium driven through chromedriver; both end when this is dropped.
pub struct Browser {
    driver: Child,
    addr: String,
    session: String,
    _profile: tempfile::TempDir,
    /// Where screenshots go.
    pub out: PathBuf,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session, or says the test skipped when
    /// they are not installed (under CI=true that is a failure).
    pub fn start(out: &Path) -> Option<Browser> {
        Browser::start_with(out, &[])
    }

    /// As [`Browser::start`], with further Chromium flags (`--host-resolver-rules=...`).
    pub fn start_with(out: &Path, flags: &[&str]) -> Option<Browser> {
        let chromium = on_path(&["chromium", "chromium-browser", "google-chrome"]);
        let chromedriver = on_path(&["chromedriver"]);
        let (Some(chromium), Some(chromedriver)) = (chromium, chromedriver) else {
            assert!(!ci(), "CI=true needs chromium and chromedriver (.ci/run installs chromium chromium-driver)");
            eprintln!("skipped: chromium or chromedriver is not installed (apt-get install chromium chromium-driver)");
            return None;
        };
        std::fs::create_dir_all(out).unwrap();
        let port = free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let profile = tempfile::tempdir().unwrap();
        let mut browser = Browser {
            driver,
            addr: format!("127.0.0.1:{port}"),
            session: String::new(),
            _profile: profile,
            out: out.to_path_buf(),
        };
        let started = Instant::now();
        loop {
            if TcpStream::connect(&browser.addr).is_ok() {
                let status = browser.raw("GET", "/status", None);
                if status["value"]["ready"] == true {
                    break;
                }
            }
            assert!(started.elapsed() < WAIT, "chromedriver did not get ready in {WAIT:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile_dir = browser._profile.path().display().to_string();
        let mut args: Vec<String> = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1300,900",
        ]
        .iter()
        .map(|flag| flag.to_string())
        .collect();
        args.push(format!("--user-data-dir={profile_dir}"));
        args.extend(flags.iter().map(|flag| flag.to_string()));
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            // An alert stays open for the test to see, instead of being dismissed.
            "unhandledPromptBehavior": "ignore",
            "goog:chromeOptions": {
                "binary": chromium.display().to_string(),
                "args": args,
            },
        }}});
        let created = browser.raw("POST", "/session", Some(capabilities));
        let session = created["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {created}"));
        browser.session = session.to_string();
        Some(browser)
    }

    fn raw(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json; charset=utf-8\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.addr,
            body.len()
        );
        let reply = exchange(&self.addr, format!("{head}{body}").as_bytes());
        serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {}", reply.body))
    }

    /// A session command; panics on a WebDriver error.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let value = self.raw(method, &format!("/session/{}{path}", self.session), body);
        if let Some(error) = value["value"]["error"].as_str() {
            panic!("WebDriver {method} {path}: {error}: {}", value["value"]["message"]);
        }
        value["value"].clone()
    }

    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url })));
    }

    pub fn url(&self) -> String {
        self.call("GET", "/url", None).as_str().unwrap_or_default().to_string()
    }

    /// The element `css` selects (the first), waiting a bounded time for it.
    pub fn find(&self, css: &str) -> String {
        let started = Instant::now();
        loop {
            let value = self.raw(
                "POST",
                &format!("/session/{}/element", self.session),
                Some(json!({
                    "using": "css selector", "value": css,
                })),
            );
            if let Some(id) = element_id(&value["value"]) {
                return id;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "no element {css} on {}: {value}", self.url());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every element `css` selects now.
    pub fn find_all(&self, css: &str) -> Vec<String> {
        let value = self.call("POST", "/elements", Some(json!({ "using": "css selector", "value": css })));
        value.as_array().map(|a| a.iter().filter_map(element_id).collect()).unwrap_or_default()
    }

    /// The element `css` selects inside `parent`.
    pub fn find_in(&self, parent: &str, css: &str) -> String {
        let value = self.call(
            "POST",
            &format!("/element/{parent}/element"),
            Some(json!({ "using": "css selector", "value": css })),
        );
        element_id(&value).unwrap_or_else(|| panic!("no {css} inside the element"))
    }

    pub fn click(&self, element: &str) {
        self.call("POST", &format!("/element/{element}/click"), Some(json!({})));
    }

    pub fn type_into(&self, element: &str, text: &str) {
        self.call("POST", &format!("/element/{element}/value"), Some(json!({ "text": text })));
    }

    pub fn text(&self, element: &str) -> String {
        self.call("GET", &format!("/element/{element}/text"), None).as_str().unwrap_or_default().to_string()
    }

    /// The text of the element `css` selects.
    pub fn text_of(&self, css: &str) -> String {
        self.text(&self.find(css))
    }

    /// The page's visible text.
    pub fn page_text(&self) -> String {
        self.text_of("body")
    }

    /// Waits (bounded) until the page's `h1` contains `text`; returns the page's text.
    pub fn wait_for_heading(&self, text: &str) -> String {
        let started = Instant::now();
        loop {
            // (The page may be navigating: an element found may be gone when read; try again.)
            let heading = self.try_heading().unwrap_or_default();
            if heading.contains(text) {
                return self.page_text();
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "heading {heading:?} never came to contain {text:?} on {}",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (bounded) until the page's text contains `text`; returns the page's text.
    pub fn wait_for_text(&self, text: &str) -> String {
        self.wait_for_text_within(text, Duration::from_secs(10))
    }

    /// Waits at most `bound` until the page's text contains `text`, the page left as it is
    /// (whatever navigates, the page itself does: a refresh); returns the page's text.
    pub fn wait_for_text_within(&self, text: &str, bound: Duration) -> String {
        let started = Instant::now();
        loop {
            let body = self.try_text("body").unwrap_or_default();
            if body.contains(text) {
                return body;
            }
            assert!(
                started.elapsed() < bound,
                "the page never came to contain {text:?} in {bound:?} on {}: {body:?}",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The text of the first element `css` selects, or `None` when there is none or it went
    /// away while being read (the page navigating).
    fn try_text(&self, css: &str) -> Option<String> {
        let found = self.raw(
            "POST",
            &format!("/session/{}/element", self.session),
            Some(json!({ "using": "css selector", "value": css })),
        );
        let id = element_id(&found["value"])?;
        let text = self.raw("GET", &format!("/session/{}/element/{id}/text", self.session), None);
        text["value"].as_str().map(str::to_string)
    }

    /// The text of the page's first `h1`, or `None` when there is none or it went away
    /// while being read.
    fn try_heading(&self) -> Option<String> {
        self.try_text("h1")
    }

    /// The text of an open alert, confirm or prompt, if one is open.
    pub fn alert(&self) -> Option<String> {
        let value = self.raw("GET", &format!("/session/{}/alert/text", self.session), None);
        match value["value"]["error"].as_str() {
            Some("no such alert") => None,
            Some(other) => panic!("alert endpoint: {other}: {value}"),
            None => Some(value["value"].as_str().unwrap_or_default().to_string()),
        }
    }

    /// Saves a PNG of the viewport as `<out>/<name>.png`; returns its path.
    pub fn screenshot(&self, name: &str) -> PathBuf {
        let encoded = self.call("GET", "/screenshot", None);
        let png = base64_decode(encoded.as_str().expect("base64 text"));
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let path = self.out.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.raw("DELETE", &format!("/session/{}", self.session), None)
            }));
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn element_id(value: &Value) -> Option<String> {
    value["element-6066-11e4-a52e-4f735466cecf"].as_str().map(str::to_string)
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let digits: Vec<u8> = text.bytes().filter_map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, d)| n | (u32::from(*d) << (18 - 6 * i)));
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len().saturating_sub(1)]);
    }
    out
}
