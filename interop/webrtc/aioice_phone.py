#!/usr/bin/env python3
"""A SIP-style phone that does ICE, through a running `secrelay serve`: aioice (a full ICE agent
nobody here wrote) on a plain RTP telephony leg.

The script offers a telephony leg (`POST /rooms/{room}/rtp`) whose SDP carries aioice's ICE
credentials and host candidates (loopback only: the gateway listens there), takes the gateway's
answer (`a=ice-lite`, its credentials and candidates), and runs ICE as the controlling agent,
which nominates a pair with a second check. It then sends a G.711 (PCMU) `--sends` Hz tone over
the nominated pair for `--seconds` and decodes what the room relays back to it over the same
pair (the test's other phone's tone), and leaves with DELETE.

Prints one JSON line and exits 0 only when ICE connected and the `--expect` Hz tone was heard.
Usage: aioice_phone.py --base http://127.0.0.1:PORT --room NAME --expect 1000 --sends 500
"""

import argparse
import asyncio
import audioop
import json
import math
import os
import random
import struct
import sys
import time
import urllib.request

import aioice
import aioice.ice
import numpy as np


def loopback(use_ipv4, use_ipv6):
    """The gateway of the test listens on loopback, which aioice leaves out by default."""
    return ["127.0.0.1"] if use_ipv4 else []


aioice.ice.get_host_addresses = loopback


def request(method, url, body=None, content_type=None):
    headers = {}
    admin = os.environ.get("SECRELAY_ADMIN_KEY")
    if admin:
        headers["Authorization"] = f"Bearer {admin}"
    if content_type:
        headers["Content-Type"] = content_type
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.headers, r.read().decode()


def offer_sdp(conn):
    default = conn.local_candidates[0]
    lines = [
        "v=0",
        f"o=aioice 1 1 IN IP4 {default.host}",
        "s=-",
        f"c=IN IP4 {default.host}",
        "t=0 0",
        f"m=audio {default.port} RTP/AVP 0",
        "a=rtpmap:0 PCMU/8000",
        "a=ptime:20",
        "a=rtcp-mux",
        f"a=ice-ufrag:{conn.local_username}",
        f"a=ice-pwd:{conn.local_password}",
    ]
    lines += [f"a=candidate:{c.to_sdp()}" for c in conn.local_candidates]
    lines += ["a=end-of-candidates", "a=sendrecv", ""]
    return "\r\n".join(lines)


def ice_of(sdp):
    """The answer's ICE: credentials, candidates, whether it says a=ice-lite."""
    ufrag = pwd = None
    candidates = []
    lite = False
    for line in sdp.splitlines():
        if line.startswith("a=ice-ufrag:"):
            ufrag = line.split(":", 1)[1]
        elif line.startswith("a=ice-pwd:"):
            pwd = line.split(":", 1)[1]
        elif line.startswith("a=candidate:"):
            candidates.append(aioice.Candidate.from_sdp(line.split(":", 1)[1]))
        elif line == "a=ice-lite":
            lite = True
    return ufrag, pwd, candidates, lite


def tone_frame(hz, start):
    samples = [int(12000 * math.sin(2 * math.pi * hz * (start + i) / 8000)) for i in range(160)]
    return audioop.lin2ulaw(struct.pack(f"<{len(samples)}h", *samples), 2)


def rtp_payload(packet):
    """The payload of a PCMU RTP packet (None for anything else)."""
    if len(packet) < 12 or packet[0] >> 6 != 2 or packet[1] & 0x7F != 0:
        return None
    at = 12 + 4 * (packet[0] & 0x0F)
    if packet[0] & 0x10 and len(packet) >= at + 4:
        at += 4 + 4 * struct.unpack("!H", packet[at + 2 : at + 4])[0]
    return packet[at:]


def share(pcm, hz):
    """The share of the signal's energy within 50 Hz of `hz`."""
    x = np.asarray(pcm, dtype=np.float64)
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x)))) ** 2
    freqs = np.fft.rfftfreq(len(x), 1 / 8000)
    total = spectrum.sum()
    return float(spectrum[np.abs(freqs - hz) < 50].sum() / total) if total else 0.0


async def run(args):
    base = args.base.rstrip("/")
    result = {"room": args.room, "sends_hz": args.sends, "expect_hz": args.expect}
    conn = aioice.Connection(ice_controlling=True, components=1, use_ipv6=False)
    await conn.gather_candidates()
    status, headers, answer = request(
        "POST", f"{base}/rooms/{args.room}/rtp", offer_sdp(conn).encode(), "application/sdp"
    )
    location = headers["Location"]
    ufrag, pwd, candidates, lite = ice_of(answer)
    result.update(ice_lite=lite, gateway_candidates=[c.to_sdp() for c in candidates])
    if not (ufrag and pwd and candidates):
        raise RuntimeError(f"no ICE in the answer:\n{answer}")
    conn.remote_is_lite = lite
    conn.remote_username, conn.remote_password = ufrag, pwd
    for c in candidates:
        await conn.add_remote_candidate(c)
    await conn.add_remote_candidate(None)
    t0 = time.monotonic()
    await asyncio.wait_for(conn.connect(), args.timeout)
    result["connect_s"] = round(time.monotonic() - t0, 3)
    pair = conn._nominated.get(1)
    result["nominated"] = f"{pair.remote_candidate.host}:{pair.remote_candidate.port}" if pair else None

    heard = []
    received = 0

    async def listen():
        nonlocal received
        while True:
            payload = rtp_payload(await conn.recv())
            if payload is not None:
                received += 1
                heard.extend(struct.unpack(f"<{len(payload)}h", audioop.ulaw2lin(payload, 2)))

    listener = asyncio.ensure_future(listen())
    ssrc = random.getrandbits(32)
    seq = random.getrandbits(16)
    frames = int(args.seconds * 50)
    start = time.monotonic()
    for i in range(frames):
        header = struct.pack("!BBHII", 0x80, 0, (seq + i) & 0xFFFF, 160 * i, ssrc)
        await conn.send(header + tone_frame(args.sends, 160 * i))
        await asyncio.sleep(max(0.0, start + (i + 1) * 0.02 - time.monotonic()))
    await asyncio.sleep(0.5)
    listener.cancel()
    result.update(sent=frames, received=received)
    # The last second and a half: whatever the room relayed before the other phone joined aside.
    tail = heard[-12000:]
    result["expect_share"] = round(share(tail, args.expect), 3) if len(tail) >= 4000 else 0.0
    status, _, _ = request("DELETE", f"{base}{location}")
    result["delete"] = status
    await conn.close()
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base", required=True)
    p.add_argument("--room", required=True)
    p.add_argument("--expect", type=float, required=True)
    p.add_argument("--sends", type=float, default=500.0)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--timeout", type=float, default=15.0)
    args = p.parse_args()
    try:
        result = asyncio.run(run(args))
    except Exception as e:  # the JSON line says what failed
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
    print(json.dumps(result))
    ok = result.get("nominated") and result.get("expect_share", 0) >= 0.5
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
