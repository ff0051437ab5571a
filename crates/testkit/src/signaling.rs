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

/// How to reach the gateway's signaling.
#[derive(Debug, Clone)]
pub struct Signaling {
    /// `https://host:port` (or `http://host:port` where plain HTTP was asked for).
    pub base_url: String,
    /// A Bearer token, if the rooms need one.
    pub token: Option<String>,
    /// The gateway's admin key, for `/api/…` and `/metrics` (the room token is sent there
    /// when there is none).
    pub admin: Option<String>,
    /// The certificate (DER) of the private CA that issued the gateway's HTTPS certificate:
    /// the only trust anchor of an `https://` base URL (the gateway's certificate is verified
    /// against it, name included).
    pub ca: Option<Vec<u8>>,
}

/// A response's status and its body as text.
fn status_and_body(
    method: &str,
    url: &str,
    mut resp: ureq::http::Response<ureq::Body>,
) -> anyhow::Result<(u16, String)> {
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .read_to_string()
        .with_context(|| format!("{method} {url}: reading the body"))?;
    Ok((status, body))
}

impl Signaling {
    /// Plain HTTP or HTTPS at `base_url`, no token, no CA.
    pub fn new(base_url: impl Into<String>) -> Signaling {
        Signaling {
            base_url: base_url.into(),
            token: None,
            admin: None,
            ca: None,
        }
    }

    /// The same, trusting the CA whose certificate is in the PEM file `ca_pem` (the first
    /// certificate in it).
    pub fn with_ca_file(mut self, ca_pem: &std::path::Path) -> anyhow::Result<Signaling> {
        let text = std::fs::read_to_string(ca_pem)
            .with_context(|| format!("the CA certificate {}", ca_pem.display()))?;
        let chain = secrelay_dtls::cert::chain_from_pem(&text)
            .map_err(|e| anyhow::anyhow!("the CA certificate {}: {e}", ca_pem.display()))?;
        self.ca = chain.into_iter().next();
        Ok(self)
    }

    /// The same, sending `admin` (the gateway's admin key) to `/api/…` and `/metrics`.
    pub fn with_admin(mut self, admin: impl Into<String>) -> Signaling {
        self.admin = Some(admin.into());
        self
    }

    /// The credential for `path`: the admin key for the operator's routes, else the token.
    fn credential(&self, path: &str) -> Option<&str> {
        let operator = path.starts_with("/api/") || path.starts_with("/metrics");
        match (&self.admin, &self.token) {
            (Some(a), _) if operator => Some(a),
            (_, t) => t.as_deref(),
        }
    }

