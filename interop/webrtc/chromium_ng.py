#!/usr/bin/env python3
"""Headless Chromium calls a plain RTP phone through secrelay, set up with rtpengine's ng protocol.

What a SIP proxy does with rtpengine for a WebRTC-to-SIP call, with this script in the proxy's
place: a page in headless Chromium (fake microphone) makes a WebRTC offer (ICE, DTLS-SRTP) and
posts it to this script's small HTTP server; the script sends it to secrelay's ng socket as an
`offer` with `transport-protocol: RTP/AVP` (the callee is a plain RTP phone) and ICE removed
towards the callee, hands secrelay's plain offer to a phone it runs itself (one UDP socket,
G.711 μ-law, a 1000 Hz sine every 20 ms), sends the phone's answer to secrelay as the `answer`,
and returns secrelay's WebRTC answer to the page. Then audio must arrive both ways: the page's
`inbound-rtp` audio counts packets and audio energy from the phone, and the phone decodes
Chromium's fake microphone (PCMU, the only codec the callee took) with audible energy. Then
the page hangs up and the script sends `delete`.

With --callee the call goes the other way, as a proxy sets up a call from a SIP phone to a
WebRTC user: the phone's plain RTP offer goes to secrelay as the `offer` with
`transport-protocol: UDP/TLS/RTP/SAVPF` and ICE forced towards the callee; secrelay's WebRTC
offer (ICE-lite, DTLS actpass) is handed to the page, which answers it (setRemoteDescription,
createAnswer); the page's answer goes to secrelay as the `answer`, whose plain RTP answer the
phone takes. The same audio checks follow.

With --reinvite (the browser calling), each side then offers again in the answered call, as
SIP re-INVITEs bring them: the page restarts ICE (`restartIce()`, a new offer with new
credentials, sent as an ng `offer` from its tag), then the phone offers again (an ng `offer`
from its tag) and the page answers secrelay's new WebRTC offer; audio must go on both ways
after each, on the DTLS association of the call's start.

With --kill-pid PID --standby-ng ADDR (the browser calling), the node carrying the call (the
process PID, whose ng socket is --ng) is then killed with SIGKILL. The page notices (no audio
for a second, or its connection `disconnected`), restarts ICE, and its re-INVITE goes to the
standby's ng socket (tried again while the standby has not taken the call yet); audio must come
back both ways on the browser's first DTLS association, and the times are reported (from the
moment the page was told of the kill, within 200 ms of it).

Prints one JSON line with what it measured; exit status 0 only when everything passed. Needs
only Python's standard library (and Chromium).
Usage: chromium_ng.py --ng 127.0.0.1:PORT [--callee | --reinvite | --kill-pid PID --standby-ng ADDR]
       [--chromium /usr/bin/chromium]
"""

import argparse
import json
import math
import os
import shutil
import signal
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from chromium_av import COMMON_JS, Pages, launch, run_driver, stop, version

