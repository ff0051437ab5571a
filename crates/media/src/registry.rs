//! The codec registry: what a gateway consults when it negotiates codecs in SDP.
//!
//! An SDP media section names its formats by payload type, and each dynamic one by
//! `a=rtpmap:PT NAME/CLOCK[/CHANNELS]` with optional `a=fmtp:PT PARAMS`. The registry finds
//! the [`FormatSpec`] for a (name, clock rate, channels) triple, case-insensitively as RFC
//! 4566 says encoding names are, and makes a fresh [`Codec`] per stream, configured from the
//! fmtp (Opus: `useinbandfec`, `stereo`, `maxaveragebitrate`, `cbr`; AMR: `octet-align`,
//! `mode-set`). AMR-NB and AMR-WB come last: their codecs need the system's opencore-amr and
//! vo-amrwbenc at run time, so making one where those are missing is an [`Error::Setup`]
//! naming the library ([`crate::amr::amr_available`] asks first). Telephone-events (RFC
//! 4733) are formats too, of [`FormatKind::TelephoneEvent`]: negotiated like a codec, carried
//! by [`crate::dtmf`], never decoded to PCM.
//!
//! ```
//! use secrelay_media::Registry;
//! let reg = Registry::standard();
//! let opus = reg.find_rtpmap("opus/48000/2").unwrap();
//! assert_eq!((opus.clock_rate, opus.channels, opus.default_payload_type), (48_000, 2, 111));
//! let codec = reg.make(opus, 96, Some("minptime=10;useinbandfec=1")).unwrap();
//! assert_eq!((codec.payload_type(), codec.has_fec()), (96, true));
//! assert!(reg.find("g722", 8000, 1).is_some());
//! assert!(reg.find("G722", 16_000, 1).is_none()); // RFC 3551: G.722's clock is 8000
//! ```

use crate::amr::{Amr, Band};
use crate::g711::{Pcma, Pcmu};
use crate::g722::G722;
use crate::opus::Opus;
use crate::{Codec, Error};

/// What a format carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatKind {
    /// Audio: decoded to and encoded from PCM by a [`Codec`].
    Audio,
    /// RFC 4733 telephone-events (DTMF): see [`crate::dtmf`].
    TelephoneEvent,
}

/// One RTP payload format as SDP names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatSpec {
    /// Encoding name as we write it in `a=rtpmap` (matched case-insensitively).
    pub encoding_name: &'static str,
    /// RTP clock rate, Hz.
    pub clock_rate: u32,
    /// Channels as in `a=rtpmap` (1 when the rtpmap says none; Opus always says 2).
    pub channels: u8,
    /// The static payload type (RFC 3551), or the dynamic one we offer by default.
    pub default_payload_type: u8,
    /// Whether [`FormatSpec::default_payload_type`] is static (no `a=rtpmap` needed).
    pub static_payload_type: bool,
    /// Audio or telephone-events.
    pub kind: FormatKind,
    /// The `a=fmtp` parameters we put in an offer, if any.
    pub offer_fmtp: Option<&'static str>,
    /// Packet times we can send in this format, ms.
    pub ptimes: &'static [u32],
}

impl FormatSpec {
    /// The `a=rtpmap` value: `NAME/CLOCK` or `NAME/CLOCK/CHANNELS`.
    pub fn rtpmap(&self) -> String {
        if self.channels > 1 {
            format!(
                "{}/{}/{}",
                self.encoding_name, self.clock_rate, self.channels
            )
        } else {
            format!("{}/{}", self.encoding_name, self.clock_rate)
        }
    }
}

/// `a=fmtp` parameters: `key=value` pairs separated by `;` (keys case-insensitive), or a
/// bare value (telephone-event's `0-15`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fmtp {
    params: Vec<(String, String)>,
}

impl Fmtp {
    /// Parses an fmtp value. Never fails: pieces without `=` are kept with an empty key.
    pub fn parse(s: &str) -> Fmtp {
        let params = s
            .split(';')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((k, v)) => (k.trim().to_ascii_lowercase(), v.trim().to_string()),
                None => (String::new(), p.to_string()),
            })
            .collect();
        Fmtp { params }
    }
    /// The value of `key` (lower case), if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
    /// `key` as a number, if present and well-formed.
    pub fn get_u32(&self, key: &str) -> Option<u32> {
        self.get(key).and_then(|v| v.parse().ok())
    }
    /// `key=1` (true), `key=0` (false), or None.
    pub fn flag(&self, key: &str) -> Option<bool> {
        match self.get(key) {
            Some("1") => Some(true),
            Some("0") => Some(false),
            _ => None,
        }
    }
}

