//! The small pieces of the web that need care: percent-decoding query strings and form
//! bodies (strictly: a bad escape or bytes that are not UTF-8 are refused, not guessed),
//! percent-encoding values into links, comparing secrets in constant time, and making them.

/// The pairs of an `application/x-www-form-urlencoded` text (a query string or a form
/// body), in order.
///
/// # Errors
///
/// A `%` not followed by two hex digits, or a decoded value that is not UTF-8.
pub fn decode(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((unescape(name)?, unescape(value)?))
        })
        .collect()
}

fn unescape(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                let byte = hex.and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or("a malformed %-escape")?;
                out.push(byte);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| "text that is not UTF-8".to_string())
}

/// `text` percent-encoded for a query string value: everything but ASCII letters, digits
/// and `-._~` is escaped.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// True when `a` and `b` are equal, taking the same time whatever their first difference
/// (the length is not secret: every secret here has a fixed length).
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    // Keeps the optimizer from turning the loop into an early exit.
    std::hint::black_box(diff) == 0
}

/// A fresh random secret: 244 random bits (two version-4 UUIDs, from the operating
/// system's generator) as 64 hex digits.
pub fn secret() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_strictly() {
        assert_eq!(
            decode("a=1&b=x+y%21&c&d=%C3%A9").unwrap(),
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "x y!".into()),
                ("c".into(), String::new()),
                ("d".into(), "é".into())
            ]
        );
        assert!(decode("a=%zz").is_err());
        assert!(decode("a=%4").is_err());
        assert!(decode("a=%ff").is_err());
        assert_eq!(decode("").unwrap(), vec![]);
    }

    #[test]
    fn encodes_what_decodes_back() {
        let text = "q a/b&c=d%é<script>";
        assert_eq!(decode(&format!("x={}", encode(text))).unwrap(), vec![("x".into(), text.into())]);
        assert_eq!(encode("abc-1._~"), "abc-1._~");
    }

    #[test]
    fn compares() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
        let (a, b) = (secret(), secret());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
