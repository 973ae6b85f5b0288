package admission

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/stretchr/testify/require"
)

func TestGatewayErrorMapsRejections(t *testing.T) {
	for _, c := range []struct {
		err        error
		status     int
		typ        pipeline.ErrorType
		retryAfter int
		reason     string
	}{
		{ErrQueueFull, 429, pipeline.RateLimit, 1, ReasonQueueFull},
		{ErrQueueTimeout, 503, pipeline.ServerError, 1, ReasonQueueTimeout},
		{ErrCanceled, 499, pipeline.InvalidRequest, 0, ReasonCanceled},
	} {
		ge := GatewayError(c.err)
		require.Equal(t, c.status, ge.Status, "%v", c.err)
		require.Equal(t, c.typ, ge.Type, "%v", c.err)
		require.Equal(t, c.retryAfter, ge.RetryAfter, "%v", c.err)
		require.NotEmpty(t, ge.Code)
		require.Same(t, ge, GatewayError(fmt.Errorf("stage: %w", c.err)), "wrapped errors map to the same preallocated answer")
		require.Equal(t, c.reason, Reason(c.err))
	}
	require.Same(t, pipeline.ErrInternal, GatewayError(errors.New("other")))
	require.Empty(t, Reason(errors.New("other")))
	require.Empty(t, Reason(nil))
}

func TestGatewayErrorBody(t *testing.T) {
	body := string(pipeline.AppendErrorBody(nil, ErrGatewayQueueFull))
	require.JSONEq(t, `{"error":{"message":"the model is at capacity: too many requests are running and waiting; retry shortly","type":"rate_limit_error","param":null,"code":"model_at_capacity"}}`, body)
}
