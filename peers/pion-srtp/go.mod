module secrelay.invalid/peers/pion-srtp

go 1.24.0

require github.com/pion/srtp/v3 v3.1.3

require (
	github.com/pion/logging v0.2.4 // indirect
	github.com/pion/randutil v0.1.0 // indirect
	github.com/pion/rtcp v1.2.19 // indirect
	github.com/pion/rtp v1.10.5 // indirect
	github.com/pion/transport/v5 v5.1.1 // indirect
	golang.org/x/sys v0.41.0 // indirect
)
