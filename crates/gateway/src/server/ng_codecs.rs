//! The ng `codec` manipulations (`strip`, `mask`, `consume`, `accept`, `except`, `offer`,
//! `transcode`, the `always transcode` flag) applied to a caller's offer, as rtpengine applies
//! them: which codecs our offer to the callee lists, in which order, and which of the caller's
//! codecs its side keeps for transcoding whatever the callee answers. The transcoding itself is
//! the room's ([`crate::room`]): once each side's leg has its codecs, audio the other side did
//! not take is decoded and encoded again.
//!
//! - `strip`: gone from both sides, as if never offered (`all`/`full`: every codec but those
//!   `except`, `offer` or `transcode` name).
//! - `mask` (and `consume`): gone from our offer to the callee, kept on the caller's side, so
//!   the caller is transcoded to what the callee takes.
//! - `accept` (`all` with `always transcode`): offered to the callee, and kept on the caller's
//!   side even when the callee rejects it. Named (not `all`), with `consume` too, it is what
//!   the caller is answered in, transcoded, whatever the callee took ([`answered_in`]); with
//!   `always transcode`, the caller's first codec the gateway transcodes.
//! - `offer`: the listed codecs first, in the listed order; `except`: kept despite `all`.
//! - `transcode`: kept like `except` (a codec the gateway knows), adding a codec the caller
//!   did not offer (one the gateway encodes) after the caller's audio codecs, before its
//!   telephone-events: then every codec of the caller's the gateway decodes is kept on its
//!   side. A caller that sends telephone-events gets them offered at an added codec's clock
//!   too, right after the added codecs. Added codecs take the caller's payload type for the
//!   same codec, else their static one, else the first free dynamic one ([`added_codec`]).
//! - With `all` stripped or masked, the offer follows the order `transcode` lists, events
//!   after the audio in payload type order ([`order_as_listed`]).
//! - Masking or stripping takes a clock's telephone-events and comfort noise with the last
//!   audio codec at that clock.
//! - `transcode: telephone-event[/CLOCK]` adds telephone-events at each clock of the offer's
//!   audio the gateway decodes (or the one named) that has none: DTMF then crosses as events
//!   towards the callee and as tones towards the caller, whatever the audio does
//!   ([`CodecPlan::dtmf_transcode`]).
//! - `transcode: CN` adds comfort noise (`CN/8000`, payload type 13) after the audio codecs,
//!   before the telephone-events: the callee's comfort-noise packets reach a caller without
//!   it as noise in its audio, and the caller's silent audio reaches the callee as
//!   comfort-noise packets ([`CodecPlan::cn_transcode`]). The caller is answered without it.
//!   `consume: CN` and `accept: CN` (or `always transcode`) keep the caller's comfort noise on
//!   its side whatever the callee takes, the same way round.
//!
//! Names are `NAME[/CLOCK[/CHANNELS]]`, case-insensitive. A name that is neither in the offer nor
//! a codec the gateway has is reported in the reply's `warning`, by name; so is a codec asked to
//! be added that the gateway cannot encode. Stripping everything is refused the way rtpengine
//! refuses it: the offer's codecs stay, with a warning.

use secrelay_wire::ng::CodecFlags;
use secrelay_wire::sdp::Codec;

use crate::leg::CodecId;

/// What the caller's offer becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CodecPlan {
    /// Our offer to the callee: codecs with the payload types and parameters to offer.
    pub towards_callee: Vec<(CodecId, Codec)>,
    /// The caller's codecs its side keeps whatever the callee takes (to be transcoded), when
    /// the callee takes one the gateway can encode.
    pub caller_transcodes: Vec<CodecId>,
    /// What the reply's `warning` says about the manipulations.
    pub warnings: Vec<String>,
    /// `transcode` added telephone-events: DTMF crosses between the two sides, tones one way
    /// and events the other (the callee's leg asks for it, `RtpLegOptions::dtmf_transcode`).
    pub dtmf_transcode: bool,
    /// Comfort noise crosses between the two sides: `transcode` added it, or the caller's is
    /// kept on its side (`consume`, `accept`, `always transcode`); the callee's leg asks for
    /// it (`RtpLegOptions::cn_transcode`).
    pub cn_transcode: bool,
    /// The AMR mode of the bitrate `transcode` named for an AMR codec it added (the callee's
    /// leg sends in at most that mode, `RtpLegOptions::amr_mode`).
    pub amr_mode: Option<u8>,
}