/// How the registry sets up Opus instances (the fmtp may override bitrate, FEC, channels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpusSettings {
    /// PCM rate the instances decode to and encode from (8, 12, 16, 24 or 48 kHz).
    pub pcm_rate: u32,
    /// Target bitrate, bits per second, unless `maxaveragebitrate` is lower.
    pub bitrate: i32,
    /// Encoder complexity, 0–10.
    pub complexity: i32,
    /// Packet loss the encoder plans for when FEC is on, %.
    pub fec_loss_pct: i32,
}

impl Default for OpusSettings {
    fn default() -> Self {
        OpusSettings {
            pcm_rate: 48_000,
            bitrate: 32_000,
            complexity: Opus::DEFAULT_COMPLEXITY,
            fec_loss_pct: 10,
        }
    }
}

/// The formats we know and how to make their codecs.
#[derive(Debug, Clone)]
pub struct Registry {
    formats: Vec<FormatSpec>,
    opus: OpusSettings,
}

const PCM_PTIMES: &[u32] = &[10, 20, 30, 40, 60];
/// AMR sends whole 20 ms frames, up to three per packet.
const AMR_PTIMES: &[u32] = &[20, 40, 60];
/// What rtpengine offers for AMR and AMR-WB (RFC 4867 octet-aligned mode; mode changes
/// restricted to neighbouring modes every other frame).
const AMR_OFFER_FMTP: &str = "octet-align=1;mode-change-capability=2";

impl Registry {
    /// Every format secrelay has, in our order of preference for an offer: Opus, G.722,
    /// PCMU, PCMA, telephone-event at 48 kHz (for Opus) and 8 kHz (for the others), then
    /// AMR-WB and AMR (dynamic 97 and 96; usable only where their libraries load).
    pub fn standard() -> Registry {
        Registry::with_opus(OpusSettings::default())
    }

    /// As [`Registry::standard`], Opus set up as `opus` says.
    pub fn with_opus(opus: OpusSettings) -> Registry {
        let audio = |name, clock, channels, pt, is_static, fmtp| FormatSpec {
            encoding_name: name,
            clock_rate: clock,
            channels,
            default_payload_type: pt,
            static_payload_type: is_static,
            kind: FormatKind::Audio,
            offer_fmtp: fmtp,
            ptimes: PCM_PTIMES,
        };
        let event = |clock, pt| FormatSpec {
            encoding_name: "telephone-event",
            clock_rate: clock,
            channels: 1,
            default_payload_type: pt,
            static_payload_type: false,
            kind: FormatKind::TelephoneEvent,
            offer_fmtp: Some("0-16"),
            ptimes: PCM_PTIMES,
        };
        Registry {
            formats: vec![
                audio(
                    "opus",
                    48_000,
                    2,
                    Opus::DEFAULT_PAYLOAD_TYPE,
                    false,
                    Some("minptime=10;useinbandfec=1"),
                ),
                audio("G722", 8000, 1, crate::g722::PAYLOAD_TYPE, true, None),
                audio("PCMU", 8000, 1, 0, true, None),
                audio("PCMA", 8000, 1, 8, true, None),
                event(48_000, 126),
                event(8000, 101),
                FormatSpec {
                    ptimes: AMR_PTIMES,
                    ..audio(
                        "AMR-WB",
                        16_000,
                        1,
                        Amr::WB_PAYLOAD_TYPE,
                        false,
                        Some(AMR_OFFER_FMTP),
                    )
                },
                FormatSpec {
                    ptimes: AMR_PTIMES,
                    ..audio(
                        "AMR",
                        8000,
                        1,
                        Amr::NB_PAYLOAD_TYPE,
                        false,
                        Some(AMR_OFFER_FMTP),
                    )
                },
            ],
            opus,
        }
    }

    /// The formats, in order of preference.
    pub fn formats(&self) -> &[FormatSpec] {
        &self.formats
    }

    /// The format called `name` at `clock_rate` Hz with `channels` (1 when an rtpmap names
    /// none), if we have it.
    pub fn find(&self, name: &str, clock_rate: u32, channels: u8) -> Option<&FormatSpec> {
        self.formats.iter().find(|f| {
            f.encoding_name.eq_ignore_ascii_case(name)
                && f.clock_rate == clock_rate
                && f.channels == channels
        })
    }

    /// The format an `a=rtpmap` value (`NAME/CLOCK[/CHANNELS]`, without the payload type)
    /// names, if we have it.
    pub fn find_rtpmap(&self, rtpmap: &str) -> Option<&FormatSpec> {
        let mut it = rtpmap.trim().split('/');
        let name = it.next()?;
        let clock = it.next()?.trim().parse().ok()?;
        let channels = match it.next() {
            Some(c) => c.trim().parse().ok()?,
            None => 1,
        };
        if it.next().is_some() {
            return None;
        }
        self.find(name, clock, channels)
    }

