package main

// The --bench-in-memory mode: both ends of a DTLS 1.2 handshake in this one Go process over an
// in-memory datagram pipe (as rustls-bench does for TLS), timed per side, for secrelay's
// handshake lab (`secrelay lab handshake --in-memory`).
//
//	pion-dtls --bench-in-memory --handshakes N [--cookies=true|false] [--srtp LIST]
//
// Every handshake: fresh client and server connections, mutual authentication with ECDSA P-256
// self-signed certificates (generated once, before timing), ECDHE on P-256 only, cipher
// TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, extended master secret, use_srtp, and the
// EXTRACTOR-dtls_srtp block exported on both sides and compared (inside the timing).
//
// Per-side time: the process runs with GOMAXPROCS=1, so only one goroutine runs at a time and
// a side runs until it blocks waiting for the peer's next flight. The clock is charged to the
// side that last received a datagram (switching when a side's read returns); the connection's
// construction is charged to its own side. Goroutine scheduling between the two sides is thus
// charged to the side that runs next.
//
// One JSON line goes to stdout: medians over the handshakes (microseconds) and the figures
// around them.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/pion/dtls/v3"
	dtlselliptic "github.com/pion/dtls/v3/pkg/crypto/elliptic"
	dtlsnet "github.com/pion/dtls/v3/pkg/net"
	"github.com/pion/transport/v5/dpipe"
)

const (
	sideClient = 0
	sideServer = 1
)

// sideClock charges wall time to the side that currently runs.
type sideClock struct {
	mu    sync.Mutex
	owner int
	since time.Time
	spent [2]time.Duration
}

func (c *sideClock) switchTo(side int) {
	now := time.Now()
	c.mu.Lock()
	c.spent[c.owner] += now.Sub(c.since)
	c.owner = side
	c.since = now
	c.mu.Unlock()
}

// timedConn switches the clock to its side whenever a read returns a datagram.
type timedConn struct {
	net.Conn
	side  int
	clock *sideClock
}

func (t *timedConn) Read(b []byte) (int, error) {
	n, err := t.Conn.Read(b)
	if err == nil {
		t.clock.switchTo(t.side)
	}
	return n, err
}

type benchResult struct {
	Stack            string  `json:"stack"`
	Version          string  `json:"version"`
	Go               string  `json:"go"`
	Gomaxprocs       int     `json:"gomaxprocs"`
	Cookies          bool    `json:"cookies"`
	Handshakes       int     `json:"handshakes"`
	SrtpProfile      string  `json:"srtp_profile"`
	CipherSuite      string  `json:"cipher_suite"`
	TotalUsMedian    float64 `json:"total_us_median"`
	ServerUsMedian   float64 `json:"server_us_median"`
	ClientUsMedian   float64 `json:"client_us_median"`
	TotalUsP25       float64 `json:"total_us_p25"`
	TotalUsP75       float64 `json:"total_us_p75"`
	HandshakesPerSec float64 `json:"handshakes_per_s"`
}

func selfSigned(cn string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-24 * time.Hour),
		NotAfter:     time.Now().Add(30 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func pionVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/pion/dtls/v3" {
				return d.Version
			}
		}
	}
	return "unknown"
}

func median(v []float64) float64 { return quantile(v, 0.5) }

func quantile(v []float64, q float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	i := int(q * float64(len(s)-1))
	return s[i]
}

// oneHandshake runs one handshake over a fresh pipe; returns total, client and server time.
func oneHandshake(srvOpts []dtls.ServerOption, cliOpts []dtls.ClientOption, keyLen int) (time.Duration, time.Duration, time.Duration, string, string, error) {
	a, b := dpipe.Pipe()
	clock := &sideClock{}
	ca := &timedConn{Conn: a, side: sideClient, clock: clock}
	sb := &timedConn{Conn: b, side: sideServer, clock: clock}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	start := time.Now()
	clock.owner, clock.since = sideServer, start
	srv, err := dtls.ServerWithOptions(dtlsnet.PacketConnFromConn(sb), a.LocalAddr(), srvOpts...)
	if err != nil {
		return 0, 0, 0, "", "", fmt.Errorf("server: %w", err)
	}
	clock.switchTo(sideClient)
	cli, err := dtls.ClientWithOptions(dtlsnet.PacketConnFromConn(ca), b.LocalAddr(), cliOpts...)
	if err != nil {
		return 0, 0, 0, "", "", fmt.Errorf("client: %w", err)
	}
	var wg sync.WaitGroup
	var srvErr, cliErr error
	var srvKM, cliKM []byte
	wg.Add(2)
	go func() {
		defer wg.Done()
		if srvErr = srv.HandshakeContext(ctx); srvErr == nil {
			srvKM, srvErr = export(srv, keyLen)
		}
	}()
	go func() {
		defer wg.Done()
		if cliErr = cli.HandshakeContext(ctx); cliErr == nil {
			cliKM, cliErr = export(cli, keyLen)
		}
	}()
	wg.Wait()
	clock.switchTo(clock.owner)
	total := time.Since(start)
	if srvErr != nil || cliErr != nil {
		return 0, 0, 0, "", "", fmt.Errorf("handshake: server %v, client %v", srvErr, cliErr)
	}
	if string(srvKM) != string(cliKM) {
		return 0, 0, 0, "", "", errors.New("keying material differs between the sides")
	}
	profile := ""
	if id, ok := srv.SelectedSRTPProtectionProfile(); ok {
		if p, ok := profileByID(id); ok {
			profile = p.name
		}
	}
	suite := ""
	if st, ok := srv.ConnectionState(); ok {
		suite = fmt.Sprintf("0x%04x", uint16(st.CipherSuiteID))
	}
	// Not timed: closing both ends.
	_ = cli.Close()
	_ = srv.Close()
	return total, clock.spent[sideClient], clock.spent[sideServer], profile, suite, nil
}

