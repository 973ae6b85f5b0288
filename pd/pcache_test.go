package pd_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/pd"
)

// A caller's prompt_cache_key reaches no worker: the prefill gets the derived
// aster-gw-pcache-v1 key, and the forwarded request has none.
func TestPromptCacheKeyIsDerivedNeverForwarded(t *testing.T) {
	f := startFleet(t, nil)
	g := startGateway(t, f.gatewayTOML("", ""))
	const raw = "caller-secret-cache-key"
	body := strings.Replace(chatBody("cache me"), `"stream":true`, `"stream":true,"prompt_cache_key":"`+raw+`"`, 1)
	for range 2 {
		status, data := stream(t, g, body)
		require.Equal(t, 200, status, data)
	}
	var keys []string
	for _, w := range []int{prefillA, prefillB} {
		for _, c := range f.sim.Calls(w) {
			require.Empty(t, c.RequestCacheKey, "the forwarded request carries no prompt_cache_key")
			keys = append(keys, c.PromptCacheKey)
		}
	}
	require.Len(t, keys, 2)
	require.Regexp(t, regexp.MustCompile(`^aster-gw-pcache-v1:[0-9a-f]{64}$`), keys[0])
	require.Equal(t, keys[0], keys[1], "the same caller's key derives the same value")
	require.NotContains(t, keys[0], raw)
}

// The derived key depends on every scope field and on the deployment's secret.
func TestCacheKeyScopes(t *testing.T) {
	k := pd.NewCacheKeyer("secret")
	id := pd.Identity{Consumer: "team-a", Environment: "prod", Generation: 1}
	base := k.Derive(id, "chat", "/v1/chat/completions", []byte("conv-1"))
	require.Equal(t, base, k.Derive(id, "chat", "/v1/chat/completions", []byte("conv-1")))
	variants := []string{
		k.Derive(pd.Identity{Consumer: "team-b", Environment: "prod", Generation: 1}, "chat", "/v1/chat/completions", []byte("conv-1")),
		k.Derive(pd.Identity{Consumer: "team-a", Environment: "dev", Generation: 1}, "chat", "/v1/chat/completions", []byte("conv-1")),
		k.Derive(pd.Identity{Consumer: "team-a", Environment: "prod", Generation: 2}, "chat", "/v1/chat/completions", []byte("conv-1")),
		k.Derive(id, "other", "/v1/chat/completions", []byte("conv-1")),
		k.Derive(id, "chat", "/v1/responses", []byte("conv-1")),
		k.Derive(id, "chat", "/v1/chat/completions", []byte("conv-2")),
		pd.NewCacheKeyer("other secret").Derive(id, "chat", "/v1/chat/completions", []byte("conv-1")),
		// Field boundaries count: "team-a"+"prod" is not "team-ap"+"rod".
		k.Derive(pd.Identity{Consumer: "team-ap", Environment: "rod", Generation: 1}, "chat", "/v1/chat/completions", []byte("conv-1")),
	}
	for i, v := range variants {
		require.NotEqual(t, base, v, "variant %d", i)
		require.True(t, strings.HasPrefix(v, pd.CacheKeyPrefix))
	}
}

// The derived key is the caller's key's, whatever follows it in the body, when the router
// rewrites "model" to a shorter upstream model in place: keys that differ derive different
// values, and one key derives one value.
func TestPromptCacheKeyDerivedFromTheCallersKeyAfterModelRewrite(t *testing.T) {
	f := startFleet(t, nil)
	toml := strings.Replace(f.gatewayTOML("", ""), `service = "fleet"`, `service = "fleet"`+"\nupstream_model = \"m\"", 1)
	g := startGateway(t, toml)
	withKey := func(key, msg string) string {
		return strings.Replace(chatBody(msg), `"stream":true`, `"stream":true,"prompt_cache_key":"`+key+`"`, 1)
	}
	for _, body := range []string{withKey("a-conv", "one"), withKey("b-conv", "one"), withKey("a-conv", "two")} {
		status, data := stream(t, g, body)
		require.Equal(t, 200, status, data)
	}
	var keys []string
	for _, w := range []int{prefillA, prefillB} {
		for _, c := range f.sim.Calls(w) {
			if c.Call == "prefill" {
				keys = append(keys, c.PromptCacheKey)
			}
		}
	}
	require.Len(t, keys, 3)
	byKey := map[string]int{}
	for _, k := range keys {
		byKey[k]++
	}
	require.Len(t, byKey, 2, "two caller keys derive two values: %v", keys)
}
