//! What an ng call's `block media`, `silence media` and `block DTMF` commands (and their
//! `unblock`s) set, as rtpengine keeps it: a setting for the whole call and one per participant
//! (by SIP tag), a participant's packets stopped when either says so. A call-wide `unblock`
//! clears the call's setting only, unless it says `all`: a participant blocked by name stays
//! blocked. The members facing a participant (those that take its packets) are given the sum
//! ([`secrelay_core::room::Gate`]) whenever it changes, and when an offer or answer makes them.

use std::collections::HashMap;

use secrelay_core::room::Gate;
use secrelay_wire::ng::{GateRequest, Gated};

/// One call's settings.
#[derive(Debug, Clone, Default)]
pub(super) struct CallGates {
    call: Gate,
    by_tag: HashMap<String, Gate>,
}

impl CallGates {
    /// Takes a request (its tags checked against the call's).
    pub fn apply(&mut self, r: &GateRequest) {
        let set = |g: &mut Gate| {
            let flag = match r.what {
                Gated::Media => &mut g.block_media,
                Gated::Silence => &mut g.silence_media,
                Gated::Dtmf => &mut g.block_dtmf,
            };
            *flag = r.stop;
        };
        match &r.from_tag {
            Some(tag) => set(self.by_tag.entry(tag.clone()).or_default()),
            None => {
                set(&mut self.call);
                if !r.stop && r.all {
                    self.by_tag.values_mut().for_each(set);
                }
            }
        }
    }

    /// What stops the packets of the participant of `tag` (none yet: the call's only).
    pub fn of(&self, tag: Option<&str>) -> Gate {
        let own = tag
            .and_then(|t| self.by_tag.get(t))
            .copied()
            .unwrap_or_default();
        Gate {
            block_media: self.call.block_media || own.block_media,
            silence_media: self.call.silence_media || own.silence_media,
            block_dtmf: self.call.block_dtmf || own.block_dtmf,
        }
    }

    /// Whether nothing is stopped anywhere in the call.
    pub fn is_open(&self) -> bool {
        self.call.is_open() && self.by_tag.values().all(|g| g.is_open())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(what: Gated, stop: bool, from: Option<&str>, all: bool) -> GateRequest {
        GateRequest {
            call_id: "c".into(),
            from_tag: from.map(str::to_owned),
            to_tag: None,
            what,
            stop,
            all,
        }
    }

    #[test]
    fn a_participant_blocked_by_name_stays_blocked_through_a_call_wide_unblock_unless_all() {
        let mut g = CallGates::default();
        assert!(g.is_open());
        g.apply(&req(Gated::Media, true, Some("alice"), false));
        g.apply(&req(Gated::Media, true, None, false));
        assert!(g.of(Some("alice")).block_media && g.of(Some("bob")).block_media);
        g.apply(&req(Gated::Media, false, None, false));
        assert!(g.of(Some("alice")).block_media, "blocked by name");
        assert!(!g.of(Some("bob")).block_media && !g.of(None).block_media);
        g.apply(&req(Gated::Media, false, None, true));
        assert!(!g.of(Some("alice")).block_media);
        assert!(g.is_open());
    }

    #[test]
    fn media_silence_and_dtmf_are_set_apart() {
        let mut g = CallGates::default();
        g.apply(&req(Gated::Silence, true, Some("alice"), false));
        g.apply(&req(Gated::Dtmf, true, None, false));
        let alice = g.of(Some("alice"));
        assert!(alice.silence_media && alice.block_dtmf && !alice.block_media);
        let bob = g.of(Some("bob"));
        assert!(!bob.silence_media && bob.block_dtmf);
        g.apply(&req(Gated::Silence, false, Some("alice"), false));
        assert!(!g.of(Some("alice")).silence_media);
        assert!(!g.is_open(), "DTMF still blocked");
    }
}