CALL_HTML = """<!doctype html><html><head><title>call</title></head><body>
<audio id="remote" autoplay></audio>
<script>""" + COMMON_JS + r"""
async function audio(pc) {
  const stats = await pc.getStats();
  const inb = {}, out = {};
  for (const s of stats.values()) {
    if (s.type === 'inbound-rtp' && s.kind === 'audio')
      Object.assign(inb, {packetsReceived: s.packetsReceived, packetsLost: s.packetsLost, totalSamplesReceived: s.totalSamplesReceived, totalAudioEnergy: s.totalAudioEnergy, codec: codecOf(stats, s)});
    if (s.type === 'outbound-rtp' && s.kind === 'audio')
      Object.assign(out, {packetsSent: s.packetsSent, codec: codecOf(stats, s)});
  }
  return {inbound: inb, outbound: out, transport: dtlsOf(stats)};
}
// Audio `n` packets on each way past `before` (20 s at most).
async function heardMore(pc, before, n) {
  for (let i = 0; i < 80; i++) {
    const a = await audio(pc);
    if (a.inbound.packetsReceived > before.inbound.packetsReceived + n &&
        a.outbound.packetsSent > before.outbound.packetsSent + n) return a;
    await sleep(250);
  }
  return await audio(pc);
}
const ufrag = sdp => (sdp.match(/a=ice-ufrag:(\S+)/) || [])[1];
// An ICE restart through the signaling (the re-INVITE goes to /reoffer): audio before and
// after, when the answer was set, and when audio came again (packets on top of `before`).
async function restartIce(pc) {
  const before = await audio(pc);
  const remoteBefore = ufrag(pc.remoteDescription.sdp);
  pc.restartIce();
  await pc.setLocalDescription(await pc.createOffer());
  await gathered(pc);
  const r = await fetch('/reoffer', {method: 'POST', body: pc.localDescription.sdp});
  const answer = await r.text();
  if (r.status !== 200) throw new Error('the re-INVITE: ' + r.status + ' ' + answer);
  await pc.setRemoteDescription({type: 'answer', sdp: answer});
  const answered = performance.now();
  let heard = null;
  for (let i = 0; i < 200 && heard === null; i++) {
    const a = await audio(pc);
    if (a.inbound.packetsReceived > before.inbound.packetsReceived + 5) heard = performance.now();
    else await sleep(50);
  }
  const after = await heardMore(pc, before, 100);
  return {before, after, answered, heard, remote_ufrag_before: remoteBefore,
          remote_ufrag_after: ufrag(pc.remoteDescription.sdp), ice: pc.iceConnectionState};
}
async function waitForAny(whats) {
  for (;;) {
    const r = await fetch('/control?page=' + PAGE);
    const t = await r.text();
    if (whats.includes(t)) return t;
    await sleep(200);
  }
}
(async () => {
  try {
    const stream = await navigator.mediaDevices.getUserMedia({audio: true});
    const pc = new RTCPeerConnection();
    pc.addTransceiver(stream.getAudioTracks()[0], {direction: 'sendrecv', streams: [stream]});
    pc.ontrack = e => { document.getElementById('remote').srcObject = new MediaStream([e.track]); };
    await pc.setLocalDescription(await pc.createOffer());
    await gathered(pc);
    const r = await fetch('/offer', {method: 'POST', body: pc.localDescription.sdp});
    const answer = await r.text();
    if (r.status !== 200) throw new Error('the call: ' + r.status + ' ' + answer);
    await pc.setRemoteDescription({type: 'answer', sdp: answer});
    await connected(pc);
    await report({state: 'connected'});
    let last = null;
    for (let i = 0; i < 80; i++) {
      last = await audio(pc);
      if (last.inbound.packetsReceived > 100 && last.inbound.totalAudioEnergy > 0 && last.outbound.packetsSent > 100) break;
      await sleep(250);
    }
    await report({state: 'heard', call: last});
    const next = await waitForAny(['restart', 'failover', 'leave']);
    if (next === 'failover') {
      // The node carrying the call died. The page restarts ICE through its signaling, as a
      // WebRTC app does, when it notices: audio stopped for a second (what an app watching
      // its stats sees first), or the connection went 'disconnected' (Chromium's own, later).
      const t0 = performance.now();
      let last = (await audio(pc)).inbound.packetsReceived, changed = t0, trigger = null;
      while (trigger === null) {
        if (performance.now() - t0 > 20000) throw new Error('never noticed: ' + pc.iceConnectionState);
        await sleep(100);
        const n = (await audio(pc)).inbound.packetsReceived;
        if (n !== last) { last = n; changed = performance.now(); }
        if (['disconnected', 'failed'].includes(pc.iceConnectionState)) trigger = pc.iceConnectionState;
        else if (performance.now() - changed > 1000) trigger = 'audio stopped';
      }
      const noticed = performance.now() - t0;
      const r = await restartIce(pc);
      await report(Object.assign({state: 'failed-over', noticed_ms: noticed, trigger,
                                  answered_ms: r.answered - t0, heard_ms: r.heard - t0}, r));
      await waitFor('leave');
    }
    if (next === 'restart') {
      // The browser's re-INVITE: an ICE restart (new credentials, the same DTLS).
      const r = await restartIce(pc);
      await report(Object.assign({state: 'restarted'}, r));
      // The phone's re-INVITE: secrelay's new offer, answered here.
      await waitFor('takeoffer');
      const o = await fetch('/incoming');
      const offer = await o.text();
      if (o.status !== 200) throw new Error('no re-offer: ' + o.status);
      const before2 = await audio(pc);
      await pc.setRemoteDescription({type: 'offer', sdp: offer});
      await pc.setLocalDescription(await pc.createAnswer());
      const a = await fetch('/answer', {method: 'POST', body: pc.localDescription.sdp});
      if (a.status !== 204) throw new Error('the re-INVITE answer: ' + a.status + ' ' + await a.text());
      const after2 = await heardMore(pc, before2, 100);
      await report({state: 'reinvited', before: before2, after: after2, signaling: pc.signalingState,
                    dtls: after2.transport && after2.transport.dtlsState});
      await waitFor('leave');
    }
    pc.close();
    await report({state: 'left'});
  } catch (e) {
    await report({error: String(e && e.message || e)});
  }
})();
</script></body></html>"""


