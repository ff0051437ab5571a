// Command pion-dtls is a DTLS-SRTP interop peer for secrelay's tests, built on
// github.com/pion/dtls/v3.
//
//	pion-dtls server --listen 127.0.0.1:PORT --cert C.pem --key K.pem --srtp LIST [--handshakes N]
//	pion-dtls client --connect 127.0.0.1:PORT --cert C.pem --key K.pem --srtp LIST
//	pion-dtls --bench-in-memory --handshakes N [--cookies=false] [--srtp LIST]   (see bench.go)
//
// Both roles use mutual authentication (the server requires a client certificate) and accept
// any certificate, self-signed included: the caller compares fingerprints. The extended master
// secret (RFC 7627) is required.
//
// After each handshake one JSON line goes to stdout:
//
//	{"srtp_profile":"SRTP_…","keying_material":"<hex>","peer_certificate_sha256":"<hex>"}
//
// with the EXTRACTOR-dtls_srtp export (RFC 5764 §4.2) for the negotiated profile. The program
// then waits for the peer's close_notify (at most --close-wait) and closes. A failure prints
// {"error":"…"} instead and the exit code is 1. Diagnostics (including the server's
// "listening ADDR" line, printed once its socket is bound) go to stderr.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/pion/dtls/v3"
)

// exporterLabel is the DTLS-SRTP exporter label (RFC 5764 §4.2).
const exporterLabel = "EXTRACTOR-dtls_srtp"

// srtpProfile maps a profile's OpenSSL name to pion's value and its key and salt lengths.
type srtpProfile struct {
	name    string
	id      dtls.SRTPProtectionProfile
	keyLen  int
	saltLen int
}

var profiles = []srtpProfile{
	{"SRTP_AES128_CM_SHA1_80", dtls.SRTP_AES128_CM_HMAC_SHA1_80, 16, 14},
	{"SRTP_AES128_CM_SHA1_32", dtls.SRTP_AES128_CM_HMAC_SHA1_32, 16, 14},
	{"SRTP_AEAD_AES_128_GCM", dtls.SRTP_AEAD_AES_128_GCM, 16, 12},
	{"SRTP_AEAD_AES_256_GCM", dtls.SRTP_AEAD_AES_256_GCM, 32, 12},
}

func profileByName(name string) (srtpProfile, bool) {
	for _, p := range profiles {
		if p.name == name {
			return p, true
		}
	}
	return srtpProfile{}, false
}

func profileByID(id dtls.SRTPProtectionProfile) (srtpProfile, bool) {
	for _, p := range profiles {
		if p.id == id {
			return p, true
		}
	}
	return srtpProfile{}, false
}

type options struct {
	role       string
	addr       string
	certPath   string
	keyPath    string
	srtp       string
	handshakes int
	timeout    time.Duration
	closeWait  time.Duration
}

type result struct {
	SrtpProfile           string `json:"srtp_profile"`
	KeyingMaterial        string `json:"keying_material"`
	PeerCertificateSHA256 string `json:"peer_certificate_sha256"`
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage:\n"+
		"  pion-dtls server --listen 127.0.0.1:PORT --cert PEM --key PEM [--srtp LIST] [--handshakes N]\n"+
		"  pion-dtls client --connect 127.0.0.1:PORT --cert PEM --key PEM [--srtp LIST]\n"+
		"options (both roles): --timeout DUR (per handshake, default 10s), --close-wait DUR (default 5s)\n"+
		"SRTP profiles: SRTP_AES128_CM_SHA1_80, SRTP_AEAD_AES_128_GCM, SRTP_AEAD_AES_256_GCM, SRTP_AES128_CM_SHA1_32\n")
}

func parseArgs(args []string) (options, error) {
	var o options
	if len(args) < 1 {
		return o, errors.New("missing role (server or client)")
	}
	o.role = args[0]
	fs := flag.NewFlagSet("pion-dtls "+o.role, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = usage
	listen := fs.String("listen", "", "server: address to listen on (127.0.0.1:PORT; port 0 picks one)")
	connect := fs.String("connect", "", "client: server address (127.0.0.1:PORT)")
	fs.StringVar(&o.certPath, "cert", "", "certificate PEM")
	fs.StringVar(&o.keyPath, "key", "", "private key PEM (PKCS#8)")
	fs.StringVar(&o.srtp, "srtp", "SRTP_AES128_CM_SHA1_80", "comma-separated SRTP profiles, in preference order")
	fs.IntVar(&o.handshakes, "handshakes", 1, "server: clients to serve one after another")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "bound on each handshake")
	fs.DurationVar(&o.closeWait, "close-wait", 5*time.Second, "bound on the wait for the peer's close_notify")
	if err := fs.Parse(args[1:]); err != nil {
		return o, err
	}
	if fs.NArg() != 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch o.role {
	case "server":
		if *listen == "" || *connect != "" {
			return o, errors.New("server needs --listen and no --connect")
		}
		if o.handshakes < 1 {
			return o, errors.New("--handshakes must be at least 1")
		}
		o.addr = *listen
	case "client":
		if *connect == "" || *listen != "" {
			return o, errors.New("client needs --connect and no --listen")
		}
		if o.handshakes != 1 {
			return o, errors.New("--handshakes is for the server")
		}
		o.addr = *connect
	default:
		return o, fmt.Errorf("unknown role %q (server or client)", o.role)
	}
	if o.certPath == "" || o.keyPath == "" {
		return o, errors.New("--cert and --key are required")
	}
	return o, nil
}

