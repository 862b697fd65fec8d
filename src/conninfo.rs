//! PostgreSQL connection strings read the way libpq reads them (`fe-connect.c`:
//! `conninfo_uri_parse_options`, `conninfo_uri_parse_params`, `conninfo_uri_decode` and
//! `conninfo_parse`), so that fenceq can
//!
//! - hand libpq a key/value string with its own settings added that means the same server,
//!   database, user and password as the URL the application gave, whatever characters the
//!   password holds (appending `&connect_timeout=10` to a URL as text does not: libpq takes
//!   everything after a `?` inside the password as the query, and the rest of the URL as the
//!   database name);
//! - show a connection string without its password (`Debug`, errors, the CLI);
//! - tell a connection string from a file name (the CLI's `--db`), never creating an SQLite
//!   file named after one.
//!
//! Always compiled (not only with the `postgres` feature): a CLI built without PostgreSQL
//! must still recognise a connection string to refuse it.
//!
//! Where libpq takes a URL in a way its author cannot have meant, fenceq refuses it at once
//! (`InvalidInput`) instead of connecting somewhere else: an unencoded `@` after the user
//! information (libpq ends the user information at the first `@`, so a password holding
//! `@` makes the rest of it the host name), a port that is not a number (a password holding
//! `/` makes libpq end the user information early and read part of the password as the
//! port). Refusals and redaction never repeat any part of the string that may be a secret.

use crate::error::{Error, Result};
use std::ops::Range;

/// The libpq keywords the CLI recognises in a key/value string (PostgreSQL 15 to 17); libpq
/// itself judges the keywords of a string fenceq connects with.
const KEYWORDS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "sslnegotiation",
    "requiressl",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslcertmode",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "require_auth",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
];

/// Keywords whose values are secrets.
fn is_secret(keyword: &str) -> bool {
    keyword.eq_ignore_ascii_case("password") || keyword.eq_ignore_ascii_case("sslpassword")
}

/// The length of a libpq URI prefix (`postgresql://` or `postgres://`), 0 when there is
/// none. libpq compares it case-sensitively; fenceq also takes an upper-case scheme as one
/// (URI schemes are case-insensitive), which libpq would read as a malformed key/value
/// string.
fn uri_prefix_length(text: &str) -> usize {
    let lower = |n: usize| text.get(..n).map(str::to_ascii_lowercase);
    if lower(13).as_deref() == Some("postgresql://") {
        13
    } else if lower(11).as_deref() == Some("postgres://") {
        11
    } else {
        0
    }
}

/// libpq's `isspace` in the C locale.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// One setting of a connection string: its keyword, its (decoded, unquoted) value, and
/// where the value was written in the text (quotes included), for redaction.
#[derive(Clone)]
struct Pair {
    keyword: String,
    value: String,
    span: Range<usize>,
}

/// Why a string cannot be used; never holds a part of the string that may be a secret.
struct Refusal(String);

fn refuse(reason: impl Into<String>) -> Refusal {
    Refusal(reason.into())
}

/// libpq's `conninfo_uri_decode`: `%XX` escapes, `%00` refused; the result must be UTF-8.
fn uri_decode(raw: &str, what: &str) -> std::result::Result<String, Refusal> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
        let (Some(hi), Some(lo)) = (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) else {
            return Err(refuse(format!("the {what} holds a `%` that is not followed by two hex digits")));
        };
        let byte = (hi * 16 + lo) as u8;
        if byte == 0 {
            return Err(refuse(format!("the {what} holds %00, which libpq refuses")));
        }
        out.push(byte);
        i += 3;
    }
    String::from_utf8(out).map_err(|_| refuse(format!("the {what} is not UTF-8 once percent-decoded")))
}

/// A keyword fenceq can write back into a key/value string unquoted.
fn check_keyword(keyword: &str) -> std::result::Result<(), Refusal> {
    let plain = !keyword.is_empty() && keyword.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if plain {
        Ok(())
    } else {
        Err(refuse("a parameter name is not a libpq connection option (letters, digits and `_`)"))
    }
}

