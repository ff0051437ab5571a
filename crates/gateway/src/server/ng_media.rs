//! ng `play media` and `stop media`: an audio file played to a call's participant
//! ([`secrelay_core::room::PlayMedia`]), from `media_dir` (by name) or from the command itself
//! (`blob`); and the decoded files, which the HTTP API's `POST …/participants/{id}/media`
//! plays from too.
//!
//! A name is resolved inside `media_dir` and refused when it leads out of it (after links are
//! followed), so a command cannot make the gateway read any other file of the host. Files are
//! read and decoded on a blocking thread (an MP3 of minutes takes a moment) and kept decoded (up
//! to 128 MiB of samples, the last read first) while their size and modification time stay the
//! same: music on hold played to many calls is decoded once.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use secrelay_core::room::PlayMedia;
use secrelay_core::shard::ControlError;
use secrelay_media::clip::Clip;
use secrelay_wire::bencode::Bencode;
use secrelay_wire::ng::{reply, MediaFile, PlayMediaRequest};

use super::error::ApiError;
use super::ng::Ng;

/// The largest file `play media` reads.
const MAX_FILE: u64 = 64 << 20;

/// How many samples of decoded files are kept (128 MiB), the last read first.
const KEPT_SAMPLES: usize = 4 * secrelay_media::clip::MAX_SAMPLES;

/// Decoded files, by where they are and what they were when read.
#[derive(Debug, Default)]
pub(super) struct Clips {
    kept: VecDeque<(PathBuf, u64, SystemTime, Arc<Clip>)>,
}

impl Clips {
    /// The clip of `media`: `file` read from `dir` (decoded once while unchanged), or `blob`.
    pub(super) async fn load(
        &mut self,
        dir: Option<&Path>,
        media: MediaFile,
    ) -> Result<Arc<Clip>, ApiError> {
        let name = match media {
            MediaFile::Blob(bytes) => return decode_blob(bytes).await,
            MediaFile::File(name) => name,
        };
        let dir = dir.ok_or_else(|| {
            ApiError::bad(
                "playing a file needs media_dir (secrelay serve --media-dir DIR), the folder files are read from",
            )
        })?;
        let path = resolve(dir, &name)?;
        let meta =
            std::fs::metadata(&path).map_err(|e| ApiError::bad(format!("file {name:?}: {e}")))?;
        if !meta.is_file() {
            return Err(ApiError::bad(format!("file {name:?} is not a file")));
        }
        if meta.len() > MAX_FILE {
            return Err(ApiError::bad(format!(
                "file {name:?} is larger than {} MiB",
                MAX_FILE >> 20
            )));
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let same = |k: &(PathBuf, u64, SystemTime, Arc<Clip>)| {
            k.0 == path && k.1 == meta.len() && k.2 == modified
        };
        if let Some(k) = self.kept.iter().find(|k| same(k)) {
            return Ok(k.3.clone());
        }
        let read = path.clone();
        let clip = off_runtime(move || {
            let bytes = std::fs::read(&read).map_err(|e| e.to_string())?;
            let ext = read.extension().and_then(|e| e.to_str());
            Clip::decode(bytes, ext).map_err(|e| e.to_string())
        })
        .await?
        .map_err(|e| ApiError::bad(format!("file {name:?}: {e}")))?;
        self.keep(path, meta.len(), modified, clip.clone());
        Ok(clip)
    }

    /// Keeps a decoded file; the oldest are let go while what is kept is over
    /// [`KEPT_SAMPLES`] (the last one read stays).
    fn keep(&mut self, path: PathBuf, len: u64, modified: SystemTime, clip: Arc<Clip>) {
        self.kept.retain(|k| k.0 != path);
        self.kept.push_back((path, len, modified, clip));
        let mut held: usize = self.kept.iter().map(|k| k.3.pcm().len()).sum();
        while self.kept.len() > 1 && held > KEPT_SAMPLES {
            if let Some(k) = self.kept.pop_front() {
                held -= k.3.pcm().len();
            }
        }
    }
}

/// `name` inside `dir` (a relative name from it, an absolute one as it is), links followed;
/// refused when it is not inside `dir`.
fn resolve(dir: &Path, name: &str) -> Result<PathBuf, ApiError> {
    let root = dir
        .canonicalize()
        .map_err(|e| ApiError::bad(format!("media_dir {}: {e}", dir.display())))?;
    let path = root
        .join(name)
        .canonicalize()
        .map_err(|e| ApiError::bad(format!("file {name:?}: {e}")))?;
    if !path.starts_with(&root) {
        return Err(ApiError::bad(format!(
            "file {name:?} is outside media_dir: only files in it are played"
        )));
    }
    Ok(path)
}

/// Decodes a file's contents (an ng `blob`) on a blocking thread.
async fn decode_blob(bytes: Vec<u8>) -> Result<Arc<Clip>, ApiError> {
    off_runtime(move || Clip::decode(bytes, None).map_err(|e| e.to_string()))
        .await?
        .map_err(ApiError::bad)
}

/// Reads or decodes a clip with `work` on a blocking thread (a file of minutes takes a moment):
/// the clip or why not; Err when the runtime is shutting down.
async fn off_runtime(
    work: impl FnOnce() -> Result<Clip, String> + Send + 'static,
) -> Result<Result<Arc<Clip>, String>, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map(|r| r.map(Arc::new))
        .map_err(|_| ApiError::Control(ControlError::ShuttingDown))
}