# The page as the callee: it polls for secrelay's offer, answers it, and posts the answer.
CALLEE_HTML = CALL_HTML.replace(r"""    pc.addTransceiver(stream.getAudioTracks()[0], {direction: 'sendrecv', streams: [stream]});
    pc.ontrack = e => { document.getElementById('remote').srcObject = new MediaStream([e.track]); };
    await pc.setLocalDescription(await pc.createOffer());
    await gathered(pc);
    const r = await fetch('/offer', {method: 'POST', body: pc.localDescription.sdp});
    const answer = await r.text();
    if (r.status !== 200) throw new Error('the call: ' + r.status + ' ' + answer);
    await pc.setRemoteDescription({type: 'answer', sdp: answer});""", r"""    pc.ontrack = e => { document.getElementById('remote').srcObject = new MediaStream([e.track]); };
    let offer = null;
    for (let i = 0; i < 400 && !offer; i++) {
      const r = await fetch('/incoming');
      if (r.status === 200) offer = await r.text(); else await sleep(50);
    }
    if (!offer) throw new Error('no incoming call');
    await pc.setRemoteDescription({type: 'offer', sdp: offer});
    const tr = pc.getTransceivers()[0];
    tr.direction = 'sendrecv';
    await tr.sender.replaceTrack(stream.getAudioTracks()[0]);
    await pc.setLocalDescription(await pc.createAnswer());
    await gathered(pc);
    const r = await fetch('/answer', {method: 'POST', body: pc.localDescription.sdp});
    if (r.status !== 204) throw new Error('the answer: ' + r.status + ' ' + await r.text());""")
assert CALLEE_HTML != CALL_HTML, "the callee page differs from the caller's"


# --- bencode, as the ng protocol frames it -------------------------------------------------

def benc(x):
    if isinstance(x, int):
        return b"i%de" % x
    if isinstance(x, str):
        x = x.encode()
    if isinstance(x, bytes):
        return b"%d:%s" % (len(x), x)
    if isinstance(x, list):
        return b"l" + b"".join(benc(i) for i in x) + b"e"
    if isinstance(x, dict):
        return b"d" + b"".join(benc(k) + benc(v) for k, v in sorted(x.items())) + b"e"
    raise TypeError(type(x))


