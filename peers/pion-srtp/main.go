// Command pion-srtp times pion/srtp protect and unprotect per RTP packet, for secrelay's lab
// (`secrelay lab srtp`), with the same method as the lab's in-process stacks: chunks of 64
// packets with rising sequence numbers, prepared outside the timing (plaintext copied in for
// protect; packets protected by the same library for unprotect), a warm-up, then timed runs
// whose median and interquartile spread are reported.
//
// Usage: pion-srtp --profiles A,B --sizes 100,172,1200 [--runs N --run-ms M --warmup-ms W]
// Output: one JSON object per line per (profile, size).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pion/srtp/v3"
)

const chunk = 64
var ssrc uint32 = 0x5EC2E1A7

var profiles = map[string]srtp.ProtectionProfile{
	"AES_CM_128_HMAC_SHA1_80": srtp.ProtectionProfileAes128CmHmacSha1_80,
	"AES_CM_128_HMAC_SHA1_32": srtp.ProtectionProfileAes128CmHmacSha1_32,
	"AES_256_CM_HMAC_SHA1_80": srtp.ProtectionProfileAes256CmHmacSha1_80,
	"AES_256_CM_HMAC_SHA1_32": srtp.ProtectionProfileAes256CmHmacSha1_32,
	"AEAD_AES_128_GCM":        srtp.ProtectionProfileAeadAes128Gcm,
	"AEAD_AES_256_GCM":        srtp.ProtectionProfileAeadAes256Gcm,
	"NULL_HMAC_SHA1_80":       srtp.ProtectionProfileNullHmacSha1_80,
}

type result struct {
	Profile     string  `json:"profile"`
	Size        int     `json:"size"`
	ProtectNs   float64 `json:"protect_ns,omitempty"`
	UnprotectNs float64 `json:"unprotect_ns,omitempty"`
	SpreadPct   float64 `json:"protect_spread_pct,omitempty"`
	Error       string  `json:"error,omitempty"`
}

type bench struct {
	runs   int
	runDur time.Duration
	warmup time.Duration
}

type pair struct {
	tx, rx *srtp.Context
}

func newPair(p srtp.ProtectionProfile) (*pair, error) {
	keyLen, err := p.KeyLen()
	if err != nil {
		return nil, err
	}
	saltLen, err := p.SaltLen()
	if err != nil {
		return nil, err
	}
	key := make([]byte, keyLen)
	salt := make([]byte, saltLen)
	for i := range key {
		key[i] = 0x42
	}
	for i := range salt {
		salt[i] = 0x17
	}
	tx, err := srtp.CreateContext(key, salt, p)
	if err != nil {
		return nil, err
	}
	rx, err := srtp.CreateContext(key, salt, p, srtp.SRTPReplayProtection(1024))
	if err != nil {
		return nil, err
	}
	return &pair{tx, rx}, nil
}

type chunkBufs struct {
	plain []byte
	in    [][]byte
	out   [][]byte
	seq   uint16
}

func newChunk(size int) *chunkBufs {
	c := &chunkBufs{plain: make([]byte, size)}
	c.plain[0] = 0x80
	c.plain[8], c.plain[9], c.plain[10], c.plain[11] = byte(ssrc>>24), byte(ssrc>>16), byte(ssrc>>8), byte(ssrc)
	for i := 12; i < size; i++ {
		c.plain[i] = byte(i - 12)
	}
	for i := 0; i < chunk; i++ {
		c.in = append(c.in, make([]byte, size, size+64))
		c.out = append(c.out, make([]byte, 0, size+64))
	}
	return c
}

func (c *chunkBufs) fill() {
	for i := range c.in {
		c.in[i] = c.in[i][:len(c.plain)]
		copy(c.in[i], c.plain)
		c.in[i][2], c.in[i][3] = byte(c.seq>>8), byte(c.seq)
		c.seq++
	}
}

