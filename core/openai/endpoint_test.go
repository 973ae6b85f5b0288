package openai

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAnthropicPath(t *testing.T) {
	for path, want := range map[string]bool{
		"/v1/messages": true, "/v1/messages/count_tokens": true, "/v1/messages/batches/b1": true, "/v1/messages/": true,
		"/v1/messagesx": false, "/v1/message": false, "/v1/chat/completions": false, "": false, "/V1/messages": false,
	} {
		require.Equal(t, want, AnthropicPath([]byte(path)), path)
	}
}
