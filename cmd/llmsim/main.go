// Command llmsim runs the LLM fleet simulator (bench/llmsim; docs/llmsim.md): flags or a
// TOML fleet file in, a fleet of OpenAI-compatible servers out, until SIGINT/SIGTERM.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/internal/cliflag"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// cliArgs are the flags that are not fields of llmsim.Config, as given.
type cliArgs struct {
	file, roles, models, keyEnv *string
}

// newFlagSet returns llmsim's flags (docs/llmsim.md lists each with its default), which set
// the fields of cfg they are named for.
func newFlagSet(cfg *llmsim.Config) (*flag.FlagSet, cliArgs) {
	d := &cfg.Defaults
	fs := flag.NewFlagSet("llmsim", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: llmsim [flags] | llmsim --config FLEET.toml   (docs/llmsim.md)")
		cliflag.PrintDefaults(fs.Output(), fs)
	}
	file := fs.String("config", "", "TOML fleet file (exclusive with the model flags)")
	fs.StringVar(&d.Listen, "listen", llmsim.DefaultListen, "address of a single instance")
	fs.IntVar(&cfg.Instances, "instances", 1, "number of instances (with --base-port: consecutive ports)")
	fs.IntVar(&cfg.BasePort, "base-port", 0, "first port of a fleet (0: free ports)")
	fs.StringVar(&cfg.Host, "host", "127.0.0.1", "address fleet instances listen on")
	roles := fs.String("roles", "", "roles cycled over instances: aggregated,prefill,decode")
	models := fs.String("models", "", "comma-separated model ids served (empty: any model accepted)")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the deterministic output")
	fs.Int64Var(&d.Generation, "generation", 0, "deployment generation reported to the gateway")
	fs.StringVar(&d.Digest, "digest", "", "execution config digest reported to the gateway")
	fs.StringVar(&d.WorkerID, "worker-id", "", "worker id of a single instance (default llmsim-<port>)")
	fs.StringVar(&cfg.APIKey, "api-key", "", "bearer key required on /power/v1 (prefer --api-key-env)")
	keyEnv := fs.String("api-key-env", "", "environment variable holding the /power/v1 bearer key")
	durVar(fs, &d.TTFT, "ttft", "fixed prefill overhead (TTFT with a fully cached prompt)")
	durVar(fs, &d.PerUncachedToken, "per-uncached-token", "prefill cost per uncached prompt token")
	durVar(fs, &d.ITL, "itl", "inter-token latency of a sequence running alone")
	durVar(fs, &d.ITLPerRunning, "itl-per-running", "ITL added per other running sequence (batch effect)")
	fs.IntVar(&d.Tokens, "tokens", d.Tokens, "output tokens per response (max_tokens caps it)")
	fs.IntVar(&d.MaxModelLen, "max-model-len", d.MaxModelLen, "context window in tokens: a longer prompt, or prompt + max_tokens over it, is a 400 (0: none)")
	fs.IntVar(&d.MaxRunning, "max-running", d.MaxRunning, "max running sequences per instance")
	fs.IntVar(&d.MaxWaiting, "max-waiting", d.MaxWaiting, "max waiting requests per instance")
	fs.IntVar(&d.QueueFullStatus, "queue-full-status", d.QueueFullStatus, "status when the waiting queue is full (429 or 503)")
	fs.IntVar(&d.BlockSize, "block-size", d.BlockSize, "KV cache block size in tokens")
	fs.IntVar(&d.Blocks, "blocks", d.Blocks, "KV cache blocks per instance")
	durVar(fs, &d.KVTransfer, "kv-transfer", "fixed KV transfer time on decode/execute")
	durVar(fs, &d.KVTransferPerToken, "kv-transfer-per-token", "KV transfer time per prompt token")
	durVar(fs, &d.StartupDelay, "startup-delay", "time before an instance is ready")
	fs.Float64Var(&d.FaultRate, "fault-rate", 0, "probability of applying --fault to a request")
	fs.StringVar(&d.Fault, "fault", "", "fault spec applied at --fault-rate (x-llmsim-fault grammar)")
	durVar(fs, &d.CrashEvery, "crash-every", "crash each instance this often (0: never)")
	durVar(fs, &d.CrashDowntime, "crash-downtime", "how long a crashed instance stays down")
	return fs, cliArgs{file: file, roles: roles, models: models, keyEnv: keyEnv}
}

func run(args []string) error {
	cfg := llmsim.DefaultConfig()
	d := &cfg.Defaults
	fs, a := newFlagSet(&cfg)
	file, roles, models, keyEnv := a.file, a.roles, a.models, a.keyEnv
	rest, err := cliflag.Parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return nil
	}
	if err != nil {
		return fmt.Errorf("llmsim: %w (llmsim -h lists the flags)", err)
	}
	if len(rest) > 0 {
		return fmt.Errorf("llmsim: unexpected argument %q (flags only)", rest[0])
	}
	if *file != "" {
		other := ""
		fs.Visit(func(f *flag.Flag) {
			if f.Name != "config" {
				other = f.Name
			}
		})
		if other != "" {
			return fmt.Errorf("llmsim: --%s cannot be combined with --config (put it in the fleet file)", other)
		}
		if cfg, err = llmsim.LoadFile(*file); err != nil {
			return err
		}
	} else {
		for r := range strings.SplitSeq(*roles, ",") {
			if r = strings.TrimSpace(r); r != "" {
				role, err := llmsim.ParseRole(r)
				if err != nil {
					return err
				}
				cfg.Roles = append(cfg.Roles, role)
			}
		}
		for m := range strings.SplitSeq(*models, ",") {
			if m = strings.TrimSpace(m); m != "" {
				d.Models = append(d.Models, m)
			}
		}
		if *keyEnv != "" {
			v := os.Getenv(*keyEnv)
			if v == "" {
				return fmt.Errorf("llmsim: --api-key-env: environment variable %s is not set", *keyEnv)
			}
			cfg.APIKey = v
		}
	}
	fleet, err := llmsim.Start(cfg)
	if err != nil {
		return err
	}
	for i, addr := range fleet.Addrs() {
		ic := fleet.Instance(i)
		fmt.Fprintf(os.Stderr, "llmsim: instance %d %s listening on http://%s (role %s, ttft %v, itl %v, tokens %d)\n",
			i, ic.WorkerID, addr, ic.Role, ic.TTFT.D(), ic.ITL.D(), ic.Tokens)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	return fleet.Close()
}

func durVar(fs *flag.FlagSet, d *llmsim.Duration, name, usage string) {
	fs.TextVar(d, name, *d, usage)
}
