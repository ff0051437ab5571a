//! The studies. Each file holds one.

pub mod biterror;
pub mod srtp;
pub mod symmetric;

/// Every study, in the order `lab all` runs them.
pub(crate) fn all() -> Vec<&'static dyn crate::Study> {
    vec![&srtp::SrtpStudy, &biterror::BiterrorStudy]
}
