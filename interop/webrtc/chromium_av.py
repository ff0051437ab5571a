#!/usr/bin/env python3
"""Interop with Chromium, through a running `secrelay serve`.

Two headless Chromium processes with fake media devices load two pages from a small HTTP
server on loopback (another origin than the gateway's, so CORS is exercised as for any web
page): `play.html` subscribes with WHEP (plain fetch + RTCPeerConnection) and plays what
arrives in a <video> element; then `publish.html` takes the fake camera and microphone and
publishes them with WHIP. The subscriber joins first (so the publisher is one that arrives
later, and Chromium's first frame is a keyframe for it). The test passes when the subscriber's
video element has decoded frames and knows the picture size, and its audio inbound-rtp stream
has received packets and samples. Then each page leaves with DELETE on its Location.

With --viewer-base URL (once per further gateway, up to four) one more subscriber plays from each
of those gateways (pages far1, far2, …): nodes of a cluster that serve the room's viewers while
the publisher is at --base's.

With --late SECS the publisher comes first and the subscriber SECS seconds later (it must ask
for a keyframe: the page reports the time from connecting to its first decoded frame). With
--lossy-viewer PCT a second late subscriber plays through a UDP relay of this script's that
drops PCT % of the media the gateway sends it at random (its answer's candidate is the
relay's), and both subscribers watch for --watch SECS more: frames decoded, freezes, NACKs
sent and packets lost from getStats at the start and the end of that window.

The pages report to the local server (POST /report); this script waits for those reports and
prints one JSON line with what they measured. Exit status 0 only when everything passed.

Over HTTPS (`--base https://…`), `--ca` names the private CA's certificate: it becomes the one
added trust anchor of the browsers' NSS database (certutil, in a HOME of their own, trust
flags "C,,"), so Chromium verifies the gateway's certificate against it like any other; no
certificate error is ignored. With `--page-cert`/`--page-key` (a certificate from the same CA
for 127.0.0.1) the pages are served over HTTPS too.
Usage: chromium_av.py --base http(s)://127.0.0.1:PORT [--ca ca.pem [--page-cert C --page-key K]]
       [--chromium /usr/bin/chromium] [--room R] [--late SECS [--lossy-viewer PCT] [--watch SECS]]
       [--viewer-base URL ...]
"""

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlencode

