package adapter_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	"golang.org/x/net/http2"
)

// What a non-Go client sees for Uninitialized, read with a bare HTTP/2 client: the trailers `grpc-status: 17`
// and `mcm-machine-code: Uninitialized` (a client that knows only codes 0-16 reads 17 as Unknown: hence the trailer).
func TestUninitializedOnTheWire(t *testing.T) {
	endpoint, path := socket(t)
	serve(t, endpoint, &fakeDriver{err: status.Error(codes.Uninitialized, "awaiting init")})
	transport := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, _, _ string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}
	t.Cleanup(transport.CloseIdleConnections) // before the server stops, which waits for connections to go
	client := &http.Client{Transport: transport}
	// An empty MachineRequest: one uncompressed gRPC frame of length 0.
	frame := make([]byte, 5)
	binary.BigEndian.PutUint32(frame[1:], 0)
	req, err := http.NewRequest(http.MethodPost, "http://localhost/mcm.driver.v1.Driver/GetMachineStatus", bytes.NewReader(frame))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/grpc")
	req.Header.Set("te", "trailers")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	// A gRPC error with no response message is "trailers-only": the status may come as headers or trailers.
	get := func(k string) string {
		if v := resp.Trailer.Get(k); v != "" {
			return v
		}
		return resp.Header.Get(k)
	}
	if got := get("grpc-status"); got != "17" {
		t.Errorf("grpc-status = %q, want 17", got)
	}
	if got := get("mcm-machine-code"); got != "Uninitialized" {
		t.Errorf("mcm-machine-code = %q, want Uninitialized", got)
	}
	if got := get("grpc-message"); got != "awaiting init" {
		t.Errorf("grpc-message = %q", got)
	}
}
