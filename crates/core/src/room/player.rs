//! Media played to a member (rtpengine's `play media`: an announcement, music on hold): an
//! audio clip ([`secrelay_media::clip::Clip`]) encoded in the member's own format (the first
//! codec it receives that the gateway encodes, in its packet time) and sent to it on the room's
//! clock, one packet per packet time, whether or not anyone else sends.
//!
//! The played stream takes the member's audio slot: what held it gives it up, so the member
//! hears one stream, its SSRC and numbering continued (a 20 ms step where the stream changes,
//! as between any two streams on a slot). While the clip plays, the audio the member would
//! have heard from the others (relayed, transcoded or mixed) is not sent, counted at the
//! member as `played_over`; its video is. When the clip ends (after its repeats) or is
//! stopped, the player gives the slot up and the others' audio takes it again from its next
//! packet. What the member sends is not touched: its peers hear it throughout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use secrelay_media::clip::Clip;
use secrelay_media::transcode::{OutPacket, StreamEncoder};

use super::out::RoomOut;
use super::source::{abs_send_time, MadePacket};
use super::subscription::{Source, Subscription};
use super::{MemberId, PlayError, Room};
use crate::leg::CodecId;
use crate::transcode::{make_codec, Format};

/// The SSRC a player's subscription is known by before it takes a slot (it is sent on the
/// receiver's slot, under the slot's SSRC).
const PLAYER_SSRC: u32 = 1;

/// Ticks this far behind are skipped, not made up (a worker that stalled sends no burst).
const MAX_BEHIND: u32 = 5;

/// What to play to a member ([`Room::play_media`]).
#[derive(Debug, Clone)]
pub struct PlayMedia {
    /// The audio.
    pub clip: Arc<Clip>,
    /// Where to start: this many packet times (frames) into the clip.
    pub start_frame: u64,
    /// How many times to play it at most (0 counts as 1).
    pub times: u32,
    /// Play it again (within `times`) while less than this has passed since the start: a play
    /// under way is finished, none is begun after.
    pub repeat_for: Option<Duration>,
}

/// A clip being played to one member.
pub(crate) struct Player {
    clip: Arc<Clip>,
    encoder: StreamEncoder,
    codec: CodecId,
    /// Clip samples per packet time, and the packet time.
    frame: usize,
    ptime: Duration,
    /// The next sample to play.
    pos: usize,
    /// Plays left, the one under way included.
    plays: u32,
    until: Option<Instant>,
    /// When the next packet is due.
    pub next: Instant,
    /// Its subscription (the stream it is sent as).
    pub sub: u32,
    ready: Vec<OutPacket>,
    pad: Vec<i16>,
}

impl std::fmt::Debug for Player {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Player")
            .field("codec", &self.codec)
            .field("pos", &self.pos)
            .field("plays", &self.plays)
            .field("next", &self.next)
            .finish()
    }
}

impl Player {
    fn new(
        media: PlayMedia,
        format: Format,
        registry: &secrelay_media::Registry,
        now: Instant,
        sub: u32,
    ) -> Result<Player, PlayError> {
        let codec_err = |e: secrelay_media::Error| {
            tracing::warn!(codec = format.codec.name(), %e, "no encoder to play media with");
            PlayError::Codec
        };
        let codec = make_codec(registry, format.codec, format.amr_mode).map_err(codec_err)?;
        let rate = media.clip.rate();
        let encoder = StreamEncoder::new(codec, rate, format.ptime, 0, 0).map_err(codec_err)?;
        let frame = (u64::from(rate) * u64::from(format.ptime) / 1000) as usize;
        let start = media.start_frame.saturating_mul(frame as u64);
        Ok(Player {
            pos: usize::try_from(start).map_or(usize::MAX, |s| s.min(media.clip.pcm().len())),
            clip: media.clip,
            encoder,
            codec: format.codec,
            frame,
            ptime: Duration::from_millis(u64::from(format.ptime)),
            plays: media.times.max(1),
            until: media.repeat_for.map(|d| now + d),
            next: now,
            sub,
            ready: Vec::new(),
            pad: Vec::new(),
        })
    }