func parseProfiles(list string) ([]dtls.SRTPProtectionProfile, error) {
	var ids []dtls.SRTPProtectionProfile
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		p, ok := profileByName(name)
		if !ok {
			return nil, fmt.Errorf("unknown SRTP profile %q", name)
		}
		ids = append(ids, p.id)
	}
	if len(ids) == 0 {
		return nil, errors.New("no SRTP profiles given")
	}
	return ids, nil
}

// printJSON writes one JSON line to stdout (unbuffered in Go, so it leaves at once).
func printJSON(v any) {
	line, err := json.Marshal(v)
	if err != nil {
		line = []byte(`{"error":"json encoding failed"}`)
	}
	fmt.Fprintln(os.Stdout, string(line))
}

func printError(err error) {
	printJSON(map[string]string{"error": err.Error()})
}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help") {
		usage()
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "--bench-in-memory" {
		if err := runBench(os.Args[2:]); err != nil {
			printError(err)
			os.Exit(1)
		}
		return
	}
	o, err := parseArgs(os.Args[1:])
	if err != nil {
		printError(err)
		usage()
		os.Exit(1)
	}
	if err := run(o); err != nil {
		printError(err)
		os.Exit(1)
	}
}

func run(o options) error {
	cert, err := tls.LoadX509KeyPair(o.certPath, o.keyPath)
	if err != nil {
		return fmt.Errorf("loading certificate: %w", err)
	}
	srtp, err := parseProfiles(o.srtp)
	if err != nil {
		return err
	}
	addr, err := net.ResolveUDPAddr("udp", o.addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", o.addr, err)
	}
	shared := []dtls.Option{
		dtls.WithCertificates(cert),
		dtls.WithSRTPProtectionProfiles(srtp...),
		dtls.WithExtendedMasterSecret(dtls.RequireExtendedMasterSecret),
		// Self-signed peers: the caller checks the fingerprint printed on stdout.
		dtls.WithInsecureSkipVerify(true),
	}
	if o.role == "client" {
		return runClient(o, addr, shared)
	}
	return runServer(o, addr, shared)
}

func runClient(o options, addr *net.UDPAddr, shared []dtls.Option) error {
	opts := make([]dtls.ClientOption, 0, len(shared))
	for _, opt := range shared {
		opts = append(opts, opt)
	}
	conn, err := dtls.DialWithOptions("udp", addr, opts...)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	return serve(conn, o)
}

func runServer(o options, addr *net.UDPAddr, shared []dtls.Option) error {
	opts := make([]dtls.ServerOption, 0, len(shared)+1)
	for _, opt := range shared {
		opts = append(opts, opt)
	}
	// Request and require a client certificate; any certificate is accepted (see above).
	opts = append(opts, dtls.WithClientAuth(dtls.RequireAnyClientCert))
	ln, err := dtls.ListenWithOptions("udp", addr, opts...)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer func() { _ = ln.Close() }()
	fmt.Fprintf(os.Stderr, "listening %s\n", ln.Addr())

	failures := 0
	var last error
	for i := 0; i < o.handshakes; i++ {
		c, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		conn, ok := c.(*dtls.Conn)
		if !ok {
			_ = c.Close()
			return fmt.Errorf("accept: unexpected connection type %T", c)
		}
		if err := serve(conn, o); err != nil {
			failures++
			last = err
			if o.handshakes > 1 {
				// Keep serving the next clients; the error line marks this one.
				printError(err)
			}
		}
	}
	if failures == 0 {
		return nil
	}
	if o.handshakes == 1 {
		return last
	}
	return fmt.Errorf("%d of %d handshakes failed (last: %v)", failures, o.handshakes, last)
}

// serve runs the handshake on conn, prints the result line, waits for the peer's close and
// closes conn.
func serve(conn *dtls.Conn, o options) error {
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	start := time.Now()
	if err := conn.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("handshake with %s: %w", conn.RemoteAddr(), err)
	}
	res, err := describe(conn)
	if err != nil {
		return err
	}
	printJSON(res)
	fmt.Fprintf(os.Stderr, "handshake with %s done in %s\n", conn.RemoteAddr(), time.Since(start))

	// Wait for close_notify (Read fails with EOF or an alert), bounded by close-wait. Any
	// application data that arrives is discarded.
	_ = conn.SetReadDeadline(time.Now().Add(o.closeWait))
	buf := make([]byte, 8192)
	for {
		if _, err := conn.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				fmt.Fprintf(os.Stderr, "no close from %s within %s\n", conn.RemoteAddr(), o.closeWait)
			} else {
				fmt.Fprintf(os.Stderr, "peer %s closed: %v\n", conn.RemoteAddr(), err)
			}
			return nil
		}
	}
}

func describe(conn *dtls.Conn) (result, error) {
	id, ok := conn.SelectedSRTPProtectionProfile()
	if !ok {
		return result{}, errors.New("no SRTP profile negotiated")
	}
	p, ok := profileByID(id)
	if !ok {
		return result{}, fmt.Errorf("unexpected SRTP profile 0x%04x", uint16(id))
	}
	state, ok := conn.ConnectionState()
	if !ok {
		return result{}, errors.New("connection state unavailable")
	}
	km, err := state.ExportKeyingMaterial(exporterLabel, nil, 2*(p.keyLen+p.saltLen))
	if err != nil {
		return result{}, fmt.Errorf("exporting keying material: %w", err)
	}
	if len(state.PeerCertificates) == 0 {
		return result{}, errors.New("no peer certificate")
	}
	sum := sha256.Sum256(state.PeerCertificates[0])
	return result{
		SrtpProfile:           p.name,
		KeyingMaterial:        hex.EncodeToString(km),
		PeerCertificateSHA256: hex.EncodeToString(sum[:]),
	}, nil
}
