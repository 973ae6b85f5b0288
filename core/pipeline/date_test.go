package pipeline

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDateIsIMFFixdateInGMT(t *testing.T) {
	at := time.Date(1994, 11, 15, 9, 12, 31, 0, time.FixedZone("CET", 3600))
	require.Equal(t, "Date: Tue, 15 Nov 1994 08:12:31 GMT\r\n", string(appendDate(nil, at)))
	next := at.Add(time.Second)
	line := string(appendDate([]byte("x"), next))
	require.Equal(t, "xDate: "+next.UTC().Format(http.TimeFormat)+"\r\n", line, "a new second is formatted anew")
}
