// Command sluice is the gateway: `sluice serve [--config PATH]`, `sluice validate PATH`,
// `sluice version`. It parses flags and signals and wires core/gateway.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
	"github.com/sluice-gw/sluice/core/snapshot"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage:
  sluice serve [--config PATH]   run the gateway (PATH: a TOML file or a directory of *.toml;
                                 default: the embedded configs/default.toml)
  sluice validate PATH           check a config; exit 1 with file:line:col: message lines
  sluice version                 print the version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "validate":
		return validate(args[1:], stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "sluice", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "sluice: unknown command %q\n%s", args[0], usage)
		return 2
	}
}

func validate(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprint(stderr, "usage: sluice validate PATH\n")
		return 2
	}
	if err := check(args[0]); err != nil {
		printErrors(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", args[0])
	return 0
}

// check loads and compiles the config at path, as serve would.
func check(path string) error {
	cfg, err := gateway.LoadConfig(path)
	if err != nil {
		return err
	}
	snap, err := snapshot.Compile(cfg, nil, 1)
	if err != nil {
		return err
	}
	snap.Retire(nil)
	return nil
}

func printErrors(w io.Writer, err error) {
	var list config.ErrorList
	if errors.As(err, &list) {
		for _, e := range list {
			fmt.Fprintln(w, e.Error())
		}
		return
	}
	fmt.Fprintln(w, err.Error())
}

func serve(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file or directory (default: the embedded default config)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice serve: unexpected argument %q (the config goes after --config)\n%s", fs.Arg(0), usage)
		return 2
	}
	cfg, err := gateway.LoadConfig(*path)
	if err != nil {
		printErrors(stderr, err)
		return 1
	}
	log := newLogger(cfg, stderr)
	g, err := gateway.New(cfg, *path, log)
	if err != nil {
		printErrors(stderr, err)
		return 1
	}
	if err := g.Start(); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	for sig := range sigs {
		if sig == syscall.SIGHUP {
			if err := g.Reload(); err != nil {
				log.Error("reload refused; the running config stays in force", "error", err.Error())
			}
			continue
		}
		log.Info("draining", "signal", sig.String())
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(g.DrainTimeout()))
		start := time.Now()
		err := g.Drain(ctx)
		cancel()
		switch {
		case err == nil:
			log.Info("drained; exiting", "took", time.Since(start).Round(time.Millisecond).String())
		case errors.Is(err, context.DeadlineExceeded):
			log.Warn("drain timeout reached; closing the remaining connections and exiting", "drain_timeout", time.Duration(g.DrainTimeout()).String())
		default:
			log.Error("drain", "error", err.Error())
		}
		return 0
	}
	return 0
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
