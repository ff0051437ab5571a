#!/usr/bin/env python3
"""Data channels through a secrelay room with aiortc, an SCTP and WebRTC stack nobody here wrote.

Two aiortc peers join one room (`POST /rooms/{room}/join`) with data channels and no media
at all: `chat` (reliable, ordered) and `lossy` (unordered, no retransmissions). Each sends N
text messages on `chat`; each must receive the other's, complete and in order. Then the first
sends a binary message of BINARY bytes, which the second must receive intact, and a few
messages on `lossy`, which reach the second on its channel of that label (opened by the
gateway with the sender's settings: the second peer never opened one), unordered and
unreliable as the sender's. Both leave with DELETE.

With --b-whep the second peer is a WHEP viewer (`POST /whep/{room}`), which a gateway with
more than one worker serves on another worker than the room's, and with --base-b it asks
another node of a cluster, which serves it there: the messages then cross between workers or
nodes. With --negotiated ID both peers also make a channel `agreed` with `negotiated=True` and that
stream id (no DCEP: the gateway must have it configured as `[[data_negotiated]]`), and each
sends 100 messages on it, which the other must receive in order on its own `agreed` channel.
With --server-message the gateway's API (at --base, with the admin key in
SECRELAY_ADMIN_KEY) sends one message to the whole room, which both peers must receive.

Prints one JSON line with what it measured; exit status 0 only when everything passed.
Usage: aiortc_data.py --base http://127.0.0.1:PORT [--room NAME] [--messages N] [--binary B]
                      [--b-whep] [--base-b URL] [--server-message] [--negotiated ID]
"""

import argparse
import asyncio
import json
import os
import sys
import time

import aioice.ice
import aiortc

from aiortc_tone import Peer, http

# aioice gathers host candidates on every interface but loopback; the gateway under test
# announces itself on loopback, and the test's traffic stays there.
aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"] if use_ipv4 else []


class Inbox:
    """What one peer's channels received, by label."""

    def __init__(self, peer):
        self.text = {}
        self.binary = []
        self.channels = {}
        self.changed = asyncio.Event()

        @peer.pc.on("datachannel")
        def _opened(channel):
            self.watch(channel)

    def watch(self, channel):
        self.channels[channel.label] = {"ordered": channel.ordered,
                                        "max_retransmits": channel.maxPacketLifeTime
                                        if channel.maxPacketLifeTime is not None else channel.maxRetransmits}

        @channel.on("message")
        def _message(m):
            if isinstance(m, str):
                self.text.setdefault(channel.label, []).append(m)
            else:
                self.binary.append(bytes(m))
            self.changed.set()

    async def until(self, pred, timeout):
        end = time.monotonic() + timeout
        while not pred():
            self.changed.clear()
            left = end - time.monotonic()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                return False
        return True


async def opened(channel, timeout):
    if channel.readyState == "open":
        return
    ev = asyncio.Event()
    channel.on("open", ev.set)
    await asyncio.wait_for(ev.wait(), timeout)


async def run(args):
    base = args.base.rstrip("/")
    result = {"aiortc": aiortc.__version__, "room": args.room}
    path = f"/rooms/{args.room}/join"
    base_b = (args.base_b or base).rstrip("/")
    a = Peer(base, path)
    b = Peer(base_b, f"/whep/{args.room}" if args.b_whep else path)
    inbox_a, inbox_b = Inbox(a), Inbox(b)
    chat_a = a.pc.createDataChannel("chat")
    chat_b = b.pc.createDataChannel("chat")
    lossy_a = a.pc.createDataChannel("lossy", ordered=False, maxRetransmits=0)
    watched = [(chat_a, inbox_a), (chat_b, inbox_b), (lossy_a, inbox_a)]
    agreed = []
    if args.negotiated is not None:
        agreed = [p.pc.createDataChannel("agreed", negotiated=True, id=args.negotiated) for p in (a, b)]
        watched += list(zip(agreed, (inbox_a, inbox_b)))
    for ch, inbox in watched:
        inbox.watch(ch)
    # Where a run stopped, and the peers' states then, for a failure's report.
    PROGRESS.update(result=result, peers=(a, b))
    # The room is made by the first peer; the second joins it.
    PROGRESS["stage"] = "signal"
    for p in (a, b):
        await p.signal()
    result["b_location"] = b.location
    PROGRESS["stage"] = "connect"
    await asyncio.wait_for(asyncio.gather(a.connected.wait(), b.connected.wait()), args.timeout)
    result["worker_participants"] = await worker_participants(base)
    result["answer_has_sctp"] = "m=application" in (a.answer or "") and "a=sctp-port:" in a.answer
    PROGRESS["stage"] = "open channels"
    for ch in [chat_a, chat_b, lossy_a] + agreed:
        await opened(ch, args.timeout)
    PROGRESS["stage"] = "exchange"
    n = args.messages
    t0 = time.monotonic()
    for i in range(n):
        chat_a.send(f"a-{i}")
        chat_b.send(f"b-{i}")
    got = await asyncio.gather(
        inbox_b.until(lambda: len(inbox_b.text.get("chat", [])) >= n, args.timeout),
        inbox_a.until(lambda: len(inbox_a.text.get("chat", [])) >= n, args.timeout),
    )
    result["exchange_s"] = round(time.monotonic() - t0, 3)
    result["received"] = [len(inbox_b.text.get("chat", [])), len(inbox_a.text.get("chat", []))]
    result["in_order"] = [inbox_b.text.get("chat") == [f"a-{i}" for i in range(n)],
                          inbox_a.text.get("chat") == [f"b-{i}" for i in range(n)]]
    blob = bytes((i * 7) % 251 for i in range(args.binary))
    chat_a.send(blob)
    result["binary_ok"] = await inbox_b.until(lambda: blob in inbox_b.binary, args.timeout)
    for i in range(10):
        lossy_a.send(f"lossy-{i}")
    await inbox_b.until(lambda: len(inbox_b.text.get("lossy", [])) >= 10, 5)
    result["lossy_received"] = len(inbox_b.text.get("lossy", []))
    result["lossy_channel_at_b"] = inbox_b.channels.get("lossy")
    if agreed:
        result["negotiated"] = await negotiated_exchange(agreed, (inbox_a, inbox_b), args.timeout)
    PROGRESS["stage"] = "server message"
    if args.server_message:
        result["server_message"] = await server_message(base, args.room, (inbox_a, inbox_b), args.timeout)
    result["delete"] = [await a.leave(), await b.leave()]
    result["ok"] = (all(got) and all(result["in_order"]) and result["binary_ok"]
                    and result["answer_has_sctp"] and result["lossy_received"] > 0
                    and result["lossy_channel_at_b"] == {"ordered": False, "max_retransmits": 0}
                    and result["delete"] == [200, 200]
                    and (not args.server_message or result["server_message"]["received"] == [True, True])
                    and (not agreed or result["negotiated"]["in_order"] == [True, True]))
    return result