/// A URI as libpq's `conninfo_uri_parse_options` reads it, with fenceq's refusals of what
/// libpq would take in a way nobody means (see the module's comment).
fn parse_uri(text: &str, prefix: usize) -> std::result::Result<Vec<Pair>, Refusal> {
    let b = text.as_bytes();
    let at = |i: usize| b.get(i).copied().unwrap_or(0);
    let mut pairs = Vec::new();
    let mut p = prefix;
    // The user information ends at the first `@`, looked for up to the first `/`.
    while at(p) != 0 && at(p) != b'@' && at(p) != b'/' {
        p += 1;
    }
    let had_userinfo = at(p) == b'@';
    if had_userinfo {
        let userinfo_end = p;
        let user_end = text[prefix..userinfo_end].find(':').map_or(userinfo_end, |i| prefix + i);
        if user_end > prefix {
            pairs.push(Pair {
                keyword: "user".into(),
                value: uri_decode(&text[prefix..user_end], "user name")?,
                span: prefix..user_end,
            });
        }
        if user_end < userinfo_end && user_end + 1 < userinfo_end {
            let span = user_end + 1..userinfo_end;
            pairs.push(Pair { keyword: "password".into(), value: uri_decode(&text[span.clone()], "password")?, span });
        }
        p = userinfo_end + 1;
    } else {
        p = prefix;
    }

    // host[:port] pairs, separated by commas; an IPv6 address in brackets.
    let (mut hosts, mut ports) = (String::new(), String::new());
    let hosts_start = p;
    let mut terminator;
    loop {
        if at(p) == b'[' {
            let start = p + 1;
            p = start;
            while at(p) != 0 && at(p) != b']' {
                p += 1;
            }
            if at(p) == 0 {
                return Err(refuse("an IPv6 host address has no closing `]`"));
            }
            if p == start {
                return Err(refuse("an IPv6 host address is empty"));
            }
            hosts.push_str(&text[start..p]);
            p += 1;
            if !matches!(at(p), 0 | b':' | b'/' | b'?' | b',') {
                return Err(refuse("an IPv6 host address is followed by something other than `:`, `/`, `?` or `,`"));
            }
        } else {
            let start = p;
            while !matches!(at(p), 0 | b':' | b'/' | b'?' | b',') {
                p += 1;
            }
            if text[start..p].contains('@') {
                return Err(refuse(
                    "the host holds `@`: libpq ends the user name and password at the first `@`, so a password \
                     (or user name) holding `@` must write it percent-encoded, as %40",
                ));
            }
            hosts.push_str(&text[start..p]);
        }
        terminator = at(p);
        if terminator == b':' {
            let start = p + 1;
            p = start;
            while !matches!(at(p), 0 | b'/' | b'?' | b',') {
                p += 1;
            }
            let port = &text[start..p];
            if !port.bytes().all(|c| c.is_ascii_digit()) {
                return Err(refuse(
                    "the port is not a number: a password (or user name) holding `/`, `?` or `:` before an \
                     `@` must write it percent-encoded (`/` as %2F)",
                ));
            }
            ports.push_str(port);
            terminator = at(p);
        }
        if terminator != b',' {
            break;
        }
        p += 1;
        hosts.push(',');
        ports.push(',');
    }
    let hosts_end = p;
    if !hosts.is_empty() {
        pairs.push(Pair { keyword: "host".into(), value: uri_decode(&hosts, "host")?, span: hosts_start..hosts_end });
    }
    if !ports.is_empty() {
        pairs.push(Pair { keyword: "port".into(), value: uri_decode(&ports, "port")?, span: hosts_start..hosts_end });
    }

    if terminator != 0 && terminator != b'?' {
        let start = p + 1;
        p = start;
        while at(p) != 0 && at(p) != b'?' {
            p += 1;
        }
        let dbname = &text[start..p];
        if dbname.contains('@') {
            return Err(refuse(if had_userinfo {
                "the database name holds `@`: a password holding `@` must write it percent-encoded, as %40 \
                 (and so must a database name)"
            } else {
                "the database name holds `@`: a password holding `/` must write it percent-encoded, as %2F \
                 (and `@` in a database name as %40)"
            }));
        }
        if !dbname.is_empty() {
            pairs.push(Pair { keyword: "dbname".into(), value: uri_decode(dbname, "database name")?, span: start..p });
        }
        terminator = at(p);
    }

    if terminator == b'?' {
        parse_params(text, p + 1, &mut pairs)?;
    }
    Ok(pairs)
}

