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
