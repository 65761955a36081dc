// Command mcm-peer runs upstream Machine Controller Manager's own controllers, for benchmarks only (never in a
// test): docs/benchmarks.md compares our controllers with MCM's on the same API server and the same cloud.
//
//	mcm-peer controller-manager <MCM's controller-manager flags>
//	    MCM's machine-controller-manager (cmd/machine-controller-manager/app): the MachineDeployment and
//	    MachineSet controllers and their safety controller.
//	mcm-peer version
//	    the MCM module version it was built from (`mcm bench machines --peer` labels its figures with it).
//	mcm-peer machine-controller --driver-endpoint ENDPOINT <MCM's machine-controller flags>
//	    MCM's provider machine controller (pkg/util/provider/app): Machines, Nodes, drain, orphan-VM safety,
//	    with a driver that calls a driver-protocol server (adapters/mcm-go/remote), for example
//	    `mcm driver serve inmemory --listen unix:///tmp/inmemory.sock`.
//
// Both accept MCM's flags unchanged (`mcm-peer SUBCOMMAND --help` lists them).
package main

import (
	goflag "flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"

	mcmapp "github.com/gardener/machine-controller-manager/cmd/machine-controller-manager/app"
	mcmoptions "github.com/gardener/machine-controller-manager/cmd/machine-controller-manager/app/options"
	_ "github.com/gardener/machine-controller-manager/pkg/util/client/metrics/prometheus" // client metrics, as MCM's mains register them
	mcapp "github.com/gardener/machine-controller-manager/pkg/util/provider/app"
	mcoptions "github.com/gardener/machine-controller-manager/pkg/util/provider/app/options"
	_ "github.com/gardener/machine-controller-manager/pkg/util/reflector/prometheus" // reflector metrics
	_ "github.com/gardener/machine-controller-manager/pkg/util/workqueue/prometheus" // workqueue metrics
	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"

	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/remote"
)

const usage = `usage:
  %[1]s controller-manager [MCM controller-manager flags]
      upstream MCM's MachineDeployment/MachineSet controllers
  %[1]s machine-controller --driver-endpoint ENDPOINT [MCM machine-controller flags]
      upstream MCM's machine controller, with a driver-protocol server as its driver
      (ENDPOINT: unix:///path or 127.0.0.1:PORT)
  %[1]s version
      the MCM module version this program was built from
'%[1]s SUBCOMMAND --help' lists a subcommand's flags.
`

func main() {
	prog := filepath.Base(os.Args[0])
	if len(os.Args) < 2 {
		fmt.Fprintf(os.Stderr, usage, prog)
		os.Exit(2)
	}
	sub, args := os.Args[1], os.Args[2:]
	var err error
	switch sub {
	case "controller-manager":
		err = controllerManager(prog+" "+sub, args)
	case "machine-controller":
		err = machineController(prog+" "+sub, args)
	case "version":
		fmt.Println(mcmVersion())
		return
	case "help", "-h", "--help":
		fmt.Fprintf(os.Stdout, usage, prog)
		return
	default:
		fmt.Fprintf(os.Stderr, "%s: unknown subcommand %q\n"+usage, prog, sub, prog)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", prog, sub, err)
		os.Exit(1)
	}
}

// parse parses a subcommand's flags as MCM's mains do (k8s.io/component-base's flag.InitFlags: word separators
// normalized, Go flags included), and starts klog. It exits on --help (status 0) and on a bad flag (status 2).
func parse(fs *pflag.FlagSet, args []string) {
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	fs.AddGoFlagSet(goflag.CommandLine)
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "%s: unexpected arguments %q\n", fs.Name(), fs.Args())
		os.Exit(2)
	}
	logs.InitLogs()
}

func controllerManager(name string, args []string) error {
	s := mcmoptions.NewMCMServer()
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	s.AddFlags(fs)
	parse(fs, args)
	defer logs.FlushLogs()
	// Runs until the process is stopped; returns only on bad options or kubeconfigs.
	return mcmapp.Run(s)
}

func machineController(name string, args []string) error {
	s := mcoptions.NewMCServer()
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	endpoint := fs.String("driver-endpoint", os.Getenv("MCM_DRIVER_ENDPOINT"),
		"the driver-protocol server that the machine controller uses as its driver: unix:///path or 127.0.0.1:PORT (default $MCM_DRIVER_ENDPOINT)")
	s.AddFlags(fs)
	parse(fs, args)
	defer logs.FlushLogs()
	if *endpoint == "" {
		return fmt.Errorf("--driver-endpoint is required (unix:///path or 127.0.0.1:PORT)")
	}
	d, err := remote.New(*endpoint)
	if err != nil {
		return fmt.Errorf("--driver-endpoint: %w", err)
	}
	return mcapp.Run(s, d)
}

// mcmVersion is the version of module github.com/gardener/machine-controller-manager linked into this program.
func mcmVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, dep := range info.Deps {
		if dep.Path == "github.com/gardener/machine-controller-manager" {
			return dep.Version
		}
	}
	return "unknown"
}