/// libpq's `conninfo_uri_parse_params`: `key=value` pairs separated by `&`, each part
/// percent-decoded; `ssl=true` means `sslmode=require` (JDBC's spelling).
fn parse_params(text: &str, from: usize, pairs: &mut Vec<Pair>) -> std::result::Result<(), Refusal> {
    let b = text.as_bytes();
    let mut p = from;
    while p < b.len() {
        let key_start = p;
        let mut equals = None;
        loop {
            match b.get(p) {
                Some(b'=') if equals.is_some() => {
                    return Err(refuse("a query parameter holds a second `=` (write it as %3D)"));
                }
                Some(b'=') => equals = Some(p),
                Some(b'&') | None => break,
                Some(_) => {}
            }
            p += 1;
        }
        let Some(equals) = equals else {
            return Err(refuse("a query parameter has no `=`"));
        };
        let keyword = uri_decode(&text[key_start..equals], "parameter name")?;
        let span = equals + 1..p;
        let value = uri_decode(&text[span.clone()], "parameter value")?;
        let (keyword, value) = if keyword == "ssl" && value == "true" {
            ("sslmode".to_string(), "require".to_string())
        } else {
            (keyword, value)
        };
        check_keyword(&keyword)?;
        pairs.push(Pair { keyword, value, span });
        if p < b.len() {
            p += 1; // past the `&`
        }
    }
    Ok(())
}

/// A key/value string as libpq's `conninfo_parse` reads it: `keyword = value` pairs
/// separated by white space, a value either bare (a backslash escapes the next character)
/// or in single quotes (a backslash escapes `'` and `\`). On a refusal, also where the
/// pair that could not be read starts (for redaction).
fn parse_key_value(text: &str) -> std::result::Result<Vec<Pair>, (Refusal, usize)> {
    let b = text.as_bytes();
    let mut pairs = Vec::new();
    let mut p = 0;
    while p < b.len() {
        if is_space(b[p]) {
            p += 1;
            continue;
        }
        let key_start = p;
        let mut key_end = None;
        while p < b.len() && b[p] != b'=' {
            if is_space(b[p]) {
                key_end = Some(p);
                while p < b.len() && is_space(b[p]) {
                    p += 1;
                }
                break;
            }
            p += 1;
        }
        if p >= b.len() || b[p] != b'=' {
            return Err((refuse("a word has no `=` after it (key/value form: keyword=value ...)"), key_start));
        }
        let keyword = text[key_start..key_end.unwrap_or(p)].to_string();
        p += 1;
        while p < b.len() && is_space(b[p]) {
            p += 1;
        }
        let value_start = p;
        let mut value = Vec::new();
        if b.get(p) != Some(&b'\'') {
            while p < b.len() {
                if is_space(b[p]) {
                    break;
                }
                if b[p] == b'\\' {
                    p += 1;
                    if p < b.len() {
                        value.push(b[p]);
                        p += 1;
                    }
                } else {
                    value.push(b[p]);
                    p += 1;
                }
            }
        } else {
            p += 1;
            loop {
                match b.get(p) {
                    None => return Err((refuse("a quoted value has no closing `'`"), key_start)),
                    Some(b'\\') => {
                        p += 1;
                        if let Some(&c) = b.get(p) {
                            value.push(c);
                            p += 1;
                        }
                    }
                    Some(b'\'') => {
                        p += 1;
                        break;
                    }
                    Some(&c) => {
                        value.push(c);
                        p += 1;
                    }
                }
            }
        }
        let span = value_start..p;
        // Split at ASCII bytes only: still UTF-8.
        let value = String::from_utf8_lossy(&value).into_owned();
        if let Err(refusal) = check_keyword(&keyword) {
            return Err((refusal, key_start));
        }
        pairs.push(Pair { keyword, value, span });
    }
    Ok(pairs)
}