COMMON_JS = r"""
const params = new URLSearchParams(location.search);
const gw = params.get('gw');
const room = params.get('room');
const PAGE = document.title;
function report(o) {
  return fetch('/report', {method: 'POST', body: JSON.stringify(Object.assign({page: PAGE}, o))});
}
window.addEventListener('error', e => report({error: 'uncaught: ' + e.message}));
window.addEventListener('unhandledrejection', e => report({error: 'unhandled: ' + (e.reason && e.reason.message || e.reason)}));
const sleep = ms => new Promise(r => setTimeout(r, ms));
// The gateway is ICE-lite and learns our address from our checks: send the offer with the
// candidates gathered so far (all host candidates come at once), at most half a second later.
function gathered(pc) {
  return new Promise(resolve => {
    if (pc.iceGatheringState === 'complete') return resolve();
    pc.addEventListener('icegatheringstatechange', () => { if (pc.iceGatheringState === 'complete') resolve(); });
    setTimeout(resolve, 500);
  });
}
async function signal(pc, path) {
  await pc.setLocalDescription(await pc.createOffer());
  await gathered(pc);
  const r = await fetch(gw + path, {method: 'POST', headers: {'Content-Type': 'application/sdp'}, body: pc.localDescription.sdp});
  let body = await r.text();
  if (r.status === 201 && params.get('relay')) {
    // Reach the gateway through the test's lossy relay: its candidate in place of the gateway's.
    const rr = await fetch('/relay', {method: 'POST', body});
    body = await rr.text();
    if (rr.status !== 200) throw new Error('relay: ' + rr.status + ' ' + body);
  }
  if (r.status !== 201) throw new Error('POST ' + path + ': ' + r.status + ' ' + body);
  const loc = r.headers.get('Location');
  if (!loc) throw new Error('POST ' + path + ': no Location exposed');
  if (params.get('debug')) await report({offer: pc.localDescription.sdp, answer: body});
  await pc.setRemoteDescription({type: 'answer', sdp: body});
  return new URL(loc, gw).href;
}
function connected(pc) {
  return new Promise((resolve, reject) => {
    const check = () => {
      if (pc.connectionState === 'connected') resolve();
      if (pc.connectionState === 'failed') reject(new Error('connection failed'));
    };
    pc.addEventListener('connectionstatechange', check);
    check();
  });
}
async function waitFor(what) {
  for (;;) {
    const r = await fetch('/control?page=' + PAGE);
    if ((await r.text()) === what) return;
    await sleep(200);
  }
}
async function leave(pc, loc) {
  const r = await fetch(loc, {method: 'DELETE'});
  pc.close();
  return r.status;
}
function codecOf(stats, rtp) {
  const c = rtp && rtp.codecId && stats.get(rtp.codecId);
  return c ? c.mimeType : null;
}
function dtlsOf(stats) {
  for (const s of stats.values()) {
    if (s.type !== 'transport') continue;
    const pair = s.selectedCandidatePairId && stats.get(s.selectedCandidatePairId);
    const local = pair && stats.get(pair.localCandidateId);
    const remote = pair && stats.get(pair.remoteCandidateId);
    return {dtlsState: s.dtlsState, srtpCipher: s.srtpCipher, dtlsCipher: s.dtlsCipher, tlsVersion: s.tlsVersion,
            selectedPair: local && remote ? local.address + ':' + local.port + ' -> ' + remote.address + ':' + remote.port : null};
  }
  return null;
}
"""

PUBLISH_HTML = """<!doctype html><html><head><title>publish</title></head><body>
<script>""" + COMMON_JS + r"""
(async () => {
  try {
    const stream = await navigator.mediaDevices.getUserMedia({audio: true, video: {width: 640, height: 480, frameRate: 30}});
    const pc = new RTCPeerConnection();
    for (const t of stream.getTracks()) pc.addTransceiver(t, {direction: 'sendonly', streams: [stream]});
    const loc = await signal(pc, '/whip/' + room);
    await connected(pc);
    await report({state: 'connected'});
    await waitFor('leave');
    const stats = await pc.getStats();
    const out = {};
    let availableOutgoingBitrate = null;
    for (const s of stats.values()) {
      if (s.type === 'outbound-rtp') out[s.kind] = {packetsSent: s.packetsSent, codec: codecOf(stats, s), framesEncoded: s.framesEncoded, keyFramesEncoded: s.keyFramesEncoded, frameWidth: s.frameWidth, targetBitrate: s.targetBitrate, bytesSent: s.bytesSent};
      // The sender's bandwidth estimate (from the gateway's transport-cc feedback).
      if (s.type === 'candidate-pair' && s.nominated && s.availableOutgoingBitrate) availableOutgoingBitrate = s.availableOutgoingBitrate;
    }
    out.availableOutgoingBitrate = availableOutgoingBitrate;
    const status = await leave(pc, loc);
    await report({state: 'left', deleteStatus: status, outbound: out, transport: dtlsOf(stats)});
  } catch (e) {
    await report({error: String(e && e.message || e)});
  }
})();
</script></body></html>"""