/// Whether `spec` (`NAME[/CLOCK[/CHANNELS[/BITRATE[/PTIME[/FMTP]]]]]`) names `c`: a spec
/// with format parameters names only a codec with those ([`spec_extras`]).
fn names(spec: &str, c: &Codec) -> bool {
    let mut it = spec.trim().split('/');
    let name = it.next().unwrap_or_default();
    if !name.eq_ignore_ascii_case(&c.name) {
        return false;
    }
    let clock = it.next().map(|x| x.trim().parse::<u32>());
    let channels = it.next().map(|x| x.trim().parse::<u32>());
    let clock_ok = match clock {
        None => true,
        Some(Ok(k)) => k == c.clock_rate,
        Some(Err(_)) => false,
    };
    let channels_ok = match channels {
        None => true,
        Some(Ok(n)) => n == c.channels.unwrap_or(1),
        Some(Err(_)) => false,
    };
    let fmtp_ok = match spec_extras(spec).1 {
        Some(f) => c.fmtp.as_deref() == Some(f.as_str()),
        None => true,
    };
    clock_ok && channels_ok && fmtp_ok
}

/// What an ng codec name says beyond `NAME/CLOCK/CHANNELS`, as rtpengine writes it: the
/// bitrate to encode at (fourth field) and the format parameters to offer (sixth, with `--`
/// for `=`: `AMR-WB/16000/1///mode-set--0,1,2`). Empty fields say nothing.
fn spec_extras(spec: &str) -> (Option<u32>, Option<String>) {
    let mut past_channels = spec.trim().split('/').skip(3).map(str::trim);
    let bitrate = past_channels.next().and_then(|b| b.parse().ok());
    // The fifth field (after the bitrate's) is the packet time: not read here.
    let fmtp = past_channels
        .nth(1)
        .filter(|f| !f.is_empty())
        .map(|f| f.replace("--", "="));
    (bitrate, fmtp)
}

/// The codec the gateway adds for a `transcode` name: [`CodecId::by_name`], AMR in the
/// payload format the name's parameters say (octet-aligned unless they say otherwise).
fn transcode_target(spec: &str) -> Option<CodecId> {
    let id = CodecId::by_name(spec)?;
    match spec_extras(spec).1 {
        Some(fmtp) if id.is_amr() => CodecId::of(&Codec {
            pt: 0,
            name: id.name().to_owned(),
            clock_rate: id.clock_rate(),
            channels: None,
            fmtp: Some(fmtp),
        }),
        _ => Some(id),
    }
}

/// Whether the gateway handles offered codec `c` beyond relaying it: it knows it, and AMR's
/// libraries load (`CodecId::is_transcodable`) where it is AMR.
fn handled(c: &Codec) -> bool {
    CodecId::of(c).is_some_and(|id| !id.is_amr() || id.is_transcodable())
}

/// Telephone-events (at any clock, known to the gateway or not) and comfort noise: carried
/// beside the audio codecs.
pub(crate) fn is_event_like(c: &Codec) -> bool {
    is_event_name(&c.name)
}

/// Whether an encoding name is telephone-events' or comfort noise's ([`is_event_like`]).
pub(crate) fn is_event_name(name: &str) -> bool {
    name.eq_ignore_ascii_case("telephone-event") || name.eq_ignore_ascii_case("CN")
}

fn is_all(list: &[String]) -> bool {
    list.iter()
        .any(|n| n.eq_ignore_ascii_case("all") || n.eq_ignore_ascii_case("full"))
}

fn any_names(list: &[String], c: &Codec) -> bool {
    list.iter().any(|n| names(n, c))
}

/// Whether an answer's codec flags take `c` out of our answer to the offerer (rtpengine
/// applies `strip`, kept by `offer` and `except`, to what it answers too).
pub(crate) fn answer_strips(flags: &CodecFlags, c: &Codec) -> bool {
    (is_all(&flags.strip) || any_names(&flags.strip, c))
        && !any_names(&flags.offer, c)
        && !any_names(&flags.except, c)
}