fn parse(text: &str) -> std::result::Result<Vec<Pair>, Refusal> {
    if text.contains('\0') {
        return Err(refuse("it holds a NUL byte"));
    }
    match uri_prefix_length(text) {
        0 => parse_key_value(text).map_err(|(refusal, _)| refusal),
        prefix => parse_uri(text, prefix),
    }
}

/// A PostgreSQL connection string (a `postgres://` or `postgresql://` URL, or a libpq
/// key/value string) read as libpq reads it.
///
/// [`ConnInfo::to_libpq`] writes it back as a key/value string that means the same to
/// libpq, with every value quoted, so that settings can be added to it safely. Its `Debug`
/// output never shows a password.
#[derive(Clone)]
pub struct ConnInfo {
    pairs: Vec<(String, String)>,
}

impl ConnInfo {
    /// Reads `text` as libpq would. The empty string and `postgres://` are valid: every
    /// setting then comes from libpq's defaults and `PG*` environment variables.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for what libpq would refuse (a malformed percent escape, a key/value
    /// pair without `=`, an unterminated quote) and for a URL that libpq would read in a way
    /// nobody means: a host or database name holding an unencoded `@`, or a port that is not
    /// a number (a password holding `@` or `/` must be percent-encoded). The reason never
    /// repeats a part of the string.
    pub fn parse(text: &str) -> Result<ConnInfo> {
        let pairs = parse(text).map_err(|Refusal(reason)| Error::invalid("database URL", reason))?;
        Ok(ConnInfo { pairs: pairs.into_iter().map(|p| (p.keyword, p.value)).collect() })
    }

    /// The value libpq would use for `keyword` (the last one written), if the string sets it.
    pub fn get(&self, keyword: &str) -> Option<&str> {
        self.pairs.iter().rev().find(|(k, _)| k == keyword).map(|(_, v)| v.as_str())
    }

    /// The string's `connect_timeout` in seconds when it bounds the wait: a whole number
    /// above 0. libpq reads `0`, a negative number, or no value at all as "wait
    /// indefinitely", so fenceq treats those as unset and sets its own bound in their place
    /// ([`ConnInfo::with_connect_timeout_bound`]).
    pub fn connect_timeout_secs(&self) -> Option<u64> {
        self.get("connect_timeout")
            .and_then(|v| v.trim().parse::<i64>().ok())
            .and_then(|s| u64::try_from(s).ok())
            .filter(|&s| s > 0)
    }

    /// Sets `connect_timeout` to `secs` unless the string already bounds the wait
    /// ([`ConnInfo::connect_timeout_secs`]): a `0` or negative value, which libpq would take
    /// as "wait forever", is replaced. A value libpq cannot read as a number is kept, for
    /// libpq to refuse with its own message.
    pub fn with_connect_timeout_bound(self, secs: u64) -> ConnInfo {
        let unreadable = self.get("connect_timeout").is_some_and(|v| v.trim().parse::<i64>().is_err());
        if unreadable || self.connect_timeout_secs().is_some() {
            self
        } else {
            self.set("connect_timeout", &secs.to_string())
        }
    }

    /// Sets `keyword` to `value` unless the string sets it already.
    pub fn or_set(mut self, keyword: &str, value: &str) -> ConnInfo {
        if self.get(keyword).is_none() {
            self.pairs.push((keyword.to_string(), value.to_string()));
        }
        self
    }

    /// Sets `keyword` to `value`, replacing what the string said.
    pub fn set(mut self, keyword: &str, value: &str) -> ConnInfo {
        self.pairs.retain(|(k, _)| k != keyword);
        self.pairs.push((keyword.to_string(), value.to_string()));
        self
    }

