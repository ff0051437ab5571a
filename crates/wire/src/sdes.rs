//! SDES `a=crypto` attributes (RFC 4568 §9.1): what a SIP phone or PBX offers for SRTP keyed in
//! the signalling, and what the gateway answers.
//!
//! ```text
//! a=crypto:<tag> <crypto-suite> <key-params> [<session-param> ...]
//! key-params = key-param *(";" key-param)
//! key-param  = "inline:" <base64 key||salt> ["|" <lifetime>] ["|" <MKI>:<length>]
//! ```
//!
//! Parsing takes untrusted text: it never panics and says what was wrong. The key stays
//! base64 text here (the SRTP crate turns it into a key and zeroizes it); nothing in this
//! module prints it ([`KeyParam`]'s `Debug` leaves it out).

use std::fmt;

/// Why an `a=crypto` value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SdesError {
    /// Fewer than three fields (tag, suite, key parameters).
    MissingField(&'static str),
    /// The tag is not a decimal number of at most 9 digits (RFC 4568 §9.1: 1*9DIGIT).
    BadTag,
    /// A key parameter that is not `inline:` (the only method RFC 4568 defines).
    UnknownKeyMethod(String),
    /// A key parameter whose key, lifetime or MKI is malformed (which part).
    BadKeyParam(&'static str),
}

impl fmt::Display for SdesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SdesError::MissingField(what) => write!(f, "a=crypto without {what}"),
            SdesError::BadTag => write!(f, "a=crypto tag is not a number of 1-9 digits"),
            SdesError::UnknownKeyMethod(m) => {
                write!(f, "a=crypto key method {m:?} is not inline")
            }
            SdesError::BadKeyParam(what) => write!(f, "a=crypto key parameter: {what}"),
        }
    }
}

impl std::error::Error for SdesError {}

/// One `inline:` key parameter.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyParam {
    /// The base64 master key and salt, as written (a secret: never logged).
    pub key_salt: String,
    /// The lifetime (`2^31` or a decimal number of packets), if given.
    pub lifetime: Option<String>,
    /// The master key identifier and its length in bytes, if given.
    pub mki: Option<(u64, u8)>,
}

impl fmt::Debug for KeyParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyParam")
            .field("key_salt", &"<redacted>")
            .field("lifetime", &self.lifetime)
            .field("mki", &self.mki)
            .finish()
    }
}

impl KeyParam {
    /// The `inline:` form, for an SRTP key parser (`inline:<key>[|lifetime][|mki:len]`).
    pub fn inline(&self) -> String {
        let mut s = format!("inline:{}", self.key_salt);
        if let Some(l) = &self.lifetime {
            s.push('|');
            s.push_str(l);
        }
        if let Some((v, len)) = self.mki {
            s.push_str(&format!("|{v}:{len}"));
        }
        s
    }
}

/// An `a=crypto` attribute's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crypto {
    /// The tag the answer repeats for the line it accepts.
    pub tag: u32,
    /// The crypto suite (`AES_CM_128_HMAC_SHA1_80`, `AEAD_AES_256_GCM`, …), as written.
    pub suite: String,
    /// The key parameters (one in practice; several only with MKIs).
    pub keys: Vec<KeyParam>,
    /// Session parameters (`UNENCRYPTED_SRTP`, `KDR=…`, `WSH=…`, …), as written.
    pub session_params: Vec<String>,
}

impl Crypto {
    /// Parses the value of an `a=crypto` line (after `a=crypto:`).
    pub fn parse(value: &str) -> Result<Crypto, SdesError> {
        let mut fields = value.split_ascii_whitespace();
        let tag = fields.next().ok_or(SdesError::MissingField("a tag"))?;
        if tag.is_empty() || tag.len() > 9 || !tag.bytes().all(|b| b.is_ascii_digit()) {
            return Err(SdesError::BadTag);
        }
        let tag: u32 = tag.parse().map_err(|_| SdesError::BadTag)?;
        let suite = fields
            .next()
            .ok_or(SdesError::MissingField("a crypto suite"))?
            .to_owned();
        let params = fields
            .next()
            .ok_or(SdesError::MissingField("key parameters"))?;
        let keys = params
            .split(';')
            .map(parse_key_param)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Crypto {
            tag,
            suite,
            keys,
            session_params: fields.map(str::to_owned).collect(),
        })
    }

    /// The attribute's value as written in an SDP (after `a=crypto:`).
    pub fn to_value(&self) -> String {
        let keys: Vec<String> = self.keys.iter().map(KeyParam::inline).collect();
        let mut s = format!("{} {} {}", self.tag, self.suite, keys.join(";"));
        for p in &self.session_params {
            s.push(' ');
            s.push_str(p);
        }
        s
    }

    /// A session parameter that changes what SRTP does (RFC 4568 §6.3: unencrypted or
    /// unauthenticated SRTP/SRTCP, a key derivation rate other than 0, FEC order), which a
    /// gateway that always encrypts and authenticates cannot honour; `None` if there is none.
    /// `WSH` (a replay window size hint) changes nothing and is accepted.
    pub fn unsupported_session_param(&self) -> Option<&str> {
        self.session_params
            .iter()
            .map(String::as_str)
            .find(|p| !(p.starts_with("WSH=") || *p == "KDR=0"))
    }
}

