#!/usr/bin/env python3
"""Simulcast with a real browser, through a running `secrelay serve`: a viewer behind a narrow
link gets the low layer, then a higher one when the link widens.

A headless Chromium publishes its fake camera (1280x720) with WHIP in three simulcast layers
(rids q, h, f: a quarter, half and full size, at most 150, 500 and 1,200 kbit/s). Once the
layers flow, a second Chromium plays the room with WHEP through a UDP relay of this script's
(its answer's candidate is the relay's) that limits what the gateway sends it to --limit
kbit/s, as a token bucket with a queue of --queue-ms (drop-tail), like `tc tbf`. After
--limited SECS the limit is lifted, and the viewer watches --after SECS more.

Every second the script records the size of the picture the viewer decodes (320, 640 or 1280
wide: the layer), its frames decoded, freezes and retransmissions, and the gateway's view of
it from `GET /api/rooms/{room}` (the layer sent, the estimate, probes). It prints one JSON line;
exit status 0 when the viewer connected, decoded throughout, was sent only the low layer at
the end of the limited phase, and a higher one after the limit was lifted.

Usage: chromium_simulcast.py --base http(s)://127.0.0.1:PORT [--ca ca.pem] [--limit 300]
       [--limited 12] [--after 25]
"""

import argparse
import json
import os
import socket
import ssl
import sys
import threading
import time
import urllib.request
from collections import deque
from urllib.parse import urlencode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chromium_av as av  # noqa: E402

PUBLISH_HTML = """<!doctype html><html><head><title>publish</title></head><body>
<script>""" + av.COMMON_JS + r"""
(async () => {
  try {
    const stream = await navigator.mediaDevices.getUserMedia({audio: true, video: {width: 1280, height: 720, frameRate: 30}});
    const pc = new RTCPeerConnection();
    pc.addTransceiver(stream.getAudioTracks()[0], {direction: 'sendonly', streams: [stream]});
    pc.addTransceiver(stream.getVideoTracks()[0], {direction: 'sendonly', streams: [stream], sendEncodings: [
      {rid: 'q', scaleResolutionDownBy: 4, maxBitrate: 150000},
      {rid: 'h', scaleResolutionDownBy: 2, maxBitrate: 500000},
      {rid: 'f', maxBitrate: 1200000}]});
    const loc = await signal(pc, '/whip/' + room);
    await connected(pc);
    await report({state: 'connected'});
    for (;;) {
      const stats = await pc.getStats();
      const layers = {};
      for (const s of stats.values())
        if (s.type === 'outbound-rtp' && s.kind === 'video')
          layers[s.rid || '-'] = {frameWidth: s.frameWidth || 0, bytesSent: s.bytesSent, active: s.active,
                                 qualityLimitationReason: s.qualityLimitationReason};
      await report({progress: {layers}});
      const r = await fetch('/control?page=' + PAGE);
      if ((await r.text()) === 'leave') break;
      await sleep(1000);
    }
    const status = await leave(pc, loc);
    await report({state: 'left', deleteStatus: status});
  } catch (e) {
    await report({error: String(e && e.message || e)});
  }
})();
</script></body></html>"""

PLAY_HTML = """<!doctype html><html><head><title>play</title></head><body>
<video id="v" autoplay playsinline muted></video>
<script>""" + av.COMMON_JS + r"""
(async () => {
  try {
    const v = document.getElementById('v');
    const pc = new RTCPeerConnection();
    pc.addTransceiver('video', {direction: 'recvonly'});
    pc.addTransceiver('audio', {direction: 'recvonly'});
    pc.ontrack = e => {
      if (e.track.kind !== 'video') return;
      v.srcObject = new MediaStream([e.track]);
      v.play().catch(err => report({note: 'play(): ' + err}));
    };
    const loc = await signal(pc, '/whep/' + room);
    await connected(pc);
    await report({state: 'connected'});
    for (;;) {
      const stats = await pc.getStats();
      let video = {};
      for (const s of stats.values())
        if (s.type === 'inbound-rtp' && s.kind === 'video')
          video = {framesDecoded: s.framesDecoded || 0, frameWidth: s.frameWidth || 0, frameHeight: s.frameHeight || 0,
                   freezeCount: s.freezeCount || 0, totalFreezesDuration: s.totalFreezesDuration || 0,
                   packetsReceived: s.packetsReceived || 0, packetsLost: s.packetsLost || 0, nackCount: s.nackCount || 0,
                   pliCount: s.pliCount || 0, retransmittedPacketsReceived: s.retransmittedPacketsReceived || 0,
                   bytesReceived: s.bytesReceived || 0};
      await report({sample: video});
      const r = await fetch('/control?page=' + PAGE);
      if ((await r.text()) === 'leave') break;
      await sleep(1000);
    }
    const status = await leave(pc, loc);
    await report({state: 'left', deleteStatus: status});
  } catch (e) {
    await report({error: String(e && e.message || e)});
  }
})();
</script></body></html>"""


