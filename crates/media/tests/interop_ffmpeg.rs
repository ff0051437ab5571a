//! Our G.722 and G.711 against FFmpeg's (Debian's `ffmpeg`, installed by scripts/setup): an
//! implementation nobody here wrote, and the one rtpengine transcodes with (libavcodec).
//!
//! - G.722: the same 16 kHz PCM encoded by both must give the same octets, and the same
//!   octets decoded by both the same PCM, bit for bit;
//! - G.711: all 256 codes decode to the same samples (μ-law and A-law); every 16-bit sample
//!   encodes to the same code, except next to a decision value, where FFmpeg (which reduces
//!   16-bit samples to 13 bits and rounds its decision values, and truncates negatives in
//!   two's complement) and G.711's own decision values and one's complement (ITU-T G.191's
//!   reference code, which ours follows) pick the two steps on either side of the sample.
//!
//! Without ffmpeg the test says SKIPPED, or fails under `CI`.

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use secrelay_media::g711::{alaw_decode, alaw_encode, ulaw_decode, ulaw_encode};
use secrelay_media::g722::{G722Decoder, G722Encoder};
use secrelay_media::{le_bytes_to_pcm, pcm_to_le_bytes, tone};

fn ffmpeg_available(test: &str) -> bool {
    let ok = Command::new("ffmpeg")
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        let why = "ffmpeg is not installed (apt-get install ffmpeg)";
        if std::env::var_os("CI").is_some() {
            panic!("{test}: {why} (CI is set, and scripts/setup installs it)");
        }
        eprintln!("SKIPPED {test}: {why} (run scripts/setup)");
    }
    ok
}

/// Runs ffmpeg with `args`, feeding `input` on stdin; returns stdout.
fn ffmpeg(args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut child = Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-nostdin"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ffmpeg starts");
    let mut stdin = child.stdin.take().expect("stdin piped");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .expect("stdout piped")
        .read_to_end(&mut out)
        .expect("reading ffmpeg's output");
    writer.join().expect("writer thread");
    let o = child.wait_with_output().expect("ffmpeg ends");
    assert!(
        o.status.success(),
        "ffmpeg {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Speech-like test signal at 16 kHz: tones in both sub-bands, a sweep, loud and quiet parts.
fn signal() -> Vec<i16> {
    let mut pcm = tone::sine(16_000, 440.0, 12_000.0, 8000);
    pcm.extend(tone::dual_tone(16_000, 941.0, 5200.0, 7000.0, 8000));
    pcm.extend(tone::sine(16_000, 3000.0, 300.0, 8000));
    pcm.extend((0..16_000).map(|i| {
        let t = i as f64 / 16_000.0;
        (20_000.0 * (2.0 * std::f64::consts::PI * (100.0 * t + 3500.0 * t * t)).sin()) as i16
    }));
    // Full-scale square bursts (saturation paths).
    pcm.extend((0..4000).map(|i| if (i / 5) % 2 == 0 { i16::MAX } else { i16::MIN }));
    pcm
}

#[test]
fn g722_is_bit_exact_with_ffmpeg() {
    if !ffmpeg_available("g722_is_bit_exact_with_ffmpeg") {
        return;
    }
    let pcm = signal();
    let raw = pcm_to_le_bytes(&pcm);
    let theirs = ffmpeg(
        &[
            "-f", "s16le", "-ar", "16000", "-ac", "1", "-i", "pipe:0", "-c:a", "g722", "-f",
            "g722", "pipe:1",
        ],
        &raw,
    );
    let mut ours = Vec::new();
    G722Encoder::new().encode(&pcm, &mut ours);
    assert_eq!(ours.len(), pcm.len() / 2);
    assert_eq!(
        theirs.len(),
        ours.len(),
        "ffmpeg wrote {} octets",
        theirs.len()
    );
    let first_diff = ours.iter().zip(&theirs).position(|(a, b)| a != b);
    assert_eq!(
        first_diff, None,
        "encoders differ from octet {first_diff:?}"
    );

    // Decoding: the same octets (ffmpeg's), both decoders.
    let their_pcm = le_bytes_to_pcm(&ffmpeg(
        &[
            "-f", "g722", "-i", "pipe:0", "-f", "s16le", "-ar", "16000", "pipe:1",
        ],
        &theirs,
    ));
    let mut our_pcm = Vec::new();
    G722Decoder::new().decode(&theirs, &mut our_pcm);
    assert_eq!(their_pcm.len(), our_pcm.len());
    let first_diff = our_pcm.iter().zip(&their_pcm).position(|(a, b)| a != b);
    assert_eq!(
        first_diff, None,
        "decoders differ from sample {first_diff:?}"
    );
}

#[test]
fn g711_matches_ffmpeg() {
    if !ffmpeg_available("g711_matches_ffmpeg") {
        return;
    }
    let codes: Vec<u8> = (0..=255).collect();
    for (fmt, ours) in [
        ("mulaw", ulaw_decode as fn(u8) -> i16),
        ("alaw", alaw_decode),
    ] {
        let theirs = le_bytes_to_pcm(&ffmpeg(
            &[
                "-f", fmt, "-ar", "8000", "-ac", "1", "-i", "pipe:0", "-f", "s16le", "pipe:1",
            ],
            &codes,
        ));
        let mine: Vec<i16> = codes.iter().map(|&c| ours(c)).collect();
        assert_eq!(mine, theirs, "{fmt} decoding");
    }
    let all: Vec<i16> = (i16::MIN..=i16::MAX).collect();
    let raw = pcm_to_le_bytes(&all);
    for (fmt, enc, dec) in [
        (
            "mulaw",
            ulaw_encode as fn(i16) -> u8,
            ulaw_decode as fn(u8) -> i16,
        ),
        ("alaw", alaw_encode, alaw_decode),
    ] {
        let theirs = ffmpeg(
            &[
                "-f",
                "s16le",
                "-ar",
                "8000",
                "-ac",
                "1",
                "-i",
                "pipe:0",
                "-c:a",
                &format!("pcm_{fmt}"),
                "-f",
                fmt,
                "pipe:1",
            ],
            &raw,
        );
        assert_eq!(theirs.len(), all.len());
        let mut differ = 0;
        for (&x, &t) in all.iter().zip(&theirs) {
            let o = enc(x);
            if o != t {
                differ += 1;
                // Only at a decision value: the two codes are the neighbouring steps on
                // either side of the input.
                let (a, b) = (dec(o) as i32, dec(t) as i32);
                let xi = x as i32;
                assert!(
                    (a - xi) * (b - xi) <= 0,
                    "{fmt}: {x} → ours {o:#04x} ({a}), ffmpeg {t:#04x} ({b})"
                );
            }
        }
        eprintln!("{fmt}: {differ} of 65536 samples code differently, each at a decision value");
        assert!(differ < 65536 / 50, "{fmt}: {differ} differ");
    }
}