/// The codec we add to our offer as `id`, numbered as rtpengine numbers one: the caller's own
/// payload type and parameters when the caller offered that codec (a telephone-event it had,
/// stripped and added back at an added codec's clock), else its static payload type, else the
/// first dynamic one (96–127) that neither our offer `towards` the callee uses yet nor the
/// caller's `codecs` do (unless `mask: all` took all of the caller's away from the callee).
/// A `spec` with format parameters ([`spec_extras`]) reuses only a caller's codec with those.
fn added_codec(
    id: CodecId,
    spec: Option<&str>,
    codecs: &[Codec],
    towards: &[(CodecId, Codec)],
    callers_free: bool,
) -> Option<Codec> {
    let used = |pt: u8| {
        towards.iter().any(|(_, c)| c.pt == pt)
            || (!callers_free
                && codecs
                    .iter()
                    .any(|c| c.pt == pt && CodecId::of(c) != Some(id)))
    };
    if let Some(c) = codecs
        .iter()
        .find(|c| CodecId::of(c) == Some(id) && spec.is_none_or(|n| names(n, c)) && !used(c.pt))
    {
        return Some(c.clone());
    }
    let mut codec = id.offer_codec();
    // No parameters of ours on an added audio codec (rtpengine writes Opus's without
    // `useinbandfec`/`minptime`): the defaults are what the gateway's encoder sends. Added
    // telephone-events are the 16 DTMF events (`0-15`), as rtpengine offers them; AMR keeps
    // the parameters that say its payload format.
    if id.is_event() {
        codec.fmtp = Some("0-15".to_owned());
    } else if !id.is_amr() {
        codec.fmtp = None;
    }
    codec.pt = if codec.pt < 96 {
        Some(codec.pt).filter(|pt| !used(*pt))?
    } else {
        (96..=127).find(|pt| !used(*pt))?
    };
    Some(codec)
}

/// Applies `flags` to the caller's offered `codecs` (a section's, in its order): every format
/// is kept, known to the gateway or not (relaying needs no decoder), unless the flags say
/// otherwise. See the [module documentation](self).
pub(crate) fn plan(codecs: &[Codec], flags: &CodecFlags) -> CodecPlan {
    let mut warnings = unknown_names(codecs, flags);
    warnings.extend(set_amr_mode(codecs, flags).1);
    let mut p = Planner::sort(codecs, Rules::of(flags), warnings);
    p.put_offer_first();
    for n in &flags.transcode {
        p.add_transcoded(n);
    }
    if p.masked_any || p.stripped_audio {
        p.drop_lone_events();
    }
    if !p.added.is_empty() || p.masked_any {
        p.keep_callers_codecs();
    }
    p.add_comfort_noise();
    p.finish()
}

/// Warnings for the names no list can mean: neither offered nor ours.
fn unknown_names(codecs: &[Codec], flags: &CodecFlags) -> Vec<String> {
    let lists: [(&str, &Vec<String>); 7] = [
        ("strip", &flags.strip),
        ("mask", &flags.mask),
        ("consume", &flags.consume),
        ("accept", &flags.accept),
        ("except", &flags.except),
        ("offer", &flags.offer),
        ("transcode", &flags.transcode),
    ];
    let mut warnings = Vec::new();
    for (op, list) in lists {
        for n in list.iter() {
            let keyword = n.eq_ignore_ascii_case("all") || n.eq_ignore_ascii_case("full");
            let offered = codecs.iter().any(|c| names(n, c));
            if !keyword && !offered && transcode_target(n).is_none() {
                warnings.push(format!("codec-{op}: unknown codec {n:?} ignored"));
            }
        }
    }
    warnings
}

/// What the flags say of each offered codec.
struct Rules<'a> {
    flags: &'a CodecFlags,
    strip_all: bool,
    /// `mask: all` (not `full`) leaves the caller's payload types free towards the callee.
    callers_free: bool,
    mask_all: bool,
    accept_all: bool,
}

impl<'a> Rules<'a> {
    fn of(flags: &'a CodecFlags) -> Self {
        Rules {
            flags,
            strip_all: is_all(&flags.strip),
            callers_free: flags.mask.iter().any(|n| n.eq_ignore_ascii_case("all")),
            mask_all: is_all(&flags.mask) || is_all(&flags.consume),
            accept_all: is_all(&flags.accept),
        }
    }

    /// Kept whatever `all` says: `except` and `offer` name it, or `transcode` does and the
    /// gateway handles it (and telephone-events at any clock): a codec it cannot transcode
    /// (G.729, say) named there is masked or stripped with `all` like the rest, as rtpengine
    /// does without it.
    fn kept_by_name(&self, c: &Codec) -> bool {
        let f = self.flags;
        any_names(&f.except, c)
            || any_names(&f.offer, c)
            || (any_names(&f.transcode, c) && (handled(c) || is_event_like(c)))
    }

    /// Stripped from both sides; with `all` stripped, a codec `consume` names is masked
    /// instead: kept on the caller's side.
    fn stripped(&self, c: &Codec) -> bool {
        let f = self.flags;
        any_names(&f.strip, c)
            || (self.strip_all && !self.kept_by_name(c) && !any_names(&f.consume, c))
    }

