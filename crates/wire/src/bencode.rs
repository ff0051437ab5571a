//! Bencode as rtpengine's ng control protocol carries it (a cookie, a space, one bencoded
//! dictionary per UDP datagram): encoding of commands and decoding of replies.
//!
//! Decoding takes untrusted bytes from the network. It never panics, bounds nesting at
//! [`MAX_DEPTH`] (a reply of nested lists would otherwise recurse until the stack overflows)
//! and reports what was wrong and where.

use std::fmt;

/// Deepest nesting of lists and dictionaries a decoded value may have. ng replies nest two or
/// three levels (a dictionary of lists of dictionaries).
pub const MAX_DEPTH: usize = 32;

/// A bencoded value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bencode {
    /// An integer (`i42e`).
    Int(i64),
    /// A byte string (`3:abc`).
    Str(Vec<u8>),
    /// A list (`l…e`).
    List(Vec<Bencode>),
    /// A dictionary (`d…e`), keys in the order they came (encoded sorted).
    Dict(Vec<(Vec<u8>, Bencode)>),
}

/// Why bytes are not bencode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BencodeError {
    /// The input ended inside a value.
    Truncated,
    /// A byte that cannot start or continue a value here, at this offset.
    Unexpected(usize),
    /// A string length or integer that is not a decimal number in range, at this offset.
    BadNumber(usize),
    /// Lists and dictionaries nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// Bytes left after the value, at this offset.
    Trailing(usize),
    /// An ng message without the cookie and space in front of its dictionary.
    NoCookie,
}

impl fmt::Display for BencodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BencodeError::Truncated => write!(f, "bencode: the input ends inside a value"),
            BencodeError::Unexpected(at) => write!(f, "bencode: unexpected byte at offset {at}"),
            BencodeError::BadNumber(at) => write!(f, "bencode: bad number at offset {at}"),
            BencodeError::TooDeep => {
                write!(f, "bencode: nested deeper than {MAX_DEPTH} levels")
            }
            BencodeError::Trailing(at) => write!(f, "bencode: trailing bytes at offset {at}"),
            BencodeError::NoCookie => write!(f, "ng message without a cookie"),
        }
    }
}

impl std::error::Error for BencodeError {}

impl Bencode {
    /// A byte string from text.
    pub fn str(s: &str) -> Bencode {
        Bencode::Str(s.as_bytes().to_vec())
    }

