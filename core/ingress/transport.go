// Package ingress holds the client-facing engines of the gateway: gnet event loops for plaintext
// entrypoints and fasthttp.Server for TLS ones, behind one Transport interface. An engine owns
// the client side only (parsing, writing, backpressure, disconnects, timeouts, drain) and hands
// every parsed request to the request pipeline (core/pipeline), so both engines run the same
// routing, stages, upstream exchange and relay, and the same tests.
package ingress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
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
	// Listen binds the listener (or takes Settings.Listener) and loads what the entrypoint
	// needs before it can serve (a TLS entrypoint's certificates), without accepting a
	// connection: a reload binds every new listener before it puts its configuration in force.
	// On an error, which names the entrypoint and the address (or "tls: …"), nothing is left
	// open. Start calls it when it was not called; a second call does nothing.
	Listen() error
	// Start begins serving on the bound listener (binding it first when Listen was not
	// called); it returns once the engine serves (a Drain from then on stops it), or an error
	// naming the entrypoint and the address, in which case nothing is left running.
	Start() error
	// ListenerFile returns a duplicate of the listening socket's descriptor, for a transport
	// that takes over the address (Settings.Listener through net.FileListener): both accept from
	// one socket until this transport drains, so that no connection is refused in between. An
	// error when the transport is not listening.
	ListenerFile() (*os.File, error)
	// Addr is the bound address (useful with port 0).
	Addr() string
	// Drain closes the listening socket at once, so that new connections are refused (not
	// accepted and closed), serves the connections that were waiting in its backlog (on Linux;
	// unless ListenerFile gave the socket to another transport), lets in-flight requests
	// finish (their responses close the connection) and closes idle connections. It returns nil once every connection is gone and the engine has stopped. If
	// ctx ends first, it closes the connections left, aborting their upstream exchanges, stops
	// the engine, and returns ctx's error. Drain may be called without Start, after a failed
	// Start, and more than once (later calls return nil); not concurrently with Start.
	Drain(ctx context.Context) error
	// Refusing returns a channel closed once the listening socket is closed: a Drain closes
	// it first, so that a caller can wait for new connections to be refused before the drain
	// of what is in flight ends. Valid after Start.
	Refusing() <-chan struct{}
	// Stats reports the live connection and request counts.
	Stats() Stats
}

// listenerFile returns a duplicate of ln's socket descriptor (ListenerFile).
func listenerFile(ln net.Listener) (*os.File, error) {
	if ln == nil {
		return nil, errors.New("sluice: entrypoint not listening")
	}
	f, ok := ln.(interface{ File() (*os.File, error) })
	if !ok {
		return nil, fmt.Errorf("sluice: listener %T has no descriptor", ln)
	}
	return f.File()
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
	// SendBufferBytes caps the kernel send buffer (SO_SNDBUF) of each client connection the
	// entrypoint accepts, in bytes (sendbuf.go); 0: the kernel's default and autotuning.
	SendBufferBytes int
	Multicore       bool
	EventLoops      int // gnet event loops; 0: half the CPUs with Multicore, else 1
	// TLS, when set, terminates TLS on the entrypoint (the fasthttp engine).
	TLS *TLSSettings
	// UpstreamLoop makes the gnet engine's event loops do the upstream I/O of the requests
	// they can (upstream_io = "loop", gnet_loop.go); otherwise worker goroutines do it.
	UpstreamLoop bool
	// ConnectOnLoop (with UpstreamLoop) makes the event loops connect to upstreams named by
	// IP address themselves, with a non-blocking connect(2) on the loop (connectOnLoop),
	// instead of having a worker dial and enrolling the connected socket.
	ConnectOnLoop bool
	// TrustedIPs are the peers whose forwarding headers are believed and extended; from any
	// other peer they are replaced (pipeline.Entrypoint.TrustedIPs). nil: no peer is trusted.
	TrustedIPs []netip.Prefix
	// Listener, when set, is a bound TCP listener to serve instead of binding Address: the
	// socket of a transport this one replaces (Transport.ListenerFile). The transport owns it
	// and closes it when it drains.
	Listener net.Listener

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
	case s.Multicore && s.UpstreamLoop:
		// No worker goroutines do the upstream I/O: the loops do, one per CPU.
		return runtime.NumCPU()
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

// publish exposes the series of entrypoint name once a transport of it serves: its counters m
// and its gauges over c. It returns their release, which the transport calls when it has
// drained. Not before: a transport bound for a reload that is then refused never serves, and
// leaves no series.
func (c *counters) publish(name string, m *metrics.Entrypoint) (release func()) {
	counters := m.Publish()
	gauges := metrics.EntrypointGauges(name, c.conns.Load, c.active.Load)
	return func() {
		gauges()
		counters()
	}
}

// releaseGauges releases what publish exposed; nothing for a transport that never served.
func releaseGauges(release func()) {
	if release != nil {
		release()
	}
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