PLAY_HTML = """<!doctype html><html><head><title>play</title></head><body>
<video id="v" autoplay playsinline muted></video><audio id="a" autoplay></audio>
<script>""" + COMMON_JS + r"""
(async () => {
  try {
    const v = document.getElementById('v');
    const pc = new RTCPeerConnection();
    pc.addTransceiver('video', {direction: 'recvonly'});
    pc.addTransceiver('audio', {direction: 'recvonly'});
    // The picture in a <video>, the sound in an <audio>, as a player page does.
    const a = document.getElementById('a');
    const tracks = [];
    pc.ontrack = e => {
      tracks.push(e.track);
      const el = e.track.kind === 'video' ? v : a;
      el.srcObject = new MediaStream([e.track]);
      el.play().catch(err => report({note: e.track.kind + ' play(): ' + err}));
    };
    let callbacks = 0;
    let connectedAt = null, firstFrameAt = null;
    const onFrame = () => {
      callbacks++;
      if (firstFrameAt === null) firstFrameAt = performance.now();
      v.requestVideoFrameCallback(onFrame);
    };
    v.requestVideoFrameCallback(onFrame);
    const loc = await signal(pc, '/whep/' + room);
    await connected(pc);
    connectedAt = performance.now();
    await report({state: 'connected'});
    let last = {};
    for (;;) {
      const q = v.getVideoPlaybackQuality();
      const stats = await pc.getStats();
      const inb = {};
      for (const s of stats.values()) {
        if (s.type === 'inbound-rtp') inb[s.kind] = {framesReceived: s.framesReceived, framesDropped: s.framesDropped, freezeCount: s.freezeCount, jitterBufferDelay: s.jitterBufferDelay, jitterBufferEmittedCount: s.jitterBufferEmittedCount, estimatedPlayoutTimestamp: s.estimatedPlayoutTimestamp, packetsReceived: s.packetsReceived, packetsLost: s.packetsLost, codec: codecOf(stats, s), framesDecoded: s.framesDecoded, keyFramesDecoded: s.keyFramesDecoded, totalSamplesReceived: s.totalSamplesReceived, audioLevel: s.audioLevel, frameWidth: s.frameWidth, frameHeight: s.frameHeight};
      }
      last = {totalVideoFrames: q.totalVideoFrames, droppedVideoFrames: q.droppedVideoFrames, frameCallbacks: callbacks,
              firstFrameAfterConnectMs: firstFrameAt === null ? null : Math.round(firstFrameAt - connectedAt),
              videoWidth: v.videoWidth, videoHeight: v.videoHeight, readyState: v.readyState, paused: v.paused,
              tracks: tracks.map(t => t.kind + ':' + t.readyState + (t.muted ? ':muted' : '')),
              inbound: inb, transport: dtlsOf(stats)};
      const a = inb.audio || {};
      // Frames shown (Firefox's playback quality counts none for a MediaStream: its decoded
      // frames say it).
      const shown = q.totalVideoFrames > 0 || (inb.video && inb.video.framesDecoded > 0);
      if (shown && callbacks > 0 && v.videoWidth > 0 && a.packetsReceived > 0 && a.totalSamplesReceived > 0) break;
      await report({progress: last});
      await sleep(250);
    }
    await report({state: 'playing', playing: last});
    const watch = Number(params.get('watch') || 0);
    if (watch > 0) {
      const video = async () => {
        const stats = await pc.getStats();
        for (const s of stats.values())
          if (s.type === 'inbound-rtp' && s.kind === 'video')
            return {framesDecoded: s.framesDecoded, keyFramesDecoded: s.keyFramesDecoded, freezeCount: s.freezeCount || 0,
                    totalFreezesDuration: s.totalFreezesDuration || 0, nackCount: s.nackCount || 0, pliCount: s.pliCount || 0,
                    packetsReceived: s.packetsReceived, packetsLost: s.packetsLost, retransmittedPacketsReceived: s.retransmittedPacketsReceived || 0};
        return {};
      };
      const start = await video();
      const samples = [];
      for (let t = 0; t < watch; t++) { await sleep(1000); samples.push((await video()).framesDecoded); }
      await report({state: 'watched', watched: {start, end: await video(), framesDecodedPerSecond: samples}});
    }
    await waitFor('leave');
    const status = await leave(pc, loc);
    await report({state: 'left', deleteStatus: status});
  } catch (e) {
    await report({error: String(e && e.message || e)});
  }
})();
</script></body></html>"""


