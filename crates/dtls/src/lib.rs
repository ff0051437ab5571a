//! # secrelay-dtls
//!
//! DTLS-SRTP for secrelay (RFC 5763, RFC 5764, RFC 6347, RFC 9147): certificates and their
//! SDP fingerprints, a private CA, and a sans-IO endpoint that turns datagrams and an injected
//! `Instant` into datagrams, timer deadlines and events (connected with SRTP keys, failed with a
//! reason, closed).
#![forbid(unsafe_code)]

pub mod alert;
pub mod ca;
pub mod cert;
pub mod cookie;
pub mod crypto_time;
pub mod endpoint;
pub mod engine;
#[cfg(feature = "openssl")]
pub mod engine_openssl;
pub mod fingerprint;
mod key_cache;
pub mod keying;
mod provider;
pub mod record;
#[cfg(fuzzing)]
pub use provider::fuzzing;

pub use alert::AlertDescription;
pub use ca::{CaDir, CaError, VerifyError};
pub use cert::{CertError, Certificate, KeyType};
pub use crypto_time::CryptoTime;
pub use endpoint::{
    Counters, Discard, DtlsVersion, Endpoint, EndpointConfig, Event, FailReason, LocalCertificate,
    Output, PeerAuth, Role, SendError, State, Timers, Verdict,
};
pub use engine::{CipherSuite, EcdheGroup, EngineChoice};
pub use fingerprint::{Fingerprint, FingerprintError, HashAlgorithm};
pub use keying::{ExportedKeyingMaterial, SrtpKeys};
