#![no_main]

//! RTCP compounds read once for their reports and feedback (NACK, PLI, FIR, REMB,
//! transport-cc), as a receiver sends them: never a panic; NACKs, PLIs and FIRs read write back
//! to messages that read the same; transport-cc feedback decodes without a panic, and what it
//! decodes writes back to a message that decodes to the same arrivals on the 250 µs grid.

use libfuzzer_sys::fuzz_target;
use secrelay_wire::rtcp::{compound, write_fir, write_nack, write_pli, Feedback};
use secrelay_wire::twcc::{parse_feedback, write_feedback};

fuzz_target!(|data: &[u8]| {
    let Ok(c) = compound(data) else {
        return;
    };
    for f in c.feedback {
        let mut out = Vec::new();
        match &f {
            Feedback::Pli { sender, media } => write_pli(&mut out, *sender, *media),
            Feedback::Fir { sender, requests } if requests.len() == 1 => {
                write_fir(&mut out, *sender, requests[0].0, requests[0].1)
            }
            Feedback::Nack {
                sender,
                media,
                lost,
            } if !lost.is_empty() && lost.len() <= 17 * 64 => {
                write_nack(&mut out, *sender, *media, lost);
                let again = compound(&out).expect("what was written reads");
                let Some(Feedback::Nack { lost: back, .. }) = again.feedback.first() else {
                    panic!("a NACK written is read as one");
                };
                // The same set of sequence numbers (order and repeats may differ).
                let mut a = lost.clone();
                let mut b = back.clone();
                a.sort_unstable();
                a.dedup();
                b.sort_unstable();
                b.dedup();
                assert_eq!(a, b);
                continue;
            }
            Feedback::TransportCc { sender, media, fci } => {
                let Ok((fb, arrivals)) = parse_feedback(fci) else {
                    continue;
                };
                let n = write_feedback(&mut out, *sender, *media, fb, &arrivals);
                if n == arrivals.len() && n > 0 {
                    let again = compound(&out).expect("what was written reads");
                    let Some(Feedback::TransportCc { fci: fci2, .. }) = again.feedback.first()
                    else {
                        panic!("transport-cc written is read as one");
                    };
                    let (_, back) = parse_feedback(fci2).expect("what was written decodes");
                    assert_eq!(back.len(), n);
                    for (a, b) in arrivals.iter().zip(&back) {
                        assert_eq!(a.seq, b.seq);
                        assert_eq!(a.at_us.is_some(), b.at_us.is_some());
                    }
                }
                continue;
            }
            _ => continue,
        }
        let again = compound(&out).expect("what was written reads");
        assert_eq!(again.feedback, vec![f]);
    }
});