    /// The key/value string for libpq (`PQconnectdb`), every value in single quotes with
    /// `'` and `\` escaped. It holds the password, if any: never show it.
    pub fn to_libpq(&self) -> String {
        let mut out = String::new();
        for (keyword, value) in &self.pairs {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(keyword);
            out.push_str("='");
            for c in value.chars() {
                if c == '\'' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('\'');
        }
        out
    }
}

impl std::fmt::Debug for ConnInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut map = f.debug_map();
        for (keyword, value) in &self.pairs {
            if is_secret(keyword) {
                map.entry(keyword, &"***");
            } else {
                map.entry(keyword, value);
            }
        }
        map.finish()
    }
}

/// True when `text` is meant as a PostgreSQL connection string rather than a file name: it
/// starts with `postgres:` or `postgresql:` (any case), or it holds a libpq keyword followed
/// by `=` at the start or after white space (`host=db port=5432`, `password = x`).
///
/// The CLI uses this to choose the store for `--db`, so that it never creates an SQLite file
/// named after a connection string.
pub fn is_connection_string(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    if lower.starts_with("postgres:") || lower.starts_with("postgresql:") {
        return true;
    }
    let b = text.as_bytes();
    let mut p = 0;
    while p < b.len() {
        let at_word = p == 0 || is_space(b[p - 1]);
        if at_word && !is_space(b[p]) {
            let start = p;
            while p < b.len() && (b[p].is_ascii_alphanumeric() || b[p] == b'_') {
                p += 1;
            }
            let word = &text[start..p];
            while p < b.len() && is_space(b[p]) {
                p += 1;
            }
            if b.get(p) == Some(&b'=') && KEYWORDS.contains(&word) {
                return true;
            }
            if p == start {
                p += 1;
            }
        } else {
            p += 1;
        }
    }
    false
}

