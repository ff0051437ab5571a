#!/usr/bin/env python3
"""An aiortc participant in a room with two SIP-style phones, through a running `secrelay serve`.

The test that runs this script puts two telephony legs in the room first (`POST
/rooms/{room}/rtp`): an SDES-SRTP phone whose SRTP is libsrtp's and a plain RTP phone, each
sending its own G.711 tone. This script joins the room (`POST /rooms/{room}/join`) with one
sendrecv audio transceiver that sends a 660 Hz sine and one recvonly transceiver (two receive
slots: one track per phone), both limited to `--codec`: PCMU, which the phones take as it is,
or Opus, which the phones do not take, so the gateway transcodes both ways. It listens until each track holds `--seconds` of audio, finds
which of the `--expect` tones each track carries, keeps talking for `--talk` seconds more so the
phones can hear it, and leaves with DELETE.

Prints one JSON line and exits 0 only when every expected tone was heard, each on its own track.
Usage: aiortc_phones.py --base http://127.0.0.1:PORT --room NAME --expect 1000,1400 [--codec opus]
"""

import argparse
import asyncio
import json
import logging
import sys
import time

from aiortc.rtcrtpsender import RTCRtpSender

from aiortc_tone import JOINER_HZ, Peer, Receiver, SineTrack


def only(transceiver, codec):
    caps = RTCRtpSender.getCapabilities("audio")
    want = f"audio/{codec.lower()}"
    transceiver.setCodecPreferences([c for c in caps.codecs if c.mimeType.lower() == want])


async def run(args):
    base = args.base.rstrip("/")
    expect = [float(x) for x in args.expect.split(",") if x]
    result = {"room": args.room, "expect": expect, "sends_hz": JOINER_HZ}
    peer = Peer(base, f"/rooms/{args.room}/join")
    only(peer.pc.addTransceiver(SineTrack(JOINER_HZ), direction="sendrecv"), args.codec)
    only(peer.pc.addTransceiver("audio", direction="recvonly"), args.codec)
    slots = []
    tasks = []

    def on_track(track):
        if track.kind == "audio":
            rx = Receiver(f"slot{len(slots)}")
            rx.listen(args.seconds)
            slots.append(rx)
            tasks.append(asyncio.ensure_future(rx.consume(track)))

    peer.pc.on("track", on_track)
    t0 = time.monotonic()
    await peer.signal()
    result["codecs"] = peer.answer_codecs()
    await asyncio.wait_for(peer.connected.wait(), args.timeout)
    if peer.failed:
        raise RuntimeError(f"connection failed: {peer.failed}")
    result["connect_s"] = round(time.monotonic() - t0, 2)
    try:
        await asyncio.wait_for(asyncio.gather(*(rx.done.wait() for rx in slots)), args.timeout)
    except asyncio.TimeoutError:
        result["timeout"] = True
    heard = []
    for rx in slots:
        found = {hz: rx.analyse(hz) for hz in expect}
        tone = next((hz for hz, a in found.items() if a["detected"]), None)
        first = found[expect[0]] if expect else {}
        heard.append({"tone_hz": tone, "peak_hz": first.get("peak_hz"), "frames": rx.frames})
    result["slots"] = heard
    # The phones listen to us meanwhile: talk on a little longer.
    await asyncio.sleep(args.talk)
    for t in tasks:
        t.cancel()
    result["delete"] = await peer.leave()
    result["ok"] = bool(
        sorted(h["tone_hz"] or 0 for h in heard) == sorted(expect) and result["delete"] in (200, 204)
    )
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the gateway's HTTP URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--room", required=True)
    ap.add_argument("--expect", required=True, help="the phones' tones in Hz, comma-separated")
    ap.add_argument("--codec", default="PCMU", help="the one audio codec to offer: PCMU or opus")
    ap.add_argument("--seconds", type=float, default=1.5, help="audio each track analyses")
    ap.add_argument("--talk", type=float, default=3.0, help="seconds to go on talking after listening")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for each stage")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    try:
        result = asyncio.run(run(args))
    except Exception as e:
        print(json.dumps({"ok": False, "error": repr(e)}))
        sys.exit(1)
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
