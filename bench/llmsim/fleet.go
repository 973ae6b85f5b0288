package llmsim

import (
	"errors"
	"time"

	json "github.com/goccy/go-json"
)

// Fleet is a running set of simulated instances (one HTTP server each).
type Fleet struct {
	seed  uint64
	key   []byte // HMAC key of P/D handles (derived from seed and API key)
	cfg   Config
	insts []*instance
	done  chan struct{}
}

// Start validates cfg, binds every instance's listener and starts serving. It returns an
// error (and starts nothing) when the config is invalid or an address cannot be bound.
func Start(cfg Config) (*Fleet, error) {
	ics, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	f := &Fleet{seed: cfg.Seed, cfg: cfg, done: make(chan struct{})}
	f.key = handleKey(cfg.Seed, cfg.APIKey)
	for i, ic := range ics {
		in := newInstance(f, i, ic)
		if err := in.start(ic.Listen); err != nil {
			f.Close()
			return nil, err
		}
		f.insts = append(f.insts, in)
	}
	for i, in := range f.insts {
		if in.cfg.CrashEvery > 0 {
			// Instances crash in turn, not together: instance i first crashes i/n of a period
			// later, so a fleet that crashes every 7s still has most instances up at any time,
			// as a real fleet whose machines fail independently does.
			offset := in.cfg.CrashEvery.D() * time.Duration(i) / time.Duration(len(f.insts))
			go f.crashLoop(in, offset)
		}
	}
	return f, nil
}

// Len returns the number of instances.
func (f *Fleet) Len() int { return len(f.insts) }

// Addrs returns each instance's listen address ("127.0.0.1:8000"), in instance order.
func (f *Fleet) Addrs() []string {
	out := make([]string, len(f.insts))
	for i, in := range f.insts {
		in.mu.Lock()
		out[i] = in.addr
		in.mu.Unlock()
	}
	return out
}

// Stats returns instance i's accounting (the body of its GET /llmsim/stats). It panics when
// i is out of range, like a slice index.
func (f *Fleet) Stats(i int) Stats { return f.insts[i].stats() }

// Instance returns instance i's resolved configuration.
func (f *Fleet) Instance(i int) InstanceConfig { return f.insts[i].cfg }

// Crash crashes instance i now (listener and connections closed, KV cache and reservations
// lost, epoch+1) and restarts it on the same address after downtime (then its startup delay
// applies). It returns an error when i is out of range.
//
// The address may be taken meanwhile: its port is in the kernel's ephemeral range, so any
// outgoing connection may get it as its local port, a client polling the address may even
// connect to itself (TCP simultaneous open), and the port stays taken while that connection
// lasts. The restart is tried again every restartRetry until it binds or the fleet closes.
func (f *Fleet) Crash(i int, downtime time.Duration) error {
	if i < 0 || i >= len(f.insts) {
		return errors.New("llmsim: no such instance")
	}
	in := f.insts[i]
	in.crash()
	go func() {
		t := time.NewTimer(downtime)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				in.mu.Lock()
				addr := in.addr
				in.mu.Unlock()
				if in.start(addr) == nil {
					return
				}
				t.Reset(restartRetry)
			case <-f.done:
				return
			}
		}
	}()
	return nil
}

// restartRetry is how often a crashed instance tries its address again while it is taken.
const restartRetry = 50 * time.Millisecond

func (f *Fleet) crashLoop(in *instance, offset time.Duration) {
	if offset > 0 {
		select {
		case <-time.After(offset):
		case <-f.done:
			return
		}
	}
	t := time.NewTicker(in.cfg.CrashEvery.D())
	defer t.Stop()
	for {
		select {
		case <-t.C:
			f.Crash(in.idx, in.cfg.CrashDowntime.D())
		case <-f.done:
			return
		}
	}
}

// Close stops every instance and waits (up to 5s) for their handlers to return.
func (f *Fleet) Close() error {
	select {
	case <-f.done:
		return nil
	default:
	}
	close(f.done)
	for _, in := range f.insts {
		in.stop()
	}
	// Handlers see their connections close and return; poll rather than WaitGroup.Wait,
	// which must not race a late Add from a request parsed just before the close.
	deadline := time.Now().Add(5 * time.Second)
	for _, in := range f.insts {
		for in.active.Load() > 0 {
			if time.Now().After(deadline) {
				return errors.New("llmsim: handlers still running 5s after close")
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// CachedChatTokens returns the prompt tokens instance i would find in its KV cache for the
// chat completions request body (as it would report in cached_tokens), without touching the
// cache's LRU order or counters: what an oracle router that knows every instance's cache
// sees. It returns an error for a body that is not a chat completions request, and panics
// when i is out of range, like a slice index.
func (f *Fleet) CachedChatTokens(i int, body []byte) (int, error) {
	var req inferRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return 0, err
	}
	if len(req.Messages) == 0 {
		return 0, errors.New("llmsim: not a chat completions request (no messages)")
	}
	in := f.insts[i]
	prompt := appendChatPrompt(make([]byte, 0, 1024), req.Messages, req.Tools)
	bs := in.cfg.BlockSize
	hashes := appendBlockHashes(nil, prompt, bs, saltHash(req.CacheSalt))
	maxBlocks := max(CountTokens(len(prompt))-1, 0) / bs
	n := 0
	for _, h := range hashes[:min(len(hashes), maxBlocks)] {
		if !in.cache.contains(h) {
			break
		}
		n++
	}
	return n * bs, nil
}
