//! The studies. Each file holds one.

pub mod crypto;
pub mod srtp;

/// Every study, in the order `lab all` runs them.
pub(crate) fn all() -> Vec<&'static dyn crate::Study> {
    vec![&srtp::SrtpStudy, &crypto::CryptoStudy]
}