    /// Kept on the caller's side only, not offered to the callee.
    fn masked(&self, c: &Codec) -> bool {
        let f = self.flags;
        any_names(&f.mask, c)
            || any_names(&f.consume, c)
            || (self.mask_all && !self.kept_by_name(c))
    }
}

/// A plan being made (see [`plan`]).
struct Planner<'a> {
    codecs: &'a [Codec],
    rules: Rules<'a>,
    towards: Vec<(CodecId, Codec)>,
    caller_transcodes: Vec<CodecId>,
    warnings: Vec<String>,
    masked_any: bool,
    stripped_audio: bool,
    /// The clocks of the codecs `transcode` added.
    added: Vec<u32>,
    /// Where the next codec `transcode` adds goes: after the audio, before the events.
    at: usize,
    dtmf_transcode: bool,
    /// `transcode` names comfort noise.
    add_cn: bool,
    /// Comfort noise was added for it.
    cn_added: bool,
    amr_mode: Option<u8>,
}

impl<'a> Planner<'a> {
    /// The offered codecs sorted by the rules: stripped, masked (kept on the caller's side if
    /// the gateway knows them), or offered to the callee (and kept by the caller too with
    /// `accept`).
    fn sort(codecs: &'a [Codec], rules: Rules<'a>, warnings: Vec<String>) -> Self {
        let mut p = Planner {
            codecs,
            rules,
            towards: Vec::new(),
            caller_transcodes: Vec::new(),
            warnings,
            masked_any: false,
            stripped_audio: false,
            added: Vec::new(),
            at: 0,
            dtmf_transcode: false,
            add_cn: false,
            cn_added: false,
            amr_mode: None,
        };
        for c in codecs {
            let id = CodecId::passthrough(c);
            if p.rules.stripped(c) {
                p.stripped_audio |= !is_event_like(c);
                continue;
            }
            if p.rules.masked(c) {
                p.masked_any = true;
                // Kept on the caller's side only if the gateway knows it (one it cannot
                // decode, G.729 say, could never be transcoded to).
                if handled(c) {
                    p.caller_transcodes.push(id);
                }
                continue;
            }
            if p.rules.accept_all || any_names(&p.rules.flags.accept, c) {
                p.caller_transcodes.push(id);
            }
            p.towards.push((id, c.clone()));
        }
        p
    }

    /// `offer` puts its codecs first, in its order; codecs `transcode` adds go after the
    /// audio, before the telephone-events and comfort noise, as rtpengine adds them.
    fn put_offer_first(&mut self) {
        let mut ordered: Vec<(CodecId, Codec)> = Vec::new();
        for n in &self.rules.flags.offer {
            if let Some(k) = self.towards.iter().position(|(_, c)| names(n, c)) {
                ordered.push(self.towards.remove(k));
            }
        }
        ordered.append(&mut self.towards);
        self.towards = ordered;
        self.at = self
            .towards
            .iter()
            .position(|(_, c)| is_event_like(c))
            .unwrap_or(self.towards.len());
    }

    /// `transcode: n`: a codec the caller did not offer, added (and transcoded); comfort
    /// noise is added last ([`Planner::add_comfort_noise`]); a warning where it cannot be.
    fn add_transcoded(&mut self, n: &str) {
        if self.towards.iter().any(|(_, c)| names(n, c)) {
            return;
        }
        let Some(id) = transcode_target(n) else {
            return; // warned about above
        };
        if id == CodecId::ComfortNoise {
            self.add_cn = true;
            return;
        }
        if id.is_event() {
            let callers_free = self.rules.callers_free;
            let made = add_events(n, self.codecs, &mut self.towards, self.at, callers_free);
            if made == 0 {
                self.warnings.push(format!(
                    "codec-transcode: no audio the gateway decodes at the clock of {n:?}: not added"
                ));
            }
            self.dtmf_transcode |= made > 0;
            self.at += made;
            return;
        }
        if !id.is_transcodable() {
            self.warnings.push(format!(
                "codec-transcode: the gateway cannot encode {n:?}: not added"
            ));
            return;
        }
        let callers_free = self.rules.callers_free;
        let Some(mut codec) = added_codec(id, Some(n), self.codecs, &self.towards, callers_free)
        else {
            self.warnings
                .push(format!("codec-transcode: no payload type left for {n:?}"));
            return;
        };
        // Named as the flag spells it (`pcma` stays lower case), as rtpengine writes it.
        let spelled = n.split('/').next().unwrap_or_default().trim();
        if spelled.eq_ignore_ascii_case(&codec.name) {
            codec.name = spelled.to_owned();
        }
        let (bitrate, fmtp) = spec_extras(n);
        if fmtp.is_some() {
            codec.fmtp = fmtp;
        }
        if let (Some(b), Some(band)) = (bitrate, id.amr_band()) {
            self.amr_mode = Some(band.mode_for_bitrate(b));
        }
        self.towards.insert(self.at, (id, codec));
        self.at += 1;
        self.added.push(id.clock_rate());
    }

