//! SDP offers as browsers write them, reduced to what the gateway decides on; answers that
//! parse back; and refusals with a reason.

use secrelay_wire::sdp::{
    parse_offer, write_answer, AnswerParams, Direction, MediaAnswer, MediaKind, SctpAnswer,
    SctpOffer, SdpError, Setup,
};

const CHROME: &str = include_str!("data/chrome_offer.sdp");

#[test]
fn chrome_offer_is_reduced() {
    let o = parse_offer(CHROME).expect("parses");
    assert_eq!(o.ice_ufrag, "Fx3k");
    assert_eq!(o.ice_pwd, "mWmR9dHJ4PcoyR+l8UkmBVlo");
    assert_eq!(o.fingerprint.0, "sha-256");
    assert_eq!(o.fingerprint.1.len(), 32);
    assert_eq!(o.fingerprint.1[0], 0x3D);
    assert_eq!(o.setup, Setup::Actpass);
    assert_eq!(o.bundle, vec!["0", "1"]);
    assert_eq!(o.media.len(), 2);
    let a = &o.media[0];
    assert_eq!(
        (a.mid.as_str(), &a.kind, a.direction),
        ("0", &MediaKind::Audio, Direction::SendRecv)
    );
    assert!(a.rtcp_mux);
    assert_eq!(a.ssrcs, vec![1001]);
    assert!(a.codecs[0].is("opus", 48000));
    assert_eq!(a.codecs[0].channels, Some(2));
    assert!(a.codecs[0]
        .fmtp
        .as_deref()
        .unwrap()
        .contains("useinbandfec=1"));
    let pcmu = a.codecs.iter().find(|c| c.is("PCMU", 8000)).unwrap();
    assert_eq!(pcmu.pt, 0);
    assert_eq!(
        a.extmaps[0],
        (1, "urn:ietf:params:rtp-hdrext:ssrc-audio-level".to_string())
    );
    let v = &o.media[1];
    assert_eq!(
        (&v.kind, v.direction),
        (&MediaKind::Video, Direction::SendOnly)
    );
    assert!(v.codecs[0].is("VP8", 90000));
    assert_eq!(v.ssrcs, vec![2001, 2002]);
}

#[test]
fn answer_round_trips_through_the_parser() {
    let o = parse_offer(CHROME).unwrap();
    let media = o
        .media
        .iter()
        .map(|m| MediaAnswer {
            codecs: m.codecs.iter().take(1).cloned().collect(),
            ssrc: Some((0x1234, "secrelay".into())),
            ..MediaAnswer::bare(m.mid.clone(), m.kind.clone(), Some(m.direction.reversed()))
        })
        .collect();
    let fp = "sha-256 AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89";
    let answer = write_answer(&AnswerParams {
        session_id: 42,
        version: 1,
        ice_ufrag: "srly".into(),
        ice_pwd: "0123456789abcdefghijklmn".into(),
        fingerprint: fp.into(),
        setup: Setup::Passive,
        candidates: vec!["192.0.2.10:3478".parse().unwrap()],
        tcp_candidates: vec!["192.0.2.10:443".parse().unwrap()],
        media,
    });
    assert!(answer.contains("a=ice-lite\r\n"));
    assert!(answer.contains("a=group:BUNDLE 0 1\r\n"));
    assert!(answer.contains("a=candidate:1 1 udp "));
    assert!(answer.contains(" 192.0.2.10 3478 typ host\r\n"));
    // The passive ICE-TCP candidate after it, at a lower priority (UDP preferred).
    let priority = |transport: &str| -> u32 {
        let line = answer
            .lines()
            .find(|l| l.starts_with("a=candidate:") && l.contains(transport))
            .unwrap_or_else(|| panic!("no {transport} candidate in\n{answer}"));
        line.split(' ').nth(3).unwrap().parse().unwrap()
    };
    assert!(answer.contains("a=candidate:2 1 tcp "));
    assert!(answer.contains(" 192.0.2.10 443 typ host tcptype passive\r\n"));
    assert!(priority(" tcp ") < priority(" udp "));
    // Our answer is a valid offer-shaped SDP for the same parser: read it back.
    let back = parse_offer(&answer).expect("answer parses");
    assert_eq!(back.ice_ufrag, "srly");
    assert_eq!(back.setup, Setup::Passive);
    assert!(back.ice_lite);
    assert_eq!(back.media[0].direction, Direction::SendRecv);
    assert_eq!(back.media[1].direction, Direction::RecvOnly);
    assert!(back.media[0].codecs[0].is("opus", 48000));
    assert_eq!(back.media[0].ssrcs, vec![0x1234]);
    // We only receive video: no a=ssrc of ours there.
    assert!(back.media[1].ssrcs.is_empty());
}