# The players of --viewer-base's gateways.
FAR_PAGES = ["far1", "far2", "far3", "far4"]


class Pages:
    """The page server's shared state: reports from the pages and what each page should do."""

    def __init__(self, loss=0.0):
        self.lock = threading.Condition()
        self.reports = []  # (seconds since start, report)
        self.control = {}
        self.t0 = time.monotonic()
        self.loss = loss
        self.relays = []

    def relay_answer(self, answer):
        return relay_answer(self, self.loss, answer)

    def add(self, report):
        if "offer" in report:
            print(f"--- {report.get('page')} offer\n{report['offer']}\n--- answer\n{report['answer']}", file=sys.stderr)
        with self.lock:
            self.reports.append((round(time.monotonic() - self.t0, 2), report))
            self.lock.notify_all()

    def wait(self, pred, timeout):
        """The first report that satisfies pred, or None after timeout seconds."""
        end = time.monotonic() + timeout
        with self.lock:
            while True:
                for _, r in self.reports:
                    if r.get("error"):
                        raise RuntimeError(f"page {r.get('page')}: {r['error']}")
                    if pred(r):
                        return r
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self.lock.wait(left)

    def last_progress(self, page):
        with self.lock:
            for _, r in reversed(self.reports):
                if r.get("page") == page and "progress" in r:
                    return r["progress"]
        return None


def trust_ca(work, ca):
    """A HOME whose NSS database (Chromium's on Linux) trusts `ca` to issue server certificates."""
    home = os.path.join(work, "home")
    db = os.path.join(home, ".pki", "nssdb")
    os.makedirs(db)
    subprocess.run(["certutil", "-N", "-d", f"sql:{db}", "--empty-password"], check=True, capture_output=True)
    subprocess.run(
        ["certutil", "-A", "-d", f"sql:{db}", "-n", "secrelay private CA", "-t", "C,,", "-i", ca],
        check=True,
        capture_output=True,
    )
    listed = subprocess.run(["certutil", "-L", "-d", f"sql:{db}"], check=True, capture_output=True, text=True).stdout
    if "secrelay private CA" not in listed:
        raise RuntimeError(f"the CA is not in the NSS database:\n{listed}")
    return home


def serve_pages(pages, tls=None, html=None, relay=None, port=0):
    """The pages' HTTP server on loopback: `html` maps paths to pages (by default this script's
    publisher and players), `relay(answer)` makes the answer a page's `/relay` gets (by default
    the lossy relay's)."""
    if html is None:
        # The lossy player is the same page under another title, so its reports can be told apart.
        html = {"/publish.html": PUBLISH_HTML, "/play.html": PLAY_HTML,
                "/lossy.html": PLAY_HTML.replace("<title>play</title>", "<title>lossy</title>")}
        for far in FAR_PAGES:
            html[f"/{far}.html"] = PLAY_HTML.replace("<title>play</title>", f"<title>{far}</title>")
    if relay is None:
        relay = pages.relay_answer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def send(self, code, body, ctype="text/plain"):
            data = body.encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the page went away (its browser was stopped)

        def do_GET(self):
            path, _, query = self.path.partition("?")
            if path in html:
                self.send(200, html[path], "text/html")
            elif path == "/control":
                page = query.partition("page=")[2]
                with pages.lock:
                    self.send(200, pages.control.get(page, "wait"))
            else:
                self.send(404, "no such page")

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n)
            if self.path == "/relay":
                try:
                    self.send(200, relay(body.decode()))
                except Exception as e:
                    self.send(502, f"{type(e).__name__}: {e}")
                return
            try:
                pages.add(json.loads(body))
            except ValueError:
                pass
            self.send(204, "")

    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    httpd.daemon_threads = True
    if tls:
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tls[0], tls[1])
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