    /// The format of a static payload type (0, 8, 9), for an SDP that lists it without an
    /// rtpmap.
    pub fn find_static(&self, pt: u8) -> Option<&FormatSpec> {
        self.formats
            .iter()
            .find(|f| f.static_payload_type && f.default_payload_type == pt)
    }

    /// A new codec instance for one stream of `spec`, sending and expecting payload type
    /// `pt`, set up from the `a=fmtp` value if any. Telephone-event formats have no codec:
    /// that is a [`Error::Setup`]; so is AMR where its libraries do not load (the message
    /// names the library and its Debian package) or with fmtp parameters it does not
    /// support (`crc`, `robust-sorting`, `interleaving`).
    pub fn make(
        &self,
        spec: &FormatSpec,
        pt: u8,
        fmtp: Option<&str>,
    ) -> Result<Box<dyn Codec>, Error> {
        if pt > 127 {
            return Err(Error::Setup(format!("payload type {pt} is not 0-127")));
        }
        let fmtp = fmtp.map(Fmtp::parse).unwrap_or_default();
        let name = spec.encoding_name;
        let wrong_pt = |default: u8| -> Result<(), Error> {
            if pt == default {
                Ok(())
            } else {
                Err(Error::Setup(format!(
                    "{name} has the static payload type {default}, not {pt}"
                )))
            }
        };
        match (spec.kind, name) {
            (FormatKind::TelephoneEvent, _) => Err(Error::Setup(
                "telephone-event is not audio: carry it with secrelay_media::dtmf".into(),
            )),
            (_, "PCMU") => wrong_pt(0).map(|_| Box::new(Pcmu) as Box<dyn Codec>),
            (_, "PCMA") => wrong_pt(8).map(|_| Box::new(Pcma) as Box<dyn Codec>),
            (_, "G722") => wrong_pt(9).map(|_| Box::new(G722::new()) as Box<dyn Codec>),
            (_, "opus") => {
                let s = self.opus;
                // RFC 7587 §7.1: `stereo=1` says the receiver prefers stereo; mono otherwise.
                let channels = if fmtp.flag("stereo") == Some(true) {
                    2
                } else {
                    1
                };
                // maxaveragebitrate caps ours (6–510 kbit/s; a value out of range or
                // malformed is ignored, as RFC 7587 asks of unknown values).
                let bitrate = match fmtp.get_u32("maxaveragebitrate") {
                    Some(b) if (6000..=510_000).contains(&b) => s.bitrate.min(b as i32),
                    _ => s.bitrate,
                } * channels as i32;
                let mut o =
                    Opus::with_channels(s.pcm_rate, channels, bitrate)?.with_payload_type(pt);
                o.set_complexity(s.complexity)?;
                if fmtp.flag("useinbandfec") == Some(true) {
                    o.set_inband_fec(true, s.fec_loss_pct)?;
                }
                if fmtp.flag("cbr") == Some(true) {
                    o.set_cbr(true)?;
                }
                Ok(Box::new(o))
            }
            (_, "AMR") => Ok(Box::new(
                Amr::from_fmtp(Band::Narrow, &fmtp)?.with_payload_type(pt),
            )),
            (_, "AMR-WB") => Ok(Box::new(
                Amr::from_fmtp(Band::Wide, &fmtp)?.with_payload_type(pt),
            )),
            _ => Err(Error::Unknown(spec.rtpmap())),
        }
    }