async def negotiated_exchange(agreed, inboxes, timeout):
    """100 messages each way on the negotiated channels: how many each peer received on its own,
    and whether in order."""
    for i in range(100):
        agreed[0].send(f"agreed-a-{i}")
        agreed[1].send(f"agreed-b-{i}")
    inbox_a, inbox_b = inboxes
    await asyncio.gather(
        inbox_b.until(lambda: len(inbox_b.text.get("agreed", [])) >= 100, timeout),
        inbox_a.until(lambda: len(inbox_a.text.get("agreed", [])) >= 100, timeout),
    )
    got_b, got_a = inbox_b.text.get("agreed", []), inbox_a.text.get("agreed", [])
    return {
        "received": [len(got_b), len(got_a)],
        "in_order": [got_b == [f"agreed-a-{i}" for i in range(100)],
                     got_a == [f"agreed-b-{i}" for i in range(100)]],
        "ids": [ch.id for ch in agreed],
    }


async def worker_participants(base):
    """The gateway's participants per worker (`secrelay_worker_participants`, with the admin key in
    SECRELAY_ADMIN_KEY): where the peers joined. Empty without the key."""
    admin = os.environ.get("SECRELAY_ADMIN_KEY")
    if not admin:
        return []
    status, _, body = await asyncio.to_thread(
        http, "GET", f"{base}/metrics", None, None, {"Authorization": f"Bearer {admin}"})
    if status != 200:
        return []
    series = [line for line in body.decode().splitlines() if line.startswith("secrelay_worker_participants{")]
    return [int(float(line.rsplit(" ", 1)[1])) for line in series]


async def server_message(base, room, inboxes, timeout):
    """One message from the gateway's API to the whole room: its answer, and whether each peer
    received it on its `chat` channel."""
    admin = os.environ.get("SECRELAY_ADMIN_KEY", "")
    body = json.dumps({"label": "chat", "text": "from-the-server"}).encode()
    status, _, answer = await asyncio.to_thread(
        http, "POST", f"{base}/api/rooms/{room}/data", body, "application/json",
        {"Authorization": f"Bearer {admin}"})
    got = []
    for inbox in inboxes:
        got.append(await inbox.until(lambda i=inbox: "from-the-server" in i.text.get("chat", []), timeout))
    return {"status": status, "answer": answer.decode(errors="replace"), "received": got}


PROGRESS = {"stage": "start"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--room", default="aiortc-data")
    ap.add_argument("--messages", type=int, default=500)
    ap.add_argument("--binary", type=int, default=60_000)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--b-whep", action="store_true", help="the second peer joins with WHEP")
    ap.add_argument("--base-b", help="where the second peer signals (default: --base)")
    ap.add_argument("--negotiated", type=int, help="the stream id of a negotiated channel both peers make")
    ap.add_argument("--server-message", action="store_true",
                    help="send one message to the room through the API; both peers must get it")
    args = ap.parse_args()
    try:
        result = asyncio.run(run(args))
    except Exception as e:
        peers = PROGRESS.get("peers") or ()
        result = {"ok": False, "error": f"{type(e).__name__}: {e}",
                  "stage": PROGRESS.get("stage"), "partial": PROGRESS.get("result"),
                  "peer_states": [[p.pc.connectionState, p.pc.iceConnectionState] for p in peers]}
    print(json.dumps(result), flush=True)
    sys.exit(0 if result.get("ok") else 1)


if __name__ == "__main__":
    main()
