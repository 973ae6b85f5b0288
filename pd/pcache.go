package pd

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	json "github.com/goccy/go-json"
)

// CacheKeyPrefix starts every prompt cache key the gateway forwards to a worker.
const CacheKeyPrefix = "aster-gw-pcache-v1:"

// CacheKeyer derives the prompt cache keys forwarded to workers. A caller's
// prompt_cache_key is never forwarded as sent: the prefill gets CacheKeyPrefix followed by
// the hex HMAC-SHA256 of the caller's identity, the model alias, the endpoint and the
// caller's key, so that two callers' caches never meet and a worker cannot learn the key.
// The HMAC key is derived from the workers' protocol key, which every gateway replica of a
// deployment shares: replicas derive the same value, so a conversation finds its cache
// whichever replica serves it.
type CacheKeyer struct{ key [sha256.Size]byte }

// NewCacheKeyer returns the keyer of the deployment whose workers' key is secret.
func NewCacheKeyer(secret string) *CacheKeyer {
	k := &CacheKeyer{}
	h := sha256.New()
	h.Write([]byte("aster-gw-pcache-v1 key\x00"))
	h.Write([]byte(secret))
	h.Sum(k.key[:0])
	return k
}

// Identity is who a prompt cache key belongs to: the caller's consumer name, environment and
// credential generation ("" and 0 for an anonymous caller).
type Identity struct {
	Consumer, Environment string
	Generation            int
}

// Derive returns the key forwarded for a caller's key callerKey.
func (k *CacheKeyer) Derive(id Identity, model, endpoint string, callerKey []byte) string {
	m := hmac.New(sha256.New, k.key[:])
	// Each field is length-prefixed, so that no two field lists hash alike.
	field := func(b []byte) {
		m.Write(strconv.AppendInt(nil, int64(len(b)), 10))
		m.Write([]byte{':'})
		m.Write(b)
	}
	field([]byte(id.Consumer))
	field([]byte(id.Environment))
	field(strconv.AppendInt(nil, int64(id.Generation), 10))
	field([]byte(model))
	field([]byte(endpoint))
	field(callerKey)
	return CacheKeyPrefix + hex.EncodeToString(m.Sum(nil))
}

// withoutField returns body, a JSON object, without its top-level member name. The request
// a worker gets must not carry the caller's raw prompt_cache_key. Members keep their values
// byte for byte; their order may change.
func withoutField(body []byte, name string) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, err
	}
	delete(obj, name)
	return json.Marshal(obj)
}
