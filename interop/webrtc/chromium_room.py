#!/usr/bin/env python3
"""Pages in one room through secrelay's own room page, in one headless Chromium.

One Chromium (fake camera and microphone) opens the gateway's page `/room/ROOM?autojoin=1`
in N tabs, one after another: each page publishes its camera and microphone with a room join
and listens for the gateway's new offers (its events channel), so every page must end up
receiving every other page's audio and video, N-1 of each, without having offered sections
for them when it joined. The script drives the tabs over the DevTools protocol (read only:
`window.secrelay.stats()` and `state`, which the page exposes), waits until each page decodes
video and plays audio from all the others, then takes a screenshot of the first page and checks
that a remote video tile is not black. With the admin key in SECRELAY_ADMIN_KEY it also reads
which transport each participant's media takes (`transports`: udp, or tcp for ICE-TCP) from the
gateway's API, and the remote address it goes to (`remotes`). Each page then leaves (DELETE).

Prints one JSON line with what it measured; exit status 0 only when everything passed.
Over HTTPS, `--ca` names the private CA's certificate, the one added trust anchor of
Chromium's NSS database (as in chromium_av.py): for the pages and for TURN over TLS alike.
Usage: chromium_room.py --base http(s)://HOST:PORT [--pages 5] [--room R] [--ca ca.pem]
       [--chromium /usr/bin/chromium] [--screenshot out.png]
"""

import argparse
import base64
import io
import json
import os
import ssl
import subprocess
import time
import urllib.parse
import urllib.request

import websocket  # websocket-client
from PIL import Image

from chromium_av import run_driver, stop, trust_ca, version


