//! The lab's load generators and comparison runs against a live gateway (and rtpengine). The
//! simulated participants themselves are the test kit's ([`secrelay_testkit`]).
//!
//! * [`load`]: `lab gateway-load`, a fleet against `secrelay serve` with its CPU and memory.
//! * [`flood`]: `lab flood`, hostile traffic at a gateway while calls relay and peers join.
//! * [`control_flood`]: `lab flood control`, the HTTP, HTTPS and ng control surfaces abused.
//! * [`compare`]: `lab relay-compare`, secrelay and rtpengine relaying at the same rates.
//! * [`rtpengine`]: SDES calls through rtpengine's ng control protocol.
//! * [`ng_compare`]: `lab ng-compare`, rtpengine and secrelay answering the same ng requests
//!   (rtpengine's test scripts read by [`ng_suite`], SDPs compared by [`sdp_compare`]).

pub mod compare;
pub mod control_flood;
pub mod credentials;
pub mod flood;
pub mod load;
pub mod ng_compare;
pub mod ng_suite;
pub mod overload;
pub mod rtpengine;
pub mod sdp_compare;
pub mod turn;