class LossyRelay:
    """A UDP relay between one browser and the gateway that drops a share of the media (RTP
    and RTCP) the gateway sends the browser, at random; STUN and DTLS pass, so the call sets up
    as it would on a lossy path that happens to spare its handshake."""

    def __init__(self, gateway, loss):
        self.gateway = gateway
        self.loss = loss
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.browser = None
        self.forwarded = 0
        self.dropped = 0
        self.stop = threading.Event()
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        rng = random.Random(7)
        while not self.stop.is_set():
            try:
                data, src = self.sock.recvfrom(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if src == self.gateway:
                if self.browser is None:
                    continue
                media = len(data) > 1 and 128 <= data[0] <= 191
                if media and rng.random() < self.loss:
                    self.dropped += 1
                    continue
                self.forwarded += 1
                self.sock.sendto(data, self.browser)
            else:
                self.browser = src
                self.sock.sendto(data, self.gateway)


def relay_answer(pages, loss, answer):
    """The gateway's answer with a lossy relay's candidate in place of the gateway's."""
    def make(gateway):
        relay = LossyRelay(gateway, loss)
        pages.relays.append(relay)
        return relay
    return through_relay(answer, make)


def through_relay(answer, make):
    """`answer` with the candidate of the relay `make(gateway address)` returns (it has a
    `port` on 127.0.0.1) in place of the gateway's first host candidate; the others dropped."""
    lines = answer.split("\r\n")
    cand = next(l for l in lines if l.startswith("a=candidate:"))
    f = cand.split()
    relay = make((f[4], int(f[5])))
    out, done = [], False
    for l in lines:
        if l.startswith("a=candidate:"):
            if done:
                continue
            g = l.split()
            g[4], g[5] = "127.0.0.1", str(relay.port)
            l = " ".join(g)
            done = True
        out.append(l)
    return "\r\n".join(out)


# Firefox (ESR) as a headless WebRTC peer: its own profile with fake camera and microphone,
# no permission prompt, autoplay, host candidates under their real addresses. Firefox gathers
# no loopback candidates: the gateway must listen on and announce the host's own address.
FIREFOX_PREFS = {
    "media.navigator.streams.fake": True,
    "media.navigator.permission.disabled": True,
    "media.autoplay.default": 0,
    "media.autoplay.blocking_policy": 0,
    "media.peerconnection.ice.loopback": True,
    "media.peerconnection.ice.obfuscate_host_addresses": False,
    "media.peerconnection.ice.default_address_only": False,
    "browser.shell.checkDefaultBrowser": False,
    "datareporting.policy.dataSubmissionEnabled": False,
    "toolkit.telemetry.reportingpolicy.firstRun": False,
    "app.update.disabledForTesting": True,
    "network.captive-portal-service.enabled": False,
    "network.connectivity-service.enabled": False,
}


def launch_firefox(firefox, url, profile, log, home=None):
    os.makedirs(profile, exist_ok=True)
    with open(os.path.join(profile, "user.js"), "w") as f:
        for k, v in FIREFOX_PREFS.items():
            f.write(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n")
    env = dict(os.environ, MOZ_HEADLESS="1")
    if home:
        env["HOME"] = home
    args = [firefox, "--headless", "--no-remote", "--profile", profile, url]
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=env)


def launch(chromium, url, profile, log, home=None):
    """A headless browser on `url`: Firefox when the binary is one (its name says so), else
    Chromium."""
    if "firefox" in os.path.basename(chromium):
        return launch_firefox(chromium, url, profile, log, home)
    args = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--metrics-recording-only",
        "--mute-audio",
        "--use-fake-device-for-media-stream",
        "--use-fake-ui-for-media-stream",
        "--autoplay-policy=no-user-gesture-required",
        # Host candidates on loopback, where the gateway announces itself, and no mDNS names.
        "--allow-loopback-in-peer-connection",
        "--disable-features=WebRtcHideLocalIpsWithMdns",
        f"--user-data-dir={profile}",
        url,
    ]
    env = dict(os.environ)
    if home:
        env["HOME"] = home
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=env)


