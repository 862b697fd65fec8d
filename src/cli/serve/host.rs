//! Which host names the dashboard answers to, and which pages may change things through it.
//!
//! A browser tells pages apart by their origin: the scheme, host name and port of their URL,
//! never the address a name resolves to. A site whose owner points its own name at 127.0.0.1
//! (DNS rebinding) so serves a page that the browser lets read the loopback dashboard as a
//! page of that site's own origin: the pages, the payloads, the forms' CSRF secret, and post
//! the forms. What gives it away is the name: every request says which host it was sent to
//! (`Host`), and a change says which page it comes from (`Origin`, else `Referer`). So the
//! server answers only the names it was started for ([`Hosts::accept`]: the listen address,
//! `localhost` on loopback, the names of `--allow-host`), and takes a change only from a page
//! of the very origin the request was sent to ([`Hosts::same_origin`]).
//!
//! The parsing is the small subset of RFC 3986 that these headers carry (a host: an IPv4
//! address, an IPv6 address in brackets, or a registered name; an optional port); anything
//! else is refused, never guessed.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A host as `Host`, `Origin`, `Referer` and `--allow-host` name it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Name {
    /// An IP address (compared as an address: `[::1]` and `[0:0:0:0:0:0:0:1]` are one).
    Ip(IpAddr),
    /// A registered name, lowercased (a browser sends an internationalized name in its
    /// ASCII form).
    Domain(String),
}

impl Name {
    /// A host without its port: `[v6]`, an IPv4 address, or a name of letters, digits, `-`
    /// and `_` between dots.
    fn parse(text: &str) -> Option<Name> {
        if let Some(inner) = text.strip_prefix('[') {
            return inner.strip_suffix(']')?.parse::<Ipv6Addr>().ok().map(|ip| Name::Ip(IpAddr::V6(ip)));
        }
        if let Ok(ip) = text.parse::<Ipv4Addr>() {
            return Some(Name::Ip(IpAddr::V4(ip)));
        }
        let label = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        // A name whose last label is a number is an IPv4 address to a browser (`127.1`,
        // `0x7f.1`): only the dotted-quad form above is taken.
        let last = text.rsplit('.').next().unwrap_or_default();
        let hex = last.strip_prefix("0x").or_else(|| last.strip_prefix("0X"));
        let numeric =
            last.bytes().all(|b| b.is_ascii_digit()) || hex.is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
        if text.len() > 253 || numeric || !text.split('.').all(label) {
            return None;
        }
        Some(Name::Domain(text.to_ascii_lowercase()))
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Name::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Name::Ip(ip) => write!(f, "{ip}"),
            Name::Domain(name) => f.write_str(name),
        }
    }
}

/// `host[:port]`: a host and the port it names, if any (an empty or zero port is refused).
fn authority(text: &str) -> Option<(Name, Option<u16>)> {
    // The port follows the last `:` after the host (an IPv6 address ends in `]`).
    let (host, port) = match text.rfind(':') {
        Some(at) if !text[at..].contains(']') => (&text[..at], Some(&text[at + 1..])),
        _ => (text, None),
    };
    let port = match port {
        None => None,
        Some(digits) if !digits.is_empty() && digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit()) => {
            Some(digits.parse::<u16>().ok().filter(|p| *p != 0)?)
        }
        Some(_) => return None,
    };
    Some((Name::parse(host)?, port))
}

/// A name `--allow-host` adds: a host, with or without a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    name: Name,
    port: Option<u16>,
}

/// Parses a value of `--allow-host`.
///
/// # Errors
///
/// The value is not a host name, an IPv4 address or an IPv6 address in brackets, each with
/// an optional `:PORT`: a message saying so.
pub fn parse_allowed(text: &str) -> Result<Allowed, String> {
    if text.contains("://") || text.contains('/') {
        return Err("give the host name alone, without a scheme or path (e.g. queue.example.org)".to_string());
    }
    let (name, port) = authority(text).ok_or_else(|| {
        "expected a host name (letters, digits, `-` between dots), an IPv4 address or an IPv6 address in brackets, \
         each with an optional :PORT (1 to 65535)"
            .to_string()
    })?;
    Ok(Allowed { name, port })
}

/// The ports under which a name is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ports {
    /// The listening port; no port (HTTP's default, 80) only when that is 80.
    Listening,
    /// The listening port, or none (a reverse proxy on its default port sends none).
    ListeningOrNone,
    /// This port only.
    Exactly(u16),
}

