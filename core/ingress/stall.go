package ingress

import (
	"math"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/sluice-gw/sluice/core/metrics"
)

// The client-stall clock of the gnet engine. client_stall_timeout counts from when the
// gateway holds response bytes the client's socket does not take, that is once the kernel's
// send buffer is full, as nginx's send_timeout does, and starts again whenever the client
// takes more. gnet holds what the socket does not take in the connection's outbound buffer,
// and has no writable callback: the loop arms the clock when it sees that buffer non-empty
// after a write (noteStall), and the engine's sweep, once the clock has run the whole
// timeout, has the loop look again (checkStall). The client took bytes meanwhile when its TCP
// acknowledged more (tcpi_bytes_acked) or the outbound buffer shrank; otherwise it is closed
// and counted as a client_stall shed. The relay's own bound (sendHighWaterBytes, then
// backpressure on the upstream) limits what the gateway buffers while the clock runs. The cut
// is logged (shedlog.go) with the bytes the gateway still held for the client.

// A connection closed for stalling is reset (SO_LINGER 0), as nginx's
// reset_timedout_connection does: a plain close would leave its socket in FIN-WAIT-1 holding
// the unsent response, up to the whole send buffer of kernel memory, for as long as the client
// keeps its window shut.
func resetOnClose(fd int) {
	_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
}

// noteStall runs on the loop after a write to the client, out being the bytes gnet holds
// for it: it arms the clock when the socket stopped taking bytes and disarms it once gnet
// holds none.
func (gc *gconn) noteStall(out int) {
	armed := gc.stallSince.Load() != 0
	switch {
	case out == 0 && armed:
		gc.stallSince.Store(0)
	case out > 0 && !armed:
		gc.stallAcked, _ = bytesAcked(gc.fd)
		gc.stallOut = clampOut(out)
		gc.stallSince.Store(time.Now().UnixNano())
	}
}

// stallDue reports whether the clock has run limit ns at now (unix ns): the sweep then wakes
// the loop to check it.
func (gc *gconn) stallDue(now, limit int64) bool {
	since := gc.stallSince.Load()
	return since != 0 && now-since >= limit
}

// checkStall is the callback of the sweep's wake-up of a connection whose clock is due (a
// function, not a method value: a gconn holds nothing a rare event needs).
func checkStall(c gnet.Conn, _ error) error {
	if gc, ok := c.Context().(*gconn); ok {
		gc.checkStall(c)
	}
	return nil
}

// checkStall runs on the loop when the clock is due: it starts the clock again if the client
// took bytes since it was last armed or checked, disarms it if gnet holds nothing, and
// otherwise closes the connection.
func (gc *gconn) checkStall(c gnet.Conn) {
	since := gc.stallSince.Load()
	if since == 0 {
		return
	}
	out := c.OutboundBuffered()
	if out == 0 {
		gc.stallSince.Store(0)
		return
	}
	acked, _ := bytesAcked(gc.fd)
	took := acked != gc.stallAcked || clampOut(out) < gc.stallOut
	gc.stallAcked, gc.stallOut = acked, clampOut(out)
	now := time.Now().UnixNano()
	switch {
	case took:
		gc.stallSince.Store(now)
	case now-since >= gc.e.set.ClientStallTimeout.Nanoseconds():
		gc.e.m.Shed(metrics.ShedClientStall)
		gc.e.shed.clientStall(c.RemoteAddr(), int64(out)+gc.queued.Load(), time.Duration(now-since))
		resetOnClose(gc.fd)
		_ = c.Close()
	}
}

// clampOut keeps an outbound buffer size in the int32 the clock stores it in.
func clampOut(n int) int32 { return int32(min(n, math.MaxInt32)) }