    /// Telephone-events and comfort noise go with audio at their clock: none left there once
    /// masking or stripping took it, none of them.
    fn drop_lone_events(&mut self) {
        let clocks: Vec<u32> = self
            .towards
            .iter()
            .filter(|(_, c)| !is_event_like(c))
            .map(|(_, c)| c.clock_rate)
            .collect();
        self.towards
            .retain(|(_, c)| !is_event_like(c) || clocks.contains(&c.clock_rate));
    }

    /// With codecs added or masked, the caller's side keeps every codec of its own the
    /// gateway decodes; and when the caller sends events, telephone-events at the clock of
    /// each added codec, after the added codecs, before the caller's events, as rtpengine
    /// adds them.
    fn keep_callers_codecs(&mut self) {
        for c in self.codecs {
            if let Some(id) = CodecId::of(c).filter(|id| id.is_transcodable()) {
                if !self.rules.stripped(c) && !self.caller_transcodes.contains(&id) {
                    self.caller_transcodes.push(id);
                }
            }
        }
        let caller_events = self
            .codecs
            .iter()
            .any(|c| CodecId::of(c).is_some_and(CodecId::is_event));
        if !caller_events {
            return;
        }
        for clock in std::mem::take(&mut self.added) {
            let Some(ev) = CodecId::event_for_clock(clock) else {
                continue;
            };
            if self.towards.iter().any(|(id, _)| *id == ev) {
                continue;
            }
            let callers_free = self.rules.callers_free;
            if let Some(codec) = added_codec(ev, None, self.codecs, &self.towards, callers_free) {
                self.towards.insert(self.at, (ev, codec));
                self.at += 1;
            }
        }
    }

    /// `transcode: CN`: comfort noise, with 8 kHz audio the gateway decodes and encodes (it
    /// makes the noise and finds the silence in that audio), after the audio codecs, before
    /// the telephone-events, as rtpengine lists it.
    fn add_comfort_noise(&mut self) {
        if !self.add_cn
            || self
                .towards
                .iter()
                .any(|(id, _)| *id == CodecId::ComfortNoise)
        {
            return;
        }
        let has_8k_audio = self
            .towards
            .iter()
            .any(|(id, _)| id.is_transcodable() && id.clock_rate() == 8000);
        if !has_8k_audio {
            self.warnings.push(
                "codec-transcode: no 8 kHz audio the gateway transcodes for \"CN\": not added"
                    .into(),
            );
            return;
        }
        let callers_free = self.rules.callers_free;
        let cn = CodecId::ComfortNoise;
        let Some(codec) = added_codec(cn, None, self.codecs, &self.towards, callers_free) else {
            self.warnings
                .push("codec-transcode: no payload type left for \"CN\"".into());
            return;
        };
        let events = self
            .towards
            .iter()
            .position(|(_, c)| c.name.eq_ignore_ascii_case("telephone-event"))
            .unwrap_or(self.towards.len());
        self.towards.insert(events, (cn, codec));
        self.cn_added = true;
    }

    /// The plan: codecs in `transcode`'s order under `all`, the offer's own where the flags
    /// leave the callee no audio codec, one channel left unsaid once manipulated.
    fn finish(self) -> CodecPlan {
        let Planner {
            codecs,
            rules,
            mut towards,
            mut caller_transcodes,
            mut warnings,
            dtmf_transcode,
            cn_added,
            amr_mode,
            ..
        } = self;
        let flags = rules.flags;
        let cn_transcode = cn_added || caller_transcodes.contains(&CodecId::ComfortNoise);
        if rules.strip_all || rules.mask_all {
            order_as_listed(&mut towards, &flags.transcode);
        }
        if !towards.iter().any(|(id, _)| !id.is_supplemental()) {
            if !flags.is_empty() {
                warnings.push(
                    "codec: the manipulations leave the callee no audio codec: the offer's codecs are kept"
                        .into(),
                );
            }
            towards = codecs
                .iter()
                .map(|c| (CodecId::passthrough(c), c.clone()))
                .collect();
            caller_transcodes.clear();
        }
        if !flags.is_empty() {
            // Manipulated, the offer is written as rtpengine writes its codecs: one channel is
            // the default, not said (`opus/48000/1` becomes `opus/48000`).
            for (_, c) in &mut towards {
                if c.channels == Some(1) {
                    c.channels = None;
                }
            }
        }
        CodecPlan {
            towards_callee: towards,
            caller_transcodes,
            warnings,
            dtmf_transcode,
            cn_transcode,
            amr_mode,
        }
    }
}