    /// [`Registry::make`] for the format found by name, clock rate and channels, on its
    /// default payload type.
    pub fn make_by_name(
        &self,
        name: &str,
        clock_rate: u32,
        channels: u8,
        fmtp: Option<&str>,
    ) -> Result<Box<dyn Codec>, Error> {
        let spec = self
            .find(name, clock_rate, channels)
            .ok_or_else(|| Error::Unknown(format!("{name}/{clock_rate}/{channels}")))?;
        self.make(spec, spec.default_payload_type, fmtp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_follow_rtpmap_rules() {
        let r = Registry::standard();
        assert_eq!(r.find_rtpmap("PCMU/8000").unwrap().default_payload_type, 0);
        assert_eq!(r.find_rtpmap("pcma/8000/1").unwrap().encoding_name, "PCMA");
        assert_eq!(r.find_rtpmap("OPUS/48000/2").unwrap().encoding_name, "opus");
        // RFC 7587: Opus is always /48000/2 in an rtpmap.
        assert!(r.find_rtpmap("opus/48000").is_none());
        assert!(r.find_rtpmap("opus/16000/2").is_none());
        assert!(r.find_rtpmap("G722/16000").is_none());
        assert!(r.find_rtpmap("PCMU/8000/1/3").is_none());
        assert!(r.find_rtpmap("PCMU/x").is_none());
        assert!(r.find_rtpmap("").is_none());
        let te = r.find_rtpmap("telephone-event/8000").unwrap();
        assert_eq!(te.kind, FormatKind::TelephoneEvent);
        assert_eq!(
            r.find_rtpmap("telephone-event/48000")
                .unwrap()
                .default_payload_type,
            126
        );
        assert_eq!(r.find_static(9).unwrap().encoding_name, "G722");
        assert!(r.find_static(111).is_none());
        assert_eq!(r.formats()[0].rtpmap(), "opus/48000/2");
        assert_eq!(r.find_static(0).unwrap().rtpmap(), "PCMU/8000");
        let amr = r.find_rtpmap("amr/8000").unwrap();
        assert_eq!((amr.encoding_name, amr.default_payload_type), ("AMR", 96));
        assert_eq!(amr.ptimes, &[20, 40, 60]);
        let wb = r.find_rtpmap("AMR-WB/16000/1").unwrap();
        assert_eq!(
            (wb.rtpmap(), wb.default_payload_type),
            ("AMR-WB/16000".into(), 97)
        );
        assert!(r.find_rtpmap("AMR-WB/8000").is_none());
        assert!(r.find_rtpmap("AMR/8000/2").is_none());
        // Distinct default payload types, so make_by_name never mixes formats up.
        let mut pts: Vec<u8> = r.formats().iter().map(|f| f.default_payload_type).collect();
        pts.sort_unstable();
        pts.dedup();
        assert_eq!(pts.len(), r.formats().len());
    }

    #[test]
    fn make_one_instance_per_stream() {
        let r = Registry::standard();
        for spec in r.formats().iter().filter(|f| f.kind == FormatKind::Audio) {
            let c = r
                .make(spec, spec.default_payload_type, spec.offer_fmtp)
                .unwrap();
            assert!(c.encoding_name().eq_ignore_ascii_case(spec.encoding_name));
            assert_eq!(c.clock_rate(), spec.clock_rate);
            assert_eq!(c.payload_type(), spec.default_payload_type);
            assert!(c.ptimes().contains(&20));
        }
        let opus = r.find_rtpmap("opus/48000/2").unwrap();
        let stereo = r.make(opus, 100, Some("stereo=1; sprop-stereo=1")).unwrap();
        assert_eq!((stereo.channels(), stereo.pcm_rate()), (2, 48_000));
        let mono = r
            .make(opus, 100, Some("maxaveragebitrate=abc;x=y"))
            .unwrap();
        assert_eq!((mono.channels(), mono.has_fec()), (1, true));
        assert!(matches!(r.make(opus, 128, None), Err(Error::Setup(_))));
        let pcmu = r.find_static(0).unwrap();
        assert!(matches!(r.make(pcmu, 96, None), Err(Error::Setup(_))));
        let te = r.find_rtpmap("telephone-event/8000").unwrap();
        assert!(matches!(
            r.make(te, 101, Some("0-15")),
            Err(Error::Setup(_))
        ));
        assert!(matches!(
            r.make_by_name("GSM", 8000, 1, None),
            Err(Error::Unknown(_))
        ));
        let narrow = Registry::with_opus(OpusSettings {
            pcm_rate: 8000,
            ..OpusSettings::default()
        });
        let c = narrow.make_by_name("opus", 48_000, 2, None).unwrap();
        assert_eq!((c.pcm_rate(), c.clock_ticks(160)), (8000, 960));
        let wb = r.find_rtpmap("AMR-WB/16000").unwrap();
        let c = r.make(wb, 118, Some("mode-set=0,1,2")).unwrap();
        assert_eq!(
            (c.payload_type(), c.pcm_rate(), c.has_plc()),
            (118, 16_000, true)
        );
        let e = r.make_by_name("AMR", 8000, 1, Some("crc=1")).err().unwrap();
        assert!(matches!(&e, Error::Setup(m) if m.contains("crc")), "{e}");
    }

    #[test]
    fn fmtp_parsing() {
        let f = Fmtp::parse(" minptime=10 ; USEINBANDFEC=1;stereo=0;;0-15");
        assert_eq!(f.get_u32("minptime"), Some(10));
        assert_eq!(f.flag("useinbandfec"), Some(true));
        assert_eq!(f.flag("stereo"), Some(false));
        assert_eq!(f.get(""), Some("0-15"));
        assert_eq!(f.flag("cbr"), None);
        assert_eq!(Fmtp::parse(""), Fmtp::default());
    }
}
