// secrelay's XDP filter: drops datagrams to the gateway's media ports from sources the gateway
// has not admitted, before the kernel's socket layer sees them.
//
// Built by scripts/build-bpf (clang -O2 -g -target bpf); the object is committed beside this
// file (filter.bpf.o) and embedded by the secrelay-xdp crate, whose tests check that it is
// what this source compiles to.
//
// Every UDP datagram (IPv4 or IPv6, no VLAN tag) is looked up by its destination port in
// `ports`:
//   PORT_NONE   not a media port: passed, not counted;
//   PORT_CLOSED a media port with admitted sources only: passed when (source address, source
//               port, destination port) is in `allowed`, dropped otherwise;
//   PORT_OPEN   a port whose leg takes media from any source (an SDES leg authenticates it, a
//               leg still latching takes its first source): passed;
//   PORT_SHARED the shared WebRTC port: STUN (ICE checks, which the gateway authenticates) is
//               passed from anyone, anything else only from admitted sources.
// What is passed and dropped is counted per CPU in `counts` (the gateway exports the sums).
//
// The AF_XDP media path: a datagram to a media port that passes goes to the AF_XDP socket in
// `xsks` of the interface and receive queue it came in on, when there is one there (the kernel
// lets a socket take only its own queue's frames), and to the socket layer otherwise. Each
// interface the gateway attached the program to has a slot in `ifaces` (by its index); its
// sockets sit in `xsks` at slot * MAX_QUEUES + queue. A leg's
// port may name the queue whose socket reads it in `owners` (queue + 1; 0: any queue's): its
// datagrams on another queue go to the socket layer, where the leg's own socket reads them. A
// datagram behind IPv6 extension headers goes to the socket layer too (the AF_XDP path reads
// UDP right after the IP header only).
// A fragment after the first carries no UDP header: it is passed and counted, the socket layer
// and the gateway's own checks then deal with the datagram. IPv6 extension headers before the
// UDP header are stepped over (up to four; more, and the datagram is dropped as not admitted).

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static long (*bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)BPF_FUNC_redirect_map;

#define MAX_EXTENSIONS 4
#define MAX_QUEUES 64
#define MAX_IFACES 8

enum {
    PORT_NONE = 0,
    PORT_CLOSED = 1,
    PORT_OPEN = 2,
    PORT_SHARED = 3,
};

enum {
    COUNT_DROPPED = 0,
    COUNT_ADMITTED = 1,
    COUNT_OPEN = 2,
    COUNT_STUN = 3,
    COUNT_FRAGMENT = 4,
    COUNT_XSK = 5,
    COUNT_MAX = 8,
};

struct source {
    __u8 addr[16];   // IPv6, or IPv4 mapped (::ffff:a.b.c.d)
    __u16 sport;     // network byte order, as in the header
    __u16 dport;     // network byte order
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 262144);
    __type(key, struct source);
    __type(value, __u8);
} allowed SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 65536);
    __type(key, __u32);
    __type(value, __u8);
} ports SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, MAX_IFACES);
    __type(key, __u32);
    __type(value, __u32);
} ifaces SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_XSKMAP);
    __uint(max_entries, MAX_IFACES * MAX_QUEUES);
    __type(key, __u32);
    __type(value, __u32);
} xsks SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 65536);
    __type(key, __u32);
    __type(value, __u32);
} owners SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, COUNT_MAX);
    __type(key, __u32);
    __type(value, __u64);
} counts SEC(".maps");

static __always_inline int count(__u32 what, int verdict)
{
    __u64 *n = bpf_map_lookup_elem(&counts, &what);
    if (n)
        *n += 1;
    return verdict;
}

// STUN (RFC 5389): the first two bits zero, the magic cookie at byte 4.
static __always_inline int is_stun(struct udphdr *udp, void *end)
{
    __u8 *p = (__u8 *)(udp + 1);
    if ((void *)(p + 20) > end)
        return 0;
    return (p[0] & 0xc0) == 0 && p[4] == 0x21 && p[5] == 0x12 && p[6] == 0xa4 && p[7] == 0x42;
}