/// `transcode: telephone-event[/CLOCK]` (`name`): telephone-events added at `at` in `towards`,
/// one at each clock of its audio codecs the gateway decodes (or the one clock named) that has
/// none yet, so that digits cross as events on the callee's side and tones on the caller's.
/// rtpengine numbers them in the order of their clocks and lists them in the order of the
/// clocks' digits (16000, 48000, 8000). How many were added.
fn add_events(
    name: &str,
    codecs: &[Codec],
    towards: &mut Vec<(CodecId, Codec)>,
    at: usize,
    callers_free: bool,
) -> usize {
    let named: Option<u32> = name.split('/').nth(1).and_then(|k| k.trim().parse().ok());
    let mut clocks: Vec<u32> = towards
        .iter()
        .filter(|(id, _)| id.is_transcodable())
        .map(|(id, _)| id.clock_rate())
        .filter(|k| named.is_none_or(|n| n == *k))
        .collect();
    clocks.sort_unstable();
    clocks.dedup();
    let mut made = 0;
    for k in clocks {
        let has = |t: &[(CodecId, Codec)]| {
            t.iter()
                .any(|(_, c)| c.name.eq_ignore_ascii_case("telephone-event") && c.clock_rate == k)
        };
        let Some(ev) = CodecId::event_for_clock(k).filter(|_| !has(towards)) else {
            continue;
        };
        if let Some(codec) = added_codec(ev, None, codecs, towards, callers_free) {
            towards.insert(at + made, (ev, codec));
            made += 1;
        }
    }
    towards[at..at + made].sort_by_key(|(_, c)| c.clock_rate.to_string());
    made
}

/// With every codec stripped or masked, our offer is what the flags name: its audio codecs in
/// the order `transcode` lists them (the caller's own, with its payload types, and added
/// ones alike), then the rest kept by name; telephone-events and comfort noise after them, in
/// payload type order, as rtpengine writes such an offer.
fn order_as_listed(towards: &mut [(CodecId, Codec)], transcode: &[String]) {
    let audio_rank = |c: &Codec| {
        transcode
            .iter()
            .position(|n| names(n, c))
            .unwrap_or(transcode.len())
    };
    towards.sort_by_key(|(_, c)| {
        if is_event_like(c) {
            (1, usize::from(c.pt))
        } else {
            (0, audio_rank(c))
        }
    });
}

/// The codec the caller is answered in whatever the callee took, as rtpengine answers with
/// `accept` or `consume`: the first of the caller's `codecs` those lists name that the gateway
/// transcodes (with `always transcode`, `accept: all`, the first it transcodes at all), once
/// the callee took a codec the gateway encodes.
pub(crate) fn answered_in(
    codecs: &[Codec],
    flags: &CodecFlags,
    taken: &[CodecId],
) -> Option<CodecId> {
    if !taken.iter().any(|t| t.is_transcodable()) {
        return None;
    }
    // `always transcode` (`accept: all`): the caller's first codec the gateway transcodes.
    let always = is_all(&flags.accept);
    codecs.iter().find_map(|c| {
        let named = always || any_names(&flags.accept, c) || any_names(&flags.consume, c);
        CodecId::of(c).filter(|id| named && id.is_transcodable())
    })
}

/// The AMR mode the caller is sent transcoded AMR in, from the first `set` (rtpengine's
/// `NAME/CLOCK/CHANNELS/BITRATE`) that names an AMR codec of its `codecs` with a bitrate; and
/// a warning for each `set` the gateway does not act on (only an AMR bitrate is).
pub(crate) fn set_amr_mode(codecs: &[Codec], flags: &CodecFlags) -> (Option<u8>, Vec<String>) {
    let mut mode = None;
    let mut warnings = Vec::new();
    for n in &flags.set {
        let band = codecs
            .iter()
            .filter(|c| names(n, c))
            .find_map(|c| CodecId::of(c)?.amr_band());
        let m = match (band, spec_extras(n).0) {
            (Some(band), Some(b)) => Some(band.mode_for_bitrate(b)),
            _ => None,
        };
        match m {
            Some(m) => {
                mode = mode.or(Some(m));
            }
            None => warnings.push(format!(
                "codec-set: only an offered AMR codec's bitrate is acted on: {n:?} ignored"
            )),
        }
    }
    (mode, warnings)
}