class Tab:
    """One tab over the DevTools protocol."""

    def __init__(self, ws_url):
        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.next = 0

    def call(self, method, **params):
        self.next += 1
        self.ws.send(json.dumps({"id": self.next, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.next:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page: {r['exceptionDetails']}")
        return r["result"].get("value")


def launch(chromium, profile, log, home=None):
    args = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--no-first-run", "--no-default-browser-check", "--disable-extensions",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--metrics-recording-only", "--mute-audio",
        "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
        "--autoplay-policy=no-user-gesture-required",
        "--allow-loopback-in-peer-connection",
        "--disable-features=WebRtcHideLocalIpsWithMdns",
        # Tabs in the background keep their timers and media running.
        "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
        "--disable-backgrounding-occluded-windows",
        "--window-size=1280,1000", "--remote-debugging-port=0",
        f"--user-data-dir={profile}", "about:blank",
    ]
    env = dict(os.environ)
    if home:
        env["HOME"] = home
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=env)


def devtools_port(profile, timeout):
    path = os.path.join(profile, "DevToolsActivePort")
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(path) as f:
                return int(f.readline())
        except (OSError, ValueError):
            time.sleep(0.1)
    raise RuntimeError("Chromium did not open its DevTools port")


def new_tab(port, url):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/json/new?{url}", method="PUT")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())["webSocketDebuggerUrl"]


SNAPSHOT = """window.secrelay ? window.secrelay.stats().then(s => JSON.stringify({state: window.secrelay.state, stats: s, href: location.href})) : null"""


def summary(raw):
    v = json.loads(raw) if raw else {}
    st = v.get("state", {})
    inbound = (v.get("stats") or {}).get("inbound", {})
    videos = [x for x in inbound.values() if x["kind"] == "video" and (x.get("framesDecoded") or 0) > 0]
    audios = [x for x in inbound.values() if x["kind"] == "audio" and (x.get("packetsReceived") or 0) > 0]
    return {
        "phase": st.get("phase"), "error": st.get("error"), "offers": st.get("offers"),
        "answers": st.get("answers"), "videos_decoding": len(videos), "audios_playing": len(audios),
        "frames": sorted(x.get("framesDecoded") or 0 for x in videos),
        "sizes": sorted({f"{x.get('width')}x{x.get('height')}" for x in videos}),
        "members": [m.get("name") for m in (st.get("members") or [])],
        "me": next((m.get("name") for m in (st.get("members") or []) if m.get("you")), None),
        # Who each remote tile is labelled with: "name kind", sorted.
        "tiles": sorted(f"{t.get('who')} {t.get('kind')}" for t in (st.get("tiles") or {}).values()),
        "token_in_address": "token" in (v.get("href") or ""),
    }


def non_black(tab, shot_path):
    """A screenshot of the tab; the first remote video tile's brightness and spread."""
    rect = tab.eval("""(() => {
        const v = [...document.querySelectorAll('.tile:not(#local):not(.audio) video')].find(v => v.videoWidth > 0);
        if (!v) return null;
        v.scrollIntoView();
        const r = v.getBoundingClientRect();
        return {x: r.x, y: r.y, w: r.width, h: r.height, dpr: window.devicePixelRatio};
    })()""")
    if not rect:
        return {"error": "no remote video tile with a picture"}
    png = base64.b64decode(tab.call("Page.captureScreenshot", format="png")["data"])
    if shot_path:
        with open(shot_path, "wb") as f:
            f.write(png)
    img = Image.open(io.BytesIO(png)).convert("L")
    d = rect["dpr"]
    box = (int(rect["x"] * d), int(rect["y"] * d), int((rect["x"] + rect["w"]) * d), int((rect["y"] + rect["h"]) * d))
    px = list(img.crop(box).getdata())
    mean = sum(px) / max(len(px), 1)
    var = sum((p - mean) ** 2 for p in px) / max(len(px), 1)
    return {"tile": box, "mean": round(mean, 1), "stddev": round(var ** 0.5, 1)}


def media_paths(args):
    """Where the gateway's API says each participant's media goes (`remote`, `transport`: udp,
    or tcp for ICE-TCP), read with the admin key in SECRELAY_ADMIN_KEY while the pages play."""
    req = urllib.request.Request(
        f"{args.base.rstrip('/')}/api/rooms/{args.room}",
        headers={"Authorization": "Bearer " + os.environ["SECRELAY_ADMIN_KEY"]})
    ctx = ssl.create_default_context(cafile=args.ca) if args.ca else None
    with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
        room = json.load(r)
    return [p.get("path") or {} for p in room["participants"]]


def run(args, result, work):
    profile = os.path.join(work, "profile")
    log = open(os.path.join(work, "chromium.log"), "wb")
    home = trust_ca(work, args.ca) if args.ca else None
    proc = launch(args.chromium, profile, log, home)
    tabs = []
    try:
        port = devtools_port(profile, args.timeout)
        url = f"{args.base.rstrip('/')}/room/{args.room}?autojoin=1&low=1"
        if args.token:
            # In the fragment, as a user is told to: the page takes it out of the address.
            url += "#token=" + urllib.parse.quote(args.token, safe="")
        for _ in range(args.pages):
            # A blank tab, then navigated: the DevTools endpoint that opens a tab takes the URL
            # as its query and would drop the fragment (the token).
            tab = Tab(new_tab(port, "about:blank"))
            tab.call("Page.navigate", url=url)
            tabs.append(tab)
            time.sleep(1.5)
        want = args.pages - 1
        end = time.monotonic() + args.timeout
        while True:
            snaps = [summary(t.eval(SNAPSHOT)) for t in tabs]
            errors = [s["error"] for s in snaps if s["error"]]
            result["pages"] = snaps
            if errors:
                raise RuntimeError(f"a page failed: {errors[0]}")
            done = all(s["videos_decoding"] >= want and s["audios_playing"] >= want
                       and len(s["members"]) == args.pages and len(s["tiles"]) >= 2 * want
                       for s in snaps)
            if done or time.monotonic() > end:
                break
            time.sleep(1)
        result["pages"] = snaps
        if not done:
            raise RuntimeError(f"after {args.timeout} s not every page plays {want} videos and {want} audios")
        result["screenshot"] = non_black(tabs[0], args.screenshot)
        if os.environ.get("SECRELAY_ADMIN_KEY"):
            paths = media_paths(args)
            result["transports"] = sorted(p.get("transport", "none") for p in paths)
            result["remotes"] = sorted(p.get("remote", "") for p in paths)
        for t in tabs:
            t.eval("window.secrelay.leave()")
    finally:
        for t in tabs:
            try:
                t.ws.close()
            except Exception:
                pass
        stop(proc)
    shot = result["screenshot"]
    result["ok"] = bool(shot.get("mean", 0) > 20 and shot.get("stddev", 0) > 5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the gateway's URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--pages", type=int, default=5)
    ap.add_argument("--room", default="page-room")
    ap.add_argument("--chromium", default=os.environ.get("SECRELAY_CHROMIUM", "/usr/bin/chromium"))
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--token", help="an access token for the room, given to each page in its address's fragment")
    ap.add_argument("--screenshot", help="keep the screenshot here")
    ap.add_argument("--ca", help="a private CA's certificate (PEM) Chromium trusts, for an https:// base")
    args = ap.parse_args()
    result = {"chromium": version(args.chromium), "room": args.room}
    run_driver(run, args, result, "secrelay-chromium-room-")


if __name__ == "__main__":
    main()
