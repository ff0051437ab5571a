#!/usr/bin/env python3
"""Data channels through a secrelay room, between pages of secrelay's own room page.

One headless Chromium opens `/room/ROOM?autojoin=1&video=0` in two tabs. Each page joins with
its microphone and a data channel labelled `chat` (the page's chat), which the gateway relays
to every other participant's channel of the same label. Over the DevTools protocol the script
has each page send N text messages (`a-0` … and `b-0` …) as fast as the page can, then a
binary message of BINARY bytes, and waits until each page has received all of the other's, in
order; then a third page joins late and must receive the messages sent after it joined, and
not those sent before. With the admin key in SECRELAY_ADMIN_KEY the server then sends a message
to the room through the API (`POST /api/rooms/ROOM/data`), which every page must receive, and
one to the first page alone. Each page then leaves (DELETE).

Prints one JSON line with what it measured; exit status 0 only when everything passed.
Usage: chromium_data.py --base http://HOST:PORT [--room R] [--messages 1000] [--binary 200000]
       [--chromium /usr/bin/chromium]
"""

import argparse
import json
import os
import time
import urllib.error
import urllib.request

from chromium_av import run_driver, stop, version
from chromium_room import Tab, devtools_port, launch, new_tab

STATE = "JSON.stringify({phase: secrelay.state.phase, error: secrelay.state.error, " \
        "open: secrelay.state.chatOpen, chat: secrelay.state.chat, binary: secrelay.state.chatBinary})"


def state(tab):
    raw = tab.eval(f"window.secrelay ? {STATE} : null")
    return json.loads(raw) if raw else {}


def wait(tabs, pred, what, timeout):
    """Polls each tab's state until `pred(states)` holds; the states."""
    end = time.monotonic() + timeout
    while True:
        states = [state(t) for t in tabs]
        errors = [s.get("error") for s in states if s.get("error")]
        if errors:
            raise RuntimeError(f"a page failed: {errors[0]}")
        if pred(states):
            return states
        if time.monotonic() > end:
            brief = [{"phase": s.get("phase"), "open": s.get("open"), "chat": len(s.get("chat") or []),
                      "binary": len(s.get("binary") or [])} for s in states]
            raise RuntimeError(f"after {timeout} s: {what}: {brief}")
        time.sleep(0.5)


def send_all(tab, prefix, n):
    """Sends `prefix-0` … `prefix-(n-1)` from the page; how many the channel took."""
    return tab.eval(f"(() => {{ let k = 0; for (let i = 0; i < {n}; i++) k += secrelay.send('{prefix}-' + i) ? 1 : 0; return k; }})()")


