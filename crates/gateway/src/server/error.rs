//! Why the gateway refused a request: one type for every refusal of the HTTP API and of the ng
//! protocol, and the one place where each kind is given its HTTP status, its `Retry-After`
//! and the reason the client reads (HTTP body or ng `error-reason`).
//!
//! Handlers return an [`ApiError`]; axum turns it into the response ([`IntoResponse`]) and the
//! router's refusal counter sees it there (`secrelay_http_refused_total`), so no handler
//! counts or formats a refusal itself. The ng socket answers `result: error` with the same
//! reason ([`ApiError::reason`]).

use std::borrow::Cow;
use std::fmt;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::auth::Failure;
use super::cluster::{DirectoryError, HandoverError};
use super::ng::ForwardError;
use super::ports::PortError;
use crate::room::PlayError;
use crate::shard::{ControlError, JoinError};

/// Seconds a client refused for load is told to wait (`Retry-After`): a few of the workers'
/// load intervals, so that the load it sees next is a new one.
pub(crate) const RETRY_AFTER_SECS: u64 = 2;

/// Why a request was refused.
#[derive(Debug)]
pub enum ApiError {
    /// The request is malformed (what was wrong): a room name, a body, an SDP, a flag.
    BadRequest(Cow<'static, str>),
    /// The body is not of the type the route takes (what it must be).
    UnsupportedMediaType(Cow<'static, str>),
    /// The credential is missing or bad (401), or does not reach what was asked (403).
    Denied(Failure),
    /// Nothing by that name here (what was looked for).
    NotFound(Cow<'static, str>),
    /// A conditional request without its condition (what it needs).
    PreconditionRequired(&'static str),
    /// A condition that does not hold (which).
    PreconditionFailed(&'static str),
    /// Too many sessions from one source are not connected yet.
    TooManyPending {
        /// Those sessions.
        pending: usize,
    },
    /// The gateway takes nobody more now (why): full, or its worker sheds load.
    Busy(String),
    /// An offer, answer or renegotiation the room's worker did not take.
    Join(JoinError),
    /// A control operation the room's worker did not do.
    Control(ControlError),
    /// A digit or media that could not be played to or as a participant.
    Play(PlayError),
    /// No local ports for a telephony leg.
    Ports(PortError),
    /// A hand-over of this node's calls that cannot be done.
    Handover(HandoverError),
    /// The cluster's directory did not answer.
    Directory(DirectoryError),
    /// An ng command for a call another node owns did not reach that node.
    Forward(ForwardError),
    /// Something of ours failed (what): no fault of the request.
    Internal(Cow<'static, str>),
}

impl ApiError {
    /// A malformed request, `why`.
    pub fn bad(why: impl Into<Cow<'static, str>>) -> ApiError {
        ApiError::BadRequest(why.into())
    }

    /// Nothing by that name: `what`.
    pub fn not_found(what: impl Into<Cow<'static, str>>) -> ApiError {
        ApiError::NotFound(what.into())
    }

    /// A failure of ours, `what`.
    pub fn internal(what: impl Into<Cow<'static, str>>) -> ApiError {
        ApiError::Internal(what.into())
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Denied(f) if f.status() == 403 => StatusCode::FORBIDDEN,
            ApiError::Denied(_) => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::PreconditionRequired(_) => StatusCode::PRECONDITION_REQUIRED,
            ApiError::PreconditionFailed(_) => StatusCode::PRECONDITION_FAILED,
            ApiError::TooManyPending { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Busy(_)
            | ApiError::Ports(_)
            | ApiError::Directory(_)
            | ApiError::Handover(HandoverError::Directory(_)) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Handover(_) => StatusCode::CONFLICT,
            ApiError::Forward(ForwardError::Timeout(_)) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::Forward(_) => StatusCode::BAD_GATEWAY,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Join(e) => join_status(e),
            ApiError::Control(e) => control_status(e),
            ApiError::Play(e) => play_status(e),
        }
    }

    /// Seconds the client is told to wait before it tries again, for a refusal that passes.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::TooManyPending { .. }
            | ApiError::Busy(_)
            | ApiError::Ports(_)
            | ApiError::Join(JoinError::RoomFull { .. }) => Some(RETRY_AFTER_SECS),
            _ => None,
        }
    }

    /// The one line the client reads: bounded, without control characters (a parser's
    /// error may quote the network's input).
    pub fn reason(&self) -> String {
        self.to_string()
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(300)
            .collect()
    }
}

fn join_status(e: &JoinError) -> StatusCode {
    match e {
        JoinError::WebRtc(_) | JoinError::Rtp(_) => StatusCode::UNPROCESSABLE_ENTITY,
        JoinError::NoMember { .. } => StatusCode::NOT_FOUND,
        JoinError::WrongLeg { .. } | JoinError::StaleAnswer { .. } => StatusCode::CONFLICT,
        JoinError::RoomFull { .. } | JoinError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
    }
}

fn play_status(e: &PlayError) -> StatusCode {
    match e {
        PlayError::NoMember => StatusCode::NOT_FOUND,
        PlayError::Queued => StatusCode::TOO_MANY_REQUESTS,
        PlayError::NoWay | PlayError::NoCodec | PlayError::Codec => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
    }
}

fn control_status(e: &ControlError) -> StatusCode {
    match e {
        ControlError::NoParticipant { .. } => StatusCode::NOT_FOUND,
        ControlError::NoLayer { .. } => StatusCode::BAD_REQUEST,
        ControlError::TooManySettings { .. } | ControlError::ShuttingDown => {
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::BadRequest(why) | ApiError::NotFound(why) | ApiError::Internal(why) => {
                f.write_str(why)
            }
            ApiError::UnsupportedMediaType(why) => f.write_str(why),
            ApiError::PreconditionRequired(why) | ApiError::PreconditionFailed(why) => {
                f.write_str(why)
            }
            ApiError::Denied(failure) => f.write_str(failure.reason()),
            ApiError::TooManyPending { pending } => write!(
                f,
                "{pending} sessions from this address are not connected yet \
                 (max_pending_offers_per_source)"
            ),
            ApiError::Busy(why) => f.write_str(why),
            ApiError::Join(e @ (JoinError::WebRtc(_) | JoinError::Rtp(_))) => {
                write!(f, "cannot answer the offer: {e}")
            }
            ApiError::Join(e @ JoinError::RoomFull { .. }) => {
                write!(f, "no place for another participant: {e}")
            }
            ApiError::Join(e) => e.fmt(f),
            ApiError::Control(e) => e.fmt(f),
            ApiError::Play(e) => e.fmt(f),
            ApiError::Ports(e) => write!(f, "no place for another participant: {e}"),
            ApiError::Handover(e) => e.fmt(f),
            ApiError::Directory(e) => write!(f, "the cluster's directory does not answer: {e}"),
            ApiError::Forward(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ApiError {}

impl From<JoinError> for ApiError {
    fn from(e: JoinError) -> ApiError {
        ApiError::Join(e)
    }
}

impl From<ControlError> for ApiError {
    fn from(e: ControlError) -> ApiError {
        ApiError::Control(e)
    }
}

impl From<PlayError> for ApiError {
    fn from(e: PlayError) -> ApiError {
        ApiError::Play(e)
    }
}

impl From<PortError> for ApiError {
    fn from(e: PortError) -> ApiError {
        ApiError::Ports(e)
    }
}

impl From<HandoverError> for ApiError {
    fn from(e: HandoverError) -> ApiError {
        ApiError::Handover(e)
    }
}

impl From<ForwardError> for ApiError {
    fn from(e: ForwardError) -> ApiError {
        ApiError::Forward(e)
    }
}

impl From<DirectoryError> for ApiError {
    fn from(e: DirectoryError) -> ApiError {
        ApiError::Directory(e)
    }
}

/// Marks a response as a refusal, for the router's counter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refused;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut line = self.reason();
        line.push('\n');
        let mut r = (
            self.status(),
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            line,
        )
            .into_response();
        let h = r.headers_mut();
        if self.status() == StatusCode::UNAUTHORIZED {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(secs) = self.retry_after() {
            h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        r.extensions_mut().insert(Refused);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_status_and_retry() {
        let full = ApiError::Join(JoinError::RoomFull {
            members: 4,
            reserved: true,
        });
        assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(full.retry_after(), Some(RETRY_AFTER_SECS));
        assert_eq!(
            full.reason(),
            "no place for another participant: the room is full (4 participants; the rest is \
             kept for participants with a token)"
        );
        let stale = ApiError::Join(JoinError::StaleAnswer { pending: Some(3) });
        assert_eq!(stale.status(), StatusCode::CONFLICT);
        assert_eq!(stale.retry_after(), None);
        let denied = ApiError::Denied(Failure::Missing).into_response();
        assert_eq!(denied.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(denied.headers()[header::WWW_AUTHENTICATE], "Bearer");
        assert!(denied.extensions().get::<Refused>().is_some());
        let other = ApiError::Denied(Failure::OtherRoom).into_response();
        assert_eq!(other.status(), StatusCode::FORBIDDEN);
        assert!(other.headers().get(header::WWW_AUTHENTICATE).is_none());
        let ports = ApiError::from(PortError::Exhausted {
            lo: 30000,
            hi: 30003,
            ip: [127, 0, 0, 1].into(),
        })
        .into_response();
        assert_eq!(ports.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(ports.headers()[header::RETRY_AFTER], "2");
        let gone = ApiError::from(JoinError::NoMember {
            room: "r".into(),
            id: "p1".into(),
        });
        assert_eq!(gone.status(), StatusCode::NOT_FOUND);
        assert_eq!(gone.reason(), "no member p1 in r");
        let late = ApiError::from(ForwardError::Timeout(([127, 0, 0, 2], 2223).into()));
        assert_eq!(late.status(), StatusCode::GATEWAY_TIMEOUT);
        let layer = ApiError::from(ControlError::NoLayer {
            rid: Some("h".into()),
        });
        assert_eq!(layer.status(), StatusCode::BAD_REQUEST);
        assert!(layer.reason().contains("\"h\""), "{layer}");
    }

    #[test]
    fn the_reason_is_one_bounded_line() {
        let e = ApiError::bad(format!("bad SDP offer: {}\r\nx", "y".repeat(400)));
        let r = e.reason();
        assert_eq!(r.chars().count(), 300);
        assert!(!r.contains('\n') && !r.contains('\r'));
    }
}