/// `text` (a PostgreSQL connection string) with every password replaced by `***`: the
/// password of a URL's user information and its `password` and `sslpassword` parameters,
/// and those keywords' values in a key/value string, quoted or not.
///
/// A string libpq would read is redacted where libpq reads its secrets. One that fenceq
/// cannot read is redacted more widely: in a URL, everything between the first `:` of the
/// user information and the last `@` (as a person may have meant a password holding `@`,
/// `/`, `?` or `#`), and the whole query; in a key/value string, everything from the first
/// pair that could not be read.
///
/// A text that is not a connection string at all ([`is_connection_string`]: an SQLite file's
/// path such as `bot.db`) holds no password and comes back as it is.
pub fn redact_connection_string(text: &str) -> String {
    if !is_connection_string(text) {
        return text.to_string();
    }
    let mut spans: Vec<Range<usize>> = Vec::new();
    match uri_prefix_length(text) {
        0 => {
            let pairs = match parse_key_value(text) {
                Ok(pairs) => pairs,
                Err((_, failed_at)) => {
                    let mut readable = parse_key_value(&text[..failed_at]).unwrap_or_default();
                    readable.push(Pair {
                        keyword: "password".into(),
                        value: String::new(),
                        span: failed_at..text.len(),
                    });
                    readable
                }
            };
            spans.extend(pairs.into_iter().filter(|p| is_secret(&p.keyword)).map(|p| p.span));
        }
        prefix => match parse_uri(text, prefix) {
            Ok(pairs) => spans.extend(pairs.into_iter().filter(|p| is_secret(&p.keyword)).map(|p| p.span)),
            Err(_) => {
                let mut query_from = prefix;
                if let Some(last_at) = text.rfind('@').filter(|&i| i >= prefix) {
                    if let Some(colon) = text[prefix..last_at].find(':') {
                        spans.push(prefix + colon + 1..last_at);
                    }
                    query_from = last_at;
                }
                if let Some(question) = text[query_from..].find('?') {
                    spans.push(query_from + question + 1..text.len());
                }
            }
        },
    }
    spans.retain(|s| !s.is_empty());
    spans.sort_by_key(|s| s.start);
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for span in spans {
        if span.start < from {
            continue;
        }
        out.push_str(&text[from..span.start]);
        out.push_str("***");
        from = span.end;
    }
    out.push_str(&text[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String)> {
        ConnInfo::parse(text).unwrap_or_else(|e| panic!("{text}: {e}")).pairs
    }

    fn kv(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn uris_are_read_as_libpq_reads_them() {
        assert_eq!(
            pairs("postgres://bot:se?cret@db.internal:5432/app"),
            kv(&[
                ("user", "bot"),
                ("password", "se?cret"),
                ("host", "db.internal"),
                ("port", "5432"),
                ("dbname", "app")
            ])
        );
        assert_eq!(pairs("postgres://bot:se#cr et@h/app")[1], ("password".into(), "se#cr et".into()));
        assert_eq!(pairs("postgresql://bot:p%40ss%2Fx@h/app")[1], ("password".into(), "p@ss/x".into()));
        assert_eq!(
            pairs("postgres://h1:5432,h2,[::1]:5433/d?sslmode=require&application_name=a%20b&ssl=true"),
            kv(&[
                ("host", "h1,h2,::1"),
                ("port", "5432,,5433"),
                ("dbname", "d"),
                ("sslmode", "require"),
                ("application_name", "a b"),
                ("sslmode", "require"),
            ])
        );
        assert_eq!(pairs("postgres://"), kv(&[]));
        assert_eq!(pairs("postgres:///d?host=%2Fvar%2Frun"), kv(&[("dbname", "d"), ("host", "/var/run")]));
        assert_eq!(pairs("postgres://u@h?"), kv(&[("user", "u"), ("host", "h")]));
        // A user name alone, an empty password: as libpq, nothing stored for the password.
        assert_eq!(pairs("postgres://u:@h/d"), kv(&[("user", "u"), ("host", "h"), ("dbname", "d")]));
    }

    #[test]
    fn uris_libpq_would_misread_or_refuse_are_refused_without_repeating_them() {
        for (bad, secret) in [
            ("postgres://bot:pQ7@sX9@h/app", "sX9"), // `@` in the password: libpq's host would be sX9@h
            ("postgres://bot:aQ7/cX9@h/app", "aQ7"), // `/` in the password: libpq's port would be "aQ7"
            ("postgres://bot:1/cX9@h/app", "cX9"),   // the same, numeric: libpq's database cX9@h/app
            ("postgres://bot:pQ7@h/app@x", "app@x"), // a stray `@` after the host
            ("postgres://bot:sQ7%zzX9@h/app", "sQ7"), // a bad percent escape
            ("postgres://bot:sQ7%00X9@h/app", "sQ7"), // %00
            ("postgres://h/app?password", "password\""), // no `=`
            ("postgres://h/app?password=aQ7=bX9", "aQ7"), // two `=`
            ("postgres://h/app?pass%20word=sQ7", "sQ7"), // not a keyword
            ("postgres://[::1/app", "::1"),          // no `]`
        ] {
            let e = ConnInfo::parse(bad).expect_err(bad).to_string();
            assert!(!e.contains(secret), "{bad}: {e}");
            assert!(e.starts_with("invalid database URL: "), "{e}");
        }
    }

    #[test]
    fn key_value_strings_are_read_as_libpq_reads_them() {
        assert_eq!(
            pairs("host=h  password = s3cretvalue dbname=d"),
            kv(&[("host", "h"), ("password", "s3cretvalue"), ("dbname", "d")])
        );
        assert_eq!(pairs(r"password='a b\'c' user=u"), kv(&[("password", r"a b'c"), ("user", "u")]));
        assert_eq!(pairs(r"password=a\ b\\c"), kv(&[("password", r"a b\c")]));
        assert_eq!(pairs("password='x'dbname=d"), kv(&[("password", "x"), ("dbname", "d")]));
        assert_eq!(pairs(""), kv(&[]));
        for bad in ["host=h s3cret", "password='s3cret", "host", "=s3cret", "a'b=c"] {
            let e = ConnInfo::parse(bad).expect_err(bad).to_string();
            assert!(!e.contains("s3cret"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_libpq_string_means_the_same_and_takes_added_settings() {
        for text in [
            "postgres://bot:se?cr#et x%40y@h:5432/app?sslmode=disable",
            r"host=h password='a b\'c\\d' dbname=d",
            "postgresql://u:%27%5C@h/d",
        ] {
            let info = ConnInfo::parse(text).unwrap();
            let again = ConnInfo::parse(&info.to_libpq()).unwrap();
            assert_eq!(again.pairs, info.pairs, "{text} -> {}", info.to_libpq());
        }
        let info = ConnInfo::parse("postgres://u:se?cret@h/d?connect_timeout=3").unwrap();
        let info = info.or_set("connect_timeout", "10").or_set("application_name", "fenceq");
        assert_eq!(info.get("connect_timeout"), Some("3"));
        assert_eq!(info.get("dbname"), Some("d"));
        assert_eq!(info.get("password"), Some("se?cret"));
        assert_eq!(info.get("application_name"), Some("fenceq"));
        assert_eq!(info.clone().set("connect_timeout", "2").get("connect_timeout"), Some("2"));
        assert!(!format!("{info:?}").contains("se?cret"), "{info:?}");
    }

    #[test]
    fn redaction_hides_every_form_of_password() {
        let cases = [
            ("postgres://bot:s3cret@db:5432/app", "postgres://bot:***@db:5432/app"),
            ("postgres://bot:se?cret@db.internal:5432/app", "postgres://bot:***@db.internal:5432/app"),
            ("postgres://bot:se#cret@db.internal:5432/app", "postgres://bot:***@db.internal:5432/app"),
            ("postgres://bot:p%40ss%2F@h/d", "postgres://bot:***@h/d"),
            // Passwords libpq cannot read as meant: hidden up to the last `@`.
            ("postgres://bot:p@ss@db/app", "postgres://bot:***@db/app"),
            ("postgres://bot:ab/cd@db/app", "postgres://bot:***@db/app"),
            ("postgres://bot:a?b/c@db/app", "postgres://bot:***@db/app"),
            ("postgres://bot:a b@c/d#e@db/app?x", "postgres://bot:***@db/app?***"),
            ("postgres://bot@db/app", "postgres://bot@db/app"),
            ("postgres://h/d?user=u&password=s3cret&x=1", "postgres://h/d?user=u&password=***&x=1"),
            ("postgres://h/d?sslpassword=s3cret", "postgres://h/d?sslpassword=***"),
            ("POSTGRESQL://u:s3cret@h/d", "POSTGRESQL://u:***@h/d"),
            ("host=h password=s3cret dbname=d", "host=h password=*** dbname=d"),
            ("host=h password = s3cretvalue dbname=d", "host=h password = *** dbname=d"),
            (r"host=h password='a b\'c s3cret' dbname=d", "host=h password=*** dbname=d"),
            (r"password=s3cr\ et dbname=d", "password=*** dbname=d"),
            ("host=h password='s3cret dbname=d", "host=h ***"),
            ("host=h s3cret", "host=h ***"),
            ("", ""),
            // A file's path is no connection string: nothing in it is a secret.
            ("bot.db", "bot.db"),
            ("/var/lib/bot/queue.sqlite3", "/var/lib/bot/queue.sqlite3"),
            ("data dir/bot.db", "data dir/bot.db"),
        ];
        for (text, shown) in cases {
            assert_eq!(redact_connection_string(text), shown, "{text}");
        }
    }

    #[test]
    fn connection_strings_are_told_from_file_names() {
        for text in [
            "postgres://u@h/d",
            "postgresql://",
            "POSTGRES://h",
            "postgres:",
            "host=127.0.0.1 port=45601 user=botpw password=x dbname=fenceq_test",
            "dbname=app",
            "  password = x",
            "service=prod",
        ] {
            assert!(is_connection_string(text), "{text}");
        }
        for text in ["fenceq.db", "./data/host=1.db", "queue=1.db", "/tmp/a b.db", "file:bot.db?mode=ro", ""] {
            assert!(!is_connection_string(text), "{text}");
        }
    }
}