def bdec(b, i=0):
    c = b[i:i + 1]
    if c == b"i":
        j = b.index(b"e", i)
        return int(b[i + 1:j]), j + 1
    if c in (b"l", b"d"):
        i += 1
        items = []
        while b[i:i + 1] != b"e":
            v, i = bdec(b, i)
            items.append(v)
        if c == b"l":
            return items, i + 1
        return {items[k].decode(): items[k + 1] for k in range(0, len(items), 2)}, i + 1
    j = b.index(b":", i)
    n = int(b[i:j])
    return b[j + 1:j + 1 + n], j + 1 + n


class Ng:
    """One ng control connection (UDP): a request, its reply."""

    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.addr = (host, int(port))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(5)
        self.cookie = 0

    def call(self, d):
        self.cookie += 1
        cookie = b"%x" % self.cookie
        self.sock.sendto(cookie + b" " + benc(d), self.addr)
        while True:
            data, _ = self.sock.recvfrom(65536)
            c, _, body = data.partition(b" ")
            if c == cookie:
                reply, _ = bdec(body)
                if reply.get("result") != b"ok":
                    reason = reply.get("error-reason", b"?").decode(errors="replace")
                    raise RuntimeError(f"ng {d['command']}: {reason}")
                return reply


# --- the plain RTP phone ----------------------------------------------------------------------

def ulaw_encode(s):
    bias, clip = 0x84, 32635
    sign = 0x80 if s < 0 else 0
    s = min(abs(s), clip) + bias
    exp, mask = 7, 0x4000
    while exp > 0 and not (s & mask):
        exp -= 1
        mask >>= 1
    mant = (s >> (exp + 3)) & 0x0F
    return ~(sign | (exp << 4) | mant) & 0xFF


def ulaw_decode(u):
    u = ~u & 0xFF
    s = (((u & 0x0F) << 3) + 0x84) << ((u >> 4) & 7)
    s -= 0x84
    return -s if u & 0x80 else s


ULAW = [ulaw_decode(u) for u in range(256)]


