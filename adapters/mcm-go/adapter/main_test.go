package adapter_test

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/adapter"
)

// The test binary runs adapter.Main itself when asked to, so its exits can be checked from outside.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv("ADAPTER_TEST_MAIN_ARGS"); ok {
		os.Args = append([]string{"test-driver"}, strings.Fields(args)...)
		adapter.Main(&fakeDriver{})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runMain(t *testing.T, args string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{"ADAPTER_TEST_MAIN_ARGS=" + args}, env...)...)
	return cmd
}

func TestMainBadEndpoint(t *testing.T) {
	for _, tc := range []struct{ args, env, want string }{
		{args: "--listen 10.0.0.1:9000", want: "not a loopback address"},
		{args: "--listen https://127.0.0.1:9000", want: "unsupported scheme"},
		{args: "", want: "no endpoint to serve on"},
		{args: "", env: adapter.EnvListen + "=unix://relative.sock", want: "absolute path"},
	} {
		cmd := runMain(t, tc.args)
		cmd.Env = append(cmd.Env, adapter.EnvListen+"=")
		if tc.env != "" {
			cmd.Env = append(cmd.Env, tc.env)
		}
		out, err := cmd.CombinedOutput()
		exit, ok := err.(*exec.ExitError)
		if !ok || exit.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%q %q: exit %v, output %q; want status 2 and %q", tc.args, tc.env, err, out, tc.want)
		}
	}
}

func TestMainStopsOnSIGTERM(t *testing.T) {
	endpoint, path := socket(t)
	cmd := runMain(t, "", adapter.EnvListen+"="+endpoint)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitForServer(t, endpoint)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, out.String())
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("no exit after SIGTERM\n%s", out.String())
	}
	if _, err := os.Lstat(path); err == nil {
		t.Error("the socket is left after SIGTERM")
	}
}