/// The host names the server answers to.
#[derive(Debug, Clone)]
pub struct Hosts {
    port: u16,
    names: Vec<(Name, Ports)>,
}

/// The host a request was sent to, once accepted: what its changes' origin must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    name: Name,
    port: Option<u16>,
}

/// At most 100 characters of a header as sent, quoted, for a refusal.
fn quoted(text: &str) -> String {
    format!("{:?}", super::problem::cut(text, 100))
}

impl Hosts {
    /// The names a server listening on `local` answers to: its address (on all addresses,
    /// the loopback ones instead), `localhost` when that is loopback, the name `--listen`
    /// gave (`listen`, if it is a name), and the names of `--allow-host`.
    pub fn new(local: SocketAddr, listen: &str, allowed: &[Allowed]) -> Hosts {
        let mut names = Vec::new();
        let ip = local.ip();
        if ip.is_unspecified() {
            names.push((Name::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST)), Ports::Listening));
            names.push((Name::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)), Ports::Listening));
        } else {
            names.push((Name::Ip(ip), Ports::Listening));
        }
        if ip.is_loopback() || ip.is_unspecified() {
            names.push((Name::Domain("localhost".to_string()), Ports::Listening));
        }
        if let Some(name @ Name::Domain(_)) = listen.rsplit_once(':').and_then(|(host, _)| Name::parse(host)) {
            names.push((name, Ports::Listening));
        }
        for a in allowed {
            let ports = a.port.map_or(Ports::ListeningOrNone, Ports::Exactly);
            names.push((a.name.clone(), ports));
        }
        let mut unique: Vec<(Name, Ports)> = Vec::new();
        for entry in names {
            if !unique.contains(&entry) {
                unique.push(entry);
            }
        }
        Hosts { port: local.port(), names: unique }
    }

    /// The names taken, as a person would type them.
    pub fn describe(&self) -> String {
        let shown: Vec<String> = self
            .names
            .iter()
            .map(|(name, ports)| match ports {
                Ports::Listening => format!("{name}:{}", self.port),
                Ports::ListeningOrNone => name.to_string(),
                Ports::Exactly(port) => format!("{name}:{port}"),
            })
            .collect();
        shown.join(", ")
    }

    /// The request's `Host` (`None`: it sent none, or more than one), if it is a name this
    /// server answers to.
    ///
    /// # Errors
    ///
    /// It names another host, or none: the refusal's text, which names the hosts taken and
    /// the option that adds one.
    pub fn accept(&self, host: Option<&str>) -> Result<Accepted, String> {
        let found = host.and_then(authority).filter(|(name, port)| {
            self.names.iter().any(|(n, ports)| {
                n == name
                    && match (ports, port) {
                        (Ports::Listening, Some(p)) => *p == self.port,
                        (Ports::Listening, None) => self.port == 80,
                        (Ports::ListeningOrNone, p) => p.is_none_or(|p| p == self.port),
                        (Ports::Exactly(want), p) => *p == Some(*want),
                    }
            })
        });
        match found {
            Some((name, port)) => Ok(Accepted { name, port }),
            None => Err(format!(
                "Refused: this dashboard answers only to {}, and the request was sent to {}. Open it under one of \
                 those names, or start `fenceq serve` with --allow-host NAME to add one (other names are refused: a \
                 site can point its own name at this address to read the pages, DNS rebinding).\n",
                self.describe(),
                host.map_or_else(|| "no host (no Host header)".to_string(), quoted)
            )),
        }
    }

    /// Refuses a change from a page of another origin than the one the request was sent to:
    /// `origin` (the `Origin` header), or without it `referer` (the `Referer` header), when
    /// the browser sends one, must be `http://` (`https://` when a proxy in front says the
    /// browser used it, `https`), the accepted host and its port. A request with neither (a
    /// client that is no browser) passes, to the CSRF check.
    ///
    /// # Errors
    ///
    /// The refusal's text, which names the page's origin and the dashboard's.
    pub fn same_origin(
        &self,
        accepted: &Accepted,
        origin: Option<&str>,
        referer: Option<&str>,
        https: bool,
    ) -> Result<(), String> {
        let scheme = if https { "https" } else { "http" };
        let default = |scheme: &str| if scheme == "https" { 443 } else { 80 };
        let own = match accepted.port {
            Some(port) => format!("{scheme}://{}:{port}", accepted.name),
            None => format!("{scheme}://{}", accepted.name),
        };
        let (header, value, of) = match (origin, referer) {
            (Some(origin), _) => ("Origin", origin, page_origin(origin, false)),
            (None, Some(referer)) => ("Referer", referer, page_origin(referer, true)),
            (None, None) => return Ok(()),
        };
        let matches = of.is_some_and(|(s, name, port)| {
            s == scheme
                && name == accepted.name
                && port.unwrap_or(default(s)) == accepted.port.unwrap_or(default(scheme))
        });
        if matches {
            return Ok(());
        }
        Err(format!(
            "Refused: this change comes from a page of another site ({header}: {}), not from this dashboard ({own}); \
             nothing was changed. Make the change from the dashboard's own pages, at {own}.\n",
            quoted(value)
        ))
    }
}