    /// Appends the encoding (dictionary keys sorted, as bencode requires).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Bencode::Int(n) => {
                out.push(b'i');
                if *n < 0 {
                    out.push(b'-');
                }
                push_decimal(n.unsigned_abs(), out);
                out.push(b'e');
            }
            Bencode::Str(s) => encode_str(s, out),
            Bencode::List(l) => {
                out.push(b'l');
                for v in l {
                    v.encode(out);
                }
                out.push(b'e');
            }
            Bencode::Dict(d) => {
                let mut entries: Vec<&(Vec<u8>, Bencode)> = d.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                out.push(b'd');
                for (k, v) in entries {
                    encode_str(k, out);
                    v.encode(out);
                }
                out.push(b'e');
            }
        }
    }

    /// Decodes exactly one value filling `input`.
    pub fn decode(input: &[u8]) -> Result<Bencode, BencodeError> {
        let mut i = 0;
        let v = value(input, &mut i, 0)?;
        if i != input.len() {
            return Err(BencodeError::Trailing(i));
        }
        Ok(v)
    }

    /// The value of `key` in a dictionary (the first, if repeated).
    pub fn get(&self, key: &str) -> Option<&Bencode> {
        match self {
            Bencode::Dict(d) => d
                .iter()
                .find(|(k, _)| k.as_slice() == key.as_bytes())
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// A string value as text (lossy for bytes that are not UTF-8).
    pub fn as_text(&self) -> Option<String> {
        match self {
            Bencode::Str(s) => Some(String::from_utf8_lossy(s).into_owned()),
            _ => None,
        }
    }
}

fn encode_str(s: &[u8], out: &mut Vec<u8>) {
    push_decimal(s.len() as u64, out);
    out.push(b':');
    out.extend_from_slice(s);
}

/// Appends `n` in decimal, without an allocation (replies are encoded per request).
fn push_decimal(mut n: u64, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// The decimal digits (with an optional leading '-' when `signed`) from `*i` up to `end`
/// (exclusive), as a number; `*i` is left after `end`.
fn number(b: &[u8], i: &mut usize, end: u8, signed: bool) -> Result<i64, BencodeError> {
    let start = *i;
    let len = b[start..]
        .iter()
        .position(|&c| c == end)
        .ok_or(BencodeError::Truncated)?;
    let digits = &b[start..start + len];
    let unsigned = digits
        .strip_prefix(b"-")
        .filter(|_| signed)
        .unwrap_or(digits);
    if unsigned.is_empty() || !unsigned.iter().all(u8::is_ascii_digit) {
        return Err(BencodeError::BadNumber(start));
    }
    let n = std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or(BencodeError::BadNumber(start))?;
    *i = start + len + 1;
    Ok(n)
}

fn string(b: &[u8], i: &mut usize) -> Result<Vec<u8>, BencodeError> {
    let at = *i;
    let len =
        usize::try_from(number(b, i, b':', false)?).map_err(|_| BencodeError::BadNumber(at))?;
    let end = i
        .checked_add(len)
        .filter(|&e| e <= b.len())
        .ok_or(BencodeError::Truncated)?;
    let s = b[*i..end].to_vec();
    *i = end;
    Ok(s)
}

fn value(b: &[u8], i: &mut usize, depth: usize) -> Result<Bencode, BencodeError> {
    match b.get(*i).copied() {
        None => Err(BencodeError::Truncated),
        Some(b'i') => {
            *i += 1;
            Ok(Bencode::Int(number(b, i, b'e', true)?))
        }
        Some(c) if c.is_ascii_digit() => Ok(Bencode::Str(string(b, i)?)),
        Some(c @ (b'l' | b'd')) => {
            if depth >= MAX_DEPTH {
                return Err(BencodeError::TooDeep);
            }
            *i += 1;
            let mut list = Vec::new();
            let mut dict = Vec::new();
            loop {
                match b.get(*i) {
                    None => return Err(BencodeError::Truncated),
                    Some(b'e') => {
                        *i += 1;
                        break;
                    }
                    Some(_) if c == b'l' => list.push(value(b, i, depth + 1)?),
                    Some(k) if k.is_ascii_digit() => {
                        let key = string(b, i)?;
                        dict.push((key, value(b, i, depth + 1)?));
                    }
                    Some(_) => return Err(BencodeError::Unexpected(*i)),
                }
            }
            Ok(if c == b'l' {
                Bencode::List(list)
            } else {
                Bencode::Dict(dict)
            })
        }
        Some(_) => Err(BencodeError::Unexpected(*i)),
    }
}

/// Splits an ng message into its cookie and its decoded body.
pub fn ng_decode(message: &[u8]) -> Result<(&[u8], Bencode), BencodeError> {
    let space = message
        .iter()
        .position(|&c| c == b' ')
        .filter(|&p| p > 0)
        .ok_or(BencodeError::NoCookie)?;
    let body = Bencode::decode(&message[space + 1..]).map_err(|e| match e {
        // Offsets are reported within the whole message.
        BencodeError::Unexpected(at) => BencodeError::Unexpected(at + space + 1),
        BencodeError::BadNumber(at) => BencodeError::BadNumber(at + space + 1),
        BencodeError::Trailing(at) => BencodeError::Trailing(at + space + 1),
        other => other,
    })?;
    Ok((&message[..space], body))
}

/// An ng message: the cookie, a space, the encoded body.
pub fn ng_encode(cookie: &str, body: &Bencode) -> Vec<u8> {
    let mut out = Vec::with_capacity(cookie.len() + 64);
    out.extend_from_slice(cookie.as_bytes());
    out.push(b' ');
    body.encode(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ng_commands_encode_with_sorted_keys() {
        let body = Bencode::Dict(vec![
            (b"sdp".to_vec(), Bencode::str("v=0")),
            (b"command".to_vec(), Bencode::str("offer")),
            (
                b"flags".to_vec(),
                Bencode::List(vec![Bencode::str("a"), Bencode::str("bc")]),
            ),
            (b"n".to_vec(), Bencode::Int(-3)),
        ]);
        let msg = ng_encode("c1", &body);
        assert_eq!(
            msg,
            b"c1 d7:command5:offer5:flagsl1:a2:bce1:ni-3e3:sdp3:v=0e".to_vec()
        );
        let (cookie, back) = ng_decode(&msg).unwrap();
        assert_eq!(cookie, b"c1");
        assert_eq!(
            back.get("command").and_then(Bencode::as_text).as_deref(),
            Some("offer")
        );
        assert_eq!(back.get("n"), Some(&Bencode::Int(-3)));
    }

    #[test]
    fn replies_decode_with_nesting() {
        let (_, r) = ng_decode(b"x d3:sdp3:v=06:result2:ok4:listl1:ai3ee5:countd1:ai1eee").unwrap();
        assert_eq!(
            r.get("sdp").and_then(Bencode::as_text).as_deref(),
            Some("v=0")
        );
        assert_eq!(
            r.get("list"),
            Some(&Bencode::List(vec![Bencode::str("a"), Bencode::Int(3)]))
        );
        assert_eq!(
            r.get("count"),
            Some(&Bencode::Dict(vec![(b"a".to_vec(), Bencode::Int(1))]))
        );
    }

    #[test]
    fn bad_input_is_an_error_that_says_what() {
        assert_eq!(ng_decode(b"nocookie"), Err(BencodeError::NoCookie));
        assert_eq!(ng_decode(b" d1:a1:be"), Err(BencodeError::NoCookie));
        assert_eq!(ng_decode(b"x d3:sdp99:short"), Err(BencodeError::Truncated));
        assert_eq!(Bencode::decode(b"i12"), Err(BencodeError::Truncated));
        assert_eq!(Bencode::decode(b"i1x2e"), Err(BencodeError::BadNumber(1)));
        assert_eq!(Bencode::decode(b"ie"), Err(BencodeError::BadNumber(1)));
        assert_eq!(Bencode::decode(b"i-e"), Err(BencodeError::BadNumber(1)));
        assert_eq!(Bencode::decode(b"-1:a"), Err(BencodeError::Unexpected(0)));
        assert_eq!(
            Bencode::decode(b"i99999999999999999999e"),
            Err(BencodeError::BadNumber(1))
        );
        assert_eq!(
            Bencode::decode(b"99999999999999999999:a"),
            Err(BencodeError::BadNumber(0))
        );
        assert_eq!(Bencode::decode(b"1:ab"), Err(BencodeError::Trailing(3)));
        assert_eq!(
            Bencode::decode(b"di1e1:ae"),
            Err(BencodeError::Unexpected(1))
        );
        assert_eq!(Bencode::decode(b""), Err(BencodeError::Truncated));
        assert_eq!(Bencode::decode(b"l"), Err(BencodeError::Truncated));
        // A key without a value; offsets count from the start of the whole message.
        assert_eq!(
            ng_decode(b"x d1:ae").unwrap_err(),
            BencodeError::Unexpected(6)
        );
        assert!(ng_decode(b"x d1:a?e")
            .unwrap_err()
            .to_string()
            .contains("offset 6"));
    }

    #[test]
    fn nesting_is_bounded_not_a_stack_overflow() {
        let ok = [b"l".repeat(MAX_DEPTH), b"e".repeat(MAX_DEPTH)].concat();
        assert!(Bencode::decode(&ok).is_ok());
        let deep = [b"l".repeat(MAX_DEPTH + 1), b"e".repeat(MAX_DEPTH + 1)].concat();
        assert_eq!(Bencode::decode(&deep), Err(BencodeError::TooDeep));
        // A megabyte of openers returns an error quickly instead of recursing a million deep.
        assert_eq!(
            Bencode::decode(&b"l".repeat(1 << 20)),
            Err(BencodeError::TooDeep)
        );
    }
}