fn parse_key_param(param: &str) -> Result<KeyParam, SdesError> {
    let Some(info) = param.strip_prefix("inline:") else {
        let method = param.split(':').next().unwrap_or(param);
        return Err(SdesError::UnknownKeyMethod(
            method.chars().take(32).collect(),
        ));
    };
    let mut parts = info.split('|');
    let key_salt = parts.next().unwrap_or("");
    if key_salt.is_empty()
        || !key_salt
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
    {
        return Err(SdesError::BadKeyParam("the key is not base64"));
    }
    let mut lifetime = None;
    let mut mki = None;
    for part in parts {
        if let Some((value, len)) = part.split_once(':') {
            if mki.is_some() {
                return Err(SdesError::BadKeyParam("two MKIs"));
            }
            let value: u64 = value
                .parse()
                .map_err(|_| SdesError::BadKeyParam("the MKI value is not a number"))?;
            let len: u8 = len
                .parse()
                .ok()
                .filter(|l| (1..=128).contains(l))
                .ok_or(SdesError::BadKeyParam("the MKI length is not 1-128"))?;
            mki = Some((value, len));
        } else {
            let ok = match part.strip_prefix("2^") {
                Some(exp) => exp.parse::<u8>().is_ok_and(|e| e <= 64),
                None => !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()),
            };
            if !ok || lifetime.is_some() || mki.is_some() {
                return Err(SdesError::BadKeyParam(
                    "the lifetime is neither a number nor 2^N, or is out of place",
                ));
            }
            lifetime = Some(part.to_owned());
        }
    }
    Ok(KeyParam {
        key_salt: key_salt.to_owned(),
        lifetime,
        mki,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_4568_examples_parse_and_write_back() {
        // RFC 4568 §9.1's example.
        let v = "1 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR|2^20|1:4 FEC_ORDER=FEC_SRTP";
        let c = Crypto::parse(v).unwrap();
        assert_eq!(c.tag, 1);
        assert_eq!(c.suite, "AES_CM_128_HMAC_SHA1_80");
        assert_eq!(c.keys.len(), 1);
        assert_eq!(c.keys[0].lifetime.as_deref(), Some("2^20"));
        assert_eq!(c.keys[0].mki, Some((1, 4)));
        assert_eq!(c.session_params, vec!["FEC_ORDER=FEC_SRTP".to_owned()]);
        assert_eq!(c.unsupported_session_param(), Some("FEC_ORDER=FEC_SRTP"));
        assert_eq!(c.to_value(), v);
        let plain = Crypto::parse(
            "2 AEAD_AES_256_GCM inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz WSH=64",
        )
        .unwrap();
        assert_eq!(plain.keys[0].mki, None);
        assert_eq!(plain.unsupported_session_param(), None);
        assert!(
            !format!("{plain:?}").contains("WVNf"),
            "keys never in Debug"
        );
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        assert_eq!(Crypto::parse(""), Err(SdesError::MissingField("a tag")));
        assert_eq!(Crypto::parse("x AES inline:AA"), Err(SdesError::BadTag));
        assert_eq!(
            Crypto::parse("1234567890 AES inline:AA"),
            Err(SdesError::BadTag)
        );
        assert_eq!(
            Crypto::parse("1 AES_CM_128_HMAC_SHA1_80"),
            Err(SdesError::MissingField("key parameters"))
        );
        assert!(matches!(
            Crypto::parse("1 AES_CM_128_HMAC_SHA1_80 uri:http://x"),
            Err(SdesError::UnknownKeyMethod(_))
        ));
        for bad in [
            "1 S inline:",
            "1 S inline:AA!A",
            "1 S inline:AAAA|2^99",
            "1 S inline:AAAA|1:0",
            "1 S inline:AAAA|1:4|2^20",
            "1 S inline:AAAA|x:4",
        ] {
            assert!(
                matches!(Crypto::parse(bad), Err(SdesError::BadKeyParam(_))),
                "{bad}"
            );
        }
    }
}
