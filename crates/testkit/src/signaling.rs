//! The gateway's HTTP signaling as a client sees it: WHIP, WHEP and room joins (an SDP offer
//! POSTed, the answer and the resource's `Location` back), ICE restarts with PATCH, DELETE.

use std::time::Duration;

use anyhow::Context as _;

/// What a participant does in its room, and the endpoint it joins through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leg {
    /// `POST /whip/{room}`: sends only.
    Whip,
    /// `POST /whep/{room}`: receives only.
    Whep,
    /// `POST /rooms/{room}/join`: sends and receives.
    Join,
    /// `POST /rooms/{room}/rtp`: a SIP phone's SDES-SRTP leg (AES_CM_128_HMAC_SHA1_80, a key
    /// of its own in `a=crypto`) on a port pair of the gateway's; sends and receives.
    Sdes,
    /// `POST /rooms/{room}/rtp`: a SIP phone's plain RTP leg; sends and receives.
    Plain,
}

impl Leg {
    /// The path its offer is POSTed to.
    pub fn path(self, room: &str) -> String {
        match self {
            Leg::Whip => format!("/whip/{room}"),
            Leg::Whep => format!("/whep/{room}"),
            Leg::Join => format!("/rooms/{room}/join"),
            Leg::Sdes | Leg::Plain => format!("/rooms/{room}/rtp"),
        }
    }
    /// The direction of its offer's audio section.
    pub fn direction(self) -> crate::browser::Direction {
        match self {
            Leg::Whip => crate::browser::Direction::SendOnly,
            Leg::Whep => crate::browser::Direction::RecvOnly,
            Leg::Join | Leg::Sdes | Leg::Plain => crate::browser::Direction::SendRecv,
        }
    }
    /// Whether it is a telephony leg (a phone: plain RTP or SDES-SRTP), not WebRTC.
    pub fn is_phone(self) -> bool {
        matches!(self, Leg::Sdes | Leg::Plain)
    }
    /// Its name on a command line and in reports (`whip`, `whep`, `join`, `sdes`, `plain`).
    pub fn name(self) -> &'static str {
        match self {
            Leg::Whip => "whip",
            Leg::Whep => "whep",
            Leg::Join => "join",
            Leg::Sdes => "sdes",
            Leg::Plain => "plain",
        }
    }
    /// The leg a name means; `None` for a name that is none of [`Leg::name`]'s.
    pub fn from_name(name: &str) -> Option<Leg> {
        [Leg::Whip, Leg::Whep, Leg::Join, Leg::Sdes, Leg::Plain]
            .into_iter()
            .find(|l| l.name() == name)
    }
    /// Whether it sends audio.
    pub fn sends(self) -> bool {
        self != Leg::Whep
    }
    /// Whether it receives audio.
    pub fn receives(self) -> bool {
        self != Leg::Whip
    }
}

/// How to reach the gateway's HTTP side.
#[derive(Debug, Clone)]
pub struct Signaling {
    /// `http://host:port`.
    pub base_url: String,
    /// A Bearer token, if the rooms need one.
    pub token: Option<String>,
}

impl Signaling {
    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into()
    }

    /// POSTs an offer: (status, Location, body).
    pub fn post_offer(
        &self,
        path: &str,
        sdp: &str,
    ) -> anyhow::Result<(u16, Option<String>, String)> {
        let url = format!("{}{}", self.base_url, path);
        let mut req = Self::agent()
            .post(&url)
            .header("Content-Type", "application/sdp");
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = req.send(sdp).with_context(|| format!("POST {url}"))?;
        let status = resp.status().as_u16();
        let location = resp
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = resp
            .body_mut()
            .read_to_string()
            .with_context(|| format!("POST {url}: reading the answer"))?;
        Ok((status, location, body))
    }

    /// PATCHes a resource with a trickle-ice-sdpfrag body: (status, ETag, body).
    pub fn patch(
        &self,
        location: &str,
        if_match: &str,
        fragment: &str,
    ) -> anyhow::Result<(u16, Option<String>, String)> {
        let url = format!("{}{}", self.base_url, location);
        let mut req = Self::agent()
            .patch(&url)
            .header("Content-Type", "application/trickle-ice-sdpfrag")
            .header("If-Match", if_match);
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = req.send(fragment).with_context(|| format!("PATCH {url}"))?;
        let status = resp.status().as_u16();
        let etag = resp
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = resp
            .body_mut()
            .read_to_string()
            .with_context(|| format!("PATCH {url}: reading the fragment"))?;
        Ok((status, etag, body))
    }

    /// DELETEs a resource; the status.
    pub fn delete(&self, location: &str) -> anyhow::Result<u16> {
        let url = format!("{}{}", self.base_url, location);
        let mut req = Self::agent().delete(&url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        Ok(req
            .call()
            .with_context(|| format!("DELETE {url}"))?
            .status()
            .as_u16())
    }
}
