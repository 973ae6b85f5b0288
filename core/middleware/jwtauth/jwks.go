package jwtauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/sluice-gw/sluice/core/config"
)

// Bounds of JWK Set fetches.
const (
	jwksFetchTimeout = 5 * time.Second
	maxJWKSBytes     = 1 << 20
	// jwksMinRefetch spaces the fetches an unknown kid triggers, so that tokens with made-up
	// key IDs cannot make the gateway hammer the identity provider.
	jwksMinRefetch = 10 * time.Second
)

// jwks is a JSON Web Key Set (RFC 7517 §5) read from a file or fetched from a URL, cached,
// and refreshed in the background: when it is older than its refresh time, and (at most once
// every jwksMinRefetch) when a token names a key ID it does not hold, which is how an identity
// provider's key rotation shows. A request never waits for a fetch: a token whose key is not
// there yet is refused, and verifies once the refresh brought the key. A failed refresh
// keeps the keys it had.
type jwks struct {
	file, url string
	refresh   time.Duration
	client    *http.Client

	set      atomic.Pointer[keySet]
	fetching atomic.Bool
	lastTry  atomic.Int64 // unix nanoseconds of the last fetch started
	fetches  atomic.Int64
	failing  bool // the last refresh failed; written by the refreshing goroutine only

	// log hears of refreshes that fail, and of the first that succeeds after them: a set
	// that cannot be refreshed keeps its keys, and without the line an identity provider out
	// of reach would go unseen until its next key rotation refused every token.
	log *slog.Logger
}

// keySet is one fetched set.
type keySet struct {
	byKID   map[string]jwkKey
	only    *jwkKey // the key a token without kid uses: the set's only key, if it has one
	fetched time.Time
}

type jwkKey struct {
	key     any
	methods []string
}

var errNoKey = errors.New("no key of the key set verifies this token")

// newJWKS returns the key set of o's jwks_file or jwks_url, read now; its error says why the
// set could not be read or has no usable key. A set from a URL that a configuration still in
// use holds (the one a reload replaces) is taken over with its keys instead (sharedSets).
func newJWKS(o config.JWTOptions) (*jwks, error) {
	k := sharedKey{url: o.JWKSURL, refresh: o.JWKSRefresh}
	if o.JWKSURL != "" {
		if j := sharedSets.get(k); j != nil {
			return j, nil
		}
	}
	j := &jwks{file: o.JWKSFile, url: o.JWKSURL, refresh: o.JWKSRefresh, client: &http.Client{Timeout: jwksFetchTimeout}, log: slog.Default()}
	set, err := j.fetch()
	if err != nil {
		return nil, err
	}
	j.set.Store(set)
	if o.JWKSURL != "" {
		j = sharedSets.put(k, j)
	}
	return j, nil
}

// sharedSets holds the key sets fetched from URLs while a configuration holds them. A reload
// that keeps a jwt middleware's jwks_url (and jwks_refresh) takes the set in hand, with its
// background refresh, instead of fetching it again: an identity provider that is down then
// refuses only a configuration that names a set the gateway does not hold, not every reload,
// and N reloads are not N fetches. A set from a file is read again on each reload, since a
// change of the file is what asks for that reload. The sets are held weakly: one that no
// configuration holds any more is collected, and its entry with it.
var sharedSets = sharedJWKS{m: map[sharedKey]weak.Pointer[jwks]{}}

type sharedKey struct {
	url     string
	refresh time.Duration
}

type sharedJWKS struct {
	mu sync.Mutex
	m  map[sharedKey]weak.Pointer[jwks]
}

// get returns the set held under k, nil when there is none.
func (s *sharedJWKS) get(k sharedKey) *jwks {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k].Value()
}

// put holds j under k, unless another set got there first: it returns the one held.
func (s *sharedJWKS) put(k sharedKey, j *jwks) *jwks {
	s.mu.Lock()
	defer s.mu.Unlock()
	if held := s.m[k].Value(); held != nil {
		return held
	}
	wp := weak.Make(j)
	s.m[k] = wp
	runtime.AddCleanup(j, s.forget, sharedEntry{k, wp})
	return j
}

type sharedEntry struct {
	k  sharedKey
	wp weak.Pointer[jwks]
}

// forget drops e's entry once its set is collected, unless a newer set took the key.
func (s *sharedJWKS) forget(e sharedEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[e.k] == e.wp {
		delete(s.m, e.k)
	}
}

// Fetches returns how many times the set was read (for tests and metrics).
func (j *jwks) Fetches() int64 { return j.fetches.Load() }