class LimitedRelay:
    """A UDP relay between one browser and the gateway that passes what the gateway sends at
    most at `rate_bps` (a token bucket refilled continuously, a FIFO of at most `queue_ms` of
    it, drop-tail), STUN and DTLS excepted; what the browser sends passes as it comes.
    `rate_bps = None` lifts the limit."""

    def __init__(self, gateway, rate_bps, queue_ms):
        self.gateway = gateway
        self.rate_bps = rate_bps
        self.queue_ms = queue_ms
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.002)
        self.port = self.sock.getsockname()[1]
        self.browser = None
        self.queue = deque()
        self.queued_bytes = 0
        self.forwarded = 0
        self.dropped = 0
        self.stop = threading.Event()
        threading.Thread(target=self.run, daemon=True).start()

    def lift(self):
        self.rate_bps = None

    def run(self):
        next_free = time.monotonic()
        while not self.stop.is_set():
            try:
                data, src = self.sock.recvfrom(65536)
            except socket.timeout:
                data, src = None, None
            except OSError:
                return
            if data is not None:
                if src != self.gateway:
                    self.browser = src
                    self.sock.sendto(data, self.gateway)
                elif self.browser is not None:
                    media = len(data) > 1 and 128 <= data[0] <= 191
                    if not media or self.rate_bps is None:
                        self.sock.sendto(data, self.browser)
                        self.forwarded += 1
                    elif self.queued_bytes * 8 * 1000 / self.rate_bps > self.queue_ms:
                        self.dropped += 1
                    else:
                        self.queue.append(data)
                        self.queued_bytes += len(data)
            # Release what the bucket allows by now.
            now = time.monotonic()
            while self.queue and self.browser is not None:
                if self.rate_bps is None:
                    next_free = now
                elif next_free > now:
                    break
                pkt = self.queue.popleft()
                self.queued_bytes -= len(pkt)
                self.sock.sendto(pkt, self.browser)
                self.forwarded += 1
                if self.rate_bps is not None:
                    next_free = max(next_free, now - 0.05) + len(pkt) * 8 / self.rate_bps
            if not self.queue:
                next_free = max(next_free, now - 0.05)


def answer_through(relays, limit_bps, queue_ms, answer):
    """The gateway's answer with a limited relay's candidate in place of the gateway's."""
    def make(gateway):
        relay = LimitedRelay(gateway, limit_bps, queue_ms)
        relays.append(relay)
        return relay
    return av.through_relay(answer, make)


def api_viewer(base, room, ca):
    """The gateway's view of the room's WHEP viewer: the layer it is sent, its estimate."""
    ctx = ssl.create_default_context(cafile=ca) if ca else None
    try:
        admin = os.environ.get("SECRELAY_ADMIN_KEY")  # the operator's view: the gateway's admin key
        req = urllib.request.Request(f"{base.rstrip('/')}/api/rooms/{room}",
                                     headers={"Authorization": f"Bearer {admin}"} if admin else {})
        with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
            snap = json.loads(r.read())
    except OSError as e:
        return {"error": str(e)}
    for p in snap.get("participants", []):
        if p.get("kind") != "whep":
            continue
        layers = p.get("layers_received") or [{}]
        bw = p.get("bandwidth") or {}
        return {"current": layers[0].get("current"), "target": layers[0].get("target"),
                "switches": layers[0].get("switches"), "estimate_bps": bw.get("estimate_bps"),
                "received_bps": bw.get("received_bps"), "usage": bw.get("usage"),
                "probes": bw.get("probes"), "probes_delivered": bw.get("probes_delivered")}
    return {}


def latest(pages, page, key):
    with pages.lock:
        for _, r in reversed(pages.reports):
            if r.get("page") == page and key in r:
                return r[key]
    return None


