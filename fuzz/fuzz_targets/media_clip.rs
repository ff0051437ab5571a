#![no_main]

//! An audio file for `play media` (an ng `blob` comes from the network) decoded into a clip:
//! it never panics out of `Clip::decode` (a panic inside the decoder is contained there, so
//! this target takes libFuzzer's abort-on-panic hook out), and a clip it gives is within the
//! bounds the player relies on.

use libfuzzer_sys::fuzz_target;
use secrelay_media::clip::{Clip, MAX_SAMPLES};

fuzz_target!(|data: &[u8]| {
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| std::panic::set_hook(Box::new(|_| {})));
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    let hint = [None, Some("wav"), Some("mp3"), Some("flac")][usize::from(which % 4)];
    if let Ok(clip) = Clip::decode(bytes.to_vec(), hint) {
        assert!((8000..=48_000).contains(&clip.rate()) && clip.rate().is_multiple_of(100));
        assert!(!clip.pcm().is_empty() && clip.pcm().len() <= MAX_SAMPLES);
    }
});
