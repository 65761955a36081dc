// Command mcm-driver-relay is an MCM driver (in Go, on MCM's own types) that forwards every call to another
// server of the driver protocol:
//
//	mcm-driver-relay --listen unix:///tmp/relay.sock --upstream unix:///tmp/inmemory.sock
//
// Each call crosses MCM's Go types twice (adapter: protocol -> MCM; remote: MCM -> protocol), so running a
// protocol client against the relay checks that nothing is lost in MCM's types on the way.
package main

import (
	"errors"
	"flag"
	"os"

	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"

	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/adapter"
	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/remote"
)

func main() {
	upstream := flag.String("upstream", os.Getenv("MCM_DRIVER_UPSTREAM"),
		"the protocol server to forward calls to: unix:///path or 127.0.0.1:PORT (default $MCM_DRIVER_UPSTREAM)")
	adapter.MainFunc(func() (driver.Driver, error) {
		if *upstream == "" {
			return nil, errors.New("no upstream: pass --upstream ENDPOINT or set MCM_DRIVER_UPSTREAM")
		}
		return remote.New(*upstream)
	})
}
