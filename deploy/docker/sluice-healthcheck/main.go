// Command sluice-healthcheck is the container image's HEALTHCHECK: it asks the admin API of
// the sluice in the same container for GET /api/gateway/health and exits 0 when the answer
// is 200 with "status":"ok", 1 otherwise. The image has no shell, curl or wget to do this,
// and sluice itself has no such subcommand.
//
// It asks http://127.0.0.1:9090/api/gateway/health, or the URL in $SLUICE_HEALTH_URL (or its
// one argument), and sends "Authorization: Bearer $SLUICE_ADMIN_TOKEN" when that variable is
// set (the admin API needs it when [admin] token_env names it). It goes to the loopback
// address with a loopback Host, which the admin API accepts without allowed_hosts, and so
// works with any admin address on port 9090 that includes loopback (127.0.0.1 or 0.0.0.0).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

const defaultURL = "http://127.0.0.1:9090/api/gateway/health"

// timeout is below Docker's default HEALTHCHECK --timeout (30s) and the image's (3s), so that
// the probe reports its own reason rather than being killed.
const timeout = 2500 * time.Millisecond

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	url := defaultURL
	if v := getenv("SLUICE_HEALTH_URL"); v != "" {
		url = v
	}
	switch len(args) {
	case 0:
	case 1:
		url = args[0]
	default:
		fmt.Fprintln(stderr, "usage: sluice-healthcheck [URL]")
		return 2
	}
	if err := probe(url, getenv("SLUICE_ADMIN_TOKEN")); err != nil {
		fmt.Fprintf(stderr, "sluice-healthcheck: %s: %v\n", url, err)
		return 1
	}
	fmt.Fprintln(stdout, "ok")
	return 0
}

func probe(url, token string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// No proxy from the environment: the admin API is in this container.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, body)
	}
	var health struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(body, &health); err != nil {
		return fmt.Errorf("not a health answer: %v", err)
	}
	if health.Status != "ok" {
		return fmt.Errorf("status %q", health.Status)
	}
	return nil
}
