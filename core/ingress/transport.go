// Package ingress holds the client-facing engines of the gateway: gnet event loops for plaintext
// entrypoints and fasthttp.Server for TLS ones, behind one Transport interface. An engine owns
// the client side only (parsing, writing, backpressure, disconnects, timeouts, drain) and hands
// every parsed request to the request pipeline (core/pipeline), so both engines run the same
// routing, stages, upstream exchange and relay, and the same tests.
package ingress

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/tlscert"
)

// Transport is one listening entrypoint. Both engines are held to this contract by
// transport_contract_test.go.
type Transport interface {
	// Start binds the listener and begins serving; it returns once the engine serves on the
	// bound listener (a Drain from then on stops it), or an error naming the entrypoint and the
	// address, in which case nothing is left running.
	Start() error
	// Addr is the bound address (useful with port 0).
	Addr() string
	// Drain closes the listening socket at once, so that new connections are refused (not
	// accepted and closed), lets in-flight requests finish (their responses close the
	// connection) and closes idle connections. It returns nil once every connection is gone and the engine has stopped. If
	// ctx ends first, it closes the connections left, aborting their upstream exchanges, stops
	// the engine, and returns ctx's error. Drain may be called without Start, after a failed
	// Start, and more than once (later calls return nil); not concurrently with Start.
	Drain(ctx context.Context) error
	// Stats reports the live connection and request counts.
	Stats() Stats
}

// Stats are live counters of one transport.
type Stats struct {
	Connections int64 // open client connections
	Active      int64 // requests being proxied
}

// Settings are the per-entrypoint limits and timeouts (config keys of [entrypoints.<name>]).
type Settings struct {
	Name               string
	Address            string
	Limits             http1.Limits
	ReadHeaderTimeout  time.Duration // a client must send a complete request head (and body) within this
	IdleTimeout        time.Duration // keep-alive connection with no request in progress
	ClientStallTimeout time.Duration // a client that reads nothing of a pending response for this long is closed
	MaxConnections     int           // 0: unlimited
	Multicore          bool
	EventLoops         int // gnet event loops; 0: half the CPUs with Multicore, else 1
	// TLS, when set, terminates TLS on the entrypoint (the fasthttp engine).
	TLS *TLSSettings
	// TrustedIPs are the peers whose forwarding headers are believed and extended; from any
	// other peer they are replaced (pipeline.Entrypoint.TrustedIPs). nil: no peer is trusted.
	TrustedIPs []netip.Prefix

	linger lingerLimits // bounds of a lingering close (linger.go); zero: the defaults
}

// TLSSettings are an entrypoint's certificates and TLS version ([entrypoints.<name>.tls]).
type TLSSettings struct {
	// Certificates are the PEM files; the first is served when no other is for the server
	// name the client asks (SNI).
	Certificates []tlscert.Pair
	// MinVersion is the lowest version accepted (tls.VersionTLS12 or tls.VersionTLS13);
	// 0: TLS 1.2.
	MinVersion uint16
	// Watch reloads the certificates when their files change.
	Watch bool
}

// Defaults for Settings fields left zero: the config's, declared once there.
const (
	DefaultReadHeaderTimeout  = config.DefaultReadHeaderTimeout
	DefaultIdleTimeout        = config.DefaultIdleTimeout
	DefaultClientStallTimeout = config.DefaultClientStallTimeout
	// sendHighWaterBytes bounds the response bytes queued for one slow client; above it the relay
	// stops reading the upstream until the client catches up (backpressure).
	sendHighWaterBytes = 256 << 10
)

// eventLoops is the number of gnet event loops for s.
func (s *Settings) eventLoops() int {
	switch {
	case s.EventLoops > 0:
		return s.EventLoops
	case s.Multicore:
		return max(1, runtime.NumCPU()/2)
	default:
		return 1
	}
}

func (s *Settings) fill() {
	if s.ReadHeaderTimeout <= 0 {
		s.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if s.IdleTimeout <= 0 {
		s.IdleTimeout = DefaultIdleTimeout
	}
	if s.ClientStallTimeout <= 0 {
		s.ClientStallTimeout = DefaultClientStallTimeout
	}
	s.linger.fill()
}

// counters are shared by both engines.
type counters struct {
	conns  atomic.Int64
	active atomic.Int64
}

// newEntrypointMetrics registers the gauges of an entrypoint over c and returns its counters.
func newEntrypointMetrics(name string, c *counters) *metrics.Entrypoint {
	metrics.EntrypointGauges(name, c.conns.Load, c.active.Load)
	return metrics.ForEntrypoint(name)
}

func (c *counters) stats() Stats { return Stats{Connections: c.conns.Load(), Active: c.active.Load()} }

// peerAddr is the address of a connection's peer for RequestCtx.SetClientAddr; the zero Addr
// for a peer that is not TCP.
func peerAddr(a net.Addr) netip.Addr {
	if t, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(t.IP)
		return ip
	}
	return netip.Addr{}
}

// listenPort is the port of a bound listener, as X-Forwarded-Port carries it.
func listenPort(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return strconv.Itoa(t.Port)
	}
	return ""
}