/// The scheme (`http` or `https`, lowercased), host and port of an origin (`Origin`:
/// `scheme://host[:port]`, nothing after), or of a URL's (`Referer`, `url`: a path, query or
/// fragment may follow).
fn page_origin(text: &str, url: bool) -> Option<(&'static str, Name, Option<u16>)> {
    let (scheme, rest) = text.split_once("://")?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => "http",
        "https" => "https",
        _ => return None,
    };
    let end = if url { rest.find(['/', '?', '#']).unwrap_or(rest.len()) } else { rest.len() };
    let (name, port) = authority(&rest[..end])?;
    Some((scheme, name, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(listen: &str, allowed: &[&str]) -> Hosts {
        let local: SocketAddr = listen.parse().unwrap();
        let allowed: Vec<Allowed> = allowed.iter().map(|a| parse_allowed(a).unwrap()).collect();
        Hosts::new(local, listen, &allowed)
    }

    fn takes(hosts: &Hosts, host: &str) -> bool {
        hosts.accept(Some(host)).is_ok()
    }

    #[test]
    fn the_listen_address_and_localhost_on_loopback() {
        let h = hosts("127.0.0.1:8080", &[]);
        assert_eq!(h.describe(), "127.0.0.1:8080, localhost:8080");
        for yes in ["127.0.0.1:8080", "localhost:8080", "LOCALHOST:8080"] {
            assert!(takes(&h, yes), "{yes}");
        }
        for no in [
            "rebind.example:8080",
            "localhost.rebind.example:8080",
            "localhost.:8080",
            "127.0.0.1",
            "localhost",
            "127.0.0.1:8081",
            "127.0.0.1:08080x",
            "127.0.0.1:",
            "127.0.0.1:0",
            "127.1:8080",
            "0x7f.0.0.1:8080",
            "[::1]:8080",
            "user@127.0.0.1:8080",
            "127.0.0.1:8080/",
            " 127.0.0.1:8080",
            "",
        ] {
            assert!(!takes(&h, no), "{no}");
        }
        let refusal = h.accept(None).unwrap_err();
        assert!(refusal.contains("no Host header") && refusal.contains("--allow-host NAME"), "{refusal}");
        let refusal = h.accept(Some("rebind.example:8080")).unwrap_err();
        assert!(refusal.contains("\"rebind.example:8080\"") && refusal.contains("127.0.0.1:8080"), "{refusal}");
        // On port 80, HTTP's default, the name alone is the same.
        let h = hosts("127.0.0.1:80", &[]);
        assert!(takes(&h, "127.0.0.1") && takes(&h, "localhost") && takes(&h, "localhost:80"));
    }

    #[test]
    fn ipv6_and_other_addresses() {
        let h = hosts("[::1]:8080", &[]);
        assert_eq!(h.describe(), "[::1]:8080, localhost:8080");
        assert!(takes(&h, "[::1]:8080") && takes(&h, "[0:0:0:0:0:0:0:1]:8080") && takes(&h, "localhost:8080"));
        assert!(!takes(&h, "::1:8080") && !takes(&h, "[::1]") && !takes(&h, "[::1%25lo]:8080"));
        // Not loopback: the address only.
        let h = hosts("192.0.2.7:8080", &[]);
        assert_eq!(h.describe(), "192.0.2.7:8080");
        assert!(takes(&h, "192.0.2.7:8080") && !takes(&h, "localhost:8080"));
        // All addresses: the loopback names, and those given.
        let h = hosts("0.0.0.0:8080", &["queue.lan"]);
        assert_eq!(h.describe(), "127.0.0.1:8080, [::1]:8080, localhost:8080, queue.lan");
        assert!(takes(&h, "127.0.0.1:8080") && takes(&h, "queue.lan:8080") && !takes(&h, "0.0.0.0:8080"));
        assert!(!takes(&h, "192.0.2.7:8080"));
        // A name given to --listen is the listen address too.
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let h = Hosts::new(local, "dash.internal:0", &[]);
        assert!(takes(&h, "dash.internal:8080") && !takes(&h, "dash.internal"));
    }

    #[test]
    fn allow_host_values() {
        let h = hosts("127.0.0.1:8080", &["Dash.Example", "proxy.example:8443", "[fd00::1]", "10.0.0.2:9000"]);
        assert_eq!(
            h.describe(),
            "127.0.0.1:8080, localhost:8080, dash.example, proxy.example:8443, [fd00::1], 10.0.0.2:9000"
        );
        for yes in ["dash.example", "dash.example:8080", "DASH.EXAMPLE:8080", "proxy.example:8443", "[fd00::1]"] {
            assert!(takes(&h, yes), "{yes}");
        }
        assert!(parse_allowed("my.0xample").is_ok() && parse_allowed("x.0x1f").is_err());
        for no in ["dash.example:8081", "a.dash.example:8080", "proxy.example", "proxy.example:8080", "10.0.0.2"] {
            assert!(!takes(&h, no), "{no}");
        }
        for bad in [
            "",
            "http://dash.example",
            "dash.example/",
            "dash example",
            "*.example",
            "dash.example:",
            "dash.example:0",
            "dash.example:65536",
            "dash.example.",
            "fd00::1",
            "-dash.example",
            "dash..example",
            "127.1",
            "0x7f.1",
        ] {
            assert!(parse_allowed(bad).is_err(), "{bad:?}");
        }
        assert!(parse_allowed("http://x").unwrap_err().contains("without a scheme"));
    }

    #[test]
    fn origins() {
        let h = hosts("127.0.0.1:8080", &["dash.example"]);
        let at = |host: &str| h.accept(Some(host)).unwrap();
        let local = at("127.0.0.1:8080");
        let check = |accepted: &Accepted, origin: Option<&str>, referer: Option<&str>, https: bool| {
            h.same_origin(accepted, origin, referer, https).is_ok()
        };
        assert!(check(&local, None, None, false), "no browser: the CSRF check decides");
        assert!(check(&local, Some("http://127.0.0.1:8080"), None, false));
        assert!(check(&local, Some("HTTP://127.0.0.1:8080"), None, false));
        assert!(check(&local, None, Some("http://127.0.0.1:8080/queue?name=mail"), false));
        assert!(check(&local, None, Some("http://127.0.0.1:8080?x"), false));
        assert!(check(&local, Some("http://127.0.0.1:8080"), Some("http://elsewhere.example/"), false));
        for origin in [
            "http://rebind.example:8080",
            "http://localhost:8080",
            "http://127.0.0.1:8081",
            "http://127.0.0.1",
            "https://127.0.0.1:8080",
            "http://127.0.0.1:8080/",
            "http://127.0.0.1:8080.rebind.example",
            "ftp://127.0.0.1:8080",
            "null",
            "",
        ] {
            assert!(!check(&local, Some(origin), None, false), "{origin}");
            assert!(!check(&local, Some(origin), Some("http://127.0.0.1:8080/"), false), "{origin}");
        }
        for referer in [
            "http://rebind.example:8080/",
            "http://127.0.0.1:8080@rebind.example/",
            "http://127.0.0.1:8080.rebind.example/",
            "/queue",
            "null",
        ] {
            assert!(!check(&local, None, Some(referer), false), "{referer}");
        }
        let refusal = h.same_origin(&local, Some("http://rebind.example:8080"), None, false).unwrap_err();
        assert!(refusal.contains("\"http://rebind.example:8080\"") && refusal.contains("(http://127.0.0.1:8080)"));
        assert!(refusal.contains("nothing was changed"), "{refusal}");
        // Behind a proxy: the name without a port is the scheme's default port.
        let proxied = at("dash.example");
        assert!(check(&proxied, Some("http://dash.example"), None, false));
        assert!(check(&proxied, Some("http://dash.example:80"), None, false));
        assert!(!check(&proxied, Some("https://dash.example"), None, false));
        assert!(check(&proxied, Some("https://dash.example"), None, true));
        assert!(check(&proxied, Some("https://dash.example:443"), None, true));
        assert!(!check(&proxied, Some("http://dash.example"), None, true));
        assert!(!check(&proxied, Some("https://dash.example:8443"), None, true));
        let direct = at("dash.example:8080");
        assert!(check(&direct, Some("http://dash.example:8080"), None, false));
        assert!(!check(&direct, Some("http://dash.example"), None, false));
    }
}
