package snapshot

import (
	"strconv"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/health"
)

// serverState is what the gateway knows of one server of a service beyond one configuration:
// the balancer's state (requests in flight, ejection) and passive health's judgement. A
// snapshot shares it with the one it replaces for every server both have, rather than copying
// it: a request sent before a reload is released into the count the new snapshot balances on,
// and a failure it meets counts towards the server's ejection in both.
type serverState struct {
	lb      *balancer.State
	passive *health.PassiveState
	// key is the server's identity (serverState), its backends' pipeline.Backend.Key: what
	// active health checks and circuit breakers carry over by.
	key string
}

// serverState returns the state of the server at scheme://addr of service, the one prev has
// for it when prev has that server, or a new one. The same server listed more than once in
// the service keeps a state per listing, matched in the order they are listed.
//
// A server is the same when its service, scheme and address are: its weight, its URL as written
// (a host from the environment) and its upstream settings may change. A server moved to
// another service starts afresh there, as a server listed in two services has a state in each:
// the requests of a service and its passive health are the service's own.
func (s *Snapshot) serverState(service, scheme, addr string, prev *Snapshot) *serverState {
	base := service + "\x00" + scheme + "://" + addr
	key := base
	for n := 1; s.servers[key] != nil; n++ {
		key = base + "\x00" + strconv.Itoa(n)
	}
	st := prev.serverStateOf(key)
	if st == nil {
		st = &serverState{lb: new(balancer.State), passive: new(health.PassiveState), key: key}
	}
	s.servers[key] = st
	return st
}

// serverStateOf returns s's state under key (nil when s is nil or has no such server).
func (s *Snapshot) serverStateOf(key string) *serverState {
	if s == nil {
		return nil
	}
	return s.servers[key]
}
