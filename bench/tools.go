//go:build tools

// Package bench pins module dependencies until code imports them.
package bench

import (
	_ "github.com/HdrHistogram/hdrhistogram-go"
	_ "github.com/VictoriaMetrics/metrics"
	_ "github.com/goccy/go-json"
	_ "github.com/klauspost/compress"
	_ "github.com/openai/openai-go/v3"
	_ "github.com/panjf2000/gnet/v2"
	_ "github.com/pelletier/go-toml/v2"
	_ "github.com/stretchr/testify/require"
	_ "github.com/valyala/fasthttp"
	_ "golang.org/x/sys/unix"
)