// timeChunks runs prepare (untimed) then process (timed) until min has been spent timing,
// and returns ns per packet.
func timeChunks(min time.Duration, prepare func() error, process func() error) (float64, error) {
	var spent time.Duration
	ops := 0
	for spent < min || ops == 0 {
		if err := prepare(); err != nil {
			return 0, err
		}
		start := time.Now()
		if err := process(); err != nil {
			return 0, err
		}
		spent += time.Since(start)
		ops += chunk
	}
	return float64(spent.Nanoseconds()) / float64(ops), nil
}

func (b bench) series(prepare func() error, process func() error) (median, spread float64, err error) {
	if _, err = timeChunks(b.warmup, prepare, process); err != nil {
		return
	}
	samples := make([]float64, 0, b.runs)
	for i := 0; i < b.runs; i++ {
		ns, e := timeChunks(b.runDur, prepare, process)
		if e != nil {
			return 0, 0, e
		}
		samples = append(samples, ns)
	}
	sort.Float64s(samples)
	q := func(p float64) float64 {
		x := p * float64(len(samples)-1)
		lo := int(x)
		hi := lo
		if float64(lo) < x {
			hi = lo + 1
		}
		return samples[lo] + (samples[hi]-samples[lo])*(x-float64(lo))
	}
	median = q(0.5)
	spread = (q(0.75) - q(0.25)) / median * 100
	return
}

func measure(b bench, p srtp.ProtectionProfile, size int) (protectNs, unprotectNs, spread float64, err error) {
	pr, err := newPair(p)
	if err != nil {
		return
	}
	c := newChunk(size)
	protect := func() error {
		for i := range c.in {
			out, e := pr.tx.EncryptRTP(c.out[i][:0], c.in[i], nil)
			if e != nil {
				return e
			}
			c.out[i] = out
		}
		return nil
	}
	protectNs, spread, err = b.series(func() error { c.fill(); return nil }, protect)
	if err != nil {
		return
	}
	// A fresh pair: the sender above ran far ahead of the receiver.
	if pr, err = newPair(p); err != nil {
		return
	}
	dec := make([][]byte, chunk)
	for i := range dec {
		dec[i] = make([]byte, 0, size+64)
	}
	unprotectNs, _, err = b.series(func() error { c.fill(); return protect() }, func() error {
		for i := range c.out {
			out, e := pr.rx.DecryptRTP(dec[i][:0], c.out[i], nil)
			if e != nil {
				return e
			}
			dec[i] = out
		}
		return nil
	})
	return
}

func main() {
	profileList := flag.String("profiles", "AES_CM_128_HMAC_SHA1_80,AEAD_AES_128_GCM", "SRTP profiles, comma-separated (SDP names)")
	sizeList := flag.String("sizes", "100,172,1200", "RTP packet sizes in bytes, comma-separated")
	runs := flag.Int("runs", 11, "timed runs per measurement")
	runMs := flag.Int("run-ms", 100, "length of one run in ms")
	warmupMs := flag.Int("warmup-ms", 200, "warm-up in ms")
	flag.Parse()
	if *runs < 1 || *runMs < 1 || *warmupMs < 0 {
		fmt.Fprintln(os.Stderr, "pion-srtp: --runs and --run-ms must be positive")
		os.Exit(2)
	}
	b := bench{runs: *runs, runDur: time.Duration(*runMs) * time.Millisecond, warmup: time.Duration(*warmupMs) * time.Millisecond}
	var sizes []int
	for _, s := range strings.Split(*sizeList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 12 || n > 65000 {
			fmt.Fprintf(os.Stderr, "pion-srtp: bad --sizes entry %q\n", s)
			os.Exit(2)
		}
		sizes = append(sizes, n)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, name := range strings.Split(*profileList, ",") {
		name = strings.TrimSpace(name)
		for _, size := range sizes {
			r := result{Profile: name, Size: size}
			p, ok := profiles[name]
			if !ok {
				r.Error = "pion/srtp has no profile " + name
			} else if pn, un, sp, err := measure(b, p, size); err != nil {
				r.Error = err.Error()
			} else {
				r.ProtectNs, r.UnprotectNs, r.SpreadPct = pn, un, sp
			}
			if err := enc.Encode(r); err != nil {
				os.Exit(1)
			}
		}
	}
}