// fetch reads and parses the set. Keys of types that verify no JWT algorithm, private or
// symmetric keys, and keys whose use is not "sig" are skipped; a set left with none is an
// error.
func (j *jwks) fetch() (*keySet, error) {
	j.fetches.Add(1)
	var data []byte
	var err error
	src := j.source()
	if j.url != "" {
		data, err = j.get()
	} else {
		data, err = os.ReadFile(j.file)
	}
	if err != nil {
		return nil, err
	}
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: not a JWK Set: %v", src, err)
	}
	set := &keySet{byKID: map[string]jwkKey{}, fetched: time.Now()}
	var last jwkKey
	for _, raw := range doc.Keys {
		var k jose.JSONWebKey
		if json.Unmarshal(raw, &k) != nil || !k.Valid() || !k.IsPublic() || (k.Use != "" && k.Use != "sig") {
			continue
		}
		methods, err := methodsFor(k.Key)
		if err != nil {
			continue
		}
		if k.Algorithm != "" {
			if !slices.Contains(methods, k.Algorithm) {
				continue
			}
			methods = []string{k.Algorithm} // the key is bound to its algorithm (RFC 7517 §4.4)
		}
		last = jwkKey{key: k.Key, methods: methods}
		set.byKID[k.KeyID] = last
	}
	if len(set.byKID) == 0 {
		return nil, fmt.Errorf("%s: the JWK Set has no public signature key of RSA (2048 bits or more), P-256/384/521 or Ed25519", src)
	}
	if len(set.byKID) == 1 {
		set.only = &last
	}
	return set, nil
}

func (j *jwks) get() ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), jwksFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.url, nil)
	if err == nil {
		req.Header.Set("Accept", "application/jwk-set+json, application/json")
		var resp *http.Response
		if resp, err = j.client.Do(req); err == nil {
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("fetching the JWK Set %s: status %d", j.source(), resp.StatusCode)
			}
			return io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes))
		}
	}
	// The URL's parser and the client name the URL in their errors, the client with its
	// password alone masked: the set is named by source, and the error is the cause they
	// wrapped.
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		err = ue.Err
	}
	return nil, fmt.Errorf("fetching the JWK Set %s: %v", j.source(), err)
}

// keyFor returns the key that verifies t: the set's key of t's kid, whose algorithms must
// include t's. It starts a background refresh when the set is stale, or when the kid is
// unknown (at most once every jwksMinRefetch).
func (j *jwks) keyFor(t *jwt.Token, now time.Time) (any, error) {
	set := j.set.Load()
	if now.Sub(set.fetched) > j.refresh {
		j.refreshAsync(now, 0)
	}
	var k *jwkKey
	if kid, ok := t.Header["kid"].(string); ok {
		if found, ok := set.byKID[kid]; ok {
			k = &found
		} else {
			j.refreshAsync(now, jwksMinRefetch)
		}
	} else {
		k = set.only
	}
	if k == nil || !slices.Contains(k.methods, t.Method.Alg()) {
		return nil, errNoKey
	}
	return k.key, nil
}

// refreshAsync fetches the set again in the background unless a fetch runs or one started
// less than spacing ago.
func (j *jwks) refreshAsync(now time.Time, spacing time.Duration) {
	if now.UnixNano()-j.lastTry.Load() < int64(spacing) || !j.fetching.CompareAndSwap(false, true) {
		return
	}
	j.lastTry.Store(now.UnixNano())
	go func() {
		defer j.fetching.Store(false)
		set, err := j.fetch()
		if err == nil {
			j.set.Store(set)
			if j.failing {
				j.failing = false
				j.log.Info("jwks refreshed again", "jwks", j.source(), "keys", len(set.byKID))
			}
			return
		}
		// Keep the keys in hand: an identity provider that is down for a moment must not
		// log every caller out. Try again after the refresh time.
		old := *j.set.Load()
		old.fetched = time.Now()
		j.set.Store(&old)
		j.failing = true
		j.log.Warn("jwks refresh failed; the keys in hand stay", "jwks", j.source(), "error", err.Error(), "retry_in", j.retryIn(spacing))
	}()
}

// source names the set in errors and logs: its file, or its URL with any credentials in it
// masked (config.RedactURL).
func (j *jwks) source() string {
	if j.url != "" {
		return config.RedactURL(j.url)
	}
	return j.file
}

// retryIn is how long until a failed refresh may run again: the refresh time, or the spacing
// of refreshes an unknown kid asks for when that is sooner.
func (j *jwks) retryIn(spacing time.Duration) time.Duration {
	if spacing > 0 && spacing < j.refresh {
		return spacing
	}
	return j.refresh
}