def post_data(args, body):
    """`POST /api/rooms/ROOM/data` with the admin key: (status, JSON or text)."""
    req = urllib.request.Request(
        f"{args.base.rstrip('/')}/api/rooms/{args.room}/data", data=json.dumps(body).encode(),
        method="POST", headers={"Authorization": "Bearer " + os.environ["SECRELAY_ADMIN_KEY"],
                                "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def participant_ids(args):
    req = urllib.request.Request(
        f"{args.base.rstrip('/')}/api/rooms/{args.room}",
        headers={"Authorization": "Bearer " + os.environ["SECRELAY_ADMIN_KEY"]})
    with urllib.request.urlopen(req, timeout=10) as r:
        return [p["id"] for p in json.load(r)["participants"]]


def from_server(args, tabs, result):
    """The server's messages through the API: to the room, then to one participant."""
    result["api_room"] = post_data(args, {"label": "chat", "text": "server-all"})
    wait(tabs, lambda ss: all("server-all" in (s.get("chat") or []) for s in ss),
         "the server's message to the room", args.timeout)
    result["api_bad"] = post_data(args, {"label": "chat"})[0]
    ids = participant_ids(args)
    result["api_one"] = [post_data(args, {"label": "chat", "text": "server-one", "to": i})[0] for i in ids[:1]]
    ss = wait(tabs, lambda ss: sum("server-one" in (s.get("chat") or []) for s in ss) >= 1,
              "the server's message to one participant", args.timeout)
    time.sleep(1)
    ss = [state(t) for t in tabs]
    result["api_one_received"] = sum("server-one" in (s.get("chat") or []) for s in ss)


def open_page(port, url):
    tab = Tab(new_tab(port, "about:blank"))
    tab.call("Page.navigate", url=url)
    return tab


def texts(s, prefix):
    return [m for m in (s.get("chat") or []) if m.startswith(prefix + "-")]


def run(args, result, work):
    profile = os.path.join(work, "profile")
    log = open(os.path.join(work, "chromium.log"), "wb")
    proc = launch(args.chromium, profile, log)
    tabs = []
    try:
        port = devtools_port(profile, args.timeout)
        url = f"{args.base.rstrip('/')}/room/{args.room}?autojoin=1&video=0"
        tabs = [open_page(port, url), open_page(port, url)]
        wait(tabs, lambda ss: all(s.get("open") for s in ss), "both chat channels open", args.timeout)
        n = args.messages
        start = time.monotonic()
        result["sent"] = [send_all(tabs[0], "a", n), send_all(tabs[1], "b", n)]
        want = [f"b-{i}" for i in range(n)], [f"a-{i}" for i in range(n)]
        ss = wait(tabs, lambda ss: len(texts(ss[0], "b")) >= n and len(texts(ss[1], "a")) >= n,
                  f"{n} messages each way", args.timeout)
        result["exchange_s"] = round(time.monotonic() - start, 3)
        result["in_order"] = [texts(ss[0], "b") == want[0], texts(ss[1], "a") == want[1]]
        # A binary message (an ArrayBuffer of BINARY bytes, first bytes 1 2 3 4).
        tabs[0].eval(f"(() => {{ const b = new Uint8Array({args.binary}); b.set([1, 2, 3, 4]); "
                     f"for (let i = 4; i < b.length; i++) b[i] = i % 251; return secrelay.send(b.buffer); }})()")
        ss = wait(tabs, lambda ss: len(ss[1].get("binary") or []) >= 1, "the binary message", args.timeout)
        result["binary"] = ss[1]["binary"][0]
        # A page that joins late gets what is sent after it joined.
        tabs.append(open_page(port, url))
        wait(tabs, lambda ss: ss[2].get("open"), "the late page's channel open", args.timeout)
        # Its channel is open; the gateway relays from now on.
        send_all(tabs[0], "late", 10)
        ss = wait(tabs, lambda ss: len(texts(ss[2], "late")) >= 10 and len(texts(ss[1], "late")) >= 10,
                  "the late page's messages", args.timeout)
        result["late"] = {"got": texts(ss[2], "late"), "earlier": len(texts(ss[2], "a"))}
        if os.environ.get("SECRELAY_ADMIN_KEY"):
            from_server(args, tabs, result)
        for t in tabs:
            t.eval("window.secrelay.leave()")
    finally:
        for t in tabs:
            try:
                t.ws.close()
            except Exception:
                pass
        stop(proc)
    late = result["late"]
    result["ok"] = (all(result["in_order"]) and result["binary"]["size"] == args.binary
                    and result["binary"]["head"] == [1, 2, 3, 4]
                    and late["got"] == [f"late-{i}" for i in range(10)] and late["earlier"] == 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the gateway's URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--room", default="data-room")
    ap.add_argument("--messages", type=int, default=1000)
    ap.add_argument("--binary", type=int, default=200_000)
    ap.add_argument("--chromium", default=os.environ.get("SECRELAY_CHROMIUM", "/usr/bin/chromium"))
    ap.add_argument("--timeout", type=float, default=60.0)
    args = ap.parse_args()
    result = {"chromium": version(args.chromium), "room": args.room}
    run_driver(run, args, result, "secrelay-chromium-data-")


if __name__ == "__main__":
    main()
