pub mod ec_point_formats;
pub mod signature_algorithms;
pub mod supported_groups;
pub mod use_srtp;

pub use ec_point_formats::ECPointFormatsExtension;
pub use signature_algorithms::SignatureAlgorithmsExtension;
pub use supported_groups::SupportedGroupsExtension;
pub use use_srtp::UseSrtpExtension;