impl Ng {
    /// `play media`: the file played to the chosen participant's members (every
    /// participant's with `all`); `duration` in the reply is one play's length, ms. Err: no
    /// such call or tag, a file that cannot be read or decoded, or no member it could be
    /// played to (the reason).
    pub(super) async fn play_media(&mut self, p: PlayMediaRequest) -> Result<Bencode, ApiError> {
        let members = self.chosen_members(&p.call_id, p.from_tag.as_deref())?;
        let clip = self.gateway.clip(p.media).await?;
        let media = PlayMedia {
            clip,
            start_frame: p.start_frame,
            times: p.times,
            repeat_for: p.repeat_ms.map(Duration::from_millis),
        };
        let (mut length, mut refused) = (None, None);
        for (room, id) in members {
            match self.gateway.play_media(&room, &id, media.clone()).await {
                Some(Ok(l)) => length = Some(l),
                Some(Err(why)) => refused = Some(why),
                None => return Err(ApiError::Control(ControlError::ShuttingDown)),
            }
        }
        match (length, refused) {
            (Some(l), _) => Ok(reply(vec![
                ("result", Bencode::str("ok")),
                ("duration", Bencode::Int(l.as_millis() as i64)),
            ])),
            (None, Some(why)) => Err(ApiError::Play(why)),
            (None, None) => Err(ApiError::not_found("no such tag in this call")),
        }
    }

    /// `stop media`: the playback to the chosen participant stopped; `last-frame-pos` in the
    /// reply is where it was, in packet times from the file's start (0 when nothing played).
    pub(super) async fn stop_media(
        &mut self,
        call_id: &str,
        from_tag: Option<&str>,
    ) -> Result<Bencode, ApiError> {
        let members = self.chosen_members(call_id, from_tag)?;
        let mut last = 0;
        for (room, id) in members {
            match self.gateway.stop_media(&room, &id).await {
                Some(Some(Some(at))) => last = last.max(at),
                Some(_) => {}
                None => return Err(ApiError::Control(ControlError::ShuttingDown)),
            }
        }
        Ok(reply(vec![
            ("result", Bencode::str("ok")),
            ("last-frame-pos", Bencode::Int(last as i64)),
        ]))
    }

    /// The (room, member id) of call `call_id`'s members of participant `from_tag` (every
    /// member with `None`). Err: no such call, or no such tag in it.
    pub(super) fn chosen_members(
        &self,
        call_id: &str,
        from_tag: Option<&str>,
    ) -> Result<Vec<(String, String)>, ApiError> {
        let call = self
            .calls
            .get(call_id)
            .ok_or_else(|| ApiError::not_found(format!("unknown call-id {call_id:?}")))?;
        let members: Vec<_> = call
            .members()
            .into_iter()
            .filter(|(_, _, tag)| from_tag.is_none() || tag.as_deref() == from_tag)
            .map(|(room, id, _)| (room, id))
            .collect();
        if members.is_empty() {
            return Err(ApiError::not_found("no such tag in this call"));
        }
        Ok(members)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_inside_media_dir_only() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("media");
        std::fs::create_dir_all(dir.join("moh")).unwrap();
        std::fs::write(dir.join("moh/a.wav"), b"x").unwrap();
        std::fs::write(root.path().join("secret"), b"x").unwrap();
        assert!(resolve(&dir, "moh/a.wav").is_ok());
        assert!(resolve(&dir, &dir.join("moh/a.wav").to_string_lossy()).is_ok());
        for outside in ["../secret", "/etc/passwd", "moh/../../secret"] {
            let e = resolve(&dir, outside).unwrap_err().to_string();
            assert!(e.contains("outside media_dir"), "{outside}: {e}");
        }
        std::os::unix::fs::symlink(root.path().join("secret"), dir.join("link")).unwrap();
        assert!(resolve(&dir, "link").is_err(), "a link out of the folder");
        assert!(resolve(&dir, "missing.wav").is_err());
    }
}