/// Whether the caller's side keeps its codec `id` once the callee took `taken`: the callee
/// took it, or it is to be transcoded to an audio codec the callee took, or it is
/// telephone-events and the callee took telephone-events too (carried across clocks).
pub(crate) fn caller_keeps(id: CodecId, taken: &[CodecId], transcodes: &[CodecId]) -> bool {
    taken.contains(&id)
        || (transcodes.contains(&id) && taken.iter().any(|t| t.is_transcodable()))
        || (id.is_event() && taken.iter().any(|t| t.is_event()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(pt: u8, name: &str, clock: u32, channels: Option<u32>) -> Codec {
        Codec {
            pt,
            name: name.into(),
            clock_rate: clock,
            channels,
            fmtp: None,
        }
    }

    fn browser() -> Vec<Codec> {
        vec![
            c(111, "opus", 48_000, Some(2)),
            c(110, "telephone-event", 48_000, None),
        ]
    }

    fn names_of(p: &CodecPlan) -> Vec<(String, u8)> {
        p.towards_callee
            .iter()
            .map(|(_, c)| (format!("{}/{}", c.name, c.clock_rate), c.pt))
            .collect()
    }

    #[test]
    fn transcode_cn_adds_comfort_noise_before_the_events_where_it_can_make_it() {
        let f = CodecFlags {
            transcode: vec!["PCMA".into(), "CN".into()],
            ..CodecFlags::default()
        };
        let p = plan(&browser(), &f);
        assert_eq!(
            names_of(&p),
            vec![
                ("opus/48000".into(), 111),
                ("PCMA/8000".into(), 8),
                ("CN/8000".into(), 13),
                ("telephone-event/8000".into(), 96),
                ("telephone-event/48000".into(), 110),
            ]
        );
        assert!(p.cn_transcode && p.warnings.is_empty(), "{:?}", p.warnings);
        // Only Opus (48 kHz) to go with it, or only a codec the gateway cannot decode: none.
        let cn_only = CodecFlags {
            transcode: vec!["CN".into()],
            ..CodecFlags::default()
        };
        for caller in [browser(), vec![c(18, "G729", 8000, None)]] {
            let p = plan(&caller, &cn_only);
            assert!(!names_of(&p).iter().any(|(n, _)| n == "CN/8000"));
            assert!(!p.cn_transcode);
            assert!(
                p.warnings.join(";").contains("\"CN\": not added"),
                "{:?}",
                p.warnings
            );
        }
    }

    #[test]
    fn consume_cn_under_strip_all_keeps_it_on_the_callers_side_only() {
        let caller = vec![
            c(9, "G722", 8000, None),
            c(0, "PCMU", 8000, None),
            c(8, "PCMA", 8000, None),
            c(101, "telephone-event", 8000, None),
            c(13, "CN", 8000, None),
            c(118, "CN", 16_000, None),
        ];
        let f = CodecFlags {
            strip: vec!["all".into()],
            consume: vec!["CN".into()],
            offer: vec!["PCMA".into(), "PCMU".into(), "telephone-event".into()],
            ..CodecFlags::default()
        };
        let p = plan(&caller, &f);
        assert_eq!(
            names_of(&p),
            vec![
                ("PCMA/8000".into(), 8),
                ("PCMU/8000".into(), 0),
                ("telephone-event/8000".into(), 101),
            ]
        );
        assert!(p.caller_transcodes.contains(&CodecId::ComfortNoise));
        assert!(!p.caller_transcodes.contains(&CodecId::G722));
        assert!(p.cn_transcode);
    }

    #[test]
    fn transcode_adds_a_codec_and_keeps_the_callers_for_transcoding() {
        let f = CodecFlags {
            transcode: vec!["PCMA".into()],
            ..CodecFlags::default()
        };
        let p = plan(&browser(), &f);
        // rtpengine: the added codec after the caller's audio, its clock's telephone-event
        // right after it (the first free dynamic payload type), then the caller's events.
        assert_eq!(
            names_of(&p),
            vec![
                ("opus/48000".into(), 111),
                ("PCMA/8000".into(), 8),
                ("telephone-event/8000".into(), 96),
                ("telephone-event/48000".into(), 110),
            ]
        );
        assert_eq!(p.caller_transcodes, vec![CodecId::Opus]);
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        // The callee took PCMA and 8 kHz events: the caller keeps Opus and its events.
        let taken = [CodecId::Pcma, CodecId::TelephoneEvent];
        assert!(caller_keeps(CodecId::Opus, &taken, &p.caller_transcodes));
        assert!(caller_keeps(
            CodecId::TelephoneEvent48k,
            &taken,
            &p.caller_transcodes
        ));
        // Without transcoding, Opus would go.
        assert!(!caller_keeps(CodecId::Opus, &taken, &[]));
    }

    #[test]
    fn mask_hides_from_the_callee_strip_from_both_except_and_offer_reorder() {
        let offer = vec![
            c(0, "PCMU", 8000, None),
            c(8, "PCMA", 8000, None),
            c(111, "opus", 48_000, Some(2)),
            c(18, "G729", 8000, None),
        ];
        let f = CodecFlags {
            mask: vec!["opus".into()],
            transcode: vec!["G722".into()],
            strip: vec!["PCMU".into()],
            ..CodecFlags::default()
        };
        let p = plan(&offer, &f);
        // G.729, which the gateway cannot decode, passes through untouched.
        assert_eq!(
            names_of(&p),
            vec![
                ("PCMA/8000".into(), 8),
                ("G729/8000".into(), 18),
                ("G722/8000".into(), 9)
            ]
        );
        // PCMU was stripped: not kept for transcoding either.
        assert_eq!(p.caller_transcodes, vec![CodecId::Opus, CodecId::Pcma]);
        let f = CodecFlags {
            strip: vec!["all".into()],
            offer: vec!["opus".into(), "PCMA/8000".into()],
            ..CodecFlags::default()
        };
        let p = plan(&offer, &f);
        assert_eq!(
            names_of(&p),
            vec![("opus/48000".into(), 111), ("PCMA/8000".into(), 8)]
        );
        assert!(p.caller_transcodes.is_empty());
        let f = CodecFlags {
            accept: vec!["all".into()],
            except: vec![],
            ..CodecFlags::default()
        };
        let p = plan(&offer, &f);
        assert_eq!(p.towards_callee.len(), 4);
        assert_eq!(p.caller_transcodes.len(), 4);
    }

    #[test]
    fn unknown_names_are_warned_about_and_stripping_everything_keeps_the_offer() {
        let f = CodecFlags {
            transcode: vec!["EVS".into(), "telephone-event/8000".into()],
            strip: vec!["opus".into(), "GSM".into()],
            ..CodecFlags::default()
        };
        let p = plan(&browser(), &f);
        let w = p.warnings.join("; ");
        assert!(w.contains("\"EVS\"") && w.contains("\"GSM\""), "{w}");
        assert!(
            w.contains("at the clock of \"telephone-event/8000\""),
            "{w}"
        );
        assert!(w.contains("no audio codec"), "{w}");
        assert_eq!(names_of(&p)[0], ("opus/48000".into(), 111));
    }

    #[test]
    fn events_follow_the_clocks_of_added_codecs_and_go_with_masked_audio() {
        let phone = vec![
            c(8, "PCMA", 8_000, None),
            c(107, "opus", 48_000, Some(2)),
            c(101, "telephone-event", 8_000, None),
        ];
        // G.722 added (an 8 kHz RTP clock): the caller's 8 kHz events serve it, and no event
        // is added for the caller's own Opus.
        let f = CodecFlags {
            transcode: vec!["G722".into()],
            ..CodecFlags::default()
        };
        assert_eq!(
            names_of(&plan(&phone, &f)),
            vec![
                ("PCMA/8000".into(), 8),
                ("opus/48000".into(), 107),
                ("G722/8000".into(), 9),
                ("telephone-event/8000".into(), 101),
            ]
        );
        // Masked, telephone-event is not offered again.
        let f = CodecFlags {
            mask: vec!["telephone-event".into()],
            ..CodecFlags::default()
        };
        assert_eq!(
            names_of(&plan(&phone, &f)),
            vec![("PCMA/8000".into(), 8), ("opus/48000".into(), 107)]
        );
        // Everything masked but PCMA, added: the 48 kHz events went with Opus; 8 kHz ones are
        // added at the first free dynamic payload type.
        let f = CodecFlags {
            mask: vec!["all".into()],
            transcode: vec!["PCMA".into(), "telephone-event".into()],
            ..CodecFlags::default()
        };
        let p = plan(&browser(), &f);
        assert_eq!(
            names_of(&p),
            vec![("PCMA/8000".into(), 8), ("telephone-event/8000".into(), 96)]
        );
    }
}
