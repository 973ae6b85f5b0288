// Command echoserver is a tiny HTTP server for testenv's own tests of BuildBinary, StartProcess
// and WaitHTTP: `echoserver --listen ADDR [--delay DUR] [--exit-after DUR]` prints
// "listening on ADDR" and answers GET /health with 200 "ok" once DUR has passed since start.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	delay := flag.Duration("delay", 0, "answer /health with 503 until this long after start")
	exitAfter := flag.Duration("exit-after", 0, "exit with status 3 after this long (0: never)")
	flag.Parse()
	start := time.Now()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "echoserver:", err)
		os.Exit(1)
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	if *exitAfter > 0 {
		time.AfterFunc(*exitAfter, func() {
			fmt.Fprintln(os.Stderr, "echoserver: exiting as asked")
			os.Exit(3)
		})
	}
	http.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		if time.Since(start) < *delay {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	_ = http.Serve(ln, nil)
}
