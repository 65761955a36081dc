package adapter

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"

	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/internal/endpoint"
)

// EnvListen is the environment variable that gives --listen's default.
const EnvListen = "MCM_DRIVER_LISTEN"

// Main serves d on the endpoint of --listen (default: $MCM_DRIVER_LISTEN) until SIGTERM or SIGINT, and exits:
// 0 after a clean stop, 2 on a missing or bad endpoint, 1 when serving fails. It parses the flags of
// flag.CommandLine, so a main.go can define its own flags before calling it.
func Main(d driver.Driver) {
	MainFunc(func() (driver.Driver, error) { return d, nil })
}

// MainFunc is Main for a driver that needs the parsed flags to be built: newDriver runs after flag.Parse (and
// its error ends the program with status 1).
func MainFunc(newDriver func() (driver.Driver, error)) {
	prog := filepath.Base(os.Args[0])
	if flag.Lookup("listen") == nil {
		flag.String("listen", os.Getenv(EnvListen),
			"the endpoint to serve the MCM driver protocol on: "+endpoint.Forms+" (default $"+EnvListen+")")
	}
	if !flag.Parsed() {
		flag.Parse()
	}
	listen := flag.Lookup("listen").Value.String()
	if listen == "" {
		exit(2, "%s: no endpoint to serve on: pass --listen ENDPOINT or set %s (%s)", prog, EnvListen, endpoint.Forms)
	}
	if _, err := endpoint.Parse(listen); err != nil {
		exit(2, "%s: bad --listen endpoint: %v", prog, err)
	}
	d, err := newDriver()
	if err != nil {
		exit(1, "%s: %v", prog, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := Serve(ctx, listen, d); err != nil {
		stop()
		exit(1, "%s: %v", prog, err)
	}
}

func exit(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(code)
}