// A datagram to media port `port` that passes: to the AF_XDP socket of its interface and queue
// when there is one and the port is not another queue's, to the socket layer otherwise.
static __always_inline int deliver(struct xdp_md *ctx, __u32 port, int direct)
{
    if (!direct)
        return XDP_PASS;
    __u32 queue = ctx->rx_queue_index;
    if (queue >= MAX_QUEUES)
        return XDP_PASS;
    __u32 ifindex = ctx->ingress_ifindex;
    __u32 *slot = bpf_map_lookup_elem(&ifaces, &ifindex);
    if (!slot || *slot >= MAX_IFACES)
        return XDP_PASS;
    __u32 *owner = bpf_map_lookup_elem(&owners, &port);
    if (owner && *owner && *owner != queue + 1)
        return XDP_PASS;
    int verdict = bpf_redirect_map(&xsks, *slot * MAX_QUEUES + queue, XDP_PASS);
    if (verdict == XDP_REDIRECT)
        count(COUNT_XSK, 0);
    return verdict;
}

static __always_inline int judge(struct xdp_md *ctx, struct source *key, struct udphdr *udp,
                                 void *end, int direct)
{
    __u32 port = __builtin_bswap16(udp->dest);
    __u8 *policy = bpf_map_lookup_elem(&ports, &port);
    if (!policy || *policy == PORT_NONE)
        return XDP_PASS;
    if (*policy == PORT_OPEN)
        return count(COUNT_OPEN, deliver(ctx, port, direct));
    if (*policy == PORT_SHARED && is_stun(udp, end))
        return count(COUNT_STUN, deliver(ctx, port, direct));
    key->sport = udp->source;
    key->dport = udp->dest;
    if (bpf_map_lookup_elem(&allowed, key))
        return count(COUNT_ADMITTED, deliver(ctx, port, direct));
    return count(COUNT_DROPPED, XDP_DROP);
}

SEC("xdp")
int secrelay_filter(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    struct source key = {};

    if ((void *)(eth + 1) > end)
        return XDP_PASS;
    if (eth->h_proto == __builtin_bswap16(ETH_P_IP)) {
        struct iphdr *ip = (void *)(eth + 1);
        if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_UDP)
            return XDP_PASS;
        if (ip->frag_off & __builtin_bswap16(0x1fff))
            return count(COUNT_FRAGMENT, XDP_PASS);
        __u32 hlen = ip->ihl * 4;
        if (hlen < sizeof(*ip))
            return XDP_PASS;
        struct udphdr *udp = (void *)ip + hlen;
        if ((void *)(udp + 1) > end)
            return XDP_PASS;
        key.addr[10] = 0xff;
        key.addr[11] = 0xff;
        __builtin_memcpy(&key.addr[12], &ip->saddr, 4);
        return judge(ctx, &key, udp, end, 1);
    }
    if (eth->h_proto == __builtin_bswap16(ETH_P_IPV6)) {
        struct ipv6hdr *ip6 = (void *)(eth + 1);
        if ((void *)(ip6 + 1) > end)
            return XDP_PASS;
        __u8 next = ip6->nexthdr;
        __u8 *at = (void *)(ip6 + 1);
        // Extension headers before UDP are stepped over (a few), so that none hides a media
        // datagram from the filter; a datagram with more is judged as not admitted.
        for (int i = 0; i < MAX_EXTENSIONS && next != IPPROTO_UDP; i++) {
            if ((void *)(at + 8) > end)
                return XDP_PASS;
            if (next == IPPROTO_FRAGMENT) {
                if (((at[2] << 8) | at[3]) & 0xfff8)
                    return count(COUNT_FRAGMENT, XDP_PASS);
                next = at[0];
                at += 8;
            } else if (next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING ||
                       next == IPPROTO_DSTOPTS) {
                next = at[0];
                at += (at[1] + 1) * 8;
            } else {
                return XDP_PASS;
            }
        }
        if (next != IPPROTO_UDP)
            return count(COUNT_DROPPED, XDP_DROP);
        struct udphdr *udp = (void *)at;
        if ((void *)(udp + 1) > end)
            return XDP_PASS;
        __builtin_memcpy(key.addr, &ip6->saddr, 16);
        return judge(ctx, &key, udp, end, at == (__u8 *)(ip6 + 1));
    }
    return XDP_PASS;
}

char LICENSE[] SEC("license") = "Apache-2.0";