def run(args, result, work):
    pages = av.Pages()
    relays = []
    httpd = av.serve_pages(pages, html={"/publish.html": PUBLISH_HTML, "/play.html": PLAY_HTML},
                           relay=lambda answer: answer_through(relays, args.limit * 1000, args.queue_ms, answer))
    origin = f"http://127.0.0.1:{httpd.server_address[1]}"
    home = av.trust_ca(work, args.ca) if args.ca else None
    q = urlencode({"gw": args.base.rstrip("/"), "room": args.room})
    procs = []
    try:
        t0 = time.monotonic()
        log = open(os.path.join(work, "publish.log"), "wb")
        procs.append(av.launch(args.chromium, f"{origin}/publish.html?{q}", os.path.join(work, "p1"), log, home))
        if pages.wait(lambda r: r.get("page") == "publish" and r.get("state") == "connected", args.timeout) is None:
            raise RuntimeError(f"publish: not connected after {args.timeout} s")
        # The three layers flowing (each at its own size) before the viewer comes.
        deadline = time.monotonic() + args.timeout
        while True:
            layers = (latest(pages, "publish", "progress") or {}).get("layers", {})
            if len([l for l in layers.values() if l.get("frameWidth", 0) > 0]) >= 3:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"publish: not three layers after {args.timeout} s: {layers}")
            time.sleep(0.5)
        result["publisher_layers"] = layers
        # The low layer's picture width (320 from a 1280-wide camera).
        low = min(l["frameWidth"] for l in layers.values() if l.get("frameWidth"))
        result["low_width"] = low
        log = open(os.path.join(work, "play.log"), "wb")
        procs.append(av.launch(args.chromium, f"{origin}/play.html?{q}&relay=1", os.path.join(work, "p2"), log, home))
        if pages.wait(lambda r: r.get("page") == "play" and r.get("state") == "connected", args.timeout) is None:
            raise RuntimeError(f"play: not connected after {args.timeout} s")
        start = time.monotonic()
        timeline = []
        lifted_at = None
        while time.monotonic() - start < args.limited + args.after:
            time.sleep(1.0)
            t = round(time.monotonic() - start, 1)
            if lifted_at is None and t >= args.limited:
                for r in relays:
                    r.lift()
                lifted_at = t
            s = latest(pages, "play", "sample") or {}
            timeline.append({"t": t, "limited": lifted_at is None, "width": s.get("frameWidth", 0),
                             "frames": s.get("framesDecoded", 0), "freezes": s.get("freezeCount", 0),
                             "rtx": s.get("retransmittedPacketsReceived", 0), "lost": s.get("packetsLost", 0),
                             "gateway": api_viewer(args.base, args.room, args.ca)})
            # Done early once a higher layer has been decoded for 3 s after the lift.
            after = [x for x in timeline if not x["limited"]]
            if len(after) >= 3 and all(x["width"] > low for x in after[-3:]):
                break
        result["timeline"] = timeline
        result["lifted_at_s"] = lifted_at
        result["relay"] = {"forwarded": sum(r.forwarded for r in relays), "dropped": sum(r.dropped for r in relays)}
        result["publisher_layers_end"] = (latest(pages, "publish", "progress") or {}).get("layers")
        for page in ("play", "publish"):
            with pages.lock:
                pages.control[page] = "leave"
            r = pages.wait(lambda r, p=page: r.get("page") == p and r.get("state") == "left", args.timeout)
            result[f"{page}_delete"] = r and r.get("deleteStatus")
        result["total_s"] = round(time.monotonic() - t0, 1)
    finally:
        for p in procs:
            av.stop(p)
        for r in relays:
            r.stop.set()
        httpd.shutdown()
    judge(result, args)


def judge(result, args):
    """The verdict: low layer at the end of the limited phase, a higher one after the lift,
    frames decoded in every 3-second stretch."""
    tl = result["timeline"]
    low = result.get("low_width", 0)
    limited = [x for x in tl if x["limited"]]
    after = [x for x in tl if not x["limited"]]
    checks = {
        "low_layer_while_limited": bool(limited) and all(0 < x["width"] <= low for x in limited[-4:]),
        "higher_layer_after_lift": any(x["width"] > low for x in after),
        "decoding_throughout": len(tl) >= 4 and all(tl[k + 3]["frames"] > tl[k]["frames"] for k in range(len(tl) - 3)),
        "left": result.get("play_delete") in (200, 204) and result.get("publish_delete") in (200, 204),
    }
    up = next((x["t"] for x in after if x["width"] > low), None)
    result["higher_layer_s_after_lift"] = None if up is None else round(up - result["lifted_at_s"], 1)
    result["checks"] = checks
    result["ok"] = all(checks.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--ca")
    ap.add_argument("--chromium", default=os.environ.get("SECRELAY_CHROMIUM", "/usr/bin/chromium"))
    ap.add_argument("--room", default="chromium-simulcast")
    ap.add_argument("--limit", type=float, default=300.0, help="kbit/s the viewer's link carries at first")
    ap.add_argument("--queue-ms", type=float, default=200.0, help="the link's queue, in ms of its rate")
    ap.add_argument("--limited", type=float, default=12.0, help="seconds before the limit is lifted")
    ap.add_argument("--after", type=float, default=25.0, help="seconds watched after the lift, at most")
    ap.add_argument("--timeout", type=float, default=20.0)
    args = ap.parse_args()
    result = {"chromium": av.version(args.chromium), "room": args.room, "limit_kbps": args.limit}
    av.run_driver(run, args, result, "secrelay-simulcast-")


if __name__ == "__main__":
    main()