class Phone:
    """A plain RTP phone: PCMU on one UDP socket, a 1000 Hz sine out, decoded energy in."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.005)
        self.port = self.sock.getsockname()[1]
        self.gateway = None
        self.sent = 0
        self.received = 0
        self.other_pt = 0
        self.loudest_rms = 0.0
        self.stop = threading.Event()

    def sdp(self, version=1):
        """Its SDP: PCMU on its socket (as an offer, or as the answer to secrelay's offer)."""
        return (
            f"v=0\r\no=phone 1 {version} IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
            f"m=audio {self.port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=ptime:20\r\na=sendrecv\r\n"
        )

    def take(self, sdp):
        """Where to send: the address and port of secrelay's SDP (its offer or its answer)."""
        ip = next(l.split()[2] for l in sdp.splitlines() if l.startswith("c=IN IP4"))
        port = next(int(l.split()[1]) for l in sdp.splitlines() if l.startswith("m=audio"))
        self.gateway = (ip, port)

    def answer(self, offer):
        """Takes secrelay's offer (where to send) and answers with PCMU on its socket."""
        self.take(offer)
        return self.sdp()

    def run(self):
        seq, n = 1, 0
        next_send = time.monotonic()
        while not self.stop.is_set():
            if time.monotonic() >= next_send:
                payload = bytes(
                    ulaw_encode(int(16000 * math.sin(2 * math.pi * 1000 * (n + i) / 8000))) for i in range(160)
                )
                hdr = bytes([0x80, 0]) + seq.to_bytes(2, "big") + (n & 0xFFFFFFFF).to_bytes(4, "big") + (0x7e1e).to_bytes(4, "big")
                self.sock.sendto(hdr + payload, self.gateway)
                self.sent += 1
                seq = (seq + 1) & 0xFFFF
                n += 160
                next_send += 0.020
            try:
                data, src = self.sock.recvfrom(2048)
            except socket.timeout:
                continue
            if src != self.gateway or len(data) < 12 or 200 <= data[1] <= 207:
                continue
            if data[1] & 0x7F != 0:
                self.other_pt += 1
                continue
            self.received += 1
            cc = data[0] & 0x0F
            pcm = [ULAW[b] for b in data[12 + 4 * cc:]]
            if pcm:
                rms = math.sqrt(sum(x * x for x in pcm) / len(pcm))
                self.loudest_rms = max(self.loudest_rms, rms)


def serve(pages, handle_offer, page_html=CALL_HTML, incoming=None, handle_answer=None, handle_reoffer=None):
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
                pass

        def do_GET(self):
            path, _, query = self.path.partition("?")
            if path == "/call.html":
                self.send(200, page_html, "text/html")
            elif path == "/incoming":
                offer = incoming() if incoming else None
                if offer:
                    self.send(200, offer)
                else:
                    self.send(404, "no call yet")
            elif path == "/control":
                page = query.partition("page=")[2]
                with pages.lock:
                    self.send(200, pages.control.get(page, "wait"))
            else:
                self.send(404, "no such page")

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n)
            if self.path in ("/offer", "/reoffer"):
                handler = handle_offer if self.path == "/offer" else handle_reoffer
                try:
                    self.send(200, handler(body.decode()))
                except Exception as e:  # reported to the page, which reports it back
                    self.send(502, f"{type(e).__name__}: {e}")
                return
            if self.path == "/answer" and handle_answer:
                try:
                    handle_answer(body.decode())
                    self.send(204, "")
                except Exception as e:
                    self.send(502, f"{type(e).__name__}: {e}")
                return
            try:
                pages.add(json.loads(body))
            except ValueError:
                pass
            self.send(204, "")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def reinvite(args, ng, phone, pages, call_id, sdp, result):
    """Each side offers again in the answered call: the browser restarts ICE (its re-INVITE),
    then the phone sends a new offer, which secrelay turns into a new WebRTC offer for the
    page. Audio must keep flowing both ways after each, on the same DTLS association."""
    with pages.lock:
        pages.control["call"] = "restart"
    r = pages.wait(lambda r: r.get("state") == "restarted", args.timeout)
    if r is None:
        raise RuntimeError("the page did not restart ICE")
    heard = phone.received
    result["restart"] = {k: r[k] for k in ("before", "after", "remote_ufrag_before", "remote_ufrag_after", "ice")}
    offer = ng.call({
        "command": "offer", "call-id": call_id, "from-tag": "phone", "to-tag": "browser",
        "sdp": phone.sdp(version=3),
    })
    sdp["reoffer_to_browser"] = offer["sdp"].decode()
    with pages.lock:
        pages.control["call"] = "takeoffer"
    r = pages.wait(lambda r: r.get("state") == "reinvited", args.timeout)
    if r is None:
        raise RuntimeError("the page did not take secrelay's new offer")
    result["reinvite"] = {k: r[k] for k in ("before", "after", "signaling", "dtls")}
    end = time.monotonic() + args.timeout
    while phone.received < heard + 100 and time.monotonic() < end:
        time.sleep(0.1)
    result["reinvite"]["phone_heard_since_restart"] = phone.received - heard


def failover(args, phone, pages, sdp, result):
    """The node carrying the call is killed (SIGKILL); the page notices, restarts ICE, and its
    re-INVITE goes to the standby's ng socket (as a proxy whose rtpengine address moved to
    the standby would send it) until the standby has taken the call. Audio must come back both
    ways on the browser's first DTLS association."""
    sdp["reoffer_ng"] = Ng(args.standby_ng)
    heard = phone.received
    os.kill(args.kill_pid, signal.SIGKILL)
    killed = time.monotonic()
    with pages.lock:
        pages.control["call"] = "failover"
    r = pages.wait(lambda r: r.get("state") == "failed-over", args.timeout * 2)
    if r is None:
        raise RuntimeError("the page did not restart ICE after the failover")
    end = time.monotonic() + args.timeout
    while phone.received < heard + 100 and time.monotonic() < end:
        time.sleep(0.02)
    result["failover"] = {k: r[k] for k in ("before", "after", "remote_ufrag_before", "remote_ufrag_after",
                                             "ice", "trigger", "noticed_ms", "answered_ms", "heard_ms")}
    result["failover"].update({
        "reinvite_refused": sdp.get("refused", 0),
        "reinvite_taken_s": round(sdp["reoffer_taken"] - killed, 3),
        "phone_heard_after": phone.received - heard,
    })


