#!/usr/bin/env python3
"""Interop with aiortc, a WebRTC stack nobody here wrote, through a running `secrelay serve`.

Three aiortc peers use the gateway the way outside clients do (HTTP signaling, ICE, DTLS-SRTP):

* a WHIP publisher (`POST /whip/{room}`) sends a 440 Hz sine from a custom audio track;
* a WHEP subscriber (`POST /whep/{room}`, recvonly);
* a conference participant (`POST /rooms/{room}/join`, sendrecv) with a 660 Hz sine of its own.

Phase 1: both receivers, which joined before the publisher (a publisher "that arrives later"),
decode the audio the gateway relayed (re-encrypted with each receiver's own keys) and look for
the 440 Hz tone with an FFT: the strongest frequency must be the tone and the band around it
must hold most of the energy. The participant's microphone is muted meanwhile (see below).
While everybody is connected the script reads `GET /api/rooms/{room}` for the negotiated SRTP
profiles. Phase 2: the publisher leaves (DELETE), the participant unmutes, and the WHEP
subscriber must hear 660 Hz. Phase 3 (several talkers at once): a listener joins with two
receive-only audio transceivers (two receive slots) and a second WHIP publisher sends 880 Hz;
while the participant goes on with 660 Hz, the listener must hear each tone on its own track.
Then everybody leaves with DELETE on their Location.

Prints one JSON line with what it measured and exits 0 only when every tone was heard where expected.
Usage: aiortc_tone.py --base http://127.0.0.1:PORT [--room NAME] [--seconds S] [--timeout S]
"""

import argparse
import asyncio
import fractions
import json
import logging
import math
import os
import sys
import time
import urllib.error
import urllib.request

import aioice.ice
import av
import numpy as np
import aiortc
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCPeerConnection,
    RTCSessionDescription,
)

# aioice gathers host candidates on every interface but loopback; the gateway under test
# announces itself on loopback, and the test's traffic stays there.
aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"] if use_ipv4 else []

RATE = 48000
PTIME = 0.020
TONE_HZ = 440.0
JOINER_HZ = 660.0
SECOND_HZ = 880.0


class SineTrack(MediaStreamTrack):
    """A mono 48 kHz sine, in 20 ms frames paced by the wall clock (as a microphone would)."""

    kind = "audio"

    def __init__(self, hz: float, amplitude: float = 0.5, unmuted=None):
        super().__init__()
        self.hz = hz
        self.unmuted = unmuted  # an asyncio.Event: no frames (a muted microphone) until it is set
        self.amplitude = amplitude
        self.samples = int(RATE * PTIME)
        self.pts = 0
        self.start = None

    async def recv(self):
        if self.readyState != "live":
            raise aiortc.mediastreams.MediaStreamError
        if self.start is None:
            if self.unmuted is not None:
                await self.unmuted.wait()
            self.start = time.monotonic()
        else:
            wait = self.start + self.pts / RATE - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        n = np.arange(self.pts, self.pts + self.samples)
        pcm = (self.amplitude * 32767 * np.sin(2 * math.pi * self.hz * n / RATE)).astype(np.int16)
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = RATE
        frame.pts = self.pts
        frame.time_base = fractions.Fraction(1, RATE)
        self.pts += self.samples
        return frame