def stop(proc):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, 15)
            proc.wait(5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
            proc.wait()


def version(chromium):
    try:
        out = subprocess.run([chromium, "--version"], capture_output=True, text=True, timeout=20).stdout
        return out.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None


def run(args, result, work):
    pages = Pages(args.lossy_viewer / 100.0)
    page_tls = (args.page_cert, args.page_key) if args.page_cert else None
    httpd = serve_pages(pages, page_tls, port=args.page_port)
    origin = f"{'https' if page_tls else 'http'}://127.0.0.1:{httpd.server_address[1]}"
    home = trust_ca(work, args.ca) if args.ca else None
    result["trust"] = "the private CA in the NSS database" if home else "none (plain HTTP)"
    result["page_origin"] = origin.split(":")[0]
    def query(base):
        return urlencode({"gw": base.rstrip("/"), "room": args.room, "debug": "1" if args.debug else "",
                          "watch": args.watch})

    queries = {page: query(base) for page, base in zip(FAR_PAGES, args.viewer_base)}
    procs = []
    players = ["play"] + (["lossy"] if args.lossy_viewer > 0 else []) + list(queries)
    try:
        t0 = time.monotonic()
        # By default the subscriber comes first (its first frame is the publisher's first
        # keyframe); late subscribers must ask the publisher for one through the gateway.
        late = args.late is not None or args.publisher_first
        order = ["publish"] + players if late else players + ["publish"]
        for page in order:
            if page != "publish" and late and args.late:
                time.sleep(args.late if page == players[0] else 0)
            profile = os.path.join(work, f"profile-{page}")
            log = open(os.path.join(work, f"{page}.log"), "wb")
            q = queries.get(page) or query(args.base)
            url = f"{origin}/{page}.html?{q}" + ("&relay=1" if page == "lossy" else "")
            procs.append(launch(args.chromium, url, profile, log, home))
            r = pages.wait(lambda r, p=page: r.get("page") == p and r.get("state") == "connected", args.timeout)
            if r is None:
                raise RuntimeError(f"{page}: not connected after {args.timeout} s")
            result[f"{page}_connected_s"] = round(time.monotonic() - t0, 2)
            result[f"{page}_connected"] = r

        for page in players:
            r = pages.wait(lambda r, p=page: r.get("page") == p and r.get("state") == "playing", args.timeout)
            if r is None:
                result[f"{page}_progress"] = pages.last_progress(page)
                raise RuntimeError(f"{page}: no decoded video and audio after {args.timeout} s")
            result[f"{page}_playing_s"] = round(time.monotonic() - t0, 2)
            result[page] = r["playing"]
        result["playing_s"] = result["play_playing_s"]
        if args.watch > 0:
            for page in players:
                r = pages.wait(lambda r, p=page: r.get("page") == p and r.get("state") == "watched",
                               args.watch + args.timeout)
                if r is None:
                    raise RuntimeError(f"{page}: no stats after watching {args.watch} s")
                result[f"{page}_watched"] = r["watched"]
        if pages.relays:
            result["relay"] = {"forwarded": sum(r.forwarded for r in pages.relays),
                               "dropped": sum(r.dropped for r in pages.relays)}

        result["api_room"] = api_room(args.base, args.room, args.ca)

        for page in ["publish"] + players:
            with pages.lock:
                pages.control[page] = "leave"
            r = pages.wait(lambda r, p=page: r.get("page") == p and r.get("state") == "left", args.timeout)
            if r is None:
                raise RuntimeError(f"{page}: did not leave")
            result[f"{page}_delete"] = r["deleteStatus"]
            if page == "publish":
                result["publish"] = {"outbound": r.get("outbound"), "transport": r.get("transport")}
        result["total_s"] = round(time.monotonic() - t0, 2)
    finally:
        for p in procs:
            stop(p)
        for r in pages.relays:
            r.stop.set()
        httpd.shutdown()
    ok = True
    for page in players:
        play = result[page]
        audio = play["inbound"].get("audio", {})
        shown = play["totalVideoFrames"] > 0 or play["inbound"].get("video", {}).get("framesDecoded", 0) > 0
        ok = ok and bool(
            shown
            and play["videoWidth"] > 0
            and audio.get("packetsReceived", 0) > 0
            and result[f"{page}_delete"] in (200, 204)
        )
    result["ok"] = bool(ok and result["publish_delete"] in (200, 204))


def api_room(base, room, ca=None):
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cafile=ca) if ca else None
    try:
        admin = os.environ.get("SECRELAY_ADMIN_KEY")  # the operator's view: the gateway's admin key
        req = urllib.request.Request(f"{base.rstrip('/')}/api/rooms/{room}",
                                     headers={"Authorization": f"Bearer {admin}"} if admin else {})
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            snap = json.loads(r.read())
    except OSError as e:
        return {"error": str(e)}
    return [
        {k: p.get(k) for k in ("kind", "state", "srtp_profile", "packets_in", "packets_out", "handshake_ms")}
        for p in snap.get("participants", [])
    ]