def run(args, result, work):
    ng = Ng(args.ng)
    phone = Phone()
    call_id = f"chromium-{os.getpid()}@proxy"
    sdp = {}

    def handle_offer(browser_sdp):
        offer = ng.call({
            "command": "offer", "call-id": call_id, "from-tag": "browser", "sdp": browser_sdp,
            "transport-protocol": "RTP/AVP", "ICE": "remove",
        })
        sdp["to_phone"] = offer["sdp"].decode()
        phone_answer = phone.answer(sdp["to_phone"])
        answer = ng.call({
            "command": "answer", "call-id": call_id, "from-tag": "browser", "to-tag": "phone",
            "sdp": phone_answer,
        })
        sdp["to_browser"] = answer["sdp"].decode()
        threading.Thread(target=phone.run, daemon=True).start()
        return sdp["to_browser"]

    def handle_answer(browser_sdp):
        # The browser answered secrelay's WebRTC offer: the answer towards the phone.
        answer = ng.call({
            "command": "answer", "call-id": call_id, "from-tag": "phone", "to-tag": "browser",
            "sdp": browser_sdp, "ICE": "remove",
        })
        sdp["to_phone"] = answer["sdp"].decode()
        phone.take(sdp["to_phone"])
        threading.Thread(target=phone.run, daemon=True).start()

    def handle_reoffer(browser_sdp):
        # The browser's re-INVITE (an ICE restart): to the phone, whose answer comes back.
        # After a failover it goes to the standby, which refuses it until it took the call.
        target = sdp.get("reoffer_ng", ng)
        end = time.monotonic() + args.timeout
        while True:
            try:
                offer = target.call({
                    "command": "offer", "call-id": call_id, "from-tag": "browser", "to-tag": "phone",
                    "sdp": browser_sdp, "transport-protocol": "RTP/AVP", "ICE": "remove",
                })
                break
            except (RuntimeError, OSError) as e:
                sdp["refused"] = sdp.get("refused", 0) + 1
                if target is ng or time.monotonic() > end:
                    raise RuntimeError(f"the re-INVITE: {e}")
                time.sleep(0.1)
        sdp["reoffer_taken"] = time.monotonic()
        sdp["reoffer_to_phone"] = offer["sdp"].decode()
        phone.take(sdp["reoffer_to_phone"])
        answer = target.call({
            "command": "answer", "call-id": call_id, "from-tag": "browser", "to-tag": "phone",
            "sdp": phone.sdp(version=2),
        })
        return answer["sdp"].decode()

    def handle_reanswer(browser_sdp):
        # The browser answered secrelay's new offer (the phone's re-INVITE).
        answer = ng.call({
            "command": "answer", "call-id": call_id, "from-tag": "phone", "to-tag": "browser",
            "sdp": browser_sdp, "ICE": "remove",
        })
        phone.take(answer["sdp"].decode())

    pages = Pages()
    if args.callee:
        # The phone calls: its offer, turned into a WebRTC offer for the browser.
        offer = ng.call({
            "command": "offer", "call-id": call_id, "from-tag": "phone", "sdp": phone.sdp(),
            "transport-protocol": "UDP/TLS/RTP/SAVPF", "ICE": "force", "rtcp-mux": ["offer"],
        })
        sdp["to_browser"] = offer["sdp"].decode()
        httpd = serve(pages, handle_offer, CALLEE_HTML, lambda: sdp["to_browser"], handle_answer)
    else:
        httpd = serve(pages, handle_offer, incoming=lambda: sdp.get("reoffer_to_browser"),
                      handle_answer=handle_reanswer, handle_reoffer=handle_reoffer)
    origin = f"http://127.0.0.1:{httpd.server_address[1]}"
    proc = None
    try:
        t0 = time.monotonic()
        log = open(os.path.join(work, "call.log"), "wb")
        proc = launch(args.chromium, f"{origin}/call.html?room=ng", os.path.join(work, "profile"), log)
        if pages.wait(lambda r: r.get("state") == "connected", args.timeout) is None:
            raise RuntimeError(f"the browser did not connect in {args.timeout} s")
        result["connected_s"] = round(time.monotonic() - t0, 2)
        r = pages.wait(lambda r: r.get("state") == "heard", args.timeout)
        if r is None:
            raise RuntimeError("the page never reported what it heard")
        result["browser"] = r["call"]
        end = time.monotonic() + args.timeout
        while (phone.received < 100 or phone.loudest_rms < 300) and time.monotonic() < end:
            time.sleep(0.1)
        if args.reinvite:
            reinvite(args, ng, phone, pages, call_id, sdp, result)
        if args.kill_pid:
            failover(args, phone, pages, sdp, result)
            ng = sdp["reoffer_ng"]
        query = ng.call({"command": "query", "call-id": call_id})
        result["query_tags"] = sorted(query.get("tags", {}).keys())
        with pages.lock:
            pages.control["call"] = "leave"
        pages.wait(lambda r: r.get("state") == "left", args.timeout)
        caller = "phone" if args.callee else "browser"
        result["delete"] = ng.call({"command": "delete", "call-id": call_id, "from-tag": caller})["result"].decode()
    finally:
        phone.stop.set()
        if proc:
            stop(proc)
        httpd.shutdown()
    result["phone"] = {"sent": phone.sent, "received": phone.received, "other_payload_types": phone.other_pt,
                       "loudest_rms": round(phone.loudest_rms, 1)}
    result["sdp_to_phone_transport"] = next((l.split()[2] for l in sdp.get("to_phone", "").splitlines() if l.startswith("m=audio")), None)
    result["direction"] = "phone calls browser" if args.callee else "browser calls phone"
    inb = result["browser"]["inbound"]
    out = result["browser"]["outbound"]
    result["ok"] = bool(
        result["sdp_to_phone_transport"] == "RTP/AVP"
        and inb.get("packetsReceived", 0) > 100
        and inb.get("totalAudioEnergy", 0) > 0
        and out.get("packetsSent", 0) > 100
        and phone.received > 100
        and phone.loudest_rms >= 300
        and result["delete"] == "ok"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ng", required=True, help="secrelay's ng control address, e.g. 127.0.0.1:2223")
    ap.add_argument("--chromium", default=os.environ.get("SECRELAY_CHROMIUM", "/usr/bin/chromium"))
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for each stage")
    ap.add_argument("--callee", action="store_true",
                    help="the phone calls the browser (secrelay offers WebRTC to the page)")
    ap.add_argument("--reinvite", action="store_true",
                    help="after the call is heard, each side offers again (the browser with an ICE restart)")
    ap.add_argument("--kill-pid", type=int,
                    help="after the call is heard, kill this process (the node carrying the call) and fail over")
    ap.add_argument("--standby-ng", help="the standby's ng address, for the re-INVITE after --kill-pid")
    ap.add_argument("--keep-logs", help="copy Chromium's log into this folder")
    args = ap.parse_args()
    result = {"chromium": version(args.chromium)}

    def keep(work):
        if args.keep_logs:
            os.makedirs(args.keep_logs, exist_ok=True)
            if os.path.exists(os.path.join(work, "call.log")):
                shutil.copy(os.path.join(work, "call.log"), args.keep_logs)

    run_driver(run, args, result, "secrelay-chromium-ng-", keep)


if __name__ == "__main__":
    main()