    fn agent(&self) -> ureq::Agent {
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // Redirects are followed by `post_offer` itself (ureq does not resend a POST).
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(10)));
        if let Some(ca) = &self.ca {
            let roots =
                ureq::tls::RootCerts::new_with_certs(&[
                    ureq::tls::Certificate::from_der(ca).to_owned()
                ]);
            config = config.tls_config(
                ureq::tls::TlsConfig::builder()
                    .provider(ureq::tls::TlsProvider::Rustls)
                    .unversioned_rustls_crypto_provider(std::sync::Arc::new(
                        rustls::crypto::aws_lc_rs::default_provider(),
                    ))
                    .root_certs(roots)
                    .build(),
            );
        }
        config.build().into()
    }

    /// A resource's URL: `location` as it is when it is absolute (a session made at another
    /// node after a redirect), else on the base URL.
    pub fn url_of(&self, location: &str) -> String {
        if location.starts_with("http://") || location.starts_with("https://") {
            location.to_owned()
        } else {
            format!("{}{location}", self.base_url)
        }
    }

    /// POSTs an offer: (status, Location, body). A `307`/`308` is followed as a WHIP client
    /// does (RFC 9725 §4.5: the same offer POSTed again to the `Location`), up to 3 times; the
    /// session's `Location` is then made absolute on the node that answered.
    pub fn post_offer(
        &self,
        path: &str,
        sdp: &str,
    ) -> anyhow::Result<(u16, Option<String>, String)> {
        let mut url = format!("{}{}", self.base_url, path);
        let mut redirected = false;
        for _ in 0..4 {
            let mut req = self
                .agent()
                .post(&url)
                .header("Content-Type", "application/sdp");
            if let Some(t) = &self.token {
                req = req.header("Authorization", &format!("Bearer {t}"));
            }
            let mut resp = req.send(sdp).with_context(|| format!("POST {url}"))?;
            let status = resp.status().as_u16();
            let mut location = resp
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = resp
                .body_mut()
                .read_to_string()
                .with_context(|| format!("POST {url}: reading the answer"))?;
            match (status, location.take()) {
                (307 | 308, Some(next)) => {
                    url = next;
                    redirected = true;
                }
                (_, location) => {
                    let origin = url
                        .find("://")
                        .and_then(|s| url[s + 3..].find('/').map(|p| &url[..s + 3 + p]))
                        .unwrap_or(&url);
                    let location = match location {
                        Some(l) if redirected && l.starts_with('/') => Some(format!("{origin}{l}")),
                        other => other,
                    };
                    return Ok((status, location, body));
                }
            }
        }
        anyhow::bail!("POST {path}: redirected more than 3 times (last to {url})")
    }

    /// PATCHes a resource with a trickle-ice-sdpfrag body: (status, ETag, body).
    pub fn patch(
        &self,
        location: &str,
        if_match: &str,
        fragment: &str,
    ) -> anyhow::Result<(u16, Option<String>, String)> {
        let url = self.url_of(location);
        let mut req = self
            .agent()
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

    /// Sets `room` to mix its audio (`Some`: at most that many talkers summed, 0 for every one
    /// who talks) or not (`PATCH /api/rooms/{room}`). Err: the status and the gateway's reason
    /// when it is not 204.
    pub fn set_mixing(&self, room: &str, mix: Option<u16>) -> anyhow::Result<()> {
        let url = format!("{}/api/rooms/{room}", self.base_url);
        let mut req = self
            .agent()
            .patch(&url)
            .header("Content-Type", "application/json");
        if let Some(t) = self.credential("/api/") {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = req
            .send(match mix {
                Some(n) => format!("{{\"mix\": true, \"speakers\": {n}}}"),
                None => "{\"mix\": false}".to_owned(),
            })
            .with_context(|| format!("PATCH {url}"))?;
        let status = resp.status().as_u16();
        if status != 204 {
            let body = resp.body_mut().read_to_string().unwrap_or_default();
            anyhow::bail!("PATCH {url} answered {status}: {}", body.trim());
        }
        Ok(())
    }

    /// GETs `path` (`/metrics`, `/api/rooms`): (status, body).
    pub fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        let url = format!("{}{}", self.base_url, path);
        let mut req = self.agent().get(&url);
        if let Some(t) = self.credential(path) {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let resp = req.call().with_context(|| format!("GET {url}"))?;
        status_and_body("GET", &url, resp)
    }

    /// POSTs nothing to `path` (`/api/cluster/drain`, …): (status, body).
    pub fn post(&self, path: &str) -> anyhow::Result<(u16, String)> {
        let url = format!("{}{}", self.base_url, path);
        let mut req = self.agent().post(&url);
        if let Some(t) = self.credential(path) {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let resp = req.send_empty().with_context(|| format!("POST {url}"))?;
        status_and_body("POST", &url, resp)
    }

    /// A series' value on `/metrics` (its name with its labels written out, as the text
    /// has it).
    pub fn metric(&self, series: &str) -> anyhow::Result<u64> {
        let (status, text) = self.get("/metrics")?;
        anyhow::ensure!(status == 200, "GET /metrics: {status}");
        text.lines()
            .find_map(|l| {
                l.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .with_context(|| format!("{series} is not on /metrics"))
    }

    /// The names of the live nodes `GET /api/cluster` lists, in its order (by name).
    pub fn cluster_nodes(&self) -> anyhow::Result<Vec<String>> {
        let (status, body) = self.get("/api/cluster")?;
        anyhow::ensure!(status == 200, "GET /api/cluster: {status} {body}");
        let v: serde_json::Value = serde_json::from_str(&body).context("GET /api/cluster")?;
        Ok(v["nodes"]
            .as_array()
            .map(|nodes| {
                nodes
                    .iter()
                    .filter_map(|n| Some(n["node"].as_str()?.to_owned()))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// DELETEs a resource; the status.
    pub fn delete(&self, location: &str) -> anyhow::Result<u16> {
        let url = self.url_of(location);
        let mut req = self.agent().delete(&url);
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

/// An admin key for a `secrelay serve` the lab or a test starts: made fresh, written to a file
/// only this user can read (`--admin-key-file`), the file removed on drop.
#[derive(Debug)]
pub struct AdminKeyFile {
    path: std::path::PathBuf,
    key: String,
}

impl AdminKeyFile {
    /// A fresh key in a new file under the temporary directory.
    pub fn new() -> anyhow::Result<AdminKeyFile> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut b = [0u8; 32];
        getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("random bytes: {e}"))?;
        let key: String = b.iter().map(|x| format!("{x:02x}")).collect();
        let path = std::env::temp_dir().join(format!("secrelay-admin-{}.key", &key[..16]));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("the admin key file {}", path.display()))?;
        f.write_all(key.as_bytes())
            .with_context(|| format!("the admin key file {}", path.display()))?;
        Ok(AdminKeyFile { path, key })
    }

    /// The file (for `--admin-key-file`).
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl Drop for AdminKeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