#[test]
fn rejected_section_has_port_zero() {
    let o = parse_offer(CHROME).unwrap();
    let media = vec![
        MediaAnswer {
            codecs: o.media[0].codecs[..1].to_vec(),
            ..MediaAnswer::bare("0".into(), MediaKind::Audio, Some(Direction::SendRecv))
        },
        MediaAnswer::bare("1".into(), MediaKind::Video, None),
    ];
    let answer = write_answer(&AnswerParams {
        session_id: 1,
        version: 1,
        ice_ufrag: "u".into(),
        ice_pwd: "p".repeat(22),
        fingerprint: format!("sha-256 {}", vec!["00"; 32].join(":")),
        setup: Setup::Passive,
        candidates: vec!["127.0.0.1:5000".parse().unwrap()],
        tcp_candidates: Vec::new(),
        media,
    });
    assert!(answer.contains("m=video 0 "));
    assert!(answer.contains("a=group:BUNDLE 0\r\n"));
}

#[test]
fn refusals_say_why() {
    assert!(matches!(
        parse_offer("not sdp at all"),
        Err(SdpError::Parse(_))
    ));
    let no_fp: String = CHROME
        .lines()
        .filter(|l| !l.starts_with("a=fingerprint"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        parse_offer(&no_fp).unwrap_err(),
        SdpError::MissingFingerprint
    );
    let no_ice: String = CHROME
        .lines()
        .filter(|l| !l.starts_with("a=ice-"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        parse_offer(&no_ice).unwrap_err(),
        SdpError::MissingIceCredentials
    );
    let sha1 = CHROME.replace(
        "a=fingerprint:sha-256 3D:9E:1B:7A:22:4C:35:0F:3E:C3:6F:AF:9B:56:C4:41:17:5C:9F:02:A0:0E:77:27:4B:23:0F:9B:D8:77:D5:23",
        "a=fingerprint:sha-1 3D:9E:1B:7A:22:4C:35:0F:3E:C3:6F:AF:9B:56:C4:41:17:5C:9F:02",
    );
    assert!(matches!(
        parse_offer(&sha1),
        Err(SdpError::UnsupportedFingerprint(_))
    ));
    let mixed = CHROME.replacen("a=ice-ufrag:Fx3k", "a=ice-ufrag:Other", 1);
    assert_eq!(
        parse_offer(&mixed).unwrap_err(),
        SdpError::InconsistentBundle
    );
    let session_only = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n";
    assert!(parse_offer(session_only).is_err());
    // Bundled sections are named by their mids: one without is refused.
    let no_mid: String = CHROME
        .lines()
        .filter(|l| !l.starts_with("a=mid"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(parse_offer(&no_mid).unwrap_err(), SdpError::MissingMid);
}

#[test]
fn an_offer_without_bundle_or_mids_names_its_sections_by_index() {
    // A DTLS-SRTP offer from before RFC 8843 (a SIP phone's): no BUNDLE, no a=mid.
    let legacy: String = CHROME
        .lines()
        .filter(|l| !l.starts_with("a=mid") && !l.starts_with("a=group"))
        .map(|l| format!("{l}\n"))
        .collect();
    let o = parse_offer(&legacy).expect("parses");
    let mids: Vec<&str> = o.media.iter().map(|m| m.mid.as_str()).collect();
    assert_eq!(mids, ["0", "1"]);
    assert!(o.bundle.is_empty());
}

#[test]
fn feedback_rtx_and_extensions_are_read_from_the_offer_and_written_in_the_answer() {
    let o = parse_offer(CHROME).unwrap();
    let video = o.media.iter().find(|m| m.kind == MediaKind::Video).unwrap();
    assert!(video.offers_feedback(96, "nack"));
    assert!(video.offers_feedback(96, "nack pli"));
    assert!(video.offers_feedback(96, "goog-remb"));
    assert!(!video.offers_feedback(96, "ccm fir"), "not offered for 96");
    assert!(video.rtcp_rsize);
    let rtx = video.rtx_for(96).expect("rtx for 96");
    assert_eq!(rtx.pt, 97);
    assert!(video.rtx_for(97).is_none());
    assert_eq!(video.fid, vec![(2001, 2002)]);
    let audio = o.media.iter().find(|m| m.kind == MediaKind::Audio).unwrap();
    assert!(audio.offers_feedback(111, "transport-cc"));
    assert_eq!(
        audio.extmap_id("http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"),
        Some(2)
    );

    let vp8 = video.codecs.iter().find(|c| c.pt == 96).unwrap().clone();
    let answer = write_answer(&AnswerParams {
        session_id: 1,
        version: 1,
        ice_ufrag: "srly".into(),
        ice_pwd: "0123456789abcdefghijklmn".into(),
        fingerprint: "sha-256 AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89".into(),
        setup: Setup::Passive,
        candidates: vec!["192.0.2.10:3478".parse().unwrap()],
        tcp_candidates: Vec::new(),
        media: vec![MediaAnswer {
            mid: video.mid.clone(),
            kind: MediaKind::Video,
            direction: Some(Direction::SendOnly),
            codecs: vec![vp8],
            ssrc: Some((0x1234, "secrelay".into())),
            feedback: vec![(96, "nack".into()), (96, "nack pli".into())],
            rtx: vec![rtx.clone()],
            rtx_ssrc: Some(0x5678),
            extmaps: vec![(2, "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time".into())],
            rtcp_rsize: true,
            simulcast_recv: Vec::new(),
            sctp: None,
        }],
    });
    for line in [
        "UDP/TLS/RTP/SAVPF 96 97\r\n",
        "a=rtcp-fb:96 nack\r\n",
        "a=rtcp-fb:96 nack pli\r\n",
        "a=rtpmap:97 rtx/90000\r\n",
        "a=fmtp:97 apt=96\r\n",
        "a=ssrc-group:FID 4660 22136\r\n",
        "a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r\n",
        "a=rtcp-rsize\r\n",
    ] {
        assert!(answer.contains(line), "{line:?} in {answer}");
    }
    assert!(
        !answer.contains("a=rtcp-fb:97"),
        "no feedback on the rtx codec"
    );
    let back = parse_offer(&answer).unwrap();
    assert_eq!(back.media[0].ssrcs, vec![0x1234, 0x5678]);
    assert!(back.media[0].offers_feedback(96, "nack pli"));
}

/// Chrome's offer with a data channel: its `m=application` section as Chrome writes it.
fn chrome_offer_with_data_channel() -> String {
    let mut sdp = CHROME.replace("a=group:BUNDLE 0 1", "a=group:BUNDLE 0 1 2");
    if !sdp.ends_with('\n') {
        sdp.push_str("\r\n");
    }
    sdp.push_str(
        "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\n\
         a=ice-ufrag:Fx3k\r\na=ice-pwd:mWmR9dHJ4PcoyR+l8UkmBVlo\r\na=ice-options:trickle\r\n\
         a=fingerprint:sha-256 3D:9E:1B:7A:22:4C:35:0F:3E:C3:6F:AF:9B:56:C4:41:17:5C:9F:02:A0:0E:77:27:4B:23:0F:9B:D8:77:D5:23\r\n\
         a=setup:actpass\r\na=mid:2\r\na=sctp-port:5000\r\na=max-message-size:262144\r\n",
    );
    sdp
}

fn data_answer(mid: &str, direction: Option<Direction>) -> MediaAnswer {
    MediaAnswer {
        sctp: Some(SctpAnswer {
            port: 5000,
            max_message_size: 65536,
        }),
        ..MediaAnswer::bare(mid.into(), MediaKind::Application, direction)
    }
}

#[test]
fn a_data_channel_section_is_read_and_answered_with_sctp_lines() {
    let o = parse_offer(&chrome_offer_with_data_channel()).expect("parses");
    assert_eq!(o.media.len(), 3);
    let d = &o.media[2];
    assert_eq!(d.kind, MediaKind::Application);
    assert_eq!(
        d.sctp,
        Some(SctpOffer {
            port: 5000,
            max_message_size: Some(262144)
        })
    );
    assert!(o.media[0].sctp.is_none() && o.media[1].sctp.is_none());
    let params = |direction| AnswerParams {
        session_id: 7,
        version: 1,
        ice_ufrag: "srly".into(),
        ice_pwd: "0123456789abcdefghijklmn".into(),
        fingerprint: format!("sha-256 {}", vec!["00"; 32].join(":")),
        setup: Setup::Passive,
        candidates: vec!["192.0.2.10:3478".parse().unwrap()],
        tcp_candidates: Vec::new(),
        media: vec![data_answer("2", direction)],
    };
    let answer = write_answer(&params(Some(Direction::SendRecv)));
    assert!(answer.contains("a=group:BUNDLE 2\r\n"), "{answer}");
    assert!(
        answer.contains("m=application 3478 UDP/DTLS/SCTP webrtc-datachannel\r\n"),
        "{answer}"
    );
    assert!(answer.contains("a=sctp-port:5000\r\na=max-message-size:65536\r\n"));
    assert!(answer.contains("a=setup:passive\r\n"));
    assert!(!answer.contains("a=rtcp-mux") && !answer.contains("a=sendrecv"));
    // Our answer reads back as a data-channel section.
    let back = parse_offer(&answer).expect("answer parses");
    assert_eq!(
        back.media[0].sctp,
        Some(SctpOffer {
            port: 5000,
            max_message_size: Some(65536)
        })
    );
    // Rejected: port 0, the same protocol, no transport lines.
    let rejected = write_answer(&params(None));
    assert!(rejected.contains("m=application 0 UDP/DTLS/SCTP webrtc-datachannel\r\n"));
    assert!(!rejected.contains("a=sctp-port") && !rejected.contains("a=group:BUNDLE"));
}

#[test]
fn application_sections_that_are_not_data_channels_carry_no_sctp() {
    let base = chrome_offer_with_data_channel();
    for (from, to) in [
        // The pre-standard form (format 5000 with a=sctpmap).
        ("UDP/DTLS/SCTP webrtc-datachannel", "DTLS/SCTP 5000"),
        // Another format over SCTP.
        ("webrtc-datachannel", "something-else"),
        // Port 0, which no association can use.
        ("a=sctp-port:5000", "a=sctp-port:0"),
    ] {
        let o = parse_offer(&base.replace(from, to)).expect("parses");
        assert_eq!(o.media[2].sctp, None, "{to}");
    }
    // No a=sctp-port: 5000 (RFC 8841); no a=max-message-size: none.
    let o = parse_offer(
        &base
            .replace("a=sctp-port:5000\r\n", "")
            .replace("a=max-message-size:262144\r\n", ""),
    )
    .unwrap();
    assert_eq!(
        o.media[2].sctp,
        Some(SctpOffer {
            port: 5000,
            max_message_size: None
        })
    );
}