def http(method, url, body=None, content_type=None, headers=None):
    """One HTTP request (blocking; run it in a thread). Returns (status, headers, body)."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    if content_type:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class Receiver:
    """Decodes the first remote audio track; keeps the mono PCM of the current listening phase."""

    def __init__(self, name: str):
        self.name = name
        self.frames = 0
        self.sample_rate = None
        self.chunks = []
        self.samples = 0
        self.want = 0.0
        self.skip = 0
        self.done = asyncio.Event()
        self.error = None

    def listen(self, seconds: float):
        """Starts a phase: forget what came before, collect `seconds` of audio."""
        self.chunks = []
        self.samples = 0
        self.want = seconds
        self.skip = 10  # a switch of source or the decoder's start-up may sit in the first frames
        self.done = asyncio.Event()

    async def consume(self, track):
        try:
            while True:
                frame = await track.recv()
                self.frames += 1
                if self.done.is_set() or self.want == 0.0:
                    continue
                if self.skip > 0:
                    self.skip -= 1
                    continue
                self.sample_rate = frame.sample_rate
                a = frame.to_ndarray()
                channels = len(frame.layout.channels)
                if frame.format.is_planar:
                    mono = a.astype(np.float64).mean(axis=0)
                else:
                    mono = a.reshape(-1, channels).astype(np.float64).mean(axis=1)
                self.chunks.append(mono)
                self.samples += mono.size
                if self.samples >= self.want * frame.sample_rate:
                    self.done.set()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the track ended: report what was received
            self.error = repr(e)
            self.done.set()

    def analyse(self, tone_hz: float):
        """Dominant frequency, and the share of the energy within ±15 Hz of the tone."""
        if not self.chunks or not self.sample_rate:
            return {"frames": self.frames, "samples": 0, "detected": False, "error": self.error}
        x = np.concatenate(self.chunks)
        x = x - x.mean()
        w = x * np.hanning(x.size)
        spec = np.abs(np.fft.rfft(w)) ** 2
        freqs = np.fft.rfftfreq(w.size, 1.0 / self.sample_rate)
        spec[freqs < 50] = 0.0  # DC and hum
        total = float(spec.sum())
        peak = float(freqs[int(np.argmax(spec))])
        band = float(spec[np.abs(freqs - tone_hz) <= 15].sum())
        share = band / total if total > 0 else 0.0
        rms = float(np.sqrt(np.mean(x**2)))
        return {
            "frames": self.frames,
            "samples": int(x.size),
            "sample_rate": self.sample_rate,
            "peak_hz": round(peak, 1),
            "tone_energy_share": round(share, 4),
            "rms": round(rms, 1),
            "detected": abs(peak - tone_hz) <= 5 and share >= 0.5 and rms > 100,
            "error": self.error,
        }


class Peer:
    """One aiortc RTCPeerConnection signaled over HTTP."""

    def __init__(self, base: str, path: str):
        self.base = base
        self.path = path
        # No ICE servers: aiortc's default would ask a public STUN server; the gateway is local.
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.location = None
        self.answer = None
        self.connected = asyncio.Event()
        self.failed = None

        @self.pc.on("connectionstatechange")
        def _state():
            s = self.pc.connectionState
            if s == "connected":
                self.connected.set()
            elif s in ("failed", "closed") and not self.connected.is_set():
                self.failed = s
                self.connected.set()

    async def signal(self):
        offer = await self.pc.createOffer()
        await self.pc.setLocalDescription(offer)  # aiortc gathers every candidate first
        status, headers, body = await asyncio.to_thread(
            http, "POST", self.base + self.path, self.pc.localDescription.sdp.encode(), "application/sdp"
        )
        if status != 201:
            raise RuntimeError(f"POST {self.path}: {status} {body.decode(errors='replace')}")
        loc = headers.get("Location") or headers.get("location")
        if not loc:
            raise RuntimeError(f"POST {self.path}: 201 without a Location")
        self.location = loc if loc.startswith("http") else self.base + loc
        self.answer = body.decode()
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=self.answer, type="answer"))

    def answer_codecs(self):
        """The codecs of the answer, in its order (the first one is what is sent)."""
        return [line.split(" ", 1)[1].split("/")[0] for line in self.answer.splitlines() if line.startswith("a=rtpmap:")]

    async def leave(self):
        status = None
        if self.location:
            status, _, _ = await asyncio.to_thread(http, "DELETE", self.location)
        await self.pc.close()
        return status


async def room_snapshot(base, room):
    # The room's participants are the operator's to see: the gateway's admin key, which the
    # test hands over in the environment.
    admin = os.environ.get("SECRELAY_ADMIN_KEY")
    headers = {"Authorization": f"Bearer {admin}"} if admin else {}
    status, _, body = await asyncio.to_thread(http, "GET", f"{base}/api/rooms/{room}", None, None, headers)
    if status != 200:
        return {"status": status}
    return [
        {k: p.get(k) for k in ("kind", "state", "srtp_profile", "packets_in", "packets_out", "handshake_ms")}
        for p in json.loads(body).get("participants", [])
    ]


async def run(args):
    base = args.base.rstrip("/")
    room = args.room
    result = {"aiortc": aiortc.__version__, "av": av.__version__, "room": room}

    # Receivers first, so the publisher is one "that arrives later". The joiner's microphone
    # stays muted while the publisher talks: the gateway relays every sender of a room into the
    # receiver's one audio m-line under SSRCs the answer does not announce, and aiortc (one
    # jitter buffer per m-line) cannot decode two interleaved streams.
    whep = Peer(base, f"/whep/{room}")
    whep.pc.addTransceiver("audio", direction="recvonly")
    whep_rx = Receiver("whep")
    unmute = asyncio.Event()
    joiner = Peer(base, f"/rooms/{room}/join")
    joiner.pc.addTransceiver(SineTrack(JOINER_HZ, unmuted=unmute), direction="sendrecv")
    join_rx = Receiver("join")
    publisher = Peer(base, f"/whip/{room}")
    publisher.pc.addTransceiver(SineTrack(TONE_HZ), direction="sendonly")

    tasks = []
    for peer, rx in ((whep, whep_rx), (joiner, join_rx)):

        def on_track(track, rx=rx):
            if track.kind == "audio":
                tasks.append(asyncio.ensure_future(rx.consume(track)))

        peer.pc.on("track", on_track)

    peers = {"whep": whep, "join": joiner, "whip": publisher}
    t0 = time.monotonic()
    whep_rx.listen(args.seconds)
    join_rx.listen(args.seconds)
    for p in peers.values():
        await p.signal()
    await asyncio.wait_for(asyncio.gather(*(p.connected.wait() for p in peers.values())), args.timeout)
    failed = {n: p.failed for n, p in peers.items() if p.failed}
    if failed:
        raise RuntimeError(f"connection failed: {failed}")
    result["connect_s"] = round(time.monotonic() - t0, 2)
    result["codecs"] = {n: p.answer_codecs() for n, p in peers.items()}

    # Phase 1: the WHIP publisher's 440 Hz reaches the WHEP subscriber and the joiner.
    try:
        await asyncio.wait_for(asyncio.gather(whep_rx.done.wait(), join_rx.done.wait()), args.timeout)
    except asyncio.TimeoutError:
        result["timeout_phase1"] = True
    result["phase1_s"] = round(time.monotonic() - t0, 2)
    result["participants"] = await room_snapshot(base, room)
    profiles = {p.get("srtp_profile") for p in result["participants"]} if isinstance(result["participants"], list) else set()
    result["srtp_profiles"] = sorted(x for x in profiles if x)
    result["whep"] = whep_rx.analyse(TONE_HZ)
    result["join"] = join_rx.analyse(TONE_HZ)

    # Phase 2: the publisher leaves; the joiner unmutes and its 660 Hz reaches the WHEP
    # subscriber (a publisher that arrives later, through a room join).
    delete = {"whip": await publisher.leave()}
    whep_rx.listen(args.seconds)
    unmute.set()
    try:
        await asyncio.wait_for(whep_rx.done.wait(), args.timeout)
    except asyncio.TimeoutError:
        result["timeout_phase2"] = True
    result["phase2_s"] = round(time.monotonic() - t0, 2)
    result["whep_from_joiner"] = whep_rx.analyse(JOINER_HZ)

    # Phase 3: two talkers at once (the participant's 660 Hz and a second publisher's 880 Hz),
    # one listener with two receive slots: each tone on its own track.
    listener = Peer(base, f"/rooms/{room}/join")
    listener.pc.addTransceiver("audio", direction="recvonly")
    listener.pc.addTransceiver("audio", direction="recvonly")
    slot_rx = []

    def on_listener_track(track):
        if track.kind == "audio":
            rx = Receiver(f"slot{len(slot_rx)}")
            rx.listen(args.seconds)
            slot_rx.append(rx)
            tasks.append(asyncio.ensure_future(rx.consume(track)))

    listener.pc.on("track", on_listener_track)
    second = Peer(base, f"/whip/{room}")
    second.pc.addTransceiver(SineTrack(SECOND_HZ), direction="sendonly")
    for p in (listener, second):
        await p.signal()
    await asyncio.wait_for(asyncio.gather(listener.connected.wait(), second.connected.wait()), args.timeout)
    try:
        await asyncio.wait_for(asyncio.gather(*(rx.done.wait() for rx in slot_rx)), args.timeout)
    except asyncio.TimeoutError:
        result["timeout_phase3"] = True
    result["phase3_s"] = round(time.monotonic() - t0, 2)
    heard = []
    for rx in slot_rx:
        found = {hz: rx.analyse(hz) for hz in (JOINER_HZ, SECOND_HZ)}
        tone = next((hz for hz, a in found.items() if a["detected"]), None)
        heard.append({"tone_hz": tone, "peak_hz": found[JOINER_HZ].get("peak_hz"), "frames": rx.frames})
    result["slots"] = heard

    for t in tasks:
        t.cancel()
    delete["whep"] = await whep.leave()
    delete["join"] = await joiner.leave()
    delete["listener"] = await listener.leave()
    delete["whip2"] = await second.leave()
    result["delete"] = delete
    participants = result["participants"] if isinstance(result["participants"], list) else []
    ok = (
        result["whep"]["detected"]
        and result["join"]["detected"]
        and result["whep_from_joiner"]["detected"]
        and sorted(h["tone_hz"] or 0 for h in heard) == [JOINER_HZ, SECOND_HZ]
        and len(participants) == 3
        and all(p["srtp_profile"] for p in participants)
        and all(s in (200, 204) for s in delete.values())
    )
    result["ok"] = bool(ok)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the gateway's HTTP URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--room", default="aiortc-tone")
    ap.add_argument("--seconds", type=float, default=1.5, help="audio each receiver analyses")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for each stage")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    try:
        result = asyncio.run(run(args))
    except Exception as e:
        result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(result), flush=True)
    sys.exit(0 if result.get("ok") else 1)


if __name__ == "__main__":
    main()
