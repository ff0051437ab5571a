//! The studies. Each file holds one.

pub mod amortization;
pub mod biterror;
pub mod calls;
pub mod codec;
pub mod crypto;
pub mod srtp;
pub mod srtp_engines;
pub mod srtp_gpu;
pub mod srtp_peers;
pub mod srtp_sizes;
pub mod symmetric;

/// The SRTP profiles the size sweep, the instruction counts and the bit-error study cover:
/// the ones DTLS-SRTP negotiates, AES-256 counter mode, and NULL with an 80-bit tag. The other
/// SDES suites (AES-192 counter mode, AES in f8 mode, NULL with a 32-bit tag) are in `lab
/// srtp`'s per-packet table only (not with `--quick`), which keeps the sweeps' time where it
/// was.
pub const SWEPT_PROFILES: [secrelay_srtp::Profile; 7] = {
    use secrelay_srtp::Profile as P;
    [
        P::AesCm128HmacSha1_80,
        P::AesCm128HmacSha1_32,
        P::AesCm256HmacSha1_80,
        P::AesCm256HmacSha1_32,
        P::AeadAes128Gcm,
        P::AeadAes256Gcm,
        P::NullHmacSha1_80,
    ]
};

/// Every study, in the order `lab all` runs them.
pub(crate) fn all() -> Vec<&'static dyn crate::Study> {
    vec![
        &srtp::SrtpStudy,
        &crypto::CryptoStudy,
        &amortization::AmortizationStudy,
        &biterror::BiterrorStudy,
        &crate::handshake::study::HandshakeStudy,
        &crate::handshake::tls_study::TlsStudy,
        &calls::CallsStudy,
        &codec::CodecStudy,
    ]
}

/// Studies run by name only, not by `lab all` (their rows are parts of studies it runs).
pub(crate) fn by_name_only() -> Vec<&'static dyn crate::Study> {
    vec![&srtp_gpu::GpuStudy]
}