def run_driver(run, args, result, prefix, keep=None):
    """Runs `run(args, result, work)` in a temporary folder `work` (removed after, `keep(work)`
    first); prints `result` as one JSON line, with the error if `run` raised, and exits 0 only
    when it says ok."""
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        run(args, result, work)
    except Exception as e:
        result["ok"] = False
        result["error"] = f"{type(e).__name__}: {e}"
    finally:
        if keep:
            keep(work)
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result), flush=True)
    sys.exit(0 if result.get("ok") else 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the gateway's URL, e.g. https://127.0.0.1:8443")
    ap.add_argument("--ca", help="the private CA's certificate (PEM) to trust, for an https:// base")
    ap.add_argument("--page-cert", help="serve the pages over HTTPS with this certificate (PEM, for 127.0.0.1)")
    ap.add_argument("--page-key", help="its key (PEM)")
    ap.add_argument("--chromium", default=os.environ.get("SECRELAY_CHROMIUM", "/usr/bin/chromium"))
    ap.add_argument("--room", default="chromium-av")
    ap.add_argument("--page-port", type=int, default=0,
                    help="serve the pages on this port of 127.0.0.1 (default: any free one); the gateway must allow "
                         "their origin, http://127.0.0.1:PORT, by CORS (serve --cors-origin)")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for each stage")
    ap.add_argument("--publisher-first", action="store_true", help="start the subscriber second")
    ap.add_argument("--late", type=float, help="start the subscriber(s) this many seconds after the publisher")
    ap.add_argument("--lossy-viewer", type=float, default=0.0,
                    help="a second late subscriber behind a relay dropping this percentage of its media")
    ap.add_argument("--watch", type=int, default=0, help="seconds the subscribers watch once playing")
    ap.add_argument("--debug", action="store_true", help="the pages report their SDP (on stderr)")
    ap.add_argument("--keep-logs", help="copy Chromium's logs into this folder")
    ap.add_argument("--viewer-base", action="append", default=[],
                    help="one more subscriber, playing from this gateway (up to four times)")
    args = ap.parse_args()
    if len(args.viewer_base) > len(FAR_PAGES):
        ap.error(f"--viewer-base: at most {len(FAR_PAGES)}")
    result = {"chromium": version(args.chromium), "room": args.room}

    def keep(work):
        if args.keep_logs:
            os.makedirs(args.keep_logs, exist_ok=True)
            for f in ["play.log", "lossy.log", "publish.log"] + [f"{far}.log" for far in FAR_PAGES]:
                if os.path.exists(os.path.join(work, f)):
                    shutil.copy(os.path.join(work, f), args.keep_logs)

    run_driver(run, args, result, "secrelay-chromium-", keep)


if __name__ == "__main__":
    main()