    /// The packet time of the clip due at `self.next` (called at `now`, on or after it),
    /// encoded into `self.ready`; `false` when the playback has ended instead.
    fn tick(&mut self, now: Instant) -> Result<bool, secrelay_media::Error> {
        self.ready.clear();
        let pcm = self.clip.pcm();
        if self.pos >= pcm.len() {
            if self.plays <= 1 || self.until.is_some_and(|u| now >= u) {
                return Ok(false);
            }
            self.plays -= 1;
            self.pos = 0;
        }
        let end = (self.pos + self.frame).min(pcm.len());
        let piece = &pcm[self.pos..end];
        if piece.len() < self.frame {
            // The clip's last, short packet time: made whole with silence.
            self.pad.clear();
            self.pad.extend_from_slice(piece);
            self.pad.resize(self.frame, 0);
            self.encoder.push_pcm(&self.pad, &mut self.ready)?;
        } else {
            self.encoder.push_pcm(piece, &mut self.ready)?;
        }
        self.pos = end;
        self.next += self.ptime;
        if now.saturating_duration_since(self.next) > self.ptime * MAX_BEHIND {
            self.next = now + self.ptime;
        }
        Ok(true)
    }

    /// Where it is in the clip, in packet times (frames) from its start.
    fn frames(&self) -> u64 {
        (self.pos / self.frame.max(1)) as u64
    }
}

impl Room {
    /// Plays `media` to member `id` from `now` in place of the audio it hears (see
    /// [`player`](self)), ending any playback to it under way. How long one play of the clip
    /// lasts.
    pub fn play_media(
        &mut self,
        id: MemberId,
        media: PlayMedia,
        now: Instant,
    ) -> Result<Duration, PlayError> {
        let &ix = self.by_id.get(&id).ok_or(PlayError::NoMember)?;
        let format = self.members[ix].neg.format.ok_or(PlayError::NoCodec)?;
        self.end_playback(ix);
        let length = Duration::from_millis(media.clip.duration_ms());
        let sub = self
            .subs
            .insert(Subscription::new(ix, Source::Player, PLAYER_SSRC, None));
        let player = match Player::new(media, format, self.transcoding.registry(), now, sub) {
            Ok(p) => p,
            Err(e) => {
                self.subs.remove(sub);
                return Err(e);
            }
        };
        let m = &mut self.members[ix];
        m.subs.push(sub);
        // What holds the slot the played stream goes on gives it up (its audio is not sent
        // meanwhile); the played stream continues the slot's numbering.
        let holder = m
            .slots
            .iter()
            .find(|s| s.pt(format.codec).is_some())
            .and_then(|s| s.holder);
        if let Some(h) = holder.and_then(|h| self.subs.get_mut(h)) {
            h.release(m);
        }
        m.player = Some(Box::new(player));
        self.playing.push(ix);
        Ok(length)
    }

    /// Stops what is played to member `id`: where it was, in packet times from the clip's
    /// start; `None` when nothing was.
    pub fn stop_media(&mut self, id: MemberId) -> Option<u64> {
        let &ix = self.by_id.get(&id)?;
        self.end_playback(ix)
    }

    /// The next packet any player is due to send.
    pub(super) fn next_play(&self) -> Option<Instant> {
        self.playing
            .iter()
            .filter_map(|&ix| Some(self.members.get(ix)?.player.as_ref()?.next))
            .min()
    }

    /// Sends each member played to the packets due by `now`, as routed copies are; ends the
    /// playbacks that are over.
    pub fn play_due(&mut self, now: Instant, out: &mut RoomOut) {
        if self.playing.is_empty() {
            return;
        }
        out.begin(self.tag);
        let abs_send = abs_send_time(self.rtcp.epoch.0, now);
        let mut ended = Vec::new();
        for &ix in &self.playing {
            let Some(r) = self.members.get_mut(ix) else {
                continue;
            };
            let Some(mut p) = r.player.take() else {
                continue;
            };
            let mut over = false;
            while p.next <= now {
                match p.tick(now) {
                    Ok(true) => {}
                    Ok(false) => over = true,
                    Err(e) => {
                        tracing::warn!(codec = p.codec.name(), %e, "playing media failed; stopped");
                        over = true;
                    }
                }
                if over {
                    break;
                }
                r.leg.counters_mut().encoded += p.ready.len() as u64;
                for o in &p.ready {
                    let made = MadePacket {
                        seq: o.seq,
                        ts: o.timestamp,
                        marker: o.marker,
                        payload: &o.payload,
                        received: now,
                        abs_send,
                    };
                    if let Some(s) = self.subs.get_mut(p.sub) {
                        s.send_made(p.sub, &made, p.codec, r, out);
                    }
                }
            }
            r.player = Some(p);
            if over {
                ended.push(ix);
            }
        }
        for ix in ended {
            self.end_playback(ix);
        }
    }

    /// Ends the playback to the member at place `ix`, if any: its stream gives up the slot.
    /// Where it was, in packet times.
    pub(super) fn end_playback(&mut self, ix: u32) -> Option<u64> {
        let p = self.members.get_mut(ix)?.player.take()?;
        self.playing.retain(|&i| i != ix);
        self.drop_sub(p.sub);
        Some(p.frames())
    }
}