func export(c *dtls.Conn, keyLen int) ([]byte, error) {
	st, ok := c.ConnectionState()
	if !ok {
		return nil, errors.New("no connection state")
	}
	return st.ExportKeyingMaterial(exporterLabel, nil, keyLen)
}

func runBench(args []string) error {
	fs := flag.NewFlagSet("pion-dtls --bench-in-memory", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	n := fs.Int("handshakes", 100, "handshakes to time")
	cookies := fs.Bool("cookies", true, "server does the HelloVerifyRequest cookie exchange")
	srtpList := fs.String("srtp", "SRTP_AES128_CM_SHA1_80", "comma-separated SRTP profiles")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 {
		return errors.New("--handshakes must be at least 1")
	}
	runtime.GOMAXPROCS(1)
	srtp, err := parseProfiles(*srtpList)
	if err != nil {
		return err
	}
	first, _ := profileByID(srtp[0])
	keyLen := 2 * (first.keyLen + first.saltLen)
	srvCert, err := selfSigned("pion-bench-server")
	if err != nil {
		return err
	}
	cliCert, err := selfSigned("pion-bench-client")
	if err != nil {
		return err
	}
	shared := func(cert tls.Certificate) []dtls.Option {
		return []dtls.Option{
			dtls.WithCertificates(cert),
			dtls.WithSRTPProtectionProfiles(srtp...),
			dtls.WithExtendedMasterSecret(dtls.RequireExtendedMasterSecret),
			dtls.WithInsecureSkipVerify(true),
			dtls.WithCipherSuites(dtls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
			dtls.WithEllipticCurves(dtlselliptic.P256),
			dtls.WithMTU(1150),
		}
	}
	var srvOpts []dtls.ServerOption
	for _, o := range shared(srvCert) {
		srvOpts = append(srvOpts, o)
	}
	srvOpts = append(srvOpts, dtls.WithClientAuth(dtls.RequireAnyClientCert), dtls.WithInsecureSkipVerifyHello(!*cookies))
	var cliOpts []dtls.ClientOption
	for _, o := range shared(cliCert) {
		cliOpts = append(cliOpts, o)
	}
	// Warm-up, not reported.
	warm := *n / 10
	if warm < 3 {
		warm = 3
	}
	for i := 0; i < warm; i++ {
		if _, _, _, _, _, err := oneHandshake(srvOpts, cliOpts, keyLen); err != nil {
			return err
		}
	}
	var totals, clients, servers []float64
	var profile, suite string
	for i := 0; i < *n; i++ {
		t, c, s, p, cs, err := oneHandshake(srvOpts, cliOpts, keyLen)
		if err != nil {
			return err
		}
		totals = append(totals, float64(t.Nanoseconds())/1e3)
		clients = append(clients, float64(c.Nanoseconds())/1e3)
		servers = append(servers, float64(s.Nanoseconds())/1e3)
		profile, suite = p, cs
	}
	med := median(totals)
	printJSON(benchResult{
		Stack:            "pion/dtls",
		Version:          pionVersion(),
		Go:               runtime.Version(),
		Gomaxprocs:       runtime.GOMAXPROCS(0),
		Cookies:          *cookies,
		Handshakes:       *n,
		SrtpProfile:      profile,
		CipherSuite:      suite,
		TotalUsMedian:    med,
		ServerUsMedian:   median(servers),
		ClientUsMedian:   median(clients),
		TotalUsP25:       quantile(totals, 0.25),
		TotalUsP75:       quantile(totals, 0.75),
		HandshakesPerSec: 1e6 / med,
	})
	return nil
}
